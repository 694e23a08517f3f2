"""Vaswani et al. 2017, Table 3, and our trends beside the paper's, computed.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .configs import run_configs
from .statistics import holm, judge, variant_values

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
    "big": {
        "row": "big",
        "change": "N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps (base: 100K)",
        "ppl": 4.33,
        "bleu": 26.4,
    },
}
# The rows of Table 3 that the table3 study does not run, and why (every other row is one of its
# variants, under the row's name: see studies.TABLE3_LEVELS; table3_coverage prints both).
TABLE3_NOT_RUN: dict[str, str] = {
    "big": (
        "changes six things at once (N stays, d_model and d_ff x2, h=16, P_drop=0.3, 3x the "
        "updates): it measures a bigger budget, not one design choice; at our scale one run would "
        "cost about 12 base runs (4x the multiply-adds per update, 3x the updates)"
    ),
}
# Differences this small are the last printed digit of a single run: "no clear change".
PAPER_TOLERANCE = {"bleu": 0.1, "ppl": 0.03}
TABLE3_STUDY, TABLE3_BASELINE = "table3", "base"


@dataclass(frozen=True)
class Trend:
    """A comparison of Table 3 (``paper``: a row, against the base) and ours.

    Ours is measured by the ``table3`` study's variant of the same name against its ``base``;
    where that study is not stored, by ``ours`` against ``baseline`` in the one-factor ``study``
    (None: only the table3 study varies it), which holds the same run under another name.
    ``setting``: the config field the row changes and its value in the paper's base, for the
    rows whose base value a profile may not share (our reference translation base has no dropout
    and rotary positions); a baseline with another value does not measure the row's change.
    """

    name: str
    paper: str
    study: str | None = None
    baseline: str = ""
    ours: str = ""
    setting: tuple[str, Any] | None = None


TRENDS = (
    Trend("1 head instead of 8", "h=1", "heads", "8", "1"),
    Trend("4 heads instead of 8", "h=4", "heads", "8", "4"),
    Trend("16 heads instead of 8", "h=16", "heads", "8", "16"),
    Trend("32 heads instead of 8", "h=32"),
    Trend("a quarter of the key size d_k at fixed h", "d_k=16"),
    Trend("half the key size d_k at fixed h", "d_k=32"),
    Trend("fewer layers (paper 6 -> 2, ours 3 -> 1)", "N=2", "depth", "3", "1"),
    Trend("fewer layers (paper 6 -> 4, ours 3 -> 2)", "N=4", "depth", "3", "2"),
    Trend("more layers (paper 6 -> 8, ours 3 -> 4)", "N=8"),
    Trend("half the width d_model", "d_model=256"),
    Trend("twice the width d_model", "d_model=1024"),
    Trend("half the feed-forward width d_ff", "d_ff=1024"),
    Trend("twice the feed-forward width d_ff", "d_ff=4096"),
    Trend("no dropout", "P_drop=0.0", "dropout", "0.1", "0.0", ("model.dropout", 0.1)),
    Trend("more dropout (0.2)", "P_drop=0.2", "dropout", "0.1", "0.2", ("model.dropout", 0.1)),
    Trend(
        "no label smoothing",
        "eps_ls=0.0",
        "label_smoothing",
        "0.1",
        "0.0",
        ("train.label_smoothing", 0.1),
    ),
    Trend(
        "more label smoothing (0.2)",
        "eps_ls=0.2",
        "label_smoothing",
        "0.1",
        "0.2",
        ("train.label_smoothing", 0.1),
    ),
    Trend(
        "learned instead of sinusoidal positions",
        "learned",
        "positional",
        "sinusoidal",
        "learned",
        ("model.positional", "sinusoidal"),
    ),
)


_TREND_OF = {trend.paper: trend for trend in TRENDS}


def _config_value(config: dict[str, Any], field: str) -> Any:
    """``config``'s value of a dotted ``field`` (``"model.dropout"``); None where it has none."""
    section, _, key = field.partition(".")
    return config.get(section, {}).get(key)


def _base_differs(trend: Trend, base: Sequence[dict[str, Any]]) -> str:
    """Why the baseline records ``base`` do not measure ``trend``'s change (their value of the
    field it changes is not the paper's base value), or "" where they do or do not say."""
    if trend.setting is None:
        return ""
    field, paper = trend.setting
    values = {_config_value(record["config"], field) for record in base} - {None}
    if not values or values == {paper}:
        return ""
    ours = ", ".join(str(value) for value in sorted(values, key=str))
    return f"our base has {field.split('.')[1]}={ours}, the paper's {paper}"


def table3_coverage(task: str = "multi30k", profile: str = "cpu") -> list[dict[str, str]]:
    """Each row of Table 3 and what becomes of it on ``task`` at ``profile``: the paper's change,
    and ours (what the table3 study's variant of the same name changes in our base, resolved) or
    the reason it is not run. ``status``: ``run``, ``not run``, or ``same as base`` where our base
    already has the row's value (the reference translation base has no dropout: row D's
    P_drop=0.0 is our base itself)."""
    configs = {c["variant"]: c for c in run_configs(TABLE3_STUDY, task, 1, profile)}
    base = configs[TABLE3_BASELINE]
    rows = []
    for name, row in VASWANI_TABLE3.items():
        ours, status = TABLE3_NOT_RUN.get(name, ""), "not run"
        if name in configs:
            status, changed = "run", []
            for section in ("model", "train"):
                values, reference = configs[name][section], dict(base[section])
                if section == "model":  # the base leaves d_k to d_model / h
                    heads = reference["d_model"] // reference["n_heads"]
                    reference.setdefault("d_k", f"d_model / h = {heads}")
                changed += [
                    f"{key}={values[key]} (base {reference.get(key)})"
                    for key in values
                    if values[key] != reference.get(key)
                ]
            ours = ", ".join(changed) or "our base: " + ", ".join(
                f"{key}={base['model'][key]}" for key in ("n_layers", "d_model", "d_ff", "n_heads")
            )
            trend = _TREND_OF.get(name, Trend("", ""))
            differs = _base_differs(trend, [{"config": base}])
            elsewhere = (
                f"; the comparison reads the {trend.study} study's {trend.baseline} -> "
                f"{trend.ours} instead, where it is stored"
                if trend.study
                else ""
            )
            if differs and not changed:  # the row's value is already our base's
                status, ours = "same as base", f"none: {differs}{elsewhere}"
            elif differs:
                ours += f": not the row's change ({differs}){elsewhere}"
        rows.append(
            {
                "paper": name,
                "table3_row": row["row"],
                "paper_change": row["change"],
                "status": status,
                "ours": ours,
            }
        )
    return rows


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
    while the paper saw a change), ``cannot judge`` (fewer than 2 runs), ``not comparable`` (the
    stored runs' base does not have the paper's base value of what the row changes, e.g. no
    dropout where the paper's base has 0.1, and no other stored study measures the change from
    that value) or ``not run``.

    Ours is a Welch test against the baseline; the p-values of all the trends measured are
    adjusted together by Holm (``p_holm``, one family: the table), and a difference counts only
    when ``p_holm < alpha``. ``ours_low`` and ``ours_high``: the ``1 - alpha`` interval of our
    difference. BLEU metrics are compared with the paper's BLEU, losses with its perplexity (a
    loss is the log of a perplexity, so they move together).
    """
    measure = "bleu" if "bleu" in metric else "ppl"
    by_study: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_study.setdefault(record["config"]["study"], []).append(record)
    rows = []
    for trend in TRENDS:
        change, paper = paper_direction(trend, measure)
        row: dict[str, Any] = {
            "trend": trend.name,
            "table3_row": VASWANI_TABLE3[trend.paper]["row"],
            "paper_change": change,
            "paper": paper,
        }
        sources = [(TABLE3_STUDY, TABLE3_BASELINE, trend.paper)]
        if trend.study:
            sources.append((trend.study, trend.baseline, trend.ours))
        differs = ""
        for study, baseline, ours in sources:
            records_of = by_study.get(study, [])
            values = variant_values(records_of, metric)
            base, variant = values.get(baseline, []), values.get(ours, [])
            if base and variant:
                reason = _base_differs(
                    trend, [r for r in records_of if r["config"]["variant"] == baseline]
                )
                if not reason:
                    break
                differs, base, variant = differs or reason, [], []
        if not base or not variant:
            row.update({"study": "", "ours_change": math.nan, "p_value": math.nan})
            if differs:  # stored, but against a base that does not have the paper's value
                row.update({"ours": "not comparable", "verdict": "not comparable"})
                row["note"] = differs + (f": run -p study {trend.study}" if trend.study else "")
            else:
                row.update({"ours": "not run", "verdict": "not run"})
                row["note"] = "run: -p study table3"
            rows.append(row)
            continue
        verdict = judge(base, variant, alpha)
        row.update(
            {
                "study": study,
                "ours_change": verdict["difference"],
                "ours_low": verdict["low"],
                "ours_high": verdict["high"],
                "p_value": verdict["p_value"],
            }
        )
        rows.append(row)
    judged = [row for row in rows if "verdict" not in row and not math.isnan(row["p_value"])]
    for row, adjusted in zip(judged, holm([row["p_value"] for row in judged]), strict=True):
        row["p_holm"] = adjusted
    for row in rows:
        if "verdict" in row:
            continue
        if math.isnan(row["p_value"]):
            row.update({"ours": "cannot judge", "verdict": "cannot judge"})
            row["note"] = "fewer than 2 runs on a side"
            continue
        difference, paper = row["ours_change"], row["paper"]
        direction = (
            "same"
            if row["p_holm"] >= alpha
            else ("better" if (difference > 0) == higher_is_better else "worse")
        )
        row["ours"] = direction
        if direction == "same":
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
    return rows
