"""Running a study: stored runs loaded, missing ones trained, several at once, resumable.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch

from ..config import DEVICE_CHOICES, check_bool, check_choice, check_number
from ..results.experiments import ResultsStore, run_key, run_or_load
from ..tasks import profiles
from .configs import run_configs
from .runs import run_folder, train_run


def resolve_profile(profile: str = "auto") -> tuple[str, str]:
    """``(profile, why)``, as :func:`annotated_transformer.profiles.resolve_profile` decides for
    chapter 09's sizes: ``auto`` is ``smoke`` without CUDA, ``gpu`` on an A100/H100-class GPU,
    ``cpu`` on a smaller one (Colab's T4 or L4)."""
    return profiles.resolve_profile(profile, "ablation")


def resolve_jobs(jobs: int | str = "auto", runs: int = 1, device: str = "auto") -> int:
    """Runs at once: ``auto`` is 4 on a CUDA device (small runs share one GPU well), 1 on a CPU
    (one run already uses every core)."""
    if isinstance(jobs, str) and jobs.isdigit():
        jobs = int(jobs)
    if jobs == "auto":
        cuda = device != "cpu" and torch.cuda.is_available()
        jobs = 4 if cuda else 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} is not accepted: use 'auto' or a positive integer")
    return max(1, min(jobs, runs))


def check_parameters(
    study: str,
    task: str,
    seeds: int | str | Sequence[int],
    profile: str,
    overrides: dict[str, Any] | str | None,
    jobs: int | str,
    device: str,
    rerun: bool,
    budget_minutes: float,
) -> None:
    """Chapter 09's parameters, every one checked before any work: each bad one is a ValueError
    naming it and what is accepted (the study, the task, ``seeds >= 1`` or distinct seeds, the
    profile, the overrides through the one router, ``jobs``, the device, ``rerun``, a finite
    ``budget_minutes >= 0``)."""
    check_bool("rerun", rerun)
    check_choice("device", device, DEVICE_CHOICES)
    check_number("budget_minutes", budget_minutes, 0)
    resolve_jobs(jobs, 1, device)
    run_configs(study, task, seeds, resolve_profile(profile)[0], overrides)


def default_store(profile: str, root: str | os.PathLike = "results") -> ResultsStore:
    """``results/ablation`` for real profiles; ``results/smoke/ablation`` (git-ignored) for smoke."""
    root = Path(root)
    return ResultsStore(root / "smoke" / "ablation" if profile == "smoke" else root / "ablation")


def training_part(config: dict[str, Any]) -> dict[str, Any]:
    # What decides the numbers; the study and variant names only say why a run was made.
    return {
        key: value
        for key, value in config.items()
        if key not in ("study", "variant", "factors", "baseline")
    }


def _worker_setup(threads: int) -> None:
    torch.set_num_threads(threads)


def _run_in_worker(
    root: str, config: dict[str, Any], train: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    return run_or_load(ResultsStore(root), config, train, rerun=True)


def run_study(
    study: str = "heads",
    task: str = "multi30k",
    seeds: int | str | Sequence[int] = 3,
    profile: str = "auto",
    overrides: dict[str, Any] | str | None = None,
    jobs: int | str = "auto",
    rerun: bool = False,
    device: str = "auto",
    store: ResultsStore | None = None,
    budget_s: float | None = None,
    log: Callable[[str], None] | None = print,
    checkpoint_root: str | os.PathLike | None = None,
) -> list[dict[str, Any]]:
    """The records of every run of a study: stored ones loaded, missing ones trained and saved.

    ``jobs > 1`` trains that many runs at once in worker processes (``spawn``: safe with CUDA);
    each worker saves its record as soon as its run ends, so an interrupted study loses at most
    the runs under way, and calling again trains only what is missing. A run with the same
    training config stored by another study (a shared baseline) is reused, not trained again.
    Missing runs train seed by seed (seed 0 of every variant, then seed 1, ...), so a study
    stopped early compares every variant on the same seeds. ``budget_s``: start no new run after
    that many seconds (the rest stays missing, for the next call). ``rerun=True`` trains every
    run again. ``checkpoint_root``: each run under way keeps checkpoints in
    ``checkpoint_root/<run key>/`` (:func:`~.runs.train_run`), so a study stopped mid-run
    continues that run where it was when called again; the folder is deleted once the run's
    record is saved.

    From a script, call it under ``if __name__ == "__main__":``: spawned workers import the
    script again, and without the guard each would start a study of its own.
    """
    say = log or (lambda message: None)
    profile, why = resolve_profile(profile)
    configs = run_configs(study, task, seeds, profile, overrides)
    store = store or default_store(profile)
    started = time.perf_counter()
    records: dict[str, dict[str, Any]] = {}
    missing = []
    shared = {} if rerun else {run_key(training_part(r["config"])): r for r in store.records()}
    for config in configs:
        key = run_key(config)
        if store.exists(key) and not rerun:
            records[key] = store.load(key)
            continue
        twin = shared.get(run_key(training_part(config)))
        if twin is not None:  # the same run, stored under another study's name
            store.save(key, {**{k: twin[k] for k in twin if k != "key"}, "config": config})
            records[key] = store.load(key)
            continue
        missing.append(config)
    # Seed 0 of every variant first, then seed 1, ...: a study stopped early (budget_s, or a
    # stopped plan) holds whole replicates, every variant compared on the same seeds.
    missing.sort(key=lambda config: config["seed"])  # stable: the variants keep their order
    jobs = resolve_jobs(jobs, len(missing), device)
    say(
        f"study={study}, task={task}, {why}; {len(configs)} runs: {len(records)} stored, "
        f"{len(missing)} to train" + (f", {jobs} at a time" if missing else "")
    )

    train = functools.partial(train_run, device=device)
    if checkpoint_root is not None:
        train = functools.partial(train, checkpoint_root=checkpoint_root)

    def done(record: dict[str, Any]) -> None:
        records[record["key"]] = record
        if checkpoint_root is not None:  # the record is saved: its checkpoints are spent
            shutil.rmtree(run_folder(checkpoint_root, record["config"]), ignore_errors=True)
        wall = record["provenance"]["wall_time_s"]
        say(
            f"  [{len(records)}/{len(configs)}] {record['config']['variant']} seed "
            f"{record['config']['seed']}: {_headline(record)} ({wall:.1f} s)"
        )

    def over_budget() -> bool:
        return budget_s is not None and time.perf_counter() - started > budget_s

    failures: list[str] = []
    if jobs == 1:
        for config in missing:
            if over_budget():
                break
            done(run_or_load(store, config, train, True))
    elif missing:
        import multiprocessing

        threads = max(1, (os.cpu_count() or 1) // jobs)
        pending = list(missing)
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_setup,
            initargs=(threads,),
        ) as pool:
            running = set()
            while pending or running:
                while pending and len(running) < jobs and not over_budget():
                    running.add(pool.submit(_run_in_worker, str(store.root), pending.pop(0), train))
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        done(future.result())
                    except Exception as error:  # one failed run must not stop the others
                        failures.append(repr(error))
                        say(f"  FAILED: {error!r}")
    if failures:
        raise RuntimeError(
            f"{len(failures)} runs failed (the others are saved): " + "; ".join(failures)
        )
    left = len(configs) - len(records)
    if left:
        say(f"  {left} runs not trained (budget_s={budget_s} reached): call again to continue")
    return [records[run_key(config)] for config in configs if run_key(config) in records]


def _headline(record: dict[str, Any]) -> str:
    metrics = record["metrics"]
    if metrics.get("diverged"):
        return f"diverged at update {metrics['diverged_at']}"
    shown = [name for name in ("test_bleu", "test_loss", "valid_loss") if name in metrics]
    return ", ".join(f"{name} {metrics[name]:.3f}" for name in shown)
