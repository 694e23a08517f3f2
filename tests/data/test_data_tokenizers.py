"""Tokenizers: round trips, special ids, vocabulary sizes, state that survives a checkpoint."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import torch

from annotated_transformer.data import (
    BPETokenizer,
    CharTokenizer,
    TokenizerProtocol,
    WordTokenizer,
    load_tokenizer,
    load_translation_corpus,
    segment_cjk,
    tokenizer_from_dict,
    train_tokenizer,
)

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile

GERMAN = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Ein Mädchen läuft über die Straße, ÄÖÜ äöü ß!",
]


@pytest.fixture(scope="module")
def multi30k():
    return load_translation_corpus("multi30k", data_dir=SHARED_DATA)


@pytest.fixture(scope="module")
def multi30k_bpe(multi30k):
    """The joint BPE vocabulary the course trains on the whole Multi30k training split."""
    return train_tokenizer(multi30k, vocab_size=8000)


@pytest.fixture(scope="module")
def cmn_eng():
    return load_translation_corpus("cmn-eng", data_dir=SHARED_DATA)


def checkpoint_round_trip(state: dict) -> dict:
    """What a trainer's checkpoint gives back: saved with torch.save, read with weights_only."""
    buffer = io.BytesIO()
    torch.save({"tokenizer": state}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)["tokenizer"]


def test_char_tokenizer_round_trip_and_sorted_ids():
    tokenizer = CharTokenizer.build("hello world\n")
    assert tokenizer.symbols == sorted(set("hello world\n"))
    assert tokenizer.vocab_size == 9
    assert tokenizer.decode(tokenizer.encode("world hello\n")) == "world hello\n"
    assert tokenizer.encode("he") == [tokenizer.symbols.index("h"), tokenizer.symbols.index("e")]
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (None,) * 4


def test_char_tokenizer_unknown_symbol():
    with pytest.raises(
        ValueError, match=r"'z' is not in this model's vocabulary: it reads the 3 characters 'abc'"
    ):
        CharTokenizer.build("abc").encode("abz")
    tokenizer = CharTokenizer.build("abc", specials=("<unk>", "<mask>"))
    assert tokenizer.symbols == ["a", "b", "c", "<unk>", "<mask>"]
    assert (tokenizer.unk_id, tokenizer.mask_id) == (3, 4)
    assert tokenizer.encode("abz") == [0, 1, 3]
    assert tokenizer.decode([0, 4, 1, 3]) == "ab\ufffd"


def test_word_tokenizer_eos_per_line_and_first_occurrence_ids():
    tokenizer = WordTokenizer.build(" the cat <unk>\n the dog \n")
    assert tokenizer.symbols == ["the", "cat", "<unk>", "<eos>", "dog"]
    assert (tokenizer.eos_id, tokenizer.unk_id, tokenizer.pad_id) == (3, 2, None)
    assert tokenizer.encode("the bird\ndog") == [0, 2, 3, 4, 3]
    assert tokenizer.decode(tokenizer.encode(" the  cat\n dog the\n")) == "the cat\ndog the\n"


def test_word_tokenizer_without_unk_refuses_unknown_words():
    with pytest.raises(
        ValueError, match=r"'bird' is not in this model's vocabulary: it has 3 words"
    ):
        WordTokenizer.build("the cat").encode("the bird")


@pytest.mark.parametrize(
    "tokenizer",
    [
        CharTokenizer.build("abc äß\n", specials=("<unk>",)),
        WordTokenizer.build("a b\nc <unk>\n"),
    ],
    ids=["char", "word"],
)
def test_symbol_tokenizers_survive_a_checkpoint(tokenizer, tmp_path):
    text = "a b\nc ä ß x\n"
    restored = tokenizer_from_dict(checkpoint_round_trip(tokenizer.to_dict()))
    assert type(restored) is type(tokenizer)
    assert restored.encode(text) == tokenizer.encode(text)
    assert (restored.eos_id, restored.unk_id) == (tokenizer.eos_id, tokenizer.unk_id)
    tokenizer.save(tmp_path / "tokenizer.json")
    assert load_tokenizer(tmp_path / "tokenizer.json").encode(text) == tokenizer.encode(text)


def test_bpe_vocab_size_and_special_ids(multi30k_bpe):
    assert multi30k_bpe.vocab_size == 8000
    ids = (multi30k_bpe.pad_id, multi30k_bpe.bos_id, multi30k_bpe.eos_id, multi30k_bpe.unk_id)
    assert ids == (0, 1, 2, 3)
    assert multi30k_bpe.mask_id is None


def test_bpe_round_trips_every_multi30k_evaluation_sentence(multi30k, multi30k_bpe):
    evaluation = [pairs for split, pairs in multi30k.splits.items() if split != "train"]
    sentences = [sentence for pairs in evaluation for pair in pairs for sentence in pair]
    ids = multi30k_bpe.encode_batch(sentences)
    assert [multi30k_bpe.decode(sentence_ids) for sentence_ids in ids] == sentences
    assert all(3 not in sentence_ids for sentence_ids in ids)  # byte-level: nothing is unknown


def test_bpe_round_trips_german_umlauts_and_unseen_characters(multi30k_bpe):
    for text in [*GERMAN, "Ωμέγα → 東京 😀"]:
        assert multi30k_bpe.decode(multi30k_bpe.encode(text)) == text
    assert multi30k_bpe.encode_batch(GERMAN) == [multi30k_bpe.encode(text) for text in GERMAN]


def test_bpe_learns_whole_words_and_drops_specials_in_decode(multi30k_bpe):
    assert multi30k_bpe.pieces("Ein Mann") == [" Ein", " Mann"]
    ids = multi30k_bpe.encode("Ein Mann")
    assert multi30k_bpe.decode([1, *ids, 2, 0, 0]) == "Ein Mann"


def test_bpe_survives_a_checkpoint(multi30k_bpe, tmp_path):
    restored = tokenizer_from_dict(checkpoint_round_trip(multi30k_bpe.to_dict()))
    assert isinstance(restored, BPETokenizer)
    assert [restored.encode(text) for text in GERMAN] == [multi30k_bpe.encode(t) for t in GERMAN]
    assert restored.vocab_size == multi30k_bpe.vocab_size
    multi30k_bpe.save(tmp_path / "bpe.json")
    assert load_tokenizer(tmp_path / "bpe.json").encode(GERMAN[0]) == multi30k_bpe.encode(GERMAN[0])


def test_to_dict_is_the_one_json_state_a_checkpoint_keeps(multi30k_bpe):
    for tokenizer in (multi30k_bpe, WordTokenizer.build("a b\n"), CharTokenizer.build("a b")):
        assert isinstance(tokenizer, TokenizerProtocol)
        assert not hasattr(tokenizer, "state_dict")  # one name for the protocol: to_dict
        state = tokenizer.to_dict()
        assert json.loads(json.dumps(state)) == state
        restored = tokenizer_from_dict(state)
        assert restored.encode("a b") == tokenizer.encode("a b")


def test_bpe_rejects_a_vocabulary_without_merges():
    with pytest.raises(ValueError, match=r"vocab_size=200 leaves no merges"):
        BPETokenizer.train(["a b c"], vocab_size=200)


def test_segment_cjk_touches_only_chinese():
    assert segment_cjk("Tom是一个好人。", "char") == "Tom是 一 个 好 人 。"
    assert segment_cjk("我喜欢吃苹果。", "jieba") == "我 喜欢 吃 苹果 。"
    assert segment_cjk("Zwei Männer, 3 Hunde.", "jieba") == "Zwei Männer, 3 Hunde."
    with pytest.raises(ValueError, match=r"segment='words' is not one of: none, jieba, char"):
        BPETokenizer(None, segment="words")


@pytest.mark.parametrize("segment", ["char", "jieba"])
def test_bpe_round_trips_chinese(cmn_eng, segment):
    train = cmn_eng.splits["train"][::8]  # a quick vocabulary: the round trip needs no good one
    corpus = type(cmn_eng)(cmn_eng.name, cmn_eng.source, cmn_eng.target, {"train": train})
    tokenizer = train_tokenizer(corpus, vocab_size=2000, segment=segment)
    assert tokenizer.vocab_size == 2000
    chinese = [chinese for chinese, _ in cmn_eng.splits["test"]]
    english = [english for _, english in cmn_eng.splits["test"]]
    assert [tokenizer.decode(tokenizer.encode(text)) for text in english] == english
    decoded = [tokenizer.decode(tokenizer.encode(text)) for text in chinese]
    changed = [(text, back) for text, back in zip(chinese, decoded, strict=True) if text != back]
    # A space between two Chinese characters is not kept: 3 of the 1,582 test sentences have one.
    assert [back for _, back in changed] == [text.replace(" ", "") for text, _ in changed]
    assert len(changed) == 3
    restored = tokenizer_from_dict(checkpoint_round_trip(tokenizer.to_dict()))
    assert restored.encode(chinese[0]) == tokenizer.encode(chinese[0])
    assert restored.decode(restored.encode("我有3个苹果。")) == "我有3个苹果。"
