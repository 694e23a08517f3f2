"""Checkpoint averaging: the mean of a run's last few weights, a free gain for translation.

Vaswani et al. (2017, §6.1) report their base models "using a single model obtained by averaging
the last 5 checkpoints, which were written at 10-minute intervals". Late in a run the weights
wander around a minimum with the noise of the updates; their mean lies nearer its centre than
any one of them. Two pieces:

- :class:`KeepEvaluations`, a :class:`~annotated_transformer.training.trainer.Trainer` callback
  that writes the model's weights at each evaluation to ``eval-<step>.pt`` in the run's folder
  and keeps only the newest ``keep`` of them;
- :func:`average_checkpoints`, the element-wise mean of the weights of several checkpoints of one
  model, as a state dict to load into it.

    trainer.add_callback("on_evaluate", KeepEvaluations(run_dir, keep=5))
    trainer.fit()
    model.load_state_dict(average_checkpoints(evaluation_checkpoints(run_dir)))

A :class:`~annotated_transformer.config.TrainConfig` with ``keep_evaluations=5`` adds the callback
itself, and :func:`average_run` turns a run folder's snapshots into one checkpoint; from the
command line::

    python -m annotated_transformer train --task multi30k --out runs/m30k \
        --set train.keep_evaluations=5
    python -m annotated_transformer average runs/m30k            # writes runs/m30k/averaged.pt
    python -m annotated_transformer evaluate runs/m30k/averaged.pt --split test --beam 4
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data.batch import Batch
from .checkpoint import CHECKPOINT_FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from .distributed import unwrap
from .train import evaluate

EVALUATION_FILE = re.compile(r"eval-(\d+)\.pt")


def evaluation_checkpoints(directory: str | os.PathLike, after: int | None = None) -> list[Path]:
    """The ``eval-<step>.pt`` files of a run folder, oldest first (by step); with ``after``, only
    those of later steps."""
    found = [
        (int(match.group(1)), path)
        for path in Path(directory).glob("eval-*.pt")
        if (match := EVALUATION_FILE.fullmatch(path.name))
    ]
    return [path for step, path in sorted(found) if after is None or step > after]


class KeepEvaluations:
    """An ``on_evaluate`` callback: the model's weights written to ``directory/eval-<step>.pt`` at
    each evaluation, atomically; the oldest removed beyond ``keep``. A file holds the model's
    config, tokenizer and task beside the weights and the evaluation's metrics, so that it loads
    alone (``evaluate``, ``translate``); no optimizer state (it does not resume a run)."""

    def __init__(self, directory: str | os.PathLike, keep: int = 5) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep={keep!r} is not accepted: use a whole number of files >= 1")
        self.directory, self.keep = Path(directory), keep

    def __call__(self, trainer: Any, metrics: dict[str, float]) -> None:
        if not trainer.distributed.is_main:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": trainer.step,
            "model_config": trainer.model_config.to_dict(),
            "model": {
                name: tensor.detach().clone()
                for name, tensor in unwrap(trainer.model).state_dict().items()
            },
            "tokenizer": trainer.tokenizer,
            "task": trainer.task,
            "metrics": dict(metrics),
        }
        save_checkpoint(self.directory / f"eval-{trainer.step:07d}.pt", state)
        for old in evaluation_checkpoints(self.directory)[: -self.keep]:
            old.unlink(missing_ok=True)


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, Tensor]:
    """The element-wise mean of the ``model`` weights of the checkpoints at ``paths``.

    Floating-point tensors are summed in float64 and returned in their own dtype; any other
    tensor (an integer buffer) must be equal in every file and is returned as it is. Every
    checkpoint must be of the same model: the same ``model_config``, the same names and shapes.

    Raises:
        CheckpointError: no paths, a file that is not a checkpoint (see :func:`load_checkpoint`),
            or checkpoints of different models, naming the files.
    """
    if not paths:
        raise CheckpointError("average_checkpoints needs at least one checkpoint; got none")
    first_path, total, reference = Path(paths[0]), {}, None
    for path in map(Path, paths):
        state = load_checkpoint(path)
        weights, config = state.get("model"), state.get("model_config")
        if not isinstance(weights, dict):
            raise CheckpointError(f"{path} holds no model weights (no 'model' entry)")
        if reference is None:
            reference = (config, {name: tuple(t.shape) for name, t in weights.items()})
            total = {
                name: t.double() if t.is_floating_point() else t for name, t in weights.items()
            }
            dtypes = {name: t.dtype for name, t in weights.items()}
            continue
        shapes = {name: tuple(t.shape) for name, t in weights.items()}
        if config != reference[0] or shapes != reference[1]:
            raise CheckpointError(
                f"{path} and {first_path} are checkpoints of different models (their model "
                f"configs or weight shapes differ): only checkpoints of one run can be averaged"
            )
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                total[name] += tensor.double()
            elif not torch.equal(tensor, total[name]):
                raise CheckpointError(f"{path}: the buffer {name!r} differs from {first_path}'s")
    return {
        name: (tensor / len(paths)).to(dtypes[name]) if tensor.is_floating_point() else tensor
        for name, tensor in total.items()
    }


def average_run(directory: str | os.PathLike, last: int | None = None) -> dict[str, Any]:
    """A checkpoint of the mean of a run folder's last ``last`` evaluation snapshots (every one
    kept when None): the newest snapshot's config, tokenizer and task with the averaged weights,
    and ``averaged_from``, the files and steps that went in. It loads as any checkpoint does
    (``evaluate``, ``translate``, ``generate``); it does not resume a run.

    Raises:
        CheckpointError: no such folder, no snapshots in it (the run kept none: train with
            ``train.keep_evaluations=N``), fewer than ``last``, or snapshots that do not load
            or are of different models.
    """
    directory = Path(directory)
    if directory.is_file():
        raise CheckpointError(
            f"{directory} is a file: name the run folder that holds the snapshots (train's --out)"
        )
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a run folder (no such directory)")
    kept = evaluation_checkpoints(directory)
    if not kept:
        raise CheckpointError(
            f"{directory} holds no evaluation snapshots (eval-<step>.pt): only a run trained with "
            f"--set train.keep_evaluations=N keeps them; train it again with that setting"
        )
    if last is not None:
        if isinstance(last, bool) or not isinstance(last, int) or last < 1:
            raise CheckpointError(f"last={last!r} is not accepted: use a whole number >= 1")
        if last > len(kept):
            raise CheckpointError(
                f"{directory} holds {len(kept)} evaluation snapshots ({kept[0].name} to "
                f"{kept[-1].name}), fewer than the {last} asked for: average at most {len(kept)}"
            )
        kept = kept[-last:]
    weights = average_checkpoints(kept)
    newest = load_checkpoint(kept[-1])
    return {
        "format": CHECKPOINT_FORMAT,
        "step": newest.get("step"),
        "model_config": newest.get("model_config"),
        "model": weights,
        "tokenizer": newest.get("tokenizer"),
        "task": newest.get("task"),
        "averaged_from": [
            {"file": path.name, "step": int(EVALUATION_FILE.fullmatch(path.name).group(1))}
            for path in kept
        ],
    }


def best_or_average(
    model: nn.Module,
    run_dir: str | os.PathLike,
    batches: Sequence[Batch],
    pad_id: int | None,
    last: int | None = None,
) -> dict[str, Any]:
    """Load into ``model`` whichever scores the lower loss on ``batches`` (a validation split):
    the weights of the run's ``best.pt``, or the mean of its last ``last`` evaluation snapshots
    (all kept when None). The choice is made on held-out data, so a test split measures it
    afterwards without bias.

    Returns ``{"chosen": "best" | "averaged", "valid_loss_best", "valid_loss_averaged",
    "best_step", "averaged_steps"}``. Raises :class:`CheckpointError` as :func:`average_run` does,
    or when the run has no ``best.pt``.
    """
    run_dir = Path(run_dir)
    averaged = average_run(run_dir, last)
    best = load_checkpoint(run_dir / "best.pt")
    device = next(model.parameters()).device
    losses = {}
    for name, weights in (("best", best["model"]), ("averaged", averaged["model"])):
        model.load_state_dict(weights)
        losses[name] = evaluate(model.to(device), batches, pad_id)["loss"]
    chosen = min(losses, key=losses.get)  # a tie keeps best.pt: no change without a gain
    model.load_state_dict(best["model"] if chosen == "best" else averaged["model"])
    return {
        "chosen": chosen,
        "valid_loss_best": losses["best"],
        "valid_loss_averaged": losses["averaged"],
        "best_step": best.get("step"),
        "averaged_steps": [entry["step"] for entry in averaged["averaged_from"]],
    }
