"""The copy task (chapter 08): the instant proof that the whole pipeline learns.

The target is the source. A small model reaches 100% accuracy on fresh sequences in seconds on a
CPU; a bug in the masks, the shift, the loss or the schedule shows at once as a model that does
not. Built like every task by :func:`annotated_transformer.tasks.build_task` (``"copy"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.batch import Batch
from ..data.tokenizers import DigitTokenizer
from .task_options import Task, TaskInfo, check_options


def copy_batch(digits: Tensor, arch: str = "encoder-decoder") -> Batch:
    """The batch that teaches a model to copy ``digits`` (``[B, L]`` values 0-9).

    - encoder-decoder: ``src`` the digit tokens, ``inputs`` ``bos`` then all but the last,
      ``targets`` the digit tokens;
    - decoder-only: the sequence ``bos d_1 .. d_L | d_1 .. d_L``, shifted by one; the targets of the
      first half are padding (random digits cannot be predicted; only the copy is learned).
    """
    tokenizer = DigitTokenizer
    tokens = digits + tokenizer.offset  # [B, L]
    rows, length = tokens.shape
    bos = torch.full((rows, 1), tokenizer.bos_id, dtype=torch.long)
    if arch == "encoder-decoder":
        return Batch(inputs=torch.cat([bos, tokens[:, :-1]], 1), targets=tokens.clone(), src=tokens)
    if arch == "decoder-only":
        separator = torch.full((rows, 1), tokenizer.sep_id, dtype=torch.long)
        sequence = torch.cat([bos, tokens, separator, tokens], 1)  # [B, 2L + 2]
        targets = sequence[:, 1:].clone()
        targets[:, : length + 1] = tokenizer.pad_id  # digits and separator: not predicted
        return Batch(inputs=sequence[:, :-1], targets=targets)
    raise ValueError(f"arch={arch!r} is not one of: encoder-decoder, decoder-only")


def copy_task_batches(
    n_batches: int | None,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    arch: str = "encoder-decoder",
) -> Iterator[Batch]:
    """``n_batches`` random copy batches (None: endless), drawn from ``generator`` only."""
    produced = 0
    while n_batches is None or produced < n_batches:
        digits = torch.randint(0, 10, (batch_size, length), generator=generator)  # [B, L]
        yield copy_batch(digits, arch)
        produced += 1


@dataclass(frozen=True)
class CopySource:
    """The copy task's training data source: ``batches_per_epoch`` fresh batches per epoch."""

    arch: str
    length: int
    batch_size: int
    batches_per_epoch: int

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        return copy_task_batches(
            self.batches_per_epoch, self.batch_size, self.length, generator, self.arch
        )


def copy_task(
    *,
    arch: str = "encoder-decoder",
    seed: int = 0,
    length: int = 10,
    batch_size: int = 64,
    batches_per_epoch: int = 100,
    eval_sequences: int = 512,
) -> Task:
    """The copy task: learn to output the source digits (encoder-decoder or decoder-only)."""
    if arch not in ("encoder-decoder", "decoder-only"):
        raise ValueError(
            f"arch={arch!r} is not one of: encoder-decoder, decoder-only (the copy task needs a "
            f"model that generates)"
        )
    options = {
        "length": length,
        "batch_size": batch_size,
        "batches_per_epoch": batches_per_epoch,
        "eval_sequences": eval_sequences,
    }
    check_options("copy", options)

    def held_out(offset: int) -> list[Batch]:
        # Seeds far from the training generators' (which mix seed and epoch), so no overlap by
        # construction of the stream; with 10^length sequences, overlap by chance is negligible.
        generator = torch.Generator().manual_seed(10_000_019 * (seed + 1) + offset)
        batches = -(-eval_sequences // batch_size)
        return list(copy_task_batches(batches, batch_size, length, generator, arch))

    tokenizer = DigitTokenizer()
    options = {"arch": arch, "seed": seed, **options}
    return Task(
        name="copy",
        train=CopySource(arch, length, batch_size, batches_per_epoch),
        splits={"valid": held_out(1), "test": held_out(2)},
        tokenizer=tokenizer,
        # Small enough to learn the task in ~200 updates, a few seconds of CPU: one encoder and
        # one decoder layer, pre-norm (post-norm needs more updates here), no dropout.
        model_defaults={
            "arch": arch,
            "vocab_size": tokenizer.vocab_size,
            "pad_id": tokenizer.pad_id,
            "max_len": 2 * length + 2,
            "d_model": 32,
            "n_heads": 4,
            "n_layers": 1,
            "d_ff": 128,
            "dropout": 0.0,
            "norm_position": "pre",
        },
        train_defaults={
            "optimizer": "adamw",
            "lr": 5e-3,
            "schedule": "warmup_cosine",
            "warmup": 20,
            "max_steps": 250,
            "weight_decay": 0.0,
            "eval_every": 50,
            "log_every": 10,
            "early_stopping_metric": "accuracy",
        },
        info=TaskInfo(
            "copy", options, tokenizer.pad_id, tokenizer.bos_id, None, max_new_tokens=length
        ),
    )
