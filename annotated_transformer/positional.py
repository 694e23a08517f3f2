"""Positional information (chapter 03), chosen by name.

Attention is permutation-equivariant: without positional information a Transformer encoder cannot
tell "dog bites man" from "man bites dog". Three families put order back in:

- added to the embeddings: ``sinusoidal`` (Vaswani et al. 2017 §3.5) and ``learned`` (BERT, GPT-2);
- added to the attention logits: ``relative`` (a learned bias per head and clipped relative
  distance, Shaw et al. 2018 / Raffel et al. 2020) and ``alibi`` (a fixed linear penalty, Press et
  al. 2022);
- rotating queries and keys: ``rope`` (Su et al. 2021).

``none`` adds nothing (a causal decoder can still infer position from the mask).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

POSITIONAL_CHOICES = ("sinusoidal", "learned", "relative", "rope", "alibi", "none")


def sinusoidal_table(length: int, d_model: int, offset: int = 0) -> Tensor:
    """Vaswani et al. §3.5: ``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(...)``.

    Returns:
        float ``[length, d_model]`` for positions ``offset .. offset + length - 1``.
    """
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal encodings need an even d_model, got {d_model}")
    position = torch.arange(offset, offset + length, dtype=torch.float64)[:, None]  # [T, 1]
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # [d_model / 2]
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table.float()  # [T, d_model]


def sinusoidal_shift_matrix(shift: int, d_model: int) -> Tensor:
    """The fixed linear map ``M_k`` with ``PE(pos + k) = M_k · PE(pos)`` for every ``pos``.

    Each (sin, cos) pair at frequency ω is rotated by the angle ``k·ω``, so ``M_k`` is block
    diagonal with 2×2 rotation blocks. This is why the paper hoped the model could "attend by
    relative positions".

    Returns:
        float64 ``[d_model, d_model]``.
    """
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )
    angle = shift * frequency  # [d_model / 2]
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b
    matrix[0::2, 0::2] = torch.diag(torch.cos(angle))
    matrix[0::2, 1::2] = torch.diag(torch.sin(angle))
    matrix[1::2, 0::2] = torch.diag(-torch.sin(angle))
    matrix[1::2, 1::2] = torch.diag(torch.cos(angle))
    return matrix


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table; positions beyond ``max_len`` are computed on the fly."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x``: ``[B, T, d_model]`` embeddings of positions ``offset .. offset + T - 1``."""
        length = x.size(1)
        if offset + length <= self.table.size(0):
            table = self.table[offset : offset + length]  # [T, d_model]
        else:
            table = sinusoidal_table(length, self.d_model, offset).to(x.device)
        return x + table.to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per absolute position (BERT, GPT-2); cannot go beyond ``max_len``."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.size(1)
        if offset + length > self.max_len:
            raise ValueError(
                f"sequence reaches position {offset + length} but positional='learned' has "
                f"embeddings for max_len={self.max_len} positions only; raise max_len or use a "
                f"positional choice that extrapolates (sinusoidal, relative, rope, alibi)"
            )
        positions = torch.arange(offset, offset + length, device=x.device)  # [T]
        return x + self.embedding(positions)  # [B, T, d_model]


def relative_positions(query_len: int, key_len: int, offset: int, device=None) -> Tensor:
    """``j - i`` for query ``i`` (at absolute position ``i + offset``) and key ``j``.

    Returns:
        int64 ``[T_q, T_k]``.
    """
    query_positions = torch.arange(offset, offset + query_len, device=device)[:, None]
    key_positions = torch.arange(key_len, device=device)[None, :]
    return key_positions - query_positions  # [T_q, T_k]


class RelativePositionBias(nn.Module):
    """A learned scalar per head and clipped relative distance, added to the attention logits.

    ``bias[h, i, j] = w[h, clip(j - i, -K, K)]`` with ``K = max_distance``: Shaw et al. 2018 clip
    the distance the same way; Raffel et al. 2020 (T5) use a scalar bias per head, as here (T5 buckets
    distances logarithmically, which we skip for clarity). One table is shared by all layers of a
    stack, as in T5.
    """

    def __init__(self, n_heads: int, max_distance: int = 16) -> None:
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"relative_max_distance must be >= 1, got {max_distance}")
        self.max_distance = max_distance
        self.bias = nn.Embedding(2 * max_distance + 1, n_heads)  # [2K + 1, H]
        nn.init.zeros_(self.bias.weight)

    def forward(self, query_len: int, key_len: int, offset: int = 0) -> Tensor:
        """Returns float ``[1, H, T_q, T_k]``."""
        distance = relative_positions(query_len, key_len, offset, self.bias.weight.device)
        index = distance.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.bias(index).permute(2, 0, 1)[None]  # [1, H, T_q, T_k]


def alibi_slopes(n_heads: int) -> Tensor:
    """The head slopes of Press et al. 2022 (§3): a geometric sequence starting at ``2^(-8/n)``.

    For ``n`` a power of two the slopes are ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. Otherwise the
    paper's code takes the slopes of the closest smaller power of two ``m`` and adds every other
    slope of ``2m`` heads.

    Returns:
        float ``[n_heads]``.
    """

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads <= 0:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    if math.log2(n_heads).is_integer():
        slopes = power_of_two_slopes(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two_slopes(closest)
        slopes += power_of_two_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


class ALiBi(nn.Module):
    """Attention with Linear Biases: ``bias[h, i, j] = -slope_h · |i - j|``; nothing is learned."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, query_len: int, key_len: int, offset: int = 0) -> Tensor:
        """Returns float ``[1, H, T_q, T_k]``."""
        distance = relative_positions(query_len, key_len, offset, self.slopes.device).abs()
        return -self.slopes[None, :, None, None] * distance[None, None]  # [1, H, T_q, T_k]


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate each pair ``(x_2i, x_2i+1)`` by the angle ``pos · θ_i``.

    With ``θ_i = base^(-2i/d_k)``, the score between a query at position ``m`` and a key at ``n``
    depends on ``m - n`` only: ``<R_m q, R_n k> = <q, R_{n-m} k>``. Pairs are adjacent dimensions,
    as in the paper's eq. (34) (some libraries pair dimension ``i`` with ``i + d_k/2`` instead).
    """

    def __init__(self, d_k: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_k % 2 != 0:
            raise ValueError(f"rope needs an even head size d_k, got d_k={d_k}")
        self.d_k = d_k
        self.base = base

    def angles(
        self, length: int, offset: int = 0, *, device=None, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` of the angles ``pos · θ_i`` of positions ``offset .. offset + length - 1``.

        Computed here rather than kept in a buffer that a ``model.half()`` would round: at position
        4000 a bf16 angle is off by ~16. The angles take ``dtype`` promoted to at least float32
        (float64 for a float64 model); :func:`apply_rotary` casts them to the rotated tensor's.

        Returns:
            two ``[length, d_k / 2]`` tensors.
        """
        dtype = torch.promote_types(dtype, torch.float32)
        exponents = torch.arange(0, self.d_k, 2, device=device, dtype=dtype) / self.d_k
        inverse_frequency = self.base**-exponents  # [d_k / 2]
        positions = torch.arange(offset, offset + length, device=device, dtype=dtype)  # [T]
        angle = positions[:, None] * inverse_frequency[None, :]  # [T, d_k / 2]
        return angle.cos(), angle.sin()

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x``: ``[B, H, T, d_k]`` at positions ``offset .. offset + T - 1``; returns the same shape."""
        cos, sin = self.angles(x.size(-2), offset, device=x.device, dtype=x.dtype)
        return apply_rotary(x, cos, sin)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each adjacent pair ``(x_2i, x_2i+1)`` of ``x`` ``[..., T, d_k]`` by its angle.

    ``cos``, ``sin``: ``[T, d_k / 2]`` from :meth:`RotaryEmbedding.angles`, cast to ``x``'s dtype.
    """
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    pairs = x.unflatten(-1, (-1, 2))  # [..., T, d_k / 2, 2]
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # [..., T, d_k]


@dataclass(frozen=True)
class PositionState:
    """What self-attention needs to know about the positions of one forward pass.

    Computed once per call of a stack (:meth:`PositionalEncoding.position_state`) and handed to
    every layer, as Hugging Face's Llama hands its ``position_embeddings`` down: the relative or
    ALiBi logit bias and the rotary angles are then built once, not once per layer.

    Attributes:
        offset: absolute position of the first query (the length of a key/value cache).
        bias: float ``[1, H, T_q, T_k]`` added to the logits (relative, alibi), or None.
        cos, sin: ``[T_q, d_k / 2]`` rotary angles of the queries' positions (rope), or None.
    """

    offset: int = 0
    bias: Tensor | None = None
    cos: Tensor | None = None
    sin: Tensor | None = None

    def rotate(self, x: Tensor) -> Tensor:
        """Queries or keys ``[B, H, T_q, d_k]`` rotated by their positions (unchanged without rope)."""
        return x if self.cos is None else apply_rotary(x, self.cos, self.sin)


class PositionalEncoding(nn.Module):
    """One stack's positional scheme, chosen by name; the model asks it three questions.

    - :meth:`add_absolute`: what to add to the token embeddings (sinusoidal, learned);
    - :meth:`attention_bias`: what to add to self-attention logits (relative, alibi);
    - :attr:`rotary`: how to rotate queries and keys (rope).

    :meth:`position_state` answers the last two for one forward pass, as one
    :class:`PositionState` that the stack hands to each of its layers.
    """

    def __init__(
        self,
        name: str,
        *,
        d_model: int,
        n_heads: int,
        max_len: int,
        relative_max_distance: int = 16,
        rope_base: float = 10000.0,
        d_k: int | None = None,
    ) -> None:
        """``d_k``: each head's query and key size, which rope rotates (default
        ``d_model // n_heads``); relative and alibi add one scalar per head and need no size."""
        super().__init__()
        if name not in POSITIONAL_CHOICES:
            raise ValueError(f"positional={name!r} is not one of: {', '.join(POSITIONAL_CHOICES)}")
        self.name = name
        self.absolute: nn.Module | None = None
        self.bias: nn.Module | None = None
        self.rotary: RotaryEmbedding | None = None
        if name == "sinusoidal":
            self.absolute = SinusoidalPositionalEncoding(d_model, max_len)
        elif name == "learned":
            self.absolute = LearnedPositionalEmbedding(d_model, max_len)
        elif name == "relative":
            self.bias = RelativePositionBias(n_heads, relative_max_distance)
        elif name == "alibi":
            self.bias = ALiBi(n_heads)
        elif name == "rope":
            self.rotary = RotaryEmbedding(d_model // n_heads if d_k is None else d_k, rope_base)

    def add_absolute(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x``: ``[B, T, d_model]`` embeddings; returns them with absolute positions added."""
        return x if self.absolute is None else self.absolute(x, offset)

    def attention_bias(self, query_len: int, key_len: int, offset: int = 0) -> Tensor | None:
        """``[1, H, T_q, T_k]`` logit bias for self-attention, or None."""
        return None if self.bias is None else self.bias(query_len, key_len, offset)

    def position_state(
        self, length: int, offset: int = 0, *, device=None, dtype: torch.dtype = torch.float32
    ) -> PositionState:
        """The bias and the rotary angles of ``length`` new positions from ``offset`` on, at once.

        Self-attention's keys are positions ``0 .. offset + length - 1`` (a cache holds the first
        ``offset``). ``dtype``: the stream's, for the rotary angles (at least float32).
        """
        cos = sin = None
        if self.rotary is not None:
            cos, sin = self.rotary.angles(length, offset, device=device, dtype=dtype)
        bias = self.attention_bias(length, offset + length, offset)  # [1, H, T_q, T_k] or None
        return PositionState(offset, bias, cos, sin)
