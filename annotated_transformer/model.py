"""The three architectures, built from one config (chapter 05).

- ``encoder-decoder`` (Vaswani et al. 2017): ``model(src, tgt) -> logits``, plus ``encode`` and
  ``decode`` for inference;
- ``decoder-only`` (GPT): ``model(tokens) -> logits``, causal;
- ``encoder-only`` (BERT): ``model(tokens) -> logits``, bidirectional: every position sees every
  other, so it must never be trained to predict the next token (it would read the answer).

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``V`` vocabulary, ``H`` heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .attention import DecoderCache, KVCache
from .config import TransformerConfig
from .layers import DecoderLayer, EncoderLayer
from .masking import padding_mask
from .norms import build_norm
from .positional import LearnedPositionalEmbedding, PositionalEncoding

AttentionMaps = dict[str, list[Tensor]]  # stack name -> one [B, H, T_q, T_k] tensor per layer


class TokenEmbedding(nn.Module):
    """Token ids to vectors, multiplied by √d_model (§3.4) when ``scale`` is set."""

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    def forward(self, tokens: Tensor) -> Tensor:
        """``tokens``: ``[B, T]`` ids; returns ``[B, T, d_model]``."""
        return self.embedding(tokens) * self.scale


class Stack(nn.Module):
    """Positions, then ``n_layers`` layers, then (pre-norm) a final norm.

    ``cross=False`` stacks :class:`EncoderLayer` (the encoder, or a decoder-only model when called
    with ``is_causal=True``); ``cross=True`` stacks :class:`DecoderLayer`. Both take the same
    arguments, so the stack calls each layer alike.
    """

    def __init__(self, config: TransformerConfig, n_layers: int, cross: bool) -> None:
        super().__init__()
        self.positional = PositionalEncoding(
            config.positional,
            d_model=config.d_model,
            n_heads=config.n_heads,
            max_len=config.max_len,
            relative_max_distance=config.relative_max_distance,
            rope_base=config.rope_base,
            d_k=config.key_size,
        )
        self.dropout = nn.Dropout(config.dropout)
        layer = DecoderLayer if cross else EncoderLayer
        self.layers = nn.ModuleList(layer(config) for _ in range(n_layers))
        self.final_norm = (
            build_norm(config.norm, config.d_model, config.norm_eps)
            if config.use_final_norm
            else nn.Identity()
        )

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor | None], list[Tensor | None]]:
        """Run the stack.

        Args:
            x: ``[B, T, d_model]`` token embeddings.
            mask: bool, broadcastable to ``[B, H, T, T_keys]`` (padding); with a ``cache``,
                ``[B, 1, 1, T]`` for the new positions only (the cache keeps the earlier ones).
            memory: ``[B, S, d_model]`` encoder output, for a stack with cross-attention.
            memory_mask: bool, broadcastable to ``[B, H, T, S]``.
            cache: key/value caches; ``x`` holds only the new positions.

        Returns:
            ``(x [B, T, d_model], self-attention weights per layer, cross weights per layer)``
            (the cross weights are None for a stack without cross-attention).
        """
        offset = 0 if cache is None else cache.length
        x = self.dropout(self.positional.add_absolute(x, offset))  # [B, T, d_model]
        if cache is not None and mask is not None:
            # Only now, after the positions (which refuse an input past max_len): a refused call
            # must leave the cache as it was.
            mask = cache.extend_key_mask(mask)  # [B, 1, 1, T_cache + T]
        positions = self.positional.position_state(
            x.size(1), offset, device=x.device, dtype=x.dtype
        )
        self_weights: list[Tensor | None] = []
        cross_weights: list[Tensor | None] = []
        for index, layer in enumerate(self.layers):
            x, weights = layer(
                x,
                mask,
                memory=memory,
                memory_mask=memory_mask,
                is_causal=is_causal,
                positions=positions,
                cache=None if cache is None else cache.layer(index),
                need_weights=need_weights,
            )
            self_weights.append(weights.self_attention)
            cross_weights.append(weights.cross_attention)
        return self.final_norm(x), self_weights, cross_weights


class _Model(nn.Module):
    """What the three architectures share: config, input checks, output projection, init."""

    config: TransformerConfig

    def _check_tokens(self, tokens: Tensor, vocab_size: int, name: str) -> None:
        if not isinstance(tokens, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens)}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype}; "
                f"embed the ids inside the model rather than passing vectors"
            )
        if tokens.dim() != 2:
            raise ValueError(f"{name} must have shape [B, T], got {tuple(tokens.shape)}")
        if tokens.numel() == 0:
            raise ValueError(f"{name} is empty: shape {tuple(tokens.shape)}")
        advice = "check the tokenizer and the config's vocab size"
        if tokens.device.type != "cpu" or torch.compiler.is_compiling():
            # Reading the range back to the host would stall an accelerator on every forward pass
            # (and break a compiled graph). A device-side assert checks it without waiting: an
            # out-of-range id still stops the run, at the next call that synchronises.
            in_range = ((tokens >= 0) & (tokens < vocab_size)).all()
            torch._assert_async(
                in_range,
                f"{name} contains an id outside the vocabulary [0, {vocab_size}); {advice}",
            )
            return
        low, high = (int(value) for value in torch.aminmax(tokens))
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name} contains id {bad}, outside the vocabulary [0, {vocab_size}); {advice}"
            )

    def _padding(self, tokens: Tensor) -> Tensor | None:
        return None if self.config.pad_id is None else padding_mask(tokens, self.config.pad_id)

    def _init_weights(self) -> None:
        init_weights(self, self.config)

    def _build_single_stack(self, config: TransformerConfig, stack_name: str) -> None:
        """Embedding, one stack of :class:`EncoderLayer` named ``stack_name``, output projection.

        Decoder-only and encoder-only models are built alike; only how they call the stack (causal
        or not) differs. Registration order (embedding, stack, projection) fixes the order of the
        random initialisation, so a seed gives the same weights as ever.
        """
        self.config = config
        self.embedding = TokenEmbedding(config.vocab_size, config.d_model, config.scale_embeddings)
        setattr(self, stack_name, Stack(config, config.n_layers, cross=False))
        self.output_projection = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output_projection.weight = self.embedding.weight
        self._init_weights()


class DecoderOnlyTransformer(_Model):
    """A causal language model (GPT): ``model(tokens) -> logits [B, T, V]``."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self._build_single_stack(config, "decoder")

    def new_cache(self) -> DecoderCache:
        return DecoderCache([KVCache() for _ in self.decoder.layers])

    def forward(
        self,
        tokens: Tensor,
        *,
        cache: DecoderCache | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """``tokens``: ``[B, T]`` (only the new positions when a ``cache`` is given).

        Returns:
            logits ``[B, T, V]``; with ``return_attention`` also ``{"decoder": [B, H, T, T] per
            layer}``.
        """
        self._check_tokens(tokens, self.config.vocab_size, "tokens")
        mask = self._padding(tokens)  # [B, 1, 1, T] or None
        x = self.embedding(tokens)  # [B, T, d_model]
        x, weights, _ = self.decoder(
            x, mask, is_causal=True, cache=cache, need_weights=return_attention
        )
        logits = self.output_projection(x)  # [B, T, V]
        return (logits, {"decoder": weights}) if return_attention else logits


class EncoderOnlyTransformer(_Model):
    """A bidirectional encoder (BERT) with a per-position head: ``model(tokens) -> [B, T, V]``."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self._build_single_stack(config, "encoder")

    def forward(
        self, tokens: Tensor, *, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """``tokens``: ``[B, T]``. Returns logits ``[B, T, V]`` (and ``{"encoder": ...}``)."""
        self._check_tokens(tokens, self.config.vocab_size, "tokens")
        x = self.embedding(tokens)  # [B, T, d_model]
        x, weights, _ = self.encoder(x, self._padding(tokens), need_weights=return_attention)
        logits = self.output_projection(x)  # [B, T, V]
        return (logits, {"encoder": weights}) if return_attention else logits


class EncoderDecoderTransformer(_Model):
    """The paper's translation model: ``model(src [B, S], tgt [B, T]) -> logits [B, T, V_tgt]``.

    ``tgt`` is the decoder input (the target shifted right, starting with a start symbol); the
    logits at position ``t`` predict target token ``t + 1``.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        d_model, scale = config.d_model, config.scale_embeddings
        self.tgt_embedding = TokenEmbedding(config.target_vocab_size, d_model, scale)
        self.src_embedding = (
            self.tgt_embedding
            if config.share_embeddings
            else TokenEmbedding(config.source_vocab_size, d_model, scale)
        )
        self.encoder = Stack(config, config.encoder_layers, cross=False)
        self.decoder = Stack(config, config.decoder_layers, cross=True)
        self.output_projection = nn.Linear(d_model, config.target_vocab_size, bias=False)
        if config.tie_embeddings:
            self.output_projection.weight = self.tgt_embedding.weight
        self._init_weights()

    def source_mask(self, src: Tensor) -> Tensor | None:
        """bool ``[B, 1, 1, S]``: which source positions are real tokens (None: no padding)."""
        return self._padding(src)

    def encode(
        self, src: Tensor, *, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor | None]]:
        """``src``: ``[B, S]``. Returns the memory ``[B, S, d_model]`` (and per-layer weights)."""
        self._check_tokens(src, self.config.source_vocab_size, "src")
        x = self.src_embedding(src)  # [B, S, d_model]
        memory, weights, _ = self.encoder(x, self.source_mask(src), need_weights=return_attention)
        return (memory, weights) if return_attention else memory

    def new_cache(self) -> DecoderCache:
        layers = self.decoder.layers
        return DecoderCache([KVCache() for _ in layers], [KVCache() for _ in layers])

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """Logits ``[B, T, V_tgt]`` for decoder inputs ``tgt`` ``[B, T]`` given the memory.

        Args:
            tgt: decoder input ids (only the new positions when a ``cache`` is given).
            memory: ``[B, S, d_model]`` from :meth:`encode`.
            memory_mask: ``self.source_mask(src)``, ``[B, 1, 1, S]``, or None.
        """
        self._check_tokens(tgt, self.config.target_vocab_size, "tgt")
        if memory.dim() != 3 or memory.size(0) != tgt.size(0):
            raise ValueError(
                f"memory must be [B, S, d_model] with the batch size of tgt ({tgt.size(0)}), "
                f"got {tuple(memory.shape)}"
            )
        mask = self._padding(tgt)  # [B, 1, 1, T] or None
        x = self.tgt_embedding(tgt)  # [B, T, d_model]
        x, self_weights, cross_weights = self.decoder(
            x,
            mask,
            memory=memory,
            memory_mask=memory_mask,
            is_causal=True,
            cache=cache,
            need_weights=return_attention,
        )
        logits = self.output_projection(x)  # [B, T, V_tgt]
        if return_attention:
            return logits, {"decoder": self_weights, "cross": cross_weights}
        return logits

    def forward(
        self, src: Tensor, tgt: Tensor, *, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, AttentionMaps]:
        """``src`` ``[B, S]``, ``tgt`` ``[B, T]`` -> logits ``[B, T, V_tgt]``."""
        encoded = self.encode(src, return_attention=return_attention)
        memory, encoder_weights = encoded if return_attention else (encoded, None)
        if not isinstance(tgt, Tensor) or tgt.dim() != 2 or tgt.size(0) != src.size(0):
            shape = tuple(tgt.shape) if isinstance(tgt, Tensor) else type(tgt).__name__
            raise ValueError(
                f"tgt must be [B, T] with the batch size of src ({src.size(0)}), got {shape}"
            )
        decoded = self.decode(tgt, memory, self.source_mask(src), return_attention=return_attention)
        if return_attention:
            logits, maps = decoded
            return logits, {"encoder": encoder_weights, **maps}
        return decoded


ARCHITECTURES: dict[str, type[_Model]] = {
    "encoder-decoder": EncoderDecoderTransformer,
    "decoder-only": DecoderOnlyTransformer,
    "encoder-only": EncoderOnlyTransformer,
}


def build_model(config: TransformerConfig) -> nn.Module:
    """The model ``config.arch`` names, initialised by ``config.init``."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"build_model needs a TransformerConfig, got {type(config).__name__}")
    return ARCHITECTURES[config.arch](config)


def init_weights(model: nn.Module, config: TransformerConfig) -> None:
    """Initialise ``model`` in place by ``config.init``.

    - ``xavier``: Glorot-uniform matrices and embeddings, zero biases (The Annotated Transformer,
      the course's reports);
    - ``normal``: N(0, 0.02) matrices and embeddings, zero biases, and the projections that write
      into the residual stream (attention output, second feed-forward matrix) scaled by
      ``1/√(2·n_layers)`` (GPT-2 §2.3).

    Norm gains start at one, norm biases at zero; learned positions at N(0, 0.02); the relative
    bias table at zero (every distance alike until trained). ``config.token_rms``, when set,
    redraws the token embeddings last (a tied output projection shares them) from
    N(0, (token_rms / scale)²), so that a token vector, √d_model scale included, starts with that
    root mean square.
    """
    n_layers = (
        max(config.encoder_layers, config.decoder_layers)
        if config.arch == "encoder-decoder"
        else config.n_layers
    )
    residual_std = 0.02 / math.sqrt(2 * n_layers)
    for name, module in model.named_modules():
        if isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.embedding.weight, std=0.02)
        elif isinstance(module, (nn.Linear, TokenEmbedding)):
            weight = module.weight
            if config.init == "xavier":
                nn.init.xavier_uniform_(weight)
            else:
                writes_residual = name.endswith(("attention.out", "feed_forward.linear2"))
                nn.init.normal_(weight, std=residual_std if writes_residual else 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
    if config.token_rms is not None:
        for module in model.modules():
            if isinstance(module, TokenEmbedding):  # [V, d_model] weights, times module.scale
                nn.init.normal_(module.weight, std=config.token_rms / module.scale)


def parameter_count(config: TransformerConfig) -> int:
    """The number of trainable parameters, in closed form (derived in chapter 05).

    Per layer, with ``d = d_model``: attention ``4d² (+4d biases)`` (with head sizes of their own,
    ``d·H·(2·d_k + d_v) + H·d_v·d (+H·(2·d_k + d_v) + d)``); feed-forward
    ``2·d·d_ff (+d_ff + d)``; a norm ``2d`` (LayerNorm) or ``d`` (RMSNorm). An encoder layer has one
    attention and two norms, a decoder layer two attentions and three norms.
    """
    d, bias = config.d_model, config.bias
    projected = config.n_heads * (2 * config.key_size + config.value_size)  # rows of W^Q, W^K, W^V
    values = config.n_heads * config.value_size  # columns of W^O
    attention = d * projected + values * d + ((projected + d) if bias else 0)
    feed_forward = 2 * d * config.d_ff + ((config.d_ff + d) if bias else 0)
    norm = 2 * d if config.norm == "layernorm" else d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm

    def stack(n_layers: int, layer: int) -> int:
        positional = {
            "learned": config.max_len * d,
            "relative": (2 * config.relative_max_distance + 1) * config.n_heads,
        }.get(config.positional, 0)
        return n_layers * layer + positional + (norm if config.use_final_norm else 0)

    if config.arch == "encoder-decoder":
        target = config.target_vocab_size * d
        source = 0 if config.share_embeddings else config.source_vocab_size * d
        output = 0 if config.tie_embeddings else target
        return (
            source
            + target
            + output
            + stack(config.encoder_layers, encoder_layer)
            + stack(config.decoder_layers, decoder_layer)
        )
    embedding = config.vocab_size * d
    output = 0 if config.tie_embeddings else embedding
    return embedding + output + stack(config.n_layers, encoder_layer)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
