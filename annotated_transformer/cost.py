"""What a Transformer costs: FLOPs and memory in closed form (chapter 11).

A matrix product ``[M, K] @ [K, N]`` costs ``2·M·K·N`` FLOPs (one multiply and one add per term).
Only matrix products are counted: the softmax, the norms and the additions cost ``O(T·d)`` or
``O(T²)`` per layer, no factor ``d`` more, and are left out, as in Kaplan et al. 2020 (§2.1) and
nanoGPT's ``estimate_mfu``. ``B`` batch, ``H`` heads, ``T`` sequence length, ``d`` ``d_model``,
``L`` layers, ``V`` vocabulary.
"""

from __future__ import annotations

from .config import TransformerConfig


def attention_flops(batch: int, n_heads: int, query_len: int, key_len: int, d_k: int) -> int:
    """FLOPs of ``softmax(QKᵀ/√d_k)·V``'s two products: ``4·B·H·T_q·T_k·d_k``.

    ``QKᵀ`` is ``[T_q, d_k] @ [d_k, T_k]`` per head: ``2·T_q·T_k·d_k``; ``weights @ V`` is
    ``[T_q, T_k] @ [T_k, d_k]``: the same again. Causality is not subtracted: the kernels (and
    the explicit path) compute the masked half too.
    """
    return 4 * batch * n_heads * query_len * key_len * d_k


def attention_scores_bytes(
    batch: int, n_heads: int, query_len: int, key_len: int, element_size: int = 4
) -> int:
    """Bytes of the ``[B, H, T_q, T_k]`` score matrix the explicit path materialises (per layer;
    the weights after the softmax are a second one of the same size)."""
    return batch * n_heads * query_len * key_len * element_size


def linear_flops(d_model: int, d_ff: int, tokens: int) -> int:
    """FLOPs of one layer's projections for ``tokens`` positions: ``2·tokens·(4·d² + 2·d·d_ff)``.

    ``W^Q, W^K, W^V, W^O`` are four ``d × d`` products, the feed-forward two ``d × d_ff``; with
    ``d_ff = 4d`` that is ``24·tokens·d²``.
    """
    return 2 * tokens * (4 * d_model * d_model + 2 * d_model * d_ff)


def _single_stack(config: TransformerConfig) -> None:
    """Refuse a config outside the closed forms: one stack, heads of ``d_model / n_heads``."""
    if config.arch == "encoder-decoder":
        raise ValueError(
            "the closed forms here cover one stack (arch='decoder-only' or 'encoder-only'); "
            "an encoder-decoder adds cross-attention, which they leave out"
        )
    heads = config.n_heads
    if config.key_size * heads != config.d_model or config.value_size * heads != config.d_model:
        raise ValueError(
            f"the closed forms here take H·d_k = H·d_v = d_model; got n_heads={heads}, "
            f"d_k={config.key_size}, d_v={config.value_size}, d_model={config.d_model}: "
            f"accepted are d_k and d_v unset (or equal to d_model / n_heads)"
        )


def forward_flops(config: TransformerConfig, batch: int, length: int) -> int:
    """Matrix-product FLOPs of one forward pass of a single-stack model on ``[B, T]`` tokens.

    Per layer ``linear_flops`` plus ``attention_flops`` (``4·B·T²·d``, since ``H·d_k = d``), then
    the output projection ``2·B·T·d·V``. The embedding lookup is not a product.
    """
    _single_stack(config)
    tokens = batch * length
    d_k = config.d_model // config.n_heads
    per_layer = linear_flops(config.d_model, config.d_ff, tokens) + attention_flops(
        batch, config.n_heads, length, length, d_k
    )
    return config.n_layers * per_layer + 2 * tokens * config.d_model * config.vocab_size


def matmul_parameters(config: TransformerConfig) -> int:
    """``N``: the weights that take part in a matrix product per token (no biases, norms or
    positions): ``L·(4·d² + 2·d·d_ff) + d·V``. The input embedding is a lookup, not a product;
    counting the output projection once is right whether or not it is tied to the embedding."""
    _single_stack(config)
    d = config.d_model
    return config.n_layers * (4 * d * d + 2 * d * config.d_ff) + d * config.vocab_size


def training_flops_per_token(config: TransformerConfig, context: int) -> int:
    """Forward + backward FLOPs per token at context ``T``: ``6·N + 12·L·T·d``.

    The backward pass costs twice the forward (a product's gradient needs two products), so a
    training step is three forward passes: ``3 · forward_flops / (B·T)``. This is the estimate of
    Kaplan et al. 2020 and of nanoGPT's model FLOPs utilisation.
    """
    return 6 * matmul_parameters(config) + 12 * config.n_layers * context * config.d_model


def kv_cache_bytes(
    config: TransformerConfig, batch: int, length: int, element_size: int = 4
) -> int:
    """Bytes of a decoder's self-attention key/value cache after ``length`` positions:
    ``2·L·B·T·d`` elements (keys and values, every layer, every head)."""
    _single_stack(config)
    return 2 * config.n_layers * batch * length * config.d_model * element_size


def decoding_flops(config: TransformerConfig, prompt_len: int, new_tokens: int, cache: bool) -> int:
    """Forward FLOPs of greedy decoding ``new_tokens`` after a prompt, batch 1.

    Without a cache, step ``t`` runs the whole prefix of ``prompt_len + t`` positions again, so
    the total grows as ``new_tokens²``; with one, the prompt runs once and every later step runs
    one position against the cached keys (attention ``4·T_k·d`` per layer).
    """
    _single_stack(config)
    if not cache:
        return sum(forward_flops(config, 1, prompt_len + step) for step in range(new_tokens))
    d, d_k = config.d_model, config.d_model // config.n_heads
    total = forward_flops(config, 1, prompt_len) if new_tokens > 0 else 0
    for step in range(1, new_tokens):
        key_len = prompt_len + step
        per_layer = linear_flops(d, config.d_ff, 1) + attention_flops(
            1, config.n_heads, 1, key_len, d_k
        )
        total += config.n_layers * per_layer + 2 * d * config.vocab_size
    return total
