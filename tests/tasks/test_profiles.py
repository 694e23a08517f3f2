"""Run sizes (annotated_transformer.tasks.profiles) and the stored records they must keep finding."""

import json
from pathlib import Path

import pytest

from annotated_transformer import ablation as ab
from annotated_transformer.results.experiments import (
    ResultsStore,
    is_leak_twin,
    is_masked_lm,
    run_key,
    run_or_load,
)
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.profiles import (
    ABLATION,
    TRAINING,
    parse_task_list,
    run_size,
    training_config,
)
from annotated_transformer.tasks.task_options import TASKS

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_every_profile_sizes_every_task_in_one_shape():
    assert list(TRAINING) == ["smoke", "cpu", "gpu", "reference"]
    assert list(ABLATION) == ["smoke", "cpu", "gpu", "reference"]
    for family in (TRAINING, ABLATION):
        for sizes in family.values():
            for name, size in sizes.items():
                assert name in TASKS  # keyed by the names users type
                assert set(size) == {"data", "model", "train", "evaluation"}
    assert set(TRAINING["cpu"]) == set(TASKS)


def test_run_size_refuses_unknown_names_with_the_known_ones():
    with pytest.raises(
        ValueError, match="profile='fast' is not one of: smoke, cpu, gpu, reference"
    ):
        run_size("fast", "copy")
    with pytest.raises(ValueError, match="task='wmt' is not one of: cmn-eng, copy"):
        run_size("cpu", "wmt")
    with pytest.raises(ValueError, match="no ablation size under profile 'cpu'; sized: multi30k"):
        run_size("cpu", "copy", "ablation")
    assert run_size("cpu", "shakespeare") == run_size("cpu", "tinyshakespeare")  # the old name


def test_run_size_is_a_copy_so_a_caller_cannot_change_the_profile():
    run_size("smoke", "ptb")["train"]["max_steps"] = 1
    assert TRAINING["smoke"]["ptb"]["train"]["max_steps"] == 40


def test_chapter_08s_task_list_is_checked():
    assert parse_task_list("copy, shakespeare,ptb", "smoke") == ["copy", "tinyshakespeare", "ptb"]
    with pytest.raises(ValueError, match="task='foo' is not one of"):
        parse_task_list("copy,foo", "smoke")
    with pytest.raises(ValueError, match="names no task"):
        parse_task_list(" , ", "smoke")


def _stored(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def test_every_stored_chapter_08_record_loads_and_is_found_by_the_chapters_lookup():
    store = ResultsStore(RESULTS)
    records = _stored(RESULTS)
    assert {record["config"]["task"] for record in records} >= {"shakespeare", "multi30k"}
    for record in records:
        assert store.load(record["key"]) == record
        assert record["key"] == run_key(record["config"])
        # chapter 08's stored_real_run: find(task=<the typed name>); its twin lookup asks for
        # the leak twin and its ladder for the masked model, which find leaves out otherwise
        typed = "tinyshakespeare" if record["config"]["task"] == "shakespeare" else None
        found = store.find(
            task=typed or record["config"]["task"],
            leak_twins=is_leak_twin(record),
            masked=is_masked_lm(record),
        )
        assert record["key"] in [r["key"] for r in found]
    attention = {path.stem for path in (RESULTS / "attention").glob("*.json")}
    assert attention and all(store.load_attention(key) for key in attention)


@pytest.mark.parametrize("task", ["copy", "tinyshakespeare", "ptb", "multi30k"])
def test_chapter_08s_config_today_finds_the_stored_cpu_record_without_training(task):
    (record,) = ResultsStore(RESULTS).find(task=task, profile="cpu")
    built = build_task(task, run_size("cpu", task)["data"], seed=0)
    config = training_config(task, built, "cpu", 0)

    def must_not_train(config):
        raise AssertionError(f"{task}: the stored record was not found; it would train again")

    assert run_or_load(ResultsStore(RESULTS), config, must_not_train)["key"] == record["key"]


def test_every_stored_ablation_record_is_found_by_run_configs():
    records = _stored(RESULTS / "ablation")
    assert records
    for record in records:
        config = record["config"]
        configs = ab.run_configs(
            config["study"], config["task"], [config["seed"]], config["profile"]
        )
        assert record["key"] in {run_key(c) for c in configs}, record["key"]


@pytest.mark.parametrize(
    ("mps", "expected"), [(True, "cpu"), (False, "smoke")], ids=["apple-silicon", "cpu-only"]
)
def test_profile_auto_gives_a_laptop_with_mps_the_cpu_sizes(mps, expected, monkeypatch):
    import torch

    from annotated_transformer.tasks.profiles import resolve_profile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert resolve_profile("auto")[0] == expected
    assert resolve_profile("auto", "ablation")[0] == expected
