"""The training loop (chapter 08): one loop for the three architectures.

The pieces, each a function or class of this module:

- :class:`TrainConfig`, validated like :class:`~annotated_transformer.config.TransformerConfig`;
- :func:`seed_everything`, the one place that seeds Python, numpy and torch;
- :func:`accumulate_gradients`: forward and backward over the micro-batches of one optimizer
  update, the loss summed over target tokens and divided by the tokens of the *whole update* (all
  micro-batches, all processes), so the accumulated gradient equals the gradient of one big batch
  even when micro-batches hold different numbers of tokens;
- :func:`evaluate`: loss, perplexity and token accuracy;
- :class:`Trainer`: the loop, with a learning-rate schedule stepped once per update, gradient
  clipping, bf16 autocast and ``torch.compile`` when asked, evaluation every N updates, early
  stopping, best and last checkpoints, a history as CSV and JSON, a progress bar, and
  DistributedDataParallel under ``torchrun``.

**The data-source protocol.** Resuming must continue *exactly*, so the trainer owns the iteration
over the training data. A data source is a function (or callable object)::

    source(epoch: int, generator: torch.Generator) -> Iterable[Batch]

that yields one epoch of batches and draws all its randomness (shuffling, bucketing, masking,
random crops) from ``generator``, never from the global generators. The trainer seeds
``generator`` from ``(TrainConfig.seed, epoch)``; given the same arguments a source must yield the
same batches. A checkpoint stores the epoch and how many batches of it were consumed; resuming
calls ``source(epoch, generator)`` again and skips that many batches, so batches should be built
lazily (cheap to skip). A source may be infinite (one endless epoch). A list of batches also works:
the same batches in the same order every epoch. Under ``torchrun`` every process calls the source
with the same generator and keeps its share of the rows of each batch, so a ``Batch`` is always the
*global* batch and the hyperparameters do not depend on the number of processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from .checkpoint import (
    CHECKPOINT_FORMAT,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_history,
)
from .config import (
    TransformerConfig,
    _check_bool,
    _check_choice,
    _check_positive_int,
    _is_int,
    _is_number,
    dataclass_from_dict,
)
from .data.batch import Batch
from .distributed import DEVICE_CHOICES, Distributed, resolve_device, unwrap
from .losses import LabelSmoothingLoss
from .metrics import perplexity, token_accuracy, token_loss
from .model import build_model
from .optim import OPTIMIZER_CHOICES, SCHEDULE_CHOICES, build_optimizer, build_scheduler

PRECISION_CHOICES = ("fp32", "bf16")
MODE_CHOICES = ("auto", "min", "max")
HIGHER_IS_BETTER = ("accuracy", "bleu", "chrf")  # early_stopping_mode="auto" maximises these

DataSource = Callable[[int, torch.Generator], Iterable[Batch]]


@dataclass
class TrainConfig:
    """Everything that defines a training run (the model's shape is in ``TransformerConfig``)."""

    optimizer: str = "adamw"
    lr: float = 1e-3  # constant: the rate; warmup_cosine: the peak; noam: unused (see noam_factor)
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    schedule: str = "constant"
    warmup: int = 0  # updates of linear warmup (noam, warmup_cosine)
    noam_factor: float = 1.0
    min_lr: float = 0.0  # warmup_cosine: the rate at max_steps
    max_steps: int = 1000  # optimizer updates, not micro-batches
    label_smoothing: float = 0.0
    grad_clip: float | None = None  # max global gradient norm; None: no clipping
    accumulation: int = 1  # micro-batches per optimizer update
    eval_every: int | None = None  # updates between evaluations; None: only at the end
    eval_batches: int | None = None  # batches per evaluation; None: the whole evaluation set
    early_stopping_metric: str = "loss"  # an evaluation metric: loss, perplexity, accuracy, ...
    early_stopping_patience: int | None = None  # evaluations without improvement; None: never
    early_stopping_mode: str = "auto"  # auto: max for accuracy/bleu/chrf, min otherwise
    checkpoint_dir: str | None = None  # None: write nothing (a notebook experiment)
    save_every: int | None = None  # updates between last.pt saves; None: at each evaluation
    seed: int = 0
    device: str = "auto"  # auto: cuda when available
    precision: str = "fp32"  # bf16: autocast to bfloat16 (CUDA; on CPU, CPU autocast)
    compile: bool = False  # torch.compile the model (on CPU it needs a C++ compiler; slow start)
    log_every: int = 10  # updates per history row
    progress: bool = True  # a tqdm progress bar (main process only)

    def __post_init__(self) -> None:
        _check_choice("optimizer", self.optimizer, OPTIMIZER_CHOICES)
        _check_choice("schedule", self.schedule, SCHEDULE_CHOICES)
        _check_choice("device", self.device, DEVICE_CHOICES)
        _check_choice("precision", self.precision, PRECISION_CHOICES)
        _check_choice("early_stopping_mode", self.early_stopping_mode, MODE_CHOICES)
        for name in ("max_steps", "accumulation", "log_every"):
            _check_positive_int(name, getattr(self, name))
        for name in ("eval_every", "eval_batches", "early_stopping_patience", "save_every"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        for name in ("warmup", "seed"):
            value = getattr(self, name)
            if not (_is_int(value) and value >= 0):
                raise ValueError(f"{name}={value!r} is not accepted: use an integer >= 0")
        for name in ("lr", "eps", "noam_factor"):
            _check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("weight_decay", "min_lr"):
            _check_number(name, getattr(self, name), low=0.0)
        _check_number("label_smoothing", self.label_smoothing, low=0.0, high=1.0)
        if self.grad_clip is not None:
            _check_number("grad_clip", self.grad_clip, low=0.0, low_open=True)
        if not (isinstance(self.betas, (tuple, list)) and len(self.betas) == 2):
            raise ValueError(f"betas={self.betas!r} is not accepted: use two numbers in [0, 1)")
        self.betas = tuple(self.betas)
        for beta in self.betas:
            _check_number("betas", beta, low=0.0, high=1.0)
        if self.schedule == "noam" and self.warmup < 1:
            raise ValueError(f"warmup={self.warmup} is not accepted with schedule='noam': use >= 1")
        if self.schedule == "warmup_cosine" and self.max_steps <= self.warmup:
            raise ValueError(
                f"schedule='warmup_cosine' needs max_steps > warmup, got max_steps="
                f"{self.max_steps}, warmup={self.warmup}"
            )
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr={self.min_lr} is not accepted: use a value <= lr={self.lr}")
        if not isinstance(self.early_stopping_metric, str) or not self.early_stopping_metric:
            raise ValueError(
                f"early_stopping_metric={self.early_stopping_metric!r} is not accepted: use the "
                f"name of an evaluation metric (loss, perplexity, accuracy)"
            )
        for name in ("compile", "progress"):
            _check_bool(name, getattr(self, name))
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = str(self.checkpoint_dir)

    @property
    def maximize(self) -> bool:
        """Whether a larger ``early_stopping_metric`` is better."""
        if self.early_stopping_mode == "auto":
            return self.early_stopping_metric in HIGHER_IS_BETTER
        return self.early_stopping_mode == "max"

    def schedule_arguments(self, d_model: int) -> dict[str, Any]:
        """The keyword arguments of :func:`~annotated_transformer.optim.build_scheduler`."""
        if self.schedule == "noam":
            return {"d_model": d_model, "warmup": self.warmup, "factor": self.noam_factor}
        if self.schedule == "warmup_cosine":
            return {
                "max_lr": self.lr,
                "warmup": self.warmup,
                "total_steps": self.max_steps,
                "min_lr": self.min_lr,
            }
        return {"lr": self.lr}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build from a dict (a checkpoint, a JSON file); unknown keys are an error."""
        return dataclass_from_dict(cls, values)


def _check_number(
    name: str, value: object, low: float, high: float = math.inf, low_open: bool = False
) -> None:
    if not (_is_number(value) and (value > low if low_open else value >= low) and value < high):
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{name}={value!r} is not accepted: use a number in {bracket}{low}, {high})"
        )


class TrainingDiverged(FloatingPointError):
    """The loss (or the gradient norm) stopped being a finite number."""

    def __init__(self, step: int, quantity: str, value: float, checkpoint: Path | None) -> None:
        self.step, self.value, self.checkpoint = step, value, checkpoint
        kept = (
            f"the last good checkpoint is kept at {checkpoint}"
            if checkpoint is not None
            else "no checkpoint was written before it"
        )
        super().__init__(
            f"training diverged at update {step}: the {quantity} is {value}; {kept}. Lower the "
            f"learning rate, lengthen the warmup or set grad_clip, then resume or restart."
        )


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy and torch (every CUDA device too): the one place seeds are
    set."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (the legacy global generator others use)
    torch.manual_seed(seed)  # seeds the CUDA generators as well
    torch.cuda.manual_seed_all(seed)


def data_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator a data source gets for ``epoch``: a function of ``(seed, epoch)`` only."""
    mixed = np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(mixed) % 2**63)


def as_data_source(data: DataSource | Iterable[Batch]) -> DataSource:
    """A data source from a function ``(epoch, generator) -> batches`` or a re-iterable of batches."""
    if callable(data):
        return data
    if isinstance(data, Iterator) or not isinstance(data, Iterable):
        raise TypeError(
            f"training data must be a function (epoch, generator) -> batches, or a re-iterable "
            f"such as a list of Batch; got {type(data).__name__} (a one-shot iterator cannot "
            f"restart for a new epoch or a resumed run)"
        )
    return lambda epoch, generator: data


def _evaluation_batches(data: DataSource | Iterable[Batch], seed: int) -> Iterable[Batch]:
    # A data source as evaluation data: the same batches at every evaluation.
    return data(0, torch.Generator().manual_seed(seed)) if callable(data) else data


# ---------------------------------------------------------------------------------------------
# One update, one evaluation


def forward_logits(model: nn.Module, batch: Batch, arch: str) -> Tensor:
    """``model(batch.src, batch.inputs)`` for an encoder-decoder, else ``model(batch.inputs)``.

    Returns logits ``[B, T, V]``.
    """
    if arch == "encoder-decoder":
        if batch.src is None:
            raise ValueError("an encoder-decoder model needs batch.src, the source tokens [B, S]")
        return model(batch.src, batch.inputs)
    if batch.src is not None:
        raise ValueError(f"a {arch} model reads batch.inputs only, but this batch has a src")
    return model(batch.inputs)


def accumulate_gradients(
    model: nn.Module,
    micro_batches: list[Batch],
    loss_function: LabelSmoothingLoss,
    *,
    arch: str,
    device: torch.device | str = "cpu",
    distributed: Distributed | None = None,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    synchronize: bool = True,
) -> tuple[float | Tensor, int]:
    """Forward and backward over the micro-batches of one optimizer update.

    Each micro-batch's loss is the *sum* over its target tokens, divided by the tokens of the whole
    update (every micro-batch, every process; counted before the first backward, since each
    process sees the global batches). The gradients add up to the gradient of the mean per-token
    loss over one batch holding all the micro-batches; a per-micro-batch mean divided by
    ``accumulation`` would weight a token in a short micro-batch more than one in a long one.
    Under DistributedDataParallel, which averages gradients over the processes, each process's
    loss is multiplied by the number of processes so that the average is that same sum.

    Args:
        loss_function: a :class:`LabelSmoothingLoss` with ``reduction="sum"``; its
            ``ignore_index`` is the padding id.
        autocast: returns the autocast context of the forward pass.
        synchronize: return the loss as a float, which waits for the device; with False it stays
            a float64 tensor on ``device`` (the trainer reads it back only every few updates).

    Returns:
        ``(loss summed over the update's tokens and processes, number of those tokens)``.
    """
    if loss_function.reduction != "sum":
        raise ValueError(
            f"accumulate_gradients needs a loss with reduction='sum', got "
            f"{loss_function.reduction!r}: it divides by the tokens of the whole update itself"
        )
    distributed = distributed or Distributed()
    total_tokens = sum(batch.num_tokens(loss_function.ignore_index) for batch in micro_batches)
    scale = distributed.world_size / max(total_tokens, 1)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for index, batch in enumerate(micro_batches):
        shard, weight = distributed.shard(batch)
        shard = shard.to(device)
        last = index == len(micro_batches) - 1
        # Synchronise gradients across processes once per update, on the last micro-batch.
        no_sync = getattr(model, "no_sync", None)
        synchronisation = contextlib.nullcontext() if last or no_sync is None else no_sync()
        with synchronisation:
            with autocast():
                logits = forward_logits(model, shard, arch)  # [B, T, V]
            summed = loss_function(logits.float(), shard.targets) * weight
            (summed * scale).backward()
        loss_sum += summed.detach()
    loss_sum = distributed.sum(loss_sum)
    return (float(loss_sum) if synchronize else loss_sum), total_tokens


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[Batch],
    pad_id: int | None,
    *,
    max_batches: int | None = None,
    precision: str = "fp32",
    distributed: Distributed | None = None,
) -> dict[str, float]:
    """Loss (mean cross-entropy per target token, nats), perplexity and token accuracy.

    No label smoothing here: the loss is the model's negative log-likelihood, whatever it was
    trained with. Positions whose target is ``pad_id`` are skipped. Under several processes each
    evaluates its rows of every batch and the sums are added across processes.

    Returns:
        ``{"loss", "perplexity", "accuracy", "tokens"}``.
    """
    _check_choice("precision", precision, PRECISION_CHOICES)
    distributed = distributed or Distributed()
    inner = unwrap(model)
    arch = inner.config.arch
    device = next(inner.parameters()).device
    autocast = _autocast_factory(device, precision)
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, tokens
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            break
        shard, weight = distributed.shard(batch)
        tokens = shard.num_tokens(pad_id)
        if weight == 0 or tokens == 0:
            continue
        shard = shard.to(device)
        with autocast():
            logits = forward_logits(model, shard, arch).float()  # [B, T, V]
        totals[0] += token_loss(logits, shard.targets, pad_id).double() * tokens
        totals[1] += round(token_accuracy(logits, shard.targets, pad_id) * tokens)
        totals[2] += tokens
    model.train(was_training)
    loss_sum, correct, tokens = distributed.sum(totals).tolist()
    if tokens == 0:
        raise ValueError("the evaluation batches hold no target tokens (are they all padding?)")
    loss = loss_sum / tokens
    return {
        "loss": loss,
        "perplexity": perplexity(loss) if loss < 700 else math.inf,  # exp overflows near 709.8
        "accuracy": correct / tokens,
        "tokens": int(tokens),
    }


def _autocast_factory(
    device: torch.device, precision: str
) -> Callable[[], contextlib.AbstractContextManager]:
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def tokenizer_state(tokenizer: Any) -> Any:
    """What a checkpoint stores of a tokenizer: ``tokenizer.state_dict()`` if it has one, else the
    object as given (a dict or another JSON-serialisable value, or None)."""
    state = tokenizer.state_dict() if hasattr(tokenizer, "state_dict") else tokenizer
    try:
        json.dumps(state)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"a tokenizer's state must be JSON-serialisable data (dicts, lists, strings, "
            f"numbers), so checkpoints load with weights_only=True; got {type(state).__name__}: "
            f"{error}"
        ) from error
    return state


# ---------------------------------------------------------------------------------------------
# The loop


class Trainer:
    """Trains ``model`` on ``train_data``; :meth:`fit` runs the loop, :meth:`resume` continues a run.

    Args:
        model: a model from :func:`~annotated_transformer.model.build_model` (it has a ``config``).
        config: the :class:`TrainConfig`.
        train_data: a data source ``(epoch, generator) -> batches`` or a list of batches (see the
            module docstring).
        eval_data: evaluation batches: a list (or other re-iterable), or a data source, called
            with epoch 0 and a fixed generator. None: no evaluation, no early stopping.
        tokenizer: stored in checkpoints as ``tokenizer.state_dict()`` (or as given, for a dict).
        task: plain data about the task (its name and options, special ids), stored as given.
        extra_metrics: ``f(model) -> {name: value}``, merged into every evaluation (e.g. BLEU of
            decoded outputs); its names may be the early-stopping metric. Under several
            processes it must return the same values in each (early stopping must agree).
        distributed: the processes; default: ``Distributed.current()``.

    The constructor seeds everything with ``config.seed + rank`` (dropout differs per process);
    build the model after your own :func:`seed_everything` call, as the command line does.

    Files in ``config.checkpoint_dir`` (main process only): ``last.pt``, ``best.pt`` (by the
    early-stopping metric), ``history.csv``, ``history.json``.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_data: DataSource | Iterable[Batch],
        eval_data: DataSource | Iterable[Batch] | None = None,
        *,
        tokenizer: Any = None,
        task: dict[str, Any] | None = None,
        extra_metrics: Callable[[nn.Module], dict[str, float]] | None = None,
        distributed: Distributed | None = None,
    ) -> None:
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.config = config
        self.distributed = distributed or Distributed.current()
        self.device = resolve_device(config.device, self.distributed)
        seed_everything(config.seed + self.distributed.rank)
        self.model = model.to(self.device)
        self.model_config = model.config
        self.pad_id = model.config.pad_id
        self.train_data = as_data_source(train_data)
        if eval_data is not None and not callable(eval_data):
            as_data_source(eval_data)  # the same check: a list, not a one-shot iterator
        self.eval_data = eval_data
        self.tokenizer = tokenizer_state(tokenizer)
        self.task = dict(task or {})
        self.extra_metrics = extra_metrics
        self.loss_function = LabelSmoothingLoss(
            config.label_smoothing, ignore_index=self.pad_id, reduction="sum"
        )
        self.optimizer = build_optimizer(
            self.model, config.optimizer, config.lr, config.weight_decay, config.betas, config.eps
        )
        self.scheduler = build_scheduler(
            self.optimizer, config.schedule, **config.schedule_arguments(model.config.d_model)
        )
        self.autocast = _autocast_factory(self.device, config.precision)
        self.module = self._wrap(self.model)  # what the training forward pass calls
        self.run_dir = Path(config.checkpoint_dir) if config.checkpoint_dir else None
        self.step = 0  # optimizer updates done
        self.epoch = 0  # the data position: epoch, and batches consumed in it
        self.batch_index = 0
        self.history: list[dict[str, Any]] = []
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.bad_evaluations = 0
        self.stop_reason: str | None = None  # "max_steps" or "early_stopping" once finished
        self.elapsed = 0.0  # seconds of training, over all resumed parts
        self.last_checkpoint: Path | None = None
        self._batches: Iterator[Batch] | None = None
        # Updates whose loss (and gradient norm) the host has not read yet: (step, loss summed over
        # tokens, tokens, norm or None), on the device. See fit.
        self._unchecked: list[tuple[int, Tensor, int, Tensor | None]] = []

    def _wrap(self, model: nn.Module) -> nn.Module:
        module = model
        if self.distributed.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            module = nn.parallel.DistributedDataParallel(module, device_ids=device_ids)
        if self.config.compile:
            module = torch.compile(module)
        return module

    # -- data ----------------------------------------------------------------------------------

    def _iterate(self) -> Iterator[Batch]:
        """Batches from the current data position on, epoch after epoch."""
        while True:
            batches = iter(
                self.train_data(self.epoch, data_generator(self.config.seed, self.epoch))
            )
            for skipped in range(self.batch_index):
                if next(batches, None) is None:
                    raise RuntimeError(
                        f"the training data yielded {skipped} batches in epoch {self.epoch} on "
                        f"resumption, but {self.batch_index} before: a data source must yield the "
                        f"same batches for the same (epoch, generator)"
                    )
            for batch in batches:
                self.batch_index += 1
                yield batch
            if self.batch_index == 0:
                raise ValueError(f"the training data yielded no batches in epoch {self.epoch}")
            self.epoch, self.batch_index = self.epoch + 1, 0

    # -- the loop --------------------------------------------------------------------------------

    def fit(self, steps: int | None = None) -> list[dict[str, Any]]:
        """Train until ``max_steps`` updates, early stopping, or ``steps`` more updates.

        Returns the history (also in ``self.history``). Saves ``last.pt`` when it returns.

        The loss and the gradient norm stay on the device between history rows: the host reads
        them (one wait for the device) only on an update that logs, evaluates, saves or ends the
        call, and then checks every update since the last read. A non-finite loss or norm
        therefore stops the run with :class:`TrainingDiverged` naming the first bad update, up to
        ``log_every`` updates after it (the updates in between have already changed the weights
        in memory), but always before a checkpoint is written: ``last.pt`` stays the last good
        one. With ``log_every=1`` it stops at once, before the bad update's optimizer step.
        """
        config = self.config
        target = config.max_steps if steps is None else min(config.max_steps, self.step + steps)
        if self.step >= config.max_steps and self.stop_reason is None:
            self.stop_reason = "max_steps"
        if self._batches is None:
            self._batches = self._iterate()
        bar = tqdm(
            total=config.max_steps,
            initial=self.step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            disable=not (config.progress and self.distributed.is_main),
        )
        self.model.train()
        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
        started, elapsed_before = time.perf_counter(), self.elapsed
        self._unchecked = []
        try:
            while self.step < target and self.stop_reason is None:
                lr = self.optimizer.param_groups[0]["lr"]
                step = self.step + 1
                evaluating = self.eval_data is not None and (
                    (config.eval_every is not None and step % config.eval_every == 0)
                    or step == config.max_steps
                )
                logging = evaluating or step % config.log_every == 0 or step == target
                saving = config.save_every is not None and step % config.save_every == 0
                checked = self._update(
                    [next(self._batches) for _ in range(config.accumulation)],
                    check=logging or saving,
                )
                self.elapsed = elapsed_before + time.perf_counter() - started
                for loss, tokens in checked:
                    window_loss, window_tokens = window_loss + loss * tokens, window_tokens + tokens
                bar.update(1)
                if checked:  # loss: the last update read
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
                if logging:
                    seconds = max(time.perf_counter() - window_start, 1e-9)
                    row = {
                        "step": self.step,
                        "epoch": self.epoch,
                        "lr": lr,
                        "train_loss": window_loss / max(window_tokens, 1),
                        "tokens_per_second": window_tokens / seconds,
                        "wall_time": self.elapsed,
                    }
                    improved = False
                    if evaluating:
                        metrics = self.evaluate()
                        improved = self._track(metrics)
                        row.update({f"eval_{key}": value for key, value in metrics.items()})
                        bar.set_postfix(loss=f"{loss:.4f}", eval=f"{metrics['loss']:.4f}")
                    self.history.append(row)
                    if self.run_dir is not None and self.distributed.is_main:
                        write_history(self.run_dir, self.history)
                    if improved:
                        self.save("best.pt")
                    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
                if self.step == config.max_steps and self.stop_reason is None:
                    self.stop_reason = "max_steps"
                if self.stop_reason is None and (
                    (config.save_every is not None and self.step % config.save_every == 0)
                    or (config.save_every is None and evaluating)
                ):
                    self.save()
        finally:
            bar.close()
        self.save()
        return self.history

    def _update(self, micro_batches: list[Batch], check: bool = True) -> list[tuple[float, int]]:
        """One optimizer update, with no host-device sync unless ``check``.

        With ``check`` it first reads the updates not read yet (this one included), raises
        :class:`TrainingDiverged` at the first non-finite loss or gradient norm, and returns their
        ``(mean loss per target token, token count)`` in order; without, it returns ``[]``.
        """
        loss_sum, tokens = accumulate_gradients(
            self.module,
            micro_batches,
            self.loss_function,
            arch=self.model_config.arch,
            device=self.device,
            distributed=self.distributed,
            autocast=self.autocast,
            synchronize=False,
        )
        step = self.step + 1
        norm = None
        if self.config.grad_clip is not None:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self._unchecked.append((step, loss_sum, tokens, norm))
        checked = self._read_unchecked() if check else []
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()  # once per update, never per micro-batch
        self.step = step
        return checked

    def _read_unchecked(self) -> list[tuple[float, int]]:
        """The losses of the unchecked updates, read in one wait; stops at a non-finite one."""
        unchecked, self._unchecked = self._unchecked, []
        loss_sums = torch.stack([loss_sum for _, loss_sum, _, _ in unchecked]).tolist()
        norms = [norm for *_, norm in unchecked]
        if self.config.grad_clip is not None:
            norms = torch.stack(norms).tolist()
        checked = []
        for (step, _, tokens, _), loss_sum, norm in zip(unchecked, loss_sums, norms, strict=True):
            loss = loss_sum / max(tokens, 1)
            for quantity, value in (("loss", loss), ("gradient norm", norm)):
                if value is not None and not math.isfinite(value):
                    self.optimizer.zero_grad(set_to_none=True)
                    raise TrainingDiverged(step, quantity, value, self.last_checkpoint)
            checked.append((loss, tokens))
        return checked

    def evaluate(self) -> dict[str, float]:
        """:func:`evaluate` on the evaluation data, plus ``extra_metrics``."""
        if self.eval_data is None:
            raise ValueError("this Trainer has no eval_data to evaluate on")
        metrics = evaluate(
            self.model,
            _evaluation_batches(self.eval_data, self.config.seed),
            self.pad_id,
            max_batches=self.config.eval_batches,
            precision=self.config.precision,
            distributed=self.distributed,
        )
        if self.extra_metrics is not None:
            metrics.update(self.extra_metrics(self.model))
        return metrics

    def _track(self, metrics: dict[str, float]) -> bool:
        """Follow the early-stopping metric; returns whether it improved on the best so far."""
        name = self.config.early_stopping_metric
        if name not in metrics:
            raise ValueError(
                f"early_stopping_metric={name!r} is not among the evaluation metrics: "
                f"{', '.join(metrics)} (add it with extra_metrics=...)"
            )
        value = float(metrics[name])
        improved = self.best_value is None or (
            value > self.best_value if self.config.maximize else value < self.best_value
        )
        if improved:
            self.best_value, self.best_step, self.bad_evaluations = value, self.step, 0
        else:
            self.bad_evaluations += 1
            patience = self.config.early_stopping_patience
            if patience is not None and self.bad_evaluations >= patience:
                self.stop_reason = "early_stopping"
        return improved

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a run needs to continue exactly, as tensors and plain data.

        Keys: ``format``, ``step``, ``epoch`` and ``batch_index`` (the data position),
        ``model_config``, ``train_config``, ``model``, ``optimizer``, ``scheduler``, ``tokenizer``,
        ``task``, ``rng`` (one entry per process), ``history``, ``early_stopping``, ``elapsed``.
        Every process must call it (it gathers the processes' random states).
        """
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "model_config": self.model_config.to_dict(),
            "train_config": self.config.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "tokenizer": self.tokenizer,
            "task": self.task,
            "rng": self.distributed.gather(rng_state()),
            "history": self.history,
            "early_stopping": {
                "best_value": self.best_value,
                "best_step": self.best_step,
                "bad_evaluations": self.bad_evaluations,
                "stop_reason": self.stop_reason,
            },
            "elapsed": self.elapsed,
        }

    def save(self, name: str = "last.pt") -> Path | None:
        """Write the state to ``checkpoint_dir / name`` atomically (main process; all must call)."""
        if self.run_dir is None:
            return None
        state = self.state_dict()
        path = self.run_dir / name
        if self.distributed.is_main:
            save_checkpoint(path, state)
        if name == "last.pt":
            self.last_checkpoint = path
        return path

    def resume(self, path: str | os.PathLike) -> None:
        """Continue from a checkpoint: weights, optimizer, schedule, data position, random state.

        The model's config must equal the checkpoint's. The schedule's arguments come from the
        checkpoint (a longer ``max_steps`` does not stretch a cosine schedule already under way).
        """
        state = load_checkpoint(path)
        saved = state["model_config"]
        current = self.model_config.to_dict()
        differing = [key for key in current if saved.get(key) != current[key]]
        if differing:
            details = ", ".join(
                f"{key}: {saved.get(key)!r} != {current[key]!r}" for key in differing
            )
            raise ValueError(f"{path} was trained with another model config ({details})")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch, self.batch_index = (
            state["step"],
            state["epoch"],
            state["batch_index"],
        )
        self.history = list(state["history"])
        stopping = state["early_stopping"]
        self.best_value, self.best_step = stopping["best_value"], stopping["best_step"]
        self.bad_evaluations, self.stop_reason = stopping["bad_evaluations"], None
        self.elapsed = state["elapsed"]
        if len(state["rng"]) == self.distributed.world_size:
            set_rng_state(state["rng"][self.distributed.rank])
        else:  # another number of processes: the data order continues, dropout cannot
            seed_everything(self.config.seed + self.distributed.rank + self.step)
        self.last_checkpoint = Path(path)
        self._batches = None


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[nn.Module, dict[str, Any]]:
    """The model of a checkpoint, in eval mode on ``device``, and the checkpoint itself."""
    state = load_checkpoint(path)
    model = build_model(TransformerConfig.from_dict(state["model_config"]))
    model.load_state_dict(state["model"])
    return model.to(device).eval(), state
