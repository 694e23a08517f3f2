"""Language-model corpora: one long stream of token ids per split, cut into windows (chapter 08).

- ``tinyshakespeare``: characters, first 90% train / last 10% valid (as nanoGPT);
- ``ptb`` and ``wikitext-2``: words with one ``<eos>`` per line, their given train/valid/test;
- a user's own text file (``path=``), at character or word level.

Training batches are random windows (:func:`sample_windows`, nanoGPT's ``get_batch``);
evaluation walks contiguous non-overlapping windows that predict every token of a split exactly
once (:func:`evaluation_windows`), so the mean loss over them is the split's exact per-token loss.
No window is ever padded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .batch import Batch
from .files import fetch
from .registry import dataset_info
from .tokenizers import CharTokenizer, WordTokenizer

LEVEL_CHOICES = ("char", "word")

PathLike = str | os.PathLike


@dataclass
class LanguageModelCorpus:
    """Token ids of each split and the tokenizer built on the training split."""

    name: str
    splits: dict[str, Tensor]  # split -> [N] int64 ids
    tokenizer: CharTokenizer | WordTokenizer


def load_language_model_corpus(
    name: str | None = None,
    *,
    path: PathLike | Mapping[str, PathLike] | None = None,
    level: str = "char",
    train_fraction: float = 0.9,
    data_dir: PathLike | None = None,
) -> LanguageModelCorpus:
    """A named corpus, or a user's own text (``path``) at ``level`` ``"char"`` or ``"word"``.

    ``path`` is one file, split into the first ``train_fraction`` (of characters, or of lines at
    word level) for ``train`` and the rest for ``valid``, or a mapping ``split -> file`` that
    includes ``train``. The vocabulary comes from the training split only; ``<unk>`` is added
    (last) when another split holds a symbol the training split lacks and ``<unk>`` is not a word
    of the corpus already.
    """
    if (name is None) == (path is None):
        raise ValueError("pass either name (a registered data set) or path (your own text)")
    if name is not None:
        info = dataset_info(name, kind="language-model")
        level = info.level
        if name == "tinyshakespeare":  # one file, no given split
            texts = _split_text(
                _read(fetch(info.files["train"][0], data_dir)), train_fraction, level
            )
        else:
            texts = {split: _read(fetch(files[0], data_dir)) for split, files in info.files.items()}
    else:
        if level not in LEVEL_CHOICES:
            raise ValueError(f"level={level!r} is not one of: {', '.join(LEVEL_CHOICES)}")
        if isinstance(path, Mapping):
            if "train" not in path:
                raise ValueError(f"path needs a 'train' file, got splits {sorted(path)}")
            texts = {split: _read(Path(file)) for split, file in path.items()}
        else:
            texts = _split_text(_read(Path(path)), train_fraction, level)
        name = "custom"
    tokenizer = _build_tokenizer(texts, level)
    splits = {
        split: torch.tensor(tokenizer.encode(text), dtype=torch.long)
        for split, text in texts.items()
    }
    return LanguageModelCorpus(name, splits, tokenizer)


def _read(path: Path) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def _split_text(text: str, train_fraction: float, level: str) -> dict[str, str]:
    """First ``train_fraction`` of the characters (or of the lines) for train, the rest valid."""
    if not 0 < train_fraction < 1:
        raise ValueError(
            f"train_fraction={train_fraction!r} is not accepted: use a number in (0, 1)"
        )
    if level == "char":
        boundary = int(train_fraction * len(text))
        return {"train": text[:boundary], "valid": text[boundary:]}
    lines = text.split("\n")  # ends with "" when the text ends with a newline
    boundary = int(train_fraction * (len(lines) - 1 if lines[-1] == "" else len(lines)))
    return {"train": "\n".join(lines[:boundary]) + "\n", "valid": "\n".join(lines[boundary:])}


def _build_tokenizer(texts: dict[str, str], level: str) -> CharTokenizer | WordTokenizer:
    kind = CharTokenizer if level == "char" else WordTokenizer
    tokenizer = kind.build(texts["train"])
    if tokenizer.unk_id is None:
        held_out = "".join(text for split, text in texts.items() if split != "train")
        symbols = set(held_out) if level == "char" else set(held_out.split())
        if symbols - set(tokenizer.symbols):
            tokenizer = kind.build(texts["train"], specials=(tokenizer.unk_token,))
    return tokenizer


def sample_windows(
    tokens: Tensor, batch_size: int, context_length: int, generator: torch.Generator | None = None
) -> Batch:
    """``batch_size`` windows at random offsets (nanoGPT's ``get_batch``).

    ``tokens``: ``[N]``. Returns ``inputs = tokens[i : i + T]`` and ``targets = tokens[i + 1 :
    i + T + 1]``, both ``[B, T]`` with ``T = context_length``; ``generator`` makes it reproducible.
    """
    if tokens.numel() <= context_length:
        raise ValueError(
            f"context_length={context_length} needs more than {context_length} tokens, "
            f"the split has {tokens.numel()}"
        )
    device = generator.device if generator is not None else "cpu"
    starts = torch.randint(
        tokens.numel() - context_length, (batch_size,), generator=generator, device=device
    ).to(tokens.device)  # [B]
    offsets = torch.arange(context_length + 1, device=tokens.device)  # [T + 1]
    windows = tokens[starts[:, None] + offsets]  # [B, T + 1]
    return Batch(inputs=windows[:, :-1], targets=windows[:, 1:])


@dataclass(frozen=True)
class TokenMasking:
    """BERT's masked-token objective (Devlin et al., 2019, section 3.1): each position is chosen
    with ``probability``; a chosen token becomes ``mask_id`` 80 % of the time, a random token of
    the vocabulary 10 % and stays itself 10 %; the loss is read at the chosen positions only
    (every other target is ``ignore_id``)."""

    vocab_size: int  # the text's symbols, ids [0, vocab_size); random replacements come from here
    mask_id: int  # the [MASK] symbol, outside the text's ids
    ignore_id: int  # a target that carries no loss (the model's pad_id)
    probability: float = 0.15

    def __call__(self, tokens: Tensor, generator: torch.Generator | None = None) -> Batch:
        """``tokens`` ``[B, T]`` -> a batch of the corrupted tokens and the chosen targets."""
        device = generator.device if generator is not None else "cpu"
        draws = torch.rand((3, *tokens.shape), generator=generator, device=device)
        draws = draws.to(tokens.device)  # [3, B, T]
        chosen = draws[0] < self.probability  # [B, T]
        to_mask = chosen & (draws[1] < 0.8)
        to_random = chosen & (draws[1] >= 0.8) & (draws[2] < 0.5)
        random_ids = torch.randint(
            self.vocab_size, tokens.shape, generator=generator, device=device
        ).to(tokens.device)  # [B, T]
        inputs = torch.where(to_mask, torch.full_like(tokens, self.mask_id), tokens)
        inputs = torch.where(to_random, random_ids, inputs)
        targets = torch.where(chosen, tokens, torch.full_like(tokens, self.ignore_id))
        return Batch(inputs=inputs, targets=targets)


@dataclass(frozen=True)
class MaskedWindowSource:
    """Random windows (:func:`sample_windows`) corrupted by ``masking``: a bidirectional model's
    training data. Each window's ``T`` input tokens are the text; the shifted targets are unused."""

    windows: WindowSource
    masking: TokenMasking

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        for batch in self.windows(epoch, generator):
            yield self.masking(batch.inputs, generator)


def masked_evaluation_windows(
    tokens: Tensor, batch_size: int, context_length: int, masking: TokenMasking, seed: int = 0
) -> Iterator[Batch]:
    """:func:`evaluation_windows`' windows corrupted by ``masking`` with a generator seeded
    ``seed``: the same held-out positions masked in every evaluation of every run."""
    generator = torch.Generator().manual_seed(seed)
    for batch in evaluation_windows(tokens, batch_size, context_length):
        yield masking(batch.inputs, generator)


@dataclass(frozen=True)
class WindowSource:
    """The trainer's data source for language models: ``source(epoch, generator)`` yields
    ``batches_per_epoch`` batches of random windows (:func:`sample_windows`) from ``generator``."""

    tokens: Tensor  # [N]
    batch_size: int
    context_length: int
    batches_per_epoch: int

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        for _ in range(self.batches_per_epoch):
            yield sample_windows(self.tokens, self.batch_size, self.context_length, generator)


def evaluation_windows(tokens: Tensor, batch_size: int, context_length: int) -> Iterator[Batch]:
    """Contiguous non-overlapping windows in order: every token but the first is a target once.

    ``tokens``: ``[N]``. Yields batches of up to ``batch_size`` full windows ``[B, T]``, then, when
    ``N - 1`` is not a multiple of ``T``, one shorter window ``[1, (N - 1) mod T]``. The first
    position of each window sees no earlier context (the price of non-overlapping windows).
    """
    targets_total = tokens.numel() - 1
    full_windows = targets_total // context_length
    starts = torch.arange(full_windows, device=tokens.device) * context_length  # [W]
    offsets = torch.arange(context_length + 1, device=tokens.device)  # [T + 1]
    for chunk in starts.split(batch_size):
        windows = tokens[chunk[:, None] + offsets]  # [B, T + 1]
        yield Batch(inputs=windows[:, :-1], targets=windows[:, 1:])
    start = full_windows * context_length
    if start < targets_total:
        rest = tokens[start:]  # [R + 1]
        yield Batch(inputs=rest[None, :-1], targets=rest[None, 1:])
