"""The ``train`` command's settings: what ``--set`` and ``--config`` may address, how they resolve
over a profile, and the list ``train --help`` prints.

Settings, later ones winning: the dataclasses' defaults, the task's defaults, the profile's run
size, the ``--config`` file, ``--set KEY=VALUE``; :mod:`annotated_transformer.settings` routes
each KEY to the model, train or data section.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import FIELD_CHOICES, TrainConfig, TransformerConfig
from .profiles import run_size
from .settings import dataclass_defaults, describe_fields, flatten, parse_assignment
from .settings import route as route_settings
from .task_options import KIND_OPTIONS, TASKS, task_spec

SECTIONS = ("model", "train", "data")


def train_fields(task: str) -> dict[str, dict[str, Any]]:
    """What ``--set`` may address for ``task``: section -> field -> default."""
    return {
        "model": dataclass_defaults(TransformerConfig),
        "train": dataclass_defaults(TrainConfig),
        "data": task_spec(task).defaults,
    }


def resolve_settings(
    task: str,
    file_settings: dict[str, Any],
    assignments: list[str],
    profile: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The profile's run size, then the config file's and ``--set``'s keys (later ones win),
    routed to the model, train and data sections."""
    base = {} if profile is None else run_size(profile, task)
    base = {section: base[section] for section in SECTIONS if section in base}
    pairs = flatten(base, SECTIONS) + flatten(file_settings, SECTIONS)
    pairs += [parse_assignment(item) for item in assignments]
    return route_settings(pairs, train_fields(task))


def settings_help() -> str:
    """``train --help``'s list of every KEY: the model's and the training run's fields and each
    kind of task's options, with type, default and choices."""
    model = describe_fields(TransformerConfig, FIELD_CHOICES)
    train = describe_fields(TrainConfig, FIELD_CHOICES)
    lines = ["model settings (model.KEY, TransformerConfig; a task's defaults replace some):"]
    lines += [f"  {line}" for line in model]
    lines += ["", "training settings (train.KEY, TrainConfig):"]
    lines += [f"  {line}" for line in train]
    for kind, options in KIND_OPTIONS.items():
        names = ", ".join(name for name, spec in sorted(TASKS.items()) if spec.kind == kind)
        lines += ["", f"task options (data.KEY) of {names}:"]
        width = max(len(name) for name in options)
        lines += [
            f"  {name:<{width}}  {rule}, default {json.dumps(default)}"
            for name, (default, rule) in options.items()
        ]
    return "\n".join(lines)
