"""Trivial baselines: what a table of counts, or copying the input, achieves (chapters 08, 09).

A Transformer's validation loss means little on its own: a model that has only learnt which
symbol tends to follow which sits at the *bigram* level, and one that has learnt nothing but
symbol frequencies at the *unigram* level. These functions compute both from the training split,
so that every language-model result in the book can be printed beside them. A translation's
BLEU is set beside :func:`copied_source_bleu`: each source sentence left untranslated, which
scores above zero wherever the two languages share names, numbers and punctuation.

- unigram: ``p(w) = (c(w) + 1) / (N + V)`` (add-one, so that no symbol has probability zero);
- bigram, interpolated with that unigram (Jelinek & Mercer 1980):
  ``p(w | v) = λ · c(v, w) / c(v) + (1 - λ) · p(w)``, with ``λ`` chosen on a held-out split from a
  grid, never on the split that is reported.

Losses are mean negative log-likelihoods in nats per token, the unit of the training loss.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

LAMBDAS = tuple(round(0.05 * step, 2) for step in range(1, 20))  # 0.05 .. 0.95


@dataclass(frozen=True)
class CountBaselines:
    """Unigram and bigram losses (nats/token) on one split, with the chosen ``lam``."""

    unigram_loss: float
    bigram_loss: float
    lam: float

    @property
    def unigram_perplexity(self) -> float:
        return math.exp(self.unigram_loss)

    @property
    def bigram_perplexity(self) -> float:
        return math.exp(self.bigram_loss)


def _check(ids: Tensor, vocab_size: int, name: str) -> Tensor:
    if ids.dim() != 1 or ids.numel() < 2:
        raise ValueError(
            f"{name} must be a 1-D tensor of at least 2 token ids, got {tuple(ids.shape)}"
        )
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"{name} holds ids outside [0, {vocab_size})")
    return ids.long()


def unigram_log_probs(train: Tensor, vocab_size: int) -> Tensor:
    """``[V]`` add-one unigram log-probabilities from the training ids ``[N]``."""
    counts = torch.bincount(_check(train, vocab_size, "train"), minlength=vocab_size).double()
    return torch.log((counts + 1) / (counts.sum() + vocab_size))  # [V]


def bigram_parts(train: Tensor, evaluate: Tensor, vocab_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """For each prediction ``evaluate[t-1] -> evaluate[t]``: the bigram estimate
    ``c(v, w) / c(v)``, whether the context ``v`` occurs in ``train``, and the unigram ``p(w)``
    (each ``[M]``, ``M = len(evaluate) - 1``)."""
    train = _check(train, vocab_size, "train")
    evaluate = _check(evaluate, vocab_size, "evaluate")
    # Bigram counts kept sparse: a [V, V] table would not fit in memory for a 33k-word vocabulary.
    pair_ids, pair_counts = torch.unique(train[:-1] * vocab_size + train[1:], return_counts=True)
    context = torch.bincount(train[:-1], minlength=vocab_size).double()  # [V] c(v), left contexts
    previous, current = evaluate[:-1], evaluate[1:]  # [M], [M]
    wanted = previous * vocab_size + current  # [M]
    where = torch.searchsorted(pair_ids, wanted).clamp(max=pair_ids.numel() - 1)  # [M]
    found = pair_ids[where] == wanted
    counts = torch.where(found, pair_counts[where].double(), torch.zeros((), dtype=torch.double))
    conditional = counts / context[previous].clamp(min=1)  # [M] c(v, w) / c(v)
    unigram = unigram_log_probs(train, vocab_size).exp()[current]  # [M]
    return conditional, context[previous] > 0, unigram


def _interpolated_loss(parts: tuple[Tensor, Tensor, Tensor], lam: float) -> float:
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam} is not in [0, 1]")
    conditional, seen, unigram = parts
    weight = seen.double() * lam  # an unseen context falls back to the unigram
    return float(-torch.log(weight * conditional + (1 - weight) * unigram).mean())


def bigram_loss(train: Tensor, evaluate: Tensor, vocab_size: int, lam: float) -> float:
    """Mean NLL (nats) of ``evaluate[1:]`` given the previous token, under the interpolated bigram
    with weight ``lam`` on the bigram counts of ``train``."""
    return _interpolated_loss(bigram_parts(train, evaluate, vocab_size), lam)


def count_baselines(
    train: Tensor, held_out: Tensor, evaluate: Tensor, vocab_size: int
) -> CountBaselines:
    """Unigram and bigram losses on ``evaluate``, the bigram's ``λ`` chosen on ``held_out``
    (which may be ``evaluate`` itself only when no other split exists: say so when you print it)."""
    held_out_parts = bigram_parts(train, held_out, vocab_size)
    lam = min(LAMBDAS, key=lambda value: _interpolated_loss(held_out_parts, value))
    parts = bigram_parts(train, evaluate, vocab_size)
    return CountBaselines(
        unigram_loss=float(-parts[2].log().mean()),
        bigram_loss=_interpolated_loss(parts, lam),
        lam=lam,
    )


def copied_source_score(pairs: Sequence[tuple[str, str]]) -> float:
    """sacreBLEU (cased, detokenized, as the runs are scored) of each ``(source, target)`` pair's
    source given as its own translation."""
    from ..metrics import corpus_bleu

    return corpus_bleu([source for source, _ in pairs], [target for _, target in pairs]).score


@functools.lru_cache(maxsize=16)
def copied_source_bleu(task: str, split: str = "test", sentences: int | None = None) -> float:
    """:func:`copied_source_score` of a translation task's ``split`` (its first ``sentences``, or
    all). Reads the corpus (through ``AT_DATA_DIR``, the cache or a download); cached per
    process."""
    from ..data import load_translation_corpus

    splits = load_translation_corpus(task).splits
    if split not in splits:
        raise ValueError(f"split={split!r} is not one of: {', '.join(splits)}")
    return copied_source_score(splits[split][:sentences])
