"""The three-seed study of the levers a reference recipe adopted (issue 43; chapter 08): the recipe
of the `reference` profile, and the recipe with one lever set back, trained at seeds fixed before
any of it ran by ``scripts/reference_probes.py study TASK`` into ``results/reference/levers/``,
and read on the validation split::

    runs = read_lever_study(ROOT / LEVER_STUDY_DIRECTORY, "tinyshakespeare")
    rows = lever_study_rows(runs)  # what each lever is worth, with intervals and Holm's verdicts
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..results.probes import evaluations
from .statistics import detectable_difference, holm_verdicts, judge, standardized_paired

# The three-seed study of the levers a task's reference recipe adopted (issue 43), fixed before any
# of it has run. Each arm is the recipe of the `reference` profile with the overrides given (the
# recipe itself: none), trained by ``scripts/reference_probes.py study TASK`` at every seed of
# LEVER_STUDY_SEEDS to the end of its cosine, into ``results/reference/levers/``, and read on the
# validation split. Tiny Shakespeare: Muon and the squared ReLU each set back to the first recipe's
# choice (AdamW, GELU). Every run keeps the weights of its last four evaluations and scores their
# mean beside its last weights, so the averaging lever is read off the same runs at no cost. The
# schedule is not an arm: its alternative, the first recipe's 3500 updates, does not fit the
# 90-minute budget of a run.
LEVER_STUDY: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "tinyshakespeare": {
        "recipe": {},
        "adamw": {"train": {"optimizer": "adamw"}},
        "gelu": {"model": {"activation": "gelu"}},
    },
}
LEVER_STUDY_SEEDS = (0, 1, 2)
LEVER_STUDY_DIRECTORY = Path("results") / "reference" / "levers"  # under the checkout


def lever_study_runs(task: str) -> list[tuple[str, int]]:
    """``(arm, seed)`` of every run of ``task``'s lever study, in the order they are trained: all
    arms of a seed before the next seed, so the first replicate is complete first. An unknown task
    is refused with the studied ones."""
    if task not in LEVER_STUDY:
        raise ValueError(f"task={task!r} has no lever study; studied: {', '.join(LEVER_STUDY)}")
    return [(arm, seed) for seed in LEVER_STUDY_SEEDS for arm in LEVER_STUDY[task]]


def read_lever_study(directory: str | os.PathLike, task: str) -> dict[str, dict[int, dict]]:
    """The stored runs of ``task``'s lever study in ``directory`` (``results/reference/levers``):
    ``{arm: {seed: record}}``, only the arms and seeds of :data:`LEVER_STUDY` (a study's plan is
    fixed: a run outside it is no part of the analysis)."""
    found: dict[str, dict[int, dict]] = {}
    for arm, seed in lever_study_runs(task):
        path = Path(directory) / f"{task}-{arm}-seed{seed}.json"
        if path.is_file():
            found.setdefault(arm, {})[seed] = json.loads(path.read_text(encoding="utf-8"))
    return found


def lever_study_rows(runs: dict[str, dict[int, dict]]) -> list[dict[str, Any]]:
    """What each lever of a study is worth, on the validation split: one row per arm that sets a
    lever back (its runs against the recipe's, Welch's test on the loss of the mean of the last
    evaluations' weights), and one row for the averaging (paired within the recipe's runs: the
    mean's loss against the best single evaluation's, which a recipe without averaging would
    keep). Each row: ``lever``, ``runs`` (per side), ``difference`` (removing the lever minus
    keeping it, in nats: positive means the lever helps), its 95 % ``low``/``high``, ``p_value``,
    ``p_holm`` and ``verdict`` over the family of rows, and ``detectable`` (the smallest
    difference the runs could find at 80 % power). Fewer than two runs a side: "cannot judge"."""
    from statistics import mean

    from scipy import stats

    def averaged(record: dict) -> float:
        return record["averaged"]["valid_loss"]

    recipe = [averaged(record) for record in runs.get("recipe", {}).values()]
    rows = []
    for arm, records in runs.items():
        if arm == "recipe":
            continue
        without = [averaged(record) for record in records.values()]
        row = {"lever": arm, "runs": (len(recipe), len(without)), **judge(recipe, without)}
        row["detectable"] = detectable_difference(recipe, without)
        rows.append(row)
    recipe_runs = runs.get("recipe", {}).values()
    best = [min(loss for _, loss in evaluations(record["history"])) for record in recipe_runs]
    gains = [b - a for b, a in zip(best, recipe, strict=True)]  # best evaluation minus the mean
    row: dict[str, Any] = {"lever": "averaging", "runs": (len(gains), len(gains))}
    if len(gains) >= 2:
        test = stats.ttest_1samp(gains, 0.0)
        interval = test.confidence_interval(0.95)
        row |= {"difference": mean(gains), "low": float(interval.low), "high": float(interval.high)}
        row |= {"p_value": float(test.pvalue), "verdict": "within noise"}
        spread = stats.tstd(gains)
        row["detectable"] = standardized_paired(len(gains)) * spread if spread > 0 else math.nan
    else:
        row |= {"difference": mean(gains) if gains else math.nan, "verdict": "cannot judge"}
    rows.append(row)
    holm_verdicts(rows)  # one family: every lever of the study
    return rows
