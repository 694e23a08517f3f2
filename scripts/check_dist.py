"""Check the sdist and wheel that `make dist` built, beyond `twine check`: what they hold.

    python scripts/check_dist.py DIST_DIR

- the wheel holds every module of the package in this checkout, and nothing but the package and
  its metadata (no tests, chapters, results or models);
- the sdist holds pyproject.toml, README.md and the license file when the checkout has one;
- the metadata has what an index page shows: a summary and a long description (Markdown), the
  project's URLs, classifiers, the Python versions, the license and the extras.

Exits non-zero listing every problem.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "annotated_transformer"
EXTRAS = ("book", "dev", "tensorboard")


def package_modules() -> set[str]:
    """The package's .py files in this checkout, as wheel paths."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / PACKAGE).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def check_wheel(wheel: Path) -> tuple[list[str], str]:
    """Problems with the wheel's files, and its METADATA text."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata_name,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
    problems = [f"wheel lacks {name}" for name in sorted(package_modules() - names)]
    strays = sorted(
        name for name in names if not name.startswith((f"{PACKAGE}/", metadata_name.split("/")[0]))
    )
    problems += [f"wheel holds {name}, which is not the package" for name in strays]
    return problems, metadata


def check_sdist(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        top = {
            Path(name).relative_to(Path(name).parts[0]).as_posix() for name in archive.getnames()
        }
    wanted = ["pyproject.toml", "README.md", "PKG-INFO"]
    wanted += [path.name for path in ROOT.glob("LICEN[CS]E*") if path.is_file()]
    wanted += sorted(package_modules())
    return [f"sdist lacks {name}" for name in wanted if name not in top]


def check_metadata(text: str) -> list[str]:
    message = HeaderParser().parsestr(text)
    problems = []
    for field in ("Name", "Version", "Summary", "Requires-Python", "License-Expression"):
        if not message.get(field):
            problems.append(f"metadata has no {field}")
    if message.get("Description-Content-Type") != "text/markdown":
        problems.append(
            f"Description-Content-Type is {message.get('Description-Content-Type')!r}, "
            "not 'text/markdown'"
        )
    if len(message.get_payload().strip()) < 200:  # the README, as the long description
        problems.append("metadata has no long description (the README)")
    urls = message.get_all("Project-URL") or []
    if not any(url.lower().startswith(("homepage", "source")) for url in urls):
        problems.append(f"metadata has no Homepage or Source URL: {urls}")
    classifiers = message.get_all("Classifier") or []
    if not any(c.startswith("Programming Language :: Python :: 3") for c in classifiers):
        problems.append(f"metadata has no Python classifiers: {classifiers}")
    extras = set(message.get_all("Provides-Extra") or [])
    problems += [f"metadata lacks the extra {extra!r}" for extra in EXTRAS if extra not in extras]
    return problems


def main(directory: str) -> int:
    folder = Path(directory)
    wheels, sdists = sorted(folder.glob("*.whl")), sorted(folder.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {folder}, found {wheels + sdists}")
        return 1
    problems, metadata = check_wheel(wheels[0])
    problems += check_sdist(sdists[0]) + check_metadata(metadata)
    for problem in problems:
        print(f"check_dist: {problem}")
    if not problems:
        print(f"check_dist: {wheels[0].name} and {sdists[0].name} hold the package and metadata")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
