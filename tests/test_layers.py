"""Layers against torch's own: EncoderLayer vs nn.TransformerEncoderLayer, DecoderLayer vs
nn.TransformerDecoderLayer, with copied weights, in float64, for post-norm and pre-norm."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerWeights,
    MultiHeadAttention,
    Residual,
    TransformerConfig,
    causal_mask,
    combine_masks,
)

D_MODEL, N_HEADS, D_FF = 16, 4, 24
BATCH, LENGTH, MEMORY_LENGTH = 3, 7, 5
TOLERANCE = {"rtol": 1e-10, "atol": 1e-10}  # float64: agreement to rounding, not "close enough"


def layer_config(norm_position: str, activation: str = "relu") -> TransformerConfig:
    return TransformerConfig(
        d_model=D_MODEL,
        n_heads=N_HEADS,
        d_ff=D_FF,
        dropout=0.0,
        norm_position=norm_position,
        activation=activation,
        positional="none",
    )


def randomized(module: nn.Module, seed: int) -> nn.Module:
    """float64, eval mode, every parameter random: norm gains and biases too, so that a norm
    copied to the wrong place, or a bias dropped, shows."""
    generator = torch.Generator().manual_seed(seed)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator).double())
    return module


def use_explicit_attention(module: nn.Module) -> None:
    """Route every MultiHeadAttention through the explicit softmax(QKᵀ/√d_k)V path."""
    for submodule in module.modules():
        if isinstance(submodule, MultiHeadAttention):
            submodule.use_sdpa = False


def copy_(target: torch.Tensor, source: torch.Tensor) -> None:
    assert target.shape == source.shape
    target.copy_(source)


@torch.no_grad()
def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    copy_(theirs.in_proj_weight, ours.qkv.weight)  # both [W^Q; W^K; W^V]
    copy_(theirs.in_proj_bias, ours.qkv.bias)
    copy_(theirs.out_proj.weight, ours.out.weight)
    copy_(theirs.out_proj.bias, ours.out.bias)


@torch.no_grad()
def copy_norm(ours: nn.Module, theirs: nn.LayerNorm) -> None:
    copy_(theirs.weight, ours.weight)
    copy_(theirs.bias, ours.bias)


@torch.no_grad()
def copy_feed_forward(ours: FeedForward, theirs: nn.Module) -> None:
    for name in ("linear1", "linear2"):
        copy_(getattr(theirs, name).weight, getattr(ours, name).weight)
        copy_(getattr(theirs, name).bias, getattr(ours, name).bias)


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attention, theirs.self_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    copy_norm(ours.attention_block.norm, theirs.norm1)
    copy_norm(ours.feed_forward_block.norm, theirs.norm2)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attention, theirs.self_attn)
    copy_attention(ours.cross_attention, theirs.multihead_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    copy_norm(ours.self_attention_block.norm, theirs.norm1)
    copy_norm(ours.cross_attention_block.norm, theirs.norm2)
    copy_norm(ours.feed_forward_block.norm, theirs.norm3)


def torch_reference(layer: nn.Module) -> nn.Module:
    """float64 and train mode (dropout is 0, so the maths is the same): torch's fused inference
    fast path, which zeroes padded positions and runs other kernels, is then never taken."""
    return layer.double().train()


def inputs(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).double()


def real_positions(lengths: list[int], total: int) -> torch.Tensor:
    """bool ``[B, T]``: True at the first ``lengths[b]`` positions of row ``b`` (right padding)."""
    return torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]


PATHS = ["sdpa", "explicit", "need_weights"]


def run_ours(layer: nn.Module, path: str, *args, **kwargs) -> torch.Tensor:
    if path == "explicit":
        use_explicit_attention(layer)
    output, weights = layer(*args, need_weights=path == "need_weights", **kwargs)
    if path == "need_weights":
        assert weights.self_attention is not None
    return output


# ---------------------------------------------------------------------------------------------
# EncoderLayer vs torch.nn.TransformerEncoderLayer

# name -> (our mask, our is_causal, torch src_mask (True = blocked), torch src_key_padding_mask)
REAL = real_positions([LENGTH, 4, 2], LENGTH)  # [B, T]
KEYS = REAL[:, None, None, :]  # [B, 1, 1, T]: which keys are real


def torch_layer(layer_class, norm_position):
    """``nn.TransformerEncoderLayer`` or ``DecoderLayer`` shaped like our layers, no dropout."""
    layer = layer_class(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_position == "pre"
    )
    return torch_reference(layer)


CAUSAL = causal_mask(LENGTH)  # [T, T]
ENCODER_MASKS = {
    "no_mask": (None, False, None, None),
    "padding": (KEYS, False, None, ~REAL),
    "causal_flag": (None, True, ~CAUSAL, None),
    "causal_mask": (CAUSAL, False, ~CAUSAL, None),
    "causal_flag_and_padding": (KEYS, True, ~CAUSAL, ~REAL),
    "causal_mask_and_padding": (combine_masks(KEYS, CAUSAL), False, ~CAUSAL, ~REAL),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("masks", list(ENCODER_MASKS))
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_encoder_layer_matches_torch_transformer_encoder_layer(norm_position, masks, path):
    ours = randomized(EncoderLayer(layer_config(norm_position)), seed=0)
    theirs = torch_layer(nn.TransformerEncoderLayer, norm_position)
    copy_encoder_layer(ours, theirs)
    mask, is_causal, src_mask, key_padding = ENCODER_MASKS[masks]
    x = inputs(1, BATCH, LENGTH, D_MODEL)

    expected = theirs(x, src_mask=src_mask, src_key_padding_mask=key_padding)
    actual = run_ours(ours, path, x, mask, is_causal=is_causal)
    torch.testing.assert_close(actual, expected, **TOLERANCE)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_gradients_match_torch_transformer_encoder_layer(activation):
    ours = randomized(EncoderLayer(layer_config("pre", activation)), seed=2)
    theirs = torch_reference(
        nn.TransformerEncoderLayer(
            D_MODEL, N_HEADS, D_FF, 0.0, activation, batch_first=True, norm_first=True
        )
    )
    copy_encoder_layer(ours, theirs)
    mask, is_causal, src_mask, key_padding = ENCODER_MASKS["causal_flag_and_padding"]
    x = inputs(3, BATCH, LENGTH, D_MODEL)
    upstream = inputs(4, BATCH, LENGTH, D_MODEL)

    ours_input = x.clone().requires_grad_(True)
    theirs_input = x.clone().requires_grad_(True)
    (ours(ours_input, mask, is_causal=is_causal)[0] * upstream).sum().backward()
    (theirs(theirs_input, src_mask, src_key_padding_mask=key_padding) * upstream).sum().backward()

    torch.testing.assert_close(ours_input.grad, theirs_input.grad, **TOLERANCE)
    for our_parameter, their_parameter in [
        (ours.self_attention.qkv.weight, theirs.self_attn.in_proj_weight),
        (ours.self_attention.out.bias, theirs.self_attn.out_proj.bias),
        (ours.feed_forward.linear1.weight, theirs.linear1.weight),
        (ours.attention_block.norm.weight, theirs.norm1.weight),
        (ours.feed_forward_block.norm.bias, theirs.norm2.bias),
    ]:
        torch.testing.assert_close(our_parameter.grad, their_parameter.grad, **TOLERANCE)


def test_encoder_layer_reference_comparison_can_fail():
    """The negative control: a layer copied with its two norms swapped no longer matches."""
    ours = randomized(EncoderLayer(layer_config("post")), seed=0)
    theirs = torch_reference(
        nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, 0.0, batch_first=True)
    )
    copy_encoder_layer(ours, theirs)
    copy_norm(ours.feed_forward_block.norm, theirs.norm1)
    copy_norm(ours.attention_block.norm, theirs.norm2)
    x = inputs(1, BATCH, LENGTH, D_MODEL)
    assert (ours(x)[0] - theirs(x)).abs().max() > 1e-2


# ---------------------------------------------------------------------------------------------
# DecoderLayer vs torch.nn.TransformerDecoderLayer

MEMORY_REAL = real_positions([MEMORY_LENGTH, 3, 1], MEMORY_LENGTH)  # [B, S]
MEMORY_KEYS = MEMORY_REAL[:, None, None, :]  # [B, 1, 1, S]
# name -> (our self_mask, memory_mask, is_causal; torch tgt_mask, tgt pad, memory pad)
DECODER_MASKS = {
    "causal": (None, None, True, ~CAUSAL, None, None),
    "causal_and_padding": (KEYS, MEMORY_KEYS, True, ~CAUSAL, ~REAL, ~MEMORY_REAL),
    "causal_mask_and_padding": (
        combine_masks(KEYS, CAUSAL),
        MEMORY_KEYS,
        False,
        ~CAUSAL,
        ~REAL,
        ~MEMORY_REAL,
    ),
    "bidirectional_memory_padding": (None, MEMORY_KEYS, False, None, None, ~MEMORY_REAL),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("masks", list(DECODER_MASKS))
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_decoder_layer_matches_torch_transformer_decoder_layer(norm_position, masks, path):
    ours = randomized(DecoderLayer(layer_config(norm_position)), seed=5)
    theirs = torch_layer(nn.TransformerDecoderLayer, norm_position)
    copy_decoder_layer(ours, theirs)
    self_mask, memory_mask, is_causal, tgt_mask, tgt_padding, memory_padding = DECODER_MASKS[masks]
    x = inputs(6, BATCH, LENGTH, D_MODEL)
    memory = inputs(7, BATCH, MEMORY_LENGTH, D_MODEL)

    expected = theirs(
        x,
        memory,
        tgt_mask=tgt_mask,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=memory_padding,
    )
    actual = run_ours(
        ours, path, x, self_mask, memory=memory, memory_mask=memory_mask, is_causal=is_causal
    )
    torch.testing.assert_close(actual, expected, **TOLERANCE)


def test_decoder_layer_attention_weights_are_causal_and_skip_padded_memory():
    ours = randomized(DecoderLayer(layer_config("pre")), seed=8)
    self_mask, memory_mask, *_ = DECODER_MASKS["causal_and_padding"]
    x = inputs(9, BATCH, LENGTH, D_MODEL)
    memory = inputs(10, BATCH, MEMORY_LENGTH, D_MODEL)
    _, (self_weights, cross_weights) = ours(
        x, self_mask, memory=memory, memory_mask=memory_mask, is_causal=True, need_weights=True
    )
    assert self_weights.shape == (BATCH, N_HEADS, LENGTH, LENGTH)
    assert cross_weights.shape == (BATCH, N_HEADS, LENGTH, MEMORY_LENGTH)
    blocked_self = ~combine_masks(self_mask, CAUSAL).expand_as(self_weights)
    assert (self_weights[blocked_self] == 0).all()
    assert (cross_weights[~MEMORY_KEYS.expand_as(cross_weights)] == 0).all()
    ones = torch.ones(BATCH, N_HEADS, LENGTH, dtype=torch.float64)
    torch.testing.assert_close(self_weights.sum(-1), ones, rtol=0, atol=1e-12)
    torch.testing.assert_close(cross_weights.sum(-1), ones, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The building blocks against their formulas


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_matches_paper_formula(activation):
    """§3.3: ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`` (GELU in place of max(0, ·) if asked)."""
    ffn = randomized(FeedForward(D_MODEL, D_FF, activation=activation), seed=11)
    x = inputs(12, BATCH, LENGTH, D_MODEL)
    hidden = x @ ffn.linear1.weight.T + ffn.linear1.bias
    hidden = hidden.clamp(min=0) if activation == "relu" else F.gelu(hidden)
    expected = hidden @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(ffn(x), expected, rtol=1e-12, atol=1e-12)


def test_feed_forward_without_bias_has_no_bias():
    ffn = FeedForward(D_MODEL, D_FF, bias=False)
    assert ffn.linear1.bias is None and ffn.linear2.bias is None
    with pytest.raises(ValueError, match=r"activation='swish' is not one of: relu, gelu"):
        FeedForward(D_MODEL, D_FF, activation="swish")


def layer_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    return F.layer_norm(x, (x.size(-1),), norm.weight, norm.bias, norm.eps)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_residual_matches_post_norm_and_pre_norm_formulas(norm_position):
    """post (§3.1): ``LayerNorm(x + Sublayer(x))``; pre: ``x + Sublayer(LayerNorm(x))``."""
    block = randomized(Residual(layer_config(norm_position)), seed=13)
    sublayer = randomized(nn.Linear(D_MODEL, D_MODEL), seed=14)
    x = inputs(15, BATCH, LENGTH, D_MODEL)
    if norm_position == "post":
        expected = layer_norm(x + sublayer(x), block.norm)
    else:
        expected = x + sublayer(layer_norm(x, block.norm))
    torch.testing.assert_close(block(x, sublayer), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_residual_false_drops_the_skip_connection(norm_position):
    config = TransformerConfig(**{**layer_config(norm_position).to_dict(), "residual": False})
    block = randomized(Residual(config), seed=16)
    sublayer = randomized(nn.Linear(D_MODEL, D_MODEL), seed=17)
    x = inputs(18, BATCH, LENGTH, D_MODEL)
    if norm_position == "post":
        expected = layer_norm(sublayer(x), block.norm)
    else:
        expected = sublayer(layer_norm(x, block.norm))
    torch.testing.assert_close(block(x, sublayer), expected, rtol=1e-12, atol=1e-12)


def test_residual_dropout_acts_on_the_sublayer_output_only_in_training():
    config = TransformerConfig(**{**layer_config("pre").to_dict(), "dropout": 0.5})
    block = Residual(config).double()
    x = inputs(19, BATCH, LENGTH, D_MODEL)

    def zero_sublayer(h):
        return torch.zeros_like(h)

    def one_sublayer(h):
        return torch.ones_like(h)

    block.train()
    torch.testing.assert_close(block(x, zero_sublayer), x)  # dropout never touches the skip path
    kept = block(x, one_sublayer) - x  # 0 where dropped, 1 / (1 - p) = 2 where kept
    assert set(kept.unique().tolist()) == {0.0, 2.0}
    block.eval()
    torch.testing.assert_close(block(x, one_sublayer), x + 1)


# ---------------------------------------------------------------------------------------------
# One call signature for both layers


def test_both_layers_take_one_call_signature():
    """A stack calls every layer alike: the same keywords, a ``LayerWeights`` back."""
    x = inputs(20, BATCH, LENGTH, D_MODEL)
    memory = inputs(21, BATCH, MEMORY_LENGTH, D_MODEL)
    for layer, given_memory in [
        (EncoderLayer(layer_config("pre")), None),
        (DecoderLayer(layer_config("pre")), memory),
    ]:
        layer = layer.double()
        output, weights = layer(
            x,
            KEYS,
            memory=given_memory,
            memory_mask=None if given_memory is None else MEMORY_KEYS,
            is_causal=True,
            positions=None,
            cache=None,
            need_weights=True,
        )
        assert isinstance(weights, LayerWeights)
        assert output.shape == x.shape
        assert weights.self_attention.shape == (BATCH, N_HEADS, LENGTH, LENGTH)
        has_cross = isinstance(layer, DecoderLayer)
        assert (weights.cross_attention is not None) == has_cross


def test_encoder_layer_refuses_memory_and_decoder_layer_needs_it():
    x = inputs(22, BATCH, LENGTH, D_MODEL)
    with pytest.raises(ValueError, match="an EncoderLayer has no cross-attention"):
        EncoderLayer(layer_config("pre")).double()(x, memory=x)
    with pytest.raises(ValueError, match="a DecoderLayer needs memory"):
        DecoderLayer(layer_config("pre")).double()(x)


def test_relu_squared_is_the_square_of_relu_and_a_choice_of_the_feed_forward():
    from annotated_transformer.layers import FeedForward, relu_squared

    x = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(relu_squared(x), torch.clamp(x, min=0) ** 2)
    torch.manual_seed(0)
    layer = FeedForward(8, 16, 0.0, "relu2").eval()
    y = torch.randn(2, 3, 8)
    expected = layer.linear2(torch.clamp(layer.linear1(y), min=0) ** 2)
    torch.testing.assert_close(layer(y), expected)
    with pytest.raises(ValueError, match="relu, gelu, relu2"):
        FeedForward(8, 16, 0.0, "swish")
