"""The training loop (chapter 08): one :class:`Trainer` for the three architectures.

Read :meth:`Trainer.fit` first: batches in, one optimizer update, a history row and callbacks out,
like minGPT's trainer. Around it: a learning-rate schedule stepped once per update, gradient
clipping, bf16 autocast and ``torch.compile`` when asked, evaluation every N updates, early
stopping (:class:`~annotated_transformer.early_stopping.EarlyStopping`), best and last
checkpoints, a history as CSV and JSON, a progress bar, DistributedDataParallel under
``torchrun``. The functions it calls are in :mod:`annotated_transformer.train`.

What a run promises:

- **Exact resumption**: :meth:`Trainer.resume` continues a run as if it had never stopped (the
  data position and every random generator are in the checkpoint), and refuses a checkpoint of
  another run (:mod:`annotated_transformer.resuming`).
- **Nothing non-finite is saved**: a non-finite loss, gradient norm, weight or optimizer moment
  raises :class:`~annotated_transformer.train.TrainingDiverged`, naming the last good checkpoint.
- **One run per directory**: ``checkpoint_dir`` is locked while a run writes it
  (:class:`~annotated_transformer.run_lock.RunLock`).
- **No wait for the device per update**: the loss stays on the device between history rows.
- **A stop asked for is a resumable stop**: Ctrl-C (SIGINT) or SIGTERM during :meth:`Trainer.fit`
  finishes the update under way, saves ``last.pt``, releases the lock and raises
  :class:`TrainingInterrupted` naming what was saved (a second Ctrl-C stops at once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..config import TrainConfig
from ..data.batch import Batch
from ..losses import LabelSmoothingLoss
from ..optim import build_optimizer, build_scheduler, set_schedule, set_weight_decay
from .averaging import KeepEvaluations, evaluation_checkpoints
from .checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    save_checkpoint,
)
from .distributed import Distributed, resolve_device
from .early_stopping import EarlyStopping
from .resuming import read_resume_state
from .run_lock import RunLock, check_run_directory
from .run_state import rng_state, set_rng_state, write_history
from .train import (
    EVALUATION_METRICS,
    NATIVE_BF16_CPU_FLAGS,
    DataSource,
    TrainingDiverged,
    accumulate_gradients,
    as_data_source,
    autocast_factory,
    check_finite_state,
    evaluate,
    evaluation_batches,
    iterate_epochs,
    native_bf16,
    read_losses,
    seed_everything,
    tokenizer_state,
)

CALLBACK_EVENTS = ("on_update", "on_log", "on_evaluate")
STOP_SIGNALS = ("SIGINT", "SIGTERM")  # each exists on POSIX and Windows


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM at an update's end: ``step``, the ``checkpoint`` it
    saved there (None without a ``checkpoint_dir``) and the ``signal_name``."""

    def __init__(self, step: int, checkpoint: Path | None, signal_name: str) -> None:
        self.step, self.checkpoint, self.signal_name = step, checkpoint, signal_name
        saved = (
            f"saved {checkpoint} at update {step}"
            if checkpoint is not None
            else f"stopped at update {step}; nothing saved (no checkpoint_dir)"
        )
        super().__init__(f"interrupted ({signal_name}): {saved}")


def check_train_options(
    config: TrainConfig,
    *,
    evaluates: bool = True,
    metrics: Iterable[str] | None = EVALUATION_METRICS,
    distributed: Distributed | None = None,
) -> torch.device:
    """Check what :class:`TrainConfig` cannot check alone, before any work; returns the device.

    Each problem is a ValueError naming the option: ``device='cuda'`` without CUDA; a
    ``checkpoint_dir`` that is a file; ``early_stopping_patience`` without evaluation
    (``evaluates=False``); an ``early_stopping_metric`` not among ``metrics`` (the names the
    evaluation produces; None when unknown, e.g. with extra metrics). A ``checkpoint_dir`` in
    use by a live run raises :class:`~annotated_transformer.run_lock.RunDirectoryLocked`.
    """
    distributed = distributed or Distributed.current()
    device = resolve_device(config.device, distributed)
    check_run_directory(config.checkpoint_dir, check_lock=distributed.is_main)
    if config.keep_evaluations and config.checkpoint_dir is None:
        raise ValueError(
            f"keep_evaluations={config.keep_evaluations} keeps files in the run directory, and "
            f"this run has none: set checkpoint_dir (the command line's --out), or "
            f"keep_evaluations=0"
        )
    if not evaluates and config.keep_evaluations:
        raise ValueError(
            f"keep_evaluations={config.keep_evaluations} keeps the weights of evaluations, and "
            f"this run has no evaluation data (eval_data)"
        )
    if not evaluates and config.early_stopping_patience is not None:
        raise ValueError(
            f"early_stopping_patience={config.early_stopping_patience} needs evaluation data "
            f"(eval_data), and this run has none"
        )
    metric = config.early_stopping_metric
    if evaluates and metrics is not None and metric not in metrics:
        raise ValueError(
            f"early_stopping_metric={metric!r} is not among the evaluation metrics: "
            f"{', '.join(metrics)} (add it with extra_metrics=...)"
        )
    return device


class Trainer:
    """Trains ``model`` on ``train_data``; :meth:`fit` runs the loop, :meth:`resume` continues a run.

    Args:
        model: a model from :func:`~annotated_transformer.model.build_model` (it has a ``config``).
        config: the :class:`~annotated_transformer.config.TrainConfig`.
        train_data: a data source ``(epoch, generator) -> batches`` or a list of batches (see
            :mod:`annotated_transformer.train`).
        eval_data: evaluation batches: a list (or other re-iterable), or a data source, called
            with epoch 0 and a fixed generator. None: no evaluation, no early stopping.
        tokenizer: stored in checkpoints as ``tokenizer.to_dict()`` (or as given, for a dict).
        task: plain data about the task (its name and options, special ids; a dict or a
            dataclass), stored in checkpoints and compared on resume.
        extra_metrics: ``f(model) -> {name: value}``, merged into every evaluation (e.g. BLEU of
            decoded outputs); its names may be the early-stopping metric. Under several
            processes it must return the same values in each (early stopping must agree).
        distributed: the processes; default: ``Distributed.current()``.

    Every option is checked before any work, each with a ValueError naming it: the device must
    exist, ``checkpoint_dir`` must not be a file, the early-stopping metric must be one the
    evaluation produces (when there are no ``extra_metrics`` to add others) and patience needs
    evaluation data, as does ``keep_evaluations`` (which also needs a ``checkpoint_dir``). A
    ``checkpoint_dir`` in use by a live run raises ``RunDirectoryLocked``.

    The constructor seeds everything with ``config.seed + rank`` (dropout differs per process);
    build the model after your own :func:`seed_everything` call, as the command line does.

    Files in ``config.checkpoint_dir`` (main process only): ``last.pt``, ``best.pt`` (by the
    early-stopping metric), ``history.csv``, ``history.json``, ``eval-<step>.pt`` for the last
    ``keep_evaluations`` evaluations (:class:`~annotated_transformer.training.averaging.
    KeepEvaluations`; those of steps after a resumed checkpoint's are removed on resume), and
    ``run.lock`` while it runs.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_data: DataSource | Iterable[Batch],
        eval_data: DataSource | Iterable[Batch] | None = None,
        *,
        tokenizer: Any = None,
        task: Any = None,
        extra_metrics: Callable[[nn.Module], dict[str, float]] | None = None,
        distributed: Distributed | None = None,
    ) -> None:
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.config = config
        self.distributed = distributed or Distributed.current()
        self.device = check_train_options(
            config,
            evaluates=eval_data is not None,
            metrics=None if extra_metrics is not None else EVALUATION_METRICS,
            distributed=self.distributed,
        )
        self.run_dir = Path(config.checkpoint_dir) if config.checkpoint_dir is not None else None
        self.lock = RunLock(self.run_dir) if self.run_dir and self.distributed.is_main else None
        seed_everything(config.seed + self.distributed.rank)
        self.model = model.to(self.device)
        self.model_config = model.config
        self.pad_id = model.config.pad_id
        self.train_data = as_data_source(train_data)
        if eval_data is not None and not callable(eval_data):
            as_data_source(eval_data)  # the same check: a list, not a one-shot iterator
        self.eval_data = eval_data
        self.tokenizer = tokenizer_state(tokenizer)
        # A task dataclass with from_dict (TaskInfo) also reads the task data of older
        # checkpoints, which may lack fields added since: resume compares through it.
        self.task_type = type(task) if hasattr(task, "from_dict") else None
        if dataclasses.is_dataclass(task) and not isinstance(task, type):
            task = dataclasses.asdict(task)
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
        self.autocast = autocast_factory(self.device, config.precision)
        if config.precision == "bf16" and not native_bf16(self.device):
            warnings.warn(
                f"precision='bf16' on a device without native bfloat16 ({self.device.type}; a CPU "
                f"needs {' or '.join(NATIVE_BF16_CPU_FLAGS)}): autocast emulates it and can run "
                "many times slower than fp32 (10x measured on an AMD EPYC). precision='auto' "
                "picks bf16 only where the device has it.",
                stacklevel=2,
            )
        self.module = self._wrap(self.model)  # what the training forward pass calls
        self.early_stopping = EarlyStopping(
            config.early_stopping_metric, config.early_stopping_patience, config.early_stopping_mode
        )
        self.step = 0  # optimizer updates done
        self.epoch = 0  # the data position: epoch, and batches consumed in it
        self.batch_index = 0
        self.history: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []  # settings changed on resume, with their step
        self.stop_reason: str | None = None  # "max_steps" or "early_stopping" once finished
        self.elapsed = 0.0  # seconds of training, over all resumed parts
        self.last_checkpoint: Path | None = None  # the last good last.pt (written or resumed)
        self.callbacks: dict[str, list[Callable[..., None]]] = {
            name: [] for name in CALLBACK_EVENTS
        }
        if config.keep_evaluations and self.run_dir is not None:
            self.add_callback("on_evaluate", KeepEvaluations(self.run_dir, config.keep_evaluations))
        self._batches: Iterator[Batch] | None = None
        self._stop_signal: str | None = None  # set by Ctrl-C or SIGTERM during fit
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

    # Early stopping's state, under the names the command line reports.
    @property
    def best_value(self) -> float | None:
        return self.early_stopping.best_value

    @property
    def best_step(self) -> int | None:
        return self.early_stopping.best_step

    def add_callback(self, event: str, callback: Callable[..., None]) -> None:
        """Call ``callback(trainer)`` after each update (``on_update``: no device read is made
        for it), ``callback(trainer, row)`` after each history row (``on_log``), or
        ``callback(trainer, metrics)`` after each evaluation (``on_evaluate``)."""
        if event not in self.callbacks:
            raise ValueError(f"event={event!r} is not one of: {', '.join(CALLBACK_EVENTS)}")
        self.callbacks[event].append(callback)

    def _trigger(self, event: str, *arguments: Any) -> None:
        for callback in self.callbacks[event]:
            callback(self, *arguments)

    # -- data ----------------------------------------------------------------------------------

    def _iterate(self) -> Iterator[Batch]:
        """Batches from the current data position on, epoch after epoch, moving the position."""
        positions = iterate_epochs(self.train_data, self.config.seed, self.epoch, self.batch_index)
        for self.epoch, self.batch_index, batch in positions:
            yield batch

    # -- the loop --------------------------------------------------------------------------------

    def fit(self, steps: int | None = None) -> list[dict[str, Any]]:
        """Train until ``max_steps`` updates, early stopping, or ``steps`` more updates.

        Returns the history (also in ``self.history``). Saves ``last.pt`` when it returns.

        The loss and the gradient norm stay on the device between history rows: the host reads
        them (one wait for the device) only on an update that logs, evaluates, saves or ends the
        call, and then checks every update since the last read. A non-finite loss or norm
        therefore stops the run with :class:`TrainingDiverged` naming the first bad update, up to
        ``log_every`` updates after it, but always before a checkpoint is written; and every
        save (and the end of every call) first checks that the weights and the optimizer state
        are finite. So ``last.pt`` is always the last good state.
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
        self._unchecked = []
        window = {"loss": 0.0, "tokens": 0, "start": time.perf_counter()}
        started, elapsed_before = time.perf_counter(), self.elapsed
        self._stop_signal = None
        with self._holding_lock(), contextlib.closing(bar), self._stopping_on_signals():
            while self.step < target and self.stop_reason is None and self._stop_signal is None:
                step = self.step + 1
                lr = self.optimizer.param_groups[0]["lr"]
                evaluating = self.eval_data is not None and (
                    (config.eval_every is not None and step % config.eval_every == 0)
                    or step == config.max_steps
                )
                logging = evaluating or step % config.log_every == 0 or step == target
                saving = config.save_every is not None and step % config.save_every == 0
                batches = [next(self._batches) for _ in range(config.accumulation)]
                checked = self._update(batches, check=logging or saving)
                self.elapsed = elapsed_before + time.perf_counter() - started
                for loss, tokens in checked:
                    window["loss"] += loss * tokens
                    window["tokens"] += tokens
                bar.update(1)
                if checked:  # loss: the last update read
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
                self._trigger("on_update")
                if logging:
                    self._log(window, lr, evaluating, bar)
                if self.step == config.max_steps and self.stop_reason is None:
                    self.stop_reason = "max_steps"
                if self.stop_reason is None and (
                    saving or (config.save_every is None and evaluating)
                ):
                    self.save()
            if self._stop_signal is not None and self._unchecked:
                self._read_unchecked()  # a diverged run is reported as such, never saved
            if self.save() is None:  # no checkpoint_dir: still, a diverged run never returns
                self.check_finite()
        if self._stop_signal is not None:
            checkpoint = self.last_checkpoint if self.run_dir is not None else None
            raise TrainingInterrupted(self.step, checkpoint, self._stop_signal)
        return self.history

    @contextlib.contextmanager
    def _stopping_on_signals(self) -> Iterator[None]:
        """While the loop runs, Ctrl-C and SIGTERM ask it to stop at the end of the update under
        way (which :meth:`fit` then saves); a second Ctrl-C raises KeyboardInterrupt at once.
        Only one process in its main thread: under several, the processes must agree on the
        step they stop at, so a signal there ends the run as it always did."""
        if (
            self.distributed.world_size > 1
            or threading.current_thread() is not threading.main_thread()
        ):
            yield
            return

        def request_stop(number: int, frame: Any) -> None:
            if self._stop_signal is not None and number == signal.SIGINT:
                raise KeyboardInterrupt  # asked twice: stop now, saving nothing more
            self._stop_signal = signal.Signals(number).name

        numbers = [getattr(signal, name) for name in STOP_SIGNALS]
        previous = {number: signal.signal(number, request_stop) for number in numbers}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, signal.SIG_DFL if handler is None else handler)

    def _log(self, window: dict[str, Any], lr: float, evaluating: bool, bar: tqdm) -> None:
        """Append a history row (evaluating first if asked); save ``best.pt`` on improvement."""
        seconds = max(time.perf_counter() - window["start"], 1e-9)
        row = {
            "step": self.step,
            "epoch": self.epoch,
            "lr": lr,
            "train_loss": window["loss"] / max(window["tokens"], 1),
            "tokens_per_second": window["tokens"] / seconds,
            "wall_time": self.elapsed,
        }
        improved = False
        if evaluating:
            metrics = self.evaluate()
            improved = self._track(metrics)
            row.update({f"eval_{key}": value for key, value in metrics.items()})
            bar.set_postfix(loss=f"{row['train_loss']:.4f}", eval=f"{metrics['loss']:.4f}")
            self._trigger("on_evaluate", metrics)
        self.history.append(row)
        if self.run_dir is not None and self.distributed.is_main:
            write_history(self.run_dir, self.history)
        self._trigger("on_log", row)
        if evaluating and not math.isfinite(row["eval_loss"]):  # finite weights, broken model
            raise TrainingDiverged(
                self.step, "evaluation loss", row["eval_loss"], self.last_checkpoint
            )
        if improved:
            self.save("best.pt")
        window.update(loss=0.0, tokens=0, start=time.perf_counter())

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
        try:
            return read_losses(unchecked, self.last_checkpoint)
        except TrainingDiverged:
            self.optimizer.zero_grad(set_to_none=True)
            raise

    def check_finite(self) -> None:
        """Raise :class:`TrainingDiverged` if a weight or an optimizer moment is not finite (one
        device read). Every save calls it first."""
        check_finite_state(self.model, self.optimizer, self.step, self.last_checkpoint)

    def evaluate(self) -> dict[str, float]:
        """:func:`~annotated_transformer.train.evaluate` on the evaluation data, plus
        ``extra_metrics``."""
        if self.eval_data is None:
            raise ValueError("this Trainer has no eval_data to evaluate on")
        metrics = evaluate(
            self.model,
            evaluation_batches(self.eval_data, self.config.seed),
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
        improved = self.early_stopping.update(metrics[name], self.step)
        if self.early_stopping.should_stop:
            self.stop_reason = "early_stopping"
        return improved

    # -- checkpoints -----------------------------------------------------------------------------

    def _holding_lock(self) -> contextlib.AbstractContextManager:
        """The run directory's lock for the duration (main process; others hold nothing)."""
        return contextlib.nullcontext() if self.lock is None else self.lock.holding()

    def state_dict(self) -> dict[str, Any]:
        """Everything a run needs to continue exactly, as tensors and plain data.

        Keys: ``format``, ``step``, ``epoch`` and ``batch_index`` (the data position),
        ``model_config``, ``train_config``, ``model``, ``optimizer``, ``scheduler``, ``tokenizer``,
        ``task``, ``rng`` (one entry per process), ``history``, ``early_stopping``, ``elapsed``,
        ``changes`` (settings changed on resume). Every process must call it (it gathers the
        processes' random states).
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
            "early_stopping": {**self.early_stopping.state_dict(), "stop_reason": self.stop_reason},
            "elapsed": self.elapsed,
            "changes": self.changes,
        }

    def save(self, name: str = "last.pt") -> Path | None:
        """Write the state to ``checkpoint_dir / name`` atomically (main process; all must call).

        Raises :class:`TrainingDiverged` instead of writing non-finite weights or optimizer
        state, and ``CheckpointWriteError`` (an OSError) when the disk is full; either way the
        previous file is kept.
        """
        if self.run_dir is None:
            return None
        self.check_finite()
        state = self.state_dict()
        path = self.run_dir / name
        if self.distributed.is_main:
            with self._holding_lock():
                save_checkpoint(path, state)
        if name == "last.pt":
            self.last_checkpoint = path
        return path

    def resume(self, path: str | os.PathLike, allow_changes: Iterable[str] = ()) -> None:
        """Continue from a checkpoint: weights, optimizer, schedule, data position, random state.

        The checkpoint must come from this very run: its model config, train config, task and
        tokenizer are compared with this trainer's, and any difference raises one
        :class:`~annotated_transformer.resuming.ResumeMismatch` listing them all, unless the
        train-config field is named in ``allow_changes`` and may change on resume (see
        :mod:`annotated_transformer.resuming`). Allowed changes take effect (a new ``lr`` is the
        optimizer's from the next update; the schedule is the new config's, evaluated at the
        resumed step) and are recorded in :attr:`changes` and in later checkpoints.

        Raises ``CheckpointError`` for a file that is not a usable checkpoint (damaged,
        incomplete, or holding non-finite weights or optimizer state).
        """
        current = {
            "model": self.model_config.to_dict(),
            "train": self.config.to_dict(),
            "task": self.task,
            "tokenizer": self.tokenizer,
        }
        read_task = None if self.task_type is None else self.task_type.from_dict
        state, changes = read_resume_state(path, current, allow_changes, read_task)
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, KeyError, ValueError) as error:
            first_line = (str(error).splitlines() or [type(error).__name__])[0]
            raise CheckpointError(f"{path} does not fit this run: {first_line}") from error
        # Allowed changes take effect: the new schedule at the resumed step, the new decay.
        set_schedule(
            self.scheduler,
            self.config.schedule,
            **self.config.schedule_arguments(self.model_config.d_model),
        )
        set_weight_decay(self.optimizer, self.config.weight_decay)
        self.step, self.epoch, self.batch_index = (
            state["step"],
            state["epoch"],
            state["batch_index"],
        )
        self.history = list(state["history"])
        self.early_stopping.load_state_dict(state["early_stopping"])
        self.stop_reason = None
        self.elapsed = state.get("elapsed", 0.0)
        self.changes = list(state.get("changes", []))
        self.changes += [
            {"step": self.step, "field": name.removeprefix("train."), "from": old, "to": new}
            for name, old, new in changes
        ]
        if len(state["rng"]) == self.distributed.world_size:
            set_rng_state(state["rng"][self.distributed.rank])
        else:  # another number of processes: the data order continues, dropout cannot
            seed_everything(self.config.seed + self.distributed.rank + self.step)
        self.last_checkpoint = Path(path)
        self._batches = None
        if self.run_dir is not None and self.distributed.is_main:
            # snapshots of a later trajectory (resumed from an earlier checkpoint) are not this
            # run's: averaging must not mix them in
            for later in evaluation_checkpoints(self.run_dir, after=self.step):
                later.unlink(missing_ok=True)
