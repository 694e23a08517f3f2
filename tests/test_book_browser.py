"""The built book, loaded page by page in headless Chromium from a local server.

For every page in _toc.yml this checks what a reader would otherwise find out the hard way: that
nothing is fetched from another host (the book works offline), that the math is typeset, that
every image and every ipywidgets view is drawn, that no script fails, and that the page fits a
desktop window and a phone screen (nothing widens the page; what is wider than the text column
scrolls inside its own box). Every page is screenshotted at both widths, into the folder that
AT_BOOK_SCREENSHOTS names or a new temporary one; the run prints where.

Needs the book built at _build/html (`make book`) and Debian's Chromium (`apt-get install -y
chromium`; another binary can be named with AT_CHROMIUM). Playwright drives that binary; it never
downloads a browser of its own.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import sync_playwright

from annotated_transformer.book.toc import toc_pages

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.built_book  # needs _build/html: not in the package-tests job

SITE = Path(os.environ.get("AT_BOOK_SITE", ROOT / "_build" / "html"))  # another build: set it
CHROMIUM = Path(os.environ.get("AT_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOST = "127.0.0.1"
LOCAL_SCHEMES = {"data", "blob", "about"}
# A page settles in about 2 s on an idle 2-core machine; under the suite's other worker (a chapter
# executing, a model training) chapter 10 once took more than 30 s to reach network idle. A
# longer wait costs nothing when a page is quick, and a page that never settles still fails.
TIMEOUT_MS = 120_000
QUIET_S = 0.5  # a page has settled when no request of it has been in flight for this long
DESKTOP, PHONE = 1400, 420  # window widths in CSS pixels
WIDTHS = (DESKTOP, PHONE)
WINDOW_HEIGHT = 900


PAGES = toc_pages(ROOT / "_toc.yml")


@pytest.fixture(scope="module")
def site() -> Path:
    missing = [page for page in PAGES if not (SITE / page).is_file()]
    if missing:
        pytest.fail(f"The book is not built ({SITE} lacks {missing}): run `make book` first.")
    return SITE


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """Serve the built site on a free local port."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass  # keep pytest's output to the test results

    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer((HOST, 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Chromium with a fresh profile; requests for other hosts are recorded and refused."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: apt-get install -y chromium (or set AT_CHROMIUM).")

    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,  # Playwright passes this as --user-data-dir
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
        )
        context.set_default_timeout(TIMEOUT_MS)
        context.route("**/*", _refuse_other_hosts)
        yield context
        context.close()


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or parts.hostname == HOST


def _refuse_other_hosts(route, request) -> None:
    if _is_local(request.url):
        route.continue_()
    else:
        route.abort("blockedbyclient")


WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
WIDGET_VIEWS_DRAWN = f"""() => [...document.querySelectorAll('{WIDGET_VIEW}')].every(tag => {{
        const area = tag.previousElementSibling;
        return area && area.classList.contains('widget-subarea') &&
            area.querySelector('.jupyter-widgets, [class*="widget-"]') !== null &&
            area.getBoundingClientRect().height > 0;
    }})"""

IMAGES = """async () => {
    const images = [...document.images];
    images.forEach(image => { image.loading = 'eager'; });
    await Promise.all(images.map(image => image.complete ? null :
        new Promise(done => { image.onload = image.onerror = done; })));
    return images.map(image => ({
        src: image.currentSrc || image.src,
        width: image.naturalWidth,
        height: image.naturalHeight,
        shown: [image.getBoundingClientRect().width, image.getBoundingClientRect().height],
        diagram: image.closest('.tag_diagram') !== null,
    }));
}"""

MATH = """() => {
    const article = document.querySelector('article') || document.body;
    const math = [...article.querySelectorAll('.math')];
    const prose = article.cloneNode(true);
    prose.querySelectorAll('pre, code, script, style, .math').forEach(node => node.remove());
    return {
        total: math.length,
        typeset: math.filter(node => node.querySelector('mjx-container')).length,
        errors: article.querySelectorAll('mjx-merror').length,
        raw: (prose.textContent.match(/\\$\\$|\\\\\\(|\\\\\\[/g) || []).length,
    };
}"""


OVERFLOW = """() => {
    const found = [];
    const width = window.innerWidth;
    const page = document.documentElement.scrollWidth;
    if (page > width + 1) found.push(`the page is ${page} px wide in a ${width} px window`);
    const article = document.querySelector('article');
    if (!article) return found;
    const box = article.getBoundingClientRect();
    if (box.right > width + 1) found.push(`the article ends ${Math.round(box.right)} px from the left`);
    const scrolls = node => ['auto', 'scroll'].includes(getComputedStyle(node).overflowX);
    const unseen = node => getComputedStyle(node).clip !== 'auto';  // MathJax's copy for screen readers
    const excused = node => {
        if (unseen(node)) return true;
        for (let up = node.parentElement; up && up !== article; up = up.parentElement)
            if (scrolls(up) || unseen(up)) return true;
        return false;
    };
    const reported = [];
    for (const node of article.querySelectorAll('*')) {
        const rect = node.getBoundingClientRect();
        if (rect.width === 0 || rect.height === 0) continue;
        if (rect.left >= box.left - 1 && rect.right <= box.right + 1) continue;
        if (reported.some(outer => outer.contains(node)) || excused(node)) continue;
        reported.push(node);
        const name = node.tagName.toLowerCase() + [...node.classList].map(c => '.' + c).join('');
        const where = node.closest('section[id]')?.id ?? '';
        found.push(`${name} in section #${where} spans ${Math.round(rect.left)}..` +
            `${Math.round(rect.right)} px, the article ${Math.round(box.left)}..` +
            `${Math.round(box.right)} px`);
    }
    return found;
}"""


@dataclass
class PageReport:
    """What one page did in the browser at one window width, gathered once and checked by
    several tests."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    math: dict = field(default_factory=dict)
    images: list[dict] = field(default_factory=list)
    widget_views: int = 0
    widgets_drawn: bool = True
    overflow: list[str] = field(default_factory=list)


def open_settled(page, url: str) -> None:
    """Load ``url`` in ``page`` and wait until no request of the page has been in flight for
    QUIET_S: Playwright's "networkidle", counted here from the page's own request events, since
    its built-in wait now and then never fires although every request has finished (seen twice on
    chapter 10 in CI; microsoft/playwright#19835). A page still loading after TIMEOUT_MS fails,
    naming what it waits for."""
    in_flight: set[object] = set()
    last_change = [time.monotonic()]

    def started(request) -> None:
        in_flight.add(request)
        last_change[0] = time.monotonic()

    def ended(request) -> None:
        in_flight.discard(request)
        last_change[0] = time.monotonic()

    page.on("request", started)
    page.on("requestfinished", ended)
    page.on("requestfailed", ended)
    page.goto(url, wait_until="load")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while in_flight or time.monotonic() - last_change[0] < QUIET_S:
        if time.monotonic() > deadline:
            pending = sorted(request.url for request in in_flight)
            raise PlaywrightTimeoutError(f"{url} still loading after {TIMEOUT_MS} ms: {pending}")
        page.wait_for_timeout(100)  # lets Playwright deliver the page's events meanwhile


def visit(browser, url: str, width: int, screenshot: Path) -> PageReport:
    """Open a page in a window `width` CSS pixels wide, wait until its scripts have settled,
    record what it did, and save a screenshot of the whole page."""
    report = PageReport()

    def on_console(message) -> None:
        if message.type == "error":
            report.errors.append(f"console: {message.text} ({message.location.get('url')})")

    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": WINDOW_HEIGHT})
    page.on("request", lambda request: report.requests.append(request.url))
    page.on("pageerror", lambda error: report.errors.append(f"uncaught: {error}"))
    page.on("console", on_console)
    try:
        open_settled(page, url)
        # MathJax 3 typesets asynchronously; startup.promise settles when the page is done.
        page.evaluate("async () => { if (window.MathJax?.startup?.promise) "
                      "await window.MathJax.startup.promise; }")  # fmt: skip
        report.widget_views = page.locator(WIDGET_VIEW).count()
        if report.widget_views:
            try:
                page.wait_for_function(WIDGET_VIEWS_DRAWN, timeout=TIMEOUT_MS)
            except PlaywrightTimeoutError:
                report.widgets_drawn = False
        report.images = page.evaluate(IMAGES)
        report.math = page.evaluate(MATH)
        report.overflow = page.evaluate(OVERFLOW)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=screenshot, full_page=True)
    finally:
        page.close()
    return report


@pytest.fixture(scope="module")
def screenshots(pytestconfig) -> Iterator[Path]:
    """The folder the screenshots go to: AT_BOOK_SCREENSHOTS, or a new temporary folder (kept,
    to be looked at); named on the terminal when the module's tests are done."""
    named = os.environ.get("AT_BOOK_SCREENSHOTS")
    folder = Path(named) if named else Path(tempfile.mkdtemp(prefix="book-screenshots-"))
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nScreenshots of the book's pages at {WIDTHS} px: {folder}")


@pytest.fixture(scope="module")
def reports(browser, server, screenshots):
    """Each page's report at each width; a page is visited the first time a test asks for it."""
    cache: dict[tuple[str, int], PageReport] = {}

    def report(path: str, width: int = DESKTOP) -> PageReport:
        if (path, width) not in cache:
            name = path.removesuffix(".html").replace("/", "-")
            png = screenshots / f"{width}px" / f"{name}.png"
            cache[path, width] = visit(browser, server + path, width, png)
        return cache[path, width]

    return report


def short(url: str) -> str:
    return url if len(url) < 120 else url[:117] + "..."


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", PAGES)
def test_page_fetches_nothing_from_other_hosts(reports, path, width):
    leaks = sorted({short(url) for url in reports(path, width).requests if not _is_local(url)})
    assert not leaks, f"{path} requested other hosts:\n" + "\n".join(leaks)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", PAGES)
def test_page_has_no_javascript_errors(reports, path, width):
    errors = reports(path, width).errors
    assert not errors, f"{path} at {width} px logged errors:\n" + "\n".join(errors)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", PAGES)
def test_page_fits_the_window(reports, path, width):
    """Nothing makes the page wider than the window, and nothing in the article reaches past the
    text column, unless it is inside a box that scrolls sideways."""
    overflow = reports(path, width).overflow
    assert not overflow, f"{path} at {width} px overflows:\n" + "\n".join(overflow[:10])


@pytest.mark.parametrize("path", PAGES)
def test_page_math_is_typeset(reports, path):
    math = reports(path).math
    assert math["typeset"] == math["total"], f"{path}: math left untypeset: {math}"
    assert math["errors"] == 0, f"{path}: MathJax could not typeset some math: {math}"
    assert math["raw"] == 0, f"{path}: raw TeX delimiters in the prose: {math}"


@pytest.mark.parametrize("path", PAGES)
def test_page_images_load(reports, path):
    broken = [short(image["src"]) for image in reports(path).images if image["width"] == 0]
    assert not broken, f"{path}: images that did not load:\n" + "\n".join(broken)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", PAGES)
def test_page_images_keep_their_proportions(reports, path, width):
    """A figure shrunk to a narrow column keeps its shape (its height follows its width)."""
    squeezed = []
    for image in reports(path, width).images:
        shown_width, shown_height = image["shown"]
        if image["width"] and image["height"] and shown_width and shown_height:
            ratio = (shown_width / shown_height) / (image["width"] / image["height"])
            if abs(ratio - 1) > 0.03:
                squeezed.append(f"{short(image['src'])}: shown at {ratio:.2f} of its proportions")
    assert not squeezed, f"{path} at {width} px squeezes images:\n" + "\n".join(squeezed)


# tests/book/test_diagrams.py keeps a diagram's smallest label 8 px high when the diagram is shown
# at least this wide (its PHONE_COLUMN): a phone may shrink a diagram to its column, no further
DIAGRAM_MIN_WIDTH = 360
ARTICLE_PADDING = 16  # px on each side of a phone's text column (the theme's 1rem)
DIAGRAM_CHAPTERS = sorted(  # the chapters with a cell tagged `diagram` (tests/book/test_diagrams.py)
    path.stem
    for path in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")
    if any("diagram" in cell["metadata"].get("tags", [])
           for cell in json.loads(path.read_text(encoding="utf-8"))["cells"])
)  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
def test_diagrams_stay_legible(reports, width):
    """The block diagrams (cells tagged `diagram`) fit the text column, as every figure does:
    on the desktop they are shown at their own size; on a phone they shrink to the column, never
    scrolling sideways, and not below the width at which their labels stay legible."""
    assert DIAGRAM_CHAPTERS, "no chapter has a cell tagged `diagram`"
    for chapter in DIAGRAM_CHAPTERS:
        path = f"chapters/{chapter}.html"
        diagrams = [image for image in reports(path, width).images if image["diagram"]]
        assert diagrams, f"{path}: no image in a cell tagged `diagram`"
        for image in diagrams:
            shown_width, natural = image["shown"][0], image["width"] / 2  # retina: drawn at 2x
            where = (
                f"{path} at {width} px shows a {natural:.0f} px diagram {shown_width:.0f} px wide"
            )
            assert shown_width <= natural + 1, f"{where}: enlarged"
            if width == DESKTOP:
                assert shown_width >= natural - 1, f"{where}: shrunk on the desktop"
            else:
                assert shown_width <= width - 2 * ARTICLE_PADDING, f"{where}: wider than the column"
                assert shown_width >= min(DIAGRAM_MIN_WIDTH, natural) - 1, f"{where}: illegible"


@pytest.mark.parametrize("path", PAGES)
def test_page_widgets_are_drawn(reports, path):
    report = reports(path)
    assert report.widgets_drawn, (
        f"{path}: not all of its {report.widget_views} ipywidgets views were drawn"
    )


def test_the_checks_are_not_vacuous(reports):
    """The book has typeset math, and every chapter has an explorer for the widget checks."""
    assert reports("book/notation.html").math["typeset"] > 0
    chapters = [path for path in PAGES if path.startswith("chapters/")]
    assert chapters, "_toc.yml lists no chapters"
    without = [path for path in chapters if not reports(path).widget_views]
    assert not without, f"chapters without an ipywidgets explorer: {without}"


def _book_assets():
    """scripts/book_assets.py, which fetches the pages' JavaScript and rewrites CDN addresses."""
    spec = importlib.util.spec_from_file_location(
        "book_assets", ROOT / "scripts" / "book_assets.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def test_cdn_addresses_in_outputs_become_local(tmp_path):
    """bertviz's require.js configuration, in a chapter's output, is pointed at the book's copy."""
    assets = _book_assets()
    page = tmp_path / "chapters" / "10_attention_visualisation.html"
    output = (
        "require.config({paths: {d3: 'https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min'}})"
    )
    local = assets.localise_page(output, page, tmp_path)
    assert local == "require.config({paths: {d3: '../_vendor/d3/dist/d3.min'}})"


def test_static_check_finds_what_a_browser_would_fetch(tmp_path):
    assets = _book_assets()
    (tmp_path / "page.html").write_text(
        '<script src="https://cdn.example/x.js"></script><a href="https://example.org">a link</a>'
        '<link rel="stylesheet" href="//cdn.example/x.css"><img src="_images/local.png">'
    )
    (tmp_path / "style.css").write_text("@font-face { src: url('https://fonts.example/f.woff2') }")
    assert assets.external_fetches(tmp_path) == [
        "page.html: https://cdn.example/x.js",
        "page.html: //cdn.example/x.css",
        "style.css: https://fonts.example/f.woff2",
    ]


# -- chapter 10: bertviz's views, drawn from the book's own copies of require.js, d3 and jQuery --

ATTENTION_CHAPTER = "chapters/10_attention_visualisation.html"
BERTVIZ_ROOTS = 'div[id^="bertviz-"]'
BERTVIZ_DRAWN = f"""() => {{
    const roots = [...document.querySelectorAll('{BERTVIZ_ROOTS}')];
    return roots.length > 0 && roots.every(root => root.querySelector('#vis svg line') !== null);
}}"""
BERTVIZ_VIEWS = f"""() => [...document.querySelectorAll('{BERTVIZ_ROOTS}')].map(root => ({{
    lines: root.querySelectorAll('#vis svg line').length,
    texts: [...root.querySelectorAll('#vis svg text')].map(node => node.textContent.trim()),
    layers: root.querySelectorAll('#layer option').length,
}}))"""


def test_attention_chapter_draws_every_bertviz_view_offline(browser, server, reports):
    """The head and model views load d3 and jQuery through require.js from the book itself (no
    request leaves 127.0.0.1, no script fails) and draw their lines and tokens."""
    report = reports(ATTENTION_CHAPTER)
    assert not [url for url in report.requests if not _is_local(url)]
    assert not report.errors
    page = browser.new_page()
    try:
        open_settled(page, server + ATTENTION_CHAPTER)
        page.wait_for_function(BERTVIZ_DRAWN, timeout=TIMEOUT_MS)
        views = page.evaluate(BERTVIZ_VIEWS)
    finally:
        page.close()
    assert len(views) == 3, "two head views (translation, characters) and one model view"
    translation, model, characters = views
    assert all(view["lines"] > 0 for view in views), views
    assert translation["layers"] > 0 and characters["layers"] > 0  # the head view's layer menu
    # The head view opens on the encoder and writes its tokens: every source ends with "</s>".
    assert "</s>" in translation["texts"]
    assert {"Heads", "Layers"} <= set(model["texts"])  # the model view's axes
    assert len(characters["texts"]) >= 2 * 10  # a short passage, one token per character


def test_the_book_prints_to_one_pdf_with_a_bookmark_per_page(site, tmp_path):
    """`make pdf` (scripts/book_pdf.py): the pages printed by the same Chromium, in order, joined.

    Run as `make pdf` runs it, in a process of its own: Playwright's sync API cannot start inside
    the browser fixture's."""
    import subprocess

    from pypdf import PdfReader

    script = ROOT / "scripts" / "book_pdf.py"
    pages = [PAGES[0], "chapters/01_attention.html"]
    out = tmp_path / "book.pdf"
    command = [sys.executable, str(script), "--site", str(site), "--out", str(out), "--pages"]
    done = subprocess.run([*command, *pages], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reader = PdfReader(out)
    titles = [item.title for item in reader.outline]
    assert len(titles) == 2 and titles[1].startswith("01. Attention")
    start = reader.get_destination_page_number(reader.outline[1])  # chapter 01's first page
    assert 0 < start < len(reader.pages)
    assert "softmax" in " ".join(page.extract_text() for page in reader.pages[start : start + 2])
    listed = subprocess.run(
        [sys.executable, "-c", f"import runpy; m = runpy.run_path({str(script)!r}); print(m['toc_pages']())"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.stdout.strip() == str(PAGES)
