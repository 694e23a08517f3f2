"""ablation/statistics.py on kept libraries: the t interval and Welch's test from scipy.stats,
Holm's correction from statsmodels, held against the hand-written code they replaced (kept below
as the reference) on every stored study under results/ablation/, and against a hand-computed
Holm example."""

import json
import math
from pathlib import Path

import pytest
import torch
from scipy import stats

from annotated_transformer import ablation as ab

STORED = Path(__file__).resolve().parents[2] / "results" / "ablation"


# -- the hand-written code that scipy.stats replaced (annotated_transformer 0.1.0) ----------------


def old_t_cdf(t: float, degrees: int) -> float:
    """Abramowitz & Stegun 26.7.3-4: Student's t CDF for integer degrees, as a finite series."""
    theta = math.atan(abs(t) / math.sqrt(degrees))
    cos_sq = math.cos(theta) ** 2
    if degrees % 2 == 1:
        term, series = math.cos(theta), 0.0
        if degrees > 1:
            series = term
            for k in range(3, degrees - 1, 2):
                term *= (k - 1) / k * cos_sq
                series += term
        inside = (2 / math.pi) * (theta + math.sin(theta) * series)
    else:
        term, series = 1.0, 1.0
        for k in range(2, degrees - 1, 2):
            term *= (k - 1) / k * cos_sq
            series += term
        inside = math.sin(theta) * series
    return 0.5 + math.copysign(inside / 2, t)


def old_t_quantile(probability: float, degrees: int) -> float:
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if old_t_cdf(middle, degrees) < probability else (low, middle)
    return (low + high) / 2


def old_welch(first, second):
    """The old test: Welch-Satterthwaite df rounded down for the integer-only series."""
    n1, n2 = len(first), len(second)
    m1, m2 = sum(first) / n1, sum(second) / n2
    v1 = sum((x - m1) ** 2 for x in first) / (n1 - 1) / n1
    v2 = sum((x - m2) ** 2 for x in second) / (n2 - 1) / n2
    t = (m2 - m1) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
    return t, df, 2 * (1 - old_t_cdf(abs(t), max(1, math.floor(df))))


def _stored_studies():
    groups = {}
    for path in sorted(STORED.glob("*.json")):
        record = json.loads(path.read_text())
        config = record["config"]
        groups.setdefault((config["task"], config["study"], config["profile"]), []).append(record)
    # A study still under way (its baseline not trained yet, a variant with one seed) is read
    # once it has the runs these comparisons need.
    return {key: records for key, records in groups.items() if _comparable(records)}


def _comparable(records):
    runs = {}
    for record in records:
        runs.setdefault(record["config"]["variant"], []).append(record)
    has_baseline = any(record["config"]["baseline"] for record in records)
    return has_baseline and len(runs) > 1 and all(len(found) >= 2 for found in runs.values())


STUDIES = _stored_studies()


def test_the_stored_studies_are_there():
    assert len(STUDIES) >= 5, sorted(STUDIES)


@pytest.mark.parametrize("key", sorted(STUDIES), ids="-".join)
def test_scipy_intervals_equal_the_old_series_and_bisection_on_a_stored_study(key):
    records = STUDIES[key]
    metric, _ = ab.default_metric(key[0])
    values = ab.variant_values(records, metric)
    for row in ab.summarize(records, metric):
        runs = values[row["variant"]]
        n = len(runs)
        assert n >= 2
        center = sum(runs) / n
        s = math.sqrt(sum((x - center) ** 2 for x in runs) / (n - 1))
        half = old_t_quantile(0.975, n - 1) * s / math.sqrt(n)
        assert row["ci_low"] == pytest.approx(center - half, rel=1e-6, abs=1e-9)
        assert row["ci_high"] == pytest.approx(center + half, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("key", sorted(STUDIES), ids="-".join)
def test_scipy_welch_against_the_old_test_on_a_stored_study(key):
    records = STUDIES[key]
    metric, _ = ab.default_metric(key[0])
    values = ab.variant_values(records, metric)
    baseline = next(r["config"]["variant"] for r in records if r["config"]["baseline"])
    rows = {row["variant"]: row for row in ab.summarize(records, metric)}
    twins = ab.baseline_twins(records)  # the baseline's runs under another name: not compared
    compared = 0
    for label, runs in values.items():
        if label == baseline:
            continue
        if label in twins:
            assert runs == values[baseline] and "p_value" not in rows[label]
            assert rows[label]["verdict"] == ab.SAME_RUNS
            continue
        new = ab.welch_test(values[baseline], runs)
        t, df, old_p = old_welch(values[baseline], runs)
        assert new["t"] == pytest.approx(t, rel=1e-9)
        assert new["df"] == pytest.approx(df, rel=1e-9)
        # scipy's t distribution at the old integer df gives the old p-value ...
        assert 2 * stats.t.sf(abs(t), max(1, math.floor(df))) == pytest.approx(old_p, abs=1e-6)
        # ... and at the exact (fractional) df a p-value no larger: flooring was conservative.
        assert new["p_value"] <= old_p + 1e-12
        # So a difference the old test found stays found; the exact df may find one more (a
        # p-value just under 0.05 at the exact df can be above it at the floored one).
        if old_p < 0.05:
            assert new["p_value"] < 0.05
        assert rows[label]["p_value"] == new["p_value"]
        compared += 1
    assert compared >= 1


def test_holm_by_hand():
    # Sorted: 0.01, 0.03, 0.04, 0.2 with m = 4: 4·0.01 = 0.04, 3·0.03 = 0.09, 2·0.04 = 0.08 ->
    # 0.09 (step-down: never below the previous one), 1·0.2 = 0.2. Back in the input order:
    assert ab.holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    # Capped at 1; NaN (a comparison not made) stays NaN and does not count: m = 2.
    adjusted = ab.holm([0.6, math.nan, 0.7])
    assert adjusted[0] == pytest.approx(1.0) and adjusted[2] == pytest.approx(1.0)
    assert math.isnan(adjusted[1])
    assert ab.holm([0.01, math.nan, 0.04])[::2] == pytest.approx([0.02, 0.04])
    assert ab.holm([]) == []


def test_holm_refuses_what_is_not_a_p_value():
    with pytest.raises(ValueError, match=r"p-values must be in \[0, 1\] \(or NaN\), got 1.5"):
        ab.holm([0.1, 1.5])


def test_summary_adjusts_the_studys_comparisons_together_by_holm():
    key = ("tinyshakespeare", "positional", "cpu")
    records = STUDIES[key]
    rows = ab.summarize(records, "valid_loss")
    compared = [row for row in rows if "p_value" in row]
    assert len(compared) == len(rows) - 1 >= 2  # every variant but the baseline
    adjusted = ab.holm([row["p_value"] for row in compared])
    assert [row["p_holm"] for row in compared] == adjusted
    assert all(row["p_holm"] >= row["p_value"] for row in compared)
    assert not any("p_holm" in row for row in rows if row["baseline"])


def test_welch_without_spread_on_either_side():
    assert ab.welch_test([1.0, 1.0], [2.0, 2.0])["p_value"] == 0.0
    assert ab.welch_test([2.0, 2.0], [1.0, 1.0])["t"] == -math.inf
    same = ab.welch_test([1.0, 1.0], [1.0, 1.0])
    assert (same["t"], same["p_value"]) == (0.0, 1.0)


# -- effect sizes with intervals, and verdicts on Holm-adjusted p-values ---------------------------


def test_welch_interval_matches_statsmodels_unequal_variance_interval():
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    first, second = [20.1, 21.4, 20.7, 19.9], [22.3, 21.1, 23.0]
    result = ab.welch_test(first, second)
    reference = CompareMeans(DescrStatsW(second), DescrStatsW(first))
    low, high = reference.tconfint_diff(alpha=0.05, usevar="unequal")
    assert (result["low"], result["high"]) == pytest.approx((low, high), rel=1e-9)
    assert result["low"] < result["difference"] < result["high"]
    low90, high90 = reference.tconfint_diff(alpha=0.10, usevar="unequal")
    narrower = ab.welch_test(first, second, confidence=0.90)
    assert (narrower["low"], narrower["high"]) == pytest.approx((low90, high90), rel=1e-9)


@pytest.mark.parametrize("key", sorted(STUDIES), ids="-".join)
def test_a_stored_studys_verdicts_are_on_holm_adjusted_p_values_with_intervals(key):
    records = STUDIES[key]
    metric, _ = ab.default_metric(key[0])
    values = ab.variant_values(records, metric)
    baseline = next(r["config"]["variant"] for r in records if r["config"]["baseline"])
    rows = [row for row in ab.summarize(records, metric) if "p_value" in row]
    adjusted = ab.holm([row["p_value"] for row in rows])
    for row, p_holm in zip(rows, adjusted, strict=True):
        welch = stats.ttest_ind(values[row["variant"]], values[baseline], equal_var=False)
        interval = welch.confidence_interval(0.95)
        assert (row["diff_low"], row["diff_high"]) == pytest.approx(
            (interval.low, interval.high), rel=1e-9
        )
        assert row["p_holm"] == p_holm
        assert row["verdict"] == ("differs" if p_holm < 0.05 else "within noise")


def test_a_comparison_significant_alone_can_be_within_noise_after_holm():
    def runs(label, values, baseline=False):
        return [
            {
                "config": {"variant": label, "factors": {"f": label}, "baseline": baseline},
                "metrics": {"m": value},
            }
            for value in values
        ]

    records = runs("base", [1.0, 1.1, 0.9], baseline=True) + runs("a", [1.3, 1.4, 1.2])
    records += [r for i in range(4) for r in runs(f"null{i}", [1.0 + 0.01 * i, 1.12, 0.88])]
    rows = {row["variant"]: row for row in ab.summarize(records, "m")}
    assert rows["a"]["p_value"] < 0.05 <= rows["a"]["p_holm"]
    assert rows["a"]["verdict"] == "within noise"
    assert ab.judge([1.0, 1.1, 0.9], [1.3, 1.4, 1.2])["verdict"] == "differs"  # alone


def _factorial_records(seeds: int, noise_seed: int = 0):
    """y = 10 + 2a + b - 0.5c + 3ab over a 2^4 design (a, b, c, d in {0, 1}), Gaussian noise."""
    generator = torch.Generator().manual_seed(noise_seed)
    records = []
    for cell in range(16):
        a, b, c, d = (cell >> 3) & 1, (cell >> 2) & 1, (cell >> 1) & 1, cell & 1
        factors = {"A": f"a{a}", "B": f"b{b}", "C": f"c{c}", "D": f"d{d}"}
        for _ in range(seeds):
            y = 10 + 2 * a + b - 0.5 * c + 3 * a * b + 0.3 * torch.randn(1, generator=generator)
            records.append(
                {
                    "config": {"variant": ", ".join(factors.values()), "factors": factors},
                    "metrics": {"y": float(y)},
                }
            )
    return records


def test_factorial_effects_match_a_statsmodels_ols_of_the_saturated_model():
    import pandas as pd
    import statsmodels.formula.api as smf

    records = _factorial_records(seeds=3)
    # Columns f_A ... f_D: a factor named C would be patsy's C().
    data = pd.DataFrame(
        [
            {**{f"f_{k}": v for k, v in r["config"]["factors"].items()}, "y": r["metrics"]["y"]}
            for r in records
        ]
    )
    # Sum coding: +1 at the first level, -1 at the second; ours is -1/2, +1/2, so a main effect
    # is -2 times statsmodels' coefficient and a two-way interaction 4 times.
    fit = smf.ols("y ~ C(f_A, Sum) * C(f_B, Sum) * C(f_C, Sum) * C(f_D, Sum)", data).fit()
    intervals = fit.conf_int(alpha=0.05)
    rows = {row["term"]: row for row in ab.factorial_effects(records, "y")}
    assert len(rows) == 4 + 6
    for term, row in rows.items():
        names = term.split(" × ")
        name = ":".join(f"C(f_{n}, Sum)[S.{n.lower()}0]" for n in names)
        scale = -2.0 if len(names) == 1 else 4.0
        assert row["effect"] == pytest.approx(scale * fit.params[name], rel=1e-9)
        assert row["p_value"] == pytest.approx(fit.pvalues[name], rel=1e-7)
        assert row["df"] == fit.df_resid == 48 - 16
        ends = sorted(scale * intervals.loc[name])
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(ends, rel=1e-9)
    assert [row["p_holm"] for row in rows.values()] == ab.holm(
        [row["p_value"] for row in rows.values()]
    )
    # The designed effects come back and are found; the absent ones are not.
    assert rows["A"]["effect"] == pytest.approx(2 + 3 / 2, abs=0.3)
    assert rows["A × B"]["effect"] == pytest.approx(3, abs=0.5)
    assert rows["A"]["verdict"] == rows["A × B"]["verdict"] == "differs"
    assert rows["D"]["verdict"] == rows["C × D"]["verdict"] == "within noise"


def test_factorial_effects_equal_the_differences_of_means_in_a_balanced_design():
    records = _factorial_records(seeds=2, noise_seed=1)
    rows = {row["term"]: row for row in ab.factorial_effects(records, "y")}
    mains = {(r["factor"], r["level"]): r for r in ab.main_effects(records, "y")}
    for factor in "ABCD":
        assert rows[factor]["effect"] == pytest.approx(
            mains[(factor, f"{factor.lower()}1")]["difference"]
        )
    table = ab.interaction(records, "y", "A", "B")
    assert rows["A × B"]["effect"] == pytest.approx(table["interaction"])


def test_factorial_effects_with_one_run_per_cell_cannot_judge_and_an_empty_cell_is_refused():
    records = _factorial_records(seeds=1)
    rows = ab.factorial_effects(records, "y")
    assert all(row["verdict"] == "cannot judge" and math.isnan(row["p_value"]) for row in rows)
    assert all(math.isfinite(row["effect"]) for row in rows)
    with pytest.raises(ValueError, match="needs a run in each of the 16 cells; 1 have none"):
        ab.factorial_effects(records[1:], "y")


def test_every_reader_skips_the_same_unusable_runs():
    """A NaN metric, a diverged run with a stale metric, a bool and a missing metric count
    nowhere: every summary, effect and verdict reads the runs :func:`ab.usable_runs` keeps."""
    clean = _factorial_records(seeds=2, noise_seed=2)
    factors = clean[0]["config"]
    junk = [
        {"config": factors, "metrics": {"y": math.nan}},
        {"config": factors, "metrics": {"y": 1000.0, "diverged": True, "diverged_at": 7}},
        {"config": factors, "metrics": {"y": True}},
        {"config": factors, "metrics": {}},
    ]
    records = clean[:5] + junk + clean[5:]
    assert ab.usable_runs(records, "y") == clean
    assert [ab.is_usable(r, "y") for r in junk] == [False] * 4
    assert ab.main_effects(records, "y") == ab.main_effects(clean, "y")
    assert ab.interaction(records, "y", "A", "C") == ab.interaction(clean, "y", "A", "C")
    assert ab.factorial_effects(records, "y") == ab.factorial_effects(clean, "y")
    assert ab.factor_effects(records, "y", True) == ab.factor_effects(clean, "y", True)
    assert ab.variant_values(records, "y") == ab.variant_values(clean, "y")
