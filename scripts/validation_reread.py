"""Train again, scored on the validation split, the Multi30k cells behind the two choices that
built the ablation base: rotary over ALiBi positions, and the token vectors' size at the start.

    python scripts/validation_reread.py            # what is missing of the 9 runs, then a summary

The studies that made those choices (``positional``, ``token_rms_rope``) were read on test BLEU,
before ``train_run`` decoded the validation split too. Their stored records share their keys with
these runs (the training config is the same), so these go to a store of their own,
``results/ablation-valid/``: each record holds ``valid_bleu`` beside ``test_bleu``. Chapter 09
reads the choice on validation and reports test. Seeds 0-2, as the plan fixed for both studies
(:data:`~annotated_transformer.ablation.PLANNED_SEEDS`). Stoppable at any time, as
``ablation_plan.py`` is: stored runs load, the run under way continues from its checkpoint.
"""

from __future__ import annotations

import functools
import shutil
import sys
import time
from pathlib import Path

import torch

from annotated_transformer import ablation as ab
from annotated_transformer.results.experiments import ResultsStore, run_key, run_or_load
from annotated_transformer.training.run_lock import RunDirectoryLocked

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "results" / "ablation-valid"
CHECKPOINTS = ROOT / "runs" / "ablation-valid"
TASK, PROFILE = "multi30k", "reference"
# (study, variant): the rotary base with tokens by init and at rms 1, and ALiBi (by init) beside it
CELLS = (
    ("token_rms_rope", "rope, by init"),
    ("token_rms_rope", "rope, rms 1"),
    ("positional", "alibi"),
)


def configs() -> list[dict]:
    """The runs, seed 0 of every cell first (a stopped re-read compares whole replicates)."""
    chosen = [
        config
        for study, variant in CELLS
        for config in ab.run_configs(study, TASK, ab.PLANNED_SEEDS, PROFILE)
        if config["variant"] == variant
    ]
    assert len(chosen) == len(CELLS) * ab.PLANNED_SEEDS, "a cell's name changed in the studies"
    return sorted(chosen, key=lambda config: config["seed"])


def main() -> int:
    torch.set_num_threads(2)
    store = ResultsStore(STORE)
    train = functools.partial(ab.train_run, checkpoint_root=CHECKPOINTS)
    try:
        for config in configs():
            started = time.perf_counter()
            record = run_or_load(store, config, train)
            shutil.rmtree(ab.run_folder(CHECKPOINTS, config), ignore_errors=True)
            metrics = record["metrics"]
            print(
                f"{config['study']} / {config['variant']} seed {config['seed']} "
                f"({run_key(config)}): valid {metrics['valid_bleu']:.2f}, test "
                f"{metrics['test_bleu']:.2f} BLEU ({time.perf_counter() - started:.0f} s now)",
                flush=True,
            )
    except (ab.RunFolderError, RunDirectoryLocked) as error:
        print(f"validation_reread: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
