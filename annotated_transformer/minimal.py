"""The whole Transformer on one page: the paper's base model (Vaswani et al. 2017), in plain torch.

Chapters 01-05 derive each piece and the package makes every choice configurable. This file
fixes the choices of the paper's base translation model and writes it out with nothing but torch:
six encoder and six decoder layers of width 512, eight heads, a feed-forward layer of 2048, the
norm after each residual addition (§3.1), sinusoidal positions (§3.5), embeddings scaled by
√d_model and shared between source, target and the output layer (§3.4), dropout 0.1 (§5.4).

Its modules carry the names of the package's, so that a state dict moves between the two:
``Transformer(V).load_state_dict(build_model(paper_base_config(V)).state_dict())`` gives a model
with the same logits (chapter 05 checks it; ``tests/test_minimal.py`` too).

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``d`` = d_model, ``H`` heads,
``V`` vocabulary. Masks are boolean, True = may attend.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

D_MODEL, HEADS, LAYERS, D_FF, DROPOUT = 512, 8, 6, 2048, 0.1  # the base model, Table 3


def sinusoids(length: int, d_model: int) -> Tensor:
    """``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(...)``: ``[length, d]``."""
    position = torch.arange(length, dtype=torch.float64)[:, None]  # [T, 1]
    frequency = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)  # [T, d/2]
    table[:, 1::2] = torch.cos(position * frequency)
    return table.float()


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout: nn.Dropout) -> Tensor:
    """softmax(QKᵀ/√d_k)V over ``[B, H, T, d_k]`` inputs; a query with no visible key gets 0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, T_q, T_k]
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1).masked_fill(~mask, 0.0)
    return dropout(weights) @ v  # [B, H, T_q, d_k]


class MultiHeadAttention(nn.Module):
    """§3.2.2: the queries, keys and values of all heads in one ``[3d, d]`` matrix, then W^O."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)  # rows: W^Q, W^K, W^V
        self.out = nn.Linear(d_model, d_model)  # W^O
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor | None, mask: Tensor) -> Tensor:
        """``x`` ``[B, T, d]`` attends to itself, or to ``memory`` ``[B, S, d]`` (cross)."""
        d = x.size(-1)
        if memory is None:
            q, k, v = self.qkv(x).split(d, dim=-1)  # [B, T, d] each
        else:  # queries from the decoder; keys and values from the encoder's output
            q = F.linear(x, self.qkv.weight[:d], self.qkv.bias[:d])
            k, v = F.linear(memory, self.qkv.weight[d:], self.qkv.bias[d:]).split(d, dim=-1)

        def split(t: Tensor) -> Tensor:  # [B, T, d] -> [B, H, T, d/H]
            return t.view(t.size(0), t.size(1), self.heads, -1).transpose(1, 2)

        heads = attention(split(q), split(k), split(v), mask, self.dropout)  # [B, H, T, d/H]
        return self.out(heads.transpose(1, 2).reshape(x.shape))  # [B, T, d]


class FeedForward(nn.Module):
    """§3.3: ``max(0, x W_1 + b_1) W_2 + b_2``, dropout after the ReLU."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(F.relu(self.linear1(x))))  # [B, T, d]


class Residual(nn.Module):
    """§3.1, post-norm: ``LayerNorm(x + Dropout(Sublayer(x)))``."""

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.attention_block = Residual(d_model, dropout)
        self.feed_forward_block = Residual(d_model, dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.attention_block(x, lambda h: self.self_attention(h, None, mask))
        return self.feed_forward_block(x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, heads, dropout)
        self.cross_attention = MultiHeadAttention(d_model, heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.self_attention_block = Residual(d_model, dropout)
        self.cross_attention_block = Residual(d_model, dropout)
        self.feed_forward_block = Residual(d_model, dropout)

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor, memory_mask: Tensor) -> Tensor:
        x = self.self_attention_block(x, lambda h: self.self_attention(h, None, mask))
        x = self.cross_attention_block(x, lambda h: self.cross_attention(h, memory, memory_mask))
        return self.feed_forward_block(x, self.feed_forward)


class Stack(nn.Module):
    """Positions added to the embeddings, dropout, then the layers."""

    def __init__(self, layer: type, layers: int, d_model: int, dropout: float, **sizes) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layer(d_model, dropout=dropout, **sizes) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *args: Tensor) -> Tensor:
        x = self.dropout(x + sinusoids(x.size(1), x.size(2)).to(x))  # [B, T, d]
        for layer in self.layers:
            x = layer(x, *args)
        return x


class Embedding(nn.Module):
    """§3.4: token vectors multiplied by √d_model."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)


class Transformer(nn.Module):
    """``Transformer(V)(src [B, S], tgt [B, T]) -> logits [B, T, V]``; ``pad_id`` marks padding.

    ``tgt`` is the decoder input (the target shifted right); the logits at position ``t``
    predict target token ``t + 1``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = D_MODEL,
        heads: int = HEADS,
        layers: int = LAYERS,
        d_ff: int = D_FF,
        dropout: float = DROPOUT,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.tgt_embedding = Embedding(vocab_size, d_model)
        self.src_embedding = self.tgt_embedding  # one matrix for both languages and the output
        sizes = {"heads": heads, "d_ff": d_ff}
        self.encoder = Stack(EncoderLayer, layers, d_model, dropout, **sizes)
        self.decoder = Stack(DecoderLayer, layers, d_model, dropout, **sizes)
        self.output_projection = nn.Linear(d_model, vocab_size, bias=False)
        self.output_projection.weight = self.tgt_embedding.embedding.weight
        for parameter in self.parameters():  # Glorot-uniform matrices, zero biases
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
            elif parameter is not None and parameter.dim() == 1:
                nn.init.zeros_(parameter)
        for module in self.modules():  # LayerNorm gains start at one
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """The memory ``[B, S, d]`` and the source mask ``[B, 1, 1, S]``."""
        src_mask = (src != self.pad_id)[:, None, None, :]
        return self.encoder(self.src_embedding(src), src_mask), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """Logits ``[B, T, V]``: each position sees the earlier non-padding targets."""
        length = tgt.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt.device).tril()
        tgt_mask = (tgt != self.pad_id)[:, None, None, :] & causal  # [B, 1, T, T]
        x = self.decoder(self.tgt_embedding(tgt), memory, tgt_mask, src_mask)
        return self.output_projection(x)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)  # [B, T, V]


def paper_base_config(vocab_size: int, **changes):
    """The package's :class:`~annotated_transformer.config.TransformerConfig` of this file's
    model: ``build_model(paper_base_config(V))`` has the same modules and parameter names."""
    from .config import TransformerConfig

    settings = dict(
        arch="encoder-decoder", vocab_size=vocab_size, d_model=D_MODEL, n_heads=HEADS,
        n_layers=LAYERS, d_ff=D_FF, dropout=DROPOUT, positional="sinusoidal",
        norm_position="post", share_embeddings=True, tie_embeddings=True, pad_id=0,
    )  # fmt: skip
    return TransformerConfig(**{**settings, **changes})
