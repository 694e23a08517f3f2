"""A run folder that describes itself: what ``train`` writes beside its checkpoints.

``python -m annotated_transformer train`` writes, in its ``--out`` folder (by default
``runs/<task>-<date>-<time>``):

- ``run.json``: every launch of the run (a resumed run has several): the command line, the task,
  the profile, the settings as given, the code version and the time it started;
- ``config.json``: the configuration the latest launch resolved and trained with: every field of
  :class:`~annotated_transformer.config.TransformerConfig` and
  :class:`~annotated_transformer.config.TrainConfig` (defaults included) and the task's options;
- ``last.pt``, ``best.pt``, ``history.csv``, ``history.json``: the trainer's (chapter 08);
- ``eval-<step>.pt``: with ``train.keep_evaluations=N``, the weights of the last N evaluations,
  and ``averaged.pt``, their mean, written by ``average`` (chapter 06, section 11).

A folder that holds a run is never trained into by accident (:func:`check_new_run`): ``train``
continues it with ``--resume`` or replaces it with ``--overwrite`` (:func:`clear_run`, which keeps
``run.json``, so the replaced launches stay on record), and refuses otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ..config import TrainConfig, TransformerConfig
from ..model import build_model
from .averaging import evaluation_checkpoints
from .checkpoint import atomic_write_text
from .provenance import code_version

RUN_FILE = "run.json"  # every launch of the run (see record_launch)
CONFIG_FILE = "config.json"  # the resolved configuration of the latest launch (see write_config)
RUNS = Path("runs")  # where a run goes without --out
# What a run leaves that a new run in the same folder would replace: its weights and history,
# the snapshots it kept for averaging (train.keep_evaluations) and their average (`average`).
RUN_OUTPUTS = ("last.pt", "best.pt", "history.csv", "history.json", "tensorboard", "averaged.pt")


def _outputs(out: Path) -> list[Path]:
    """The paths of :data:`RUN_OUTPUTS` and of the evaluation snapshots present in ``out``."""
    named = [out / name for name in RUN_OUTPUTS if (out / name).exists()]
    return named + (evaluation_checkpoints(out) if out.is_dir() else [])


def default_out(task: str, now: datetime | None = None) -> Path:
    """``runs/<task>-<YYYYmmdd-HHMMSS>``: a new folder per launch, named so ``ls runs`` sorts."""
    now = now or datetime.now()
    return RUNS / f"{task}-{now:%Y%m%d-%H%M%S}"


def record_launch(
    out: str | Path,
    argv: list[str],
    task: str,
    profile: str | None,
    settings: dict[str, dict[str, Any]],
    command: str | None = None,
    replaced: list[str] | None = None,
) -> Path:
    """Append this launch to ``out/run.json``: the command line (``argv`` of the command line
    tool, or ``command`` as given, e.g. a papermill call), the task, the profile, the settings as
    given, and the code version and time it started with. A record made from a resumed run can
    so name the code of its first part. ``replaced``: the files of an earlier run this launch
    removed (``--overwrite``), recorded with it."""
    path = Path(out) / RUN_FILE
    launches = read_launches(path) if path.is_file() else []
    launch = {
        "command": command or "python -m annotated_transformer " + shlex.join(map(str, argv)),
        "task": task,
        "profile": profile,
        "settings": settings,
        "code": code_version(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if replaced:
        launch["replaced"] = list(replaced)
    launches.append(launch)
    Path(out).mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps({"launches": launches}, indent=1, default=str) + "\n")


def read_launches(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The launches a ``run.json`` records; a ValueError naming the file when it is damaged."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path} is damaged ({error}): it should hold {{'launches': [...]}}; move it aside "
            f"to start its record again"
        ) from error
    launches = record.get("launches") if isinstance(record, dict) else None
    if not isinstance(launches, list):
        raise ValueError(
            f"{path} is damaged: it should hold {{'launches': [...]}}, a list of launches; move "
            f"it aside to start its record again"
        )
    return launches


def existing_run(out: str | os.PathLike) -> list[str]:
    """The files of an earlier run in ``out`` (its weights, history, curves and description),
    or ``[]`` when it holds none of :data:`RUN_OUTPUTS` or evaluation snapshots."""
    out = Path(out)
    present = [path.name for path in _outputs(out)]
    if not present:
        return []
    return present + [name for name in (CONFIG_FILE, RUN_FILE) if (out / name).exists()]


def check_new_run(out: str | os.PathLike | None, *, resume: bool, overwrite: bool) -> None:
    """Refuse, with a ValueError before any work, to start a new run in a folder that holds one
    (it would replace its checkpoints and history), unless it is resumed or ``overwrite``."""
    if resume and overwrite:
        raise ValueError(
            "--resume continues the run in --out and --overwrite replaces it: choose one"
        )
    if out is None or resume or overwrite:
        return
    present = existing_run(out)
    if present:
        raise ValueError(
            f"{out} already holds a run ({', '.join(present)}); a new run would replace it. "
            f"Continue it with --resume, replace it with --overwrite (run.json keeps the earlier "
            f"launches), or choose another --out"
        )


def clear_run(out: str | os.PathLike) -> list[str]:
    """Remove the outputs of an earlier run from ``out`` (:data:`RUN_OUTPUTS` and the
    evaluation snapshots), keeping ``run.json``; returns the names removed."""
    removed = []
    for path in _outputs(Path(out)):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(path.name)
    return removed


def resolved_config(
    task: Any, model_config: TransformerConfig, train_config: TrainConfig
) -> dict[str, Any]:
    """What a run trains with, every field spelled out: ``{"task": {"name", "options"}, "model":
    TransformerConfig fields, "train": TrainConfig fields}``."""
    return {
        "task": {"name": task.name, "options": dict(task.info.options)},
        "model": dataclasses.asdict(model_config),
        "train": dataclasses.asdict(train_config),
    }


def write_config(out: str | Path, config: dict[str, Any]) -> Path:
    """``out/config.json``: :func:`resolved_config` of the latest launch."""
    Path(out).mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=1, default=str) + "\n"
    return atomic_write_text(Path(out) / CONFIG_FILE, text)


def parameter_count(model_config: TransformerConfig) -> int:
    """The model's parameters, counted on the meta device (no memory, no initialisation cost)."""
    with torch.device("meta"):
        model = build_model(model_config)
    return sum(parameter.numel() for parameter in model.parameters())


def checkpoint_megabytes(parameters: int) -> float:
    """About how large one checkpoint is: fp32 weights and Adam's two moments per weight."""
    return parameters * 4 * 3 / 1e6
