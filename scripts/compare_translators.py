"""Two shipped translators of one task on the same sentences: each decodes the split with beam
search, and the BLEU difference gets a paired bootstrap interval (chapter 08's comparison of a
task's reference runs; metrics.bleu_difference).

    python scripts/compare_translators.py FIRST SECOND         # two model folders, test split
    python scripts/compare_translators.py FIRST SECOND --split valid

Stores ``results/reference/<task>-translators-<first record>-<second record>.json``, with
``-valid`` before ``.json`` for the validation split (``results.probes.comparison_path``): the runs
the two models came from, each one's translations, BLEU, chrF and the sacreBLEU signature, the
difference (second minus first) with its 95 % interval, and the provenance. Two threads, fp32.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from annotated_transformer.metrics import bleu_difference
from annotated_transformer.results.decoding import PAPER, paper_beam_scores
from annotated_transformer.results.experiments import ResultsStore
from annotated_transformer.results.pretrained import is_pretrained, load_pretrained
from annotated_transformer.results.probes import PROBES_DIRECTORY, comparison_path
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.task_options import TaskInfo
from annotated_transformer.training.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "reference"
BEAM, ALPHA = PAPER  # chapter 08's setting (Vaswani et al., section 6.1)
RESAMPLES = 1000  # of the sentences, for the paired bootstrap


CANDIDATES = ROOT / PROBES_DIRECTORY  # candidate runs, stored but not shipped


def run_record(key: str) -> dict | None:
    """The stored record of run ``key``: a result in ``results/``, or a candidate's record in
    ``results/reference/probes/`` (a run whose model was not shipped); None where neither is."""
    store = ResultsStore(ROOT / "results")
    if store.path(key).is_file():
        return store.load(key)
    for path in sorted(CANDIDATES.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("key") == key:
            return record
    return None


def decode(shipped: Any, split: str, config: dict) -> dict:
    """A shipped model (``load_pretrained``) decoding ``split`` of the task its run (``config``)
    trained on."""
    key = shipped.metadata["record"]
    task = build_task(config["task"], config["data"], seed=config["seed"])
    info = TaskInfo.from_dict(shipped.task)
    references = task.references[split]
    scores = paper_beam_scores(
        shipped.model, task.splits[split], shipped.tokenizer, info, references
    )
    return {"record": key, "task": config["task"], "references": references, **scores}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a shipped model folder (models/<task>)")
    parser.add_argument("second", type=Path, help="another one, of the same task")
    parser.add_argument("--split", default="test", help="the split both decode (default: test)")
    args = parser.parse_args(argv)
    for folder in (args.first, args.second):
        if not is_pretrained(folder):
            parser.error(f"{folder} is not a shipped model folder (config.json, model.safetensors)")
    models, configs = [], []
    for folder in (args.first, args.second):  # every record found before any decoding
        models.append(load_pretrained(folder))
        key = models[-1].metadata.get("record")
        record = run_record(key) if key else None
        if record is None:
            parser.error(
                f"{folder}: the run its model came from ({key or 'not named in its config'}) is "
                f"stored neither in results/ nor in results/reference/probes/; store that run's "
                "record (a candidate's under results/reference/probes/) and run this again"
            )
        configs.append(record["config"])
    torch.set_num_threads(2)
    started = time.perf_counter()
    first, second = (
        decode(shipped, args.split, config) for shipped, config in zip(models, configs, strict=True)
    )
    if first["task"] != second["task"] or first["references"] != second["references"]:
        parser.error("the two models were trained on different tasks or splits: nothing to pair")
    difference = bleu_difference(
        first["translations"], second["translations"], first["references"], resamples=RESAMPLES
    )
    record = {
        "task": first["task"],
        "split": args.split,
        "beam": BEAM,
        "alpha": ALPHA,
        "sentences": len(first["references"]),
        "systems": [
            {
                name: system[name]
                for name in system
                if name not in ("task", "references", "beam", "alpha")
            }
            for system in (first, second)
        ],
        "difference": {
            "estimate": difference.estimate,
            "low": difference.low,
            "high": difference.high,
            "confidence": difference.confidence,
            "resamples": RESAMPLES,
        },
        "provenance": {**provenance(0, time.perf_counter() - started), "precision": "fp32"},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = comparison_path(OUT, first["task"], first["record"], second["record"], args.split)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"{first['record']}: BLEU {first['bleu']:.2f}; {second['record']}: BLEU "
        f"{second['bleu']:.2f}; difference {difference}; stored in {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
