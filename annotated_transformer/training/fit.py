"""From a task to a trained model: seed, build the model, train (chapter 08).

:func:`fit_task` is the one place that does it, for the command line's ``train``, chapter 08, the
ablation runner (chapter 09) and chapter 10's smoke models: seeding happens before the model is
built, so a seed gives the same initial weights everywhere; the checkpoint keeps the task's
:class:`~annotated_transformer.task_options.TaskInfo` and the tokenizer's ``to_dict()`` state.
:func:`run_configs` merges a task's defaults with settings into the two validated configs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..config import TrainConfig, TransformerConfig
from ..data.batch import Batch
from ..model import build_model
from ..tasks.task_options import Task
from .checkpoint import check_model_size
from .run_lock import check_run_directory
from .train import TrainingDiverged, seed_everything
from .trainer import Trainer
from .training_log import check_training_log, open_training_log


@dataclass
class Fit:
    """A finished (or diverged) run: the model in eval mode, its trainer, the history, the
    device it ran on, the divergence when ``raise_on_divergence=False`` caught one, and the
    training seconds of the earlier parts of a resumed run (0 for a fresh one)."""

    model: nn.Module
    trainer: Trainer
    history: list[dict[str, Any]]
    device: Any
    diverged: TrainingDiverged | None = None
    resumed_elapsed: float = 0.0


def run_configs(
    task: Task,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    **fixed: Any,
) -> tuple[TransformerConfig, TrainConfig]:
    """The task's defaults, then ``model``/``train`` settings, then ``fixed`` TrainConfig fields
    (``seed``, ``device``, ``checkpoint_dir``, ``progress``), validated by the config classes.

    Also refused here, before anything is allocated: a ``max_len`` shorter than the task's
    longest sequence (its default ``max_len``), which the model would read past its positions, a
    ``vocab_size`` smaller than the task's vocabulary, and sizes this package would not load back (:func:`~annotated_transformer.checkpoint.check_model_size`).
    """
    model_config = TransformerConfig.from_dict({**task.model_defaults, **(model or {})})
    train_config = TrainConfig.from_dict({**task.train_defaults, **(train or {}), **fixed})
    needed = task.model_defaults.get("max_len")
    if needed is not None and model_config.max_len < needed:
        raise ValueError(
            f"model.max_len={model_config.max_len} is too short for the task {task.name!r}: its "
            f"sequences need max_len >= {needed} (the task's default); use at least {needed}"
        )
    vocabulary = task.model_defaults.get("vocab_size")
    if vocabulary is not None and model_config.vocab_size < vocabulary:
        raise ValueError(
            f"model.vocab_size={model_config.vocab_size} is smaller than the vocabulary of the task "
            f"{task.name!r} ({vocabulary} tokens); use at least {vocabulary}"
        )
    if task.info.options.get("objective") == "masked":
        _check_masked_model(task, model_config)
    check_model_size(model_config)
    return model_config, train_config


def _check_masked_model(task: Task, config: TransformerConfig) -> None:
    """Refuse a model that the masked-token objective cannot train: a causal one (a masked
    token's answer sits at its own position, which a causal model reads without the words after
    it), or one whose ``pad_id`` is not the task's (the targets not chosen would carry loss)."""
    if config.arch != "encoder-only":
        raise ValueError(
            f"data.objective='masked' trains a bidirectional model, but model.arch="
            f"{config.arch!r}; use model.arch=encoder-only, or data.objective=next-token"
        )
    if config.pad_id != task.model_defaults["pad_id"]:
        raise ValueError(
            f"data.objective='masked' reads the loss at the masked positions only, marking the "
            f"others with id {task.model_defaults['pad_id']}; model.pad_id={config.pad_id!r} "
            f"would change that: leave model.pad_id unset"
        )


def fit_task(
    task: Task,
    model_config: TransformerConfig,
    train_config: TrainConfig,
    *,
    train_data: Any = None,
    eval_data: Iterable[Batch] | None = None,
    resume: str | os.PathLike | None = None,
    allow_changes: Iterable[str] = (),
    distributed: Any = None,
    raise_on_divergence: bool = True,
    log: str | None = None,
) -> Fit:
    """Seed with ``train_config.seed``, build the model, train it on ``task``.

    ``train_data``/``eval_data`` replace the task's training source and validation batches (the
    ablation runner's prefix-LM reading of a translation task). ``resume``: a checkpoint to
    continue from; ``allow_changes``: settings (``"train.lr"``) that may differ from the
    checkpoint's. A run whose loss stops being finite raises
    :class:`~annotated_transformer.train.TrainingDiverged`, or with
    ``raise_on_divergence=False`` returns with ``Fit.diverged`` set. ``log="tensorboard"`` also
    writes each history row to ``checkpoint_dir/tensorboard/``
    (:mod:`annotated_transformer.training_log`).
    """
    check_run_directory(train_config.checkpoint_dir)  # a file, or a live run's: refused now
    check_training_log(log, train_config.checkpoint_dir)
    seed_everything(train_config.seed)  # before the model: a seed gives the same weights
    model = build_model(model_config)
    trainer = Trainer(
        model,
        train_config,
        task.train if train_data is None else train_data,
        task.splits.get("valid") if eval_data is None else eval_data,
        tokenizer=task.tokenizer.to_dict(),
        task=task.info,  # a TaskInfo: resume reads older checkpoints' task data through it
        distributed=distributed,
    )
    if resume is not None:
        trainer.resume(resume, allow_changes=tuple(allow_changes))
    resumed_elapsed = trainer.elapsed
    diverged = None
    is_main = trainer.distributed.is_main
    with open_training_log(log, train_config.checkpoint_dir, enabled=is_main) as write_row:
        if write_row is not None:
            trainer.add_callback("on_log", write_row)
        try:
            trainer.fit()
        except TrainingDiverged as error:
            if raise_on_divergence:
                raise
            diverged = error
    return Fit(
        trainer.model.eval(), trainer, trainer.history, trainer.device, diverged, resumed_elapsed
    )
