"""The built book as one PDF, for reading offline or printing (`make pdf`, after `make book`).

Each page of ``_toc.yml``, in its order, is printed by Debian's Chromium (driven by Playwright,
which the browser tests use too; no browser is downloaded) from a local server of
``_build/html`` once its math is typeset and its widgets drawn, then the pages are joined by
``pypdf`` with one bookmark per page. Jupyter Book's LaTeX builder is not used: it needs a TeX
installation and drops the notebooks' HTML outputs (tables, widgets, bertviz's views).

    python scripts/book_pdf.py [--site _build/html] [--out _build/pdf/annotated-transformer.pdf]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import sys
import tempfile
import threading
from pathlib import Path

from annotated_transformer.book import toc as book_toc

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("AT_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
TYPESET = (
    "async () => { if (window.MathJax?.startup?.promise) await window.MathJax.startup.promise; }"
)


PAGE_TIMEOUT_MS = 180_000  # per page: loading, settling, printing


def toc_pages(toc: Path = ROOT / "_toc.yml") -> list[str]:
    """The HTML page of every document in ``toc``, root first (:mod:`annotated_transformer.book.toc`)."""
    return book_toc.toc_pages(toc)


@functools.cache
def _quiet_handler(site: str) -> type:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=site, **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def print_pages(site: Path, pages: list[str], folder: Path) -> list[tuple[str, Path]]:
    """Print each page of ``site`` to ``folder``; (page title, PDF) in order."""
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _quiet_handler(str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    printed = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            page = browser.new_page()
            # A loaded machine (the test suite beside it) can take longer than Playwright's 30 s
            # for a long chapter's scripts to settle; a page that never settles still fails.
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            for index, name in enumerate(pages):
                # "load": the page's scripts, styles and images; then MathJax's typesetting and
                # the fonts. Not "networkidle", which a long-lived request can hold off for ever.
                page.goto(base + name, wait_until="load")
                page.evaluate(TYPESET)
                page.evaluate("async () => { await document.fonts.ready; }")
                path = folder / f"{index:03d}.pdf"
                page.pdf(path=str(path), format="A4", print_background=True,
                         margin={"top": "12mm", "bottom": "12mm", "left": "10mm", "right": "10mm"})  # fmt: skip
                printed.append((page.title().split("—")[0].strip() or name, path))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return printed


def join(printed: list[tuple[str, Path]], out: Path) -> int:
    """Join the printed pages into ``out`` with a bookmark per page; the number of PDF pages."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    for title, path in printed:
        start = len(writer.pages)
        writer.append(str(path))
        writer.add_outline_item(title=title, page_number=start)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as file:
        writer.write(file)
    return len(writer.pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "_build" / "pdf" / "annotated-transformer.pdf"
    )
    parser.add_argument("--pages", nargs="*", help="only these pages (default: the whole _toc.yml)")
    args = parser.parse_args(argv)
    pages = args.pages or toc_pages()
    missing = [page for page in pages if not (args.site / page).is_file()]
    if missing:
        print(f"book_pdf: {args.site} lacks {missing}: run `make book` first", file=sys.stderr)
        return 2
    if not CHROMIUM.is_file():
        print(f"book_pdf: {CHROMIUM} not found: apt-get install -y chromium (or set AT_CHROMIUM)",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="book-pdf-") as folder:
        count = join(print_pages(args.site, pages, Path(folder)), args.out)
    print(f"wrote {args.out}: {len(pages)} book pages, {count} PDF pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
