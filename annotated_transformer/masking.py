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


def causal_mask(
    query_len: int, key_len: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Lower-triangular mask: each query may attend to its own position and the ones before it.

    With ``key_len = query_len`` (the default) query ``i`` sees keys ``j <= i``. With a key/value
    cache holding ``key_len - query_len`` earlier positions, the queries are the *last*
    ``query_len`` of ``key_len`` positions: query ``i`` sits at ``i + key_len - query_len`` and
    sees every key up to there (the square mask's last ``query_len`` rows).

    Returns:
        bool tensor ``[query_len, key_len]``, True on and below the (shifted) diagonal.
    """
    key_len = query_len if key_len is None else key_len
    if query_len < 0:
        raise ValueError(f"causal_mask: query_len must be >= 0, got {query_len}")
    if key_len < query_len:
        raise ValueError(
            f"causal_mask: key_len={key_len} < query_len={query_len}; the queries are the last "
            f"query_len of key_len positions, so there must be at least as many keys"
        )
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=key_len - query_len)  # [T_q, T_k]


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
