"""The stored ablation studies as the book shows them: tables, figures and the numbers its
sentences quote (chapter 09 and its appendix page of every study).

The statistics live in :mod:`annotated_transformer.ablation`; this module only formats them for a
page: a mean with the half-width of its interval, a p-value to two figures, a study's figure and
verdict table, the findings table at the top of chapter 09. It writes no sentence: the chapter's
author writes those, with the numbers glued from :func:`finding`.

::

    from annotated_transformer.book import studies as views

    study = views.find_study(stored, "tinyshakespeare", "residual")
    views.show_study(study)                       # figure, then the verdict table
    row = views.finding(study, "without")         # the numbers a sentence quotes
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from annotated_transformer import ablation as ab
from annotated_transformer.metrics import t_quantile

# The factorial's "optimizer" factor is Adam in both levels: at a constant rate ("adam") or under
# Noam's warm-up schedule. The page names it for what it varies.
LABELS = {"optimizer": "schedule", "adam": "constant"}


def relabel(text: str) -> str:
    """``text`` with the factorial's factor and level names as the page shows them
    (:data:`LABELS`: the *optimizer* factor is a schedule, its *adam* level a constant rate)."""
    return re.sub(r"\b(" + "|".join(LABELS) + r")\b", lambda m: LABELS[m.group(1)], text)


def places(metric: str) -> int:
    """Decimals a value of ``metric`` is shown with: 2 for BLEU, 3 for a loss in nats."""
    return 2 if "bleu" in metric else 3


def unit(metric: str) -> str:
    """``BLEU`` or ``nats``: the unit of a study's metric."""
    return "BLEU" if "bleu" in metric else "nats"


def with_unit(value: float | None, metric: str) -> str:
    """``1.709 nats`` for a loss, ``28.60 BLEU`` for BLEU; empty for a missing value."""
    if value is None or pd.isna(value):
        return ""
    return f"{value:.{places(metric)}f} {unit(metric)}"


def plus_minus(value: float, low: float, high: float, digits: int, sign: str = "") -> str:
    """``25.10 ± 0.42``: ``value`` with the half-width of its (symmetric) interval ``[low,
    high]``; the value alone where the interval is missing, empty where the value is."""
    if pd.isna(value):
        return ""
    if pd.isna(low):
        return f"{value:{sign}.{digits}f}"
    return f"{value:{sign}.{digits}f} ± {(high - low) / 2:.{digits}f}"


def p_text(p: float) -> str:
    """A p-value to two significant figures; empty where there is none (too few runs)."""
    return "" if pd.isna(p) else f"{p:.2g}"


def short_device(name: str) -> str:
    """``CPU: Intel(R) Xeon(R) Processor (2 cores)`` -> ``Intel Xeon (2 cores)``."""
    return re.sub(r"^CPU: |\(R\)|Processor ", "", name).replace("  ", " ").strip()


def find_study(
    studies: Iterable[ab.StoredStudy], task: str, study: str, profile: str = "reference"
) -> ab.StoredStudy:
    """The stored study of ``task``, ``study`` and ``profile``; a ``LookupError`` naming the
    stored ones when there is none (a chapter's sentence about it cannot be written)."""
    studies = list(studies)
    for found in studies:
        if (found.task, found.study, found.profile) == (task, study, profile):
            return found
    stored = ", ".join(sorted({f"{s.task}/{s.study}/{s.profile}" for s in studies})) or "none"
    raise LookupError(f"no stored study {task}/{study}/{profile}; stored: {stored}")


def verdicts(study: ab.StoredStudy) -> list[dict[str, Any]]:
    """The study's verdict table (:func:`ab.verdict_table`), one row per variant."""
    return ab.verdict_table(study.records, study.metric, study.higher_is_better)


def finding(
    study: ab.StoredStudy, variant: str, table: Sequence[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The numbers a sentence says of one variant against the study's baseline: ``base`` (the
    baseline's mean), ``mean``, ``difference`` (variant - baseline) with Welch's 95% interval
    ``low``..``high``, ``half`` (its half-width), ``p_holm``, ``verdict``, ``detectable`` (80 %
    power at Holm's strictest level) and ``unit``. ``table``: the study's :func:`verdicts`,
    when already computed."""
    rows = {row["variant"]: row for row in (table or verdicts(study))}
    if variant not in rows:
        raise LookupError(f"{study.title} has no variant {variant!r}: {', '.join(rows)}")
    row, base = rows[variant], rows[study.baseline]
    return {
        "study": study.study,
        "task": study.task,
        "variant": variant,
        "base": base["mean"],
        "mean": row["mean"],
        "difference": row["difference"],
        "low": row["diff_low"],
        "high": row["diff_high"],
        "half": (row["diff_high"] - row["diff_low"]) / 2,
        "p_holm": row["p_holm"],
        "verdict": row["verdict"],
        "detectable": row["detectable"],
        "unit": unit(study.metric),
    }


TASK_NAMES = {"tinyshakespeare": "Tiny Shakespeare", "multi30k": "Multi30k", "cmn-eng": "cmn-eng"}


@dataclass(frozen=True)
class Pick:
    """One row of chapter 09's findings table: a variant of a stored study, what it changes in
    words, and the name its numbers are glued under (``{glue:text}`<key>_difference```)."""

    task: str
    study: str
    variant: str
    change: str
    key: str


# The findings chapter 09 opens with: the largest effect of each headline study, and the null
# results a reader would most likely act on. Chapter 09's sentences quote them by key.
HEADLINE: tuple[Pick, ...] = (
    Pick("tinyshakespeare", "residual", "without", "no residual connections", "residual"),
    Pick("tinyshakespeare", "dropout", "0.1", "dropout 0.1 (base: none)", "dropout_1"),
    Pick("tinyshakespeare", "dropout", "0.3", "dropout 0.3", "dropout_3"),
    Pick("tinyshakespeare", "positional", "none", "no positions (base: sinusoids)", "ts_none"),
    Pick("tinyshakespeare", "positional", "rope", "rotary positions", "ts_rope"),
    Pick("tinyshakespeare", "positional", "learned", "learned positions", "ts_learned"),
    Pick("tinyshakespeare", "depth", "1", "1 layer (base: 3)", "depth_1"),
    Pick("tinyshakespeare", "depth", "6", "6 layers", "depth_6"),
    Pick("tinyshakespeare", "width", "0.5x", "half the width", "width_half"),
    Pick("tinyshakespeare", "width", "2x", "twice the width", "width_double"),
    Pick("tinyshakespeare", "heads", "1", "1 head (base: 8)", "ts_heads_1"),
    Pick("tinyshakespeare", "heads", "16", "16 heads", "ts_heads_16"),
    Pick("tinyshakespeare", "norm_and_position", "layernorm, post", "post-norm", "post_norm"),
    Pick("tinyshakespeare", "norm_and_position", "rmsnorm, pre", "RMSNorm", "rmsnorm"),
    Pick("tinyshakespeare", "schedule", "noam", "Noam's schedule (base: cosine)", "noam"),
    Pick("multi30k", "heads", "1", "1 head (base: 8)", "mt_heads_1"),
    Pick("multi30k", "heads", "4", "4 heads", "mt_heads_4"),
    Pick("multi30k", "positional", "alibi", "ALiBi (base: rotary)", "mt_alibi"),
    Pick("multi30k", "positional", "sinusoidal", "sinusoids", "mt_sinusoidal"),
    Pick("multi30k", "architecture", "decoder-only", "decoder-only", "decoder_only"),
    Pick("multi30k", "architecture", "encoder-only", "encoder-only", "encoder_only"),
)


def findings_frame(
    studies: Iterable[ab.StoredStudy], picks: Sequence[Pick] = HEADLINE
) -> pd.DataFrame:
    """The findings table: per pick its task, what it changes, the baseline's level, the change
    with the half-width of Welch's 95% interval (in the study's unit; for a loss lower is
    better, for BLEU higher), Holm's p over its study and the verdict."""
    studies = list(studies)
    tables: dict[tuple[str, str], list[dict[str, Any]]] = {}
    rows = []
    for pick in picks:
        study = find_study(studies, pick.task, pick.study)
        table = tables.setdefault((pick.task, pick.study), verdicts(study))
        found = finding(study, pick.variant, table)
        digits = places(study.metric)
        rows.append(
            {
                "task": TASK_NAMES.get(pick.task, pick.task),
                "change": pick.change,
                "base": with_unit(found["base"], study.metric),
                "change ± 95%": plus_minus(
                    found["difference"], found["low"], found["high"], digits, "+"
                ),
                "p_holm": p_text(found["p_holm"]),
                "verdict": found["verdict"],
            }
        )
    return pd.DataFrame(rows).set_index(["task", "change"])


def verdict_frame(study: ab.StoredStudy, table: Sequence[dict[str, Any]] | None = None):
    """The verdict table as the page shows it: means and differences with the half-width of
    their 95% intervals, Holm's p-value, the verdict, the smallest difference the comparison
    detects at 80 % power, and what a run of the variant cost."""
    digits = places(study.metric)
    rows = [
        {
            "variant": relabel(row["variant"]),
            "n": row["n"],
            "mean ± 95%": plus_minus(row["mean"], row["ci_low"], row["ci_high"], digits),
            "vs baseline ± 95%": plus_minus(
                row["difference"], row["diff_low"], row["diff_high"], digits, "+"
            ),
            "p_holm": p_text(row["p_holm"]),
            "verdict": row["verdict"],
            "detectable": "" if pd.isna(row["detectable"]) else f"{row['detectable']:.{digits}f}",
            "min/run": round(row["minutes"], 1),
            "parameters": "" if pd.isna(row["parameters"]) else f"{row['parameters']:,.0f}",
        }
        for row in (table or verdicts(study))
    ]
    return pd.DataFrame(rows).set_index("variant")


def overview_frame(studies: Sequence[ab.StoredStudy]) -> pd.DataFrame:
    """One row per stored study (:func:`ab.overview`), narrow enough for the text column: runs
    as variants × seeds, the baseline with its unit, the trivial level and where the baseline
    is against it, the variants beyond noise and the minutes its runs took."""
    lead = pd.DataFrame(ab.overview(studies))
    lead["runs"] = [f"{v} × {s}" for v, s in zip(lead["variants"], lead["seeds"], strict=True)]
    lead["baseline"] = list(map(with_unit, lead["baseline"], lead["metric"]))
    lead["trivial level"] = [
        f"{trivial}, {'above' if where == 'above it' else where.split(':')[0]}"
        for trivial, where in zip(lead["trivial"], lead["baseline vs trivial"], strict=True)
    ]
    lead["minutes"] = lead["minutes"].round(0).astype(int)
    columns = ["task", "study", "profile", "runs", "baseline", "trivial level", "beyond noise"]
    return lead[[*columns, "minutes"]].set_index(["task", "study", "profile"])


def devices(studies: Iterable[ab.StoredStudy]) -> list[str]:
    """The devices the studies' runs trained on, short (:func:`short_device`), sorted."""
    return sorted(
        {short_device(r["provenance"]["device"]) for study in studies for r in study.records}
    )


def heading(study: ab.StoredStudy, plan: dict[tuple[str, str], dict[str, Any]] | None = None):
    """The study's title with its provenance (:func:`ab.describe`), marked PARTIAL while the
    plan (``plan``: :func:`ab.plan_progress` rows by task and study) has runs of it left."""
    text = f"**{relabel(study.title)}.** {ab.describe(study.records)}"
    row = (plan or {}).get((study.task, study.study))
    if study.profile == "reference" and row and row["status"] != "done":
        text += f" PARTIAL: {row['stored']} of its {row['runs']} runs are stored."
    return text


def _trivial_line(ax, trivial: ab.TrivialBaseline | None, values, side: bool, title: str) -> str:
    """Draw the trivial level on ``ax`` when it lies near the variants; else name it in the
    returned title (drawn, it would squeeze every variant into a line)."""
    if trivial is None:
        return title
    runs = [v for seeds in values.values() for v in seeds]
    low, high = min(runs), max(runs)
    span = max(high - low, 1e-9)
    if low - span <= trivial.value <= high + span:
        (ax.axvline if side else ax.axhline)(
            trivial.value, color="grey", ls="--", lw=1, label=f"{trivial.name} level"
        )
        ax.legend(fontsize=7)
        return title
    where = "above" if trivial.value > high else "below"
    return f"{title}\n{trivial.name} level {trivial.value:.3f}, far {where} this scale"


def study_figure(study: ab.StoredStudy, trivial: ab.TrivialBaseline | None = None):
    """Every variant of ``study``: its seeds as dots, the mean and 95% t interval beside them,
    the baseline in orange, the trivial level dashed. A study of many variants or of long names
    is drawn on its side, one variant a line, so that its labels stay readable at phone width."""
    rows = [row for row in ab.summarize(study.records, study.metric) if "mean" in row]
    values = ab.variant_values(study.records, study.metric)
    side = len(rows) > 6 or max(len(row["variant"]) for row in rows) > 12
    if side:
        fig, ax = plt.subplots(figsize=(6.0, 0.3 * len(rows) + 1.5))
    else:
        fig, ax = plt.subplots(figsize=(max(3.6, 0.75 * len(rows) + 1.6), 2.9))
    for place, row in enumerate(rows):
        color = "tab:orange" if row["baseline"] else "tab:blue"
        runs = values[row["variant"]]
        spread = [place - 0.08 * (len(runs) - 1) / 2 + 0.08 * i for i in range(len(runs))]
        error = None
        if row["n"] > 1:
            error = [[row["mean"] - row["ci_low"]], [row["ci_high"] - row["mean"]]]
        if side:
            ax.scatter(runs, spread, s=10, color=color, alpha=0.45, zorder=2)
            ax.errorbar(row["mean"], place + 0.3, xerr=error, fmt="o", color=color, capsize=3)
        else:
            ax.scatter(spread, runs, s=10, color=color, alpha=0.45, zorder=2)
            ax.errorbar(place + 0.28, row["mean"], yerr=error, fmt="o", color=color, capsize=4)
    title = _trivial_line(ax, trivial, values, side, relabel(study.title))
    factors = [relabel(f) for f in study.records[0]["config"]["factors"]]
    labels = [relabel(row["variant"]) for row in rows]
    axis = factors[0] if len(factors) == 1 else "cell: " + " × ".join(factors)
    quality = f"{study.metric} ({'higher' if study.higher_is_better else 'lower'} is better)"
    if side:
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.invert_yaxis()  # the study's first variant on top, as in its table
        ax.set(ylabel=axis, xlabel=quality)
    else:
        ax.set_xticks(range(len(rows)), labels, fontsize=9)
        ax.set(xlabel=axis, ylabel=quality)
    ax.set_title(f"{title}\nseeds as dots; mean and 95% interval", fontsize=8)
    fig.tight_layout()
    return fig


def show_study(
    study: ab.StoredStudy, plan: dict[tuple[str, str], dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Display the study's heading with its provenance, its figure and its verdict table; return
    the verdict rows (for the sentences that quote them)."""
    table = verdicts(study)
    display(Markdown(heading(study, plan)))
    figure = study_figure(study, ab.trivial_baseline(study))
    display(figure)
    plt.close(figure)  # shown once: not again by the inline backend at the end of the cell
    display(verdict_frame(study, table))
    return table


def factorial_figures(records: Sequence[dict[str, Any]], metric: str, title: str = ""):
    """Two figures of a two-level factorial: the main effects (each level's mean over every run
    at it, with its 95% t interval) and the interaction of every pair of factors (cell means;
    parallel lines: the effects add). Factor and level names :func:`relabel`-ed."""
    factors = list(records[0]["config"]["factors"])
    effects = ab.main_effects(records, metric)
    columns = 2 if len(factors) > 1 else 1
    main, axes = plt.subplots(
        math.ceil(len(factors) / columns),
        columns,
        figsize=(5.2, 2.2 * math.ceil(len(factors) / columns)),
        sharey=True,
        squeeze=False,
    )
    for factor, ax in zip(factors, axes.flat, strict=False):  # a grid may have a spare axis
        rows = [row for row in effects if row["factor"] == factor]
        half = [
            t_quantile(0.975, row["n"] - 1) * row["std"] / math.sqrt(row["n"])
            if row["n"] > 1
            else 0.0
            for row in rows
        ]
        ax.errorbar(range(len(rows)), [row["mean"] for row in rows], yerr=half, fmt="o-", capsize=4)
        ax.set_xticks(range(len(rows)), [relabel(row["level"]) for row in rows], fontsize=8)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel(relabel(factor), fontsize=8)
    for ax in list(axes.flat)[len(factors) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(metric, fontsize=8)
    main.suptitle(
        f"main effects: mean and 95% interval of every run at a level\n{title}", fontsize=8
    )
    main.tight_layout()
    pairs = [(a, b) for i, a in enumerate(factors) for b in factors[i + 1 :]]
    columns = 2
    grid = math.ceil(len(pairs) / columns)
    pair_fig, axes = plt.subplots(
        grid, columns, figsize=(5.2, 2.2 * grid), sharey=True, squeeze=False
    )
    for (first, second), ax in zip(pairs, axes.flat, strict=False):  # a grid may have spare axes
        table = ab.interaction(records, metric, first, second)
        for j, column in enumerate(table["columns"]):
            means = [row[j] for row in table["means"]]
            label = relabel(f"{second} {column}")
            ax.plot(range(len(table["rows"])), means, "o-", label=label)
        ax.set_xticks(range(len(table["rows"])), [relabel(r) for r in table["rows"]], fontsize=8)
        ax.set_xlim(-0.4, len(table["rows"]) - 0.6)
        ax.set_title(relabel(f"{first} × {second}: AB = {table['interaction']:+.2f}"), fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.axis("off")
    pair_fig.suptitle(f"interactions: cell means of {metric}\n{title}", fontsize=8)
    pair_fig.tight_layout()
    return main, pair_fig


def main_effect_frame(effects: Sequence[dict[str, Any]], metric: str) -> pd.DataFrame:
    """The factors' main effects over the balanced runs (:func:`ab.factor_effects`): the effect
    with the half-width of its Welch 95% interval, Holm's p over the factors, and the winning
    level, or why there is none."""
    rows = [
        {
            "factor": relabel(row["factor"]),
            "levels": relabel(row["levels"]),
            "effect ± 95%": plus_minus(
                row["effect"], row["effect_low"], row["effect_high"], places(metric), "+"
            ),
            "p_holm": p_text(row["p_holm"]),
            "winner": relabel(row["winner"])
            if row["winner"]
            else ("cannot judge" if pd.isna(row["p_holm"]) else "none: within noise"),
        }
        for row in effects
    ]
    return pd.DataFrame(rows).set_index("factor")


def factorial_effect_frame(study: ab.StoredStudy) -> pd.DataFrame:
    """Every main effect and two-way interaction of a two-level factorial (the saturated
    model's contrasts, :func:`ab.factorial_effects`): the effect with the half-width of its 95%
    interval, Holm's p over the whole family, the verdict."""
    rows = [
        {
            "term": relabel(row["term"]),
            "levels": relabel(row["levels"]),
            "effect ± 95%": plus_minus(
                row["effect"], row["ci_low"], row["ci_high"], places(study.metric), "+"
            ),
            "p_holm": p_text(row["p_holm"]),
            "verdict": row["verdict"],
        }
        for row in ab.factorial_effects(study.records, study.metric)
    ]
    return pd.DataFrame(rows).set_index("term")


def report_frame(study: ab.StoredStudy) -> pd.DataFrame:
    """The factorial against the report it repeats (:func:`ab.factorial_against_report`): the
    report's effect and winner per factor beside ours with its 95% interval and Holm's p."""
    rows = ab.factorial_against_report(study)
    return pd.DataFrame(
        {
            "levels": [relabel(row["levels"]) for row in rows],
            "report": [
                relabel(f"{row['report effect']:+.2f} ({row['report winner']})") for row in rows
            ],
            "ours ± 95%": [
                plus_minus(row["our effect"], row["effect_low"], row["effect_high"], 2, "+")
                for row in rows
            ],
            "p_holm": [p_text(row["p_holm"]) for row in rows],
            "our winner": [relabel(row["our winner"] or "within noise") for row in rows],
        },
        index=[relabel(row["factor"]) for row in rows],
    )


def claim_frame(claims: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The claims table (:func:`ab.check_claims`), narrow enough for the text column: where it
    was measured, the difference with the half-width of its 95% interval (Welch), the
    unadjusted p-value, the detectable difference, the verdict and whether the study sits at its
    trivial level."""
    shown = []
    for row in claims:
        where = f"{row['task']} ({row['profile']}, {row['runs']} runs)" if "task" in row else ""
        difference, digits = "", 2
        if "difference" in row:  # a comparison of two variants (not a factorial's winners)
            digits = 2 if ab.TASKS[row["task"]] == "translation" else 3
            difference = plus_minus(
                row["difference"], row["diff_low"], row["diff_high"], digits, "+"
            )
        detectable = row.get("detectable", math.nan)
        shown.append(
            {
                "claim": relabel(row["claim"]),
                "measured on": where,
                "difference ± 95%": difference,
                "p": p_text(row.get("p_value", math.nan)),
                "detectable": "" if pd.isna(detectable) else f"{detectable:.{digits}f}",
                "verdict": row["verdict"],
                "at trivial level": {True: "yes", False: "no"}.get(row.get("at_trivial_level"), ""),
            }
        )
    return pd.DataFrame(shown).set_index("claim")


def table3_frame(comparison: Sequence[dict[str, Any]], metric: str) -> pd.DataFrame:
    """The Table 3 comparison (:func:`ab.vaswani_comparison` rows): the paper's change and
    direction, ours with the half-width of its 95% interval and direction, Holm's p, the verdict
    and the note."""
    paper_unit, decimals = ("BLEU", 1) if "bleu" in metric else ("perplexity", 2)
    rows = []
    for row in comparison:
        ours = row["ours"]
        if not pd.isna(row["ours_change"]):
            change = plus_minus(
                row["ours_change"], row["ours_low"], row["ours_high"], places(metric), "+"
            )
            ours = f"{change}: {ours}"
        rows.append(
            {
                "trend": row["trend"],
                "row": row["table3_row"],
                f"paper ({paper_unit})": f"{row['paper_change']:+.{decimals}f}: {row['paper']}",
                f"ours ({unit(metric)}) ± 95%": ours,
                "study": row["study"],
                "p_holm": p_text(row.get("p_holm", math.nan)),
                "verdict": row["verdict"],
                "note": row["note"],
            }
        )
    return pd.DataFrame(rows).set_index("trend")


def gain_frame(study: ab.StoredStudy, encodings: Sequence[str]) -> pd.DataFrame:
    """A ``token_rms`` study read by encoding: its two cells (mean ± 95%), the gain from tokens
    at rms 1 (+ is better) with Welch's interval and p-value; ``gain``, ``gain_low``,
    ``gain_high`` and ``p_value`` kept as numbers for the sentences."""
    values = ab.variant_values(study.records, study.metric)
    cells = {row["variant"]: row for row in ab.summarize(study.records, study.metric)}
    sign, digits = (1 if study.higher_is_better else -1), places(study.metric)
    rows = []
    for encoding in encodings:
        start, large = f"{encoding}, by init", f"{encoding}, rms 1"
        gain = ab.welch_test(values[start], values[large])  # large - start
        low, high = sorted((sign * gain["low"], sign * gain["high"]))
        rows.append(
            {
                "positions": encoding,
                **{
                    size: plus_minus(
                        cells[name]["mean"], cells[name]["ci_low"], cells[name]["ci_high"], digits
                    )
                    for size, name in (("by init", start), ("rms 1", large))
                },
                "gain ± 95%": plus_minus(sign * gain["difference"], low, high, digits, "+"),
                "p": p_text(gain["p_value"]),
                "gain": sign * gain["difference"],
                "gain_low": low,
                "gain_high": high,
                "p_value": gain["p_value"],
            }
        )
    return pd.DataFrame(rows).set_index("positions")


def curves_figure(records: Sequence[dict[str, Any]], key: str = "eval_loss", title: str = ""):
    """The mean over seeds of history column ``key`` per variant, with a band of one standard
    deviation on each side."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for label, curve in ab.curves(records, key).items():
        mean, std = pd.Series(curve["mean"]), pd.Series(curve["std"])
        ax.plot(curve["step"], mean, label=f"{relabel(label)} (n={curve['n']})")
        ax.fill_between(curve["step"], mean - std, mean + std, alpha=0.2)
    ax.set(xlabel="optimizer update", ylabel=f"{key.replace('_', ' ')} (nats/token)")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def token_position_balance(task: str, positional: ab.StoredStudy | None = None) -> dict[str, Any]:
    """The token and the position added to it at the start of training, for the sinusoidal
    variant of ``task``'s positional study built as its runs build it (Xavier's rule, embeddings
    × √d_model): the vocabulary, the rms of a token vector and of the sinusoidal table, their
    ratio, and, given the stored ``positional`` study, *sinusoidal − none* with Welch's 95%
    interval."""
    import torch

    from annotated_transformer import data
    from annotated_transformer.config import TransformerConfig
    from annotated_transformer.model import TokenEmbedding, build_model
    from annotated_transformer.positional import sinusoidal_table

    config = next(
        run
        for run in ab.run_configs("positional", task, 1, "reference")
        if run["variant"] == "sinusoidal"
    )
    if ab.TASKS[task] == "translation":  # the joint BPE's size (the tokenizer adds no symbol)
        vocab = config["data"]["bpe_vocab_size"]
    else:  # characters: the training split's alphabet
        vocab = data.load_language_model_corpus(task).tokenizer.vocab_size
    torch.manual_seed(0)
    model = build_model(TransformerConfig(**config["model"], vocab_size=vocab))
    embedding = next(m for m in model.modules() if isinstance(m, TokenEmbedding))
    with torch.no_grad():
        tokens = embedding(torch.arange(vocab)[None])  # [1, V, d_model]: every token once
    table = sinusoidal_table(128, model.config.d_model)  # [T, d_model]
    token_rms, position_rms = (x.pow(2).mean().sqrt().item() for x in (tokens, table))
    row: dict[str, Any] = {
        "task": TASK_NAMES.get(task, task),
        "vocabulary": vocab,
        "token rms": round(token_rms, 3),
        "position rms": round(position_rms, 3),
        "token / position": round(token_rms / position_rms, 2),
    }
    values = ab.variant_values(positional.records, positional.metric) if positional else {}
    if len(values.get("none", [])) > 1 and len(values.get("sinusoidal", [])) > 1:
        test = ab.welch_test(values["none"], values["sinusoidal"])  # sinusoidal - none
        digits = places(positional.metric)
        change = plus_minus(test["difference"], test["low"], test["high"], digits, "+")
        row["sinusoidal − none ± 95%"] = f"{change} {unit(positional.metric)}"
    return row


def noise_frame(records: Sequence[dict[str, Any]], metric: str) -> pd.DataFrame:
    """The two sources of noise in a translation study's score, side by side: the mean width of
    one run's 95% bootstrap interval over its test sentences (another sample of sentences of the
    same size) and the mean seed-to-seed standard deviation of its variants (another seed);
    ``needs 2 seeds`` where every variant has one run."""
    widths = [
        r["metrics"][f"{metric}_high"] - r["metrics"][f"{metric}_low"]
        for r in records
        if f"{metric}_high" in r["metrics"]
    ]
    stds = [
        row["std"] for row in ab.summarize(records, metric) if not pd.isna(row.get("std", math.nan))
    ]
    digits = places(metric)
    sentences = records[0]["metrics"].get("test_sentences", "") if records else ""
    rows = {
        f"test set ({sentences} sentences): mean 95% bootstrap width": (
            f"{sum(widths) / len(widths):.{digits}f}" if widths else "not recorded"
        ),
        "seeds: mean standard deviation of a variant": (
            f"{sum(stds) / len(stds):.{digits}f}" if stds else "needs 2 seeds"
        ),
    }
    return pd.DataFrame({unit(metric): rows})


def lever_runs_frame(
    runs: dict[str, dict[int, dict]], arms: Sequence[str], seeds: Sequence[int]
) -> pd.DataFrame:
    """A lever study's plan as the page shows it (chapter 08): one row per arm of the plan
    (``ablation.levers.LEVER_STUDY[task]``), one column per seed (``LEVER_STUDY_SEEDS``), each
    cell the validation loss of the mean of that run's last evaluations' weights, or "not yet
    run" where ``runs`` (``read_lever_study``) has no record of it."""
    cells = {
        arm: {
            f"seed {seed}": (
                f"{runs[arm][seed]['averaged']['valid_loss']:.4f}"
                if seed in runs.get(arm, {})
                else "not yet run"
            )
            for seed in seeds
        }
        for arm in arms
    }
    return pd.DataFrame.from_dict(cells, orient="index").rename_axis("arm")


def lever_verdict_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows of ``ablation.levers.lever_study_rows`` as the page shows them: what each lever is
    worth in nats (removing it minus keeping it: positive, it helps) with the half-width of its
    95 % interval, the runs a side, Holm's p-value, the verdict and the smallest difference the
    runs could detect at 80 % power."""
    table = [
        {
            "lever": row["lever"],
            "runs": " + ".join(map(str, row["runs"])),
            "worth ± 95% (nats)": plus_minus(
                row["difference"], row.get("low", math.nan), row.get("high", math.nan), 4, "+"
            ),
            "p_holm": p_text(row.get("p_holm", math.nan)),
            "verdict": row["verdict"],
            "detectable": "" if pd.isna(row.get("detectable")) else f"{row['detectable']:.4f}",
        }
        for row in rows
    ]
    return pd.DataFrame(table).set_index("lever")
