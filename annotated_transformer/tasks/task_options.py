"""What a task is and what it accepts (chapter 08): :class:`TaskInfo` (the plain data a
checkpoint keeps of its task), :class:`Task` (what training needs), and the registry of the tasks
users can name (:data:`TASKS`) with each kind's options (:data:`KIND_OPTIONS`), checked by
:func:`check_options` before any data is read. The builders live in
:mod:`annotated_transformer.tasks` (the data sets) and :mod:`annotated_transformer.copy_task`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..data.batch import Batch
from ..data.tokenizers import TokenizerProtocol


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


TASK_ALIASES = {"shakespeare": "tinyshakespeare"}

POSITIVE = "a positive integer"
OPTIONAL_POSITIVE = "a positive integer or null"
OPTIONAL_TEXT = "a string or null"
# A language model's training objective: the next token (a causal model), or BERT's masked
# tokens (a bidirectional one, chapter 08's test of the source report's PTB perplexity).
LM_OBJECTIVES = ("next-token", "masked")
OBJECTIVE = "one of: " + ", ".join(LM_OBJECTIVES)
PROBABILITY = "a number strictly between 0 and 1"

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
        "objective": ("next-token", OBJECTIVE),
        "mask_probability": (0.15, PROBABILITY),
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


# The most tokens one batch may hold: 64 times the largest batch of the course's recipes (and
# 40 times the paper's 25k per GPU), far below what a typo (batch_size=10**9) would allocate.
MAX_BATCH_TOKENS = 2**20


def batch_tokens(kind: str, options: Mapping[str, Any]) -> dict[str, int]:
    """The tokens one batch of each batch size of a task holds, by option: the copy task's
    ``batch_size`` rows of a source and a target of ``length`` (and their start and end
    symbols), a language model's ``batch_size`` and ``eval_batch_size`` windows of
    ``context_length``, a translation batch's ``max_tokens``."""
    values = {**{key: default for key, (default, _) in KIND_OPTIONS[kind].items()}, **options}
    if kind == "copy":
        return {"batch_size": values["batch_size"] * (2 * values["length"] + 2)}
    if kind == "language-model":
        return {
            key: values[key] * values["context_length"] for key in ("batch_size", "eval_batch_size")
        }
    return {"max_tokens": values["max_tokens"]}


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
    from ..data import DATASETS

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
    if rule == OBJECTIVE:
        return value in LM_OBJECTIVES
    if rule == PROBABILITY:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
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
    for key, tokens in batch_tokens(spec.kind, options).items():
        if tokens > MAX_BATCH_TOKENS:
            raise ValueError(
                f"data.{key}={options.get(key, spec.defaults[key])!r} gives batches of {tokens:,} "
                f"tokens, more than the {MAX_BATCH_TOKENS:,} this package trains on in one batch; "
                f"use a smaller batch (and train.accumulation for a larger update)"
            )
