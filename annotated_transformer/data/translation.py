"""Parallel corpora: sentence pairs per split, a joint BPE vocabulary, token ids (chapter 08).

- ``multi30k``: German-English image captions, ``de -> en`` by default (``en -> de`` possible);
  splits ``train`` (29,000), ``valid`` (1,014), ``test`` (= test_2016_flickr, 1,000) and the
  other test sets ``test_2017_flickr``, ``test_2017_mscoco``, ``test_2018_flickr``;
- ``cmn-eng``: Tatoeba Chinese-English pairs, ``zh -> en`` by default. The file has no split, so
  :func:`stable_split` assigns each pair by the SHA-1 of its English sentence's Tatoeba ID: all
  translations of one English sentence land in the same split, and the split never depends on
  the order or the number of lines;
- a user's own pair of parallel files (``paths=``).

Pairs are raw text, as the references that BLEU scores against. :func:`train_tokenizer` learns a
joint BPE vocabulary on the training split of both languages; :func:`encode_corpus` turns every
split into token ids and drops overlong pairs from the training split only (never a test sentence).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .files import fetch
from .registry import dataset_info
from .tokenizers import BPETokenizer, Tokenizer

SentencePair = tuple[str, str]  # (source, target)
EncodedPair = tuple[list[int], list[int]]  # (source ids, target ids), no bos/eos
PathLike = str | os.PathLike

_TATOEBA_ID = re.compile(r"#(\d+)")


@dataclass
class TranslationCorpus:
    """Raw sentence pairs of each split, in file order, oriented ``source -> target``."""

    name: str
    source: str  # language code, e.g. "de"
    target: str
    splits: dict[str, list[SentencePair]]


def stable_split(key: str) -> str:
    """``train``, ``valid`` or ``test`` for ``key``: ``SHA-1(key) mod 100`` below 90, 95, 100.

    For ``cmn-eng`` the key is the English sentence's Tatoeba ID (column 3, the first ``#``
    number), which gives 28,853 / 1,593 / 1,582 pairs.
    """
    bucket = int(hashlib.sha1(key.encode("utf-8")).hexdigest(), 16) % 100
    return "train" if bucket < 90 else "valid" if bucket < 95 else "test"


def load_translation_corpus(
    name: str | None = None,
    *,
    source: str | None = None,
    target: str | None = None,
    paths: tuple[PathLike, PathLike] | Mapping[str, tuple[PathLike, PathLike]] | None = None,
    data_dir: PathLike | None = None,
) -> TranslationCorpus:
    """A named corpus (``source``/``target`` choose the direction), or a user's parallel files.

    ``paths`` is a ``(source_file, target_file)`` pair, split by :func:`stable_split` of the
    source sentence, or a mapping ``split -> (source_file, target_file)``. Files are UTF-8, one
    sentence per line, aligned line by line; ``.gz`` files are read through gzip.
    """
    if (name is None) == (paths is None):
        raise ValueError("pass either name (a registered data set) or paths (your own files)")
    if paths is not None:
        source, target = source or "source", target or "target"
        if isinstance(paths, Mapping):
            splits = {split: _read_parallel(*files) for split, files in paths.items()}
        else:
            splits = {"train": [], "valid": [], "test": []}
            for pair in _read_parallel(*paths):
                splits[stable_split(pair[0])].append(pair)
        return TranslationCorpus("custom", source, target, splits)

    info = dataset_info(name, kind="translation")
    source, target = source or info.languages[0], target or info.languages[1]
    if {source, target} != set(info.languages) or source == target:
        raise ValueError(
            f"{name} translates between {' and '.join(info.languages)}: got source={source!r}, "
            f"target={target!r}"
        )
    if name == "cmn-eng":
        splits = {split: [] for split in info.splits}
        for english, chinese, english_id in _read_tatoeba(fetch(info.files["train"][0], data_dir)):
            pair = (chinese, english) if source == "zh" else (english, chinese)
            splits[stable_split(english_id)].append(pair)
    else:
        column = {language: position for position, language in enumerate(info.languages)}
        splits = {}
        for split, files in info.files.items():
            source_file = fetch(files[column[source]], data_dir)
            target_file = fetch(files[column[target]], data_dir)
            splits[split] = _read_parallel(source_file, target_file)
    return TranslationCorpus(name, source, target, splits)


def _read_lines(path: PathLike) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [line.strip() for line in file.read().split("\n")[:-1]]


def _read_parallel(source_file: PathLike, target_file: PathLike) -> list[SentencePair]:
    sources, targets = _read_lines(source_file), _read_lines(target_file)
    if len(sources) != len(targets):
        raise ValueError(
            f"{source_file} has {len(sources)} lines but {target_file} has {len(targets)}: "
            f"parallel files must be aligned line by line"
        )
    return list(zip(sources, targets, strict=True))


def _read_tatoeba(path: Path) -> list[tuple[str, str, str]]:
    """``(english, chinese, english_id)`` per line of a manythings.org/anki ``cmn.txt``."""
    rows = []
    for number, line in enumerate(_read_lines(path), start=1):
        english, chinese, attribution = line.split("\t")
        english_id = _TATOEBA_ID.search(attribution)
        if english_id is None:
            raise ValueError(f"{path}:{number} has no Tatoeba ID in its third column")
        rows.append((english, chinese, english_id.group(1)))
    return rows


def train_tokenizer(
    corpus: TranslationCorpus,
    vocab_size: int,
    segment: str | None = None,
    min_frequency: int = 2,
) -> BPETokenizer:
    """A joint BPE vocabulary of ``vocab_size`` learnt on both sides of the training split.

    ``segment`` (``"jieba"``, ``"char"`` or ``"none"``) defaults to ``"jieba"`` when one side is
    Chinese (``"zh"``) and ``"none"`` otherwise.
    """
    if segment is None:
        segment = "jieba" if "zh" in (corpus.source, corpus.target) else "none"
    train = corpus.splits["train"]
    texts = [sentence for pair in train for sentence in pair]
    return BPETokenizer.train(texts, vocab_size, segment=segment, min_frequency=min_frequency)


def encode_pairs(
    pairs: Sequence[SentencePair], tokenizer: Tokenizer, max_length: int | None = None
) -> list[EncodedPair]:
    """Token ids of each pair, in order. With ``max_length``, pairs whose source or target needs
    more than ``max_length`` positions in the model (its tokens plus ``eos``, or ``bos`` plus its
    tokens) are dropped: use it on training data only."""
    sources = tokenizer.encode_batch([source for source, _ in pairs])
    targets = tokenizer.encode_batch([target for _, target in pairs])
    encoded = list(zip(sources, targets, strict=True))
    if max_length is None:
        return encoded
    return [
        (source, target)
        for source, target in encoded
        if len(source) + 1 <= max_length and len(target) + 1 <= max_length
    ]


def encode_corpus(
    corpus: TranslationCorpus, tokenizer: Tokenizer, max_length: int | None = None
) -> dict[str, list[EncodedPair]]:
    """Every split as token ids; ``max_length`` filters the ``train`` split only, so evaluation
    sets keep every sentence and stay aligned with ``corpus.splits[split]`` (the references)."""
    return {
        split: encode_pairs(pairs, tokenizer, max_length if split == "train" else None)
        for split, pairs in corpus.splits.items()
    }
