"""The reference models shipped in ``models/<task>/`` (chapter 08): each loads through the package
with no pickle, matches its stored record, and reproduces the metric stored with it on a slice of
its held-out split, so a code change that breaks a stored result fails here."""

import functools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, load_model

import annotated_transformer as at
from annotated_transformer.model import build_model
from annotated_transformer.results.evaluation import score_translations, translate
from annotated_transformer.results.experiments import ResultsStore
from annotated_transformer.results.pretrained import SHIP_MAX_BYTES, as_stored, load_pretrained
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.task_options import canonical_task

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(path.parent for path in (ROOT / "models").glob("*/config.json"))
STORE = ResultsStore(ROOT / "results")
MAX_BYTES = SHIP_MAX_BYTES  # one shipped model; the budget is ~20 MB each, ~80 MB together


@functools.cache
def task_of(record_key: str):
    """The task of a stored record, built as its run built it (once per test session)."""
    config = STORE.load(record_key)["config"]
    return build_task(config["task"], config["data"], seed=config["seed"])


def metadata(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text(encoding="utf-8"))["metadata"]


def test_each_tasks_newest_reference_record_ships_its_model_and_every_model_has_its_record():
    shipped = {metadata(directory)["record"] for directory in MODELS}
    newest = {}  # task: the key of its newest reference record; older ones stay as they ran
    for record in STORE.find(profile="reference"):  # newest first
        if record["config"]["model"].get("arch") != "encoder-only":  # PTB's leak twin: not shipped
            newest.setdefault(canonical_task(record["config"]["task"]), record["key"])
    assert shipped == set(newest.values())
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
    task = task_of(shipped.metadata["record"])
    batches = task.splits[check["split"]][: check["batches"]]
    loss = at.evaluate(shipped.model, batches, task.info.pad_id)["loss"]
    assert loss == pytest.approx(check["loss"], rel=1e-4)
    # the stored weights (fp16, or int8 for a larger model) cost at most a hundredth of a nat
    # against the trained fp32 model
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
        # and on the whole split, the stored weights cost at most half a BLEU point
        assert abs(metrics[f"shipped_{split}_bleu_beam"] - metrics[f"{split}_bleu_beam"]) < 0.5


@pytest.mark.parametrize("directory", MODELS, ids=[directory.name for directory in MODELS])
def test_a_shipped_model_loads_the_numbers_in_its_file(directory):
    """load_pretrained gives back, bit for bit, the numbers in the file: an int8 matrix times its
    rows' scales, a float tensor as safetensors' own load_model reads it, tied weights included."""
    shipped = load_pretrained(directory).model
    state, stored = shipped.state_dict(), load_file(directory / "model.safetensors")
    scales = {f"{name}.scale" for name, tensor in stored.items() if tensor.dtype == torch.int8}
    for name, tensor in stored.items():
        if name in scales:
            continue
        if tensor.dtype == torch.int8:  # [R, C] values, [R] scales
            tensor = tensor.float() * stored[f"{name}.scale"].float()[:, None]
        assert torch.equal(state[name], tensor.float()), name
    if all(tensor.is_floating_point() for tensor in stored.values()):
        reference = build_model(shipped.config)
        load_model(reference, directory / "model.safetensors")
        for (name, a), (_, b) in zip(reference.state_dict().items(), state.items(), strict=True):
            assert torch.equal(a, b), name


@pytest.mark.parametrize("directory", MODELS, ids=[directory.name for directory in MODELS])
def test_a_shipped_model_stored_as_int8_keeps_its_loss(directory):
    """Weight-only int8, the storage of a model whose fp16 file is over the budget, costs a
    trained model little: on each shipped model, its check slice moves by under a hundredth
    of a nat."""
    shipped = load_pretrained(directory)
    check = shipped.metadata["check"]
    task = task_of(shipped.metadata["record"])
    batches = task.splits[check["split"]][: check["batches"]]
    loss = at.evaluate(as_stored(shipped.model, "int8"), batches, task.info.pad_id)["loss"]
    assert abs(loss - check["loss"]) < 0.01
