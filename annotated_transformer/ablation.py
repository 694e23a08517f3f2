"""Ablation studies (chapter 09): which design choices matter, measured over seeds.

A *study* changes one *factor* of a base model over its *levels* and keeps everything else fixed
(heads, depth, dropout, ...), or crosses several factors in a full factorial design (``factorial``:
positional encoding × norm × schedule × label smoothing, 2×2×2×2 = 16 cells). Each level is a set
of *overrides* of the configs, addressed as ``"model.<TransformerConfig field>"``,
``"train.<TrainConfig field>"``, ``"data.<task option>"`` or ``"evaluation.<option>"``.

The pieces:

- :data:`STUDIES` (``study_names()``, :func:`get_study`) and :data:`PROFILES` (``smoke``: seconds
  per run on a CPU, what CI runs; ``cpu``: a real study on a 2-core CPU in about half an hour;
  ``gpu``: a minute or two per run on one GPU, several runs at once);
- :func:`run_configs` turns (study, task, seeds, profile, overrides) into one JSON-safe config per
  run; :func:`run_study` loads the stored ones and trains the missing ones, several at once in
  worker processes if asked (each saves its own record atomically, so an interrupted study
  resumes where it stopped);
- :func:`train_run` trains one config: an encoder-decoder, a decoder-only *prefix LM* or an
  encoder-only model on translation (test loss and greedy test BLEU), a causal or bidirectional
  model on a character LM (validation loss, bits per character, and the last-position loss);
- pure analysis of records: :func:`summarize` (mean, std, 95% t interval, min, max),
  :func:`rank`, :func:`welch_test` and :func:`judge` (is a difference beyond seed noise?),
  :func:`main_effects`, :func:`interaction`, :func:`curves`, and :func:`vaswani_comparison`, which
  states for each trend of Vaswani et al. 2017, Table 3, whether our runs agree.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, stdev
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checkpoint import atomic_write_text
from .config import TransformerConfig
from .data.batch import Batch
from .decode import greedy_decode
from .experiments import ResultsStore, canonical_json, run_key, run_or_load
from .metrics import bleu_interval, corpus_bleu, corpus_chrf, mean_interval, t_cdf
from .model import build_model, count_parameters
from .train import TrainConfig, Trainer, TrainingDiverged, evaluate, seed_everything

TASKS = {"multi30k": "translation", "cmn-eng": "translation", "tinyshakespeare": "language-model"}
PROFILE_CHOICES = ("smoke", "cpu", "gpu")
SECTIONS = ("model", "train", "data", "evaluation")
# Set by the runner for every run, never by a study or a user override.
RUNNER_FIELDS = ("seed", "device", "progress", "checkpoint_dir")
# Decided by the task's tokenizer, never by an override.
TASK_FIELDS = ("vocab_size", "src_vocab_size", "tgt_vocab_size", "pad_id")


# ---------------------------------------------------------------------------------------------
# Studies


@dataclass(frozen=True)
class Scale:
    """An override relative to the profile: the profile's value times ``factor`` (an integer)."""

    factor: float

    def of(self, value: int) -> int:
        return max(1, round(value * self.factor))


@dataclass(frozen=True)
class Factor:
    """One thing a study changes: level label -> overrides, in display order."""

    name: str
    levels: dict[str, dict[str, Any]]
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)  # level -> task kinds it suits

    def labels(self, kind: str) -> list[str]:
        return [label for label in self.levels if kind in self.only.get(label, (kind,))]


@dataclass(frozen=True)
class Study:
    """A named ablation: its factors, the baseline level of each, and its row of Table 3."""

    name: str
    description: str
    factors: tuple[Factor, ...]
    baseline: dict[str, str]  # factor name -> level label
    vaswani_rows: str = ""  # the rows of Vaswani et al. 2017, Table 3, it corresponds to

    @property
    def design(self) -> str:
        return "factorial" if len(self.factors) > 1 else "one factor at a time"

    def variants(self, kind: str) -> list[Variant]:
        """Every combination of levels that suits a task of ``kind``, the first factor slowest."""
        combinations: list[dict[str, str]] = [{}]
        for factor in self.factors:
            combinations = [
                {**chosen, factor.name: label}
                for chosen in combinations
                for label in factor.labels(kind)
            ]
        variants = []
        for chosen in combinations:
            overrides: dict[str, Any] = {}
            for factor in self.factors:
                overrides.update(factor.levels[chosen[factor.name]])
            variants.append(Variant(", ".join(chosen.values()), chosen, overrides))
        return variants

    def baseline_label(self, kind: str) -> str:
        """The baseline variant's label; a baseline level that does not suit ``kind`` (the
        encoder-decoder on a language model) gives way to the factor's first level that does."""
        levels = []
        for factor in self.factors:
            labels = factor.labels(kind)
            wanted = self.baseline[factor.name]
            levels.append(wanted if wanted in labels else labels[0])
        return ", ".join(levels)


@dataclass(frozen=True)
class Variant:
    label: str
    factors: dict[str, str]
    overrides: dict[str, Any]


def _one(name: str, key: str, values: Sequence[Any], baseline: Any, **study: Any) -> Study:
    """A one-factor study whose levels set ``key`` to each of ``values``."""
    factor = Factor(name, {str(value): {key: value} for value in values})
    return Study(name=name, factors=(factor,), baseline={name: str(baseline)}, **study)


_ARCHITECTURE = Factor(
    "architecture",
    {
        "encoder-decoder": {"model.arch": "encoder-decoder"},
        "decoder-only": {"model.arch": "decoder-only"},
        "encoder-only": {"model.arch": "encoder-only"},
    },
    only={"encoder-decoder": ("translation",)},
)

STUDIES: dict[str, Study] = {
    study.name: study
    for study in [
        _one(
            "heads",
            "model.n_heads",
            (1, 2, 4, 8, 16),
            8,
            description="attention heads h at a fixed d_model, so d_k = d_model / h",
            vaswani_rows="A",
        ),
        _one(
            "depth",
            "model.n_layers",
            (1, 2, 3, 6),
            3,
            description="layers per stack (the encoder and the decoder each)",
            vaswani_rows="C",
        ),
        _one(
            "dropout",
            "model.dropout",
            (0.0, 0.1, 0.2, 0.3),
            0.1,
            description="dropout on sublayer outputs, embeddings and attention weights",
            vaswani_rows="D",
        ),
        Study(
            name="width",
            description="d_model and d_ff scaled together at 8 heads (d_k scales with them)",
            factors=(
                Factor(
                    "width",
                    {
                        f"{scale}x": {"model.d_model": Scale(scale), "model.d_ff": Scale(scale)}
                        for scale in (0.5, 1, 2)
                    },
                ),
            ),
            baseline={"width": "1x"},
            vaswani_rows="C",
        ),
        _one(
            "positional",
            "model.positional",
            ("none", "sinusoidal", "learned", "relative", "rope", "alibi"),
            "sinusoidal",
            description="how the model knows where a token is",
            vaswani_rows="E",
        ),
        _one("norm", "model.norm", ("layernorm", "rmsnorm"), "layernorm", description="the norm"),
        _one(
            "norm_position",
            "model.norm_position",
            ("pre", "post"),
            "pre",
            description="the norm before each sublayer (pre) or after the residual sum (post)",
        ),
        Study(
            name="schedule",
            description="constant Adam, Noam (the paper's) and warmup+cosine, at one peak rate",
            factors=(
                Factor(
                    "schedule",
                    {
                        "constant": {"train.schedule": "constant", "train.warmup": 0},
                        "noam": {"train.schedule": "noam"},
                        "warmup_cosine": {"train.schedule": "warmup_cosine"},
                    },
                ),
            ),
            baseline={"schedule": "warmup_cosine"},
        ),
        _one(
            "label_smoothing",
            "train.label_smoothing",
            (0.0, 0.1, 0.2),
            0.1,
            description="label smoothing of the training loss (evaluation is plain NLL)",
            vaswani_rows="D",
        ),
        Study(
            name="residual",
            description="with and without the residual connections",
            factors=(
                Factor(
                    "residual",
                    {"with": {"model.residual": True}, "without": {"model.residual": False}},
                ),
            ),
            baseline={"residual": "with"},
        ),
        Study(
            name="architecture",
            description=(
                "encoder-decoder; decoder-only prefix LM over source </s><s> target; encoder-only "
                "over the same sequence, which sees the answer"
            ),
            factors=(_ARCHITECTURE,),
            baseline={"architecture": "encoder-decoder"},
        ),
        Study(
            name="factorial",
            description=(
                "positional (absolute/relative) × norm × optimizer (Adam constant/Noam) × label "
                "smoothing (0/0.1): a 2×2×2×2 full factorial"
            ),
            factors=(
                Factor(
                    "positional",
                    {
                        "absolute": {"model.positional": "sinusoidal"},
                        "relative": {"model.positional": "relative"},
                    },
                ),
                Factor(
                    "norm",
                    {
                        "layernorm": {"model.norm": "layernorm"},
                        "rmsnorm": {"model.norm": "rmsnorm"},
                    },
                ),
                Factor(
                    "optimizer",
                    {
                        "adam": {"train.schedule": "constant", "train.warmup": 0},
                        "noam": {"train.schedule": "noam"},
                    },
                ),
                Factor(
                    "smoothing",
                    {
                        "ls=0": {"train.label_smoothing": 0.0},
                        "ls=0.1": {"train.label_smoothing": 0.1},
                    },
                ),
            ),
            baseline={
                "positional": "absolute",
                "norm": "layernorm",
                "optimizer": "noam",
                "smoothing": "ls=0.1",
            },
            vaswani_rows="D, E",
        ),
    ]
}


def study_names() -> list[str]:
    return list(STUDIES)


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ValueError(f"study={name!r} is not one of: {', '.join(STUDIES)}")
    return STUDIES[name]


def task_kind(task: str) -> str:
    """``translation`` or ``language-model``; other tasks are an error that lists the valid ones."""
    if task not in TASKS:
        raise ValueError(
            f"task={task!r} is not one of: {', '.join(TASKS)} (translation: multi30k, cmn-eng; "
            f"character language model: tinyshakespeare)"
        )
    return TASKS[task]


def applicability() -> list[dict[str, Any]]:
    """Which studies run on which kind of task, and with which levels."""
    rows = []
    for study in STUDIES.values():
        row: dict[str, Any] = {"study": study.name, "design": study.design}
        for kind in ("translation", "language-model"):
            labels = [variant.label for variant in study.variants(kind)]
            row[kind] = "; ".join(labels) if len(labels) <= 6 else f"{len(labels)} cells"
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# Profiles and configs

# What every profile shares: the paper's base model (Table 3, "base") with pre-norm (chapter 04:
# post-norm needs a warmup it may not get in a short run; the norm_position study measures it),
# 3 layers per stack instead of 6, Adam with the paper's betas, label smoothing 0.1.
BASE = {
    "model": {
        "n_heads": 8,
        "n_layers": 3,
        "dropout": 0.1,
        "positional": "sinusoidal",
        "norm": "layernorm",
        "norm_position": "pre",
        "residual": True,
    },
    "train": {
        "optimizer": "adam",
        "weight_decay": 0.0,
        "betas": [0.9, 0.98],
        "eps": 1e-9,
        "schedule": "warmup_cosine",
        "label_smoothing": 0.1,
        "grad_clip": 1.0,
    },
}

PROFILES: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    # Seconds per run on a 2-core CPU: proves the pipeline, measures nothing.
    "smoke": {
        "translation": {
            "data": {
                "bpe_vocab_size": 600,
                "max_train_pairs": 2000,
                "max_tokens": 512,
                "max_length": 32,
            },
            "model": {"d_model": 32, "d_ff": 64},
            "train": {"max_steps": 16, "warmup": 4, "lr": 3e-3, "eval_every": 8},
            "evaluation": {"test_sentences": 64, "bleu_resamples": 20, "max_new_tokens": 16},
        },
        "language-model": {
            "data": {"context_length": 64, "batch_size": 16},
            "model": {"d_model": 32, "d_ff": 64},
            "train": {"max_steps": 16, "warmup": 4, "lr": 3e-3, "eval_every": 8},
            "evaluation": {"eval_batches": 8},
        },
    },
    # A real study on a 2-core CPU: about a minute and a half per run (400 updates measured
    # 65 s on a shared 2-core CPU), a 15-run study in under half an hour.
    "cpu": {
        "translation": {
            "data": {"bpe_vocab_size": 2000, "max_train_pairs": 10000, "max_tokens": 1024},
            "model": {"d_model": 64, "d_ff": 256},
            "train": {"max_steps": 600, "warmup": 60, "lr": 2e-3, "eval_every": 150},
            "evaluation": {"test_sentences": None, "bleu_resamples": 100},
        },
        "language-model": {
            "data": {"context_length": 128, "batch_size": 16},
            "model": {"d_model": 64, "d_ff": 256},
            "train": {"max_steps": 500, "warmup": 50, "lr": 2e-3, "eval_every": 100},
            "evaluation": {"eval_batches": 40},
        },
    },
    # One GPU (sized for an H100, bf16 autocast): a minute or two per run, several runs at once.
    "gpu": {
        "translation": {
            "data": {"bpe_vocab_size": 8000, "max_tokens": 4096},
            "model": {"d_model": 256, "d_ff": 1024},
            "train": {
                "max_steps": 2500,
                "warmup": 250,
                "lr": 1e-3,
                "eval_every": 250,
                "precision": "bf16",
            },
            "evaluation": {"test_sentences": None, "bleu_resamples": 200},
        },
        "language-model": {
            "data": {"context_length": 256, "batch_size": 64},
            "model": {"d_model": 256, "d_ff": 1024},
            "train": {
                "max_steps": 2000,
                "warmup": 200,
                "lr": 1e-3,
                "eval_every": 250,
                "precision": "bf16",
            },
            "evaluation": {"eval_batches": None},
        },
    },
}
_PROFILE_TRAIN = {
    "smoke": {"eval_batches": 2, "log_every": 4},
    "cpu": {"eval_batches": 10, "log_every": 20},
    "gpu": {"eval_batches": 20, "log_every": 50},
}

TASK_OPTIONS = {
    "translation": (
        "bpe_vocab_size",
        "max_tokens",
        "max_length",
        "max_train_pairs",
        "source",
        "target",
    ),
    "language-model": ("context_length", "batch_size", "batches_per_epoch", "eval_batch_size"),
}
EVALUATION_OPTIONS = {
    "translation": ("test_sentences", "bleu_resamples", "max_new_tokens"),
    "language-model": ("eval_batches",),
}


def accepted_fields(kind: str) -> dict[str, tuple[str, ...]]:
    """The fields an override may address, by section, for a task of ``kind``."""
    train = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in RUNNER_FIELDS)
    return {
        "model": tuple(
            f.name for f in dataclasses.fields(TransformerConfig) if f.name not in TASK_FIELDS
        ),
        "train": train,
        "data": TASK_OPTIONS[kind],
        "evaluation": EVALUATION_OPTIONS[kind],
    }


def parse_overrides(overrides: dict[str, Any] | str | None, kind: str) -> dict[str, Any]:
    """User overrides as ``{"section.field": value}``, validated.

    ``overrides`` is a dict or its JSON text (what ``papermill -p overrides '{...}'`` passes).
    A bare field name (``"max_steps"``) is accepted when exactly one section has it. An unknown
    field is a ``ValueError`` naming it and listing the accepted ones.
    """
    if overrides is None or (isinstance(overrides, str) and not overrides.strip()):
        return {}
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"overrides must be a JSON object such as "
                f'\'{{"model.d_model": 128, "train.max_steps": 500}}\', got {overrides!r}: {error}'
            ) from error
    if not isinstance(overrides, dict):
        raise ValueError(f"overrides must be a dict or a JSON object, got {type(overrides)}")
    fields = accepted_fields(kind)
    parsed = {}
    for name, value in overrides.items():
        section, _, field_name = str(name).rpartition(".")
        if not section:
            owners = [owner for owner, names in fields.items() if field_name in names]
            if len(owners) != 1:
                where = f"it is in {' and '.join(owners)}" if owners else "no section has it"
                raise ValueError(
                    f"override {name!r}: write it as section.field ({where}); sections: "
                    f"{', '.join(SECTIONS)}"
                )
            section = owners[0]
        if section not in fields:
            raise ValueError(
                f"override {name!r}: section {section!r} is not one of: {', '.join(SECTIONS)}"
            )
        if field_name not in fields[section]:
            raise ValueError(
                f"override {name!r}: {field_name!r} is not a {section} field of a {kind} run; "
                f"accepted are: {', '.join(fields[section])}"
            )
        parsed[f"{section}.{field_name}"] = value
    return parsed


def parse_seeds(seeds: int | str | Sequence[int]) -> list[int]:
    """``3`` -> ``[0, 1, 2]``; ``"3,4"`` or ``[3, 4]`` -> those seeds."""
    if isinstance(seeds, bool):
        raise ValueError(f"seeds={seeds!r} is not accepted: use a count or a list of seeds")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds={seeds} is not accepted: use at least 1")
        return list(range(seeds))
    if isinstance(seeds, str):
        seeds = [int(part) for part in seeds.replace(" ", "").split(",") if part]
    chosen = [int(seed) for seed in seeds]
    if not chosen or any(seed < 0 for seed in chosen) or len(set(chosen)) != len(chosen):
        raise ValueError(f"seeds={seeds!r} is not accepted: use distinct integers >= 0")
    return chosen


def _apply(sections: dict[str, dict[str, Any]], overrides: dict[str, Any]) -> None:
    for name, value in overrides.items():
        section, field_name = name.split(".", 1)
        if isinstance(value, Scale):
            value = value.of(sections[section][field_name])
        sections[section][field_name] = value


def _finish(sections: dict[str, dict[str, Any]], kind: str) -> None:
    """Settings that follow from others, resolved once so the config says what ran."""
    model, train = sections["model"], sections["train"]
    if kind == "translation" and model.get("arch", "encoder-decoder") != "encoder-decoder":
        # One stack reads source and target: as many layers as the encoder-decoder's two stacks
        # together (which still has ~1/6 more weights: its decoder layers add cross-attention).
        model["n_layers"] = 2 * model["n_layers"]
    if train.get("schedule") == "noam" and "noam_factor" not in train:
        # The three schedules share one peak rate (train.lr); they differ in shape only. Noam's
        # peak is factor / sqrt(d_model * warmup) (chapter 06).
        train["noam_factor"] = train["lr"] * math.sqrt(model["d_model"] * train["warmup"])


def run_configs(
    study: str,
    task: str,
    seeds: int | str | Sequence[int] = 3,
    profile: str = "smoke",
    overrides: dict[str, Any] | str | None = None,
) -> list[dict[str, Any]]:
    """One config per (variant, seed), JSON-safe and complete: what :func:`train_run` trains.

    Order: base, then the profile, then the variant's levels, then the user's overrides.
    """
    chosen = get_study(study)
    kind = task_kind(task)
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not one of: {', '.join(PROFILES)}")
    user = parse_overrides(overrides, kind)
    settings = PROFILES[profile][kind]
    configs = []
    for variant in chosen.variants(kind):
        sections = {
            "model": {
                "arch": "encoder-decoder" if kind == "translation" else "decoder-only",
                **BASE["model"],
                **settings["model"],
            },
            "train": {**BASE["train"], **_PROFILE_TRAIN[profile], **settings["train"]},
            "data": dict(settings["data"]),
            "evaluation": {"decode": "greedy", **settings["evaluation"]},
        }
        _apply(sections, variant.overrides)
        _apply(sections, user)
        _finish(sections, kind)
        # Validate now, with stand-ins for what the tokenizer decides: a bad value fails before
        # anything trains, with the config classes' own error.
        stand_in = {"vocab_size": 1000, "pad_id": 0 if kind == "translation" else None}
        build_configs({**sections, "seed": 0}, {**stand_in, "max_len": 1024})
        for seed in parse_seeds(seeds):
            configs.append(
                {
                    "experiment": "ablation",
                    "study": chosen.name,
                    "variant": variant.label,
                    "factors": dict(variant.factors),
                    "baseline": variant.label == chosen.baseline_label(kind),
                    "task": task,
                    "profile": profile,
                    "seed": seed,
                    **sections,
                }
            )
    return configs


def task_fields(task: Any, arch: str) -> dict[str, Any]:
    """The model fields a task decides: vocabulary, padding id, length, shared embeddings."""
    defaults = task.model_defaults
    fields = {name: defaults[name] for name in ("vocab_size", "pad_id", "max_len")}
    fields["tie_embeddings"] = defaults.get("tie_embeddings", False)
    if arch == "encoder-decoder":
        fields["share_embeddings"] = defaults.get("share_embeddings", False)
    elif task.info.get("source_eos"):  # a translation task read by one stack: source + target
        fields["max_len"] = 2 * defaults["max_len"]
    return fields


def build_configs(
    config: dict[str, Any], fields: dict[str, Any], device: str = "auto"
) -> tuple[TransformerConfig, TrainConfig]:
    """The validated configs of run ``config``, with the task's ``fields`` (:func:`task_fields`)."""
    model = TransformerConfig(**{**fields, **config["model"]})
    train = TrainConfig(
        **{**config["train"], "betas": tuple(config["train"].get("betas", (0.9, 0.98)))},
        seed=config["seed"],
        device=device,
        progress=False,
    )
    return model, train


# ---------------------------------------------------------------------------------------------
# One stack for source and target: the prefix LM and the encoder-only reading


def prefix_lm_batch(batch: Batch, pad_id: int) -> Batch:
    """A translation batch as one sequence per pair: ``source </s> <s> target``, predicting
    ``target </s>``.

    The inputs are the encoder-decoder's encoder input followed by its decoder input; the
    targets are padding (no loss) over the source and the encoder-decoder's targets after it, so
    the loss is on exactly the same tokens as the encoder-decoder's. A causal (decoder-only)
    model reading it is a *prefix LM*; a bidirectional (encoder-only) one sees each answer.
    """
    if batch.src is None:
        raise ValueError("prefix_lm_batch needs a translation batch (with src)")
    source_lengths = (batch.src != pad_id).sum(1).tolist()  # [B]
    target_lengths = (batch.inputs != pad_id).sum(1).tolist()  # [B]
    rows = len(source_lengths)
    width = max(s + t for s, t in zip(source_lengths, target_lengths, strict=True))
    inputs = torch.full((rows, width), pad_id, dtype=torch.long)  # [B, L]
    targets = torch.full((rows, width), pad_id, dtype=torch.long)  # [B, L]
    for row, (s, t) in enumerate(zip(source_lengths, target_lengths, strict=True)):
        inputs[row, :s] = batch.src[row, :s]
        inputs[row, s : s + t] = batch.inputs[row, :t]
        targets[row, s : s + t] = batch.targets[row, :t]
    return Batch(inputs=inputs, targets=targets)


@dataclass(frozen=True)
class PrefixSource:
    """A translation data source re-read as :func:`prefix_lm_batch` sequences."""

    source: Callable[[int, torch.Generator], Iterable[Batch]]
    pad_id: int

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        return (prefix_lm_batch(batch, self.pad_id) for batch in self.source(epoch, generator))


@torch.no_grad()
def greedy_recompute(
    model: nn.Module, prompt: Tensor, max_new_tokens: int, eos_id: int, pad_id: int
) -> Tensor:
    """Greedy decoding that runs the whole sequence again at every step (no cache), so that it
    works for an encoder-only model too: at step ``t`` it sees the prompt and its own ``t``
    tokens, and nothing after them, as at any real generation. Returns ``[B, T_0 + n]``."""
    was_training = model.training
    model.eval()
    tokens = prompt  # [B, T_0]
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        next_token = model(tokens)[:, -1].argmax(-1).masked_fill(finished, pad_id)  # [B]
        tokens = torch.cat([tokens, next_token[:, None]], 1)  # [B, T + 1]
        finished |= next_token == eos_id
        if bool(finished.all()):
            break
    model.train(was_training)
    return tokens


def translate(
    model: nn.Module,
    batches: Iterable[Batch],
    task: Any,
    limit: int | None,
    max_new_tokens: int | None = None,
) -> list[str]:
    """Greedy translations of the first ``limit`` sentences of ``batches`` (all: None), in order,
    of at most ``2 S + 10`` tokens for a source of ``S`` (and at most ``max_new_tokens``).

    Encoder-decoder: :func:`~annotated_transformer.decode.greedy_decode` from ``<s>`` on the KV
    cache. One stack: the prompt ``source </s> <s>``; sources of equal length from all batches are
    decoded together (a prompt has no padding inside); decoder-only on the cache, encoder-only by
    :func:`greedy_recompute`.
    """
    info, tokenizer = task.info, task.tokenizer
    pad, bos, eos = info["pad_id"], info["bos_id"], info["eos_id"]
    device = next(model.parameters()).device
    arch = model.config.arch

    def budget(source_length: int) -> int:
        return min(info["max_new_tokens"], 2 * source_length + 10, max_new_tokens or math.inf)

    outputs: list[str] = []
    sources: list[Tensor] = []  # one stack: every source (with its </s>), decoded below
    for batch in batches:
        if limit is not None and len(outputs) + len(sources) >= limit:
            break
        src = batch.src.to(device)  # [B, S]
        if arch == "encoder-decoder":
            tokens = greedy_decode(
                model, src=src, max_new_tokens=budget(src.size(1)), bos_id=bos, eos_id=eos
            )
            outputs += [tokenizer.decode(row.tolist()) for row in tokens]
        else:
            sources += [row[row != pad] for row in src]
    sources = sources[:limit] if limit is not None else sources
    texts: list[str] = [""] * len(sources)
    lengths = [len(source) for source in sources]
    for length in sorted(set(lengths)):
        rows = [row for row, value in enumerate(lengths) if value == length]
        for chunk in range(0, len(rows), 256):
            group = rows[chunk : chunk + 256]
            start = torch.full((len(group), 1), bos, dtype=torch.long, device=device)
            prompt = torch.cat([torch.stack([sources[row] for row in group]), start], 1)
            if arch == "decoder-only":  # prompt: [b, length + 1]
                tokens = greedy_decode(
                    model, prompt=prompt, max_new_tokens=budget(length), eos_id=eos
                )
            else:
                tokens = greedy_recompute(model, prompt, budget(length), eos, pad)
            for row, generated in zip(group, tokens[:, length + 1 :], strict=True):
                texts[row] = tokenizer.decode(generated.tolist())
    outputs += texts
    return outputs[:limit] if limit is not None else outputs


@torch.no_grad()
def last_position_loss(
    model: nn.Module, batches: Iterable[Batch], max_batches: int | None = None
) -> float:
    """Mean loss (nats) of the last position of each window only: the one prediction whose answer
    is not among the inputs, so even a model that reads the future must really predict it."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            break
        logits = model(batch.inputs.to(device))[:, -1].float()  # [B, V]
        total += F.cross_entropy(logits, batch.targets[:, -1].to(device), reduction="sum").item()
        count += batch.targets.size(0)
    model.train(was_training)
    return total / max(count, 1)


# ---------------------------------------------------------------------------------------------
# Training one run


@functools.lru_cache(maxsize=4)
def _load_task(name: str, options_json: str) -> Any:
    from .tasks import get_task

    return get_task(name)(**json.loads(options_json))


def load_task(name: str, options: dict[str, Any]) -> Any:
    """The task ``name`` built with ``options``, once per process (runs of a study share it)."""
    task_kind(name)
    return _load_task(name, canonical_json(options))


def train_run(config: dict[str, Any], device: str = "auto") -> dict[str, Any]:
    """Train the run ``config`` (from :func:`run_configs`) and measure it.

    Returns ``{"metrics", "history", "samples", "device"}`` for
    :func:`~annotated_transformer.experiments.run_or_load`. A run whose loss stops being finite
    returns ``metrics["diverged"] = True`` and the history so far, instead of raising: one
    diverged cell must not stop a study.
    """
    kind = task_kind(config["task"])
    task = load_task(config["task"], config["data"])
    arch = config["model"]["arch"]
    model_config, train_config = build_configs(config, task_fields(task, arch), device)
    seed_everything(config["seed"])  # before the model: a seed gives the same weights
    model = build_model(model_config)
    pad = model_config.pad_id
    train_data, splits = task.train, dict(task.splits)
    one_stack = kind == "translation" and arch != "encoder-decoder"
    if one_stack:
        train_data = PrefixSource(task.train, pad)
        splits = {
            name: [prefix_lm_batch(b, pad) for b in batches] for name, batches in splits.items()
        }
    trainer = Trainer(model, train_config, train_data, splits["valid"])
    metrics: dict[str, Any] = {"parameters": count_parameters(model)}
    try:
        history = trainer.fit()
    except TrainingDiverged as error:
        metrics.update({"diverged": True, "diverged_at": error.step})
        return {"metrics": metrics, "history": trainer.history, "device": trainer.device}
    model = trainer.model.eval()
    evaluation = config["evaluation"]
    samples: dict[str, Any] = {}
    if kind == "translation":
        test = evaluate(model, splits["test"], pad, precision=train_config.precision)
        metrics.update({f"test_{name}": test[name] for name in ("loss", "perplexity", "accuracy")})
        limit = evaluation.get("test_sentences")
        references = task.references["test"][:limit]
        hypotheses = translate(
            model, task.splits["test"], task, limit, evaluation.get("max_new_tokens")
        )
        bleu = corpus_bleu(hypotheses, references)
        metrics.update(
            {
                "test_bleu": bleu.score,
                "test_chrf": corpus_chrf(hypotheses, references).score,
                "bleu_signature": bleu.signature,
                "test_sentences": len(references),
                "decode": "greedy",
            }
        )
        if evaluation.get("bleu_resamples"):
            interval = bleu_interval(
                hypotheses, references, resamples=evaluation["bleu_resamples"], seed=0
            )
            metrics.update({"test_bleu_low": interval.low, "test_bleu_high": interval.high})
        samples = {"reference": references[:3], "hypothesis": hypotheses[:3]}
    else:
        split = "test" if "test" in splits else "valid"  # Tiny Shakespeare has no test split
        batches = evaluation.get("eval_batches")
        result = evaluate(
            model, splits[split], pad, max_batches=batches, precision=train_config.precision
        )
        metrics.update(
            {
                f"{split}_loss": result["loss"],
                f"{split}_bits_per_char": result["loss"] / math.log(2),
                f"{split}_accuracy": result["accuracy"],
                f"{split}_last_position_loss": last_position_loss(model, splits[split], batches),
                f"{split}_tokens": result["tokens"],
            }
        )
    return {"metrics": metrics, "history": history, "samples": samples, "device": trainer.device}


# ---------------------------------------------------------------------------------------------
# Running a study


def resolve_profile(profile: str = "auto") -> tuple[str, str]:
    """``(profile, why)``: ``auto`` is ``gpu`` when CUDA is available, else ``smoke``."""
    if profile == "auto":
        if torch.cuda.is_available():
            return "gpu", f"profile='auto' and CUDA is available ({torch.cuda.get_device_name(0)})"
        return "smoke", "profile='auto' and no CUDA device: the smoke profile (seconds per run)"
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not one of: auto, {', '.join(PROFILES)}")
    return profile, f"profile={profile!r} was asked for"


def resolve_jobs(jobs: int | str = "auto", runs: int = 1, device: str = "auto") -> int:
    """Runs at once: ``auto`` is 4 on a CUDA device (small runs share one GPU well), 1 on a CPU
    (one run already uses every core)."""
    if isinstance(jobs, str) and jobs.isdigit():
        jobs = int(jobs)
    if jobs == "auto":
        cuda = device != "cpu" and torch.cuda.is_available()
        jobs = 4 if cuda else 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} is not accepted: use 'auto' or a positive integer")
    return max(1, min(jobs, runs))


def default_store(profile: str, root: str | os.PathLike = "results") -> ResultsStore:
    """``results/ablation`` for real profiles; ``results/smoke/ablation`` (git-ignored) for smoke."""
    root = Path(root)
    return ResultsStore(root / "smoke" / "ablation" if profile == "smoke" else root / "ablation")


def _training_part(config: dict[str, Any]) -> dict[str, Any]:
    # What decides the numbers; the study and variant names only say why a run was made.
    return {
        key: value
        for key, value in config.items()
        if key not in ("study", "variant", "factors", "baseline")
    }


def _worker_setup(threads: int) -> None:
    torch.set_num_threads(threads)


def _run_in_worker(root: str, config: dict[str, Any], device: str) -> dict[str, Any]:
    store = ResultsStore(root)
    return run_or_load(store, config, functools.partial(train_run, device=device), rerun=True)


def run_study(
    study: str = "heads",
    task: str = "multi30k",
    seeds: int | str | Sequence[int] = 3,
    profile: str = "auto",
    overrides: dict[str, Any] | str | None = None,
    jobs: int | str = "auto",
    rerun: bool = False,
    device: str = "auto",
    store: ResultsStore | None = None,
    budget_s: float | None = None,
    log: Callable[[str], None] | None = print,
) -> list[dict[str, Any]]:
    """The records of every run of a study: stored ones loaded, missing ones trained and saved.

    ``jobs > 1`` trains that many runs at once in worker processes (``spawn``: safe with CUDA);
    each worker saves its record as soon as its run ends, so an interrupted study loses at most
    the runs under way, and calling again trains only what is missing. A run with the same
    training config stored by another study (a shared baseline) is reused, not trained again.
    ``budget_s``: start no new run after that many seconds (the rest stays missing, for the
    next call). ``rerun=True`` trains every run again.
    """
    say = log or (lambda message: None)
    profile, why = resolve_profile(profile)
    configs = run_configs(study, task, seeds, profile, overrides)
    store = store or default_store(profile)
    started = time.perf_counter()
    records: dict[str, dict[str, Any]] = {}
    missing = []
    shared = {} if rerun else {run_key(_training_part(r["config"])): r for r in store.records()}
    for config in configs:
        key = run_key(config)
        if store.exists(key) and not rerun:
            records[key] = store.load(key)
            continue
        twin = shared.get(run_key(_training_part(config)))
        if twin is not None:  # the same run, stored under another study's name
            store.save(key, {**{k: twin[k] for k in twin if k != "key"}, "config": config})
            records[key] = store.load(key)
            continue
        missing.append(config)
    jobs = resolve_jobs(jobs, len(missing), device)
    say(
        f"study={study}, task={task}, {why}; {len(configs)} runs: {len(records)} stored, "
        f"{len(missing)} to train" + (f", {jobs} at a time" if missing else "")
    )

    def done(record: dict[str, Any]) -> None:
        records[record["key"]] = record
        wall = record["provenance"]["wall_time_s"]
        say(
            f"  [{len(records)}/{len(configs)}] {record['config']['variant']} seed "
            f"{record['config']['seed']}: {_headline(record)} ({wall:.1f} s)"
        )

    def over_budget() -> bool:
        return budget_s is not None and time.perf_counter() - started > budget_s

    failures: list[str] = []
    if jobs == 1:
        for config in missing:
            if over_budget():
                break
            done(run_or_load(store, config, functools.partial(train_run, device=device), True))
    elif missing:
        import multiprocessing

        threads = max(1, (os.cpu_count() or 1) // jobs)
        pending = list(missing)
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_setup,
            initargs=(threads,),
        ) as pool:
            running = set()
            while pending or running:
                while pending and len(running) < jobs and not over_budget():
                    running.add(
                        pool.submit(_run_in_worker, str(store.root), pending.pop(0), device)
                    )
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        done(future.result())
                    except Exception as error:  # one failed run must not stop the others
                        failures.append(repr(error))
                        say(f"  FAILED: {error!r}")
    if failures:
        raise RuntimeError(
            f"{len(failures)} runs failed (the others are saved): " + "; ".join(failures)
        )
    left = len(configs) - len(records)
    if left:
        say(f"  {left} runs not trained (budget_s={budget_s} reached): call again to continue")
    return [records[run_key(config)] for config in configs if run_key(config) in records]


def _headline(record: dict[str, Any]) -> str:
    metrics = record["metrics"]
    if metrics.get("diverged"):
        return f"diverged at update {metrics['diverged_at']}"
    shown = [name for name in ("test_bleu", "test_loss", "valid_loss") if name in metrics]
    return ", ".join(f"{name} {metrics[name]:.3f}" for name in shown)


# ---------------------------------------------------------------------------------------------
# Analysis (pure functions of records)


def default_metric(task: str) -> tuple[str, bool]:
    """``(metric, higher_is_better)``: test BLEU for translation, validation loss for an LM."""
    return ("test_bleu", True) if task_kind(task) == "translation" else ("valid_loss", False)


def variant_values(records: Iterable[dict[str, Any]], metric: str) -> dict[str, list[float]]:
    """Variant label -> the metric of each of its runs (in record order; diverged runs skipped)."""
    values: dict[str, list[float]] = {}
    for record in records:
        label = record["config"]["variant"]
        values.setdefault(label, [])
        value = record["metrics"].get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            values[label].append(float(value))
    return values


def welch_test(first: Sequence[float], second: Sequence[float]) -> dict[str, float]:
    """Welch's t-test of ``mean(second) - mean(first)``, two-sided.

    The degrees of freedom (Welch-Satterthwaite) are rounded down to an integer for
    :func:`~annotated_transformer.metrics.t_cdf`: a slightly conservative test.
    """
    if len(first) < 2 or len(second) < 2:
        raise ValueError("Welch's test needs at least 2 values on each side")
    difference = mean(second) - mean(first)
    var_first, var_second = stdev(first) ** 2 / len(first), stdev(second) ** 2 / len(second)
    standard_error = math.sqrt(var_first + var_second)
    if standard_error == 0:
        return {
            "difference": difference,
            "t": math.inf if difference else 0.0,
            "df": math.inf,
            "p_value": 0.0 if difference else 1.0,
        }
    t = difference / standard_error
    df = (var_first + var_second) ** 2 / (
        var_first**2 / (len(first) - 1) + var_second**2 / (len(second) - 1)
    )
    p_value = 2 * (1 - t_cdf(abs(t), max(1, math.floor(df))))
    return {"difference": difference, "t": t, "df": df, "p_value": p_value}


def judge(
    baseline: Sequence[float], variant: Sequence[float], alpha: float = 0.05
) -> dict[str, Any]:
    """Is ``variant`` different from ``baseline`` beyond the seed-to-seed noise?

    ``verdict``: ``"differs"`` (Welch p < alpha), ``"within noise"``, or ``"cannot judge"`` when
    either side has fewer than 2 runs (one run has no spread to compare with).
    """
    if len(baseline) < 2 or len(variant) < 2:
        difference = mean(variant) - mean(baseline) if baseline and variant else math.nan
        return {"difference": difference, "p_value": math.nan, "verdict": "cannot judge"}
    test = welch_test(baseline, variant)
    verdict = "differs" if test["p_value"] < alpha else "within noise"
    return {"difference": test["difference"], "p_value": test["p_value"], "verdict": verdict}


def summarize(
    records: Sequence[dict[str, Any]], metric: str, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """One row per variant: n, mean, std, t interval, min, max, and the difference to the
    baseline variant with :func:`judge`'s verdict."""
    values = variant_values(records, metric)
    factors = {r["config"]["variant"]: r["config"]["factors"] for r in records}
    baselines = {r["config"]["variant"] for r in records if r["config"].get("baseline")}
    baseline = values.get(next(iter(baselines))) if baselines else None
    diverged: dict[str, int] = {}
    for record in records:
        if record["metrics"].get("diverged"):
            label = record["config"]["variant"]
            diverged[label] = diverged.get(label, 0) + 1
    rows = []
    for label, runs in values.items():
        row: dict[str, Any] = {"variant": label, **factors[label], "n": len(runs)}
        if runs:
            interval = mean_interval(runs, confidence)
            row.update(
                {
                    "mean": interval.estimate,
                    "std": stdev(runs) if len(runs) > 1 else math.nan,
                    "ci_low": interval.low,
                    "ci_high": interval.high,
                    "min": min(runs),
                    "max": max(runs),
                }
            )
        row["diverged"] = diverged.get(label, 0)
        row["baseline"] = label in baselines
        if baseline is not None and runs and label not in baselines:
            verdict = judge(baseline, runs)
            row.update({"vs_baseline": verdict["difference"], "p_value": verdict["p_value"]})
            row["verdict"] = verdict["verdict"]
        rows.append(row)
    return rows


def rank(
    summary: Sequence[dict[str, Any]], higher_is_better: bool, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """The summary rows best first, numbered. ``overlaps_best``: whether a row's t interval
    overlaps the best row's, a quick sign that the order of the two is not settled (the
    ``verdict`` column of :func:`summarize` is the test against the baseline)."""
    scored = [row for row in summary if "mean" in row]
    ordered = sorted(scored, key=lambda row: row["mean"], reverse=higher_is_better)
    ranked = []
    for place, row in enumerate(ordered, 1):
        best = ordered[0]
        overlap = not (math.isnan(row["ci_low"]) or math.isnan(best["ci_low"])) and (
            row["ci_low"] <= best["ci_high"] and best["ci_low"] <= row["ci_high"]
        )
        ranked.append({"rank": place, **row, "overlaps_best": overlap if place > 1 else True})
    return ranked


def main_effects(records: Sequence[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Per factor and level, over every run at that level: n, mean, std, min, max, and the
    ``effect``, the level's mean minus the grand mean (in a balanced design the other factors
    average out). For two-level factors ``difference`` is the second level's mean minus the
    first's, the classic main effect."""
    usable = [
        r
        for r in records
        if isinstance(r["metrics"].get(metric), (int, float)) and not r["metrics"].get("diverged")
    ]
    if not usable:
        return []
    grand = mean(float(r["metrics"][metric]) for r in usable)
    rows = []
    for factor in usable[0]["config"]["factors"]:
        levels: dict[str, list[float]] = {}
        for record in usable:
            level = record["config"]["factors"][factor]
            levels.setdefault(level, []).append(float(record["metrics"][metric]))
        means = [mean(values) for values in levels.values()]
        for (level, values), level_mean in zip(levels.items(), means, strict=True):
            rows.append(
                {
                    "factor": factor,
                    "level": level,
                    "n": len(values),
                    "mean": level_mean,
                    "std": stdev(values) if len(values) > 1 else math.nan,
                    "min": min(values),
                    "max": max(values),
                    "effect": level_mean - grand,
                    "difference": means[1] - means[0] if len(means) == 2 else math.nan,
                }
            )
    return rows


def interaction(
    records: Sequence[dict[str, Any]], metric: str, first: str, second: str
) -> dict[str, Any]:
    """Mean of ``metric`` for each pair of levels of factors ``first`` (rows) and ``second``
    (columns). For two levels each, ``interaction`` is the difference of differences,
    ``(m11 - m10) - (m01 - m00)``: how much the effect of ``second`` changes when ``first``
    changes (0: no interaction, the effects add)."""
    cells: dict[tuple[str, str], list[float]] = {}
    rows, columns = [], []
    for record in records:
        value = record["metrics"].get(metric)
        if not isinstance(value, (int, float)) or record["metrics"].get("diverged"):
            continue
        a, b = record["config"]["factors"][first], record["config"]["factors"][second]
        rows += [a] if a not in rows else []
        columns += [b] if b not in columns else []
        cells.setdefault((a, b), []).append(float(value))
    means = [[mean(cells[(a, b)]) if (a, b) in cells else math.nan for b in columns] for a in rows]
    contrast = math.nan
    if len(rows) == 2 and len(columns) == 2:
        contrast = (means[1][1] - means[1][0]) - (means[0][1] - means[0][0])
    return {"rows": rows, "columns": columns, "means": means, "interaction": contrast}


def curves(records: Sequence[dict[str, Any]], key: str = "eval_loss") -> dict[str, dict[str, list]]:
    """Variant -> ``{"step", "mean", "std", "n"}`` of history column ``key`` over its seeds, at
    the steps every seed logged it."""
    by_variant: dict[str, list[dict[int, float]]] = {}
    for record in records:
        points = {row["step"]: float(row[key]) for row in record["history"] if key in row}
        by_variant.setdefault(record["config"]["variant"], []).append(points)
    result = {}
    for label, runs in by_variant.items():
        steps = sorted(set.intersection(*(set(points) for points in runs)))
        values = [[points[step] for points in runs] for step in steps]
        result[label] = {
            "step": steps,
            "mean": [mean(column) for column in values],
            "std": [stdev(column) if len(column) > 1 else 0.0 for column in values],
            "n": len(runs),
        }
    return result


# -- Vaswani et al. 2017, Table 3 ------------------------------------------------------------

# English-German newstest2013 (dev): per-wordpiece perplexity and BLEU (beam search, no checkpoint
# averaging). One training run per row. Rows not listed change nothing else of the base model.
VASWANI_TABLE3: dict[str, dict[str, Any]] = {
    "base": {
        "row": "base",
        "change": "N=6, d_model=512, d_ff=2048, h=8, d_k=64, P_drop=0.1, eps_ls=0.1",
        "ppl": 4.92,
        "bleu": 25.8,
    },
    "h=1": {"row": "A", "change": "h=1, d_k=d_v=512", "ppl": 5.29, "bleu": 24.9},
    "h=4": {"row": "A", "change": "h=4, d_k=d_v=128", "ppl": 5.00, "bleu": 25.5},
    "h=16": {"row": "A", "change": "h=16, d_k=d_v=32", "ppl": 4.91, "bleu": 25.8},
    "h=32": {"row": "A", "change": "h=32, d_k=d_v=16", "ppl": 5.01, "bleu": 25.4},
    "d_k=16": {"row": "B", "change": "d_k=16", "ppl": 5.16, "bleu": 25.1},
    "d_k=32": {"row": "B", "change": "d_k=32", "ppl": 5.01, "bleu": 25.4},
    "N=2": {"row": "C", "change": "N=2", "ppl": 6.11, "bleu": 23.7},
    "N=4": {"row": "C", "change": "N=4", "ppl": 5.19, "bleu": 25.3},
    "N=8": {"row": "C", "change": "N=8", "ppl": 4.88, "bleu": 25.5},
    "d_model=256": {"row": "C", "change": "d_model=256, d_k=d_v=32", "ppl": 5.75, "bleu": 24.5},
    "d_model=1024": {"row": "C", "change": "d_model=1024, d_k=d_v=128", "ppl": 4.66, "bleu": 26.0},
    "d_ff=1024": {"row": "C", "change": "d_ff=1024", "ppl": 5.12, "bleu": 25.4},
    "d_ff=4096": {"row": "C", "change": "d_ff=4096", "ppl": 4.75, "bleu": 26.2},
    "P_drop=0.0": {"row": "D", "change": "P_drop=0.0", "ppl": 5.77, "bleu": 24.6},
    "P_drop=0.2": {"row": "D", "change": "P_drop=0.2", "ppl": 4.95, "bleu": 25.5},
    "eps_ls=0.0": {"row": "D", "change": "eps_ls=0.0", "ppl": 4.67, "bleu": 25.3},
    "eps_ls=0.2": {"row": "D", "change": "eps_ls=0.2", "ppl": 5.47, "bleu": 25.7},
    "learned": {"row": "E", "change": "learned positional embedding", "ppl": 4.92, "bleu": 25.7},
}
# Differences this small are the last printed digit of a single run: "no clear change".
PAPER_TOLERANCE = {"bleu": 0.1, "ppl": 0.03}


@dataclass(frozen=True)
class Trend:
    """A comparison of Table 3 (``paper``: a row, against the base) and ours (``ours``: a variant
    of ``study``, against ``baseline``); ``study=None``: not measurable with this model."""

    name: str
    paper: str
    study: str | None
    baseline: str = ""
    ours: str = ""
    note: str = ""


TRENDS = (
    Trend("1 head instead of 8", "h=1", "heads", "8", "1"),
    Trend("4 heads instead of 8", "h=4", "heads", "8", "4"),
    Trend("16 heads instead of 8", "h=16", "heads", "8", "16"),
    Trend(
        "smaller key size d_k at fixed h",
        "d_k=16",
        None,
        note="not measured: our d_k is always d_model / h (the heads study changes both)",
    ),
    Trend("fewer layers (paper 6 -> 2, ours 3 -> 1)", "N=2", "depth", "3", "1"),
    Trend("fewer layers (paper 6 -> 4, ours 3 -> 2)", "N=4", "depth", "3", "2"),
    Trend("more layers (paper 6 -> 8, ours 3 -> 6)", "N=8", "depth", "3", "6"),
    Trend("half the width", "d_model=256", "width", "1x", "0.5x"),
    Trend("twice the width", "d_model=1024", "width", "1x", "2x"),
    Trend("no dropout", "P_drop=0.0", "dropout", "0.1", "0.0"),
    Trend("more dropout (0.2)", "P_drop=0.2", "dropout", "0.1", "0.2"),
    Trend("no label smoothing", "eps_ls=0.0", "label_smoothing", "0.1", "0.0"),
    Trend("more label smoothing (0.2)", "eps_ls=0.2", "label_smoothing", "0.1", "0.2"),
    Trend(
        "learned instead of sinusoidal positions", "learned", "positional", "sinusoidal", "learned"
    ),
)


def paper_direction(trend: Trend, measure: str) -> tuple[float, str]:
    """``(change, direction)`` of Table 3's ``measure`` (``"bleu"`` or ``"ppl"``) from the base to
    the trend's row; the direction is in quality: better, worse, or same (within the tolerance)."""
    change = VASWANI_TABLE3[trend.paper][measure] - VASWANI_TABLE3["base"][measure]
    if abs(change) <= PAPER_TOLERANCE[measure] + 1e-9:
        return change, "same"
    better = change > 0 if measure == "bleu" else change < 0
    return change, "better" if better else "worse"


def vaswani_comparison(
    records: Sequence[dict[str, Any]],
    metric: str,
    higher_is_better: bool,
    alpha: float = 0.05,
) -> list[dict[str, Any]]:
    """For each trend of Table 3: the paper's direction, ours (from ``records``, any studies),
    and the verdict: ``agrees``, ``disagrees``, ``within noise`` (ours is not beyond seed noise
    while the paper saw a change), ``cannot judge`` (fewer than 2 runs), or ``not run``.

    BLEU metrics are compared with the paper's BLEU, losses with its perplexity (a loss is the
    log of a perplexity, so they move together).
    """
    measure = "bleu" if "bleu" in metric else "ppl"
    by_study: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_study.setdefault(record["config"]["study"], []).append(record)
    rows = []
    for trend in TRENDS:
        change, paper = paper_direction(trend, measure)
        row = {
            "trend": trend.name,
            "table3_row": VASWANI_TABLE3[trend.paper]["row"],
            "paper_change": change,
            "paper": paper,
        }
        values = variant_values(by_study.get(trend.study, []), metric) if trend.study else {}
        base, ours = values.get(trend.baseline, []), values.get(trend.ours, [])
        if not base or not ours:
            row.update({"ours_change": math.nan, "p_value": math.nan, "ours": "not run"})
            row["verdict"] = "not run"
            row["note"] = trend.note or f"run: -p study {trend.study}"
            rows.append(row)
            continue
        verdict = judge(base, ours, alpha)
        difference = verdict["difference"]
        direction = (
            "same"
            if verdict["verdict"] != "differs"
            else ("better" if (difference > 0) == higher_is_better else "worse")
        )
        row.update({"ours_change": difference, "p_value": verdict["p_value"], "ours": direction})
        if verdict["verdict"] == "cannot judge":
            row["verdict"], row["note"] = "cannot judge", "fewer than 2 runs on a side"
        elif direction == "same":
            agree = paper == "same"
            row["verdict"] = "agrees" if agree else "within noise"
            row["note"] = (
                "no clear change in either" if agree else "our difference is within seed noise"
            )
        else:
            row["verdict"] = "agrees" if direction == paper else "disagrees"
            row["note"] = (
                "the paper saw no clear change"
                if paper == "same"
                else f"paper {paper}, ours {direction}"
            )
        rows.append(row)
    return rows


# -- Provenance and files --------------------------------------------------------------------


def describe(records: Sequence[dict[str, Any]]) -> str:
    """Which profile(s), device(s), commits and dates produced ``records``: the line that goes
    next to every table and figure. Smoke records are flagged as not being results."""
    if not records:
        return "no records"
    profiles = sorted({r["config"]["profile"] for r in records})
    devices = sorted({r["provenance"]["device"] for r in records})
    commits = sorted(
        {
            r["provenance"]["git_commit"][:8]
            + ("+dirty" if r["provenance"].get("git_dirty") else "")
            for r in records
        }
    )
    dates = sorted(r["provenance"]["date"][:10] for r in records)
    text = (
        f"{len(records)} runs; profile {', '.join(profiles)}; device {'; '.join(devices)}; "
        f"commit {', '.join(commits)}; {dates[0]}"
        + (f" to {dates[-1]}" if dates[-1] != dates[0] else "")
    )
    if "smoke" in profiles:
        text = "SMOKE RUN: proves the pipeline works, not a result. " + text
    return text


def save_tables(
    records: Sequence[dict[str, Any]],
    store: ResultsStore,
    metric: str,
    higher_is_better: bool,
) -> dict[str, Path]:
    """Write the summary (CSV) and every table (JSON) of one study's records, atomically, as
    ``<store>/summaries/<task>-<study>-<profile>.{csv,json}`` (a subfolder: the store reads
    only records from its root)."""
    config = records[0]["config"]
    name = f"{config['task']}-{config['study']}-{config['profile']}"
    folder = store.root / "summaries"
    summary = summarize(records, metric)
    tables = {
        "metric": metric,
        "higher_is_better": higher_is_better,
        "provenance": describe(records),
        "summary": summary,
        "ranking": rank(summary, higher_is_better),
        "main_effects": main_effects(records, metric),
        "vaswani_comparison": vaswani_comparison(records, metric, higher_is_better),
    }
    factors = list(config["factors"])
    tables["interactions"] = [
        {"first": a, "second": b, **interaction(records, metric, a, b)}
        for i, a in enumerate(factors)
        for b in factors[i + 1 :]
    ]
    columns: list[str] = []
    for row in summary:
        columns += [key for key in row if key not in columns]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(summary)
    paths = {
        "csv": atomic_write_text(folder / f"{name}.csv", text.getvalue()),
        "json": atomic_write_text(
            folder / f"{name}.json",
            json.dumps(_json_safe(tables), indent=1, allow_nan=False) + "\n",
        ),
    }
    return paths


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
