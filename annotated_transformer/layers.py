"""The feed-forward sublayer, residual connections, and the encoder and decoder layers
(chapters 04 and 05).

Where the norm goes is a switch (``norm_position``):

- ``post`` (the paper, §3.1): ``x = Norm(x + Dropout(Sublayer(x)))``;
- ``pre`` (GPT-2 and most models since): ``x = x + Dropout(Sublayer(Norm(x)))``, with one more norm
  after the last layer of the stack (see ``TransformerConfig.final_norm``).

(The Annotated Transformer's code is pre-norm while its text says post-norm; here it is a named
choice, and both are tested against ``torch.nn.TransformerEncoderLayer(norm_first=...)``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import LayerCache, MultiHeadAttention
from .config import TransformerConfig
from .norms import build_norm
from .positional import PositionState


def relu_squared(x: Tensor) -> Tensor:
    """``max(0, x)²`` (So et al. 2021, "Primer"; one of the modded-nanogpt speedrun's steps)."""
    return F.relu(x).square()


class FeedForward(nn.Module):
    """Position-wise feed-forward network, §3.3: ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``.

    Dropout after the activation follows the reference implementations (tensor2tensor,
    ``torch.nn.TransformerEncoderLayer``, The Annotated Transformer).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        activations = {"relu": F.relu, "gelu": F.gelu, "relu2": relu_squared}
        if activation not in activations:
            raise ValueError(f"activation={activation!r} is not one of: {', '.join(activations)}")
        self.activation = activations[activation]
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[B, T, d_model]``; returns the same shape."""
        hidden = self.dropout(self.activation(self.linear1(x)))  # [B, T, d_ff]
        return self.linear2(hidden)  # [B, T, d_model]


class Residual(nn.Module):
    """A sublayer wrapped in dropout, a residual connection and a norm, pre or post.

    With ``residual=False`` the skip connection is dropped (an ablation that shows why it is there).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm = build_norm(config.norm, config.d_model, config.norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm_position == "pre"
        self.residual = config.residual

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """``x``: ``[B, T, d_model]``; ``sublayer`` maps it to the same shape."""
        skip = x if self.residual else 0.0
        if self.pre_norm:
            return skip + self.dropout(sublayer(self.norm(x)))
        return self.norm(skip + self.dropout(sublayer(x)))


class LayerWeights(NamedTuple):
    """One layer's attention weights, each ``[B, H, T_q, T_k]`` or None (``need_weights=False``)."""

    self_attention: Tensor | None
    cross_attention: Tensor | None = None  # a decoder layer's, over the encoder output


def recording(
    attention: MultiHeadAttention, weights: list[Tensor | None], *args, **kwargs
) -> Callable[[Tensor], Tensor]:
    """The sublayer ``h -> attention(h, *args, **kwargs)`` for a :class:`Residual`.

    A residual block takes a function of one tensor; attention also returns its weights, which this
    appends to ``weights`` (None unless ``need_weights``) so the layer can hand them out.
    """

    def sublayer(h: Tensor) -> Tensor:
        output, attention_weights = attention(h, *args, **kwargs)
        weights.append(attention_weights)
        return output

    return sublayer


# Both layers take the same arguments, so that a stack calls every layer alike:
#
#     x, weights = layer(x, mask, memory=..., memory_mask=..., is_causal=..., positions=...,
#                        cache=..., need_weights=...)
#
# x:           [B, T, d_model], the new positions only when a cache is given.
# mask:        bool, broadcastable to [B, H, T, T_keys]: self-attention's padding (causality comes
#              from is_causal); with a cache, over every key the cache holds and the new ones.
# memory:      [B, S, d_model], the encoder output (decoder layers only; required there).
# memory_mask: bool, broadcastable to [B, H, T, S] (source padding).
# positions:   the stack's PositionState (rope's angles, the relative/alibi bias), or None.
# cache:       a LayerCache for incremental decoding, or None.


def attention_from(config: TransformerConfig) -> MultiHeadAttention:
    """A multi-head attention of ``config``'s sizes (heads, ``d_k``, ``d_v``), dropout and
    QK-norm."""
    return MultiHeadAttention(
        config.d_model,
        config.n_heads,
        config.attention_dropout_p,
        config.bias,
        d_k=config.key_size,
        d_v=config.value_size,
        qk_norm=config.qk_norm,
    )


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a :class:`Residual`.

    The same layer serves the encoder (bidirectional) and decoder-only models (``is_causal=True``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self_attention = attention_from(config)
        self.feed_forward = FeedForward(
            config.d_model, config.d_ff, config.activation_dropout_p, config.activation, config.bias
        )
        self.attention_block = Residual(config)
        self.feed_forward_block = Residual(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = False,
        positions: PositionState | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, LayerWeights]:
        """``x``: ``[B, T, d_model]``. Returns ``(x [B, T, d_model], LayerWeights)``.

        ``memory`` and ``memory_mask`` must be None: an encoder layer has no cross-attention.
        """
        if memory is not None or memory_mask is not None:
            raise ValueError("an EncoderLayer has no cross-attention: memory must be None")
        weights: list[Tensor | None] = []
        self_attend = recording(
            self.self_attention,
            weights,
            mask=mask,
            is_causal=is_causal,
            positions=positions,
            cache=None if cache is None else cache.self_attention,
            need_weights=need_weights,
        )
        x = self.attention_block(x, self_attend)
        x = self.feed_forward_block(x, self.feed_forward)
        return x, LayerWeights(weights[0])


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, then feed-forward (§3.1)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self_attention = attention_from(config)
        self.cross_attention = attention_from(config)
        self.feed_forward = FeedForward(
            config.d_model, config.d_ff, config.activation_dropout_p, config.activation, config.bias
        )
        self.self_attention_block = Residual(config)
        self.cross_attention_block = Residual(config)
        self.feed_forward_block = Residual(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        positions: PositionState | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, LayerWeights]:
        """Decode one layer: ``x`` ``[B, T, d_model]`` attends to itself, then to ``memory``.

        Returns:
            ``(x [B, T, d_model], LayerWeights(self [B, H, T, T_keys], cross [B, H, T, S]))``.
        """
        if memory is None:
            raise ValueError("a DecoderLayer needs memory, the encoder output [B, S, d_model]")
        weights: list[Tensor | None] = []
        self_attend = recording(
            self.self_attention,
            weights,
            mask=mask,
            is_causal=is_causal,
            positions=positions,
            cache=None if cache is None else cache.self_attention,
            need_weights=need_weights,
        )
        cross_attend = recording(
            self.cross_attention,
            weights,
            memory,
            memory_mask,
            cache=None if cache is None else cache.cross_attention,
            need_weights=need_weights,
        )
        x = self.self_attention_block(x, self_attend)
        x = self.cross_attention_block(x, cross_attend)
        x = self.feed_forward_block(x, self.feed_forward)
        return x, LayerWeights(weights[0], weights[1])
