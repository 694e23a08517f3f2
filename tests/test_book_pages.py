"""The book's pages agree with its table of contents, and its links between pages resolve."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\((\.\./)?(chapters/[\w.-]+\.ipynb|book/[\w.-]+\.md)(#[\w-]+)?\)")


def toc_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [entry["file"] for part in toc["parts"] for entry in part["chapters"]]
    return [file for file in files if file.startswith("chapters/")]


def test_the_landing_page_lists_every_chapter_of_the_toc_in_order():
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[\]\(\.\./(chapters/\w+)\.ipynb\)", intro, flags=re.M)
    assert rows == toc_chapters()
    assert "being written" not in intro


def test_every_chapter_in_the_toc_exists_and_every_chapter_file_is_in_the_toc():
    chapters = toc_chapters()
    assert all((ROOT / f"{chapter}.ipynb").is_file() for chapter in chapters)
    assert sorted(chapters) == sorted(
        f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.ipynb")
    )


def page_texts():
    for page in sorted((ROOT / "book").glob("*.md")):
        yield page, page.read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        yield notebook, "\n".join("".join(cell["source"]) for cell in cells)


def test_every_link_between_pages_names_a_page_that_exists():
    links = 0
    for page, text in page_texts():
        for match in LINK.finditer(text):
            assert (ROOT / match.group(2)).is_file(), f"{page.name} links to {match.group(2)}"
            links += 1
    assert links >= 11  # the landing page alone links every chapter


# [text](12_decoding.ipynb), from a page to a page in its own folder
RELATIVE_LINK = re.compile(r"\]\(([\w.-]+\.(?:ipynb|md))(#[\w-]+)?\)")
# {doc}`text <target>` or {doc}`target`
DOC_ROLE = re.compile(r"\{doc\}`(?:[^`<]*<([^`>]+)>|([^`<]+))`")


def test_every_relative_link_and_doc_reference_names_a_page_that_exists():
    """Links and {doc} references relative to the page's own folder (a chapter pointing to
    another chapter) resolve too; Sphinx only warns when they do not."""
    references = 0
    for page, text in page_texts():
        for match in RELATIVE_LINK.finditer(text):
            assert (page.parent / match.group(1)).is_file(), f"{page.name} links to {match[1]}"
            references += 1
        for match in DOC_ROLE.finditer(text):
            target = page.parent / (match.group(1) or match.group(2)).strip()
            found = [target.with_suffix(suffix).is_file() for suffix in (".md", ".ipynb")]
            assert any(found), f"{page.name} has {{doc}} {target.name}, which is no page"
            references += 1
    assert references >= 5  # chapters point to chapter 12; the landing page to its neighbours


def test_every_chapter_named_by_number_exists():
    numbers = {int(chapter.split("/")[1][:2]) for chapter in toc_chapters()}
    named = 0
    for page, text in page_texts():
        for number in re.findall(r"\b[Cc]hapters? (\d\d)\b", text):
            assert int(number) in numbers, f"{page.name} names chapter {number}"
            named += 1
    assert named > 0


def test_every_bibliography_entry_is_cited_somewhere():
    """The bibliography lists every entry (`:all:`): an entry nothing cites is a stale one."""
    keys = re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(), re.M)
    text = "\n".join(text for page, text in page_texts() if page.name != "references.md")
    assert keys and [key for key in keys if key not in text] == []


def test_exercise_solutions_fold_away_their_code_and_their_output():
    """`hide-input` would leave the printed answer under the question; `hide-cell` folds both."""
    solutions = 0
    for notebook in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            # hide-input only on printing/plotting code whose output is the point (tagged so)
            if "hide-input" in tags:
                assert "boilerplate" in tags, f"{notebook.name}: a solution shows its output"
            solutions += "hide-cell" in tags
    assert solutions >= 40  # every chapter has exercises with solutions


def test_one_python_version_is_named_everywhere():
    """The README, the book's how-to page and the package metadata name the same minimum."""
    required = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text())
    assert required, "pyproject.toml names no requires-python"
    for page in (ROOT / "README.md", ROOT / "book" / "how_to_use.md"):
        named = set(re.findall(r"Python (3\.\d+) or newer", page.read_text(encoding="utf-8")))
        assert named == {required[1]}, f"{page.name} names Python {named or 'nothing'}"
