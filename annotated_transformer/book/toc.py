"""The book's table of contents (``_toc.yml``, Jupyter Book 1.x): its documents in reading order.

One walk of the file for everything that visits the pages in order: the PDF
(``scripts/book_pdf.py``) and the tests that open every page in a browser or check that every
chapter is listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml


def _files(entries: list[dict]) -> Iterator[str]:
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        for key in ("parts", "chapters", "sections"):
            yield from _files(entry.get(key, []))


def toc_documents(toc: Path) -> list[str]:
    """Every document ``toc`` lists (paths without suffix, ``chapters/01_attention``), root
    first, then parts, chapters and sections in reading order."""
    content = yaml.safe_load(toc.read_text(encoding="utf-8"))
    return [content["root"], *_files(content.get("parts", []))]


def toc_pages(toc: Path) -> list[str]:
    """The HTML page of every document in ``toc``, root first."""
    return [f"{name}.html" for name in toc_documents(toc)]
