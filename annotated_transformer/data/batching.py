"""Translation batches by token budget, with length bucketing (chapter 08).

The paper batched "by approximate sequence length", about 25,000 source and 25,000 target tokens
per batch (Vaswani et al. 2017, §5.1). Here a batch holds as many pairs as fit in ``max_tokens``
padded positions: ``B × max(S, T) ≤ max_tokens``. Training pairs are sorted by length first
(ties in a random order), so pairs of similar length share a batch and little is padding; the
batches then come in a random order. Evaluation batches keep the pairs in their original order,
so the hypotheses line up with the references.

Each batch is padded once, here. Its masks are not built here: the model computes them once per
forward pass from ``pad_id`` (``padding_mask`` in the encoder and decoder, the causal mask in the
decoder).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from .batch import Batch
from .tokenizers import Tokenizer
from .translation import EncodedPair


def pair_length(pair: EncodedPair) -> int:
    """Positions a pair takes in a batch: ``max(S, T)`` (source + ``eos``, ``bos`` + target)."""
    source, target = pair
    return max(len(source), len(target)) + 1


def token_budget_batches(
    lengths: Sequence[int],
    max_tokens: int,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Group the indices of ``lengths`` into batches with ``len(batch) × longest ≤ max_tokens``.

    ``shuffle=False``: consecutive indices in their order. ``shuffle=True``: indices sorted by
    length (equal lengths in a random order), packed greedily, and the batches shuffled; the
    same ``generator`` state gives the same batches. Every index is in exactly one batch.
    """
    too_long = [length for length in lengths if length > max_tokens]
    if too_long:
        raise ValueError(
            f"max_tokens={max_tokens} is smaller than {len(too_long)} pair(s), the longest "
            f"{max(too_long)} positions: raise max_tokens or filter training pairs by max_length"
        )
    order = list(range(len(lengths)))
    if shuffle:
        order = torch.randperm(len(lengths), generator=generator).tolist()
        order.sort(key=lambda index: lengths[index])  # stable: ties keep the random order
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        length = lengths[index]
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    if shuffle:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def collate_pairs(pairs: Sequence[EncodedPair], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Pad a list of pairs into one :class:`Batch`, right-padded with ``pad_id``.

    ``src = source + eos`` ``[B, S]``; ``inputs = bos + target`` and ``targets = target + eos``,
    both ``[B, T]``, so ``inputs[:, 1:] == targets[:, :-1]`` on real tokens.
    """
    width_source = max(len(source) for source, _ in pairs) + 1  # S
    width_target = max(len(target) for _, target in pairs) + 1  # T
    src, inputs, targets = [], [], []
    for source, target in pairs:
        src.append(source + [eos_id] + [pad_id] * (width_source - len(source) - 1))
        padding = [pad_id] * (width_target - len(target) - 1)
        inputs.append([bos_id] + target + padding)
        targets.append(target + [eos_id] + padding)
    return Batch(
        inputs=torch.tensor(inputs, dtype=torch.long),  # [B, T]
        targets=torch.tensor(targets, dtype=torch.long),  # [B, T]
        src=torch.tensor(src, dtype=torch.long),  # [B, S]
    )


def _special_ids(tokenizer: Tokenizer) -> tuple[int, int, int]:
    ids = (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
    if None in ids:
        raise ValueError(f"{tokenizer!r} needs <pad>, <s> and </s> to build translation batches")
    return ids


def translation_batches(
    pairs: Sequence[EncodedPair],
    tokenizer: Tokenizer,
    max_tokens: int,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
) -> list[Batch]:
    """One epoch of batches of ``pairs`` within ``max_tokens`` padded positions each.

    Training: ``shuffle=True`` with a seeded ``generator``; calling again with the same generator
    gives the next epoch's (different) batches. Evaluation: ``shuffle=False`` keeps the order of
    ``pairs``, so the batches' rows, concatenated, are ``pairs`` again. ``tokenizer`` gives the
    ``pad_id``, ``bos_id`` and ``eos_id``.
    """
    ids = _special_ids(tokenizer)
    lengths = [pair_length(pair) for pair in pairs]
    groups = token_budget_batches(lengths, max_tokens, shuffle=shuffle, generator=generator)
    return [collate_pairs([pairs[index] for index in group], *ids) for group in groups]


@dataclass(frozen=True)
class TranslationSource:
    """The trainer's data source for translation: ``source(epoch, generator)`` yields one epoch
    of shuffled token-budget batches, all randomness from ``generator``.

    The batches are planned at once (indices only) and padded one at a time as they are asked
    for, so a resumed run skips the batches it already trained on cheaply.
    """

    pairs: Sequence[EncodedPair]
    tokenizer: Tokenizer
    max_tokens: int

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        ids = _special_ids(self.tokenizer)
        lengths = [pair_length(pair) for pair in self.pairs]
        groups = token_budget_batches(lengths, self.max_tokens, shuffle=True, generator=generator)
        for group in groups:
            yield collate_pairs([self.pairs[index] for index in group], *ids)
