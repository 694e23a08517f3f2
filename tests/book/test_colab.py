"""Every chapter's first cell (annotated_transformer.book.colab): one address, one revision, and on
Colab a chapter that sees the stored results, tested against a local clone (no network)."""

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from annotated_transformer.book import colab
from annotated_transformer.results.experiments import ResultsStore

ROOT = Path(__file__).resolve().parents[2]


def test_every_chapter_opens_with_the_cell_that_config_yml_gives():
    url, revision = colab.read_repository(ROOT / "_config.yml")
    assert url.startswith("https://github.com/") and revision
    expected = colab.first_cell(url, revision)
    cells = colab.chapter_first_cells(ROOT)
    assert len(cells) >= 11
    stale = [path.name for path, source in cells.items() if source != expected]
    assert not stale, f"{stale}: run `python -m annotated_transformer.book.colab` to rewrite them"
    assert f'REPOSITORY = "{url}"' in expected and f'REVISION = "{revision}"' in expected


def test_the_address_lives_in_config_yml_only():
    url, _ = colab.read_repository(ROOT / "_config.yml")
    for path in [
        ROOT / "annotated_transformer" / "book" / "colab.py",
        ROOT / "book" / "how_to_use.md",
    ]:
        text = path.read_text(encoding="utf-8")
        assert "pip install -q git+" not in text  # the old unpinned install
    assert url not in (ROOT / "annotated_transformer" / "book" / "colab.py").read_text(
        encoding="utf-8"
    )


def test_read_repository_refuses_a_config_without_the_revision(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text("title: x\nrepository:\n  url: https://github.com/a/b  # here\n")
    with pytest.raises(ValueError, match="repository.branch not set"):
        colab.read_repository(config)
    config.write_text("repository:\n  url: https://github.com/a/b\n  branch: 'v1.2'\nhtml: {}\n")
    assert colab.read_repository(config) == ("https://github.com/a/b", "v1.2")
    with pytest.raises(ValueError, match="not a branch, tag or commit"):
        colab.first_cell("https://github.com/a/b", "main; rm -rf /")


def test_the_cell_does_nothing_outside_colab(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = colab.first_cell("file:///nowhere", "main", home=str(tmp_path / "course"))
    exec(compile(source, "first-cell", "exec"), {})
    assert Path.cwd() == tmp_path and not (tmp_path / "course").exists()


def test_on_a_mac_the_cell_lets_ops_mps_lacks_fall_back_to_the_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    source = colab.first_cell("file:///nowhere", "main", home=str(tmp_path / "course"))
    exec(compile(source, "first-cell", "exec"), {})
    assert os.environ["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    assert Path.cwd() == tmp_path and not (tmp_path / "course").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_on_colab_the_cell_installs_the_pinned_revision_and_the_chapter_sees_stored_results(
    tmp_path, monkeypatch
):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    home = tmp_path / "content" / "annotated-transformer"
    source = colab.first_cell(ROOT.as_uri(), commit, home=str(home))

    commands = []
    real_run = subprocess.run

    def run(command, **kwargs):  # git for real (a local clone); pip recorded, not run
        commands.append(command)
        if command[0] == "git":
            return real_run(command, **kwargs)
        return subprocess.CompletedProcess(command, 0)

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(source, "first-cell", "exec"), {})

    assert Path.cwd() == home / "chapters" and sys.path[0] == str(home)
    assert [sys.executable, "-m", "pip", "install", "--quiet", "-e", str(home)] in commands
    head = real_run(["git", "-C", str(home), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert head.stdout.strip() == commit  # the pinned revision, not the newest
    # What chapter 08 does from here: its ROOT, and its lookup of the stored real runs.
    root = Path("..") if Path("../annotated_transformer").is_dir() else Path(".")
    assert root == Path("..")
    stored = ResultsStore(root / "results").find(task="tinyshakespeare")
    assert stored and stored[0]["config"]["profile"] != "smoke"
    assert ResultsStore(root / "results" / "ablation").find(study="heads")
    # Run again (Runtime -> Run all twice): no second clone, same folder.
    commands.clear()
    monkeypatch.chdir(fresh)
    exec(compile(source, "first-cell", "exec"), {})
    assert Path.cwd() == home / "chapters" and commands == []
