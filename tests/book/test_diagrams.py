"""The book's diagrams: what each one says, that its grids are the package's masks, that every
label fits inside the figure without overlapping another, that its smallest label stays legible
when a phone shrinks the figure to its column, and that each is shown in its chapter."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")  # before pyplot: no window, as in the book's build

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

import annotated_transformer as at  # noqa: E402
from annotated_transformer.book import diagrams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# each diagram, the chapter that shows it, and words its labels must contain
DIAGRAMS = {
    "multi_head_attention": (
        "01_attention",
        ["$W^Q_1$", "$W^K_1$", "$W^V_1$", "$W^O$", "concat", "head h", "[B, h, T, d_k]"],
    ),
    "masks": ("02_masking", ["padding_mask", "causal_mask", "combine_masks", "query", "key"]),
    "residual_orderings": ("04_norms_and_residuals", ["post-norm", "pre-norm", "Norm", "add"]),
    "architectures": (
        "05_the_full_model",
        [
            "encoder-decoder",
            "decoder-only",
            "encoder-only",
            "cross-attention",
            "memory",
            "N×",
            "shifted right",
            "output probabilities",
            "masked (causal)",
            "bidirectional",
        ],
    ),  # fmt: skip
    "kv_cache": ("12_decoding", ["KV cache", "K", "V", "new", "read from the cache", "recompute"]),
}
# each diagram as the book draws it, and the largest grids its arguments allow
LAYOUTS = [(name, {}) for name in DIAGRAMS] + [
    ("masks", {"words": ("we", "all", "live", "in", "a", "yellow", "<pad>", "<pad>")}),
    ("kv_cache", {"steps": (4, 5, 6)}),
]
LAYOUT_IDS = [name + ("-largest" if arguments else "") for name, arguments in LAYOUTS]

# A phone shows a figure shrunk to its text column: at the 420 px window of tests/test_book_browser.py
# that is 372 CSS px (the article's 1rem padding on each side, the cell output's 1em indent); 360
# leaves a margin. There the smallest label must stay LEGIBLE px high. On the desktop (a column of
# about 750 px) a figure is shown at its own size, DESKTOP_COLUMN at most.
PHONE_COLUMN, DESKTOP_COLUMN, LEGIBLE = 360, 700, 8.0


@pytest.fixture
def draw():
    """Call a diagram function and close its figure afterwards, whatever the test does."""
    figures: list[Figure] = []

    def make(name: str, **arguments) -> Figure:
        figure = getattr(diagrams, name)(**arguments)
        figures.append(figure)
        return figure

    yield make
    for figure in figures:
        plt.close(figure)


def drawn_texts(figure: Figure) -> Iterator[Text]:
    """The text artists the figure draws: figure and axes texts, titles, the labels and tick
    labels of visible axes, legend entries; nothing empty or hidden."""
    candidates: list[Text] = list(figure.texts)
    for legend in figure.legends:
        candidates += legend.get_texts()
    for ax in figure.axes:
        candidates += ax.texts + [ax.title, ax._left_title, ax._right_title]
        if ax.axison:
            for axis in (ax.xaxis, ax.yaxis):
                candidates += [axis.label] + axis.get_majorticklabels()
        if ax.get_legend() is not None:
            candidates += ax.get_legend().get_texts()
    return (text for text in candidates if text.get_visible() and text.get_text().strip())


def shown_width(figure: Figure) -> int:
    """The width in CSS px at which the book shows the figure on the desktop: IPython's inline
    backend saves it with ``bbox_inches="tight"`` (cropped to what is drawn, plus 0.1 in on each
    side) at ``figure.dpi`` pixels an inch (twice that for its retina PNG, shown at half size)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    png = buffer.getvalue()
    assert png[12:16] == b"IHDR"
    return struct.unpack(">I", png[16:20])[0]  # the width field of the PNG header


def test_the_package_exposes_the_module_lazily():
    """``at.diagrams`` works after ``import annotated_transformer``, without the package
    importing matplotlib for everyone else (the CLI, training)."""
    assert at.diagrams is diagrams
    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        at.not_a_module  # noqa: B018
    check = "import sys, annotated_transformer; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True, cwd=ROOT)


@pytest.mark.parametrize("name", DIAGRAMS)
def test_each_diagram_is_one_figure_with_its_labels(name, draw):
    before = set(plt.get_fignums())
    figure = draw(name)
    assert isinstance(figure, Figure)
    assert set(plt.get_fignums()) - before == {figure.number}  # one new figure, its own
    width, height = figure.get_size_inches()
    assert width <= 6.2 and height <= 9.5, "narrow enough to stay legible in a phone's column"
    texts = [text.get_text() for text in drawn_texts(figure)]
    for label in DIAGRAMS[name][1]:
        assert any(label in text for text in texts), f"{name}: no label contains {label!r}"
    assert min(text.get_fontsize() for text in drawn_texts(figure)) >= 9
    plt.close(figure)
    assert set(plt.get_fignums()) == before  # closed: nothing left behind


@pytest.mark.parametrize(("name", "arguments"), LAYOUTS, ids=LAYOUT_IDS)
def test_each_diagram_stays_legible_in_a_phone_column(name, arguments, draw):
    """Shrunk to a phone's column, the smallest label is still LEGIBLE px high; on the desktop
    the figure is shown at its own size."""
    figure = draw(name, **arguments)
    width = shown_width(figure)  # CSS px on the desktop
    assert width <= DESKTOP_COLUMN, f"{name}: shown {width} px wide, wider than the desktop column"
    scale = min(1.0, PHONE_COLUMN / width)
    smallest = min(text.get_fontsize() for text in drawn_texts(figure))  # points
    pixels = smallest * figure.dpi / 72 * scale  # a point is 1/72 in; the book shows dpi px an inch
    assert pixels >= LEGIBLE, (
        f"{name}: {smallest} pt text, shown {width} px wide, is {pixels:.1f} px high in a "
        f"{PHONE_COLUMN} px column"
    )


@pytest.mark.parametrize(("name", "arguments"), LAYOUTS, ids=LAYOUT_IDS)
def test_every_label_is_inside_the_figure_and_none_overlap(name, arguments, draw):
    figure = draw(name, **arguments)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    frame = figure.bbox

    def inside(box) -> bool:
        return (
            box.x0 >= frame.x0 - 1
            and box.y0 >= frame.y0 - 1
            and box.x1 <= frame.x1 + 1
            and box.y1 <= frame.y1 + 1
        )

    boxes = []
    for text in drawn_texts(figure):
        box = text.get_window_extent(renderer)
        assert inside(box), f"{name}: {text.get_text()!r} reaches outside the figure"
        rotated = text.get_rotation() % 180 != 0
        boxes.append((text.get_text(), box.shrunk(0.9, 0.9), rotated))  # touching is fine
    for (first, one, turned), (second, other, also_turned) in combinations(boxes, 2):
        if turned and also_turned:
            continue  # the boxes of slanted tick labels overlap where their letters do not
        assert not one.overlaps(other), f"{name}: {first!r} overlaps {second!r}"
    # nor is anything else cut off at an edge: boxes, arrows, lines, grid cells, images, legends
    drawn = [*figure.legends]
    for ax in figure.axes:
        drawn += [*ax.patches, *ax.lines, *ax.images, ax]
    for artist in drawn:
        assert inside(artist.get_window_extent(renderer)), f"{name}: {artist} reaches outside"


@pytest.mark.parametrize(
    "words", [diagrams.DEFAULT_WORDS, ("a", "b", "<pad>"), ("x", "y", "z", "w")]
)
def test_the_mask_grids_are_the_package_masks(words, draw):
    tokens = torch.tensor([[0 if word == "<pad>" else 7 for word in words]])  # [1, T], pad id 0
    length = len(words)
    expected = {
        "padding": at.padding_mask(tokens, pad_id=0)[0, 0].expand(length, length),
        "causal": at.causal_mask(length),
        "combined": at.decoder_mask(tokens, pad_id=0)[0, 0],
    }
    figure = draw("masks", words=words)
    shown = {ax.get_gid(): ax.images[0].get_array() for ax in figure.axes}
    assert shown.keys() == expected.keys()
    for name, mask in expected.items():
        assert torch.equal(torch.as_tensor(shown[name].data).bool(), mask), name
    assert [label.get_text() for label in figure.axes[0].get_yticklabels()] == list(words)
    assert [label.get_text() for label in figure.axes[2].get_xticklabels()] == list(words)


def test_a_sentence_of_padding_only_or_of_one_word_is_refused():
    with pytest.raises(ValueError, match="no word other than pad"):
        diagrams.mask_grids(["<pad>", "<pad>"])
    with pytest.raises(ValueError, match="give 2 to 8 words"):
        diagrams.mask_grids(["alone"])


def test_the_kv_cache_diagram_grows_by_one_column_a_step(draw):
    """Count the coloured cells: with the cache, step t computes one key/value column and one row
    of t scores; without it, all t columns and the causal mask's t(t+1)/2 scores."""
    figure = draw("kv_cache", steps=(2, 3))
    colours = {}
    for patch in figure.axes[0].patches:
        colour = matplotlib.colors.to_hex(patch.get_facecolor())
        colours[colour] = colours.get(colour, 0) + 1
    new, cached = diagrams.ORANGE.lower(), diagrams.SKY_BLUE.lower()
    # new: per step 2 (K, V) + t scores with the cache, 2 + t without it
    assert colours[new] == 2 * ((2 + 2) + (2 + 3))
    assert colours[cached] == 2 * (1 + 2)  # K and V of the t - 1 earlier positions
    with pytest.raises(ValueError, match="each from 1 to 6"):
        diagrams.kv_cache(steps=(0, 2))


@pytest.mark.parametrize("name", DIAGRAMS)
def test_each_diagram_is_shown_in_its_chapter(name):
    chapter = ROOT / "chapters" / f"{DIAGRAMS[name][0]}.ipynb"
    cells = json.loads(chapter.read_text(encoding="utf-8"))["cells"]
    shown = [cell for cell in cells if f"diagrams.{name}()" in "".join(cell["source"])]
    assert len(shown) == 1, f"{chapter.name} does not call diagrams.{name}() once"
    assert shown[0]["cell_type"] == "code"
    # folded code; `diagram`: tests/test_book_browser.py checks it fits and stays legible on a phone
    assert set(shown[0]["metadata"].get("tags", [])) >= {"hide-input", "boilerplate", "diagram"}
