"""scripts/compare_translators.py: two translators' test translations paired, the difference with
its bootstrap interval stored; folders that are no models, or models of different tasks, refused."""

import importlib.util
import json
from pathlib import Path

import pytest

from annotated_transformer.metrics import bleu_difference, corpus_bleu

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "compare_translators", ROOT / "scripts" / "compare_translators.py"
)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)

REFERENCES = ["a man rides a bike .", "two dogs play in the snow .", "a girl reads a book ."]
SYSTEMS = {
    "old": ["a man rides a bicycle .", "two dogs are in the snow .", "a girl is reading ."],
    "new": ["a man rides a bike .", "two dogs play in snow .", "a girl reads a book ."],
}


def fake_decode(references=REFERENCES, task="multi30k"):
    def decode(folder, split):
        name = Path(folder).name
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


@pytest.fixture
def patched(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "OUT", tmp_path)
    monkeypatch.setattr(script, "is_pretrained", lambda folder: True)
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
        lambda folder, split: (other if "new" in str(folder) else fake_decode())(folder, split),
    )
    with pytest.raises(SystemExit):
        script.main(["models/old", "models/new"])
    assert "different tasks or splits" in capsys.readouterr().err
    assert not list(patched.iterdir())  # nothing stored
