"""Text to token ids and back: characters, words, and joint byte-level BPE (chapter 08).

Every tokenizer has the same small interface, :class:`Tokenizer`:

- ``encode(text) -> list[int]`` and ``decode(ids) -> str``;
- ``vocab_size`` and the special ids ``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``, ``mask_id``
  (``None`` where the vocabulary has no such token);
- ``to_dict()`` / :func:`tokenizer_from_dict`: a state of plain ``str``, ``int``, ``list`` and
  ``dict``, so a checkpoint holds the tokenizer and ``torch.load(..., weights_only=True)`` reads
  it back. That is the one save/load pair of every tokenizer (:class:`TokenizerProtocol`, which
  the copy task's :class:`DigitTokenizer` follows too); ``save(path)`` / :func:`load_tokenizer`
  write the same state to a JSON file.

The language-model tokenizers have no padding token by default: their batches are fixed-length
windows that never need padding, and the vocabulary sizes stay the published ones (Tiny
Shakespeare 65 characters, Penn Treebank 10,000 words, WikiText-2 33,278 words). Build their
models with ``pad_id=tokenizer.pad_id`` (``None``), not the config's default 0, which is a real
symbol there.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

SEGMENT_CHOICES = ("none", "jieba", "char")
BPE_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")

# Chinese, Japanese and Korean ideographs, CJK punctuation and full-width forms: the characters
# that Chinese writes without spaces between words.
_CJK = (
    "\u3000-\u303f"  # CJK symbols and punctuation: 。、「」
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff00-\uffef"  # full-width forms: ，？！：；（）
    "\U00020000-\U0002fa1f"  # Extensions B-F and compatibility supplement
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_SPACE_BETWEEN_CJK = re.compile(f"(?<=[{_CJK}]) (?=[{_CJK}])")


@runtime_checkable
class TokenizerProtocol(Protocol):
    """What training, decoding and checkpoints need of a tokenizer: text to ids and back, the
    special ids (``None`` where the vocabulary has none), and ``to_dict()``, the JSON-safe state
    that :func:`tokenizer_from_dict` turns back into the tokenizer."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def pad_id(self) -> int | None: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int | None: ...

    def to_dict(self) -> dict[str, Any]: ...


class DigitTokenizer:
    """The copy task's tokenizer: digits ``0``-``9`` and ``|`` (a separator), one token each;
    whitespace is skipped.

    Ids: 0 padding, 1 start of sequence, 2 the separator, 3-12 the digits. ``decode`` writes the
    digits space-separated, so that BLEU sees one word per digit.
    """

    pad_id, bos_id, eos_id, sep_id, offset = 0, 1, None, 2, 3
    vocab_size = 13

    def encode(self, text: str) -> list[int]:
        ids = []
        for character in text:
            if character.isspace():
                continue
            if character == "|":
                ids.append(self.sep_id)
            elif character in "0123456789":
                ids.append(self.offset + int(character))
            else:
                raise ValueError(f"the copy task's text has digits and '|' only, got {character!r}")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        words = []
        for token in (int(index) for index in ids):
            if token == self.sep_id:
                words.append("|")
            elif token >= self.offset:
                words.append(str(token - self.offset))
        return " ".join(words)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "digits"}


class Tokenizer(ABC):
    """The data sets' tokenizers (a :class:`TokenizerProtocol`); the special ids are found by
    their token strings."""

    pad_token = "<pad>"
    bos_token = "<s>"
    eos_token = "</s>"
    unk_token = "<unk>"
    mask_token = "<mask>"

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """``text`` -> ids ``[L]``; no ``bos``/``eos`` is added (the batching code adds them)."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Ids (a list or a 1-D tensor) -> text, without ``pad``, ``bos``, ``eos`` and ``mask``."""

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of ``token``, or ``None`` when it is not in the vocabulary."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; :func:`tokenizer_from_dict` rebuilds the tokenizer."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    @property
    def pad_id(self) -> int | None:
        return self.token_to_id(self.pad_token)

    @property
    def bos_id(self) -> int | None:
        return self.token_to_id(self.bos_token)

    @property
    def eos_id(self) -> int | None:
        return self.token_to_id(self.eos_token)

    @property
    def unk_id(self) -> int | None:
        return self.token_to_id(self.unk_token)

    @property
    def mask_id(self) -> int | None:
        return self.token_to_id(self.mask_token)

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.to_dict(), file, ensure_ascii=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class _SymbolTokenizer(Tokenizer):
    """A tokenizer whose vocabulary is a list of symbols (characters or words)."""

    kind = ""

    def __init__(self, symbols: Sequence[str], specials: Sequence[str] = ()) -> None:
        """``symbols``: the vocabulary in id order, specials included; ``specials``: which of them
        are special tokens (dropped by ``decode``)."""
        self.symbols = list(symbols)
        self.specials = list(specials)
        self.index = {symbol: position for position, symbol in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise ValueError("the vocabulary lists a symbol twice")
        missing = [token for token in self.specials if token not in self.index]
        if missing:
            raise ValueError(f"special tokens {missing} are not in the vocabulary")

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def token_to_id(self, token: str) -> int | None:
        return self.index.get(token)

    def _lookup(self, symbols: Iterable[str]) -> list[int]:
        unk = self.unk_id
        if unk is not None:
            return [self.index.get(symbol, unk) for symbol in symbols]
        try:
            return [self.index[symbol] for symbol in symbols]
        except KeyError as error:
            if self.kind == "char" and len(self.symbols) <= 100:
                accepted = f"it reads the {len(self.symbols)} characters {''.join(self.symbols)!r}"
            else:
                accepted = f"it has {len(self.symbols)} {self.kind}s and no {self.unk_token}"
            raise ValueError(
                f"{error.args[0]!r} is not in this model's vocabulary: {accepted}; leave it out "
                f"(a tokenizer built with specials=({self.unk_token!r},) maps such input to it)"
            ) from None

    def _dropped(self) -> set[int]:
        return {self.index[token] for token in self.specials if token != self.unk_token}

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "symbols": self.symbols, "specials": self.specials}


class CharTokenizer(_SymbolTokenizer):
    """One id per character; ids in sorted character order (as nanoGPT), specials last."""

    kind = "char"

    @classmethod
    def build(cls, text: str, specials: Sequence[str] = ()) -> CharTokenizer:
        """The characters of ``text`` (the training split), then ``specials`` (e.g. ``"<unk>"``)."""
        return cls(sorted(set(text)) + list(specials), specials)

    def encode(self, text: str) -> list[int]:
        return self._lookup(text)

    def decode(self, ids: Iterable[int]) -> str:
        dropped, unk = self._dropped(), self.unk_id
        return "".join(
            "\ufffd" if index == unk else self.symbols[index]
            for index in map(int, ids)  # ints also from a tensor
            if index not in dropped
        )


class WordTokenizer(_SymbolTokenizer):
    """Whitespace-separated words, one ``<eos>`` at the end of each line (the PTB/WikiText setup).

    Ids follow first occurrence in the training text, ``<eos>`` counted after each line (as
    PyTorch's ``word_language_model`` example), so its ids are the ones that example gets.
    """

    kind = "word"
    eos_token = "<eos>"

    @classmethod
    def build(cls, text: str, specials: Sequence[str] = ()) -> WordTokenizer:
        """The words of ``text`` (the training split) with ``<eos>``, then ``specials`` not yet in.

        Penn Treebank and WikiText-2 already contain ``<unk>`` as a word, so it is no special
        token there (it is a word the model predicts) but still serves as ``unk_id``.
        """
        words = dict.fromkeys(_words(text, cls.eos_token))
        words.update(dict.fromkeys(specials))
        return cls(list(words), list(dict.fromkeys([*specials, cls.eos_token])))

    def encode(self, text: str) -> list[int]:
        return self._lookup(_words(text, self.eos_token))

    def decode(self, ids: Iterable[int]) -> str:
        """Words joined by spaces, each ``<eos>`` a line end."""
        eos, dropped = self.eos_id, self._dropped()
        lines, line = [], []
        for index in map(int, ids):  # ints also from a tensor
            if index == eos:
                lines.append(" ".join(line) + "\n")
                line = []
            elif index not in dropped:
                line.append(self.symbols[index])
        return "".join(lines) + " ".join(line)


def _words(text: str, eos: str) -> list[str]:
    """The words of each line of ``text``, each line followed by ``eos``. Lines end at a newline
    (a last line without one counts too); any other whitespace separates words."""
    if text and not text.endswith("\n"):
        text += "\n"
    return text.replace("\n", f" {eos} ").split()


class BPETokenizer(Tokenizer):
    """Joint byte-level BPE (GPT-2's scheme, Sennrich et al. 2016) with Hugging Face ``tokenizers``.

    Text is split into words and punctuation, each word's UTF-8 bytes are the base alphabet (so
    no character is ever unknown), and merges learnt on the training text build the vocabulary.
    ``decode(encode(text)) == text`` for any text that does not start with a space.

    Chinese is written without spaces, so ``segment`` splits each run of CJK characters into words
    with jieba (``"jieba"``) or into characters (``"char"``) before BPE; ``decode`` then joins CJK
    characters without spaces again. Text without CJK characters is unaffected.
    """

    def __init__(self, tokenizer: Any, segment: str = "none") -> None:
        """``tokenizer``: a trained ``tokenizers.Tokenizer``; ``segment``: see SEGMENT_CHOICES."""
        if segment not in SEGMENT_CHOICES:
            raise ValueError(f"segment={segment!r} is not one of: {', '.join(SEGMENT_CHOICES)}")
        self.tokenizer = tokenizer
        self.segment = segment

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        segment: str = "none",
        specials: Sequence[str] = BPE_SPECIALS,
        min_frequency: int = 2,
    ) -> BPETokenizer:
        """Learn ``vocab_size - len(specials) - 256`` merges on ``texts`` (both languages' training
        sentences for a joint vocabulary). Specials take the first ids: ``<pad>`` is 0."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if segment not in SEGMENT_CHOICES:
            raise ValueError(f"segment={segment!r} is not one of: {', '.join(SEGMENT_CHOICES)}")
        smallest = len(specials) + 256
        if vocab_size <= smallest:
            raise ValueError(f"vocab_size={vocab_size} leaves no merges: use more than {smallest}")
        tokenizer = HFTokenizer(models.BPE(unk_token=cls.unk_token))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(specials),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(
            (segment_cjk(text, segment) for text in texts), trainer=trainer
        )
        return cls(tokenizer, segment)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(segment_cjk(text, self.segment)).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        segmented = [segment_cjk(text, self.segment) for text in texts]
        return [encoding.ids for encoding in self.tokenizer.encode_batch(segmented)]

    def decode(self, ids: Iterable[int]) -> str:
        text = self.tokenizer.decode([int(index) for index in ids], skip_special_tokens=True)
        text = text[1:] if text.startswith(" ") else text  # the space added before the first word
        return text if self.segment == "none" else _SPACE_BETWEEN_CJK.sub("", text)

    def pieces(self, text: str) -> list[str]:
        """The text of each token of ``text``, e.g. ``[" Zwei", " jun", "ge"]`` (a piece that
        holds only part of a character's UTF-8 bytes shows as U+FFFD, the replacement character)."""
        ids = [[index] for index in self.encode(text)]
        return self.tokenizer.decode_batch(ids, skip_special_tokens=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "bpe", "segment": self.segment, "tokenizer": self.tokenizer.to_str()}


def segment_cjk(text: str, segment: str) -> str:
    """Put spaces between the words (``"jieba"``) or characters (``"char"``) of each CJK run.

    >>> segment_cjk("Tom是一个好人。", "char")
    'Tom是 一 个 好 人 。'
    """
    if segment == "none":
        return text
    if segment == "char":
        return _CJK_RUN.sub(lambda run: " ".join(run.group()), text)
    jieba = _jieba()
    return _CJK_RUN.sub(lambda run: " ".join(jieba.lcut(run.group())), text)


@functools.cache
def _jieba() -> Any:
    """A jieba tokenizer with its default dictionary, loaded once, without its start-up log."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


# What each kind of tokenizer state holds besides its "type": key -> (type, what it is).
TOKENIZER_FIELDS: dict[str, dict[str, tuple[type, str]]] = {
    "digits": {},
    "char": {"symbols": (list, "a list of strings"), "specials": (list, "a list of strings")},
    "word": {"symbols": (list, "a list of strings"), "specials": (list, "a list of strings")},
    "bpe": {"tokenizer": (str, "the tokenizers library's JSON"), "segment": (str, "a string")},
}


def tokenizer_from_dict(state: dict[str, Any]) -> TokenizerProtocol:
    """Rebuild a tokenizer from its ``to_dict()`` state (any :class:`TokenizerProtocol`).

    A damaged state is one ValueError naming the key (and what it should hold), never a
    KeyError or the tokenizers library's own exception."""
    kind = state.get("type") if isinstance(state, dict) else None
    if kind not in TOKENIZER_FIELDS:
        raise ValueError(f"tokenizer type {kind!r} is not one of: {', '.join(TOKENIZER_FIELDS)}")
    for key, (expected, what) in TOKENIZER_FIELDS[kind].items():
        if not isinstance(state.get(key), expected):
            found = "missing" if key not in state else f"{state[key]!r}"[:40]
            raise ValueError(f"the {kind} tokenizer's {key!r} is {found}, not {what}")
    if kind == "digits":
        return DigitTokenizer()
    if kind in ("char", "word"):
        if not all(isinstance(item, str) for item in [*state["symbols"], *state["specials"]]):
            raise ValueError(f"the {kind} tokenizer's 'symbols' and 'specials' must be strings")
        builder = CharTokenizer if kind == "char" else WordTokenizer
        return builder(state["symbols"], state["specials"])
    from tokenizers import Tokenizer as HFTokenizer

    try:
        library_tokenizer = HFTokenizer.from_str(state["tokenizer"])
    except Exception as error:  # noqa: BLE001 (the library raises a bare Exception)
        raise ValueError(
            f"the bpe tokenizer's 'tokenizer' cannot be read by the tokenizers library ({error})"
        ) from error
    return BPETokenizer(library_tokenizer, state["segment"])


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Read a tokenizer written by :meth:`Tokenizer.save`."""
    try:
        with open(path, encoding="utf-8") as file:
            state = json.load(file)
        return tokenizer_from_dict(state)
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} is not a tokenizer file this package reads: {error}") from error
