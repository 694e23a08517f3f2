"""Language-model corpora: the published split sizes and vocabularies, windows for training and
for exact evaluation."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch

from annotated_transformer.data import (
    CharTokenizer,
    WindowSource,
    WordTokenizer,
    evaluation_windows,
    load_language_model_corpus,
    sample_windows,
)

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile


@functools.cache
def named_corpus(name: str):
    return load_language_model_corpus(name, data_dir=SHARED_DATA)


def test_tiny_shakespeare_is_split_90_10_by_characters(monkeypatch):
    monkeypatch.setenv("AT_DATA_DIR", str(SHARED_DATA))  # found through fetch, as in a notebook
    corpus = load_language_model_corpus("tinyshakespeare")
    assert {split: len(ids) for split, ids in corpus.splits.items()} == {
        "train": 1_003_854,
        "valid": 111_540,
    }
    assert isinstance(corpus.tokenizer, CharTokenizer)
    assert corpus.tokenizer.vocab_size == 65
    assert corpus.tokenizer.pad_id is None  # windows are never padded; id 0 is "\n"
    text = (SHARED_DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    assert corpus.tokenizer.decode(corpus.splits["valid"].tolist()) == text[1_003_854:]
    assert corpus.tokenizer.decode(corpus.splits["train"][:14].tolist()) == "First Citizen:"
    assert corpus.splits["train"].dtype == torch.long


@pytest.mark.parametrize(
    ("name", "sizes", "vocab_size"),
    [
        ("ptb", (929_589, 73_760, 82_430), 10_000),
        ("wikitext-2", (2_088_628, 217_646, 245_569), 33_278),
    ],
)
def test_word_level_corpora_match_the_published_counts(name, sizes, vocab_size):
    corpus = named_corpus(name)
    assert tuple(len(corpus.splits[split]) for split in ("train", "valid", "test")) == sizes
    tokenizer = corpus.tokenizer
    assert isinstance(tokenizer, WordTokenizer)
    assert tokenizer.vocab_size == vocab_size
    assert tokenizer.symbols[tokenizer.unk_id] == "<unk>"  # in the text already, not added
    assert tokenizer.pad_id is None
    valid = corpus.splits["valid"]
    lines = (SHARED_DATA / name / ("ptb.valid.txt" if name == "ptb" else "valid.txt")).read_text(
        encoding="utf-8"
    )
    assert int((valid == tokenizer.eos_id).sum()) == lines.count("\n")
    first_line = lines.split("\n")[0].split() + ["<eos>"]
    assert tokenizer.decode(valid[: len(first_line)].tolist()) == " ".join(first_line[:-1]) + "\n"


def test_ptb_ids_follow_first_occurrence():
    corpus = named_corpus("ptb")
    # ptb.train.txt starts " aer banknote berlitz ...", as PyTorch's word_language_model numbers it
    assert corpus.tokenizer.symbols[:3] == ["aer", "banknote", "berlitz"]
    assert corpus.splits["train"][:3].tolist() == [0, 1, 2]


def test_unknown_name_and_wrong_kind_list_the_valid_names():
    with pytest.raises(ValueError, match=r"'shakespeare' is not one of: tinyshakespeare, ptb"):
        load_language_model_corpus("shakespeare")
    with pytest.raises(ValueError, match=r"language-model data set 'multi30k' is not one of"):
        load_language_model_corpus("multi30k")
    with pytest.raises(ValueError, match=r"either name .* or path"):
        load_language_model_corpus()


def test_own_text_file_at_char_level_adds_unk_for_unseen_symbols(tmp_path):
    path = tmp_path / "own.txt"
    path.write_text("abcabcabc\n" * 9 + "abc\nxyzxy\n", encoding="utf-8")
    corpus = load_language_model_corpus(path=path, level="char")
    assert len(corpus.splits["train"]) == 90 and len(corpus.splits["valid"]) == 10
    assert corpus.tokenizer.symbols == ["\n", "a", "b", "c", "<unk>"]
    assert corpus.tokenizer.decode(corpus.splits["valid"].tolist()) == "abc\n" + "\ufffd" * 5 + "\n"


def test_own_text_files_at_word_level(tmp_path):
    (tmp_path / "train.txt").write_text("the cat sat\nthe dog sat\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("the bird sat\n", encoding="utf-8")
    paths = {"train": tmp_path / "train.txt", "valid": tmp_path / "valid.txt"}
    corpus = load_language_model_corpus(path=paths, level="word")
    tokenizer = corpus.tokenizer
    assert tokenizer.symbols == ["the", "cat", "sat", "<eos>", "dog", "<unk>"]
    assert corpus.splits["valid"].tolist() == [0, 5, 2, 3]
    with pytest.raises(ValueError, match=r"level='bytes' is not one of: char, word"):
        load_language_model_corpus(path=paths, level="bytes")


def test_own_text_file_at_word_level_splits_by_lines(tmp_path):
    path = tmp_path / "own.txt"
    path.write_text("".join(f"line {number}\n" for number in range(20)), encoding="utf-8")
    corpus = load_language_model_corpus(path=path, level="word")
    valid = corpus.tokenizer.decode(corpus.splits["valid"].tolist())
    assert valid == "line <unk>\nline <unk>\n"  # lines 18 and 19; their numbers are unseen


def test_sample_windows_are_shifted_by_one_and_reproducible():
    tokens = torch.arange(1000)  # a token's value is its position
    batch = sample_windows(
        tokens, batch_size=16, context_length=32, generator=torch.Generator().manual_seed(0)
    )
    assert batch.inputs.shape == batch.targets.shape == (16, 32)
    assert batch.src is None
    torch.testing.assert_close(batch.targets, batch.inputs + 1)  # targets[t] = tokens[i + t + 1]
    torch.testing.assert_close(batch.inputs - batch.inputs[:, :1], torch.arange(32).expand(16, 32))
    assert int(batch.targets.max()) <= 999
    again = sample_windows(tokens, 16, 32, generator=torch.Generator().manual_seed(0))
    other = sample_windows(tokens, 16, 32, generator=torch.Generator().manual_seed(1))
    assert torch.equal(again.inputs, batch.inputs)
    assert not torch.equal(other.inputs, batch.inputs)


def test_sample_windows_reach_both_ends():
    tokens = torch.arange(10)
    batch = sample_windows(tokens, 500, 4, generator=torch.Generator().manual_seed(0))
    assert int(batch.inputs.min()) == 0 and int(batch.targets.max()) == 9
    with pytest.raises(ValueError, match=r"context_length=10 needs more than 10 tokens"):
        sample_windows(tokens, 1, 10)


@pytest.mark.parametrize("length", [97, 101, 2])
def test_evaluation_windows_predict_every_token_once(length):
    tokens = torch.arange(length)
    batches = list(evaluation_windows(tokens, batch_size=3, context_length=10))
    targets = torch.cat([batch.targets.flatten() for batch in batches])
    torch.testing.assert_close(targets, torch.arange(1, length))  # every token but the first
    for batch in batches:
        torch.testing.assert_close(batch.targets, batch.inputs + 1)
        assert batch.inputs.size(0) <= 3 and batch.inputs.size(1) <= 10


def test_evaluation_windows_cover_a_real_split():
    corpus = named_corpus("ptb")
    valid = corpus.splits["valid"]
    batches = list(evaluation_windows(valid, batch_size=20, context_length=35))
    assert sum(batch.targets.numel() for batch in batches) == len(valid) - 1 == 73_759
    assert torch.equal(torch.cat([batch.targets.flatten() for batch in batches]), valid[1:])


def test_window_source_is_the_trainers_epoch_of_random_windows():
    tokens = torch.arange(500)
    source = WindowSource(tokens, batch_size=4, context_length=8, batches_per_epoch=3)
    first = list(source(0, torch.Generator().manual_seed(5)))
    again = list(source(0, torch.Generator().manual_seed(5)))
    generator = torch.Generator().manual_seed(5)
    direct = [sample_windows(tokens, 4, 8, generator) for _ in range(3)]
    assert len(first) == 3
    for a, b, c in zip(first, again, direct, strict=True):
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.inputs, c.inputs)
        assert torch.equal(a.targets, c.targets)
