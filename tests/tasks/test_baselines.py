"""baselines.py: unigram and interpolated bigram losses, against counts done by hand."""

import math
from collections import Counter

import pytest
import torch

from annotated_transformer.tasks.baselines import (
    LAMBDAS,
    bigram_loss,
    copied_source_bleu,
    count_baselines,
    unigram_log_probs,
)


def reference_bigram(train: list[int], evaluate: list[int], vocab: int, lam: float) -> float:
    pairs, contexts, unigrams = (
        Counter(zip(train, train[1:], strict=False)),
        Counter(train[:-1]),
        Counter(train),
    )
    total = 0.0
    for previous, current in zip(evaluate, evaluate[1:], strict=False):
        unigram = (unigrams[current] + 1) / (len(train) + vocab)
        if contexts[previous]:
            p = lam * pairs[previous, current] / contexts[previous] + (1 - lam) * unigram
        else:
            p = unigram
        total -= math.log(p)
    return total / (len(evaluate) - 1)


def test_unigram_is_add_one():
    log_probs = unigram_log_probs(torch.tensor([0, 1, 1, 2]), 4)
    assert torch.allclose(log_probs.exp(), torch.tensor([2, 3, 2, 1], dtype=torch.double) / 8)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.9])
def test_bigram_matches_counting_by_hand(lam):
    generator = torch.Generator().manual_seed(0)
    train = torch.randint(0, 6, (200,), generator=generator)
    evaluate = torch.cat([torch.randint(0, 6, (50,), generator=generator), torch.tensor([6, 2])])
    # id 6 never occurs in training: as a context it falls back to the unigram
    expected = reference_bigram(train.tolist(), evaluate.tolist(), 7, lam)
    assert bigram_loss(train, evaluate, 7, lam) == pytest.approx(expected, rel=1e-12)


def test_lambda_is_chosen_on_the_held_out_split():
    generator = torch.Generator().manual_seed(1)
    train, held_out, test = (torch.randint(0, 5, (n,), generator=generator) for n in (300, 80, 80))
    result = count_baselines(train, held_out, test, 5)
    best = min(LAMBDAS, key=lambda lam: reference_bigram(train.tolist(), held_out.tolist(), 5, lam))
    assert result.lam == best
    assert result.bigram_loss == pytest.approx(
        reference_bigram(train.tolist(), test.tolist(), 5, best)
    )
    assert result.bigram_perplexity == pytest.approx(math.exp(result.bigram_loss))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="outside"):
        bigram_loss(torch.tensor([0, 5]), torch.tensor([0, 1]), 5, 0.5)
    with pytest.raises(ValueError, match="lam=1.5 is not in"):
        bigram_loss(torch.tensor([0, 1]), torch.tensor([0, 1]), 5, 1.5)
    with pytest.raises(ValueError, match="at least 2 token ids"):
        unigram_log_probs(torch.tensor([1]), 5)


def test_tiny_shakespeare_bigram_sits_near_2_5_nats():
    from annotated_transformer.data import load_language_model_corpus

    corpus = load_language_model_corpus("tinyshakespeare")
    splits, vocab = corpus.splits, corpus.tokenizer.vocab_size
    result = count_baselines(splits["train"], splits["valid"], splits["valid"], vocab)
    # a character bigram model of English: about 2.5 nats; the unigram about 3.3
    assert 2.4 < result.bigram_loss < 2.6 and 3.2 < result.unigram_loss < 3.4


def test_a_large_vocabulary_needs_no_table_of_every_pair():
    # a [V, V] table at V = 10**6 would be 8 TB: the counts must stay sparse
    train = torch.tensor([0, 999_999, 5, 999_999, 5])
    loss = bigram_loss(train, torch.tensor([999_999, 5]), 1_000_000, 0.5)
    unigram = 3 / (5 + 1_000_000)  # c(5) = 2, add one
    assert loss == pytest.approx(-math.log(0.5 * 1.0 + 0.5 * unigram))


def test_the_copied_source_is_sacrebleu_of_each_source_as_its_own_translation():
    import sacrebleu

    from annotated_transformer.data import load_translation_corpus

    pairs = load_translation_corpus("multi30k").splits["test"]
    expected = sacrebleu.corpus_bleu([s for s, _ in pairs], [[t for _, t in pairs]]).score
    assert copied_source_bleu("multi30k") == pytest.approx(expected)
    # German left as it is shares names, numbers and punctuation with English, little else
    assert 0.1 < expected < 5
    first = [s for s, _ in pairs[:100]], [[t for _, t in pairs[:100]]]
    assert copied_source_bleu("multi30k", "test", 100) == pytest.approx(
        sacrebleu.corpus_bleu(*first).score
    )
    with pytest.raises(ValueError, match="split='dev' is not one of: train, valid, test"):
        copied_source_bleu("multi30k", "dev")
