"""Metrics against their references: sacrebleu, F.cross_entropy, and the t distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from annotated_transformer.metrics import (
    bleu_interval,
    bootstrap_interval,
    corpus_bleu,
    corpus_chrf,
    mean_interval,
    perplexity,
    t_cdf,
    t_quantile,
    token_accuracy,
    token_loss,
)

HYPOTHESES = [
    "a man is riding a bike down the street .",
    "two dogs play in the snow",
    "A woman in a red dress walks.",
    "children are playing soccer on a field",
]
REFERENCES = [
    "A man rides a bicycle down the street.",
    "Two dogs are playing in the snow.",
    "A woman in a red dress is walking.",
    "Kids play soccer in a field.",
]


def test_bleu_equals_sacrebleu_and_reports_its_signature():
    ours = corpus_bleu(HYPOTHESES, REFERENCES)
    reference = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert ours.score == pytest.approx(reference.score, abs=1e-9)
    assert "tok:13a" in ours.signature and "case:mixed" in ours.signature
    assert "version:" in ours.signature


def test_lowercased_bleu_equals_sacrebleu_lowercase():
    ours = corpus_bleu(HYPOTHESES, REFERENCES, lowercase=True)
    reference = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True)
    assert ours.score == pytest.approx(reference.score, abs=1e-9)
    assert ours.score > corpus_bleu(HYPOTHESES, REFERENCES).score  # casing was costing points
    assert "case:lc" in ours.signature


def test_chrf_equals_sacrebleu():
    ours = corpus_chrf(HYPOTHESES, REFERENCES)
    assert ours.score == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)


def test_perfect_translation_scores_100():
    assert corpus_bleu(REFERENCES, REFERENCES).score == pytest.approx(100.0)


def test_bleu_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="one reference per hypothesis, got 4 hypotheses and 3"):
        corpus_bleu(HYPOTHESES, REFERENCES[:3])


def test_token_loss_and_accuracy_skip_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    target = torch.randint(1, 7, (2, 5))
    target[1, 3:] = 0
    expected = F.cross_entropy(logits[target != 0], target[target != 0])
    torch.testing.assert_close(token_loss(logits, target, ignore_index=0), expected)
    keep = target != 0
    manual = (logits.argmax(-1)[keep] == target[keep]).float().mean().item()
    assert token_accuracy(logits, target, ignore_index=0) == pytest.approx(manual)
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert perplexity(1e4) == math.inf


@pytest.mark.parametrize("degrees", [1, 2, 3, 4, 7, 10])
def test_t_cdf_matches_numerical_integration_of_the_density(degrees):
    distribution = torch.distributions.StudentT(torch.tensor(float(degrees), dtype=torch.float64))
    grid = torch.linspace(-2000.0, 2.5, 2_000_001, dtype=torch.float64)
    density = distribution.log_prob(grid).exp()
    integral = torch.trapezoid(density, grid).item()
    tail = 0.0 if degrees > 1 else 1 / math.pi * math.atan(1 / 2000)  # Cauchy mass below -2000
    assert t_cdf(2.5, degrees) == pytest.approx(integral + tail, abs=2e-4)


def test_t_quantile_inverts_the_cdf():
    for degrees in (1, 2, 5, 30):
        for probability in (0.6, 0.9, 0.975, 0.995):
            assert t_cdf(t_quantile(probability, degrees), degrees) == pytest.approx(probability)


def test_mean_interval_is_the_student_t_interval():
    values = [30.1, 31.4, 29.8]
    interval = mean_interval(values)
    half = t_quantile(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert interval.estimate == pytest.approx(np.mean(values))
    assert interval.high - interval.estimate == pytest.approx(half)
    assert interval.low < min(values) < max(values) < interval.high  # 3 seeds: a wide interval


def test_bootstrap_interval_of_a_mean_matches_theory():
    generator = np.random.default_rng(1)
    data = generator.normal(5.0, 2.0, size=400)
    interval = bootstrap_interval(lambda index: data[index].mean(), len(data), resamples=2000)
    standard_error = data.std(ddof=1) / math.sqrt(len(data))
    assert interval.low < interval.estimate < interval.high
    assert interval.high - interval.low == pytest.approx(2 * 1.96 * standard_error, rel=0.15)


def test_bleu_interval_is_reproducible_and_brackets_the_score():
    first = bleu_interval(HYPOTHESES * 5, REFERENCES * 5, resamples=200, seed=3)
    second = bleu_interval(HYPOTHESES * 5, REFERENCES * 5, resamples=200, seed=3)
    assert first == second
    assert first.low <= first.estimate <= first.high
    assert first.estimate == pytest.approx(corpus_bleu(HYPOTHESES * 5, REFERENCES * 5).score)
