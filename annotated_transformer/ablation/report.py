"""The provenance line of every table, and the tables written as files.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results.experiments import ResultsStore
from ..training.checkpoint import atomic_write_text
from .statistics import factorial_effects, interaction, main_effects, rank, summarize
from .vaswani import vaswani_comparison

COMMITS_LISTED = 4  # more commits than this are counted, not listed


def describe(records: Sequence[dict[str, Any]]) -> str:
    """Which profile(s), device(s), commits and dates produced ``records``: the line that goes
    next to every table and figure. Smoke records are flagged as not being results. Up to
    :data:`COMMITS_LISTED` commits are listed ("+dirty": uncommitted changes); more are counted,
    with the first and last by date (each record names its own)."""
    if not records:
        return "no records"
    profiles = sorted({r["config"]["profile"] for r in records})
    devices = sorted({r["provenance"]["device"] for r in records})
    in_order = sorted(records, key=lambda r: r["provenance"]["date"])
    commits = list(
        dict.fromkeys(
            r["provenance"]["git_commit"][:8]
            + ("+dirty" if r["provenance"].get("git_dirty") else "")
            for r in in_order
        )
    )  # first use first
    if len(commits) <= COMMITS_LISTED:
        code = f"commit {', '.join(commits)}"
    else:
        dirty = sum(commit.endswith("+dirty") for commit in commits)
        code = (
            f"{len(commits)} commits ({dirty} with uncommitted changes), "
            f"{commits[0]} to {commits[-1]}"
        )
    dates = [r["provenance"]["date"][:10] for r in in_order]
    text = (
        f"{len(records)} runs; profile {', '.join(profiles)}; device {'; '.join(devices)}; "
        f"{code}; {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "")
    )
    if "smoke" in profiles:
        text = "SMOKE RUN: proves the pipeline works, not a result. " + text
    return text


def save_tables(
    records: Sequence[dict[str, Any]],
    store: ResultsStore,
    metric: str,
    higher_is_better: bool,
    suffix: str = "",
) -> dict[str, Path]:
    """Write the summary (CSV) and every table (JSON) of one study's records, atomically, as
    ``<store>/summaries/<task>-<study>-<profile>.{csv,json}`` (a subfolder: the store reads
    only records from its root). Every verdict in them is computed on Holm-adjusted p-values:
    the summary's against the baseline, a factorial's ``effects`` (main effects and two-way
    interactions) and the Table 3 comparison, each one family. ``suffix`` ends the name
    (``"-follow-up"``: a study's tables with the seeds added after its planned ones)."""
    config = records[0]["config"]
    name = f"{config['task']}-{config['study']}-{config['profile']}{suffix}"
    folder = store.root / "summaries"
    summary = summarize(records, metric)
    tables = {
        "metric": metric,
        "higher_is_better": higher_is_better,
        "provenance": describe(records),
        "summary": summary,
        "ranking": rank(summary, higher_is_better),
        "main_effects": main_effects(records, metric),
        "vaswani_comparison": vaswani_comparison(records, metric, higher_is_better),
    }
    factors = list(config["factors"])
    if len(factors) > 1:  # a factorial: its effects with intervals and Holm-adjusted tests
        try:
            tables["effects"] = factorial_effects(records, metric)
        except ValueError as error:  # an empty cell (a study under way), or 3-level factors
            tables["effects"] = str(error)
    tables["interactions"] = [
        {"first": a, "second": b, **interaction(records, metric, a, b)}
        for i, a in enumerate(factors)
        for b in factors[i + 1 :]
    ]
    columns: list[str] = []
    for row in summary:
        columns += [key for key in row if key not in columns]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(summary)
    paths = {
        "csv": atomic_write_text(folder / f"{name}.csv", text.getvalue()),
        "json": atomic_write_text(
            folder / f"{name}.json",
            json.dumps(_json_safe(tables), indent=1, allow_nan=False) + "\n",
        ),
    }
    return paths


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
