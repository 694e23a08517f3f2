"""Chapter 12's measurements on the trained translator: BLEU against the beam size and the length
penalty, and how often beam search misses the model's most probable translation.

::

    python scripts/decoding_study.py     # stores results/decoding/<key>.json (~95 min, 2-core CPU)

Both read the shipped Multi30k model (``models/multi30k``) on the **validation** split, since a
decoding setting is a choice, and choices are made on validation. A record belongs to the model it
measured (the run it came from is in its key and its metrics): when the shipped model is replaced,
:func:`stored_record` finds nothing until the script has measured the new one.

- :func:`beam_grid`: corpus BLEU, chrF and BLEU's length ratio for every beam size and alpha of
  the grid (greedy once: it has no length penalty);
- :func:`search_errors`: for short sources, the exact optimum of ``log P(y | x)`` (alpha 0, by
  :func:`~annotated_transformer.decode.exact_search`, started from the best beam's score) beside
  what each beam size returns, and the score of the empty translation. Sentences whose search hits
  ``max_expansions`` are kept and marked unproven: their optimum is a lower bound.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data.batch import Batch
from ..decode import beam_search, exact_search
from ..metrics import bleu_difference, corpus_bleu, corpus_chrf
from ..tasks.task_options import TaskInfo
from .evaluation import decoding_budget, score_translations, translate
from .experiments import ResultsStore, run_or_load

TOLERANCE = 1e-4  # two scores closer than this are the same hypothesis's (cache vs. no cache)


@dataclass(frozen=True)
class DecodingStudy:
    """What the stored study measures (its fields are hashed into the record's key)."""

    model: str = "models/multi30k"  # a shipped model folder, relative to the checkout
    split: str = "valid"
    beams: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10)
    alphas: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0, 1.5)
    search_sentences: int = 200  # the first this many of the split with a short enough source
    search_max_source: int = 16  # source tokens, the end symbol included
    search_beams: tuple[int, ...] = (1, 2, 4, 10)
    max_expansions: int = 5000  # forward passes of one exact search before it gives up

    def record_config(self, task: str) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        return {"experiment": "decoding", "task": task, **fields}


PAPER = (4, 0.6)  # Vaswani et al.'s beam and alpha (their §6.1), chapter 08's setting


def paper_beam_scores(
    model: nn.Module,
    batches: Iterable[Batch],
    tokenizer: Any,
    info: TaskInfo | dict[str, Any],
    references: Sequence[str],
    limit: int | None = None,
) -> dict[str, Any]:
    """``model`` translating ``batches`` (a held-out split; its first ``limit`` sentences, None:
    all) with chapter 08's beam search (:data:`PAPER`), scored against ``references`` (the
    split's, in the same order): ``beam``, ``alpha``, ``bleu``, ``bleu_lowercase``, ``chrf``,
    ``bleu_signature`` and the ``translations`` themselves, so that two translators can be paired
    on them later (``metrics.bleu_difference``). What a probe stores of its validation decoding
    and what ``scripts/compare_translators.py`` stores of each system."""
    beam, alpha = PAPER
    translations = translate(
        model, batches, tokenizer, info, beam_size=beam, alpha=alpha, limit=limit
    )
    scores = score_translations(translations, references[: len(translations)])
    return {
        "beam": beam,
        "alpha": alpha,
        "bleu": scores.bleu,
        "bleu_lowercase": scores.bleu_lowercase,
        "chrf": scores.chrf,
        "bleu_signature": scores.signature,
        "translations": translations,
    }


def beam_grid(
    model: nn.Module,
    batches: Sequence[Batch],
    tokenizer: Any,
    info: TaskInfo,
    references: Sequence[str],
    beams: Iterable[int],
    alphas: Iterable[float],
    log: Callable[[str], None] | None = None,
    resamples: int = 1000,
) -> list[dict[str, Any]]:
    """One row per (beam, alpha): ``bleu``, ``chrf``, ``length_ratio`` (BLEU's, hypothesis over
    reference tokens), ``seconds``, and ``vs_greedy`` / ``vs_paper``: the BLEU difference from
    greedy and from :data:`PAPER`'s cell (when in the grid) as ``[difference, low, high]``, a
    paired bootstrap 95% interval over the same sentences (:func:`~..metrics.bleu_difference`).
    Beam 1 is greedy, scored once with ``alpha`` None."""
    rows, outputs = [], {}
    for beam in beams:
        for alpha in [None] if beam == 1 else alphas:
            started = time.perf_counter()
            hypotheses = translate(
                model, batches, tokenizer, info, beam_size=beam, alpha=alpha or 0.0
            )
            outputs[beam, alpha] = hypotheses
            bleu = corpus_bleu(hypotheses, references[: len(hypotheses)])
            chrf = corpus_chrf(hypotheses, references[: len(hypotheses)])
            rows.append(
                {
                    "beam": beam,
                    "alpha": alpha,
                    "bleu": bleu.score,
                    "chrf": chrf.score,
                    "length_ratio": bleu.length_ratio,
                    "sentences": len(hypotheses),
                    "seconds": time.perf_counter() - started,
                }
            )
            if log is not None:
                log(
                    f"beam {beam}, alpha {alpha}: BLEU {bleu.score:.2f} ({rows[-1]['seconds']:.0f} s)"
                )
    for name, base in (("vs_greedy", (1, None)), ("vs_paper", PAPER)):
        if base not in outputs:
            continue
        for row in rows:
            system = outputs[row["beam"], row["alpha"]]
            found = bleu_difference(
                outputs[base], system, references[: len(system)], resamples=resamples
            )
            row[name] = [found.estimate, found.low, found.high]
    return rows


def short_sources(
    batches: Iterable[Batch], pad_id: int, count: int, max_tokens: int
) -> list[Tensor]:
    """The first ``count`` sources of ``batches`` with at most ``max_tokens`` tokens, unpadded,
    each ``[1, S]``, in the split's order."""
    chosen = []
    for batch in batches:
        for row in batch.src:
            source = row[row != pad_id]
            if len(source) <= max_tokens:
                chosen.append(source[None])
                if len(chosen) == count:
                    return chosen
    return chosen


def search_errors(
    model: nn.Module,
    sources: Sequence[Tensor],
    info: TaskInfo,
    beams: Sequence[int],
    max_expansions: int,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per source: ``beam_scores`` (``log P`` of each beam's output, alpha 0, by beam
    size), ``beam_lengths``, ``optimum`` (the exact search's ``log P``; a lower bound when not
    ``proven``), ``optimum_length`` (tokens, the end symbol included: 1 is the empty output),
    ``empty`` (``log P`` of the empty output: the end symbol at once), ``expansions``."""
    rows = []
    for number, src in enumerate(sources):  # src: [1, S]
        budget = decoding_budget(src.size(1), info, model.config.max_len, 1)
        arguments = {"src": src, "bos_id": info.bos_id, "eos_id": info.eos_id, "alpha": 0.0}
        scores, lengths = {}, {}
        for beam in beams:
            result = beam_search(model, beam_size=beam, max_new_tokens=budget, **arguments)
            tokens = result.tokens[0, 1:].tolist()  # after <s>
            scores[str(beam)] = result.scores.item()
            lengths[str(beam)] = (
                tokens.index(info.eos_id) + 1 if info.eos_id in tokens else len(tokens)
            )
        best = max(scores.values())
        found = exact_search(
            model, max_new_tokens=budget, lower_bound=best - 10 * TOLERANCE,
            max_expansions=max_expansions, **arguments,
        )  # fmt: skip
        with torch.no_grad():
            memory = model.encode(src)  # [1, S, d_model]
            start = torch.full((1, 1), info.bos_id, dtype=torch.long)
            first = model.decode(start, memory, model.source_mask(src))[0, -1]  # [V]
        empty = first.float().log_softmax(-1)[info.eos_id].item()
        rows.append(
            {
                "source_tokens": src.size(1),
                "beam_scores": scores,
                "beam_lengths": lengths,
                "optimum": found.score if found.tokens.numel() else best,
                "optimum_length": found.tokens.numel() or lengths[max(scores, key=scores.get)],
                "empty": empty,
                "proven": found.proven,
                "expansions": found.expansions,
            }
        )
        if log is not None and (number + 1) % 20 == 0:
            log(f"  exact search: {number + 1} of {len(sources)} sources")
    return rows


def results_store(root: str | Path) -> ResultsStore:
    """The study's records: ``<root>/results/decoding``."""
    return ResultsStore(Path(root) / "results" / "decoding")


def shipped_record(root: str | Path, study: DecodingStudy | None = None) -> str | None:
    """The key of the run whose model is shipped in ``study.model`` under checkout ``root`` (the
    ``record`` of its ``config.json`` metadata), or None when no model is there."""
    from .pretrained import DESCRIPTION, is_pretrained

    folder = Path(root) / (study or DecodingStudy()).model
    if not is_pretrained(folder):
        return None
    return json.loads((folder / DESCRIPTION).read_text(encoding="utf-8"))["metadata"].get("record")


def run_and_store(
    root: str | Path,
    study: DecodingStudy | None = None,
    rerun: bool = False,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Measure ``study`` (the default one) on the shipped model unless a study of that very model
    is stored (:func:`stored_record`), and store it. The record's key includes the run the model
    came from, so a replaced model is measured anew rather than read off the old one's record."""
    from ..tasks import build_task
    from .pretrained import load_pretrained

    study = study or DecodingStudy()
    root = Path(root)
    stored = None if rerun else stored_record(root, study)
    if stored is not None:
        return stored
    shipped = load_pretrained(root / study.model)
    info = TaskInfo.from_dict(shipped.task)
    record = ResultsStore(root / "results").load(shipped.metadata["record"])
    config = record["config"]

    def measure(_: dict[str, Any]) -> dict[str, Any]:
        task = build_task(config["task"], config["data"], seed=config["seed"])
        batches = task.splits[study.split]
        grid = beam_grid(
            shipped.model, batches, shipped.tokenizer, info, task.references[study.split],
            study.beams, study.alphas, log,
        )  # fmt: skip
        sources = short_sources(
            batches, info.pad_id, study.search_sentences, study.search_max_source
        )
        errors = search_errors(
            shipped.model, sources, info, study.search_beams, study.max_expansions, log
        )
        return {
            "metrics": {"grid": grid, "search": errors, "record": shipped.metadata["record"]},
            "history": [],
            "precision": "fp32",
        }

    run = {
        **study.record_config(config["task"]),
        "seed": config["seed"],
        "model_record": shipped.metadata["record"],
    }
    return run_or_load(results_store(root), run, measure, rerun=rerun)


def stored_record(root: str | Path, study: DecodingStudy | None = None) -> dict[str, Any] | None:
    """The stored record of ``study`` (the default one) measured on the model now shipped in
    ``study.model`` under checkout ``root``, or None when that exact study of that model has not
    been measured (a changed :class:`DecodingStudy` or a replaced model is a new record)."""
    study = study or DecodingStudy()
    fields = json.loads(json.dumps(dataclasses.asdict(study)))  # tuples: lists
    model_record = shipped_record(root, study)
    for record in results_store(root).records():
        config = record["config"]
        same_study = {name: config.get(name) for name in fields} == fields
        if same_study and model_record and record["metrics"].get("record") == model_record:
            return record
    return None


def grid_table(record: dict[str, Any], value: str = "bleu") -> Any:
    """``value`` (``bleu``, ``chrf``, ``length_ratio``) of a stored grid as a DataFrame: one row
    per beam size, one column per alpha; greedy (beam 1) has the same value in every column."""
    import pandas as pd

    grid = record["metrics"]["grid"]
    alphas = sorted({row["alpha"] for row in grid if row["alpha"] is not None})
    table = {}
    for row in grid:
        for alpha in alphas if row["alpha"] is None else [row["alpha"]]:
            table.setdefault(row["beam"], {})[alpha] = row[value]
    frame = pd.DataFrame.from_dict(table, orient="index")[alphas].sort_index()
    frame.index.name, frame.columns.name = "beam", "α"
    return frame


@dataclass(frozen=True)
class SearchCount:
    """How many of the searched sentences something held for, with a 95% Wilson interval."""

    count: int
    sentences: int
    low: float
    high: float

    @property
    def fraction(self) -> float:
        return self.count / self.sentences


def _count(count: int, sentences: int) -> SearchCount:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(count, sentences, alpha=0.05, method="wilson")
    return SearchCount(count, sentences, float(low), float(high))


def search_summary(record: dict[str, Any]) -> dict[str, SearchCount]:
    """Counts over the proven searches of a stored record: ``errors <k>`` (beam ``k`` returned a
    less probable translation than the optimum: a search error), ``empty optimum`` (the most
    probable translation is the empty one), ``empty beats beam <k>`` (the empty output is more
    probable than beam ``k``'s, over every searched sentence, proven or not: it needs no
    optimum)."""
    rows = record["metrics"]["search"]
    proven = [row for row in rows if row["proven"]]
    beams = list(rows[0]["beam_scores"])
    counts = {"proven": _count(len(proven), len(rows))}
    for beam in beams:
        missed = sum(row["beam_scores"][beam] < row["optimum"] - TOLERANCE for row in proven)
        counts[f"errors {beam}"] = _count(missed, len(proven))
    counts["empty optimum"] = _count(sum(row["optimum_length"] == 1 for row in proven), len(proven))
    for beam in beams:
        beaten = sum(row["empty"] > row["beam_scores"][beam] + TOLERANCE for row in rows)
        counts[f"empty beats beam {beam}"] = _count(beaten, len(rows))
    return counts


def format_count(count: SearchCount) -> str:
    """``12 / 180 (4–11 %)``: the count, the sentences, and the 95% interval of the fraction."""
    return f"{count.count} / {count.sentences} ({100 * count.low:.0f}–{100 * count.high:.0f} %)"
