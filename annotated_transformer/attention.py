"""Scaled dot-product attention, multi-head attention and the key/value caches (chapter 01).

Vaswani et al. 2017, §3.2.1, eq. (1):

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

Masks are boolean, True = "may attend" (see :mod:`annotated_transformer.masking`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masking import causal_mask, combine_masks
from .norms import RMSNorm

# On a CPU, which of torch's kernels for F.scaled_dot_product_attention is faster depends on the
# precision. Causal forward plus backward on 2 cores with avx512_bf16 (benchmarks/README.md):
# in bf16 the fused (flash) kernel is 2.5x slower than the plain matmul-softmax-matmul path at
# 32-64 keys and 1.9x at 128, and 1.1-2x faster from 192 keys on; in fp32 the fused kernel is
# faster at every length (1.3-2x) and keeps no [B, H, T, T] weights for the backward pass. So a
# half-precision attention over at most this many keys takes the math path; everything else is
# torch's choice.
CPU_MATH_MAX_KEYS = 128


def _sdpa_backend(
    device: torch.device, key_len: int, dtype: torch.dtype
) -> contextlib.AbstractContextManager:
    """The kernel choice for F.scaled_dot_product_attention: the math path for short keys in
    half precision on a CPU (see CPU_MATH_MAX_KEYS), torch's own choice otherwise. Both compute
    the same function."""
    if device.type == "cpu" and dtype != torch.float32 and key_len <= CPU_MATH_MAX_KEYS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


if TYPE_CHECKING:  # chapter 03 builds it; attention (chapter 01) only reads it
    from .positional import PositionState


def dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
    *,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The explicit softmax(QKᵀ/√d_k + bias)V, returning the attention weights too.

    Args:
        query: ``[..., T_q, d_k]``.
        key: ``[..., T_k, d_k]``.
        value: ``[..., T_k, d_v]``.
        mask: bool, True = may attend, broadcastable to ``[..., T_q, T_k]``.
        dropout: applied to the attention weights (as in the paper's reference code), or None.
        bias: float, added to the logits before the softmax (relative-position bias, ALiBi),
            broadcastable to ``[..., T_q, T_k]``.

    Returns:
        ``(output [..., T_q, d_v], weights [..., T_q, T_k])``. A query whose keys are all masked
        gets all-zero weights and a zero output, never NaN.

    (Named after the paper's "Scaled Dot-Product Attention", §3.2.1, and not ``attention``, which
    is the name of this module: ``annotated_transformer.attention`` must stay importable.)
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # [..., T_q, T_k]
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        # The most negative finite number, not -inf: a fully masked row then softmaxes to a uniform
        # row (finite values and gradients) that we zero below, instead of 0/0 = NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # [..., T_q, T_k]
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # [..., T_q, d_v], [..., T_q, T_k]


@dataclass
class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding.

    Self-attention appends the new positions on every call. Cross-attention fills the cache once
    with the projected encoder memory and reuses it on every later step.
    """

    key: Tensor | None = None  # [B, H, T_cache, d_k]
    value: Tensor | None = None  # [B, H, T_cache, d_v]
    # Without autograd, ``key`` and ``value`` are views of these buffers, which have room for more
    # positions: appending one position writes it in place instead of copying the whole cache
    # (``torch.cat`` would copy T_cache positions per step: O(T²) for a T-token generation).
    _key_buffer: Tensor | None = field(default=None, repr=False)
    _value_buffer: Tensor | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return 0 if self.key is None else self.key.size(-2)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new keys ``[B, H, T_new, d_k]`` and values ``[B, H, T_new, d_v]``; return all
        keys and values so far."""
        if self.key is None:
            self.key, self.value = key, value
        elif torch.is_grad_enabled() and (key.requires_grad or self.key.requires_grad):
            # In-place writes would break autograd's views: copy (training through a cache).
            self.key = torch.cat([self.key, key], dim=-2)  # [B, H, T_cache + T_new, d_k]
            self.value = torch.cat([self.value, value], dim=-2)
        else:
            self._write(key, value)
        return self.key, self.value

    def _write(self, key: Tensor, value: Tensor) -> None:
        length, new_length = len(self), len(self) + key.size(-2)
        buffer = self._key_buffer
        # Our own buffer still backs self.key (nobody assigned another tensor) and has room.
        owned = buffer is not None and self.key.data_ptr() == buffer.data_ptr()
        if not owned or new_length > buffer.size(-2) or buffer.dtype != key.dtype:
            capacity = max(2 * new_length, 16)  # doubling: amortised O(1) copies per position
            shape = (*key.shape[:-2], capacity, key.size(-1))  # [B, H, capacity, d_k]
            self._key_buffer = key.new_empty(shape)
            self._value_buffer = value.new_empty((*shape[:-1], value.size(-1)))
            self._key_buffer[..., :length, :] = self.key
            self._value_buffer[..., :length, :] = self.value
        self._key_buffer[..., length:new_length, :] = key
        self._value_buffer[..., length:new_length, :] = value
        self.key = self._key_buffer[..., :new_length, :]  # [B, H, T_cache + T_new, d_k]
        self.value = self._value_buffer[..., :new_length, :]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search reorders hypotheses every step)."""
        if self.key is None:
            return
        buffer, length = self._key_buffer, len(self)
        if buffer is not None and self.key.data_ptr() == buffer.data_ptr():
            # Reorder the buffers (room included), so that the next append still writes in place.
            self._key_buffer = buffer.index_select(0, index)
            self._value_buffer = self._value_buffer.index_select(0, index)
            self.key = self._key_buffer[..., :length, :]
            self.value = self._value_buffer[..., :length, :]
        else:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


class LayerCache(NamedTuple):
    """One layer's key/value caches: its self-attention's, and its cross-attention's (a decoder)."""

    self_attention: KVCache
    cross_attention: KVCache | None = None


@dataclass
class DecoderCache:
    """Per-layer key/value caches of a decoder, for incremental decoding."""

    self_attention: list[KVCache]
    cross_attention: list[KVCache] = field(default_factory=list)
    key_mask: Tensor | None = None  # [B, 1, 1, T_cache]: which cached positions are not padding

    @property
    def length(self) -> int:
        """Number of positions decoded so far (the offset of the next position)."""
        return len(self.self_attention[0]) if self.self_attention else 0

    def layer(self, index: int) -> LayerCache:
        """The caches of layer ``index``."""
        cross = self.cross_attention[index] if self.cross_attention else None
        return LayerCache(self.self_attention[index], cross)

    def extend_key_mask(self, new: Tensor) -> Tensor:
        """Append ``new`` ``[B, 1, 1, T_new]`` and return the mask over all cached keys."""
        self.key_mask = new if self.key_mask is None else torch.cat([self.key_mask, new], dim=-1)
        return self.key_mask

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every cache (beam search)."""
        for cache in [*self.self_attention, *self.cross_attention]:
            cache.reorder(index)
        if self.key_mask is not None:
            self.key_mask = self.key_mask.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, Vaswani et al. 2017 §3.2.2.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The three input projections are stored as one ``[H·(2·d_k + d_v), d_model]`` matrix ``qkv``
    (rows ``W^Q``, then ``W^K``, then ``W^V``) so that self-attention projects in one matrix
    multiply. By default ``d_k = d_v = d_model / H`` (the paper's base model), and the matrix is
    ``[3·d_model, d_model]``, the layout of ``nn.MultiheadAttention.in_proj_weight``. ``d_k`` and
    ``d_v`` may be set apart from ``d_model`` (Table 3, row B changes ``d_k`` alone); ``W^O`` then
    maps the ``H·d_v`` concatenated values back to ``d_model``.

    ``qk_norm=True`` (Dehghani et al. 2023; OLMo 2, the modded-nanogpt speedrun) RMS-normalises
    each head's queries and keys over ``d_k`` (one learnt gain of ``d_k`` for the queries, one for
    the keys, shared by the heads) after the projection and before any rotation, which bounds the
    logits a head can produce.

    Two paths compute the same thing: the efficient one calls ``F.scaled_dot_product_attention``
    (fused kernels, no ``[T_q, T_k]`` weights kept); the explicit one calls
    :func:`dot_product_attention` and is taken when the weights are requested
    (``need_weights=True``) or ``use_sdpa`` is False.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        d_k: int | None = None,
        d_v: int | None = None,
        qk_norm: bool = False,
    ) -> None:
        super().__init__()
        if d_model <= 0 or n_heads <= 0:
            raise ValueError(f"d_model and n_heads must be positive, got {d_model} and {n_heads}")
        for name, size in (("d_k", d_k), ("d_v", d_v)):
            if size is not None and size <= 0:
                raise ValueError(f"{name}={size} is not accepted: use a positive size or None")
        if d_model % n_heads != 0 and (d_k is None or d_v is None):
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}: "
                f"each head gets d_model / n_heads dimensions unless d_k and d_v are given"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout} is not in [0, 1)")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads if d_k is None else d_k
        self.d_v = d_model // n_heads if d_v is None else d_v
        # Widths of the stacked projections: all heads' queries, keys, values.
        self._sizes = [n_heads * self.d_k, n_heads * self.d_k, n_heads * self.d_v]
        self.qkv = nn.Linear(d_model, sum(self._sizes), bias=bias)  # [W^Q; W^K; W^V]
        self.out = nn.Linear(n_heads * self.d_v, d_model, bias=bias)  # W^O
        self.dropout = nn.Dropout(dropout)
        self.use_sdpa = True
        # QK-norm: one gain over d_k for the queries and one for the keys (None: no norm)
        self.q_norm = RMSNorm(self.d_k) if qk_norm else None
        self.k_norm = RMSNorm(self.d_k) if qk_norm else None

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, -1).transpose(1, 2)  # [B, H, T, d_k or d_v]

    def _merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, -1)  # [B, T, H·d_v]

    def project(self, query: Tensor, key_value: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Project inputs to per-head queries, keys ``[B, H, T, d_k]`` and values
        ``[B, H, T, d_v]``."""
        if key_value is None:  # self-attention: one fused matmul
            q, k, v = self.qkv(query).split(self._sizes, dim=-1)  # [B, T, H·d_k] ×2, [B, T, H·d_v]
        else:  # cross-attention: queries from the decoder, keys and values from the memory
            query_rows, key_value_rows = self._sizes[0], self._sizes[1] + self._sizes[2]
            weight_q, weight_kv = self.qkv.weight.split([query_rows, key_value_rows])
            bias_q = bias_kv = None
            if self.qkv.bias is not None:
                bias_q, bias_kv = self.qkv.bias.split([query_rows, key_value_rows])
            q = F.linear(query, weight_q, bias_q)  # [B, T_q, H·d_k]
            k, v = F.linear(key_value, weight_kv, bias_kv).split(self._sizes[1:], dim=-1)
        q, k = self._split_heads(q), self._split_heads(k)  # [B, H, T, d_k]
        if self.k_norm is not None:
            k = self.k_norm(k)
        return self._normed_queries(q), k, self._split_heads(v)

    def _normed_queries(self, q: Tensor) -> Tensor:
        """``q`` ``[B, H, T, d_k]``, RMS-normalised over ``d_k`` when QK-norm is on."""
        return q if self.q_norm is None else self.q_norm(q)

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        positions: PositionState | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key_value`` (or to itself when ``key_value`` is None).

        Args:
            query: ``[B, T_q, d_model]``.
            key_value: ``[B, T_k, d_model]`` for cross-attention, None for self-attention.
            mask: bool, True = may attend, broadcastable to ``[B, H, T_q, T_k]``.
            is_causal: add the causal mask (offset by the cache length when a cache is used);
                without other masks or biases this takes the fused causal kernel.
            positions: self-attention's position state (rope's rotation, a relative or ALiBi
                logit bias ``[1 or B, H, T_q, T_k]``), from
                :meth:`~annotated_transformer.positional.PositionalEncoding.position_state`.
            cache: for incremental decoding; see :class:`KVCache`.
            need_weights: return the attention weights (takes the explicit path).

        Returns:
            ``(output [B, T_q, d_model], weights [B, H, T_q, T_k] or None)``.
        """
        cross = key_value is not None
        if cross and cache is not None and cache.key is not None:
            # Encoder memory was projected on the first step; only the queries are new.
            q = self._normed_queries(self._split_heads(F.linear(query, *self._query_params())))
            k, v = cache.key, cache.value  # normalised when they were cached
        else:
            q, k, v = self.project(query, key_value)  # [B, H, T, d_k], [B, H, T, d_v] for v
            if positions is not None:
                if cache is not None and positions.offset != len(cache):
                    raise ValueError(
                        f"positions start at offset {positions.offset} but the cache holds "
                        f"{len(cache)} positions; build them with offset=len(cache)"
                    )
                q, k = positions.rotate(q), positions.rotate(k)
            if cache is not None:
                k, v = cache.append(k, v)  # [B, H, T_cache + T_q, d_k or d_v]
        position_bias = None if positions is None else positions.bias
        query_len, key_len = q.size(-2), k.size(-2)

        explicit = need_weights or not self.use_sdpa
        if query_len == 1:
            # One query, the last position (cached decoding): it may see every key, so causality
            # needs no mask at all (causal_mask(1, T_k) would be all True).
            is_causal = False
        # Only the fused kernel can apply causality without a mask tensor; the explicit path needs one.
        causal_only = (
            is_causal
            and not explicit
            and mask is None
            and position_bias is None
            and query_len == key_len
        )
        if is_causal and not causal_only:
            mask = combine_masks(mask, causal_mask(query_len, key_len, device=q.device))

        if explicit:
            output, weights = dot_product_attention(q, k, v, mask, self.dropout, bias=position_bias)
        else:
            output, weights = self._sdpa(q, k, v, mask, position_bias, causal_only), None
        return self.out(self._merge_heads(output)), weights

    def _query_params(self) -> tuple[Tensor, Tensor | None]:
        rows = self._sizes[0]  # H·d_k
        weight_q = self.qkv.weight[:rows]
        bias_q = None if self.qkv.bias is None else self.qkv.bias[:rows]
        return weight_q, bias_q

    def _sdpa(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        position_bias: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        dropout_p = self.dropout.p if self.training else 0.0
        attn_mask: Tensor | None = mask
        if position_bias is not None:
            attn_mask = position_bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, torch.finfo(q.dtype).min)
        with _sdpa_backend(q.device, k.shape[-2], q.dtype):
            output = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
            )  # [B, H, T_q, d_v]
        if mask is not None:
            # Same contract as the explicit path: a query with no visible key outputs zeros.
            output = output.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        return output
