"""Analysis of records: summaries, intervals, Welch's test, Holm's correction, main effects,
interactions. The t distribution, Welch's test and Holm's correction come from kept libraries
(``scipy.stats``, ``statsmodels``); this module decides what is compared with what.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import mean, stdev
from typing import Any

from ..metrics import mean_interval
from ..results.experiments import run_key
from .runner import training_part
from .studies import task_kind


def default_metric(task: str) -> tuple[str, bool]:
    """``(metric, higher_is_better)``: test BLEU for translation, validation loss for an LM."""
    return ("test_bleu", True) if task_kind(task) == "translation" else ("valid_loss", False)


def is_usable(record: dict[str, Any], metric: str) -> bool:
    """Whether the run ``record`` counts in a study's statistics: its ``metric`` is a finite
    number and the run did not diverge (a diverged run stores no metric; records are written
    only finite, so the other checks guard records made by hand)."""
    value = record["metrics"].get(metric)
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and not record["metrics"].get("diverged")
    )


def usable_runs(records: Iterable[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """The runs of ``records`` that count in a study's statistics (:func:`is_usable`), in order:
    the one filter that every summary, effect and verdict reads."""
    return [record for record in records if is_usable(record, metric)]


def variant_values(records: Iterable[dict[str, Any]], metric: str) -> dict[str, list[float]]:
    """Variant label -> the metric of each of its usable runs (:func:`is_usable`, in record
    order); a variant with none maps to an empty list."""
    values: dict[str, list[float]] = {}
    for record in records:
        runs = values.setdefault(record["config"]["variant"], [])
        if is_usable(record, metric):
            runs.append(float(record["metrics"][metric]))
    return values


def welch_test(
    first: Sequence[float], second: Sequence[float], confidence: float = 0.95
) -> dict[str, float]:
    """Welch's t-test of ``mean(second) - mean(first)``, two-sided, from
    ``scipy.stats.ttest_ind(second, first, equal_var=False)``: ``t``, the Welch-Satterthwaite
    degrees of freedom ``df`` (a fractional number), the p-value of t with ``df`` degrees, and
    the ``confidence`` interval of the difference (``low``, ``high``): the effect size in the
    metric's own units.

    Two sides without spread have an infinite t (p = 0) when their means differ, and t = 0
    (p = 1) when they do not; their interval is the difference itself.
    """
    from scipy import stats

    if len(first) < 2 or len(second) < 2:
        raise ValueError("Welch's test needs at least 2 values on each side")
    difference = mean(second) - mean(first)
    if stdev(first) == 0 and stdev(second) == 0:
        return {
            "difference": difference,
            "t": math.copysign(math.inf, difference) if difference else 0.0,
            "df": math.inf,
            "p_value": 0.0 if difference else 1.0,
            "low": difference,
            "high": difference,
        }
    result = stats.ttest_ind(second, first, equal_var=False)
    interval = result.confidence_interval(confidence)
    return {
        "difference": difference,
        "t": float(result.statistic),
        "df": float(result.df),
        "p_value": float(result.pvalue),
        "low": float(interval.low),
        "high": float(interval.high),
    }


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (Holm 1979), from
    ``statsmodels.stats.multitest.multipletests(method="holm")``.

    Call a difference real when its adjusted value is below ``alpha`` (say 0.05), and the
    chance of calling *any* true null difference of the family real stays below ``alpha``.
    Sorted ascending, the ``i``-th smallest of ``m`` values becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``. NaN entries (a comparison that could not be
    made) stay NaN and do not count towards ``m``.
    """
    from statsmodels.stats.multitest import multipletests

    values = [float(p) for p in p_values]
    for p in values:
        if not (math.isnan(p) or 0 <= p <= 1):
            raise ValueError(f"p-values must be in [0, 1] (or NaN), got {p}")
    finite = [index for index, p in enumerate(values) if not math.isnan(p)]
    adjusted = [math.nan] * len(values)
    if finite:
        _, corrected, _, _ = multipletests([values[i] for i in finite], method="holm")
        for index, p in zip(finite, corrected, strict=True):
            adjusted[index] = float(p)
    return adjusted


def judge(
    baseline: Sequence[float], variant: Sequence[float], alpha: float = 0.05
) -> dict[str, Any]:
    """Is ``variant`` different from ``baseline`` beyond the seed-to-seed noise?

    ``verdict``: ``"differs"`` (Welch p < alpha), ``"within noise"``, or ``"cannot judge"`` when
    either side has fewer than 2 runs (one run has no spread to compare with).
    """
    if len(baseline) < 2 or len(variant) < 2:
        difference = mean(variant) - mean(baseline) if baseline and variant else math.nan
        return {
            "difference": difference,
            "low": math.nan,
            "high": math.nan,
            "p_value": math.nan,
            "verdict": "cannot judge",
        }
    test = welch_test(baseline, variant, 1 - alpha)
    verdict = "differs" if test["p_value"] < alpha else "within noise"
    return {
        "difference": test["difference"],
        "low": test["low"],
        "high": test["high"],
        "p_value": test["p_value"],
        "verdict": verdict,
    }


def holm_verdicts(rows: Sequence[dict[str, Any]], alpha: float = 0.05) -> None:
    """Adjust the ``p_value`` of every row that has one by :func:`holm`, together (one family),
    in place: ``p_holm``, and ``verdict`` ("differs" when ``p_holm < alpha``, "within noise"
    otherwise; a row whose p-value is NaN keeps its verdict, "cannot judge")."""
    compared = [row for row in rows if "p_value" in row]
    for row, adjusted in zip(compared, holm([row["p_value"] for row in compared]), strict=True):
        row["p_holm"] = adjusted
        if not math.isnan(adjusted):
            row["verdict"] = "differs" if adjusted < alpha else "within noise"


# The power at which chapter 09 states the smallest difference a comparison could have found.
POWER = 0.8


def detectable_difference(
    baseline: Sequence[float], variant: Sequence[float], alpha: float = 0.05, power: float = POWER
) -> float:
    """The smallest true difference of means that a two-sided t-test at level ``alpha`` between
    ``len(baseline)`` and ``len(variant)`` runs finds with probability ``power``, at the spread
    these runs show (their pooled standard deviation), in the metric's units:
    ``statsmodels``' ``TTestIndPower().solve_power`` for the standardized effect, times that
    standard deviation. A "within noise" beside a detectable difference larger than the effect
    in question says "not resolvable at this size", not "no effect". NaN with fewer than 2 runs
    on a side or no spread at all."""
    if len(baseline) < 2 or len(variant) < 2 or not 0 < alpha < 1:
        return math.nan
    first, second = len(baseline), len(variant)
    pooled = math.sqrt(
        ((first - 1) * stdev(baseline) ** 2 + (second - 1) * stdev(variant) ** 2)
        / (first + second - 2)
    )
    if pooled == 0:
        return math.nan
    return standardized_detectable(first, second, alpha, power) * pooled


def standardized_detectable(
    first: int, second: int, alpha: float = 0.05, power: float = POWER
) -> float:
    """The smallest standardized difference (Cohen's d) that a two-sided two-sample t-test at
    ``alpha`` between ``first`` and ``second`` runs finds with probability ``power``
    (``statsmodels.stats.power.TTestIndPower().solve_power``)."""
    from statsmodels.stats.power import TTestIndPower

    return float(
        TTestIndPower().solve_power(
            effect_size=None,
            nobs1=first,
            ratio=second / first,
            alpha=alpha,
            power=power,
            alternative="two-sided",
        )
    )


def standardized_paired(pairs: int, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest mean difference, in standard deviations of the paired differences, that a
    two-sided paired t-test of ``pairs`` pairs finds with probability ``power``
    (``statsmodels``' ``TTestPower().solve_power``)."""
    from statsmodels.stats.power import TTestPower

    return float(
        TTestPower().solve_power(
            effect_size=None, nobs=pairs, alpha=alpha, power=power, alternative="two-sided"
        )
    )


SAME_RUNS = "same runs as baseline"


def baseline_twins(records: Sequence[dict[str, Any]]) -> set[str]:
    """The non-baseline variants of a study whose runs are the baseline's own runs: every one of
    their records is a baseline record under another name (the same training config, seed
    included, and the same metrics; only the study, variant and factor names differ), one for
    each of the baseline's. Table 3's ``P_drop=0.0`` is one under a profile without dropout: the
    runner reuses the base's runs for it rather than train them twice."""
    runs: dict[str, set[str]] = {}
    for record in records:
        run = {"config": training_part(record["config"]), "metrics": record["metrics"]}
        runs.setdefault(record["config"]["variant"], set()).add(run_key(run))
    base = {r["config"]["variant"] for r in records if r["config"].get("baseline")}
    if len(base) != 1:
        return set()
    (label,) = base
    return {other for other, keys in runs.items() if other != label and keys == runs[label]}


def summarize(
    records: Sequence[dict[str, Any]], metric: str, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """One row per variant: n, mean, std, t interval, min, max, and its comparison with the
    baseline variant: ``vs_baseline`` (the difference of means, the effect size in the metric's
    units) with its Welch ``confidence`` interval (``diff_low``, ``diff_high``), the Welch
    ``p_value``, ``p_holm`` (adjusted by :func:`holm` over all of the study's comparisons with
    the baseline, one family) and the ``verdict`` at ``1 - confidence``: "differs" when
    ``p_holm`` is below it, "within noise", or "cannot judge" (fewer than 2 runs a side). A
    variant whose runs are the baseline's own (:func:`baseline_twins`) is not compared: its
    ``verdict`` is :data:`SAME_RUNS`."""
    values = variant_values(records, metric)
    factors = {r["config"]["variant"]: r["config"]["factors"] for r in records}
    baselines = {r["config"]["variant"] for r in records if r["config"].get("baseline")}
    baseline = values.get(next(iter(baselines))) if baselines else None
    twins = baseline_twins(records)
    diverged: dict[str, int] = {}
    for record in records:
        if record["metrics"].get("diverged"):
            label = record["config"]["variant"]
            diverged[label] = diverged.get(label, 0) + 1
    rows = []
    for label, runs in values.items():
        row: dict[str, Any] = {"variant": label, **factors[label], "n": len(runs)}
        if runs:
            interval = mean_interval(runs, confidence)
            row.update(
                {
                    "mean": interval.estimate,
                    "std": stdev(runs) if len(runs) > 1 else math.nan,
                    "ci_low": interval.low,
                    "ci_high": interval.high,
                    "min": min(runs),
                    "max": max(runs),
                }
            )
        row["diverged"] = diverged.get(label, 0)
        row["baseline"] = label in baselines
        if label in twins:
            # The baseline's own runs under another name: comparing them with themselves would
            # add a comparison that cannot fail to the Holm family.
            row["verdict"] = SAME_RUNS
        elif baseline is not None and runs and label not in baselines:
            verdict = judge(baseline, runs, 1 - confidence)
            row.update(
                {
                    "vs_baseline": verdict["difference"],
                    "diff_low": verdict["low"],
                    "diff_high": verdict["high"],
                    "p_value": verdict["p_value"],
                    "verdict": verdict["verdict"],
                }
            )
        rows.append(row)
    holm_verdicts(rows, 1 - confidence)
    return rows


def rank(
    summary: Sequence[dict[str, Any]], higher_is_better: bool, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """The summary rows best first, numbered. ``overlaps_best``: whether a row's t interval
    overlaps the best row's, a quick sign that the order of the two is not settled (the
    ``verdict`` column of :func:`summarize` is the test against the baseline)."""
    scored = [row for row in summary if "mean" in row]
    ordered = sorted(scored, key=lambda row: row["mean"], reverse=higher_is_better)
    ranked = []
    for place, row in enumerate(ordered, 1):
        best = ordered[0]
        overlap = not (math.isnan(row["ci_low"]) or math.isnan(best["ci_low"])) and (
            row["ci_low"] <= best["ci_high"] and best["ci_low"] <= row["ci_high"]
        )
        ranked.append({"rank": place, **row, "overlaps_best": overlap if place > 1 else True})
    return ranked


def main_effects(records: Sequence[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Per factor and level, over every run at that level: n, mean, std, min, max, and the
    ``effect``, the level's mean minus the grand mean (in a balanced design the other factors
    average out). For two-level factors ``difference`` is the second level's mean minus the
    first's, the classic main effect."""
    usable = usable_runs(records, metric)
    if not usable:
        return []
    grand = mean(float(r["metrics"][metric]) for r in usable)
    rows = []
    for factor in usable[0]["config"]["factors"]:
        levels: dict[str, list[float]] = {}
        for record in usable:
            level = record["config"]["factors"][factor]
            levels.setdefault(level, []).append(float(record["metrics"][metric]))
        means = [mean(values) for values in levels.values()]
        for (level, values), level_mean in zip(levels.items(), means, strict=True):
            rows.append(
                {
                    "factor": factor,
                    "level": level,
                    "n": len(values),
                    "mean": level_mean,
                    "std": stdev(values) if len(values) > 1 else math.nan,
                    "min": min(values),
                    "max": max(values),
                    "effect": level_mean - grand,
                    "difference": means[1] - means[0] if len(means) == 2 else math.nan,
                }
            )
    return rows


def interaction(
    records: Sequence[dict[str, Any]], metric: str, first: str, second: str
) -> dict[str, Any]:
    """Mean of ``metric`` for each pair of levels of factors ``first`` (rows) and ``second``
    (columns). For two levels each, ``interaction`` is the difference of differences,
    ``(m11 - m10) - (m01 - m00)``: how much the effect of ``second`` changes when ``first``
    changes (0: no interaction, the effects add)."""
    cells: dict[tuple[str, str], list[float]] = {}
    rows, columns = [], []
    for record in usable_runs(records, metric):
        value = record["metrics"][metric]
        a, b = record["config"]["factors"][first], record["config"]["factors"][second]
        rows += [a] if a not in rows else []
        columns += [b] if b not in columns else []
        cells.setdefault((a, b), []).append(float(value))
    means = [[mean(cells[(a, b)]) if (a, b) in cells else math.nan for b in columns] for a in rows]
    contrast = math.nan
    if len(rows) == 2 and len(columns) == 2:
        contrast = (means[1][1] - means[1][0]) - (means[0][1] - means[0][0])
    return {"rows": rows, "columns": columns, "means": means, "interaction": contrast}


def factorial_effects(
    records: Sequence[dict[str, Any]], metric: str, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """Every main effect and two-way interaction of a two-level factorial study, each with its
    ``confidence`` interval, t-test, Holm-adjusted p-value over the whole family, and verdict.

    The saturated linear model of the design (every factor coded -1/2 at its first level and
    +1/2 at its second, and every product of them: one parameter per cell) is fitted by least
    squares. Its coefficients are the classic contrasts: a main effect is the second level's
    mean minus the first's, an interaction ``(m11 - m10) - (m01 - m00)`` as in
    :func:`interaction` (averaged over the other factors' cells alike). Its residuals are the
    seed-to-seed spread within cells alone, with ``runs - cells`` degrees of freedom: every cell
    needs a run, and with one run per cell the effects come without intervals or tests
    (``verdict`` "cannot judge"). Higher interactions are fitted but not reported.

    Returns one row per term, mains first: ``term`` ("A" or "A × B"), ``levels`` (what
    ``effect`` compares), ``effect``, ``ci_low``, ``ci_high``, ``t``, ``df``, ``p_value``,
    ``p_holm`` and ``verdict`` (at ``1 - confidence``, on ``p_holm``).
    """
    import itertools

    import numpy as np
    from scipy import stats

    usable = usable_runs(records, metric)
    if not usable:
        return []
    factors = list(usable[0]["config"]["factors"])
    levels: dict[str, list[str]] = {factor: [] for factor in factors}
    for record in usable:
        for factor in factors:
            level = record["config"]["factors"][factor]
            levels[factor] += [level] if level not in levels[factor] else []
    many = [factor for factor in factors if len(levels[factor]) != 2]
    if many:
        raise ValueError(
            f"factorial_effects needs two levels per factor; {', '.join(many)} has "
            f"{', '.join(str(len(levels[f])) for f in many)}: use summarize and main_effects"
        )
    coded = np.array(
        [[levels[f].index(r["config"]["factors"][f]) - 0.5 for f in factors] for r in usable]
    )  # [runs, factors], -1/2 or +1/2
    values = np.array([float(r["metrics"][metric]) for r in usable])  # [runs]
    terms = [
        subset
        for order in range(len(factors) + 1)
        for subset in itertools.combinations(range(len(factors)), order)
    ]  # (), (0,), (1,), ..., (0, 1), ...: every product, the intercept first
    design = np.stack([coded[:, list(term)].prod(axis=1) for term in terms], axis=1)
    cells = {tuple(row) for row in coded.tolist()}
    if len(cells) < len(terms):
        raise ValueError(
            f"factorial_effects needs a run in each of the {len(terms)} cells; "
            f"{len(terms) - len(cells)} have none"
        )
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual = values - design @ coefficients
    df = len(values) - len(terms)  # 0 with one run per cell: effects, but no spread to judge by
    variance = float(residual @ residual) / df if df else math.nan
    covariance = variance * np.linalg.inv(design.T @ design)
    quantile = float(stats.t.ppf(0.5 + confidence / 2, df)) if df else math.nan
    rows = []
    for index, term in enumerate(terms):
        if len(term) not in (1, 2):
            continue
        effect = float(coefficients[index])
        error = math.sqrt(float(covariance[index, index]))
        t = effect / error if error > 0 else math.copysign(math.inf, effect) if effect else 0.0
        names = [factors[i] for i in term]
        rows.append(
            {
                "term": " × ".join(names),
                "levels": "; ".join(f"{levels[n][0]} -> {levels[n][1]}" for n in names),
                "effect": effect,
                "ci_low": effect - quantile * error,
                "ci_high": effect + quantile * error,
                "t": t,
                "df": df,
                "p_value": float(2 * stats.t.sf(abs(t), df)) if df else math.nan,
                "verdict": "cannot judge",
            }
        )
    holm_verdicts(rows, 1 - confidence)
    return rows


def curves(records: Sequence[dict[str, Any]], key: str = "eval_loss") -> dict[str, dict[str, list]]:
    """Variant -> ``{"step", "mean", "std", "n"}`` of history column ``key`` over its seeds, at
    the steps every seed logged it."""
    by_variant: dict[str, list[dict[int, float]]] = {}
    for record in records:
        points = {row["step"]: float(row[key]) for row in record["history"] if key in row}
        by_variant.setdefault(record["config"]["variant"], []).append(points)
    result = {}
    for label, runs in by_variant.items():
        steps = sorted(set.intersection(*(set(points) for points in runs)))
        values = [[points[step] for points in runs] for step in steps]
        result[label] = {
            "step": steps,
            "mean": [mean(column) for column in values],
            "std": [stdev(column) if len(column) > 1 else 0.0 for column in values],
            "n": len(runs),
        }
    return result
