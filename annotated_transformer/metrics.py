"""Evaluation metrics (chapter 08): loss, perplexity, token accuracy, BLEU and chrF.

BLEU and chrF come from sacrebleu (Post 2018), whose *signature* records every setting that changes
the number (tokenizer, casing, smoothing, version): a BLEU score without it cannot be compared.
Confidence intervals come from the bootstrap over test sentences (Koehn 2004).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch.nn.functional as F
from torch import Tensor


def token_loss(logits: Tensor, target: Tensor, ignore_index: int | None = None) -> Tensor:
    """Mean cross-entropy per target token (nats), skipping ``ignore_index``.

    Args:
        logits: ``[B, T, V]``.
        target: ``[B, T]``.
    """
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ignore_index=-100 if ignore_index is None else ignore_index,
    )


def perplexity(mean_loss: float) -> float:
    """``exp(mean cross-entropy per token)``: the effective number of equally likely choices.

    Returns ``inf`` for a loss beyond float range (a diverged model), never an OverflowError.
    """
    return math.exp(mean_loss) if mean_loss < 709.0 else math.inf


def token_accuracy(logits: Tensor, target: Tensor, ignore_index: int | None = None) -> float:
    """Fraction of target tokens whose argmax prediction is right, skipping ``ignore_index``."""
    correct = logits.argmax(-1) == target  # [B, T]
    if ignore_index is not None:
        keep = target != ignore_index
        return (correct & keep).sum().item() / max(keep.sum().item(), 1)
    return correct.float().mean().item()


@dataclass
class Score:
    """A corpus-level score with the sacrebleu signature that makes it reproducible."""

    name: str
    score: float
    signature: str

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}  ({self.signature})"


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    tokenize: str = "13a",
    lowercase: bool = False,
) -> Score:
    """Corpus BLEU of detokenized ``hypotheses`` against one reference each, through sacrebleu.

    The defaults are sacreBLEU's standard (``13a`` tokenization, cased); ``lowercase=True`` gives
    the lowercased BLEU that many Multi30k papers report.
    """
    from sacrebleu.metrics import BLEU

    _check_parallel(hypotheses, references)
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("BLEU", result.score, str(metric.get_signature()))


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Corpus chrF (character n-gram F-score, Popović 2015) through sacrebleu."""
    from sacrebleu.metrics import CHRF

    _check_parallel(hypotheses, references)
    metric = CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("chrF", result.score, str(metric.get_signature()))


def _check_parallel(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"need one reference per hypothesis, got {len(hypotheses)} hypotheses and "
            f"{len(references)} references"
        )
    if not hypotheses:
        raise ValueError("no hypotheses to score")


@dataclass
class Interval:
    """A point estimate with a bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        percent = round(100 * self.confidence)
        return f"{self.estimate:.2f} ({percent}% CI {self.low:.2f} to {self.high:.2f})"


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    size: int,
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap: recompute ``statistic`` on ``resamples`` resamples of ``size`` items.

    Args:
        statistic: maps an index array (items drawn with replacement) to a number, e.g. the corpus
            BLEU of those sentences.
        size: how many items (sentences, tokens, runs) there are.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if size < 1:
        raise ValueError(f"need at least one item to resample, got size={size}")
    generator = np.random.default_rng(seed)
    estimate = statistic(np.arange(size))
    values = np.array(
        [statistic(generator.integers(0, size, size)) for _ in range(resamples)], dtype=float
    )
    tail = (1 - confidence) / 2
    low, high = np.quantile(values, [tail, 1 - tail])
    return Interval(float(estimate), float(low), float(high), confidence)


def bleu_interval(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    **bleu_options,
) -> Interval:
    """Corpus BLEU with a sentence-level bootstrap confidence interval."""
    _check_parallel(hypotheses, references)

    def bleu_of(index: np.ndarray) -> float:
        picked = index.tolist()
        return corpus_bleu(
            [hypotheses[i] for i in picked], [references[i] for i in picked], **bleu_options
        ).score

    return bootstrap_interval(
        bleu_of, len(hypotheses), resamples=resamples, confidence=confidence, seed=seed
    )


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean with a Student-t confidence interval (for a handful of seeds, where the bootstrap is
    unreliable)."""
    from statistics import mean, stdev

    values = [float(v) for v in values]
    if len(values) < 2:
        return Interval(values[0], math.nan, math.nan, confidence)
    center = mean(values)
    half_width = t_quantile(1 - (1 - confidence) / 2, len(values) - 1) * stdev(values)
    half_width /= math.sqrt(len(values))
    return Interval(center, center - half_width, center + half_width, confidence)


def t_cdf(t: float, degrees: int) -> float:
    """CDF of Student's t with integer ``degrees`` of freedom, in closed form.

    Abramowitz & Stegun 26.7.3–4: with ``θ = atan(t / √ν)``, ``A = P(|T| <= |t|)`` is a finite
    series in ``cos θ``; odd and even ``ν`` have different series.
    """
    if degrees < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {degrees}")
    theta = math.atan(abs(t) / math.sqrt(degrees))
    cos_sq = math.cos(theta) ** 2
    if degrees % 2 == 1:
        term, series = math.cos(theta), 0.0
        if degrees > 1:
            series = term
            for k in range(3, degrees - 1, 2):  # coefficients 2/3, 2·4/(3·5), ...
                term *= (k - 1) / k * cos_sq
                series += term
        inside = (2 / math.pi) * (theta + math.sin(theta) * series)
    else:
        term, series = 1.0, 1.0
        for k in range(2, degrees - 1, 2):  # coefficients 1/2, 1·3/(2·4), ...
            term *= (k - 1) / k * cos_sq
            series += term
        inside = math.sin(theta) * series
    return 0.5 + math.copysign(inside / 2, t)


def t_quantile(probability: float, degrees: int) -> float:
    """Inverse of :func:`t_cdf` by bisection."""
    if not 0 < probability < 1:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, degrees) < probability else (low, middle)
    return (low + high) / 2
