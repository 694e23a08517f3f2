"""The one batch type every data set produces and the trainer consumes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Batch:
    """A training or evaluation batch, the same for the three architectures.

    - decoder-only language model: ``inputs = tokens[:, :-1]``, ``targets = tokens[:, 1:]``;
    - encoder-decoder translation: ``src`` the source, ``inputs`` the target shifted right
      (``bos`` first), ``targets`` the target followed by ``eos``;
    - encoder-only: ``inputs`` the (corrupted) tokens, ``targets`` what to predict at each position.

    Positions where ``targets == pad_id`` (or ``ignore_index``) carry no loss.
    """

    inputs: Tensor  # [B, T]
    targets: Tensor  # [B, T]
    src: Tensor | None = None  # [B, S], encoder-decoder only

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        def move(tensor: Tensor | None) -> Tensor | None:
            return None if tensor is None else tensor.to(device, non_blocking=non_blocking)

        return Batch(move(self.inputs), move(self.targets), move(self.src))

    def num_tokens(self, ignore_index: int | None) -> int:
        """Target tokens that carry loss (for per-token averaging under gradient accumulation)."""
        if ignore_index is None:
            return self.targets.numel()
        return int((self.targets != ignore_index).sum())
