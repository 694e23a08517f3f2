"""Cut a release: a tagged commit whose every pointer to the course names that tag.

    python scripts/release.py 0.2.0            # or: make release VERSION=0.2.0

The book names one revision of the repository (``repository.branch`` in ``_config.yml``): the
launch buttons open a chapter there on Colab, and each chapter's first cell clones and installs
that same revision (``annotated_transformer.book.colab``). On ``main`` the revision is ``main``, so a
chapter opened from a book built on ``main`` installs whatever ``main`` is when it runs. A release
pins it. This script, from a clean checkout:

1. refuses a version that is not ``X.Y.Z``, a tag ``vX.Y.Z`` that exists, or a working tree with
   uncommitted changes to tracked files (one message each, exit status 2, nothing changed);
2. on a detached commit off the current one, sets the version (``pyproject.toml`` and
   ``annotated_transformer.__version__``) and ``repository.branch: vX.Y.Z``, rewrites every
   chapter's first cell from it, commits ``Release vX.Y.Z`` and tags that commit (annotated);
3. returns to the branch it started on, unchanged: ``main`` keeps installing ``main``.

The book published from the tag (``git checkout vX.Y.Z && make book``) then opens every chapter
at the tag, and the chapter installs the tag: the code, stored results and shipped models the
page was built with. Push the tag with ``git push origin vX.Y.Z``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotated_transformer.book import colab  # noqa: E402

VERSION = re.compile(r"\d+\.\d+\.\d+")


class ReleaseError(Exception):
    """What was wrong, for one line on stderr."""


def git(*args: str, root: Path = ROOT) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise ReleaseError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def set_version(root: Path, version: str) -> None:
    """``version`` in pyproject.toml's [project] table and in the package's ``__version__``."""
    for path, pattern in (
        (root / "pyproject.toml", r'(?m)^version = "[^"]*"'),
        (root / "annotated_transformer" / "__init__.py", r'(?m)^__version__ = "[^"]*"'),
    ):
        text = path.read_text(encoding="utf-8")
        new, count = re.subn(pattern, lambda m: m.group(0).split("=")[0] + f'= "{version}"', text)
        if count != 1:
            raise ReleaseError(f"{path}: expected one version line, found {count}")
        path.write_text(new, encoding="utf-8")


def set_revision(root: Path, revision: str) -> None:
    """``repository.branch`` in ``_config.yml``, then every chapter's first cell from it."""
    config = root / "_config.yml"
    text = config.read_text(encoding="utf-8")
    new, count = re.subn(
        r"(?m)^(repository:\n(?:[ \t]+.*\n)*?[ \t]+branch:[ \t]*)\S+", rf"\g<1>{revision}", text
    )
    if count != 1:
        raise ReleaseError(f"{config}: no repository.branch line to set")
    config.write_text(new, encoding="utf-8")
    if colab.read_repository(config)[1] != revision:
        raise ReleaseError(f"{config}: repository.branch did not become {revision}")
    colab.write_first_cells(root)


def release(version: str, root: Path = ROOT) -> str:
    """Tag ``v{version}`` on a commit that names it everywhere; the tag's commit hash."""
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"version={version!r}: accepted is X.Y.Z, e.g. 0.2.0")
    tag = f"v{version}"
    if git("tag", "--list", tag, root=root):
        raise ReleaseError(f"tag {tag} exists already: choose a new version")
    if git("status", "--porcelain", "--untracked-files=no", root=root):
        raise ReleaseError("the working tree has uncommitted changes: commit or stash them first")
    branch = subprocess.run(
        ["git", "-C", str(root), "symbolic-ref", "--quiet", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    back = [branch] if branch else ["--detach", git("rev-parse", "HEAD", root=root)]
    git("switch", "--quiet", "--detach", root=root)
    try:
        set_version(root, version)
        set_revision(root, tag)
        git("commit", "--quiet", "--all", "-m", f"Release {tag}", root=root)
        git("tag", "-a", tag, "-m", f"annotated-transformer {version}", root=root)
        commit = git("rev-parse", f"{tag}^{{commit}}", root=root)
    finally:
        git("reset", "--quiet", "--hard", root=root)
        git("switch", "--quiet", *back, root=root)
    return commit


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/release.py X.Y.Z", file=sys.stderr)
        return 2
    try:
        commit = release(argv[0])
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 2
    print(
        f"tagged v{argv[0]} at {commit[:12]}: its _config.yml and every chapter's first cell name "
        f"v{argv[0]}. Build the book from it (git checkout v{argv[0]} && make book) and push it "
        f"(git push origin v{argv[0]})."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
