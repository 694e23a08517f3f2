"""Metrics against their references: sacrebleu (scores, its bootstrap interval and paired test),
F.cross_entropy, and the t distribution."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from annotated_transformer.metrics import (
    bleu_difference,
    bleu_interval,
    corpus_bleu,
    corpus_chrf,
    mean_interval,
    paired_bleu,
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
    # the length ratio behind BLEU's brevity penalty, as sacrebleu prints it ("ratio = ...")
    assert ours.length_ratio == pytest.approx(reference.sys_len / reference.ref_len)
    assert f"ratio = {ours.length_ratio:.3f}" in str(reference)


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


def test_t_distribution_matches_closed_forms_and_a_t_table():
    for t in (-3.0, 0.4, 2.5):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    table = {(0.975, 1): 12.706, (0.975, 2): 4.303, (0.975, 10): 2.228, (0.995, 30): 2.750}
    for (probability, degrees), value in table.items():
        assert t_quantile(probability, degrees) == pytest.approx(value, abs=5e-4)


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


def test_fractional_degrees_of_freedom_lie_between_their_integer_neighbours():
    # Welch's test has fractional df: the t CDF moves monotonically from 3 to 4 degrees.
    assert t_cdf(2.5, 3) < t_cdf(2.5, 3.5) < t_cdf(2.5, 4)
    with pytest.raises(ValueError, match="degrees of freedom must be > 0, got 0"):
        t_quantile(0.9, 0)


def test_bleu_interval_is_sacrebleus_own_bootstrap(monkeypatch):
    hypotheses, references = HYPOTHESES * 5, REFERENCES * 5
    ours = bleu_interval(hypotheses, references, resamples=300, seed=7)
    # What `sacrebleu --confidence` reports for the same seed: mean ± half-width (JSON form).
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(hypotheses, [references], n_bootstrap=300)
    signature = str(metric.get_signature())
    reported = json.loads(score.format(width=6, signature=signature, is_json=True))
    center, half = reported["confidence_mean"], reported["confidence_var"]
    assert ours.estimate == pytest.approx(score.score, abs=1e-9)
    assert ours.low == pytest.approx(center - half, abs=1e-5)
    assert ours.high == pytest.approx(center + half, abs=1e-5)
    assert ours.confidence == 0.95 and half > 0


def test_bleu_interval_is_reproducible_leaves_the_environment_alone_and_brackets_the_score():
    before = os.environ.get("SACREBLEU_SEED")
    first = bleu_interval(HYPOTHESES * 5, REFERENCES * 5, resamples=200, seed=3)
    second = bleu_interval(HYPOTHESES * 5, REFERENCES * 5, resamples=200, seed=3)
    other = bleu_interval(HYPOTHESES * 5, REFERENCES * 5, resamples=200, seed=4)
    assert os.environ.get("SACREBLEU_SEED") == before
    assert first == second and other != first
    assert first.low <= first.estimate <= first.high
    assert first.estimate == pytest.approx(corpus_bleu(HYPOTHESES * 5, REFERENCES * 5).score)


def test_bleu_interval_refuses_a_seed_sacrebleu_would_ignore():
    with pytest.raises(ValueError, match="seed=0 is not accepted: use a positive integer"):
        bleu_interval(HYPOTHESES, REFERENCES, seed=0)
    with pytest.raises(ValueError, match="resamples=0 is not accepted: use an integer >= 1"):
        bleu_interval(HYPOTHESES, REFERENCES, resamples=0)


def test_bleu_difference_resamples_whole_corpora_as_sacrebleu_scores_them():
    references = REFERENCES * 10
    weak = ["a man ." if i % 2 else h for i, h in enumerate(HYPOTHESES * 10)]
    strong = HYPOTHESES * 10
    found = bleu_difference(weak, strong, references, resamples=200, seed=7)
    assert found.estimate == pytest.approx(
        sacrebleu.corpus_bleu(strong, [references]).score
        - sacrebleu.corpus_bleu(weak, [references]).score
    )
    # the reference: each resample's two corpora scored from scratch by sacrebleu
    rows = np.random.default_rng(7).choice(len(references), (200, len(references)))

    def score(texts, picked):
        chosen = [texts[i] for i in picked]
        return sacrebleu.corpus_bleu(chosen, [[references[i] for i in picked]]).score

    differences = [score(strong, picked) - score(weak, picked) for picked in rows]
    low, high = np.percentile(differences, [2.5, 97.5])
    assert (found.low, found.high) == pytest.approx((low, high), abs=1e-6)
    assert 0 < found.low < found.estimate < found.high  # half the sentences cut: beyond noise
    swapped = bleu_difference(strong, weak, references, resamples=200, seed=7)
    assert (swapped.low, swapped.high) == pytest.approx((-found.high, -found.low))
    same = bleu_difference(strong, strong, references, resamples=50)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def test_paired_bleu_is_sacrebleus_paired_bootstrap():
    references = REFERENCES * 10
    weak = ["a man ." if i % 2 else h for i, h in enumerate(HYPOTHESES * 10)]
    better = paired_bleu(weak, HYPOTHESES * 10, references, resamples=300)
    assert better.baseline == pytest.approx(corpus_bleu(weak, references).score)
    assert better.system == pytest.approx(corpus_bleu(HYPOTHESES * 10, references).score)
    assert (
        better.difference == pytest.approx(better.system - better.baseline)
        and better.difference > 0
    )
    assert better.p_value < 0.05  # half the sentences truncated: beyond test-set noise
    assert "bs:300" in better.signature and "seed:12345" in better.signature
    # The test is of |difference|: swapping the systems gives the same p-value.
    swapped = paired_bleu(HYPOTHESES * 10, weak, references, resamples=300)
    assert swapped.p_value == better.p_value and swapped.difference == -better.difference
    # One sentence changed out of 40: not a difference the test can see.
    close = HYPOTHESES * 10
    close = ["two dogs play in snow", *close[1:]]
    assert paired_bleu(HYPOTHESES * 10, close, references, resamples=300).p_value > 0.05
