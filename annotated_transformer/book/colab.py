"""Every chapter's first cell: on Colab, the course at the revision the book names.

The repository's address and revision live in one place, the book's ``_config.yml``
(``repository.url`` and ``repository.branch``), which the book's launch buttons read too: the
Colab button opens a chapter at that revision, and the chapter's first cell clones the same
revision (shallow), installs it in place (``pip install -e``) and runs from its ``chapters/``
folder, so that the chapter sees the stored results (``../results``) and shipped models
(``../models``) exactly as in a checkout. Outside Colab it does one thing, on a Mac only: it lets
the operations Apple's GPU (MPS) lacks run on the CPU, which torch reads once, when the chapter
imports it next (the package does the same for the command line: ``annotated_transformer.training.mps``).

The cell is plain Python (no ``!``/``%`` magics), written from :func:`first_cell`; after changing
``_config.yml``, rewrite every chapter's first cell with::

    python -m annotated_transformer.colab

``tests/book/test_colab.py`` fails when a chapter's cell differs from what ``_config.yml`` gives, and
runs the cell against a local clone of the repository.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HOME = "/content/annotated-transformer"  # where the cell clones the course on Colab
MARKER = "# On Colab"  # how a chapter's first cell starts

_TEMPLATE = """\
# On Colab: the course at the revision the book names (_config.yml), with its stored results
# and shipped models, installed in place; the chapter then runs from its chapters/ folder, as in
# a checkout. On a Mac: what Apple's GPU lacks runs on the CPU (set before torch is imported).
import os
import sys

if sys.platform == "darwin":
    os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
if "google.colab" in sys.modules:
    import subprocess

    REPOSITORY = {repository}
    REVISION = {revision}  # a branch, a tag or a commit
    HOME = {home}
    if not os.path.isdir(os.path.join(HOME, "chapters")):
        subprocess.run(["git", "init", "--quiet", HOME], check=True)
        subprocess.run(
            ["git", "-C", HOME, "fetch", "--quiet", "--depth", "1", REPOSITORY, REVISION],
            check=True,
        )
        subprocess.run(["git", "-C", HOME, "checkout", "--quiet", "FETCH_HEAD"], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", HOME], check=True)
    sys.path.insert(0, HOME)  # the editable install is seen by the next kernel; this one now
    os.chdir(os.path.join(HOME, "chapters"))  # ../results, ../models: as in a checkout"""


def read_repository(config: str | Path = "_config.yml") -> tuple[str, str]:
    """``(url, revision)`` from the book's ``_config.yml`` (``repository.url`` and
    ``repository.branch``)."""
    text = Path(config).read_text(encoding="utf-8")
    section = re.search(r"^repository:\n((?:[ \t]+.*\n?|\n)*)", text, re.MULTILINE)
    values = {}
    for line in (section.group(1) if section else "").splitlines():
        key, _, value = line.split("#")[0].strip().partition(":")
        if value.strip():
            values[key.strip()] = value.strip().strip("\"'")
    missing = [key for key in ("url", "branch") if key not in values]
    if missing:
        raise ValueError(f"{config}: repository.{' and repository.'.join(missing)} not set")
    return values["url"], values["branch"]


def first_cell(repository: str, revision: str, home: str = HOME) -> str:
    """The source of every chapter's first cell."""
    if not re.fullmatch(r"[\w./-]+", revision):
        raise ValueError(f"revision={revision} is not a branch, tag or commit name")
    quoted = {
        name: json.dumps(value)
        for name, value in (("repository", repository), ("revision", revision), ("home", home))
    }
    return _TEMPLATE.format(**quoted)


def chapter_first_cells(root: str | Path = ".") -> dict[Path, str]:
    """Chapter notebook -> the source of its first code cell."""
    cells = {}
    for path in sorted(Path(root, "chapters").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
        cells[path] = "".join(code[0]["source"]) if code else ""
    return cells


def write_first_cells(root: str | Path = ".") -> list[Path]:
    """Rewrite each chapter's first cell from ``_config.yml``; the chapters changed."""
    expected = first_cell(*read_repository(Path(root, "_config.yml")))
    changed = []
    for path, source in chapter_first_cells(root).items():
        if source == expected:
            continue
        if not source.startswith(MARKER):
            raise ValueError(f"{path}: its first code cell is not the Colab cell: {source[:60]!r}")
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cell = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
        cell["source"] = expected.splitlines(keepends=True)
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", "utf-8")
        changed.append(path)
    return changed


if __name__ == "__main__":
    for changed in write_first_cells(sys.argv[1] if len(sys.argv) > 1 else "."):
        print(f"rewrote the first cell of {changed}")
