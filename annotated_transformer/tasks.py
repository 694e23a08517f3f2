"""Tasks the command line trains on: the synthetic copy task and the course's data sets (ch. 08).

The copy task is the instant proof that the whole pipeline learns: the target is the source.
A small model reaches 100% accuracy on fresh sequences in seconds on a CPU; a bug in the masks,
the shift, the loss or the schedule shows at once as a model that does not.

A *task* bundles what training and the command line need: a training data source (see
:mod:`annotated_transformer.train` for the protocol), held-out splits, a tokenizer (a
:class:`~annotated_transformer.data.TokenizerProtocol`), defaults for the model and the training
run, and :class:`TaskInfo`, the plain data a checkpoint keeps to rebuild the task. Every task is
built by one call, :func:`build_task` ``(name, options, *, seed, arch, tokenizer)``, which checks
the options (:data:`KIND_OPTIONS`: names and values) before any data is read. ``copy`` and every
data set of :data:`annotated_transformer.data.DATASETS` is a task (:data:`TASKS`): language
models (``tinyshakespeare``, ``ptb``, ``wikitext-2``) train a decoder-only model, translation
corpora (``multi30k``, ``cmn-eng``) an encoder-decoder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .data.batch import Batch
from .data.tokenizers import DigitTokenizer, TokenizerProtocol, tokenizer_from_dict  # noqa: F401


@dataclass(frozen=True)
class TaskInfo:
    """What a checkpoint keeps of its task: enough to rebuild it and to decode with its model.

    ``options``: the builder's options (with the copy task's ``arch`` and ``seed``, which decide
    its data); ``source_eos``: sources end with ``eos`` (translation); ``max_new_tokens``: the
    longest output the task needs (the first bound of
    :func:`annotated_transformer.evaluation.decoding_budget`). Stored as a plain dict
    (:meth:`to_dict`); :meth:`from_dict` reads those dicts, old checkpoints' included.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    pad_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    source_eos: bool = False
    max_new_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | TaskInfo | None) -> TaskInfo:
        if isinstance(data, TaskInfo):
            return data
        if not isinstance(data, Mapping) or not data.get("name"):
            raise ValueError(f"the checkpoint does not say which task it was trained on: {data!r}")
        known = {item.name for item in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass
class Task:
    """What training on a named task needs (see the module docstring)."""

    name: str
    train: Callable[[int, torch.Generator], Iterator[Batch]]
    splits: dict[str, list[Batch]]  # held-out batches: "valid", "test"
    tokenizer: TokenizerProtocol
    model_defaults: dict[str, Any]  # TransformerConfig fields
    train_defaults: dict[str, Any]  # TrainConfig fields
    info: TaskInfo
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
        info=TaskInfo(
            name,
            {
                "context_length": context_length,
                "batch_size": batch_size,
                "batches_per_epoch": batches_per_epoch,
                "eval_batch_size": eval_batch_size,
                "data_dir": data_dir,
            },
            tokenizer.pad_id,
            bos_id=None,
            eos_id=None,  # a word-level <eos> ends a line, not the text
            max_new_tokens=200,
        ),
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
        info=TaskInfo(
            name,
            {
                "source": corpus.source,
                "target": corpus.target,
                "bpe_vocab_size": bpe_vocab_size,
                "max_tokens": max_tokens,
                "max_length": max_length,
                "max_train_pairs": max_train_pairs,
                "data_dir": data_dir,
            },
            tokenizer.pad_id,
            tokenizer.bos_id,
            tokenizer.eos_id,
            source_eos=True,  # collate_pairs ends every source with eos
            max_new_tokens=max_new_tokens,
        ),
        references={split: [pair[1] for pair in corpus.splits[split]] for split in held_out},
    )


# ---------------------------------------------------------------------------------------------
# The registry: one builder signature, options checked before any data is read

# Names that records and chapters used before the task names were unified (results/*.json of
# chapter 08 say "shakespeare"); :func:`canonical_task` maps them to the name users type.
TASK_ALIASES = {"shakespeare": "tinyshakespeare"}

POSITIVE = "a positive integer"
OPTIONAL_POSITIVE = "a positive integer or null"
OPTIONAL_TEXT = "a string or null"

# Per kind of task: option -> (default, what is accepted).
KIND_OPTIONS: dict[str, dict[str, tuple[Any, str]]] = {
    "copy": {
        "length": (10, POSITIVE),
        "batch_size": (64, POSITIVE),
        "batches_per_epoch": (100, POSITIVE),
        "eval_sequences": (512, POSITIVE),
    },
    "language-model": {
        "context_length": (128, POSITIVE),
        "batch_size": (32, POSITIVE),
        "batches_per_epoch": (1000, POSITIVE),
        "eval_batch_size": (32, POSITIVE),
        "data_dir": (None, OPTIONAL_TEXT),
    },
    "translation": {
        "source": (None, OPTIONAL_TEXT),
        "target": (None, OPTIONAL_TEXT),
        "bpe_vocab_size": (8000, POSITIVE),
        "max_tokens": (4096, POSITIVE),
        "max_length": (64, POSITIVE),
        "max_train_pairs": (None, OPTIONAL_POSITIVE),
        "data_dir": (None, OPTIONAL_TEXT),
    },
}


@dataclass(frozen=True)
class TaskSpec:
    """A task's name, its kind (``copy``, ``language-model``, ``translation``) and its options."""

    name: str
    kind: str

    @property
    def options(self) -> dict[str, tuple[Any, str]]:
        return KIND_OPTIONS[self.kind]

    @property
    def defaults(self) -> dict[str, Any]:
        return {name: default for name, (default, _) in self.options.items()}


def _specs() -> dict[str, TaskSpec]:
    from .data import DATASETS

    specs = {"copy": TaskSpec("copy", "copy")}
    for name, info in sorted(DATASETS.items()):
        specs[name] = TaskSpec(
            name, "language-model" if info.kind == "language-model" else "translation"
        )
    return specs


TASKS = _specs()


def canonical_task(name: str) -> str:
    """The task name users type for ``name`` (an old record's ``shakespeare`` included)."""
    return TASK_ALIASES.get(name, name)


def task_spec(name: str) -> TaskSpec:
    """The spec of task ``name``; an unknown name is a ``ValueError`` listing the tasks."""
    spec = TASKS.get(canonical_task(str(name)))
    if spec is None:
        raise ValueError(f"task={name!r} is not one of: {', '.join(sorted(TASKS))}")
    return spec


def _accepts(value: Any, rule: str) -> bool:
    if rule == OPTIONAL_TEXT:
        return value is None or isinstance(value, str)
    if value is None and rule == OPTIONAL_POSITIVE:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an unknown option or a bad value for task ``name``, naming the option, the value
    and what is accepted."""
    spec = task_spec(name)
    for key, value in options.items():
        if key not in spec.options:
            raise ValueError(
                f"{key!r} is not an option of the task {spec.name!r}; accepted: "
                f"{', '.join(spec.options)}"
            )
        rule = spec.options[key][1]
        if not _accepts(value, rule):
            raise ValueError(f"data.{key}={value!r} is not accepted: use {rule}")


def build_task(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    arch: str | None = None,
    tokenizer: TokenizerProtocol | None = None,
) -> Task:
    """Task ``name`` built with ``options`` (see :data:`KIND_OPTIONS`), checked first.

    The one way to build a task, the same call for every task. ``arch``: the model's
    architecture (the copy task's batches depend on it; the others ignore it). ``tokenizer``: a
    trained one (a translation task rebuilt from a checkpoint); else one is learnt.
    """
    spec = task_spec(name)
    options = dict(options or {})
    check_options(spec.name, options)
    if spec.kind == "copy":
        return copy_task(arch=arch or "encoder-decoder", seed=seed, **options)
    if spec.kind == "language-model":
        return language_model_task(spec.name, seed=seed, **options)
    return translation_task(spec.name, seed=seed, tokenizer=tokenizer, **options)


def task_from_info(info: TaskInfo | Mapping[str, Any], tokenizer: Any = None) -> Task:
    """Rebuild the task a checkpoint was trained on (its :class:`TaskInfo`), with its tokenizer."""
    info = TaskInfo.from_dict(info)
    options = dict(info.options)
    seed, arch = options.pop("seed", 0), options.pop("arch", None)
    return build_task(info.name, options, seed=seed, arch=arch, tokenizer=tokenizer)
