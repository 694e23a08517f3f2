"""The stored studies as the book shows them (annotated_transformer.book.studies): the numbers a
sentence quotes are the statistics' own, the tables keep their units and signs, the factorial's
schedule factor is named for what it varies, and every headline pick of chapter 09 is stored."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import pytest
from scipy import stats

from annotated_transformer import ablation as ab
from annotated_transformer.book import studies as views
from annotated_transformer.results.experiments import ResultsStore

matplotlib.use("Agg")
STORED = Path(__file__).resolve().parents[2] / "results" / "ablation"


def record(study, variant, seed, value, *, factors=None, baseline=False, task="tinyshakespeare"):
    metric = ab.default_metric(task)[0]
    return {
        "config": {
            "study": study,
            "task": task,
            "profile": "reference",
            "variant": variant,
            "seed": seed,
            "factors": factors or {study: variant},
            "baseline": baseline,
            "evaluation": {},
        },
        "metrics": {metric: value, "parameters": 1000 * (seed + 1)},
        "history": [{"step": 10, "eval_loss": value}, {"step": 20, "eval_loss": value - 0.1}],
        "provenance": {
            "device": "CPU: Intel(R) Xeon(R) Processor (2 cores)",
            "git_commit": "0" * 40,
            "date": "2026-01-01T00:00:00",
            "wall_time_s": 60.0 * (seed + 1),
        },
    }


RUNS = {"1": [1.60, 1.62, 1.61], "8": [1.70, 1.71, 1.72], "16": [1.71, 1.69, 1.73]}


def heads(task="tinyshakespeare", runs=RUNS):
    records = [
        record("heads", label, seed, value, baseline=label == "8", task=task)
        for label, values in runs.items()
        for seed, value in enumerate(values)
    ]
    return ab.StoredStudy(task, "heads", "reference", tuple(records))


def test_a_finding_is_welchs_difference_and_interval_of_the_variant_against_the_baseline():
    found = views.finding(heads(), "1")
    reference = stats.ttest_ind(RUNS["1"], RUNS["8"], equal_var=False)
    assert found["difference"] == pytest.approx(sum(RUNS["1"]) / 3 - sum(RUNS["8"]) / 3)
    interval = reference.confidence_interval(0.95)
    assert (found["low"], found["high"]) == pytest.approx((interval.low, interval.high))
    assert found["half"] == pytest.approx((interval.high - interval.low) / 2)
    assert found["verdict"] == "better" and found["unit"] == "nats"  # lower loss: better
    assert found["base"] == pytest.approx(1.71)
    with pytest.raises(LookupError, match="no variant '2': 1, 8, 16"):
        views.finding(heads(), "2")


def test_the_findings_table_formats_each_pick_with_its_unit_sign_and_holm_verdict():
    pick = views.Pick("tinyshakespeare", "heads", "16", "16 heads", "h16")
    table = views.findings_frame(
        [heads()], [views.Pick("tinyshakespeare", "heads", "1", "1", "h1"), pick]
    )
    row = table.loc[("Tiny Shakespeare", "16 heads")]
    assert row["base"] == "1.710 nats" and row["change ± 95%"].startswith("+0.000 ± ")
    assert row["verdict"] == "within noise"
    assert table.loc[("Tiny Shakespeare", "1")]["change ± 95%"].startswith("-0.100 ± ")
    with pytest.raises(LookupError, match="no stored study multi30k/heads/reference"):
        views.find_study([heads()], "multi30k", "heads")


def test_the_factorials_optimizer_factor_is_shown_as_the_schedule_it_varies():
    assert views.relabel("absolute, layernorm, adam, ls=0") == "absolute, layernorm, constant, ls=0"
    assert views.relabel("optimizer × positional") == "schedule × positional"
    assert views.relabel("adamw, optimizers") == "adamw, optimizers"  # whole words only
    cells = [
        record(
            "factorial",
            f"{schedule}, {smoothing}",
            seed,
            20 + (schedule == "noam") + 2 * (smoothing == "ls=0.1") + 0.1 * seed,
            factors={"optimizer": schedule, "smoothing": smoothing},
            baseline=(schedule, smoothing) == ("noam", "ls=0.1"),
            task="cmn-eng",
        )
        for schedule in ("adam", "noam")
        for smoothing in ("ls=0", "ls=0.1")
        for seed in range(3)
    ]
    study = ab.StoredStudy("cmn-eng", "factorial", "reference", tuple(cells))
    assert "constant, ls=0" in views.verdict_frame(study).index
    effects = views.factorial_effect_frame(study)
    assert list(effects.index) == ["schedule", "smoothing", "schedule × smoothing"]
    assert effects.loc["schedule", "effect ± 95%"].startswith("+1.00")  # noam - constant
    main, pairs = views.factorial_figures(cells, "test_bleu")
    (pair_axes, *_) = pairs.axes
    assert pair_axes.get_title() == "schedule × smoothing: AB = +0.00"
    assert [t.get_text() for t in pair_axes.get_xticklabels()] == ["constant", "noam"]


def test_a_study_of_many_variants_is_drawn_on_its_side_with_every_label():
    many = {str(n): [1.7 + n / 100, 1.71 + n / 100] for n in range(8)}
    many["8"] = many.pop("0")
    figure = views.study_figure(heads(runs=many))
    (ax,) = figure.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == list(many)  # one variant a line
    upright = views.study_figure(heads())
    assert [t.get_text() for t in upright.axes[0].get_xticklabels()] == list(RUNS)


def test_a_token_rms_gain_is_signed_so_that_plus_is_better_for_a_loss_and_for_bleu():
    def cells(task, by_init, rms_1):
        return [
            record(
                "token_rms",
                f"sinusoidal, {size}",
                seed,
                value + 0.01 * seed,
                task=task,
                factors={"positional": "sinusoidal", "token_rms": size},
                baseline=size == "by init",
            )
            for size, value in (("by init", by_init), ("rms 1", rms_1))
            for seed in range(3)
        ]

    loss = ab.StoredStudy(
        "tinyshakespeare", "token_rms", "reference", tuple(cells("tinyshakespeare", 2.0, 1.5))
    )
    bleu = ab.StoredStudy(
        "multi30k", "token_rms", "reference", tuple(cells("multi30k", 20.0, 25.0))
    )
    assert views.gain_frame(loss, ["sinusoidal"]).loc["sinusoidal", "gain"] == pytest.approx(0.5)
    assert views.gain_frame(bleu, ["sinusoidal"]).loc["sinusoidal", "gain"] == pytest.approx(5.0)
    row = views.gain_frame(bleu, ["sinusoidal"]).loc["sinusoidal"]
    assert row["gain_low"] < row["gain"] < row["gain_high"]


def test_formatting_keeps_units_signs_and_missing_values_apart():
    assert views.with_unit(1.7087, "valid_loss") == "1.709 nats"
    assert views.with_unit(28.5955, "test_bleu") == "28.60 BLEU"
    assert views.with_unit(math.nan, "test_bleu") == ""
    assert views.plus_minus(-0.07, -0.09, -0.05, 3, "+") == "-0.070 ± 0.020"
    assert views.plus_minus(1.0, math.nan, math.nan, 2) == "1.00"
    assert views.p_text(0.000123) == "0.00012" and views.p_text(math.nan) == ""
    assert views.short_device("CPU: Intel(R) Xeon(R) Processor (2 cores)") == "Intel Xeon (2 cores)"


def test_every_headline_finding_of_chapter_09_names_a_stored_study_and_variant():
    stored = ab.stored_studies(ResultsStore(STORED).records())
    keys = [pick.key for pick in views.HEADLINE]
    assert len(keys) == len(set(keys))  # each glued under its own name
    for pick in views.HEADLINE:
        found = views.finding(views.find_study(stored, pick.task, pick.study), pick.variant)
        assert found["verdict"] in ("better", "worse", "within noise")  # a comparison, judged


def test_a_lever_study_is_shown_as_its_plan_with_each_stored_run_and_signed_worth():
    from annotated_transformer.ablation.levers import (
        LEVER_STUDY,
        LEVER_STUDY_SEEDS,
        lever_study_rows,
    )

    def run(averaged, best):
        return {
            "averaged": {"valid_loss": averaged},
            "history": [{"step": 1, "eval_loss": best + 0.1}, {"step": 2, "eval_loss": best}],
        }

    plan_of = {"arms": list(LEVER_STUDY["tinyshakespeare"]), "seeds": LEVER_STUDY_SEEDS}
    assert (views.lever_runs_frame({}, **plan_of) == "not yet run").all().all()
    runs = {
        "recipe": {0: run(1.4512, 1.4600), 1: run(1.4530, 1.4590)},
        "adamw": {0: run(1.4701, 1.48), 1: run(1.4655, 1.47)},
    }
    plan = views.lever_runs_frame(runs, **plan_of)
    assert list(plan.index) == list(LEVER_STUDY["tinyshakespeare"])  # every arm, stored or not
    assert list(plan.columns) == ["seed 0", "seed 1", "seed 2"]
    assert plan.loc["recipe", "seed 1"] == "1.4530" and plan.loc["adamw", "seed 0"] == "1.4701"
    assert plan.loc["gelu", "seed 0"] == plan.loc["recipe", "seed 2"] == "not yet run"
    rows = lever_study_rows(runs)
    shown = views.lever_verdict_frame(rows)
    adamw = next(row for row in rows if row["lever"] == "adamw")
    half = (adamw["high"] - adamw["low"]) / 2
    # set back minus kept: AdamW is worse here, so Muon is worth a positive number
    assert shown.loc["adamw", "worth ± 95% (nats)"] == f"+{adamw['difference']:.4f} ± {half:.4f}"
    assert shown.loc["adamw", "runs"] == "2 + 2"
    assert shown.loc["adamw", "verdict"] == adamw["verdict"]
    assert shown.loc["adamw", "detectable"] == f"{adamw['detectable']:.4f}"
    with_nothing = views.lever_verdict_frame(lever_study_rows({}))
    assert with_nothing.loc["averaging", "verdict"] == "cannot judge"
    assert with_nothing.loc["averaging", "worth ± 95% (nats)"] == ""  # no run: no number
