"""Provenance: every field with its type, the code version and its dirty flag."""

from __future__ import annotations

import json

from annotated_transformer.training.provenance import provenance


def test_provenance_has_every_field_with_its_type():
    record = provenance(seed=3, wall_time=1.5)
    assert isinstance(record["git_commit"], str) and record["git_commit"]
    assert record["git_dirty"] in (True, False, None)
    assert record["git_commit"] != "unknown" or record["git_dirty"] is None
    for name in ("torch_version", "python_version", "device", "date", "hostname"):
        assert isinstance(record[name], str) and record[name], name
    assert record["date"].endswith("+00:00")  # UTC
    assert record["wall_time_s"] == 1.5 and record["seed"] == 3
    json.dumps(record)


def test_provenance_without_git_says_unknown(monkeypatch):
    from annotated_transformer.training import provenance as provenance_module

    monkeypatch.setattr(provenance_module, "_git", lambda *arguments, cwd: None)
    record = provenance(seed=0, wall_time=0.0)
    assert record["git_commit"] == "unknown" and record["git_dirty"] is None


def test_code_version_is_dirty_for_changed_code_but_not_for_changed_results(tmp_path):
    import subprocess

    from annotated_transformer.training.provenance import code_version

    def git(*arguments):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    (tmp_path / "package").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "package" / "code.py").write_text("x = 1\n")
    (tmp_path / "results" / "record.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    inside = tmp_path / "package"  # asked from a folder below the top, like the package's own
    clean = code_version(inside)
    assert len(clean["git_commit"]) == 40 and clean["git_dirty"] is False
    (tmp_path / "results" / "record.json").write_text('{"summary": 1}\n')  # a record rewritten
    (tmp_path / "results" / "new.json").write_text("{}\n")  # and a new one, untracked
    assert code_version(inside)["git_dirty"] is False
    (tmp_path / "results" / "summary.py").write_text("# a results helper\n")  # results: no
    (tmp_path / "out.ipynb").write_text("{}\n")  # an output notebook, a log: not code
    (tmp_path / "run.log").write_text("ok\n")
    assert code_version(inside)["git_dirty"] is False
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "new_run.py").write_text("x = 1\n")  # a script not committed: dirty
    assert code_version(inside)["git_dirty"] is True
    (tmp_path / "scripts" / "new_run.py").unlink()
    (tmp_path / "package" / "code.py").write_text("x = 2\n")  # the code changed: dirty
    assert code_version(inside)["git_dirty"] is True
