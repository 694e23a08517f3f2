"""ablation/levers.py: the lever study of a reference recipe, its arms against the newest reference
run's configs, and its rows read on hand-made records."""

import json
from pathlib import Path

import pytest
from conftest import eval_history as history
from conftest import load_script

from annotated_transformer.ablation.levers import (
    LEVER_STUDY,
    lever_study_rows,
    lever_study_runs,
    read_lever_study,
)
from annotated_transformer.results.experiments import ResultsStore

ROOT = Path(__file__).resolve().parents[2]


# What each arm of a lever study sets back, against the recipe (the task's newest reference run).
STUDY_ARMS = {
    "tinyshakespeare": {
        "recipe": {},
        "adamw": {("train", "optimizer"): ("muon", "adamw")},
        "gelu": {("model", "activation"): ("relu2", "gelu")},
    }
}


@pytest.mark.parametrize("task", list(LEVER_STUDY))
def test_each_lever_study_arm_trains_the_newest_reference_recipe_with_one_lever_set_back(task):
    """The study's runs are chapter 08's reference run of the task, seed and one lever apart: the
    model and training configs the script would build, compared field by field with that run's."""
    from annotated_transformer.results.experiments import run_key
    from annotated_transformer.tasks import build_task
    from annotated_transformer.training.fit import run_configs

    script = load_script("reference_probes")
    store = ResultsStore(ROOT / "results")
    reference = store.find(task=task, profile="reference")[0]  # newest first
    config = reference["config"]
    built = build_task(task, config["data"], seed=0)
    want_model, want_train = run_configs(built, config["model"], config["train"])
    assert reference["key"] == run_key(config) and set(LEVER_STUDY[task]) == set(STUDY_ARMS[task])
    for arm, overrides in LEVER_STUDY[task].items():
        settings = script.study_settings(task, overrides)
        assert settings["data"] == config["data"]
        model, train = run_configs(built, settings["model"], settings["train"])
        changed = {
            (section, key): (getattr(want, key), getattr(got, key))
            for section, want, got in (("model", want_model, model), ("train", want_train, train))
            for key in vars(want)
            if getattr(want, key) != getattr(got, key)
        }
        assert changed == STUDY_ARMS[task][arm], arm
        assert train.keep_evaluations >= 2  # every run also measures the averaging lever
    runs = lever_study_runs(task)
    assert runs[: len(LEVER_STUDY[task])] == [(arm, 0) for arm in LEVER_STUDY[task]]
    assert sorted(runs) == sorted((arm, seed) for arm in LEVER_STUDY[task] for seed in (0, 1, 2))
    with pytest.raises(ValueError, match="studied: tinyshakespeare"):
        lever_study_runs("copy")


def study_record(averaged: float, best: float) -> dict:
    """A lever study's record: the mean's loss, and a history whose best evaluation is ``best``."""
    return {
        "averaged": {"valid_loss": averaged},
        "history": history(best + 0.05, best, best + 0.01),
    }


def test_the_lever_study_rows_welch_for_an_arm_paired_for_the_averaging_and_holm_over_all(tmp_path):
    from scipy import stats

    recipe, adamw = [1.450, 1.455, 1.452], [1.470, 1.466, 1.479]
    best = [1.458, 1.461, 1.463]  # each recipe run's best single evaluation, above its mean
    runs = {
        "recipe": {
            seed: study_record(a, b) for seed, (a, b) in enumerate(zip(recipe, best, strict=True))
        },
        "adamw": {seed: study_record(a, a + 0.01) for seed, a in enumerate(adamw)},
        "gelu": {0: study_record(1.46, 1.47)},  # one run: no spread to judge by
    }
    for arm, records in runs.items():  # stored as the script stores them, and read back
        for seed, record in records.items():
            (tmp_path / f"tinyshakespeare-{arm}-seed{seed}.json").write_text(json.dumps(record))
    (tmp_path / "tinyshakespeare-adamw-seed7.json").write_text("{}")  # outside the plan: ignored
    assert read_lever_study(tmp_path, "tinyshakespeare") == runs
    rows = {row["lever"]: row for row in lever_study_rows(runs)}
    assert list(rows) == ["adamw", "gelu", "averaging"]
    welch = stats.ttest_ind(adamw, recipe, equal_var=False)
    adamw_row = rows["adamw"]
    assert adamw_row["difference"] == pytest.approx(sum(adamw) / 3 - sum(recipe) / 3)  # > 0: helps
    assert adamw_row["p_value"] == pytest.approx(welch.pvalue)
    assert adamw_row["low"] < adamw_row["difference"] < adamw_row["high"]
    assert adamw_row["runs"] == (3, 3) and adamw_row["detectable"] > 0
    paired = stats.ttest_rel(best, recipe)
    averaging = rows["averaging"]
    assert averaging["difference"] == pytest.approx(sum(best) / 3 - sum(recipe) / 3)
    assert averaging["p_value"] == pytest.approx(paired.pvalue)
    interval = paired.confidence_interval(0.95)
    assert (averaging["low"], averaging["high"]) == pytest.approx((interval.low, interval.high))
    assert rows["gelu"]["verdict"] == "cannot judge" and rows["gelu"]["runs"] == (3, 1)
    # Holm over the two judged rows: the smaller p doubled, the larger kept (or raised to it)
    small, large = sorted([adamw_row["p_value"], averaging["p_value"]])
    holm = sorted([adamw_row["p_holm"], averaging["p_holm"]])
    assert holm == pytest.approx([2 * small, max(2 * small, large)])
    for row in (adamw_row, averaging):
        assert row["verdict"] == ("differs" if row["p_holm"] < 0.05 else "within noise")
