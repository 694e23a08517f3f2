"""ablation/verdicts.py: the stored studies grouped as chapter 09 shows them, verdict tables with
Holm's correction and Welch intervals checked by hand, the trivial level and what is said about
it, the factorial's winners, and the source reports' claims measured. The count baselines are
held against :func:`count_baselines` on the real corpus, and every stored study is read."""

import math
import os
import statistics
from pathlib import Path

import pytest
from scipy import stats

from annotated_transformer import ablation as ab
from annotated_transformer.data import load_language_model_corpus
from annotated_transformer.results.experiments import ResultsStore
from annotated_transformer.tasks.baselines import count_baselines

STORED = Path(__file__).resolve().parents[2] / "results" / "ablation"
DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile


def record(study, variant, seed, value, *, task="tinyshakespeare", profile="cpu", **config):
    metric = ab.default_metric(task)[0]
    return {
        "config": {
            "study": study,
            "task": task,
            "profile": profile,
            "variant": variant,
            "seed": seed,
            "factors": config.pop("factors", {study: variant}),
            "baseline": config.pop("baseline", False),
            "evaluation": {},
        },
        "metrics": {metric: value},
        "history": [],
        "provenance": {
            "device": "CPU",
            "git_commit": "0" * 40,
            "date": config.pop("date", "2026-01-01T00:00:00"),
            "wall_time_s": 60.0,
        },
    }


def heads_study(values, task="tinyshakespeare", profile="cpu"):
    """A heads study whose variant -> runs are ``values``; 8 heads is the baseline."""
    return [
        record("heads", label, seed, value, task=task, profile=profile, baseline=label == "8")
        for label, runs in values.items()
        for seed, value in enumerate(runs)
    ]


def bigram(value):
    return lambda study: ab.TrivialBaseline("valid_loss", value, "bigram", "made up")


def test_stored_studies_group_by_task_study_profile_newest_profile_first_and_drop_smoke():
    runs = heads_study({"8": [2.0, 2.1], "1": [1.9, 1.8]}, profile="cpu")
    runs += heads_study({"8": [1.5, 1.6], "2": [1.4, 1.45]}, profile="reference")
    runs += heads_study({"8": [3.0, 3.1]}, profile="smoke")
    runs += [record("residual", "with", 0, 2.0, baseline=True)]
    runs += [record("residual", "with", 1, 2.1, baseline=True)]
    runs[-1]["config"]["task"] = "shakespeare"  # the name of an old record
    # An older record of the same (variant, seed) is replaced by the newest.
    runs += [record("heads", "1", 0, 9.9, profile="cpu", date="2025-01-01T00:00:00")]
    studies = ab.stored_studies(runs)
    assert [(s.profile, s.task, s.study) for s in studies] == [
        ("reference", "tinyshakespeare", "heads"),
        ("cpu", "tinyshakespeare", "heads"),
        ("cpu", "tinyshakespeare", "residual"),
    ]
    assert len(studies[2].records) == 2  # both names of Tiny Shakespeare in one study
    cpu = studies[1]
    # The study's order of variants (1 before 8), seeds in order, the newest record kept.
    assert [(r["config"]["variant"], r["config"]["seed"]) for r in cpu.records] == [
        ("1", 0),
        ("1", 1),
        ("8", 0),
        ("8", 1),
    ]
    assert cpu.records[0]["metrics"]["valid_loss"] == 1.9
    assert cpu.baseline == "8" and cpu.metric == "valid_loss" and not cpu.higher_is_better
    assert cpu.title == "tinyshakespeare, heads study, cpu profile"


def test_difference_interval_is_welchs_by_hand():
    baseline, variant = [20.0, 21.0, 23.0], [18.0, 18.5, 19.5]
    v1, v2 = statistics.variance(baseline) / 3, statistics.variance(variant) / 3
    df = (v1 + v2) ** 2 / (v1**2 / 2 + v2**2 / 2)
    half = stats.t.ppf(0.975, df) * math.sqrt(v1 + v2)
    difference = statistics.mean(variant) - statistics.mean(baseline)
    low, high = ab.difference_interval(baseline, variant)
    assert low == pytest.approx(difference - half) and high == pytest.approx(difference + half)
    assert ab.difference_interval([1.0, 1.0], [2.0, 2.0]) == (1.0, 1.0)  # no spread at all
    assert all(math.isnan(x) for x in ab.difference_interval([1.0], [2.0, 3.0]))


def test_verdict_table_reads_holm_in_the_direction_of_quality():
    values = {
        "1": [1.0, 1.01, 0.99],  # far lower loss than 8: better
        "2": [2.0, 2.3, 1.8],  # noisy: within noise
        "8": [2.0, 2.01, 1.99],
        "16": [3.0],  # one run: cannot judge
    }
    rows = {
        row["variant"]: row for row in ab.verdict_table(heads_study(values), "valid_loss", False)
    }
    assert rows["8"]["verdict"] == "baseline" and math.isnan(rows["8"]["difference"])
    assert rows["1"]["verdict"] == "better" and rows["1"]["rank"] == 1
    assert rows["2"]["verdict"] == "within noise"
    assert rows["16"]["verdict"] == "cannot judge"
    # Holm over the two comparisons that could be made: the smaller p doubled.
    p1, p2 = rows["1"]["p_value"], rows["2"]["p_value"]
    assert rows["1"]["p_holm"] == pytest.approx(min(1.0, 2 * p1))
    assert rows["2"]["p_holm"] == pytest.approx(max(min(1.0, 2 * p1), p2))
    low, high = ab.difference_interval(values["8"], values["1"])
    assert (rows["1"]["diff_low"], rows["1"]["diff_high"]) == (low, high)
    # The same numbers as BLEU (higher is better): lower now reads worse.
    bleu = {
        row["variant"]: row for row in ab.verdict_table(heads_study(values), "valid_loss", True)
    }
    assert bleu["1"]["verdict"] == "worse"


def test_a_variant_with_the_baselines_own_runs_is_not_a_comparison():
    """Table 3's P_drop=0.0 under a base without dropout: the runner stores the base's runs
    under the row's name. Compared with itself it could never differ; it leaves Holm's family."""
    values = {"base": [25.0, 26.0, 24.5], "h=1": [20.0, 20.5, 19.8], "h=4": [25.2, 26.1, 24.0]}
    runs = [
        record("table3", label, seed, value, baseline=label == "base")
        for label, seeds in values.items()
        for seed, value in enumerate(seeds)
    ]
    twins = [
        {**r, "config": {**r["config"], "variant": "P_drop=0.0", "baseline": False}}
        for r in runs
        if r["config"]["variant"] == "base"
    ]
    # Not a twin: the base's config but other metrics (a run trained again, say), or one seed short.
    other = [
        {**r, "config": {**r["config"], "variant": "again"}, "metrics": {"valid_loss": 30.0 + i}}
        for i, r in enumerate(twins)
    ]
    short = [{**r, "config": {**r["config"], "variant": "short"}} for r in twins[:2]]
    assert ab.baseline_twins(runs + twins + other + short) == {"P_drop=0.0"}
    rows = {r["variant"]: r for r in ab.verdict_table(runs + twins, "valid_loss", False)}
    assert rows["P_drop=0.0"]["verdict"] == ab.SAME_RUNS
    assert math.isnan(rows["P_drop=0.0"]["difference"]) and math.isnan(rows["P_drop=0.0"]["p_holm"])
    assert math.isnan(rows["P_drop=0.0"]["diff_low"])
    assert rows["P_drop=0.0"]["mean"] == rows["base"]["mean"]  # its mean is still shown
    # Holm over the two real comparisons, exactly as without the twin.
    alone = {r["variant"]: r for r in ab.verdict_table(runs, "valid_loss", False)}
    for label in ("h=1", "h=4"):
        assert rows[label]["p_holm"] == alone[label]["p_holm"]
        assert rows[label]["verdict"] == alone[label]["verdict"]
    smallest = min(rows[label]["p_value"] for label in ("h=1", "h=4"))
    assert min(rows[label]["p_holm"] for label in ("h=1", "h=4")) == pytest.approx(2 * smallest)


def test_a_baseline_within_the_margin_of_the_trivial_level_measures_nothing():
    values = {"1": [2.40, 2.41, 2.39], "8": [2.47, 2.46, 2.48]}
    (study,) = ab.stored_studies(heads_study(values))
    assert ab.measures_nothing(study, bigram(value=2.50)) is True  # 2.47 within 0.05 nats
    assert ab.measures_nothing(study, bigram(value=3.0)) is False
    assert ab.measures_nothing(study, lambda study: None) is None  # nothing to compare with
    trivial = bigram(value=2.50)(study)
    assert ab.at_trivial_level(2.46, trivial, False) and not ab.at_trivial_level(
        2.44, trivial, False
    )
    bleu = ab.TrivialBaseline("test_bleu", 0.5, "copied source", "made up")
    assert ab.at_trivial_level(1.4, bleu, True) and not ab.at_trivial_level(1.6, bleu, True)
    row = ab.overview([study], trivial_of=bigram(2.50))[0]
    assert row["baseline vs trivial"] == "at it: measures nothing" and row["beyond noise"] == 1
    assert ab.measures_nothing(study, bigram(2.50)) and not ab.measures_nothing(study, bigram(3.0))
    assert ab.measures_nothing(study, lambda study: None) is None
    assert (row["variants"], row["seeds"], row["runs"]) == (2, 3, 6)
    assert row["minutes"] == 6.0  # six runs of 60 s each: the study's wall time


def test_factor_effects_find_the_winners_of_a_synthetic_factorial():
    # y = 10 + 2a + 0.01c (a BLEU-like score, higher is better), seed noise ±0.2 that cancels.
    records = []
    for cell in range(8):
        a, b, c = (cell >> 2) & 1, (cell >> 1) & 1, cell & 1
        factors = {"A": f"a{a}", "B": f"b{b}", "C": f"c{c}"}
        for seed, noise in enumerate((-0.2, 0.2, 0.0)):
            value = 10 + 2 * a + 0.01 * c + noise
            records.append(
                record(
                    "factorial",
                    ", ".join(factors.values()),
                    seed,
                    value,
                    task="multi30k",
                    factors=factors,
                )
            )
    effects = {row["factor"]: row for row in ab.factor_effects(records, "test_bleu", True)}
    assert list(effects) == ["A", "B", "C"]
    differences = {
        row["factor"]: row["difference"]
        for row in ab.main_effects(records, "test_bleu")
        if row["level"].endswith("1")
    }
    for factor, row in effects.items():
        assert row["effect"] == pytest.approx(differences[factor])
        assert row["effect_low"] < row["effect"] < row["effect_high"]
    assert effects["A"]["winner"] == "a1" and effects["A"]["better_level"] == "a1"
    assert effects["B"]["winner"] is None and effects["C"]["winner"] is None
    # Holm over the three factors.
    adjusted = ab.holm([effects[f]["p_value"] for f in "ABC"])
    assert [effects[f]["p_holm"] for f in "ABC"] == pytest.approx(adjusted)


def test_claims_are_measured_where_stored_and_say_so_where_not():
    values = {"2": [2.40, 2.41, 2.39], "4": [2.47, 2.46, 2.48], "8": [2.5, 2.51, 2.49]}
    studies = ab.stored_studies(heads_study(values))
    claims = [
        ab.Claim("heads", "2 heads beat 4", "2", "4", "better"),
        ab.Claim("heads", "4 heads beat 2", "4", "2", "better"),
        ab.Claim("heads", "8 and 4 are the same", "8", "4", "the same"),
        ab.Claim("positional", "no positions barely matter", "none", "sinusoidal", "the same"),
    ]
    at_trivial = ab.check_claims(studies, claims, trivial_of=bigram(2.50))
    assert [row["verdict"] for row in at_trivial[:3]] == ["measures nothing"] * 3
    assert all(row["at_trivial_level"] is True for row in at_trivial[:3])
    rows = ab.check_claims(studies, claims, trivial_of=bigram(3.50))
    assert [row["verdict"] for row in rows] == ["agrees", "disagrees", "disagrees", "not stored"]
    assert rows[0]["measured"] == "2 better than 4" and rows[0]["at_trivial_level"] is False
    assert rows[0]["difference"] == pytest.approx(-0.07)
    assert rows[0]["detectable"] == pytest.approx(
        ab.detectable_difference(values["4"], values["2"], 0.05)
    )
    assert rows[0]["diff_low"] < rows[0]["difference"] < rows[0]["diff_high"]
    assert "run -p study positional" in rows[3]["measured"]
    noisy = ab.stored_studies(heads_study({"2": [2.0, 2.5, 1.5], "4": [2.1, 1.6, 2.6], "8": [2.0]}))
    rows = ab.check_claims(noisy, claims[:3], trivial_of=lambda study: None)
    assert [row["verdict"] for row in rows] == ["within noise", "within noise", "cannot judge"]
    assert rows[0]["at_trivial_level"] is None


def test_a_claim_of_the_same_agrees_only_when_the_interval_rules_out_a_difference():
    """No difference found is not the same as no difference: "the same" needs the whole 95%
    interval inside SAME_MARGIN; a wide interval says within noise, and why."""
    margin = ab.SAME_MARGIN["loss"]
    claim = ab.Claim("heads", "4 and 8 are the same", "4", "8", "the same")
    tight = {"4": [2.400, 2.401, 2.399], "8": [2.401, 2.402, 2.400]}
    wide = {"4": [2.0, 2.5, 1.5], "8": [2.1, 1.6, 2.6]}  # within noise, interval ±0.8 nats
    (row,) = ab.check_claims(
        ab.stored_studies(heads_study(tight)), [claim], trivial_of=lambda study: None
    )
    assert row["verdict"] == "agrees" and -margin < row["diff_low"] < row["diff_high"] < margin
    (row,) = ab.check_claims(
        ab.stored_studies(heads_study(wide)), [claim], trivial_of=lambda study: None
    )
    assert row["verdict"] == "within noise" and row["diff_high"] - row["diff_low"] > 2 * margin
    assert "too few seeds to call them the same" in row["measured"]


def test_a_factorial_claim_counts_the_factors_it_agrees_on():
    records = [
        record(
            "factorial",
            f"a{a}, b{b}",
            seed,
            10 + a + noise,
            task="multi30k",
            factors={"A": f"a{a}", "B": f"b{b}"},
            baseline=(a, b) == (0, 0),
        )
        for a in (0, 1)
        for b in (0, 1)
        for seed, noise in enumerate((-0.01, 0.01, 0.0))
    ]
    studies = ab.stored_studies(records)
    # a study whose baseline has no run yet is under way: not read
    assert ab.stored_studies([r for r in records if not r["config"]["baseline"]]) == []
    claim = ab.Claim("factorial", "a1 and b1 win", winners=(("A", "a1"), ("B", "b1")))
    (row,) = ab.check_claims(studies, [claim], trivial_of=lambda study: None)
    assert (
        row["measured"] == "A: a1 (over the 3 seeds every cell has)"
        and row["verdict"] == "agrees on 1 of 2 factors (1 within noise)"
    )
    (row,) = ab.check_claims(studies, [ab.Claim("factorial", "?")], trivial_of=lambda s: None)
    assert row["verdict"].startswith("ours only")
    # Trained part-way (a1, b1 not yet run): A's runs at a1 are all at b0, so "a1 wins" would
    # compare one corner of the design with another. No winners until every cell has a run.
    part = ab.stored_studies(
        [r for r in records if r["config"]["factors"] != {"A": "a1", "B": "b1"}]
    )
    assert ab.factorial_cells(part[0]) == (3, 4) and ab.factorial_cells(studies[0]) == (4, 4)
    (row,) = ab.check_claims(part, [claim], trivial_of=lambda study: None)
    assert row["verdict"] == "cannot judge"
    assert row["measured"] == "3 of its 4 cells have a run so far: its winners need every cell"
    # a cell whose only run diverged has no usable run
    broken = [
        {**r, "metrics": {"diverged": True}} if r["config"]["factors"]["A"] == "a1" else r
        for r in records
        if r["config"]["factors"] != {"A": "a1", "B": "b0"}
    ]
    assert ab.factorial_cells(ab.stored_studies(broken)[0]) == (2, 4)


def test_a_factorial_seed_still_under_way_does_not_tilt_the_main_effects():
    """Seeds 0-2 in every cell, B worth +2 and A nothing; four more seeds of the cell (a1, b1)
    alone (seeds under way, trained seed-major). Pooled over every run, a1's mean leans on b1's
    cells and A reads +0.4; over the seeds every cell has it reads 0."""

    def run(a, b, seed, value):
        return record(
            "factorial",
            f"a{a}, b{b}",
            seed,
            value,
            task="multi30k",
            factors={"A": f"a{a}", "B": f"b{b}"},
            baseline=(a, b) == (0, 0),
        )

    complete = [
        run(a, b, seed, 10 + 2 * b + noise)
        for a in (0, 1)
        for b in (0, 1)
        for seed, noise in enumerate((-0.01, 0.01, 0.0))
    ]
    extra = [run(1, 1, seed, 12.0) for seed in range(3, 7)]
    (study,) = ab.stored_studies(complete + extra, "follow-up")  # seeds 3-6 too
    runs, seeds = ab.balanced_runs(study)
    assert seeds == [0, 1, 2] and len(runs) == 12
    assert {r["config"]["seed"] for r in runs} == {0, 1, 2}
    pooled = {e["factor"]: e["effect"] for e in ab.factor_effects(study.records, "test_bleu", True)}
    assert pooled["A"] == pytest.approx(0.4, abs=0.01)  # the tilt: a1 holds 7 runs at b1, 3 at b0
    fair = {e["factor"]: e["effect"] for e in ab.factor_effects(runs, "test_bleu", True)}
    assert fair["A"] == pytest.approx(0.0, abs=1e-9) and fair["B"] == pytest.approx(2.0)
    claim = ab.Claim("factorial", "b1 wins, A does not matter", winners=(("B", "b1"),))
    (row,) = ab.check_claims([study], [claim], trivial_of=lambda study: None)
    assert row["measured"] == "B: b1 (over the 3 seeds every cell has)"
    assert row["verdict"] == "agrees on 1 of 1 factors"
    # a cell without a run of some seed: that seed is not complete; no cell at all: none is
    (part,) = ab.stored_studies(
        [r for r in complete if r["config"]["seed"] != 2 or r is complete[0]]
    )
    assert ab.balanced_runs(part)[1] == [0, 1]
    (empty,) = ab.stored_studies(complete[:9])  # (a1, b1) has no run
    assert ab.balanced_runs(empty) == ([], [])
    # every cell has a run, but no seed has one in every cell: nothing to read yet
    crossed_runs = [r for r in complete if r["config"]["seed"] == 0][:3] + extra
    (crossed,) = ab.stored_studies(crossed_runs, "follow-up")  # extra's seeds are 3-6
    assert ab.factorial_cells(crossed) == (4, 4) and ab.balanced_runs(crossed) == ([], [])
    (row,) = ab.check_claims([crossed], [claim], trivial_of=lambda study: None)
    assert row["verdict"] == "cannot judge"
    assert row["measured"] == "no seed has a usable run in all 4 cells yet"


def test_the_cmn_eng_factorial_has_sixteen_cells_as_its_study_defines_them():
    # seed-major order: seed 0 of the first five cells (the baseline cell among them), and a
    # second seed of the first cell
    configs = ab.run_configs("factorial", "cmn-eng", 2, "reference")
    first = [c for c in configs if c["seed"] == 0][:5] + [configs[1]]
    assert configs[1]["seed"] == 1 and configs[1]["variant"] == first[0]["variant"]
    records = [
        {**record("factorial", c["variant"], c["seed"], 20.0, task="cmn-eng"), "config": c}
        for c in first
    ]
    (study,) = ab.stored_studies(records)
    assert study.baseline == ab.baseline_variant("factorial", "cmn-eng", "reference")
    assert ab.factorial_cells(study) == (5, 16)


@pytest.mark.skipif(
    not (DATA / "tinyshakespeare" / "input.txt").exists(), reason="no Tiny Shakespeare"
)
def test_the_language_model_trivial_level_is_count_baselines_on_the_scored_tokens():
    corpus = load_language_model_corpus("tinyshakespeare")
    splits, vocab = corpus.splits, corpus.tokenizer.vocab_size
    runs = heads_study({"8": [2.0, 2.1]})
    for run in runs:
        run["metrics"]["valid_tokens"] = 5000
    (study,) = ab.stored_studies(runs)
    trivial = ab.trivial_baseline(study)
    expected = count_baselines(splits["train"], splits["valid"], splits["valid"][:5001], vocab)
    assert trivial.name == "bigram" and trivial.value == pytest.approx(expected.bigram_loss)
    assert f"{expected.unigram_loss:.3f}" in trivial.detail


def costed(study, variant, seed, value, minutes, parameters, **config):
    """A record of ``study`` whose run took ``minutes`` with a model of ``parameters``."""
    made = record(study, variant, seed, value, **config)
    made["provenance"]["wall_time_s"] = 60.0 * minutes
    if parameters is not None:
        made["metrics"]["parameters"] = parameters
    return made


def test_variant_costs_take_the_fastest_run_and_read_the_parameters_of_each_variant():
    records = [
        costed("depth", "3", 0, 1.70, 6.0, 1000, baseline=True),
        costed("depth", "3", 1, 1.71, 7.0, 1000, baseline=True),
        costed("depth", "6", 0, 1.60, 13.0, 2000),
        costed("depth", "1", 0, 1.90, 2.0, None),
    ]
    costs = ab.variant_costs(records)
    assert costs["3"] == {"parameters": 1000.0, "minutes": 6.0}  # the undisturbed run
    assert costs["6"] == {"parameters": 2000.0, "minutes": 13.0}
    assert math.isnan(costs["1"]["parameters"]) and costs["1"]["minutes"] == 2.0
    rows = {row["variant"]: row for row in ab.verdict_table(records, "valid_loss", False)}
    assert (rows["6"]["minutes"], rows["6"]["parameters"]) == (13.0, 2000.0)


def test_probe_table_reads_the_precision_a_probe_ran_at_and_orders_by_date():
    configs = ab.run_configs("heads", "tinyshakespeare", 1, "reference")[:2]
    probes = []
    for config, date, ran in zip(
        configs, ("2026-02-01", "2026-01-01"), ("fp32", None), strict=True
    ):
        made = record("probe", config["variant"], 0, 1.8, date=date)
        made["config"].update({key: config[key] for key in ("data", "model", "train")})
        if ran is not None:
            made["provenance"]["precision"] = ran
        probes.append(made)
    rows = ab.probe_table(probes)
    assert [row["candidate"] for row in rows] == [configs[1]["variant"], configs[0]["variant"]]
    assert configs[0]["train"]["precision"] == "auto"
    assert [row["precision"] for row in rows] == ["auto", "fp32"]  # asked for; what ran
    assert rows[0]["updates"] == configs[1]["train"]["max_steps"] and rows[0]["value"] == 1.8
    assert rows[0]["batch"] == "16 x 128 characters"  # the reference profile's windows
    translation = record("probe", "base", 0, 25.0, task="multi30k", date="2026-03-01")
    translation["config"].update(ab.run_configs("heads", "multi30k", 1, "reference")[0])
    translation["config"]["data"].update({"max_tokens": 1234, "bpe_vocab_size": 567})
    assert ab.probe_table([translation])[0]["batch"] == "1234 positions, BPE 567"


def test_every_stored_study_gets_a_verdict_table():
    studies = ab.stored_studies(ResultsStore(STORED).records())
    assert studies, "results/ablation holds no real study"
    for study in studies:
        rows = ab.verdict_table(study.records, study.metric, study.higher_is_better)
        assert sum(row["verdict"] == "baseline" for row in rows) == 1, study.title
        # No comparison of the baseline with its own runs under another name.
        twins = ab.baseline_twins(study.records)
        assert {row["variant"] for row in rows if row["verdict"] == ab.SAME_RUNS} == twins
        assert all(row["difference"] != 0 or row["variant"] == study.baseline for row in rows)


def test_plan_progress_counts_stored_runs_of_every_planned_study_by_their_training_config():
    configs = ab.run_configs("residual", "tinyshakespeare", 3, "reference")
    # Two runs stored, one of them under another study's name (a shared baseline counts).
    records = [
        {
            "config": {**configs[0], "study": "heads", "variant": "8"},
            "provenance": {"wall_time_s": 90},
        },
        {"config": configs[4], "provenance": {"wall_time_s": 150}},
    ]
    rows = {(row["task"], row["study"]): row for row in ab.plan_progress(records)}
    assert set(rows) == {(task, study) for task, studies in ab.PLAN.items() for study in studies}
    row = rows[("tinyshakespeare", "residual")]
    assert (row["runs"], row["stored"], row["minutes"], row["s per run"]) == (6, 2, 4.0, 120)
    assert row["status"] == "4 to run"
    # the heads study's baseline is the same training config as the residual study's
    assert rows[("tinyshakespeare", "heads")]["stored"] == 1
    assert rows[("multi30k", "table3")]["stored"] == 0
    # the plan's seeds: 3, and 5 where the spread demanded more (PLAN_SEEDS)
    assert ab.plan_seeds("tinyshakespeare", "residual") == 3
    positional = ab.run_configs("positional", "multi30k", 5, "reference")
    assert rows[("multi30k", "positional")]["runs"] == len(positional) == 6 * 5
    three = {(row["task"], row["study"]): row for row in ab.plan_progress(records, seeds=3)}
    assert three[("multi30k", "positional")]["runs"] == 6 * 3
    done = [{"config": c, "provenance": {"wall_time_s": 60}} for c in configs]
    assert ab.plan_progress(done)[3]["status"] == "done"


def test_seed_spread_reads_the_shared_baseline_and_the_difference_three_seeds_resolve():
    configs = ab.run_configs("residual", "tinyshakespeare", 3, "reference")
    values = {0: 1.70, 1: 1.72, 2: 1.71}
    records = [
        {"config": c, "metrics": {"valid_loss": values[c["seed"]] if c["baseline"] else 2.5}}
        for c in configs
    ]
    study = ab.StoredStudy("tinyshakespeare", "residual", "reference", tuple(records))
    (row,) = ab.seed_spread([study, study])  # one baseline, however many studies share it
    assert row["seeds"] == 3 and math.isclose(row["mean"], 1.71)
    assert math.isclose(row["std"], statistics.stdev(values.values()))
    expected = stats.t.ppf(0.975, 4) * row["std"] * math.sqrt(2 / 3)
    assert math.isclose(row["resolvable difference"], expected, rel_tol=1e-6)
    # the same difference is what Welch's interval of two such 3-seed variants spans
    low, high = stats.ttest_ind(
        [1.0, 1.02, 1.01], [1.0, 1.02, 1.01], equal_var=False
    ).confidence_interval()
    assert math.isclose(high, expected, rel_tol=1e-6)


def test_counted_pluralises_unless_one():
    assert [ab.counted(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]


# -- statistics as planned: the seeds fixed first, the detectable difference ---------------------


def test_the_primary_analysis_of_a_stored_study_reads_only_its_planned_seeds():
    """Table 3 trained seeds 3 and 4 after its 3-seed analysis (PLAN_SEEDS): its verdicts come
    from seeds 0-2; all five appear only in the labelled follow-up."""
    records = ResultsStore(STORED).records()
    primary = {(s.task, s.study, s.profile): s for s in ab.stored_studies(records)}
    follow_up = {(s.task, s.study, s.profile): s for s in ab.stored_studies(records, "follow-up")}
    table3 = primary[("multi30k", "table3", "reference")]
    assert {r["config"]["seed"] for r in table3.records} == {0, 1, 2}
    assert not table3.follow_up and "follow-up" not in table3.title
    for study in primary.values():
        assert all(r["config"]["seed"] < ab.PLANNED_SEEDS for r in study.records)
    later = follow_up[("multi30k", "table3", "reference")]
    assert {r["config"]["seed"] for r in later.records} == {0, 1, 2, 3, 4}
    assert later.follow_up and "follow-up" in later.title
    # exactly the studies whose plan added seeds have a follow-up
    assert {(task, study) for task, study, _ in follow_up} == {
        key for key in ab.PLAN_SEEDS if ab.has_follow_up(*key)
    }
    rows = ab.verdict_table(table3.records, table3.metric, table3.higher_is_better)
    assert {row["n"] for row in rows if row["verdict"] != "same runs as baseline"} == {3}
    with pytest.raises(ValueError, match="planned, follow-up"):
        ab.stored_studies(records, "all")


def test_detectable_difference_is_found_with_the_stated_power():
    """Cohen's table: d = 1.325 for 10 + 10 runs at alpha 0.05 and 80 % power; and simulated
    two-sided t-tests at that difference reject about 80 % of the time."""
    import random

    assert ab.standardized_detectable(10, 10) == pytest.approx(1.3249, abs=2e-3)
    assert ab.standardized_detectable(3, 3) > ab.standardized_detectable(5, 5)
    assert ab.standardized_detectable(3, 3, alpha=0.05 / 17) > ab.standardized_detectable(3, 3)
    spread = [0.0, 1.0, 2.0]  # std 1 on either side
    effect = ab.detectable_difference(spread, [x + 5 for x in spread])
    assert effect == pytest.approx(ab.standardized_detectable(3, 3))
    generator = random.Random(0)
    rejected = 0
    for _ in range(4000):
        first = [generator.gauss(0, 1) for _ in range(3)]
        second = [generator.gauss(effect, 1) for _ in range(3)]
        rejected += stats.ttest_ind(second, first).pvalue < 0.05
    assert rejected / 4000 == pytest.approx(0.8, abs=0.03)
    assert math.isnan(ab.detectable_difference([1.0], [2.0, 3.0]))


def test_verdict_table_puts_the_detectable_difference_at_holms_strictest_level_beside_a_verdict():
    values = {"8": [2.40, 2.45, 2.50], "2": [2.42, 2.47, 2.62], "4": [2.0, 2.1, 2.2]}
    (study,) = ab.stored_studies(heads_study(values))
    rows = {r["variant"]: r for r in ab.verdict_table(study.records, study.metric, False)}
    baseline = next(r["variant"] for r in rows.values() if r["verdict"] == "baseline")
    assert math.isnan(rows[baseline]["detectable"])
    compared = [label for label, row in rows.items() if label != baseline]
    for label in compared:
        expected = ab.detectable_difference(values[baseline], values[label], 0.05 / len(compared))
        assert rows[label]["detectable"] == pytest.approx(expected)


def test_a_claim_from_a_study_at_the_trivial_level_measures_nothing():
    values = {"2": [2.0, 2.1, 2.2], "4": [3.0, 3.1, 3.2], "8": [3.0, 3.1, 3.0]}
    studies = ab.stored_studies(heads_study(values))
    (row,) = ab.check_claims(studies, [ab.CLAIMS[0]], trivial_of=bigram(3.05))
    assert row["at_trivial_level"] is True and row["verdict"] == "measures nothing"
    (row,) = ab.check_claims(studies, [ab.CLAIMS[0]], trivial_of=lambda study: None)
    assert row["verdict"] == "agrees"  # the same runs, judged when the baseline has learnt


def test_the_factorial_is_set_beside_the_reports_effects_in_the_reports_orientation():
    (study,) = [
        s
        for s in ab.stored_studies(ResultsStore(STORED).records())
        if s.study == "factorial" and s.profile == "reference"
    ]
    rows = {row["factor"]: row for row in ab.factorial_against_report(study)}
    assert list(rows) == list(ab.FACTORIAL_REPORT)
    runs, _ = ab.balanced_runs(study)
    for factor, levels in ab.FACTORIAL_REPORT.items():
        first, second = levels
        by_level = {
            level: [
                r["metrics"][study.metric] for r in runs if r["config"]["factors"][factor] == level
            ]
            for level in levels
        }
        ours = statistics.mean(by_level[second]) - statistics.mean(by_level[first])
        assert rows[factor]["our effect"] == pytest.approx(ours)
        assert rows[factor]["effect_low"] < ours < rows[factor]["effect_high"]
        assert rows[factor]["report effect"] == pytest.approx(levels[second] - levels[first])
    assert rows["smoothing"]["report winner"] == "ls=0.1"


def test_each_base_choice_is_read_on_validation_and_on_test_by_welch():
    def run(variant, seed, valid, test):
        made = record("token_rms_rope", variant, seed, test, task="multi30k", profile="reference")
        made["metrics"] = {"valid_bleu": valid, "test_bleu": test}
        return made

    runs = [
        *(run("rope, by init", s, v, t) for s, (v, t) in enumerate([(28, 29), (30, 30), (29, 31)])),
        *(run("rope, rms 1", s, v, t) for s, (v, t) in enumerate([(33, 34), (32, 33), (34, 33)])),
        *(run("alibi", s, v, t) for s, (v, t) in enumerate([(28, 28), (27, 29), (29, 27)])),
    ]
    rows = ab.choices_on_splits(runs)
    assert [row["other"] for row in rows] == ["rope, rms 1", "alibi"]
    first = rows[0]
    assert first["n"] == 3 and first["valid base"] == 29 and first["valid other"] == 33
    reference = stats.ttest_ind([33, 32, 34], [28, 30, 29], equal_var=False)
    assert first["valid difference"] == 4 and first["valid p"] == pytest.approx(reference.pvalue)
    low, high = reference.confidence_interval(0.95)
    assert (first["valid low"], first["valid high"]) == pytest.approx((low, high))
    assert rows[1]["test difference"] == pytest.approx(28 - 30)
    with pytest.raises(ValueError, match="need 2 runs"):
        ab.choices_on_splits(runs[:4])
