"""Normalisation layers written from scratch (chapter 04).

- LayerNorm (Ba et al. 2016): ``y = (x - mean) / sqrt(var + eps) * gain + bias``, statistics
  over the feature dimension of each position; ``var`` is the biased (population) variance.
- RMSNorm (Zhang & Sennrich 2019): ``y = x / sqrt(mean(x²) + eps) * gain``; no centring, no bias,
  fewer operations, and in practice as good (whether it is also faster depends on the kernels a
  library has for a device: chapter 04 times both paths).

Each layer has two paths that compute the same numbers, like attention: the explicit formula
(``explicit=True``, what chapter 04 derives) and, by default, PyTorch's fused kernel
(``F.layer_norm`` / ``F.rms_norm``). The formula runs about ten elementwise kernels and keeps
their intermediates for the backward pass; the fused kernel runs one (``benchmarks/run.py``
measures what that is worth). Tests hold both paths to ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORM_CHOICES = ("layernorm", "rmsnorm")


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension; matches ``torch.nn.LayerNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-5, explicit: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.explicit = explicit  # True: the formula below; False: the fused kernel
        self.weight = nn.Parameter(torch.ones(d_model))  # gain
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[..., d_model]``; returns the same shape."""
        if not self.explicit:
            return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)  # [..., 1]
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # [..., 1], biased
        return (x - mean) * torch.rsqrt(variance + self.eps) * self.weight + self.bias


_HALF_PRECISION = (torch.bfloat16, torch.float16)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation; matches ``torch.nn.RMSNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-5, explicit: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.explicit = explicit  # True: the formula below; False: the fused kernel
        self.weight = nn.Parameter(torch.ones(d_model))  # gain

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[..., d_model]``; returns the same shape.

        On a CPU with ``x`` in bf16 or fp16 (autocast's output) the formula runs instead of
        ``F.rms_norm``: there torch 2.13 has no fused low-precision kernel for it (a gain in fp32
        also refuses the fused path), and the formula's forward and backward take about a third
        of the time, with one more rounding of the root mean square to the input's precision.
        """
        if not self.explicit and not (x.device.type == "cpu" and x.dtype in _HALF_PRECISION):
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)
        weight = self.weight.to(x.dtype)  # [d_model]; a no-op in fp32
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # [..., 1]
        return x * torch.rsqrt(mean_square + self.eps) * weight


def build_norm(name: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """The normalisation layer called ``name`` (one of :data:`NORM_CHOICES`)."""
    if name == "layernorm":
        return LayerNorm(d_model, eps)
    if name == "rmsnorm":
        return RMSNorm(d_model, eps)
    raise ValueError(f"norm={name!r} is not one of: {', '.join(NORM_CHOICES)}")
