"""Tasks the command line trains on: the synthetic copy task and the course's data sets (ch. 08).

The copy task is the instant proof that the whole pipeline learns: the target is the source.
A small model reaches 100% accuracy on fresh sequences in seconds on a CPU; a bug in the masks,
the shift, the loss or the schedule shows at once as a model that does not.

A *task* bundles what training and the command line need: a training data source (see
:mod:`annotated_transformer.train` for the protocol), held-out splits, a tokenizer, defaults for
the model and the training run, and ``info``, the plain data a checkpoint keeps to rebuild the
task (its name and options, the special ids). A task builder is a function
``builder(*, seed, **options) -> Task``; :func:`available_tasks` names ``copy`` and every data set
of :data:`annotated_transformer.data.DATASETS`: language models (``tinyshakespeare``, ``ptb``,
``wikitext-2``) train a decoder-only model, translation corpora (``multi30k``, ``cmn-eng``) an
encoder-decoder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .data.batch import Batch


class DigitTokenizer:
    """Digits ``0``-``9`` and ``|`` (a separator), one token each; whitespace is skipped.

    Ids: 0 padding, 1 start of sequence, 2 the separator, 3-12 the digits. ``decode`` writes the
    digits space-separated, so that BLEU sees one word per digit.
    """

    pad_id, bos_id, sep_id, offset = 0, 1, 2, 3
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

    def decode(self, ids: list[int]) -> str:
        words = []
        for token in ids:
            if token == self.sep_id:
                words.append("|")
            elif token >= self.offset:
                words.append(str(token - self.offset))
        return " ".join(words)

    def state_dict(self) -> dict[str, Any]:
        return {"type": "digits"}


def tokenizer_from_state(state: Any) -> Any:
    """Rebuild a tokenizer from the state a checkpoint stored: the copy task's digits here, the
    data sets' tokenizers by :func:`annotated_transformer.data.tokenizer_from_state`."""
    if isinstance(state, dict) and state.get("type") == "digits":
        return DigitTokenizer()
    from .data import tokenizer_from_state as data_tokenizer_from_state

    return data_tokenizer_from_state(state)


@dataclass
class Task:
    """What training on a named task needs (see the module docstring)."""

    name: str
    train: Callable[[int, torch.Generator], Iterator[Batch]]
    splits: dict[str, list[Batch]]  # held-out batches: "valid", "test"
    tokenizer: Any
    model_defaults: dict[str, Any]  # TransformerConfig fields
    train_defaults: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields
    info: dict[str, Any] = field(default_factory=dict)  # name, options, special ids; plain data
    references: dict[str, list[str]] = field(default_factory=dict)  # split -> raw target texts


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
    for name, value in (("length", length), ("batch_size", batch_size)):
        if not (isinstance(value, int) and value > 0):
            raise ValueError(f"{name}={value!r} is not accepted: use a positive integer")

    def held_out(offset: int) -> list[Batch]:
        # Seeds far from the training generators' (which mix seed and epoch), so no overlap by
        # construction of the stream; with 10^length sequences, overlap by chance is negligible.
        generator = torch.Generator().manual_seed(10_000_019 * (seed + 1) + offset)
        batches = -(-eval_sequences // batch_size)
        return list(copy_task_batches(batches, batch_size, length, generator, arch))

    tokenizer = DigitTokenizer()
    options = {
        "arch": arch,
        "seed": seed,
        "length": length,
        "batch_size": batch_size,
        "batches_per_epoch": batches_per_epoch,
        "eval_sequences": eval_sequences,
    }
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
        info={
            "name": "copy",
            "options": options,
            "pad_id": tokenizer.pad_id,
            "bos_id": tokenizer.bos_id,
            "eos_id": None,
            "source_eos": False,
            "max_new_tokens": length,
        },
    )


# ---------------------------------------------------------------------------------------------
# The course's data sets (annotated_transformer.data)


def language_model_task(
    name: str,
    *,
    seed: int = 0,
    context_length: int = 128,
    batch_size: int = 32,
    batches_per_epoch: int = 1000,
    eval_batch_size: int = 32,
    data_dir: str | None = None,
) -> Task:
    """A decoder-only language model on a named corpus: random training windows, and held-out
    splits as contiguous windows that predict every token once.

    ``seed`` is unused (the windows are drawn from the trainer's generator); it is accepted so
    that every builder has the same call."""
    from .data import WindowSource, evaluation_windows, load_language_model_corpus

    corpus = load_language_model_corpus(name, data_dir=data_dir)
    tokenizer = corpus.tokenizer
    tokens = corpus.splits
    return Task(
        name=name,
        train=WindowSource(tokens["train"], batch_size, context_length, batches_per_epoch),
        splits={
            split: list(evaluation_windows(ids, eval_batch_size, context_length))
            for split, ids in tokens.items()
            if split != "train"
        },
        tokenizer=tokenizer,
        # A small GPT (nanoGPT's "baby GPT" scale), trainable on a CPU in minutes.
        model_defaults={
            "arch": "decoder-only",
            "vocab_size": tokenizer.vocab_size,
            "pad_id": tokenizer.pad_id,  # None: windows are never padded; id 0 is a real symbol
            "max_len": context_length,
            "d_model": 128,
            "n_heads": 4,
            "n_layers": 4,
            "d_ff": 512,
            "dropout": 0.1,
            "norm_position": "pre",
            "tie_embeddings": True,
        },
        train_defaults={
            "lr": 1e-3,
            "weight_decay": 0.1,
            "schedule": "warmup_cosine",
            "warmup": 100,
            "max_steps": 5000,
            "grad_clip": 1.0,
            "eval_every": 250,
            "eval_batches": 20,
            "log_every": 50,
        },
        info={
            "name": name,
            "options": {
                "context_length": context_length,
                "batch_size": batch_size,
                "batches_per_epoch": batches_per_epoch,
                "eval_batch_size": eval_batch_size,
                "data_dir": data_dir,
            },
            "pad_id": tokenizer.pad_id,
            "bos_id": None,
            "eos_id": None,  # a word-level <eos> ends a line, not the text
            "max_new_tokens": 200,
        },
    )


def translation_task(
    name: str,
    *,
    seed: int = 0,
    source: str | None = None,
    target: str | None = None,
    bpe_vocab_size: int = 8000,
    max_tokens: int = 4096,
    max_length: int = 64,
    max_train_pairs: int | None = None,
    data_dir: str | None = None,
    tokenizer: Any = None,
) -> Task:
    """An encoder-decoder on a named parallel corpus, with a joint BPE vocabulary of
    ``bpe_vocab_size`` tokens (the model's ``vocab_size`` follows it).

    ``tokenizer``: a trained one (from a checkpoint), else one is learnt on the training split.
    Training pairs longer than ``max_length`` tokens are dropped, and with ``max_train_pairs`` only
    the first pairs are kept (a quick experiment); held-out splits keep every sentence, batched in order so that their rows line up with ``Task.references``.
    ``seed`` is unused (batches are shuffled by the trainer's generator).
    """
    from .data import (
        TranslationSource,
        encode_corpus,
        load_translation_corpus,
        train_tokenizer,
        translation_batches,
    )

    corpus = load_translation_corpus(name, source=source, target=target, data_dir=data_dir)
    if max_train_pairs is not None:
        corpus.splits["train"] = corpus.splits["train"][:max_train_pairs]
    if tokenizer is None:
        tokenizer = train_tokenizer(corpus, bpe_vocab_size)
    encoded = encode_corpus(corpus, tokenizer, max_length)
    held_out = [split for split in encoded if split != "train"]
    longest = max(len(ids) for pairs in encoded.values() for pair in pairs for ids in pair)
    max_new_tokens = max(max_length, 2 * longest)  # enough for any held-out target
    return Task(
        name=name,
        train=TranslationSource(encoded["train"], tokenizer, max_tokens),
        splits={
            split: translation_batches(encoded[split], tokenizer, max_tokens) for split in held_out
        },
        tokenizer=tokenizer,
        # Smaller than the paper's base model, for a corpus of 30k sentences (and a laptop).
        model_defaults={
            "arch": "encoder-decoder",
            "vocab_size": tokenizer.vocab_size,
            "pad_id": tokenizer.pad_id,
            "max_len": max_new_tokens + 2,
            "d_model": 256,
            "n_heads": 8,
            "n_layers": 3,
            "d_ff": 1024,
            "dropout": 0.1,
            "norm_position": "pre",
            "share_embeddings": True,  # one joint vocabulary (§3.4)
            "tie_embeddings": True,
        },
        train_defaults={
            "lr": 5e-4,
            "schedule": "warmup_cosine",
            "warmup": 500,
            "max_steps": 10000,
            "label_smoothing": 0.1,  # §5.4
            "grad_clip": 1.0,
            "eval_every": 500,
            "log_every": 50,
            "early_stopping_patience": 5,
        },
        info={
            "name": name,
            "options": {
                "source": corpus.source,
                "target": corpus.target,
                "bpe_vocab_size": bpe_vocab_size,
                "max_tokens": max_tokens,
                "max_length": max_length,
                "max_train_pairs": max_train_pairs,
                "data_dir": data_dir,
            },
            "pad_id": tokenizer.pad_id,
            "bos_id": tokenizer.bos_id,
            "eos_id": tokenizer.eos_id,
            "source_eos": True,  # collate_pairs ends every source with eos
            "max_new_tokens": max_new_tokens,
        },
        references={split: [pair[1] for pair in corpus.splits[split]] for split in held_out},
    )


# ---------------------------------------------------------------------------------------------
# Chapter 08's run sizes


# How big each of chapter 08's runs is under each profile: `smoke` (seconds on a CPU: the book
# and CI), `cpu` (a real run of all four tasks in about 13 minutes on 2 idle cores, measured),
# `gpu` (the full run; Shakespeare follows nanoGPT's character model). Per task: options of its
# builder ("data"), TransformerConfig fields ("model"), TrainConfig fields ("train"); the copy
# task gives TrainConfig fields only. Chapter 10 trains its smoke models from the same sizes.
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "smoke": {
        "copy": {"max_steps": 250},
        "shakespeare": {
            "data": {"context_length": 64, "batch_size": 16},
            "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "dropout": 0.0},
            "train": {
                "max_steps": 60,
                "warmup": 10,
                "lr": 3e-3,
                "eval_every": 30,
                "eval_batches": 4,
            },
        },
        "multi30k": {
            "data": {"bpe_vocab_size": 1000, "max_train_pairs": 4000, "max_tokens": 1024},
            "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "dropout": 0.0},
            "train": {
                "max_steps": 60,
                "warmup": 10,
                "lr": 3e-3,
                "eval_every": 30,
                "eval_batches": 4,
            },
            "test_sentences": 64,
        },
        "ptb": {
            "data": {"context_length": 32, "batch_size": 8},
            "model": {"d_model": 32, "n_heads": 4, "n_layers": 1, "d_ff": 128, "dropout": 0.0},
            "train": {
                "max_steps": 40,
                "warmup": 10,
                "lr": 3e-3,
                "eval_every": 20,
                "eval_batches": 2,
            },
        },
    },
    "cpu": {
        "copy": {"max_steps": 400},
        "shakespeare": {
            "data": {"context_length": 128, "batch_size": 16},
            "model": {"d_model": 128, "n_heads": 4, "n_layers": 3, "d_ff": 512, "dropout": 0.0},
            "train": {
                "max_steps": 1500,
                "warmup": 100,
                "lr": 2e-3,
                "eval_every": 250,
                "eval_batches": 10,
            },
        },
        "multi30k": {
            "data": {"bpe_vocab_size": 4000, "max_tokens": 2048},
            "model": {"d_model": 128, "n_heads": 4, "n_layers": 3, "d_ff": 512, "dropout": 0.1},
            "train": {
                "max_steps": 1200,
                "warmup": 150,
                "lr": 1e-3,
                "eval_every": 300,
                "eval_batches": 10,
            },
            "test_sentences": None,  # the whole test split
        },
        "ptb": {
            "data": {"context_length": 64, "batch_size": 16},
            "model": {"d_model": 128, "n_heads": 4, "n_layers": 2, "d_ff": 512, "dropout": 0.1},
            "train": {
                "max_steps": 600,
                "warmup": 60,
                "lr": 3e-3,
                "eval_every": 200,
                "eval_batches": 10,
            },
        },
    },
    "gpu": {
        "copy": {"max_steps": 400},
        "shakespeare": {
            "data": {"context_length": 256, "batch_size": 64},
            "model": {"d_model": 384, "n_heads": 6, "n_layers": 6, "d_ff": 1536, "dropout": 0.2},
            "train": {
                "max_steps": 5000,
                "warmup": 100,
                "lr": 1e-3,
                "min_lr": 1e-4,
                "eval_every": 250,
            },
        },
        "multi30k": {
            "data": {"bpe_vocab_size": 8000, "max_tokens": 8192},
            "model": {"d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 2048, "dropout": 0.1},
            "train": {"max_steps": 10000, "warmup": 1000, "lr": 5e-4, "eval_every": 500},
            "test_sentences": None,
        },
        "ptb": {
            "data": {"context_length": 256, "batch_size": 64},
            "model": {"d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 2048, "dropout": 0.4},
            "train": {"max_steps": 10000, "warmup": 500, "lr": 5e-4, "eval_every": 500},
        },
    },
}


def profile_settings(profile: str) -> dict[str, dict[str, Any]]:
    """The sizes of chapter 08's runs under ``profile`` (see :data:`PROFILES`)."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not one of: {', '.join(PROFILES)}")
    return PROFILES[profile]


TASKS: dict[str, Callable[..., Task]] = {"copy": copy_task}


def available_tasks() -> dict[str, Callable[..., Task]]:
    """The task builders by name: ``copy`` and the data sets of ``annotated_transformer.data``."""
    from .data import DATASETS

    tasks = dict(TASKS)
    for name, info in DATASETS.items():
        builder = language_model_task if info.kind == "language-model" else translation_task
        tasks[name] = functools.partial(builder, name)
    return tasks


def get_task(name: str) -> Callable[..., Task]:
    tasks = available_tasks()
    if name not in tasks:
        raise ValueError(f"task={name!r} is not one of: {', '.join(sorted(tasks))}")
    return tasks[name]
