"""Profiles and configs: one validated, JSON-safe config per variant and seed.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ..config import TrainConfig, TransformerConfig, is_int
from ..tasks.profiles import ABLATION, check_evaluation, run_size
from ..tasks.settings import parse_json_object, resolve_key
from ..tasks.task_options import check_options
from .studies import RUNNER_FIELDS, TASK_FIELDS, Scale, get_study, task_kind

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

# The run sizes per profile and task live in annotated_transformer.profiles (ABLATION).
PROFILES = ABLATION

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
    """User overrides as ``{"section.field": value}``, validated by the settings router.

    ``overrides`` is a dict or its JSON text (what ``papermill -p overrides '{...}'`` passes).
    A bare field name (``"max_steps"``) is accepted when exactly one section has it. An unknown
    field is a ``ValueError`` naming it and listing the accepted ones.
    """
    fields = {section: dict.fromkeys(names) for section, names in accepted_fields(kind).items()}
    parsed = {}
    for name, value in parse_json_object(overrides).items():
        section, field_name = resolve_key(str(name), fields)
        parsed[f"{section}.{field_name}"] = value
    return parsed


def parse_seeds(seeds: int | str | Sequence[int]) -> list[int]:
    """``3`` -> ``[0, 1, 2]``; ``"3,4"`` or ``[3, 4]`` -> those seeds."""
    given = seeds
    if isinstance(seeds, bool):
        raise ValueError(f"seeds={seeds!r} is not accepted: use a count or a list of seeds")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds={seeds} is not accepted: use at least 1")
        return list(range(seeds))
    if isinstance(seeds, str):
        parts = [part for part in seeds.replace(" ", "").split(",") if part]
        if not all(part.isdigit() for part in parts):
            raise ValueError(
                f"seeds={seeds!r} is not accepted: use a count (3) or distinct integers >= 0 "
                f"separated by commas ('3,4')"
            )
        seeds = [int(part) for part in parts]
    chosen = list(seeds)
    if (
        not chosen
        or not all(is_int(seed) and seed >= 0 for seed in chosen)
        or len(set(chosen)) != len(chosen)
    ):
        raise ValueError(f"seeds={given!r} is not accepted: use distinct integers >= 0")
    return chosen


def _apply(sections: dict[str, dict[str, Any]], overrides: dict[str, Any]) -> None:
    for name, value in overrides.items():
        section, field_name = name.split(".", 1)
        if isinstance(value, Scale):
            value = value.of(sections[section][value.source or field_name])
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


def _sections(
    kind: str, settings: dict[str, Any], *overrides: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The base, then the profile's size, then each of ``overrides`` in turn, resolved."""
    sections = {
        "model": {
            "arch": "encoder-decoder" if kind == "translation" else "decoder-only",
            **BASE["model"],
            **settings["model"],
        },
        "train": {**BASE["train"], **settings["train"]},
        "data": dict(settings["data"]),
        "evaluation": {"decode": "greedy", **settings["evaluation"]},
    }
    for chosen in overrides:
        _apply(sections, chosen)
    _finish(sections, kind)
    return sections


def baseline_variant(study: str, task: str, profile: str) -> str:
    """The label of the study's baseline under ``profile``: the one variant that trains the
    profile's own base model (the heads study's ``8`` where the base has 8 heads; the dropout
    study's ``0.0`` under a profile without dropout), else the study's declared baseline (when
    no variant, or several, equal the base: Table 3's ``base`` and ``P_drop=0.0`` both do under
    a profile without dropout)."""
    chosen, kind = get_study(study), task_kind(task)
    settings = run_size(profile, task, "ablation")
    base = _sections(kind, settings)
    equal = [
        v.label for v in chosen.variants(kind) if _sections(kind, settings, v.overrides) == base
    ]
    return equal[0] if len(equal) == 1 else chosen.baseline_label(kind)


def run_configs(
    study: str,
    task: str,
    seeds: int | str | Sequence[int] = 3,
    profile: str = "smoke",
    overrides: dict[str, Any] | str | None = None,
) -> list[dict[str, Any]]:
    """One config per (variant, seed), JSON-safe and complete: what :func:`train_run` trains.

    Order: base, then the profile, then the variant's levels, then the user's overrides. The
    baseline is :func:`baseline_variant`'s.
    """
    chosen = get_study(study)
    kind = task_kind(task)
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not one of: {', '.join(PROFILES)}")
    user = parse_overrides(overrides, kind)
    settings = run_size(profile, task, "ablation")
    baseline = baseline_variant(study, task, profile)
    configs = []
    for variant in chosen.variants(kind):
        sections = _sections(kind, settings, variant.overrides, user)
        check_evaluation(sections["evaluation"])
        check_options(task, sections["data"])
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
                    "baseline": variant.label == baseline,
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
    elif task.info.source_eos:  # a translation task read by one stack: source + target
        fields["max_len"] = 2 * defaults["max_len"]
    return fields


def build_configs(
    config: dict[str, Any],
    fields: dict[str, Any],
    device: str = "auto",
    checkpoint_dir: str | None = None,
    save_every: int | None = None,
) -> tuple[TransformerConfig, TrainConfig]:
    """The validated configs of run ``config``, with the task's ``fields`` (:func:`task_fields`)
    and the runner's ``checkpoint_dir`` and ``save_every`` (where and how often the run keeps
    ``last.pt``; neither changes a number)."""
    model = TransformerConfig(**{**fields, **config["model"]})
    train = TrainConfig(
        **{**config["train"], "betas": tuple(config["train"].get("betas", (0.9, 0.98)))},
        seed=config["seed"],
        device=device,
        progress=False,
        checkpoint_dir=checkpoint_dir,
        save_every=save_every,
    )
    return model, train
