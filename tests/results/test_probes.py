"""probes.py: the lever probes read side by side, on hand-made histories and on the stored ones."""

import json
from pathlib import Path

import pytest
from conftest import eval_history as history
from conftest import load_script

from annotated_transformer.results.probes import (
    PROBED_REFERENCE,
    evaluations,
    first_reaching,
    lever_rows,
    read_probed_run,
    read_probes,
    seconds_per_update,
)

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "results" / "reference" / "probes"


def test_evaluations_and_the_first_to_reach_a_level():
    rows = history(2.0, 1.6, 1.5, 1.55)
    assert evaluations(rows) == [(200, 2.0), (400, 1.6), (600, 1.5), (800, 1.55)]
    assert first_reaching(rows, 1.6) == 400  # at or below
    assert first_reaching(rows, 1.4) is None


def test_seconds_per_update_reads_the_pace_between_two_logged_updates():
    rows = [
        {"step": 25, "wall_time": 60.0},  # start-up: slow
        {"step": 50, "wall_time": 90.0},
        {"step": 100, "wall_time": 120.0},
        {"step": 100, "eval_loss": 3.0},  # a row without a wall time is not read
    ]
    assert seconds_per_update(rows, 25, 50) == pytest.approx(1.2)
    assert seconds_per_update(rows, 50, 100) == pytest.approx(0.6)
    for start, end in ((50, 75), (100, 50)):
        with pytest.raises(ValueError, match="logged: 25, 50, 100"):
            seconds_per_update(rows, start, end)


def test_lever_rows_compare_at_the_probes_stop_and_count_time_to_the_reference_level():
    reference = history(2.0, 1.7, 1.6, 1.5, 1.45)  # 1.5 at update 800
    probes = {
        "fast": {"steps": 800, "history": history(1.9, 1.5, 1.45, 1.40)},
        "slow": {"steps": 800, "history": history(2.1, 1.8, 1.7, 1.6)},
    }
    rows = lever_rows(probes, reference, {"reference": 2.0, "fast": 3.0})
    assert list(rows) == ["reference", "fast", "slow"]
    assert rows["reference"]["loss"] == 1.5 and rows["reference"]["minus_reference"] == 0
    assert rows["fast"]["minus_reference"] == pytest.approx(-0.1)
    assert rows["fast"]["updates_to_reference"] == 400
    assert rows["fast"]["minutes_to_reference"] == pytest.approx(400 * 3.0 / 60)
    assert rows["reference"]["minutes_to_reference"] == pytest.approx(800 * 2.0 / 60)
    assert rows["slow"]["updates_to_reference"] is None and "seconds_per_update" not in rows["slow"]
    with pytest.raises(ValueError, match="stop at different updates"):
        lever_rows({**probes, "long": {"steps": 1000, "history": history(1.0)}}, reference)
    with pytest.raises(ValueError, match="no evaluation at update 800"):
        lever_rows(probes, history(2.0))


# A lever, and the settings it changes (anything else must equal the reference run's; how often
# a probe evaluates changes no update).
LEVER_SETTINGS = {
    "muon": {("train", "optimizer")},
    "qk-norm": {("model", "qk_norm")},
    "relu2": {("model", "activation")},
    "dropout-0.3": {("model", "dropout")},
    "dropout-0.4": {("model", "dropout")},
    "inner-dropout-0.1": {("model", "attention_dropout"), ("model", "activation_dropout")},
    "token-rms-1": {("model", "token_rms")},
    "smoothing-0.2": {("train", "label_smoothing")},
    "bpe-5000": {("data", "bpe_vocab_size")},
    "schedule": {("train", "max_steps")},  # its own cosine, trained to its end
}


@pytest.mark.parametrize(
    ("task", "stop"),
    [
        ("tinyshakespeare", 1600),
        ("multi30k", 1000),
        ("multi30k", 2250),
        ("ptb", 1500),
        ("ptb", 4200),
        ("cmn-eng", 2000),
    ],
)
def test_each_stored_probe_is_the_reference_recipe_with_its_lever_changed_only(task, stop):
    reference = read_probed_run(ROOT, task)
    assert (reference["config"]["task"], reference["config"]["profile"]) == (task, "reference")
    probes = read_probes(PROBES, task, stop)
    if task == "tinyshakespeare":
        assert {"muon", "qk-norm"} <= set(probes)
    if not probes:
        pytest.skip(f"no {task} probe stopping at update {stop} is stored yet")
    assert set(probes) <= set(LEVER_SETTINGS)
    for lever, record in probes.items():
        changed = {
            (section, key)
            for section in ("data", "model", "train")
            for key, value in record["settings"][section].items()
            if key != "eval_every" and reference["config"][section].get(key) != value
        }
        assert changed == LEVER_SETTINGS[lever], lever
        # the probe ran the reference's schedule (stopped early), so its curve is comparable
        assert record["settings"]["train"]["max_steps"] == reference["config"]["train"]["max_steps"]
        for step, loss in evaluations(record["history"]):
            assert step % 50 == 0 and 0 < loss < 10
    assert json.loads((PROBES / "tinyshakespeare-step-times.json").read_text())["rounds"] >= 6


def test_the_probed_run_of_a_task_judged_on_its_cpu_run_is_that_run():
    """cmn-eng's probes change the recipe of its CPU run (probes dir), the others' a stored
    reference record; a task without probes is refused with the ones that have them."""
    cpu_run = read_probed_run(ROOT, "cmn-eng")
    assert cpu_run["key"] == PROBED_REFERENCE["cmn-eng"]
    assert (
        cpu_run["config"]["train"]["max_steps"] == 2000
        and "CPU" in (cpu_run["provenance"]["device"])
    )
    assert read_probed_run(ROOT, "ptb")["key"] == PROBED_REFERENCE["ptb"]
    with pytest.raises(ValueError, match="tasks with probes: tinyshakespeare, multi30k"):
        read_probed_run(ROOT, "wikitext-2")


def test_a_missing_or_wrong_cpu_run_is_named_not_replaced_by_the_store(tmp_path):
    """A checkout whose CPU-run file is missing, or holds another run, is refused with the file
    named, rather than read from the results store under a key it does not hold."""
    from annotated_transformer.results.probes import CPU_RUNS, PROBES_DIRECTORY

    with pytest.raises(FileNotFoundError, match=r"cmn-eng-candidate-cpu-2000\.json"):
        read_probed_run(tmp_path, "cmn-eng")
    cpu_file = tmp_path / PROBES_DIRECTORY / CPU_RUNS["cmn-eng"]
    cpu_file.parent.mkdir(parents=True)
    cpu_file.write_text(json.dumps({"key": "cmn-eng-reference-seed0-000000000000"}))
    with pytest.raises(ValueError, match="holds run cmn-eng-reference-seed0-000000000000, not"):
        read_probed_run(tmp_path, "cmn-eng")
    cpu_file.write_text(json.dumps({"key": PROBED_REFERENCE["cmn-eng"], "history": []}))
    assert read_probed_run(tmp_path, "cmn-eng")["history"] == []


@pytest.mark.parametrize("task", list(PROBED_REFERENCE))
def test_each_defined_lever_probe_resolves_to_the_probed_run_with_its_lever_changed_only(task):
    """The definitions in scripts/reference_probes.py, run or not: the settings a probe would
    train (as the script resolves them) are the probed reference run's, but for its lever, and
    its schedule is the reference's, stopped early."""
    script = load_script("reference_probes")
    from annotated_transformer.__main__ import resolve_settings

    reference = read_probed_run(ROOT, task)["config"]
    defined = {
        name.removeprefix("reference-").rsplit("-", 1)[0]: probe
        for name, probe in script.PROBES[task].items()
        if name.startswith("reference-")
    }
    assert defined, f"{task} is named in PROBED_REFERENCE but has no lever probe"
    for lever, probe in defined.items():
        overrides = {
            key: value for key, value in probe.items() if key in ("data", "model", "train")
        }
        settings = resolve_settings(task, {}, script.assignments(script.BASE[task], overrides))
        changed = {
            (section, key)
            for section in ("data", "model", "train")
            for key, value in settings[section].items()
            if key != "eval_every" and reference[section].get(key) != value
        }
        assert changed == LEVER_SETTINGS[lever], lever
        if lever == "schedule":
            assert probe["steps"] == settings["train"]["max_steps"]
        elif task == "cmn-eng":  # the reference's schedule to its end, where that run was best
            assert probe["steps"] == settings["train"]["max_steps"]
            assert settings["train"]["max_steps"] == reference["train"]["max_steps"]
        else:  # the reference's schedule, stopped early: the curves compare update for update
            assert (
                settings["train"]["max_steps"] == reference["train"]["max_steps"] > probe["steps"]
            )


def test_a_translation_probe_decodes_the_validation_split_with_its_last_and_averaged_weights(
    tmp_path, monkeypatch
):
    """A translator's probe stores validation BLEU beside its loss (chapter 08: Multi30k's loss
    stopped separating its levers): sacreBLEU's score of the stored translations of every
    validation sentence (here the first 24: an untrained model decodes to its length limit),
    beam 4 and alpha 0.6, for the last weights and for their mean."""
    import sacrebleu

    from annotated_transformer.__main__ import resolve_settings
    from annotated_transformer.results.decoding import PAPER
    from annotated_transformer.tasks import build_task

    script = load_script("reference_probes")
    monkeypatch.setattr(script, "CHECKPOINTS", tmp_path / "checkpoints")
    monkeypatch.setattr(script, "VALID_SENTENCES", 24)
    settings = resolve_settings(
        "multi30k", {}, ["train.max_steps=4", "train.eval_every=2", "train.warmup=1"],
        profile="smoke",
    )  # fmt: skip
    record = script.probe(
        "multi30k", "t", {"steps": 4, "average": 2}, settings, out=tmp_path / "out"
    )
    references = build_task("multi30k", settings["data"]).references["valid"][:24]
    for scored in (record["valid_bleu"], record["averaged"]["valid_bleu"]):
        assert (scored["split"], scored["beam"], scored["alpha"]) == ("valid", *PAPER)
        assert len(scored["translations"]) == len(references) == 24
        bleu = sacrebleu.corpus_bleu(scored["translations"], [references])
        assert scored["bleu"] == pytest.approx(bleu.score)
    assert record["averaged"]["steps"] == [2, 4]
    # the last weights and their mean with the weights of update 2 are different models
    assert record["valid_bleu"]["translations"] != record["averaged"]["valid_bleu"]["translations"]
    stored = json.loads((tmp_path / "out" / "multi30k-t.json").read_text(encoding="utf-8"))
    assert stored["valid_bleu"] == record["valid_bleu"]
    assert not (tmp_path / "checkpoints" / "multi30k-t").exists()  # removed once stored


def test_a_translation_probe_is_paired_with_the_shipped_model_on_its_stored_translations():
    """The probe's validation translations (last or averaged weights) against the shipped model's
    from a stored comparison, without decoding: the estimate is the difference of the two corpus
    BLEUs, and records that cannot be paired are refused."""
    from annotated_transformer.metrics import corpus_bleu
    from annotated_transformer.results.probes import probe_bleu_difference

    references = [f"a dog runs on the grass number {i} today ." for i in range(40)]
    shipped_lines = [
        line.replace("dog", "cat") if i % 2 else line for i, line in enumerate(references)
    ]
    last = [line.replace("grass", "sand") if i % 3 else line for i, line in enumerate(references)]
    mean = list(references)  # the averaged weights translate every sentence right
    probe = {
        "probe": "reference-bpe-5000-2250",
        "valid_bleu": {"split": "valid", "translations": last},
        "averaged": {"valid_bleu": {"split": "valid", "translations": mean}},
    }
    shipped = {"split": "valid", "systems": [{"translations": shipped_lines}, {}]}
    difference = probe_bleu_difference(probe, shipped, references, resamples=50)
    expected = corpus_bleu(last, references).score - corpus_bleu(shipped_lines, references).score
    assert difference.estimate == pytest.approx(expected)
    assert difference.low <= difference.estimate <= difference.high
    averaged = probe_bleu_difference(probe, shipped, references, averaged=True, resamples=50)
    assert averaged.estimate == pytest.approx(100 - corpus_bleu(shipped_lines, references).score)
    assert averaged.estimate > difference.estimate
    with pytest.raises(ValueError, match="decoded 39 sentences, the shipped model 40"):
        short = {**probe, "valid_bleu": {"split": "valid", "translations": last[:-1]}}
        probe_bleu_difference(short, shipped, references)
    with pytest.raises(ValueError, match="validation split only"):
        probe_bleu_difference(probe, {**shipped, "split": "test"}, references)
    # against another system of the comparison, named by its record (a task's CPU run)
    cpu_run = {"record": "cpu", "translations": last}
    paired = {**shipped, "systems": [{"record": "gpu", "translations": shipped_lines}, cpu_run]}
    same = probe_bleu_difference(probe, paired, references, against="cpu", resamples=50)
    assert same.estimate == pytest.approx(0.0)  # the probe's last translations are that run's
    first = probe_bleu_difference(probe, paired, references, against="gpu", resamples=50)
    assert first.estimate == pytest.approx(difference.estimate)  # the named one, not the last
    assert probe_bleu_difference(probe, paired, references, resamples=50).estimate == (
        pytest.approx(difference.estimate)  # no name: the first system, as before
    )
    with pytest.raises(ValueError, match="holds gpu, cpu, not 'h100'"):
        probe_bleu_difference(probe, paired, references, against="h100")


def test_the_probe_script_names_what_it_knows_when_given_what_it_does_not():
    """``reference_probes.py TASK NAME``: an unknown task or probe stops the script before anything
    trains, with the names it knows; known names come back as given, none means all."""
    script = load_script("reference_probes")
    assert script.chosen_probes(["ptb"]) == ("ptb", list(script.PROBES["ptb"]))
    assert script.chosen_probes(["ptb", "reference-muon-1500"]) == ("ptb", ["reference-muon-1500"])
    with pytest.raises(SystemExit, match="tasks: tinyshakespeare, ptb, multi30k"):
        script.chosen_probes(["wikitext"])
    with pytest.raises(SystemExit, match=r"ptb has no probe 'reference-muon'; its probes: d384"):
        script.chosen_probes(["ptb", "reference-muon-1500", "reference-muon"])
    with pytest.raises(SystemExit, match="usage: reference_probes.py TASK"):
        script.chosen_probes([])


def test_a_probe_already_training_is_refused_before_anything_is_touched(tmp_path, monkeypatch):
    """The same probe started twice. While the first trains, its Trainer holds the run folder;
    before and after its training (reading the data, decoding, averaging, writing the record) the
    probe's own lock holds it. Either way the second start stops with the holder named and the
    probes it did not reach, reads no data, and leaves the first one's folder as it was."""
    from annotated_transformer.training.run_lock import RunLock

    script = load_script("reference_probes")
    monkeypatch.setattr(script, "CHECKPOINTS", tmp_path)
    monkeypatch.setattr(script, "build_task", lambda *a, **k: pytest.fail("the data was read"))
    folder = tmp_path / "ptb-reference-muon-1500"
    holders = {
        "the Trainer, training": folder,
        "the probe, after its training": tmp_path / ".locks" / "ptb-reference-muon-1500",
    }
    for place in holders.values():
        folder.mkdir(exist_ok=True)
        (folder / "probe.json").write_text("{}")
        (folder / "last.pt").write_text("the first run's checkpoint")
        with RunLock(place):  # held by a live process: this one
            with pytest.raises(SystemExit) as stopped:
                script.main(["ptb", "reference-muon-1500", "reference-relu2-1500"])
            message = str(stopped.value)
            assert "ptb reference-muon-1500 is already training (pid " in message
            assert message.endswith("; not run: reference-relu2-1500")
            assert (folder / "last.pt").read_text() == "the first run's checkpoint"
            assert (folder / "probe.json").is_file()


def test_a_probe_lets_go_of_its_lock_when_it_ends_or_fails(tmp_path, monkeypatch):
    script = load_script("reference_probes")
    monkeypatch.setattr(script, "CHECKPOINTS", tmp_path)
    monkeypatch.setattr(script, "train_probe", lambda *args: {"finished": args[1]})
    assert script.probe("ptb", "reference-muon-1500", {}) == {"finished": "reference-muon-1500"}

    def fails(*args):
        raise RuntimeError("a bug in the middle of a probe")

    monkeypatch.setattr(script, "train_probe", fails)
    with pytest.raises(RuntimeError, match="a bug"):
        script.probe("ptb", "reference-muon-1500", {})
    assert not (tmp_path / ".locks" / "ptb-reference-muon-1500" / "run.lock").exists()
    monkeypatch.setattr(script, "train_probe", lambda *args: "again")
    assert script.probe("ptb", "reference-muon-1500", {}) == "again"  # free to start again
