"""scripts/compare_translators.py: two translators' test translations paired, the difference with
its bootstrap interval stored; folders that are no models, or models of different tasks, refused."""

import json
from pathlib import Path

import pytest
from conftest import load_script

from annotated_transformer.metrics import bleu_difference, corpus_bleu
from annotated_transformer.results.probes import read_comparison

script = load_script("compare_translators")

REFERENCES = ["a man rides a bike .", "two dogs play in the snow .", "a girl reads a book ."]
SYSTEMS = {
    "old": ["a man rides a bicycle .", "two dogs are in the snow .", "a girl is reading ."],
    "new": ["a man rides a bike .", "two dogs play in snow .", "a girl reads a book ."],
}


def fake_decode(references=REFERENCES, task="multi30k"):
    def decode(shipped, split, config):
        name = shipped.name
        return {
            "record": f"{task}-reference-{name}",
            "task": task,
            "references": references,
            "translations": SYSTEMS[name],
            "bleu": corpus_bleu(SYSTEMS[name], references).score,
            "chrf": 0.0,
            "bleu_signature": "signature",
        }

    return decode


class Shipped:
    """What load_pretrained returns, as far as the script reads it."""

    def __init__(self, folder):
        self.name = Path(folder).name
        self.metadata = {"record": f"multi30k-reference-{self.name}"}


@pytest.fixture
def patched(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "OUT", tmp_path)
    monkeypatch.setattr(script, "is_pretrained", lambda folder: True)
    monkeypatch.setattr(script, "load_pretrained", Shipped)
    monkeypatch.setattr(script, "run_record", lambda key: {"key": key, "config": {}})
    return tmp_path


def test_the_difference_of_the_paired_translations_is_stored_with_its_interval(
    patched, monkeypatch
):
    monkeypatch.setattr(script, "decode", fake_decode())
    assert script.main(["models/old", "models/new"]) == 0
    (path,) = patched.iterdir()
    assert path.name == "multi30k-translators-multi30k-reference-old-multi30k-reference-new.json"
    record = json.loads(path.read_text())
    expected = bleu_difference(SYSTEMS["old"], SYSTEMS["new"], REFERENCES, resamples=1000)
    stored = record["difference"]
    assert (stored["estimate"], stored["low"], stored["high"]) == pytest.approx(
        (expected.estimate, expected.low, expected.high)
    )
    assert stored["estimate"] > 0  # the second system is the better one here
    assert [system["translations"] for system in record["systems"]] == list(SYSTEMS.values())
    assert record["sentences"] == 3 and record["provenance"]["precision"] == "fp32"


def test_a_validation_reading_is_stored_beside_the_test_one_not_over_it(patched, monkeypatch):
    monkeypatch.setattr(script, "decode", fake_decode())
    assert script.main(["models/old", "models/new"]) == 0
    assert script.main(["models/old", "models/new", "--split", "valid"]) == 0
    names = sorted(path.name for path in patched.iterdir())
    stem = "multi30k-translators-multi30k-reference-old-multi30k-reference-new"
    assert names == [f"{stem}-valid.json", f"{stem}.json"]
    splits = [json.loads((patched / name).read_text())["split"] for name in names]
    assert splits == ["valid", "test"]
    old, new = "multi30k-reference-old", "multi30k-reference-new"
    for split in ("test", "valid"):  # what the chapter reads back: the split it asks for
        record = read_comparison(patched, "multi30k", old, new, split)
        assert record["split"] == split and record["difference"]["estimate"] > 0
    (patched / f"{stem}.json").write_text((patched / f"{stem}-valid.json").read_text())
    with pytest.raises(ValueError, match="on 'valid', not"):  # a file that is not what it says
        read_comparison(patched, "multi30k", old, new)


def test_folders_that_are_no_models_or_of_different_tasks_are_refused(patched, monkeypatch, capsys):
    monkeypatch.setattr(script, "is_pretrained", lambda folder: Path(folder).name != "nothing")
    with pytest.raises(SystemExit) as stop:
        script.main(["models/old", "models/nothing"])
    assert stop.value.code == 2 and "models/nothing is not a shipped model folder" in (
        capsys.readouterr().err
    )
    other = fake_decode(references=REFERENCES[::-1])
    monkeypatch.setattr(
        script,
        "decode",
        lambda shipped, split, config: (other if shipped.name == "new" else fake_decode())(
            shipped, split, config
        ),
    )
    with pytest.raises(SystemExit):
        script.main(["models/old", "models/new"])
    assert "different tasks or splits" in capsys.readouterr().err
    assert not list(patched.iterdir())  # nothing stored


def test_a_model_whose_run_is_not_stored_is_refused_before_any_decoding(
    patched, monkeypatch, capsys
):
    monkeypatch.setattr(
        script, "run_record", lambda key: None if key.endswith("new") else {"config": {}}
    )
    decoded = []
    monkeypatch.setattr(script, "decode", lambda *args: decoded.append(args))
    with pytest.raises(SystemExit) as stop:
        script.main(["models/old", "models/new"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and "models/new: the run its model came from" in error
    assert "multi30k-reference-new" in error and "results/reference/probes/" in error
    assert decoded == [] and not list(patched.iterdir())  # refused before decoding the first


def test_a_run_is_found_in_the_results_store_or_among_the_stored_candidates(tmp_path, monkeypatch):
    (tmp_path / "results" / "reference" / "probes").mkdir(parents=True)
    monkeypatch.setattr(script, "ROOT", tmp_path)
    monkeypatch.setattr(script, "CANDIDATES", tmp_path / "results" / "reference" / "probes")
    result = {"key": "multi30k-reference-seed0-aaa", "config": {"seed": 0}}
    candidate = {"key": "multi30k-reference-seed0-bbb", "config": {"seed": 1}}
    (tmp_path / "results" / "multi30k-reference-seed0-aaa.json").write_text(json.dumps(result))
    (tmp_path / "results" / "reference" / "probes" / "multi30k-candidate-x.json").write_text(
        json.dumps(candidate)
    )
    assert script.run_record("multi30k-reference-seed0-aaa")["config"] == {"seed": 0}
    assert script.run_record("multi30k-reference-seed0-bbb")["config"] == {"seed": 1}
    assert script.run_record("multi30k-reference-seed0-ccc") is None
