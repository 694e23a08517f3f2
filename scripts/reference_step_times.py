"""The time of one training update of each Tiny Shakespeare lever at the reference size, side by
side in one process (chapter 08's probes): a lever that saves updates but costs more per update
gains less, or nothing, within a wall-time budget.

    python scripts/reference_step_times.py            # writes results/reference/probes/
    python scripts/reference_step_times.py --rounds 2  # a quick look, not stored

Each candidate is the reference probe of ``scripts/reference_probes.py`` (its model and
training settings); after two warm-up updates each, the candidates train one update in turn,
``--rounds`` times, and the median is kept. The optimizer's step alone (AdamW's against Muon's) is
timed the same way, on gradients drawn once. Run it on idle cores: anything beside it
changes the times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from reference_probes import BASE, PROBES  # a sibling script

from annotated_transformer.model import build_model
from annotated_transformer.results.probes import PROBES_DIRECTORY
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.train_settings import resolve_settings
from annotated_transformer.training.fit import run_configs
from annotated_transformer.training.provenance import code_version, provenance
from annotated_transformer.training.train import seed_everything
from annotated_transformer.training.trainer import Trainer

OUT = Path(__file__).resolve().parents[1] / PROBES_DIRECTORY
CANDIDATES = {
    "reference": "reference-schedule-2000",  # the reference recipe's model and optimizer
    "muon": "reference-muon-1600",
    "qk-norm": "reference-qk-norm-1600",
    "relu2": "reference-relu2-1600",
}


def trainer_for(task, name: str) -> Trainer:
    overrides = PROBES["tinyshakespeare"][name]
    sets = [
        f"{section}.{key}={json.dumps(value)}"
        for part in (BASE["tinyshakespeare"], overrides)
        for section, values in part.items()
        if section in ("data", "model", "train")
        for key, value in values.items()
    ]
    settings = resolve_settings("tinyshakespeare", {}, sets)
    train = {**settings["train"], "progress": False, "eval_every": None}
    model_config, train_config = run_configs(task, settings["model"], train)
    seed_everything(0)
    return Trainer(build_model(model_config), train_config, task.train, None)


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def with_gradients(trainer: Trainer) -> Trainer:
    """Gradients of a plausible size on every parameter (fit leaves none), for the optimizer."""
    generator = torch.Generator().manual_seed(0)
    for parameter in trainer.model.parameters():
        parameter.grad = 1e-3 * torch.randn(parameter.shape, generator=generator)
    return trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="timed updates per candidate")
    args = parser.parse_args()
    torch.set_num_threads(2)
    settings = resolve_settings(
        "tinyshakespeare",
        {},
        [
            f"data.{key}={json.dumps(value)}"
            for key, value in BASE["tinyshakespeare"]["data"].items()
        ],
    )
    task = build_task("tinyshakespeare", settings["data"], seed=0)
    code, started = code_version(), time.perf_counter()
    trainers = {label: trainer_for(task, name) for label, name in CANDIDATES.items()}
    for trainer in trainers.values():
        trainer.fit(steps=2)  # warm-up: allocations, autocast caches
    updates: dict[str, list[float]] = {label: [] for label in trainers}
    for _ in range(args.rounds):
        for label, trainer in trainers.items():
            updates[label].append(timed(lambda t=trainer: t.fit(steps=1)))
    steps: dict[str, list[float]] = {"reference": [], "muon": []}
    for label in steps:
        with_gradients(trainers[label])
    for _ in range(args.rounds):
        for label in steps:  # the optimizer alone, on the same gradients each time
            steps[label].append(timed(trainers[label].optimizer.step))
    record = {
        "what": "seconds per training update (fit(steps=1)) and per optimizer.step(), medians",
        "rounds": args.rounds,
        "candidates": CANDIDATES,
        "update_seconds": {label: statistics.median(v) for label, v in updates.items()},
        "optimizer_step_seconds": {label: statistics.median(v) for label, v in steps.items()},
        "samples": {"update": updates, "optimizer_step": steps},
        "provenance": provenance(0, time.perf_counter() - started, None, code),
    }
    print(json.dumps({k: record[k] for k in ("update_seconds", "optimizer_step_seconds")}))
    if args.rounds >= 6:
        OUT.mkdir(parents=True, exist_ok=True)
        path = OUT / "tinyshakespeare-step-times.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
