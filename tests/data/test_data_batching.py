"""Token-budget batches: the budget, one epoch covers every pair once, reproducible shuffles,
aligned and right-padded tensors, evaluation order, and a model that reads them."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.data import (
    BPETokenizer,
    TranslationSource,
    collate_pairs,
    encode_pairs,
    load_translation_corpus,
    pair_length,
    token_budget_batches,
    translation_batches,
)

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile
MAX_TOKENS = 600


@pytest.fixture(scope="module")
def tokenizer_and_pairs():
    """3,000 Multi30k training pairs as ids, with a small joint BPE vocabulary learnt on them."""
    train = load_translation_corpus("multi30k", data_dir=SHARED_DATA).splits["train"][:3000]
    tokenizer = BPETokenizer.train([sentence for pair in train for sentence in pair], 1000)
    return tokenizer, encode_pairs(train, tokenizer)


def epoch(tokenizer_and_pairs, seed: int | None) -> list:
    tokenizer, pairs = tokenizer_and_pairs
    if seed is None:
        return translation_batches(pairs, tokenizer, MAX_TOKENS)
    generator = torch.Generator().manual_seed(seed)
    return translation_batches(pairs, tokenizer, MAX_TOKENS, shuffle=True, generator=generator)


def unpad(row: torch.Tensor, pad_id: int) -> list[int]:
    real = row != pad_id
    assert torch.equal(real, real.sort(descending=True).values), "padding inside a row"
    return row[real].tolist()


def pairs_of(batches, tokenizer) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (source, target) ids each batch row holds, checking the layout of every row."""
    pad, bos, eos = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
    rows = []
    for batch in batches:
        for src, inputs, targets in zip(batch.src, batch.inputs, batch.targets, strict=True):
            source, decoder_in, decoder_out = (unpad(r, pad) for r in (src, inputs, targets))
            assert source[-1] == eos and eos not in source[:-1]
            assert decoder_in[0] == bos and decoder_out[-1] == eos
            assert decoder_in[1:] == decoder_out[:-1]  # inputs are the targets shifted right
            rows.append((tuple(source[:-1]), tuple(decoder_out[:-1])))
    return rows


def test_batches_respect_the_token_budget(tokenizer_and_pairs):
    batches = epoch(tokenizer_and_pairs, seed=0)
    for batch in batches:
        assert batch.src.numel() <= MAX_TOKENS and batch.inputs.numel() <= MAX_TOKENS
        assert batch.inputs.shape == batch.targets.shape
        assert batch.src.size(0) == batch.inputs.size(0)
        assert batch.src.dtype == batch.inputs.dtype == torch.long
    # packing is greedy: only the last batch packed (anywhere after the shuffle) may be half empty
    costs = [max(batch.src.numel(), batch.inputs.numel()) for batch in batches]
    assert sum(cost <= MAX_TOKENS / 2 for cost in costs) <= 1


def test_one_epoch_holds_every_pair_exactly_once(tokenizer_and_pairs):
    tokenizer, pairs = tokenizer_and_pairs
    rows = pairs_of(epoch(tokenizer_and_pairs, seed=0), tokenizer)
    expected = collections.Counter((tuple(source), tuple(target)) for source, target in pairs)
    assert collections.Counter(rows) == expected


def test_shuffles_are_reproducible_and_differ_across_seeds_and_epochs(tokenizer_and_pairs):
    first, again, other = (epoch(tokenizer_and_pairs, seed) for seed in (0, 0, 1))
    assert len(first) == len(again)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.src, b.src) and torch.equal(a.inputs, b.inputs)
    assert [b.src.tolist() for b in first] != [b.src.tolist() for b in other]
    tokenizer, pairs = tokenizer_and_pairs
    generator = torch.Generator().manual_seed(0)
    epoch_one = translation_batches(pairs, tokenizer, MAX_TOKENS, shuffle=True, generator=generator)
    epoch_two = translation_batches(pairs, tokenizer, MAX_TOKENS, shuffle=True, generator=generator)
    assert [b.src.tolist() for b in epoch_one] == [b.src.tolist() for b in first]
    assert [b.src.tolist() for b in epoch_two] != [b.src.tolist() for b in epoch_one]


def test_length_bucketing_keeps_padding_small(tokenizer_and_pairs):
    tokenizer = tokenizer_and_pairs[0]

    def padding_fraction(batches) -> float:
        padded = sum(b.src.numel() + b.targets.numel() for b in batches)
        real = sum(int((b.src != 0).sum() + (b.targets != 0).sum()) for b in batches)
        return 1 - real / padded

    assert tokenizer.pad_id == 0
    bucketed, in_order = epoch(tokenizer_and_pairs, seed=0), epoch(tokenizer_and_pairs, seed=None)
    assert padding_fraction(bucketed) < 0.15 < padding_fraction(in_order)


def test_evaluation_batches_keep_the_order(tokenizer_and_pairs):
    tokenizer, pairs = tokenizer_and_pairs
    rows = pairs_of(epoch(tokenizer_and_pairs, seed=None), tokenizer)
    assert rows == [(tuple(source), tuple(target)) for source, target in pairs]


def test_collate_pairs_pads_on_the_right():
    batch = collate_pairs([([5, 6, 7], [8]), ([9], [10, 11, 12])], pad_id=0, bos_id=1, eos_id=2)
    assert batch.src.tolist() == [[5, 6, 7, 2], [9, 2, 0, 0]]
    assert batch.inputs.tolist() == [[1, 8, 0, 0], [1, 10, 11, 12]]
    assert batch.targets.tolist() == [[8, 2, 0, 0], [10, 11, 12, 2]]
    assert pair_length(([5, 6, 7], [8])) == 4


def test_token_budget_batches_cover_indices_and_refuse_overlong_pairs():
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 50, (1000,), generator=generator).tolist()
    groups = token_budget_batches(lengths, 200, shuffle=True, generator=generator)
    assert sorted(index for group in groups for index in group) == list(range(1000))
    assert all(len(group) * max(lengths[i] for i in group) <= 200 for group in groups)
    assert token_budget_batches([3, 3, 3, 5], 9) == [[0, 1, 2], [3]]
    with pytest.raises(
        ValueError, match=r"max_tokens=40 is smaller than 2 pair\(s\), the longest 49"
    ):
        token_budget_batches([10, 45, 49], 40)


def test_padding_does_not_change_what_the_model_computes(tokenizer_and_pairs):
    """The model builds its masks from pad_id, once per batch: a padded row gives the logits it
    gives alone."""
    tokenizer, pairs = tokenizer_and_pairs
    sizes = {"vocab_size": tokenizer.vocab_size, "d_model": 32, "d_ff": 64, "max_len": 512}
    model = tiny_model("encoder-decoder", pad_id=tokenizer.pad_id, **sizes).eval()
    batch = epoch(tokenizer_and_pairs, seed=None)[0]
    logits = model(batch.src, batch.inputs)  # [B, T, V]
    assert logits.shape == (*batch.inputs.shape, tokenizer.vocab_size)
    for row in range(batch.src.size(0)):
        source = batch.src[row][batch.src[row] != 0][None]  # [1, S_row]
        inputs = batch.inputs[row][batch.inputs[row] != 0][None]  # [1, T_row]
        alone = model(source, inputs)  # [1, T_row, V]
        torch.testing.assert_close(logits[row, : inputs.size(1)], alone[0], atol=1e-5, rtol=1e-5)


def test_translation_source_is_the_trainers_epoch_of_batches(tokenizer_and_pairs):
    tokenizer, pairs = tokenizer_and_pairs
    source = TranslationSource(pairs, tokenizer, MAX_TOKENS)
    lazy = source(0, torch.Generator().manual_seed(0))
    assert not isinstance(lazy, list)  # padded one batch at a time: a resumed run skips cheaply
    batches = list(lazy)
    expected = epoch(tokenizer_and_pairs, seed=0)
    assert [b.src.tolist() for b in batches] == [b.src.tolist() for b in expected]
    assert [b.targets.tolist() for b in batches] == [b.targets.tolist() for b in expected]
