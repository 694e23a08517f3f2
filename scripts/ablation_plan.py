"""Train what is missing of the course's reference ablation studies (``ablation.PLAN``), one
study after another, and write each study's summary tables as it finishes.

    python scripts/ablation_plan.py                      # every task of the plan, in order
    python scripts/ablation_plan.py tinyshakespeare      # one task's studies
    python scripts/ablation_plan.py multi30k --studies heads,positional

Each run is saved as it ends (``results/ablation/``), so the script may be stopped at any time
and started again: stored runs are loaded, not trained, and the run that was under way continues
from its last checkpoint (``runs/ablation/<run key>/``, saved every tenth of the run and deleted
once its record is saved), exactly as if it had not stopped. It trains exactly what
``papermill chapters/09_ablation.ipynb out.ipynb -p study S -p task T -p profile reference``
trains, seed 0 of every variant before seed 1, one run at a time with two threads, so that each
record's wall time is its own. (On a 2-core AMD EPYC, two Tiny Shakespeare runs at once with
one thread each gave 1.25x the throughput of one run with two threads: 76 s for two runs
against 48 s for one.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from annotated_transformer import ablation as ab
from annotated_transformer.training.run_lock import RunDirectoryLocked

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "runs" / "ablation"  # the runs under way (git-ignored)


def run_plan(tasks: list[str], studies: list[str] | None, profile: str, seeds: int | None) -> None:
    store = ab.default_store(profile, ROOT / "results")
    for task in tasks:
        metric, higher_is_better = ab.default_metric(task)
        for study in studies or ab.PLAN[task]:
            started = time.perf_counter()
            records = ab.run_study(
                study,
                task,
                seeds or ab.plan_seeds(task, study),  # the plan's: 3, more where spread demands
                profile,
                jobs=1,
                store=store,
                checkpoint_root=CHECKPOINTS,
            )
            # The primary tables read the seeds the plan fixed first; seeds added after them
            # (ab.PLAN_SEEDS) get tables of their own, a labelled follow-up.
            planned = [r for r in records if r["config"]["seed"] < ab.PLANNED_SEEDS]
            paths = ab.save_tables(planned, store, metric, higher_is_better)
            if len(planned) < len(records):
                ab.save_tables(records, store, metric, higher_is_better, suffix="-follow-up")
            trained = sum(r["provenance"]["wall_time_s"] for r in records)
            print(
                f"{task} {study}: {len(records)} runs, {trained / 60:.1f} min of training in "
                f"its records, {(time.perf_counter() - started) / 60:.1f} min now; "
                f"{paths['json'].relative_to(ROOT)}",
                flush=True,
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", help=f"of {', '.join(ab.PLAN)} (default: all)")
    parser.add_argument("--studies", help="studies separated by commas (default: the plan's)")
    parser.add_argument("--profile", default="reference")
    parser.add_argument(
        "--seeds", type=int, help="seeds of every study (default: the plan's, ab.PLAN_SEEDS)"
    )
    args = parser.parse_args(argv)
    tasks = args.tasks or list(ab.PLAN)
    for name in tasks:
        if name not in ab.PLAN:
            parser.error(f"unknown task {name!r}; the plan's tasks: {', '.join(ab.PLAN)}")
    if args.seeds is not None and args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: give a positive number of seeds (or leave it out)")
    studies = args.studies.split(",") if args.studies else None
    for name in studies or []:
        if name not in ab.study_names():
            parser.error(f"unknown study {name!r}; the studies: {', '.join(ab.study_names())}")
    torch.set_num_threads(2)
    try:
        run_plan(tasks, studies, args.profile, args.seeds)
    except (ab.RunFolderError, RunDirectoryLocked) as error:  # another plan, or a bad checkpoint
        print(f"ablation_plan: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
