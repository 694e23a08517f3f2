"""Attention masks (chapter 02).

One convention everywhere in this package: a boolean mask where **True means "may attend"**, the
way ``F.scaled_dot_product_attention`` reads it. ``torch.nn.MultiheadAttention``'s
``key_padding_mask`` and ``attn_mask`` (bool) read it the other way round (True = blocked); we
convert once, at the border, with :func:`to_torch_blocked`.

Masks broadcast against attention scores of shape ``[B, H, T_q, T_k]``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular mask: position ``i`` may attend to positions ``j <= i``.

    Returns:
        bool tensor ``[size, size]``, True on and below the diagonal.
    """
    if size < 0:
        raise ValueError(f"causal_mask: size must be >= 0, got {size}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Mask out the keys that are padding.

    Args:
        tokens: integer token ids ``[B, S]``.
        pad_id: the id used for padding.

    Returns:
        bool tensor ``[B, 1, 1, S]``: True where the key is a real token. It broadcasts over heads
        and query positions.
    """
    if tokens.dim() != 2:
        raise ValueError(f"padding_mask: tokens must be [B, S], got shape {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]  # [B, 1, 1, S]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of masks that broadcast together; ``None`` entries are skipped.

    ``combine_masks(padding_mask(tgt, pad), causal_mask(T))`` gives ``[B, 1, T, T]``: a target
    position may attend to earlier, non-padding positions.
    """
    result: Tensor | None = None
    for mask in masks:
        if mask is None:
            continue
        if mask.dtype != torch.bool:
            raise TypeError(
                f"combine_masks: masks must be bool (True = may attend), got {mask.dtype}"
            )
        result = mask if result is None else result & mask
    return result


def decoder_mask(tokens: Tensor, pad_id: int | None) -> Tensor:
    """The target-side self-attention mask: causal, and no attention to padding.

    Args:
        tokens: ``[B, T]`` target token ids.
        pad_id: padding id, or None when the batch has no padding.

    Returns:
        bool ``[B, 1, T, T]`` (or ``[T, T]`` when ``pad_id`` is None).
    """
    causal = causal_mask(tokens.size(-1), device=tokens.device)  # [T, T]
    if pad_id is None:
        return causal
    return combine_masks(padding_mask(tokens, pad_id), causal)  # [B, 1, T, T]


def to_torch_blocked(mask: Tensor) -> Tensor:
    """Convert our convention (True = may attend) to ``nn.MultiheadAttention``'s (True = blocked)."""
    return ~mask
