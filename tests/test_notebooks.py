"""The chapters as files: in the table of contents, committed clean, built to one pattern."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from annotated_transformer.book import colab
from annotated_transformer.book.toc import toc_documents

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def toc_files() -> list[str]:
    return toc_documents(ROOT / "_toc.yml")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_there_are_chapters_and_each_is_in_the_table_of_contents():
    assert len(CHAPTERS) >= 7
    listed = toc_files()
    for chapter in CHAPTERS:
        assert f"chapters/{chapter.stem}" in listed, f"{chapter.name} is missing from _toc.yml"
    for entry in listed:
        assert (ROOT / f"{entry}.ipynb").exists() or (ROOT / f"{entry}.md").exists(), entry


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_cell_has_its_own_id(chapter):
    """nbformat 4.5 gives every cell an id (a cell added by hand without one makes the book build
    warn, and a later nbformat refuse the file)."""
    notebook = json.loads(chapter.read_text(encoding="utf-8"))
    assert (notebook["nbformat"], notebook["nbformat_minor"]) >= (4, 5)
    ids = [cell.get("id") for cell in notebook["cells"]]
    assert None not in ids, f"{chapter.name}: a cell without an id"
    assert len(set(ids)) == len(ids), f"{chapter.name}: two cells share an id"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_is_committed_without_outputs(chapter):
    for cell in cells(chapter):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{chapter.name}: a code cell has outputs"
            assert cell.get("execution_count") is None, f"{chapter.name}: execution counts"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_opens_with_a_title_and_the_colab_install_cell(chapter):
    chapter_cells = cells(chapter)
    number = chapter.name[:2]
    assert chapter_cells[0]["cell_type"] == "markdown"
    assert re.match(rf"# {number}\. ", source(chapter_cells[0])), "title like '# 01. Attention'"
    first_code = next(cell for cell in chapter_cells if cell["cell_type"] == "code")
    assert '"google.colab" in sys.modules' in source(first_code)
    # the cell annotated_transformer.book.colab writes from _config.yml (tests/book/test_colab.py runs it)
    assert source(first_code) == colab.first_cell(*colab.read_repository(ROOT / "_config.yml"))
    # plumbing for Colab, out of the book's sight (its output is empty elsewhere)
    assert "remove-input" in first_code["metadata"].get("tags", [])


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_checks_its_derivation_against_the_package_in_a_visible_cell(chapter):
    visible_checks = [
        cell
        for cell in cells(chapter)
        if cell["cell_type"] == "code"
        and "hide-cell" not in cell.get("metadata", {}).get("tags", [])
        and re.search(r"\bassert\b|assert_close", source(cell))
        and "at." in source(cell)
    ]
    assert visible_checks, f"{chapter.name} never asserts a derivation equals the package"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_has_exercises_with_hidden_solutions_and_a_summary(chapter):
    chapter_cells = cells(chapter)
    hidden = [
        cell
        for cell in chapter_cells
        if cell["cell_type"] == "code" and "hide-cell" in cell.get("metadata", {}).get("tags", [])
    ]
    markdown = "\n".join(source(cell) for cell in chapter_cells if cell["cell_type"] == "markdown")
    assert re.search(r"^#+ .*Exercise", markdown, re.M), f"{chapter.name} has no exercises"
    assert hidden, f"{chapter.name} has no solution behind a toggle (tag hide-cell)"
    assert re.search(r"^#+ .*Summary", markdown, re.M), f"{chapter.name} has no summary"
    assert "ipywidgets" in "".join(source(cell) for cell in chapter_cells), "no explorer"


GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`([^`]*)`")
GLUED = re.compile(r"""glue\(\s*f?(?:"([^"]+)"|'([^']+)')""")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_glue_reference_is_well_formed_and_glued_by_the_chapter(chapter):
    """`{glue:text}`name:.2f`` with a stray brace or a missing backtick renders as raw text and
    the build does not say so; and a name no code cell glues fails only at build time."""
    glued = [name for cell in cells(chapter) if cell["cell_type"] == "code"
             for pair in GLUED.findall(source(cell)) for name in pair if name]  # fmt: skip
    patterns = [re.escape(name).replace(r"\{", "{").replace(r"\}", "}") for name in glued]
    patterns = [re.sub(r"\{[^}]*\}", r"\\w+", pattern) for pattern in patterns]  # f-strings
    for cell in cells(chapter):
        if cell["cell_type"] != "markdown":
            continue
        text = source(cell)
        assert text.count("{glue") == len(GLUE_ROLE.findall(text)), cell.get("id")
        for reference in GLUE_ROLE.findall(text):
            assert re.fullmatch(r"[A-Za-z_]\w*(:[^`{}\s]*)?", reference), (
                cell.get("id"),
                reference,
            )
            name = reference.split(":")[0]
            assert any(re.fullmatch(p, name) for p in patterns), (cell.get("id"), name)
