"""The book's diagrams, drawn by code (chapters 01, 02, 04, 05 and 12).

One function per diagram, each returning a new :class:`matplotlib.figure.Figure` (made by pyplot,
so ``plt.show()`` shows it and ``plt.close(fig)`` frees it). The block diagrams are drawn on one
axes whose data units are inches, flowing from the bottom up as in the paper's figures; the mask
and cache diagrams compute their grids with the package's own mask functions, so the pictures are
the real masks. Colours are the Okabe-Ito palette (distinguishable with every common form of
colour blindness) as light fills under dark text; no font is below 9 pt, and every diagram is
``WIDTH`` inches wide, so that a phone, shrinking it to its column, keeps those 9 pt at least 8 px
high (parts are stacked rather than squeezed side by side). Needs matplotlib, the ``book`` extra:
``pip install "annotated-transformer[book]"``.

    multi_head_attention()  01  X -> per-head W^Q, W^K, W^V -> attention -> concat -> W^O
    masks()                 02  padding, causal and combined masks as T x T grids
    residual_orderings()    04  post-norm and pre-norm around one sublayer
    architectures()         05  encoder-decoder, decoder-only, encoder-only
    kv_cache()              12  decoding steps with a KV cache and without one
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

try:
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from matplotlib.colors import ListedColormap, to_rgb
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Patch, Rectangle
    from matplotlib.path import Path
except ImportError as error:  # the package itself runs without matplotlib
    raise ModuleNotFoundError(
        "annotated_transformer.diagrams draws with matplotlib, which is not installed: "
        "pip install 'annotated-transformer[book]' (or pip install matplotlib)"
    ) from error

from ..masking import causal_mask, combine_masks, padding_mask

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/).
ORANGE, SKY_BLUE, GREEN, YELLOW = "#E69F00", "#56B4E9", "#009E73", "#F0E442"
BLUE, VERMILLION, PURPLE = "#0072B2", "#D55E00", "#CC79A7"
INK, EDGE, GREY = "#1A1A1A", "#333333", "#E6E6E6"
FONT, SMALL, TITLE = 10, 9, 11  # points; the book shows figures at their size, phones shrink them
# Every diagram is this many inches wide (shown 560 px wide with the book's 0.1 in margins), so on a
# phone, shrunk to a column of 360 px, its 9 pt labels stay 8 px high (tests/book/test_diagrams.py).
WIDTH = 5.4


def _tint(colour: str, strength: float = 0.45) -> tuple[float, float, float]:
    """``colour`` mixed with white: a light fill that keeps dark text readable."""
    red, green, blue = (1 - strength * (1 - channel) for channel in to_rgb(colour))
    return red, green, blue


# The fills of the block diagrams, one per kind of box.
ATTENTION, CROSS, FEED_FORWARD = _tint(SKY_BLUE), _tint(PURPLE), _tint(GREEN)
NORM, EMBEDDING, OUTPUT = _tint(YELLOW, 0.7), _tint(ORANGE, 0.35), _tint(VERMILLION, 0.3)
STACK = "#F3F3F3"


def _canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A figure of ``width`` x ``height`` inches with one bare axes whose data units are inches."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, width), ylim=(0, height), aspect="equal")
    ax.axis("off")
    return fig, ax


def _box(
    ax: Axes,
    centre: tuple[float, float],
    size: tuple[float, float],
    text: str,
    fill: object,
    *,
    fontsize: float = FONT,
) -> None:
    """A rounded box of ``size`` (width, height) inches centred on ``centre``, with ``text``."""
    (x, y), (width, height) = centre, size
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=fill,
            edgecolor=EDGE,
            linewidth=1.0,
            zorder=2,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=INK, zorder=3)


def _arrow(ax: Axes, *points: tuple[float, float], colour: str = EDGE, width: float = 1.2) -> None:
    """An arrow along the polyline ``points``, its head at the last point."""
    path = Path(list(points), [Path.MOVETO] + [Path.LINETO] * (len(points) - 1))
    ax.add_patch(
        FancyArrowPatch(
            path=path,
            arrowstyle="-|>",
            mutation_scale=11,
            color=colour,
            linewidth=width,
            shrinkA=0,
            shrinkB=0,
            joinstyle="miter",
            zorder=1,
        )
    )


def _line(ax: Axes, *points: tuple[float, float], colour: str = EDGE, width: float = 1.2) -> None:
    """A polyline without a head (a branch that an arrow continues)."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs, ys, color=colour, linewidth=width, solid_capstyle="butt", zorder=1)


def _frame(ax: Axes, left: float, bottom: float, width: float, height: float) -> None:
    """A light grey rounded frame behind boxes that belong together (a layer, a head)."""
    ax.add_patch(
        FancyBboxPatch(
            (left, bottom),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor=STACK,
            edgecolor="#8C8C8C",
            linewidth=1.0,
            zorder=0,
        )
    )


def _cell(
    ax: Axes,
    x: float,
    y: float,
    size: float,
    colour: str | tuple[float, float, float],
    hatch: str | None = None,
    style: str = "-",
) -> None:
    """One square cell of a grid at ``(x, y)``; a dotted one (``style=":"``) gets a grey edge."""
    ax.add_patch(
        Rectangle(
            (x, y),
            size,
            size,
            facecolor=colour,
            edgecolor="#8C8C8C" if style == ":" else EDGE,
            linestyle=style,
            linewidth=0.8,
            hatch=hatch,
        )
    )


def _legend_below(owner: Figure | Axes, handles: list[Patch], columns: int) -> None:
    """A frameless legend of ``handles`` centred under ``owner`` (a figure or one axes)."""
    owner.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        ncols=columns,
        fontsize=SMALL,
        frameon=False,
    )


def _stack_frame(
    ax: Axes, x: float, bottom: float, top: float, width: float, label_left: bool
) -> None:
    """The frame around a layer's sublayers, with ``N×`` outside it (left or right)."""
    _frame(ax, x - width / 2, bottom, width, top - bottom)
    side = -1 if label_left else 1
    ax.text(
        x + side * (width / 2 + 0.08),
        (bottom + top) / 2,
        "N×",
        ha="right" if side < 0 else "left",
        va="center",
        fontsize=FONT + 1,
        fontweight="bold",
        color=INK,
    )


# -- 01: multi-head attention ------------------------------------------------------------------


def multi_head_attention() -> Figure:
    """Multi-head self-attention, eq. (1) and §3.2.2 of Vaswani et al.: the input ``X`` goes to
    ``h`` heads (head 1 and head h drawn, the others elided), each with its own projections
    ``W^Q_i, W^K_i, W^V_i`` to ``d_k = d_model / h`` features and its own scaled dot-product
    attention; the heads are concatenated and ``W^O`` mixes them. The right-hand column gives each
    stage's shape as ``at.MultiHeadAttention`` computes it, all heads at once."""
    fig, ax = _canvas(WIDTH, 6.0)
    lane_width, heads = 1.45, [(0.86, "1"), (2.9, "h")]
    left, right = heads[0][0] - lane_width / 2, heads[-1][0] + lane_width / 2
    middle = (left + right) / 2
    _box(ax, (middle, 0.35), (2.7, 0.46), "input X   [B, T, d_model]", EMBEDDING)
    bus = 0.9
    _line(ax, (middle, 0.58), (middle, bus))
    _line(ax, (heads[0][0] - 0.46, bus), (heads[-1][0] + 0.46, bus))
    for x, name in heads:
        _frame(ax, x - lane_width / 2, 1.1, lane_width, 2.05)
        ax.text(x, 2.93, f"head {name}", ha="center", va="center", fontsize=FONT, color=INK)
        for offset, letter in [(-0.46, "Q"), (0.0, "K"), (0.46, "V")]:
            _arrow(ax, (x + offset, bus), (x + offset, 1.28))
            _box(ax, (x + offset, 1.5), (0.42, 0.44), f"$W^{letter}_{name}$", NORM)
            _arrow(ax, (x + offset, 1.72), (x + offset, 2.03))
        _box(
            ax, (x, 2.35), (1.33, 0.64), "scaled dot-product\nattention", ATTENTION, fontsize=SMALL
        )
        _arrow(ax, (x, 3.15), (x, 3.45))
    ax.text(middle, 2.15, "⋯", ha="center", va="center", fontsize=16)
    _box(ax, (middle, 3.7), (right - left, 0.48), "concat(head 1, …, head h)", _tint(BLUE, 0.25))
    _arrow(ax, (middle, 3.94), (middle, 4.3))
    _box(ax, (middle, 4.55), (2.7, 0.48), "output projection  $W^O$", OUTPUT)
    _arrow(ax, (middle, 4.79), (middle, 5.1))
    _box(ax, (middle, 5.33), (2.7, 0.46), "output   [B, T, d_model]", EMBEDDING)
    ax.text(
        WIDTH / 2,
        5.8,
        "multi-head attention: h heads, each of size d_k = d_model / h",
        ha="center",
        va="center",
        fontsize=TITLE,
        fontweight="bold",
        color=INK,
    )
    # the shapes as at.MultiHeadAttention computes them, all heads in one tensor
    column = 3.91
    ax.plot([column - 0.1] * 2, [1.1, 4.85], color="#8C8C8C", linewidth=0.8, linestyle=":")
    heading = "shapes,\nall heads at once"
    ax.text(column, 5.2, heading, ha="left", va="center", fontsize=SMALL, fontweight="bold")
    shapes = [
        (1.5, "one Linear (qkv),\nthen view: Q, K, V\neach [B, h, T, d_k]"),
        (
            2.35,
            r"$\mathrm{softmax}(QK^\top / \sqrt{d_k})\,V$"
            "\nweights [B, h, T, T]\nheads [B, h, T, d_k]",
        ),
        (3.7, "transpose + reshape:\n[B, T, h·d_k]\n= [B, T, d_model]"),
        (4.55, "[B, T, d_model]"),
    ]
    for y, text in shapes:
        ax.text(column, y, text, ha="left", va="center", fontsize=SMALL, color=INK)
    return fig


# -- 02: the masks -----------------------------------------------------------------------------

DEFAULT_WORDS = ("the", "cat", "sat", "down", "<pad>", "<pad>")


def mask_grids(words: Sequence[str], pad: str = "<pad>") -> dict[str, torch.Tensor]:
    """The three masks of a one-sentence batch as ``[T, T]`` bool grids (True = may attend),
    computed with the package's functions: ``padding`` (``padding_mask``, the same row for every
    query), ``causal`` (``causal_mask``) and ``combined`` (``combine_masks`` of the two)."""
    if not 2 <= len(words) <= 8:
        raise ValueError(f"mask_grids: give 2 to 8 words (a grid stays readable), got {len(words)}")
    if not any(word != pad for word in words):
        raise ValueError(f"mask_grids: words={list(words)!r} has no word other than pad={pad!r}")
    tokens = torch.tensor([[0 if word == pad else 1 for word in words]])  # [1, T]; pad id 0
    length = len(words)
    padding = padding_mask(tokens, pad_id=0)  # [1, 1, 1, T]
    causal = causal_mask(length)  # [T, T]
    combined = combine_masks(padding, causal)  # [1, 1, T, T]
    return {
        "padding": padding[0, 0].expand(length, length),
        "causal": causal,
        "combined": combined[0, 0],
    }


def masks(words: Sequence[str] = DEFAULT_WORDS, pad: str = "<pad>") -> Figure:
    """The padding mask, the causal mask and their combination (logical AND) for one padded
    sentence, as ``T x T`` grids: rows are queries, columns keys, blue cells may attend. The
    grids are :func:`mask_grids`, the package's own masks."""
    grids = mask_grids(words, pad)
    length = len(words)
    size = min(1.25, 0.25 * length)
    fig = plt.figure(figsize=(WIDTH, 1.85 + size))
    width, height = fig.get_size_inches()
    titles = {
        "padding": "padding_mask\nreal keys only",
        "causal": "causal_mask\nkey ≤ query",
        "combined": "combine_masks\npadding AND causal",
    }
    lefts = [0.72, 2.45, 3.98]  # the grids' left edges; AND and = sit in the gaps between them
    bottom = 1.15
    colours = ListedColormap([GREY, BLUE])
    for index, ((name, grid), left) in enumerate(zip(grids.items(), lefts, strict=True)):
        ax = fig.add_axes((left / width, bottom / height, size / width, size / height))
        ax.imshow(grid.int().numpy(), cmap=colours, vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(length), words, rotation=60, ha="right", fontsize=SMALL)
        ax.set_yticks(range(length), words if index == 0 else [], fontsize=SMALL)
        ax.set_xticks([position - 0.5 for position in range(1, length)], minor=True)
        ax.set_yticks([position - 0.5 for position in range(1, length)], minor=True)
        ax.grid(which="minor", color="white", linewidth=1.5)
        ax.tick_params(which="both", length=0, pad=2)
        ax.set_title(titles[name], fontsize=FONT, color=INK)
        ax.set_gid(name)
        if index == 0:
            ax.set_ylabel("query", fontsize=FONT)
        ax.set_xlabel("key", fontsize=FONT, labelpad=2)
    middle = (bottom + size / 2) / height
    for x, symbol in [(2.21, "AND"), (3.845, "=")]:
        fig.text(x / width, middle, symbol, ha="center", va="center", fontsize=TITLE, color=INK)
    _legend_below(
        fig,
        [
            Patch(facecolor=BLUE, label="may attend (True)"),
            Patch(facecolor=GREY, edgecolor="#8C8C8C", label="blocked (False)"),
        ],
        columns=2,
    )
    return fig


# -- 04: post-norm and pre-norm ----------------------------------------------------------------


def _residual_sublayer(ax: Axes, stream: float, base: float, pre_norm: bool) -> None:
    """One ordering of ``residual_orderings``, bottom-up from ``base``, the residual stream at
    ``stream``."""
    branch, add, stream_width = stream + 1.4, base + (2.9 if pre_norm else 2.4), 2.6
    top = base + 3.5  # where the stream's arrow ends, under x_{l+1}
    ax.text(stream, base + 0.2, "$x_l$", ha="center", va="center", fontsize=TITLE + 1)
    ax.text(stream, top + 0.17, "$x_{l+1}$", ha="center", va="center", fontsize=TITLE + 1)
    # the branch: fork off the stream, (Norm,) sublayer F, back into the add
    fork = base + 0.72
    ax.add_patch(Circle((stream, fork), 0.05, color=EDGE, zorder=3))
    _line(ax, (stream, fork), (branch, fork), (branch, fork + 0.12))
    sublayer = "sublayer F\n(attention or\nfeed-forward)"
    if pre_norm:
        _arrow(ax, (branch, fork + 0.12), (branch, base + 0.98))
        _box(ax, (branch, base + 1.2), (1.1, 0.44), "Norm", NORM)
        _arrow(ax, (branch, base + 1.42), (branch, base + 1.7))
        _box(ax, (branch, base + 2.1), (1.35, 0.8), sublayer, ATTENTION, fontsize=SMALL)
        _line(ax, (branch, base + 2.5), (branch, add))
    else:
        _arrow(ax, (branch, fork + 0.12), (branch, base + 1.12))
        _box(ax, (branch, base + 1.52), (1.35, 0.8), sublayer, ATTENTION, fontsize=SMALL)
        _line(ax, (branch, base + 1.92), (branch, add))
    _arrow(ax, (branch, add), (stream + 0.17, add))
    ax.add_patch(Circle((stream, add), 0.17, facecolor="white", edgecolor=EDGE, zorder=3))
    ax.text(stream, add, "+", ha="center", va="center", fontsize=TITLE + 2, zorder=4)
    ax.text(stream - 0.25, add, "add", ha="right", va="center", fontsize=SMALL, color=INK)
    # the residual stream: straight up, through a Norm only in post-norm
    _arrow(ax, (stream, base + 0.38), (stream, add - 0.17), colour=BLUE, width=stream_width)
    if pre_norm:
        _arrow(ax, (stream, add + 0.17), (stream, top), colour=BLUE, width=stream_width)
        note = "residual stream:\nnever normalised\ninside the stack"
        final = "+ one final Norm\nafter the last layer"
        ax.text(
            stream + 0.3, top + 0.12, final, ha="left", va="center", fontsize=SMALL, style="italic"
        )
    else:
        norm = base + 2.97
        _arrow(ax, (stream, add + 0.17), (stream, norm - 0.22), colour=BLUE, width=stream_width)
        _box(ax, (stream, norm), (1.1, 0.44), "Norm", NORM)
        _arrow(ax, (stream, norm + 0.22), (stream, top), colour=BLUE, width=stream_width)
        note = "residual stream:\nnormalised after\nevery sublayer"
    ax.text(stream - 0.2, base + 1.55, note, ha="right", va="center", fontsize=SMALL, color=BLUE)


def residual_orderings() -> Figure:
    """One residual sublayer ``F`` (attention or the feed-forward network) in the two orderings,
    one above the other: post-norm (the paper, §3.1), ``x + F(x)`` then ``Norm``; pre-norm
    (GPT-2), ``Norm`` on the branch only, so the residual stream (blue, straight) is never
    normalised inside the stack."""
    panel = 4.55  # the height of one ordering, its title included
    fig, ax = _canvas(WIDTH, 2 * panel + 0.1)
    stream = 2.34
    panels = [
        (panel + 0.1, False, "post-norm (the paper)", r"$x_{l+1} = \mathrm{Norm}(x_l + F(x_l))$"),
        (0.0, True, "pre-norm (GPT-2 and most since)", r"$x_{l+1} = x_l + F(\mathrm{Norm}(x_l))$"),
    ]
    for base, pre_norm, title, formula in panels:
        centre = WIDTH / 2
        ax.text(
            centre, base + 4.38, title, ha="center", va="center", fontsize=TITLE, fontweight="bold"
        )
        ax.text(centre, base + 4.06, formula, ha="center", va="center", fontsize=FONT, color=INK)
        _residual_sublayer(ax, stream, base, pre_norm)
    ax.plot([0.2, WIDTH - 0.2], [panel + 0.05] * 2, color="#8C8C8C", linewidth=0.8, linestyle=":")
    return fig


# -- 05: the three architectures ---------------------------------------------------------------

FRAME, SUBLAYER, PITCH = 1.4, 1.3, 0.68  # widths of a stack's frame and boxes; sublayer spacing


def _stack_column(
    ax: Axes,
    x: float,
    base: float,
    inputs: str,
    sublayers: Sequence[tuple[str, object]],
    outputs: str | None,
    *,
    label_left: bool = False,
    name: str | None = None,
) -> list[float]:
    """One stack of ``architectures`` bottom-up from ``base``: ``inputs`` -> embedding +
    positions -> a frame of ``sublayers`` (text, fill) marked ``N×`` -> linear + softmax ->
    ``outputs`` (None: the stack's output goes elsewhere). Returns the height of each
    sublayer's centre."""
    ax.text(x, base + 0.2, inputs, ha="center", va="center", fontsize=SMALL, color=INK)
    _arrow(ax, (x, base + 0.42), (x, base + 0.58))
    embedding = "embedding\n+ positions"
    _box(ax, (x, base + 0.78), (FRAME - 0.05, 0.4), embedding, EMBEDDING, fontsize=SMALL)
    centres = [base + 1.48 + PITCH * index for index in range(len(sublayers))]
    top = centres[-1] + 0.25
    _stack_frame(ax, x, base + 1.12, top + 0.12, FRAME, label_left)
    if name is not None:
        ax.text(
            x - FRAME / 2, top + 0.17, name, ha="left", va="bottom", fontsize=SMALL, style="italic"
        )
    previous = base + 0.98
    for centre, (text, fill) in zip(centres, sublayers, strict=True):
        _arrow(ax, (x, previous), (x, centre - 0.25))
        _box(ax, (x, centre), (SUBLAYER, 0.5), text, fill, fontsize=SMALL)
        previous = centre + 0.25
    if outputs is not None:
        head = top + 0.55  # the centre of linear + softmax
        _arrow(ax, (x, previous), (x, head - 0.2))
        _box(ax, (x, head), (SUBLAYER, 0.4), "linear + softmax", OUTPUT, fontsize=SMALL)
        _arrow(ax, (x, head + 0.2), (x, head + 0.38))
        ax.text(x, head + 0.6, outputs, ha="center", va="center", fontsize=SMALL, color=INK)
    return centres


def architectures() -> Figure:
    """The three model families of ``at.build_model``: encoder-decoder on top (an encoder stack
    whose output, the memory, feeds every decoder layer's cross-attention), and under it
    decoder-only (a causal stack trained on the next token) and encoder-only (a bidirectional
    stack). Each sublayer sits inside a residual connection and a norm (chapter 04), left out
    here."""
    lower = 4.25  # the height of the lower row, decoder-only and encoder-only
    fig, ax = _canvas(WIDTH, lower + 5.0)
    # the upper row: encoder-decoder, its stacks bottom-up from `upper`
    upper, encoder, decoder = lower + 0.15, 1.52, 3.87
    title, centre = "encoder-decoder (the paper, T5)", (encoder + decoder) / 2
    ax.text(centre, upper + 4.7, title, ha="center", va="center", fontsize=TITLE, fontweight="bold")
    causal = ("masked (causal)\nself-attention", ATTENTION)
    feed_forward = ("feed-forward", FEED_FORWARD)
    memory_from = (
        _stack_column(
            ax,
            encoder,
            upper,
            "source tokens\n[B, S]",
            [("self-attention\n(padding mask)", ATTENTION), feed_forward],
            None,
            label_left=True,
            name="encoder",
        )[-1]
        + 0.25
    )
    cross = _stack_column(
        ax,
        decoder,
        upper,
        "target tokens,\nshifted right [B, T]",
        [causal, ("cross-attention\n(K, V: memory)", CROSS), feed_forward],
        "output probabilities\n[B, T, V]",
        name="decoder",
    )[1]
    # the memory: the encoder's output, read as keys and values by every decoder layer
    between, bend = (encoder + decoder) / 2, memory_from + 0.55
    memory = [(encoder, memory_from), (encoder, bend), (between, bend), (between, cross)]
    _arrow(ax, *memory, (decoder - SUBLAYER / 2, cross), colour=PURPLE, width=1.8)
    label = "memory [B, S, d_model]"
    ax.text(encoder + 0.1, bend + 0.17, label, ha="center", va="center", fontsize=SMALL)
    ax.plot([0.2, WIDTH - 0.2], [lower] * 2, color="#8C8C8C", linewidth=0.8, linestyle=":")
    # the lower row: the two single stacks
    decoder_only, encoder_only = 1.45, 3.95
    for x, title in [(decoder_only, "decoder-only (GPT)"), (encoder_only, "encoder-only (BERT)")]:
        ax.text(x, 4.0, title, ha="center", va="center", fontsize=TITLE, fontweight="bold")
    _stack_column(
        ax,
        decoder_only,
        0.0,
        "tokens [B, T]",
        [causal, feed_forward],
        "next-token\nprobabilities [B, T, V]",
        label_left=True,
    )
    _stack_column(
        ax,
        encoder_only,
        0.0,
        "tokens, some masked\n[B, T]",
        [("self-attention\n(bidirectional)", ATTENTION), feed_forward],
        "probabilities of the\nmasked tokens [B, T, V]",
    )
    return fig


# -- 12: the KV cache --------------------------------------------------------------------------


def kv_cache(steps: Sequence[int] = (3, 4, 5)) -> Figure:
    """Decoding steps ``t`` of one causal attention layer, with a KV cache (top) and without one
    (bottom). With the cache, step ``t`` computes the new token's query, key and value only; the
    query reads the ``t - 1`` cached keys and values and its own (``causal_mask(1, t)``), and the
    cache grows by one column. Without it, step ``t`` recomputes all ``t`` positions
    (``causal_mask(t)``), rows ``1 .. t-1`` giving the same numbers as the step before."""
    steps = list(steps)
    if not 1 <= len(steps) <= 3 or any(not isinstance(t, int) or not 1 <= t <= 6 for t in steps):
        raise ValueError(f"kv_cache: steps={steps!r}: give 1 to 3 steps, each from 1 to 6")
    longest = max(steps)
    panel = (WIDTH - 0.2) / 3  # a step's panel, three to the width; fewer steps leave room
    cell = min(0.26, (panel - 0.5) / longest)
    width = WIDTH
    row_height = (longest + 2) * cell + 1.3
    height = 2 * row_height + 0.85
    fig, ax = _canvas(width, height)
    new, cached, recomputed = ORANGE, SKY_BLUE, _tint(PURPLE, 0.75)
    rows = [
        (True, "with a KV cache: one new query per step;\nK and V grow by one column"),
        (False, "without a cache:\nevery step recomputes all t positions"),
    ]
    for row, (with_cache, heading) in enumerate(rows):
        top = height - row * row_height - 0.35
        ax.text(0.2, top, heading, ha="left", va="center", fontsize=FONT, fontweight="bold")
        for column, step in enumerate(steps):
            left = 0.1 + column * panel + 0.4
            strip = top - 0.6  # the top edge of the K row
            for name, y in [("K", strip - cell), ("V", strip - 2 * cell)]:
                ax.text(left - 0.1, y + cell / 2, name, ha="right", va="center", fontsize=SMALL)
                for key in range(step):
                    colour = new if key == step - 1 else cached if with_cache else recomputed
                    hatch = "///" if colour == recomputed else None
                    _cell(ax, left + key * cell, y, cell, colour, hatch)
            if with_cache:
                x = left + (step - 0.5) * cell
                ax.text(x, strip + 0.03, "new", ha="center", va="bottom", fontsize=SMALL)
            grid_top = strip - 2 * cell - 0.15
            allowed = causal_mask(1, step) if with_cache else causal_mask(step)  # [T_q, T_k]
            first_row = step - allowed.size(0)  # with a cache only the last query is computed
            for query in range(step):
                y = grid_top - (query + 1) * cell
                for key in range(step):
                    if query < first_row:
                        colour, hatch, style = "white", None, ":"
                    elif not allowed[query - first_row, key]:
                        colour, hatch, style = GREY, None, "-"
                    elif query == step - 1:
                        colour, hatch, style = new, None, "-"
                    else:
                        colour, hatch, style = recomputed, "///", "-"
                    _cell(ax, left + key * cell, y, cell, colour, hatch, style)
            ax.text(
                left - 0.1,
                grid_top - (step - 0.5) * cell,
                f"$q_{{{step}}}$",
                ha="right",
                va="center",
                fontsize=SMALL,
            )
            queries = 1 if with_cache else step
            ax.text(
                left + step * cell / 2,
                grid_top - step * cell - 0.2,
                f"t = {step}: {queries} × {step} scores",
                ha="center",
                va="center",
                fontsize=SMALL,
            )
    _legend_below(
        ax,
        [
            Patch(facecolor=new, edgecolor=EDGE, label="computed for the new token"),
            Patch(facecolor=cached, edgecolor=EDGE, label="read from the cache"),
            Patch(
                facecolor=recomputed,
                edgecolor=EDGE,
                hatch="///",
                label="recomputed, same as before",
            ),
            Patch(facecolor=GREY, edgecolor=EDGE, label="blocked by the causal mask"),
            Patch(facecolor="white", edgecolor="#8C8C8C", linestyle=":", label="never needed"),
        ],
        columns=2,
    )
    return fig
