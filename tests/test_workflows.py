"""The GitHub workflows run what the README and CI run here: make targets, nothing typed twice.

actionlint and GitHub's schema check them in `make lint`; these tests check what they mean: every
command a workflow runs (its deploy and release steps aside) is a target of this Makefile, which
`.ci/run` exercises on this machine, and the matrix covers what pyproject.toml promises.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
PUBLISHING_JOBS = {"deploy", "release"}  # talk to GitHub itself: not runnable here
MAKE = re.compile(r"make ([\w-]+)((?: [A-Z_]+=\S+)*)")


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def run_commands(name: str) -> list[tuple[str, str]]:
    """(job, command) for every `run:` of the workflow's building and testing jobs."""
    found = []
    for job_name, job in workflow(name)["jobs"].items():
        if job_name in PUBLISHING_JOBS:
            continue
        for step in job["steps"]:
            if "run" in step:
                found += [(job_name, line.strip()) for line in step["run"].splitlines() if line]
    return found


def test_there_are_the_two_workflows_and_they_run_on_push_and_tags():
    book, tests = workflow("book.yml"), workflow("tests.yml")
    book_on, tests_on = book[True], tests[True]  # YAML 1.1 reads the key `on` as True
    assert book_on["push"] == {"branches": ["main"], "tags": ["v*"]}
    assert "pull_request" in tests_on and tests_on["push"]["branches"] == ["main"]
    deploy = book["jobs"]["deploy"]
    assert deploy["if"] == "github.ref == 'refs/heads/main'"
    assert [s["uses"] for s in deploy["steps"]] == ["actions/deploy-pages@v4"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    uploads = [s for s in book["jobs"]["build"]["steps"] if "upload-pages" in s.get("uses", "")]
    assert uploads and uploads[0]["with"]["path"] == "_build/html"
    assert "startsWith(github.ref, 'refs/tags/v')" in book["jobs"]["release"]["if"]


@pytest.mark.parametrize("name", ["book.yml", "tests.yml"])
def test_every_command_a_workflow_runs_is_a_make_target(name):
    commands = run_commands(name)
    assert commands
    for job, command in commands:
        match = MAKE.fullmatch(command)
        assert match, f"{name} job {job} runs {command!r}: put it in the Makefile"
        dry = subprocess.run(
            ["make", "-n", match.group(1), *match.group(2).split()],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert dry.returncode == 0, f"{name}: make {match.group(1)}: {dry.stderr}"


def test_the_workflows_run_the_readme_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make book" in readme and "make test" in readme
    assert ("build", "make book") in run_commands("book.yml")
    assert ("full", "make test") in run_commands("tests.yml")
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_matrix_covers_every_os_and_the_oldest_and_newest_python():
    matrix = workflow("tests.yml")["jobs"]["package"]["strategy"]["matrix"]
    assert set(matrix["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.findall(r"Programming Language :: Python :: (3\.\d+)", pyproject)
    versions = sorted(declared, key=lambda v: int(v.split(".")[1]))
    assert matrix["python"] == [versions[0], versions[-1]]
    assert f'requires-python = ">={versions[0]}"' in pyproject


def test_the_package_job_leaves_out_only_the_tests_that_read_the_built_book():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\npackage-tests:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not built_book"' in recipe
    marker = re.compile(r"^pytestmark = pytest\.mark\.built_book", re.M)
    marked = [p.name for p in ROOT.glob("tests/**/*.py") if marker.search(p.read_text())]
    assert marked == ["test_book_browser.py"]


def test_the_cpu_torch_target_installs_the_pinned_torch():
    """`make cpu-torch` as the workflows run it (here pip finds torch already installed)."""
    import torch

    pinned = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert torch.__version__.split("+")[0] == pinned
    dry = subprocess.run(["make", "-n", "cpu-torch"], cwd=ROOT, capture_output=True, text=True)
    assert f'"torch=={pinned}"' in dry.stdout
