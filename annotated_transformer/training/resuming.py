"""What may differ between a checkpoint and the run that resumes it (chapter 08).

A resumed run must be the run that was saved, continued: same model, same data, same seed, same
optimizer. :func:`resume_changes` compares everything that defines a run (the model config, the
train config, the task's info and options, the tokenizer) between a checkpoint and the new run
and refuses any difference with one :class:`ResumeMismatch` that lists them all, unless the field
is named in ``allow_changes`` and is one of :data:`CHANGEABLE_ON_RESUME`.

The train config's fields fall into three groups:

- :data:`IGNORED_ON_RESUME` never change what is computed, only where files go and what is
  shown: ``checkpoint_dir`` (a run directory may be moved), ``log_every`` (the history's rows and
  when the host reads the loss; the weights are the same), ``progress`` (the bar),
  ``keep_evaluations`` (how many evaluation snapshots stay on disk for averaging).
- :data:`CHANGEABLE_ON_RESUME` may change when asked for by name: how long to train
  (``max_steps``), the learning-rate schedule (``lr``, ``min_lr``, ``warmup``, ``noam_factor``,
  ``schedule``; the new schedule is evaluated at the resumed step), ``weight_decay``,
  ``grad_clip``, ``label_smoothing``, the evaluation and saving rhythm (``eval_every``,
  ``eval_batches``, ``save_every``, ``early_stopping_patience``) and the hardware
  (``device``, ``precision``, ``compile``).
- Every other field never changes on resume: ``seed``, ``optimizer``, ``betas``, ``eps`` (the
  optimizer state means something else under other ones), ``accumulation`` (what an update is),
  ``early_stopping_metric`` and ``early_stopping_mode`` (the best value so far would compare
  other things). Neither do the model's fields, the task's options or the tokenizer.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from typing import Any

from ..config import TrainConfig
from .checkpoint import (
    CheckpointError,
    check_entries,
    first_non_finite,
    load_checkpoint,
    model_config_from,
)

IGNORED_ON_RESUME = ("checkpoint_dir", "log_every", "progress", "keep_evaluations")
CHANGEABLE_ON_RESUME = (
    "max_steps",
    "lr",
    "min_lr",
    "warmup",
    "noam_factor",
    "schedule",
    "weight_decay",
    "grad_clip",
    "label_smoothing",
    "eval_every",
    "eval_batches",
    "save_every",
    "early_stopping_patience",
    "device",
    "precision",
    "compile",
)


RESUME_ENTRIES = {  # what a checkpoint needs to be resumed from, and of what type
    "step": int,
    "epoch": int,
    "batch_index": int,
    "model_config": dict,
    "train_config": dict,
    "model": dict,
    "optimizer": dict,
    "scheduler": dict,
    "rng": list,
    "history": list,
    "early_stopping": dict,
}


class ResumeMismatch(ValueError):
    """A checkpoint was saved by a run that differs from the one resuming it.

    ``differences`` holds ``(field, checkpoint value, new value)`` for each difference.
    """

    def __init__(self, message: str, differences: list[tuple[str, Any, Any]]) -> None:
        super().__init__(message)
        self.differences = differences


def check_allow_changes(allow_changes: Iterable[str]) -> set[str]:
    """The train-config fields named in ``allow_changes`` (``"lr"`` or ``"train.lr"``); a name
    that is not a field, or a field that may not change on resume, is a ValueError."""
    if isinstance(allow_changes, str):
        allow_changes = [allow_changes]
    names = {name.removeprefix("train.") for name in allow_changes}
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    unknown = sorted(names - fields)
    fixed = sorted((names & fields) - set(CHANGEABLE_ON_RESUME) - set(IGNORED_ON_RESUME))
    if unknown or fixed:
        problems = [f"{name!r} is not a TrainConfig field" for name in unknown]
        problems += [f"{name!r} may not change on resume" for name in fixed]
        raise ValueError(
            f"allow_changes: {'; '.join(problems)}. Fields that may change: "
            f"{', '.join(CHANGEABLE_ON_RESUME)}"
        )
    return names


def flatten(section: str, value: Any) -> dict[str, Any]:
    """``{"task.options.size": 3, ...}``: nested dicts as dotted names, other values as leaves."""
    if isinstance(value, dict):  # an empty dict has no leaves
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(f"{section}.{key}", item))
        return flat
    return {section: value}


def run_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, current value)`` for every field that differs, in order.

    ``saved`` and ``current`` map a section (``model``, ``train``, ``task``) to a dict of values;
    the ``tokenizer`` section is compared as one value (a vocabulary is too long to list).
    Missing fields read as ``<absent>``.
    """
    absent = "<absent>"
    differences = []
    for section in saved.keys() | current.keys():
        if section == "tokenizer":
            if saved.get(section) != current.get(section):
                differences.append(("tokenizer", "<the checkpoint's>", "<another tokenizer>"))
            continue
        old, new = (
            flatten(section, saved.get(section, {})),
            flatten(section, current.get(section, {})),
        )
        for name in [*old, *(key for key in new if key not in old)]:
            if section == "train" and name.removeprefix("train.") in IGNORED_ON_RESUME:
                continue
            before, after = old.get(name, absent), new.get(name, absent)
            if before != after:
                differences.append((name, before, after))
    order = {"model": 0, "train": 1, "task": 2, "tokenizer": 3}
    return sorted(differences, key=lambda item: order.get(item[0].split(".")[0], 4))


def resume_changes(
    path: object,
    saved: dict[str, Any],
    current: dict[str, Any],
    allow_changes: Iterable[str] = (),
) -> list[tuple[str, Any, Any]]:
    """The differences between ``saved`` and ``current`` (see :func:`run_differences`) that
    ``allow_changes`` allows; any other difference raises one :class:`ResumeMismatch` naming
    ``path`` and listing every difference as ``field: checkpoint value -> new value``."""
    allowed = check_allow_changes(allow_changes)
    differences = run_differences(saved, current)
    refused = [
        item
        for item in differences
        if item[0].removeprefix("train.") not in allowed or not item[0].startswith("train.")
    ]
    if not refused:
        return differences
    lines = []
    for name, before, after in differences:
        field = name.removeprefix("train.")
        if name.startswith("train.") and field in allowed:
            note = "allowed"
        elif name.startswith("train.") and field in CHANGEABLE_ON_RESUME:
            note = (
                f"may change: pass --allow-change train.{field} on the command line, or "
                f"allow_changes=['train.{field}'] in Python, to apply it"
            )
        else:
            note = "may not change on resume"
        change = (
            "differs from the checkpoint's" if name == "tokenizer" else f"{before!r} -> {after!r}"
        )
        lines.append(f"  {name}: {change} ({note})")
    raise ResumeMismatch(
        f"{path} was saved by a run with other settings; resuming would not continue that run. "
        f"{len(refused)} of {len(differences)} differences refused:\n" + "\n".join(lines),
        differences,
    )


def read_resume_state(
    path: str | os.PathLike,
    current: dict[str, Any],
    allow_changes: Iterable[str] = (),
    read_task: Callable[[dict[str, Any]], Any] | None = None,
) -> tuple[dict[str, Any], list[tuple[str, Any, Any]]]:
    """Load the checkpoint at ``path`` for resuming the run described by ``current`` (sections
    ``model``, ``train``, ``task``, ``tokenizer`` as in :func:`run_differences`).

    ``read_task``: turns the checkpoint's task data into a dataclass with ``to_dict`` (the
    ``from_dict`` of the current task's class), so that fields added since the checkpoint was
    written take their defaults instead of counting as differences.

    Returns ``(state, allowed changes)``. Raises ``CheckpointError`` for a file that is not a
    usable checkpoint (damaged, incomplete, an invalid or oversized config, non-finite weights or
    optimizer state) and :class:`ResumeMismatch` for a checkpoint of another run.
    """
    state = load_checkpoint(path)
    check_entries(state, path, RESUME_ENTRIES)
    saved_model = model_config_from(state, path)
    try:
        saved_train = TrainConfig.from_dict(state["train_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} has an invalid train_config: {error}") from error
    saved = {
        "model": saved_model.to_dict(),
        "train": saved_train.to_dict(),
        "task": state.get("task") or {},
        "tokenizer": state.get("tokenizer"),
    }
    if read_task is not None and saved["task"]:
        try:
            saved["task"] = dataclasses.asdict(read_task(saved["task"]))
        except (TypeError, ValueError, KeyError) as error:
            raise CheckpointError(f"{path} has invalid task data: {error}") from error
    changes = resume_changes(path, saved, current, allow_changes)
    for quantity, tree in (("weights", state["model"]), ("optimizer state", state["optimizer"])):
        bad = first_non_finite(tree)
        if bad is not None:
            raise CheckpointError(
                f"{path} holds non-finite {quantity} ({bad[0]} holds {bad[1]}): it is not a "
                f"state to continue from; resume from an earlier checkpoint or restart"
            )
    return state, changes
