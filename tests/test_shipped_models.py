"""The reference models shipped in ``models/<task>/`` (chapter 08): each loads through the package
with no pickle, matches its stored record, and reproduces the metric stored with it on a slice of
its held-out split, so a code change that breaks a stored result fails here."""

import json
from pathlib import Path

import pytest

import annotated_transformer as at
from annotated_transformer.evaluation import score_translations, translate
from annotated_transformer.experiments import ResultsStore
from annotated_transformer.pretrained import load_pretrained
from annotated_transformer.tasks import build_task

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted(path.parent for path in (ROOT / "models").glob("*/config.json"))
STORE = ResultsStore(ROOT / "results")
MAX_BYTES = 25_000_000  # one shipped model; the budget is ~20 MB each, ~80 MB together


def metadata(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text(encoding="utf-8"))["metadata"]


def test_every_reference_record_ships_its_model_and_every_model_has_its_record():
    shipped = {metadata(directory)["record"] for directory in MODELS}
    records = {
        record["key"]
        for record in STORE.find(profile="reference")
        if record["config"]["model"].get("arch") != "encoder-only"  # PTB's leak twin: never shipped
    }
    assert shipped == records
    total = sum((directory / "model.safetensors").stat().st_size for directory in MODELS)
    assert total <= 4 * MAX_BYTES


@pytest.mark.parametrize("directory", MODELS, ids=[directory.name for directory in MODELS])
def test_a_shipped_model_reproduces_its_stored_metric(directory):
    assert (directory / "model.safetensors").stat().st_size <= MAX_BYTES
    shipped = load_pretrained(directory)
    check = shipped.metadata["check"]
    record = STORE.load(shipped.metadata["record"])
    config = record["config"]
    assert shipped.model.config.to_dict() == at.TransformerConfig(**config["model"]).to_dict()
    task = build_task(config["task"], config["data"], seed=config["seed"])
    batches = task.splits[check["split"]][: check["batches"]]
    loss = at.evaluate(shipped.model, batches, task.info.pad_id)["loss"]
    assert loss == pytest.approx(check["loss"], rel=1e-4)
    # the fp16 weights cost at most a hundredth of a nat against the trained fp32 model
    split, metrics = check["split"], record["metrics"]
    assert abs(metrics[f"shipped_{split}_loss"] - metrics[f"{split}_loss"]) < 0.01
    if "bleu_beam" in check:  # a translation model: its beam translations of the first sentences
        sentences = check["sentences"]
        beam = translate(
            shipped.model, task.splits[split], shipped.tokenizer, shipped.task,
            beam_size=4, alpha=0.6, limit=sentences,
        )  # fmt: skip
        bleu = score_translations(beam, task.references[split][:sentences]).bleu
        assert bleu == pytest.approx(check["bleu_beam"], abs=0.5)
        # and on the whole split, fp16 weights cost at most half a BLEU point
        assert abs(metrics[f"shipped_{split}_bleu_beam"] - metrics[f"{split}_bleu_beam"]) < 0.5
