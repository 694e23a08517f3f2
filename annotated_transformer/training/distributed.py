"""Training on several processes: ``torchrun`` with DistributedDataParallel (chapter 08).

Launch any training script or the command line with ``torchrun --nproc_per_node=N``: torchrun sets
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``, :func:`init_distributed` joins the process group (NCCL
on CUDA, gloo on CPU), and the trainer wraps the model in DistributedDataParallel, which averages
the gradients of the processes after each backward pass.

How the work is split: every process reads the same global batches and keeps its own rows of each
(:meth:`Distributed.shard`). With the loss normalised by the tokens of the global batch (see
:func:`~annotated_transformer.train.accumulate_gradients`), N processes compute the same update as
one process on the whole batch, up to floating-point summation order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..config import DEVICE_CHOICES, check_choice
from ..data.batch import Batch


@dataclass(frozen=True)
class Distributed:
    """Which process this is among how many; the default is the only one."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def current(cls) -> Distributed:
        """The process group ``torch.distributed`` was initialised with, if any."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, batch: Batch) -> tuple[Batch, float]:
        """This process's rows of ``batch`` and the weight of its loss (0: a stand-in row).

        A batch with fewer rows than processes leaves some with none; they run its first row with
        weight 0, because every process must run backward for DistributedDataParallel.
        """
        if self.world_size == 1:
            return batch, 1.0
        rows = torch.arange(batch.inputs.size(0)).tensor_split(self.world_size)[self.rank]
        if rows.numel() == 0:
            return _rows(batch, 0, 1), 0.0
        return _rows(batch, int(rows[0]), int(rows[-1]) + 1), 1.0

    def sum(self, tensor: Tensor) -> Tensor:
        """The sum of ``tensor`` over the processes (itself when there is one)."""
        if self.world_size > 1:
            tensor = tensor.clone()
            dist.all_reduce(tensor)
        return tensor

    def gather(self, value: Any) -> list[Any]:
        """``value`` of every process, in rank order."""
        if self.world_size == 1:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values


def _rows(batch: Batch, start: int, stop: int) -> Batch:
    src = None if batch.src is None else batch.src[start:stop]
    return Batch(batch.inputs[start:stop], batch.targets[start:stop], src)


def init_distributed(device: str = "auto") -> Distributed:
    """Join the process group when launched by ``torchrun`` (``WORLD_SIZE`` set); else one process.

    The backend is NCCL when training on CUDA, gloo on CPU.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Distributed.current()
    if not dist.is_initialized():
        cuda = device == "cuda" or (device == "auto" and auto_device() == "cuda")
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return Distributed.current()


def mps_available() -> bool:
    """Whether torch can compute on Apple silicon's GPU (Metal Performance Shaders)."""
    backend = getattr(torch.backends, "mps", None)
    return backend is not None and backend.is_available()


def auto_device() -> str:
    """What ``device='auto'`` picks: ``cuda`` when available, else ``mps`` (Apple silicon), else
    ``cpu``."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if mps_available() else "cpu"


def resolve_device(choice: str, distributed: Distributed | None = None) -> torch.device:
    """``cpu``, ``cuda`` (this process's GPU under torchrun), ``mps`` (Apple silicon), or
    ``auto``: :func:`auto_device`'s pick."""
    check_choice("device", choice, DEVICE_CHOICES)
    choice = auto_device() if choice == "auto" else choice
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "mps":
        if not mps_available():
            raise ValueError(
                "device='mps' is not available: torch finds no Apple-silicon GPU (MPS needs a "
                "Mac with Apple silicon and macOS 12.3+); use device='cpu', or 'auto' (cuda, "
                "else mps, else cpu)"
            )
        return torch.device("mps")
    if not torch.cuda.is_available():
        raise ValueError(
            "device='cuda' is not available: torch finds no CUDA device; use device='cpu', or "
            "'auto' (cuda, else mps, else cpu)"
        )
    local_rank = (distributed or Distributed()).local_rank
    if local_rank >= torch.cuda.device_count():
        raise ValueError(
            f"device='cuda' for local rank {local_rank} needs {local_rank + 1} CUDA devices, but "
            f"torch finds {torch.cuda.device_count()}: start fewer processes per node"
        )
    return torch.device("cuda", local_rank)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile`` and DistributedDataParallel wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model
