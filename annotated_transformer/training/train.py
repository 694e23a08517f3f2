"""The functions of training (chapter 08); the loop itself is :class:`~annotated_transformer.
trainer.Trainer`, its settings :class:`~annotated_transformer.config.TrainConfig`.

- :func:`seed_everything`, the one place that seeds Python, numpy and torch;
- :func:`data_generator`, the generator of one epoch of a data source (below);
- :func:`forward_logits`, one forward pass for any of the three architectures;
- :func:`accumulate_gradients`: forward and backward over the micro-batches of one optimizer
  update, the loss summed over target tokens and divided by the tokens of the *whole update* (all
  micro-batches, all processes), so the accumulated gradient equals the gradient of one big batch
  even when micro-batches hold different numbers of tokens;
- :func:`evaluate`: loss, perplexity and token accuracy;
- :class:`TrainingDiverged`, raised when the loss, the gradient norm or the weights stop being
  finite.

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
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..config import PRECISION_CHOICES, check_choice
from ..data.batch import Batch
from ..losses import LabelSmoothingLoss
from ..metrics import perplexity, token_accuracy, token_loss
from .checkpoint import first_non_finite
from .distributed import Distributed, unwrap

DataSource = Callable[[int, torch.Generator], Iterable[Batch]]
EVALUATION_METRICS = ("loss", "perplexity", "accuracy", "tokens")  # what evaluate() returns


class TrainingDiverged(FloatingPointError):
    """The loss, the gradient norm or the weights stopped being finite numbers.

    Attributes: ``step`` (the update), ``quantity`` (``"loss"``, ``"gradient norm"``,
    ``"weights"`` or ``"optimizer state"``), ``value`` (the first non-finite value) and
    ``checkpoint`` (the last good checkpoint written, or None). Nothing non-finite is ever saved,
    so ``checkpoint`` holds finite weights and optimizer state.
    """

    def __init__(
        self,
        step: int,
        quantity: str,
        value: float,
        checkpoint: Path | None,
        where: str | None = None,
    ) -> None:
        self.step, self.quantity, self.value, self.checkpoint = step, quantity, value, checkpoint
        kept = (
            f"the last good checkpoint is kept at {checkpoint}"
            if checkpoint is not None
            else "no checkpoint of this run was written before it"
        )
        located = f" (first in {where})" if where else ""
        verb = {"weights": "hold", "optimizer state": "holds"}.get(quantity, "is")
        super().__init__(
            f"training diverged at update {step}: the {quantity} {verb} {value}{located}; {kept}. "
            f"Lower the learning rate, lengthen the warmup or set grad_clip, then resume from the "
            f"last good checkpoint or restart."
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


def iterate_epochs(
    source: DataSource, seed: int, epoch: int = 0, batch_index: int = 0
) -> Iterator[tuple[int, int, Batch]]:
    """``(epoch, batches consumed in it, batch)`` from a data position on, epoch after epoch.

    Resuming at ``(epoch, batch_index)`` calls ``source(epoch, data_generator(seed, epoch))``
    again and skips ``batch_index`` batches, so a source must yield the same batches for the
    same arguments.
    """
    while True:
        batches = iter(source(epoch, data_generator(seed, epoch)))
        for skipped in range(batch_index):
            if next(batches, None) is None:
                raise RuntimeError(
                    f"the training data yielded {skipped} batches in epoch {epoch} on "
                    f"resumption, but {batch_index} before: a data source must yield the "
                    f"same batches for the same (epoch, generator)"
                )
        for batch in batches:
            batch_index += 1
            yield epoch, batch_index, batch
        if batch_index == 0:
            raise ValueError(f"the training data yielded no batches in epoch {epoch}")
        epoch, batch_index = epoch + 1, 0


def read_losses(
    unchecked: list[tuple[int, Tensor, int, Tensor | None]], checkpoint: Path | None
) -> list[tuple[float, int]]:
    """Read the losses (and gradient norms) of updates kept on the device, in one wait.

    Args:
        unchecked: ``(update, loss summed over tokens, tokens, gradient norm or None)`` each.
        checkpoint: the last good checkpoint, for the message of :class:`TrainingDiverged`.

    Returns ``(mean loss per target token, tokens)`` per update; raises
    :class:`TrainingDiverged` at the first non-finite loss or norm.
    """
    loss_sums = torch.stack([loss_sum for _, loss_sum, _, _ in unchecked]).tolist()
    norms = [norm for *_, norm in unchecked]
    if any(norm is not None for norm in norms):
        norms = torch.stack(norms).tolist()
    checked = []
    for (step, _, tokens, _), loss_sum, norm in zip(unchecked, loss_sums, norms, strict=True):
        loss = loss_sum / max(tokens, 1)
        for quantity, value in (("loss", loss), ("gradient norm", norm)):
            if value is not None and not math.isfinite(value):
                raise TrainingDiverged(step, quantity, value, checkpoint)
        checked.append((loss, tokens))
    return checked


def check_finite_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, step: int, checkpoint: Path | None
) -> None:
    """Raise :class:`TrainingDiverged` if a weight or an optimizer moment is NaN or infinite."""
    for quantity, tree in (
        ("weights", model.state_dict()),
        ("optimizer state", optimizer.state_dict()["state"]),
    ):
        bad = first_non_finite(tree)
        if bad is not None:
            raise TrainingDiverged(step, quantity, bad[1], checkpoint, where=bad[0])


def evaluation_batches(data: DataSource | Iterable[Batch], seed: int) -> Iterable[Batch]:
    """Evaluation batches from a data source (called with epoch 0, a generator seeded with
    ``seed``: the same batches at every evaluation) or from a re-iterable of batches."""
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
    check_choice("precision", precision, PRECISION_CHOICES)
    distributed = distributed or Distributed()
    inner = unwrap(model)
    arch = inner.config.arch
    device = next(inner.parameters()).device
    autocast = autocast_factory(device, precision)
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


# The CPU instructions that compute in bfloat16 natively (Intel Cooper Lake and later, AMD Zen 4
# and later). Without them CPU autocast emulates bf16 and runs slower than fp32: measured 10x
# slower on a 2-core AMD EPYC (Zen 3) training the ablation studies' 3 x 128 decoder.
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux lists them (empty where that file is missing)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return flags


def native_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` computes in bfloat16 natively: a CUDA GPU that supports it, or a CPU
    with :data:`NATIVE_BF16_CPU_FLAGS` (read from Linux's /proc/cpuinfo; elsewhere, no). Not
    MPS: its bfloat16 autocast depends on the macOS and torch versions, so ``precision='auto'``
    trains in fp32 there, which every Mac runs."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(cpu_flags() & set(NATIVE_BF16_CPU_FLAGS))
    return False


def resolve_precision(device: torch.device | str, precision: str) -> str:
    """``precision`` itself, or for ``"auto"`` ``"bf16"`` where :func:`native_bf16`, else
    ``"fp32"``."""
    check_choice("precision", precision, PRECISION_CHOICES)
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision


def autocast_factory(
    device: torch.device, precision: str
) -> Callable[[], contextlib.AbstractContextManager]:
    """A function returning the autocast context of a forward pass: bf16 autocast on ``device``
    for ``precision="bf16"``, a no-op context for ``"fp32"``; ``"auto"`` is
    :func:`resolve_precision`'s choice."""
    precision = resolve_precision(device, precision)
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def tokenizer_state(tokenizer: Any) -> Any:
    """What a checkpoint stores of a tokenizer: ``tokenizer.to_dict()`` if it has one, else the
    object as given (a dict or another JSON-serialisable value, or None)."""
    state = tokenizer.to_dict() if hasattr(tokenizer, "to_dict") else tokenizer
    try:
        json.dumps(state)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"a tokenizer's state must be JSON-serialisable data (dicts, lists, strings, "
            f"numbers), so checkpoints load with weights_only=True; got {type(state).__name__}: "
            f"{error}"
        ) from error
    return state
