"""Parallel corpora: split sizes, the cmn-eng split rule, directions, user files, encoding."""

from __future__ import annotations

import collections
import gzip
import os
import re
from pathlib import Path

import pytest

from annotated_transformer.data import (
    DATA_FILES,
    DATASETS,
    BPETokenizer,
    dataset_info,
    encode_corpus,
    encode_pairs,
    load_translation_corpus,
    stable_split,
)

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile


@pytest.fixture(scope="module")
def multi30k():
    return load_translation_corpus("multi30k", data_dir=SHARED_DATA)


@pytest.fixture(scope="module")
def cmn_eng():
    return load_translation_corpus("cmn-eng", data_dir=SHARED_DATA)


def test_registry_names_known_files_and_refuses_unknown_names():
    assert list(DATASETS) == ["tinyshakespeare", "ptb", "wikitext-2", "multi30k", "cmn-eng"]
    for info in DATASETS.values():
        assert info.kind in ("language-model", "translation")
        assert all(file in DATA_FILES for files in info.files.values() for file in files)
        assert info.splits[:2] == ("train", "valid")
    with pytest.raises(ValueError, match=r"data set 'iwslt14' is not one of: tinyshakespeare, "):
        dataset_info("iwslt14")
    with pytest.raises(ValueError, match=r"translation data set 'ptb' is not one of: multi30k"):
        load_translation_corpus("ptb")


def test_multi30k_split_sizes_and_alignment(multi30k):
    sizes = {split: len(pairs) for split, pairs in multi30k.splits.items()}
    assert sizes == {
        "train": 29_000,
        "valid": 1_014,
        "test": 1_000,
        "test_2017_flickr": 1_000,
        "test_2017_mscoco": 461,
        "test_2018_flickr": 1_071,
    }
    assert (multi30k.source, multi30k.target) == ("de", "en")
    assert multi30k.splits["train"][0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    with gzip.open(
        SHARED_DATA / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8"
    ) as f:
        references = f.read().split("\n")[:-1]
    assert [target for _, target in multi30k.splits["test"]] == references


def test_multi30k_english_to_german(multi30k):
    reverse = load_translation_corpus("multi30k", source="en", target="de", data_dir=SHARED_DATA)
    assert (reverse.source, reverse.target) == ("en", "de")
    assert reverse.splits["valid"] == [
        (target, source) for source, target in multi30k.splits["valid"]
    ]
    with pytest.raises(ValueError, match=r"multi30k translates between de and en"):
        load_translation_corpus("multi30k", source="fr", target="en", data_dir=SHARED_DATA)


def test_cmn_eng_split_counts_never_change(cmn_eng):
    sizes = {split: len(pairs) for split, pairs in cmn_eng.splits.items()}
    assert sizes == {"train": 28_853, "valid": 1_593, "test": 1_582}
    assert (cmn_eng.source, cmn_eng.target) == ("zh", "en")
    assert cmn_eng.splits["train"][0] == ("嗨。", "Hi.")


def test_cmn_eng_split_follows_the_rule_and_keeps_english_ids_together(cmn_eng):
    """Recompute the split from the file: SHA-1 of the English ID mod 100, <90 / <95 / rest."""
    by_id = collections.defaultdict(set)
    expected = collections.defaultdict(list)
    for line in (SHARED_DATA / "cmn-eng" / "cmn.txt").read_text(encoding="utf-8").splitlines():
        english, chinese, attribution = line.split("\t")
        english_id = re.findall(r"#(\d+)", attribution)[0]
        split = stable_split(english_id)
        by_id[english_id].add(split)
        expected[split].append((chinese, english))
    assert dict(expected) == cmn_eng.splits
    assert len(by_id) == 30_193
    assert all(len(splits) == 1 for splits in by_id.values())
    english = {split: {english for _, english in pairs} for split, pairs in cmn_eng.splits.items()}
    assert not english["train"] & english["valid"]
    assert not english["train"] & english["test"]
    assert not english["valid"] & english["test"]


def test_stable_split_is_sha1_mod_100():
    # SHA-1 as an integer, mod 100: "1" -> 83, "12" -> 92, "40" -> 99 (computed with sha1sum)
    assert [stable_split(key) for key in ("1", "12", "40")] == ["train", "valid", "test"]
    buckets = collections.Counter(stable_split(str(number)) for number in range(20_000))
    assert 0.88 < buckets["train"] / 20_000 < 0.92
    assert 0.04 < buckets["valid"] / 20_000 < 0.06
    assert [stable_split("538123")] * 3 == [stable_split("538123") for _ in range(3)]


def test_cmn_eng_english_to_chinese(cmn_eng):
    reverse = load_translation_corpus("cmn-eng", source="en", target="zh", data_dir=SHARED_DATA)
    assert reverse.splits["test"] == [
        (english, chinese) for chinese, english in cmn_eng.splits["test"]
    ]


def test_own_parallel_files(tmp_path):
    source = [f"quelle {number}" for number in range(200)]
    target = [f"target {number}" for number in range(200)]
    (tmp_path / "all.src").write_text("\n".join(source) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "all.tgt.gz", "wt", encoding="utf-8") as file:
        file.write("\n".join(target) + "\n")
    corpus = load_translation_corpus(paths=(tmp_path / "all.src", tmp_path / "all.tgt.gz"))
    assert sum(len(pairs) for pairs in corpus.splits.values()) == 200
    for split, pairs in corpus.splits.items():
        assert all(stable_split(src) == split for src, _ in pairs)
        assert all(src.split()[1] == tgt.split()[1] for src, tgt in pairs)
    given = load_translation_corpus(
        paths={"train": (tmp_path / "all.src", tmp_path / "all.tgt.gz")}, source="de", target="en"
    )
    assert given.splits["train"] == list(zip(source, target, strict=True))
    assert (given.source, given.target) == ("de", "en")
    (tmp_path / "short.tgt").write_text("one line\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"has 200 lines but .*short.tgt has 1"):
        load_translation_corpus(paths=(tmp_path / "all.src", tmp_path / "short.tgt"))


def test_max_length_drops_training_pairs_only(multi30k):
    small = type(multi30k)(
        "small",
        "de",
        "en",
        {split: pairs[:300] for split, pairs in multi30k.splits.items()},
    )
    tokenizer = BPETokenizer.train(
        [sentence for pair in small.splits["train"] for sentence in pair], vocab_size=600
    )
    unfiltered = encode_corpus(small, tokenizer)
    encoded = encode_corpus(small, tokenizer, max_length=16)
    assert unfiltered["train"] == encode_pairs(small.splits["train"], tokenizer)
    kept = [pair for pair in unfiltered["train"] if max(map(len, pair)) + 1 <= 16]
    assert encoded["train"] == kept and 0 < len(kept) < 300
    for split in small.splits:
        if split != "train":
            assert encoded[split] == unfiltered[split]
            assert len(encoded[split]) == len(small.splits[split])
            assert any(max(map(len, pair)) + 1 > 16 for pair in encoded[split])
