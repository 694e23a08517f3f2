"""The results store: stable keys, atomic records, provenance, train only what is missing."""

from __future__ import annotations

import pytest

from annotated_transformer.results.experiments import ResultsStore, run_key, run_or_load
from annotated_transformer.training import checkpoint

CONFIG = {"task": "copy", "profile": "smoke", "seed": 0, "model": {"d_model": 32, "n_layers": 1}}


def test_run_key_is_stable_under_key_order_and_readable():
    reordered = {"model": {"n_layers": 1, "d_model": 32}, "seed": 0, "profile": "smoke"}
    reordered["task"] = "copy"
    assert run_key(CONFIG) == run_key(reordered)
    assert run_key(CONFIG).startswith("copy-smoke-seed0-")
    assert len(run_key(CONFIG).rsplit("-", 1)[1]) == 12


@pytest.mark.parametrize(
    "change",
    [{"seed": 1}, {"profile": "cpu"}, {"model": {"d_model": 64, "n_layers": 1}}, {"extra": None}],
)
def test_run_key_changes_with_any_part_of_the_config(change):
    assert run_key({**CONFIG, **change}) != run_key(CONFIG)


def test_save_and_load_round_trip(tmp_path):
    store = ResultsStore(tmp_path)
    key = run_key(CONFIG)
    assert not store.exists(key)
    store.save(key, {"config": CONFIG, "metrics": {"ppl": float("inf"), "acc": 1.0}})
    assert store.exists(key)
    record = store.load(key)
    assert record["key"] == key and record["config"] == CONFIG
    assert record["metrics"] == {"ppl": "inf", "acc": 1.0}  # strict JSON: inf as a string


def test_a_failed_save_leaves_the_old_record_and_no_temporary_file(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    store.save("run", {"metrics": {"bleu": 1.0}})

    def failing_write(path, write):
        def broken(handle):
            handle.write(b'{"half": ')
            raise OSError("disk full")

        return original(path, broken)

    original = checkpoint.atomic_write
    monkeypatch.setattr(checkpoint, "atomic_write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        store.save("run", {"metrics": {"bleu": 2.0}})
    assert store.load("run")["metrics"] == {"bleu": 1.0}
    assert [path.name for path in tmp_path.iterdir()] == ["run.json"]


def test_save_rejects_unknown_fields_and_unsafe_keys(tmp_path):
    store = ResultsStore(tmp_path)
    with pytest.raises(ValueError, match="unknown record fields: weights"):
        store.save("run", {"weights": []})
    with pytest.raises(ValueError, match="is not accepted"):
        store.path("../escape")


def test_run_or_load_trains_only_when_missing_or_asked(tmp_path):
    store = ResultsStore(tmp_path)
    calls = []

    def train(config):
        calls.append(config)
        return {"metrics": {"accuracy": 1.0}, "history": [{"step": 1}], "samples": {"x": "y"}}

    first = run_or_load(store, CONFIG, train)
    second = run_or_load(store, CONFIG, train)
    assert len(calls) == 1 and first == second
    assert first["provenance"]["seed"] == 0 and first["history"] == [{"step": 1}]
    run_or_load(store, CONFIG, train, rerun=True)
    assert len(calls) == 2
    run_or_load(store, {**CONFIG, "seed": 1}, train)
    assert len(calls) == 3


def test_a_resumed_run_adds_its_earlier_parts_and_keeps_the_first_commit(tmp_path):
    first_code = {"git_commit": "a" * 40, "git_dirty": False}

    def train(config):
        resumed = {"wall_time_s": 1000.0, "code": first_code}
        return {"metrics": {}, "history": [], "resumed": resumed}

    record = run_or_load(ResultsStore(tmp_path), CONFIG, train)
    provenance = record["provenance"]
    assert 1000.0 <= provenance["wall_time_s"] < 1010.0
    assert provenance["git_commit"] == "a" * 40
    assert provenance["resumed"]["earlier_wall_time_s"] == 1000.0
    assert provenance["resumed"]["finished_with"]["git_commit"] != "a" * 40


def test_find_filters_on_the_config(tmp_path):
    store = ResultsStore(tmp_path)
    for task, profile in [("copy", "smoke"), ("copy", "cpu"), ("ptb", "cpu")]:
        config = {"task": task, "profile": profile, "seed": 0}
        store.save(run_key(config), {"config": config})
    assert len(store.find(task="copy")) == 2
    assert sorted(record["config"]["task"] for record in store.find(profile="cpu")) == [
        "copy",
        "ptb",
    ]
    assert store.find(task="multi30k") == []
    assert ResultsStore(tmp_path / "missing").find() == []


def test_attention_maps_are_saved_beside_the_record_and_not_listed_as_records(tmp_path):
    store = ResultsStore(tmp_path)
    maps = [{"kind": "decoder-only", "tokens": ["a", "b"], "decoder": [[[[1.0, 0.0], [0.5, 0.5]]]]}]

    def train(config):
        return {"metrics": {"loss": 1.0}, "history": [], "attention": maps}

    record = run_or_load(store, CONFIG, train)
    assert store.load_attention(record["key"]) == maps
    assert store.attention_path(record["key"]).parent == tmp_path / "attention"
    assert [r["key"] for r in store.records()] == [record["key"]]  # maps are not records
    assert store.load_attention("missing") is None
    with pytest.raises(TypeError, match="list of dicts"):
        store.save_attention("run", {"decoder": []})


def test_provenance_records_the_code_version_of_when_the_run_started(tmp_path, monkeypatch):
    from annotated_transformer.training import provenance as provenance_module

    heads = iter(["a" * 40, "b" * 40])  # HEAD before the run, then after a commit during it
    monkeypatch.setattr(
        provenance_module,
        "_git",
        lambda *arguments, cwd: next(heads) if arguments[0] == "rev-parse" else "",
    )
    record = run_or_load(ResultsStore(tmp_path), CONFIG, lambda config: {"metrics": {}})
    assert record["provenance"]["git_commit"] == "a" * 40
    assert record["provenance"]["git_dirty"] is False


def test_the_stored_ptb_leak_twin_is_never_found_as_a_result():
    """The PTB model trained without its causal mask (chapter 08's twin) is stored beside the
    causal reference run; `find` leaves it out unless asked, so that no reader (chapter 08's
    tables, curves and costs) presents it as the reference result."""
    from pathlib import Path

    from annotated_transformer.results.experiments import is_leak_twin

    store = ResultsStore(Path(__file__).resolve().parents[2] / "results")
    everything = store.find(task="ptb", profile="reference", leak_twins=True)
    twins = [record for record in everything if is_leak_twin(record)]
    assert twins and len(twins) < len(everything)  # both are stored
    found = store.find(task="ptb", profile="reference")
    assert found and not any(is_leak_twin(record) for record in found)
    assert found[0]["metrics"]["test_perplexity"] > 50  # the causal model, not the 1.05 leak
    # A translation model without a decoder mask is not a language-model leak twin.
    assert not is_leak_twin({"config": {"task": "multi30k", "model": {"arch": "encoder-only"}}})


def test_a_masked_language_model_is_neither_a_leak_nor_a_causal_result(tmp_path):
    """The report's masked PTB model is bidirectional but hides the words it is scored on: not
    a leak twin, and not found as the PTB result unless asked for (its perplexity measures
    something else)."""
    from annotated_transformer.results.experiments import is_leak_twin, is_masked_lm

    def record(key, arch, data, date):
        config = {"task": "ptb", "profile": "reference", "model": {"arch": arch}, "data": data}
        return key, {"config": config, "metrics": {}, "provenance": {"date": date}}

    store = ResultsStore(tmp_path)
    for key, value in (
        record("causal", "decoder-only", {}, "2026-01-01"),
        record("twin", "encoder-only", {}, "2026-01-02"),
        record("masked", "encoder-only", {"objective": "masked"}, "2026-01-03"),
    ):
        store.save(key, {**value, "history": [], "samples": {}})
    masked = store.load("masked")
    assert is_masked_lm(masked) and not is_leak_twin(masked)
    assert [r["config"]["model"]["arch"] for r in store.find(task="ptb")] == ["decoder-only"]
    everything = store.find(task="ptb", leak_twins=True, masked=True)
    assert [is_masked_lm(r) for r in everything] == [True, False, False]  # newest first
    assert [is_masked_lm(r) for r in store.find(task="ptb", masked=True)] == [True, False]


def test_only_chapter_08s_twin_lookup_asks_for_leak_twins():
    from pathlib import Path

    chapters = Path(__file__).resolve().parents[2] / "chapters"
    asking = [p.name for p in chapters.glob("*.ipynb") if "leak_twins=" in p.read_text()]
    assert asking == ["08_training.ipynb"]
    text = (chapters / "08_training.ipynb").read_text()
    assert text.count("leak_twins=") == 1 and "leak_twins=twin" in text


def test_chapter_08_reads_the_leak_twin_only_where_it_is_shown_as_a_leak():
    """The twin trained without the causal mask is looked up (``twin=True``) in the section on
    leaks and in the one on the report's masked model, which set it beside the causal model as
    what it is; never in the reference results, the per-task runs or the costs."""
    import json
    from pathlib import Path

    chapter = Path(__file__).resolve().parents[2] / "chapters" / "08_training.ipynb"
    allowed = ("## A perplexity that is too good is a leak", "## The report's 40.8")
    section, lookups = None, []
    for cell in json.loads(chapter.read_text())["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            headings = [line for line in text.splitlines() if line.startswith("## ")]
            section = headings[-1] if headings else section
        elif "twin=True" in text:
            lookups.append(section)
    assert lookups, "chapter 08 no longer looks the twin up: update this test"
    assert all(found and found.startswith(allowed) for found in lookups), lookups
