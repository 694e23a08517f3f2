"""Vaswani et al. 2017, Table 3, and our trends beside the paper's, computed.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .statistics import judge, variant_values

# English-German newstest2013 (dev): per-wordpiece perplexity and BLEU (beam search, no checkpoint
# averaging). One training run per row. Rows not listed change nothing else of the base model.
VASWANI_TABLE3: dict[str, dict[str, Any]] = {
    "base": {
        "row": "base",
        "change": "N=6, d_model=512, d_ff=2048, h=8, d_k=64, P_drop=0.1, eps_ls=0.1",
        "ppl": 4.92,
        "bleu": 25.8,
    },
    "h=1": {"row": "A", "change": "h=1, d_k=d_v=512", "ppl": 5.29, "bleu": 24.9},
    "h=4": {"row": "A", "change": "h=4, d_k=d_v=128", "ppl": 5.00, "bleu": 25.5},
    "h=16": {"row": "A", "change": "h=16, d_k=d_v=32", "ppl": 4.91, "bleu": 25.8},
    "h=32": {"row": "A", "change": "h=32, d_k=d_v=16", "ppl": 5.01, "bleu": 25.4},
    "d_k=16": {"row": "B", "change": "d_k=16", "ppl": 5.16, "bleu": 25.1},
    "d_k=32": {"row": "B", "change": "d_k=32", "ppl": 5.01, "bleu": 25.4},
    "N=2": {"row": "C", "change": "N=2", "ppl": 6.11, "bleu": 23.7},
    "N=4": {"row": "C", "change": "N=4", "ppl": 5.19, "bleu": 25.3},
    "N=8": {"row": "C", "change": "N=8", "ppl": 4.88, "bleu": 25.5},
    "d_model=256": {"row": "C", "change": "d_model=256, d_k=d_v=32", "ppl": 5.75, "bleu": 24.5},
    "d_model=1024": {"row": "C", "change": "d_model=1024, d_k=d_v=128", "ppl": 4.66, "bleu": 26.0},
    "d_ff=1024": {"row": "C", "change": "d_ff=1024", "ppl": 5.12, "bleu": 25.4},
    "d_ff=4096": {"row": "C", "change": "d_ff=4096", "ppl": 4.75, "bleu": 26.2},
    "P_drop=0.0": {"row": "D", "change": "P_drop=0.0", "ppl": 5.77, "bleu": 24.6},
    "P_drop=0.2": {"row": "D", "change": "P_drop=0.2", "ppl": 4.95, "bleu": 25.5},
    "eps_ls=0.0": {"row": "D", "change": "eps_ls=0.0", "ppl": 4.67, "bleu": 25.3},
    "eps_ls=0.2": {"row": "D", "change": "eps_ls=0.2", "ppl": 5.47, "bleu": 25.7},
    "learned": {"row": "E", "change": "learned positional embedding", "ppl": 4.92, "bleu": 25.7},
}
# Differences this small are the last printed digit of a single run: "no clear change".
PAPER_TOLERANCE = {"bleu": 0.1, "ppl": 0.03}


@dataclass(frozen=True)
class Trend:
    """A comparison of Table 3 (``paper``: a row, against the base) and ours (``ours``: a variant
    of ``study``, against ``baseline``); ``study=None``: not measurable with this model."""

    name: str
    paper: str
    study: str | None
    baseline: str = ""
    ours: str = ""
    note: str = ""


TRENDS = (
    Trend("1 head instead of 8", "h=1", "heads", "8", "1"),
    Trend("4 heads instead of 8", "h=4", "heads", "8", "4"),
    Trend("16 heads instead of 8", "h=16", "heads", "8", "16"),
    Trend(
        "smaller key size d_k at fixed h",
        "d_k=16",
        None,
        note="not measured: our d_k is always d_model / h (the heads study changes both)",
    ),
    Trend("fewer layers (paper 6 -> 2, ours 3 -> 1)", "N=2", "depth", "3", "1"),
    Trend("fewer layers (paper 6 -> 4, ours 3 -> 2)", "N=4", "depth", "3", "2"),
    Trend("more layers (paper 6 -> 8, ours 3 -> 6)", "N=8", "depth", "3", "6"),
    Trend("half the width", "d_model=256", "width", "1x", "0.5x"),
    Trend("twice the width", "d_model=1024", "width", "1x", "2x"),
    Trend("no dropout", "P_drop=0.0", "dropout", "0.1", "0.0"),
    Trend("more dropout (0.2)", "P_drop=0.2", "dropout", "0.1", "0.2"),
    Trend("no label smoothing", "eps_ls=0.0", "label_smoothing", "0.1", "0.0"),
    Trend("more label smoothing (0.2)", "eps_ls=0.2", "label_smoothing", "0.1", "0.2"),
    Trend(
        "learned instead of sinusoidal positions", "learned", "positional", "sinusoidal", "learned"
    ),
)


def paper_direction(trend: Trend, measure: str) -> tuple[float, str]:
    """``(change, direction)`` of Table 3's ``measure`` (``"bleu"`` or ``"ppl"``) from the base to
    the trend's row; the direction is in quality: better, worse, or same (within the tolerance)."""
    change = VASWANI_TABLE3[trend.paper][measure] - VASWANI_TABLE3["base"][measure]
    if abs(change) <= PAPER_TOLERANCE[measure] + 1e-9:
        return change, "same"
    better = change > 0 if measure == "bleu" else change < 0
    return change, "better" if better else "worse"


def vaswani_comparison(
    records: Sequence[dict[str, Any]],
    metric: str,
    higher_is_better: bool,
    alpha: float = 0.05,
) -> list[dict[str, Any]]:
    """For each trend of Table 3: the paper's direction, ours (from ``records``, any studies),
    and the verdict: ``agrees``, ``disagrees``, ``within noise`` (ours is not beyond seed noise
    while the paper saw a change), ``cannot judge`` (fewer than 2 runs), or ``not run``.

    BLEU metrics are compared with the paper's BLEU, losses with its perplexity (a loss is the
    log of a perplexity, so they move together).
    """
    measure = "bleu" if "bleu" in metric else "ppl"
    by_study: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_study.setdefault(record["config"]["study"], []).append(record)
    rows = []
    for trend in TRENDS:
        change, paper = paper_direction(trend, measure)
        row = {
            "trend": trend.name,
            "table3_row": VASWANI_TABLE3[trend.paper]["row"],
            "paper_change": change,
            "paper": paper,
        }
        values = variant_values(by_study.get(trend.study, []), metric) if trend.study else {}
        base, ours = values.get(trend.baseline, []), values.get(trend.ours, [])
        if not base or not ours:
            row.update({"ours_change": math.nan, "p_value": math.nan, "ours": "not run"})
            row["verdict"] = "not run"
            row["note"] = trend.note or f"run: -p study {trend.study}"
            rows.append(row)
            continue
        verdict = judge(base, ours, alpha)
        difference = verdict["difference"]
        direction = (
            "same"
            if verdict["verdict"] != "differs"
            else ("better" if (difference > 0) == higher_is_better else "worse")
        )
        row.update({"ours_change": difference, "p_value": verdict["p_value"], "ours": direction})
        if verdict["verdict"] == "cannot judge":
            row["verdict"], row["note"] = "cannot judge", "fewer than 2 runs on a side"
        elif direction == "same":
            agree = paper == "same"
            row["verdict"] = "agrees" if agree else "within noise"
            row["note"] = (
                "no clear change in either" if agree else "our difference is within seed noise"
            )
        else:
            row["verdict"] = "agrees" if direction == paper else "disagrees"
            row["note"] = (
                "the paper saw no clear change"
                if paper == "same"
                else f"paper {paper}, ours {direction}"
            )
        rows.append(row)
    return rows
