"""scripts/release.py: a tag whose _config.yml, chapters' first cells and version all name it,
cut from a clone of this repository; the branch it started on is left as it was; and on Colab a
chapter of the tag installs the tag."""

import importlib.util
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from annotated_transformer.book import colab

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    shutil.which("git") is None
    or subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0,
    reason="needs git and a git checkout",
)

spec = importlib.util.spec_from_file_location("release", ROOT / "scripts" / "release.py")
release = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release)


def git(root, *args):
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository at its HEAD, with an identity to commit as."""
    path = tmp_path_factory.mktemp("release") / "course"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(path)], check=True)
    git(path, "config", "user.name", "Release Test")
    git(path, "config", "user.email", "release@example.invalid")
    return path


def test_a_release_names_its_tag_everywhere_and_leaves_the_branch_alone(clone):
    branch, head = git(clone, "branch", "--show-current"), git(clone, "rev-parse", "HEAD")
    url, revision = colab.read_repository(clone / "_config.yml")

    commit = release.release("9.8.7", root=clone)

    assert git(clone, "rev-parse", "v9.8.7^{commit}") == commit
    assert git(clone, "rev-parse", f"{commit}^") == head  # one commit off where it started
    assert git(clone, "cat-file", "-t", "v9.8.7") == "tag"  # annotated
    # The tag: every pointer names it.
    config = clone / "at-tag.yml"
    config.write_text(git(clone, "show", "v9.8.7:_config.yml") + "\n")
    assert colab.read_repository(config) == (url, "v9.8.7")
    expected = colab.first_cell(url, "v9.8.7")
    chapters = git(clone, "ls-tree", "--name-only", "v9.8.7", "chapters/").split()
    notebooks = [name for name in chapters if name.endswith(".ipynb")]
    assert len(notebooks) >= 11
    for name in notebooks:
        cells = json.loads(git(clone, "show", f"v9.8.7:{name}"))["cells"]
        first = next(cell for cell in cells if cell["cell_type"] == "code")
        assert "".join(first["source"]) == expected, name
    assert 'version = "9.8.7"' in git(clone, "show", "v9.8.7:pyproject.toml")
    init = git(clone, "show", "v9.8.7:annotated_transformer/__init__.py")
    assert '__version__ = "9.8.7"' in init
    # What the release changed and nothing else.
    changed = git(clone, "diff", "--name-only", head, commit).split()
    assert set(changed) == {
        "_config.yml",
        "pyproject.toml",
        "annotated_transformer/__init__.py",
    } | {name for name in notebooks if revision != "v9.8.7"}
    # The branch: where it was, clean, still naming its own revision.
    assert git(clone, "branch", "--show-current") == branch
    assert git(clone, "rev-parse", "HEAD") == head
    assert git(clone, "status", "--porcelain", "--untracked-files=no") == ""
    assert colab.read_repository(clone / "_config.yml") == (url, revision)


def test_on_colab_a_chapter_of_the_tag_installs_the_tag(clone, tmp_path, monkeypatch):
    if not git(clone, "tag", "--list", "v9.8.8"):
        release.release("9.8.8", root=clone)
    commit = git(clone, "rev-parse", "v9.8.8^{commit}")
    cells = json.loads(git(clone, "show", "v9.8.8:chapters/08_training.ipynb"))["cells"]
    source = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    home = tmp_path / "content" / "annotated-transformer"
    source = source.replace(  # the tag's own cell, pointed at the clone and a local home
        json.dumps(colab.read_repository(clone / "_config.yml")[0]), json.dumps(clone.as_uri())
    ).replace(json.dumps(colab.HOME), json.dumps(str(home)))
    assert 'REVISION = "v9.8.8"' in source and clone.as_uri() in source

    real_run = subprocess.run

    def run(command, **kwargs):  # git for real (the local clone); pip not run
        if command[0] == "git":
            return real_run(command, **kwargs)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(source, "first-cell", "exec"), {})

    assert Path.cwd() == home / "chapters"
    assert git(home, "rev-parse", "HEAD") == commit
    assert colab.read_repository(home / "_config.yml")[1] == "v9.8.8"


@pytest.mark.parametrize(
    ("version", "message"),
    [("1.2", "accepted is X.Y.Z"), ("v1.2.3", "accepted is X.Y.Z"), ("9.8.7", "exists already")],
)
def test_a_bad_version_is_refused_and_nothing_changes(clone, version, message):
    if not git(clone, "tag", "--list", "v9.8.7"):
        release.release("9.8.7", root=clone)
    tags, head = git(clone, "tag", "--list"), git(clone, "rev-parse", "HEAD")
    with pytest.raises(release.ReleaseError, match=message):
        release.release(version, root=clone)
    assert git(clone, "tag", "--list") == tags and git(clone, "rev-parse", "HEAD") == head


def test_a_dirty_tree_is_refused(clone):
    readme = clone / "README.md"
    original = readme.read_text(encoding="utf-8")
    readme.write_text(original + "\nan edit not committed\n", encoding="utf-8")
    try:
        with pytest.raises(release.ReleaseError, match="uncommitted changes"):
            release.release("9.9.0", root=clone)
        assert not git(clone, "tag", "--list", "v9.9.0")
        assert readme.read_text(encoding="utf-8").endswith("an edit not committed\n")
    finally:
        readme.write_text(original, encoding="utf-8")


def test_the_command_line_says_what_was_wrong_in_one_line(capsys):
    assert release.main(["not-a-version"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "accepted is X.Y.Z" in err
    assert release.main([]) == 2
    assert "usage" in capsys.readouterr().err
