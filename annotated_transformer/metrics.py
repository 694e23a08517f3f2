"""Evaluation metrics (chapter 08): loss, perplexity, token accuracy, BLEU and chrF.

BLEU and chrF come from sacrebleu (Post 2018), whose *signature* records every setting that changes
the number (tokenizer, casing, smoothing, version): a BLEU score without it cannot be compared.
Confidence intervals and paired comparisons of BLEU come from sacreBLEU's own bootstrap over test
sentences (Koehn 2004); the t distribution of the seed statistics (chapter 09) from ``scipy.stats``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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
    length_ratio: float | None = None  # BLEU's hypothesis / reference length (tokenized)

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
    ratio = result.sys_len / result.ref_len if result.ref_len else None
    return Score("BLEU", result.score, str(metric.get_signature()), ratio)


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
    """A point estimate with a confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        percent = round(100 * self.confidence)
        return f"{self.estimate:.2f} ({percent}% CI {self.low:.2f} to {self.high:.2f})"


SACREBLEU_SEED = 12345  # sacreBLEU's own default seed for its resampling


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacreBLEU reads its resampling seed from ``SACREBLEU_SEED`` only: set it for one call."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 1:
        # sacreBLEU's paired test treats a seed of 0 as "no seed" and draws from the OS.
        raise ValueError(f"seed={seed!r} is not accepted: use a positive integer")
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _check_resamples(resamples: int) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples={resamples!r} is not accepted: use an integer >= 1")


def bleu_interval(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = SACREBLEU_SEED,
    tokenize: str = "13a",
    lowercase: bool = False,
) -> Interval:
    """Corpus BLEU with sacreBLEU's own 95% bootstrap interval over sentences (Koehn 2004).

    sacreBLEU resamples the sentences' n-gram statistics ``resamples`` times and reports
    ``mean ± half-width`` of the 2.5%–97.5% range of the resampled scores (``sacrebleu
    --confidence`` prints the same numbers): ``low``/``high`` are that mean minus/plus the
    half-width, ``estimate`` the BLEU of the whole corpus.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    _check_parallel(hypotheses, references)
    _check_resamples(resamples)
    with _sacrebleu_seed(seed):
        test = PairedTest(
            [("system", list(hypotheses))],
            {"BLEU": BLEU(tokenize=tokenize, lowercase=lowercase)},
            [list(references)],
            test_type="bs",
            n_samples=resamples,
        )
        _, results = test()
    (result,) = results["BLEU"]
    low, high = float(result.mean - result.ci), float(result.mean + result.ci)
    return Interval(float(result.score), low, high, 0.95)


@dataclass(frozen=True)
class PairedComparison:
    """sacreBLEU's paired bootstrap test of a system against a baseline on the same sentences.

    ``difference``: system BLEU minus baseline BLEU; ``p_value``: the probability of a
    difference at least this large (either way) if the two systems were equally good;
    ``low``/``high``: the system's 95% bootstrap interval (as :func:`bleu_interval`).
    """

    baseline: float
    system: float
    difference: float
    p_value: float
    low: float
    high: float
    signature: str


def paired_bleu(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = SACREBLEU_SEED,
    tokenize: str = "13a",
    lowercase: bool = False,
) -> PairedComparison:
    """Is ``system`` better than ``baseline`` beyond the test-set noise? sacreBLEU's paired
    bootstrap resampling (``sacrebleu --paired-bs``, Koehn 2004): both systems are scored on the
    same ``resamples`` resamples of the sentences."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    _check_parallel(baseline, references)
    _check_parallel(system, references)
    _check_resamples(resamples)
    with _sacrebleu_seed(seed):
        test = PairedTest(
            [("baseline", list(baseline)), ("system", list(system))],
            {"BLEU": BLEU(tokenize=tokenize, lowercase=lowercase)},
            [list(references)],
            test_type="bs",
            n_samples=resamples,
        )
        signatures, results = test()
    first, second = results["BLEU"]
    return PairedComparison(
        baseline=first.score,
        system=second.score,
        difference=second.score - first.score,
        p_value=float(second.p_value),
        low=float(second.mean - second.ci),
        high=float(second.mean + second.ci),
        signature=str(signatures["BLEU"]),
    )


def bleu_difference(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = SACREBLEU_SEED,
    confidence: float = 0.95,
) -> Interval:
    """``system`` BLEU minus ``baseline`` BLEU on the same sentences, with a paired bootstrap
    percentile interval of the difference: both scored on each of ``resamples`` resamples of the
    sentences, drawn as sacreBLEU's paired test draws them (:func:`paired_bleu` gives its
    p-value, but an interval of the system's BLEU alone, not of the difference)."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    _check_parallel(baseline, references)
    _check_parallel(system, references)
    _check_resamples(resamples)
    metric = BLEU()
    stats = [
        np.array(metric._extract_corpus_statistics(list(texts), [list(references)]), "float64")
        for texts in (baseline, system)
    ]  # each [N, 2 + 4 * 2]: lengths, then matches and totals by n-gram order
    index = np.random.default_rng(seed).choice(len(references), (resamples, len(references)))
    first, second = (
        np.array([metric._compute_score_from_stats(s[rows].sum(0)).score for rows in index])
        for s in stats
    )
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(second - first, [tail, 100 - tail])
    estimate = corpus_bleu(system, references).score - corpus_bleu(baseline, references).score
    return Interval(float(estimate), float(low), float(high), confidence)


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean with a Student-t confidence interval (for a handful of seeds, where the bootstrap is
    unreliable): ``mean ± t_{(1+confidence)/2, n-1} · s / √n``."""
    from statistics import mean, stdev

    values = [float(v) for v in values]
    if len(values) < 2:
        return Interval(values[0], math.nan, math.nan, confidence)
    center = mean(values)
    half_width = t_quantile(1 - (1 - confidence) / 2, len(values) - 1) * stdev(values)
    half_width /= math.sqrt(len(values))
    return Interval(center, center - half_width, center + half_width, confidence)


def t_cdf(t: float, degrees: float) -> float:
    """CDF of Student's t with ``degrees`` of freedom (any positive number; Welch's test has
    fractional ones), from ``scipy.stats.t``."""
    from scipy import stats

    if not degrees > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {degrees}")
    return float(stats.t.cdf(t, degrees))


def t_quantile(probability: float, degrees: float) -> float:
    """Inverse of :func:`t_cdf`: the ``probability`` quantile of Student's t, from
    ``scipy.stats.t``."""
    from scipy import stats

    if not 0 < probability < 1:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    if not degrees > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {degrees}")
    return float(stats.t.ppf(probability, degrees))
