"""attention.py against F.scaled_dot_product_attention and torch.nn.MultiheadAttention.

Everything runs in float64 so that two implementations of the same formula agree to ~1e-12; a
looser tolerance would hide a wrong scale or a mask applied one position off.
"""

import pkgutil
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import annotated_transformer as at
from annotated_transformer.attention import (
    CPU_MATH_MAX_KEYS,
    KVCache,
    MultiHeadAttention,
    _sdpa_backend,
    dot_product_attention,
)
from annotated_transformer.masking import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_torch_blocked,
)
from annotated_transformer.positional import PositionState

DTYPE = torch.float64
TIGHT = {"rtol": 1e-10, "atol": 1e-12}
D_MODEL, N_HEADS = 16, 4
D_K = D_MODEL // N_HEADS


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=DTYPE)


def random_mask(*shape: int, keep: float = 0.6) -> torch.Tensor:
    """A random bool mask (True = may attend) in which every query row sees at least one key."""
    mask = torch.rand(*shape) < keep
    mask[..., 0] = True
    return mask


def make_mha(bias: bool = True, dropout: float = 0.0) -> MultiHeadAttention:
    """Our MultiHeadAttention in float64 with non-trivial biases, in eval mode."""
    mha = MultiHeadAttention(D_MODEL, N_HEADS, dropout=dropout, bias=bias).to(DTYPE).eval()
    if bias:
        with torch.no_grad():  # the default init sets biases to 0, which would hide a lost bias
            mha.qkv.bias.normal_()
            mha.out.bias.normal_()
    return mha


def torch_mha_like(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention (batch_first) holding a copy of our weights."""
    bias = ours.qkv.bias is not None
    reference = nn.MultiheadAttention(ours.d_model, ours.n_heads, bias=bias, batch_first=True)
    reference = reference.to(DTYPE).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(ours.qkv.weight)
        reference.out_proj.weight.copy_(ours.out.weight)
        if bias:
            reference.in_proj_bias.copy_(ours.qkv.bias)
            reference.out_proj.bias.copy_(ours.out.bias)
    return reference


def sdpa_float_mask(mask: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor | None:
    """Our (bool mask, float bias) pair as the one float attn_mask SDPA adds to the logits."""
    if bias is None:
        return mask
    if mask is None:
        return bias
    return bias.masked_fill(~mask, float("-inf"))


def full_causal(mha: MultiHeadAttention, x: torch.Tensor, **options) -> torch.Tensor:
    output, _ = mha(x, is_causal=True, **options)
    return output


# ---------------------------------------------------------------------------------------------
# dot_product_attention() against F.scaled_dot_product_attention

BATCH, T_Q, T_K = 2, 5, 7


def masks_for_sdpa_comparison() -> dict[str, torch.Tensor | None]:
    lengths = torch.tensor([T_K, T_K - 3])
    key_padding = (torch.arange(T_K)[None, :] < lengths[:, None])[:, None, None, :]  # [B,1,1,S]
    return {
        "none": None,
        "key_padding_B11S": key_padding,
        "causal_TT": causal_mask(T_K)[-T_Q:],  # [T_q, T_k]: queries are the last T_q positions
        "full_BHTS": random_mask(BATCH, N_HEADS, T_Q, T_K),
    }


@pytest.mark.parametrize("mask_name", ["none", "key_padding_B11S", "causal_TT", "full_BHTS"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_attention_matches_torch_sdpa(mask_name, with_bias):
    torch.manual_seed(0)
    query, key = randn(BATCH, N_HEADS, T_Q, D_K), randn(BATCH, N_HEADS, T_K, D_K)
    value = randn(BATCH, N_HEADS, T_K, 3)  # d_v != d_k on purpose
    mask = masks_for_sdpa_comparison()[mask_name]
    bias = randn(1, N_HEADS, T_Q, T_K) if with_bias else None

    output, weights = dot_product_attention(query, key, value, mask, bias=bias)
    expected = F.scaled_dot_product_attention(
        query, key, value, attn_mask=sdpa_float_mask(mask, bias)
    )
    torch.testing.assert_close(output, expected, **TIGHT)
    assert weights.shape == (BATCH, N_HEADS, T_Q, T_K)


def test_attention_with_causal_mask_matches_torch_sdpa_is_causal():
    torch.manual_seed(0)
    query, key, value = randn(2, 3, 6, D_K), randn(2, 3, 6, D_K), randn(2, 3, 6, D_K)
    output, _ = dot_product_attention(query, key, value, causal_mask(6))
    expected = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(output, expected, **TIGHT)


def test_attention_weights_rows_sum_to_one_and_are_zero_where_masked():
    torch.manual_seed(0)
    query, key, value = randn(2, 3, 6, D_K), randn(2, 3, 8, D_K), randn(2, 3, 8, D_K)
    mask = torch.rand(2, 3, 6, 8) < 0.5
    mask[0, 0, 2] = False  # one query row with no visible key at all
    mask[1, 2, 4] = True  # and one that sees everything
    _, weights = dot_product_attention(query, key, value, mask, bias=randn(1, 3, 6, 8))

    assert torch.all(weights[~mask] == 0.0)
    assert torch.all(weights[mask] > 0.0)
    row_sums = weights.sum(dim=-1)
    has_visible_key = mask.any(dim=-1)
    torch.testing.assert_close(
        row_sums[has_visible_key], torch.ones_like(row_sums[has_visible_key]), **TIGHT
    )
    assert torch.all(row_sums[~has_visible_key] == 0.0)


def test_attention_weights_without_mask_equal_softmax_of_scaled_scores():
    torch.manual_seed(0)
    query, key, value = randn(2, 5, D_K), randn(2, 4, D_K), randn(2, 4, D_K)
    _, weights = dot_product_attention(query, key, value)
    expected = torch.softmax(query @ key.transpose(-2, -1) / D_K**0.5, dim=-1)
    torch.testing.assert_close(weights, expected, **TIGHT)


def test_attention_fully_masked_query_row_gives_zero_output_and_finite_gradients():
    torch.manual_seed(0)
    query = randn(1, 2, 4, D_K).requires_grad_()
    key = randn(1, 2, 4, D_K).requires_grad_()
    value = randn(1, 2, 4, D_K).requires_grad_()
    bias = randn(1, 2, 4, 4).requires_grad_()
    mask = causal_mask(4).clone()
    mask[1] = False  # query 1 may attend to nothing

    output, weights = dot_product_attention(query, key, value, mask, bias=bias)
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
    assert torch.all(output[..., 1, :] == 0.0)
    assert torch.all(weights[..., 1, :] == 0.0)

    output.square().sum().backward()
    for tensor in (query, key, value, bias):
        assert torch.isfinite(tensor.grad).all()
    assert torch.all(query.grad[..., 1, :] == 0.0)  # the dead row influences nothing
    assert torch.all(bias.grad[..., 1, :] == 0.0)


def test_attention_passes_gradcheck_in_float64_with_mask_and_bias():
    torch.manual_seed(0)
    query = randn(2, 1, 3, 4).requires_grad_()
    key = randn(2, 1, 4, 4).requires_grad_()
    value = randn(2, 1, 4, 3).requires_grad_()
    bias = randn(1, 1, 3, 4).requires_grad_()
    mask = random_mask(2, 1, 3, 4)
    mask[1, 0, 2] = False  # a fully masked row is part of the contract too

    def function(query, key, value, bias):
        return dot_product_attention(query, key, value, mask, bias=bias)

    assert torch.autograd.gradcheck(function, (query, key, value, bias))


def test_attention_dropout_acts_on_the_weights():
    torch.manual_seed(0)
    query, key, value = randn(2, 6, D_K), randn(2, 6, D_K), randn(2, 6, D_K)
    dropout = nn.Dropout(0.5).train()
    dropped_output, dropped = dot_product_attention(query, key, value, dropout=dropout)
    _, clean = dot_product_attention(query, key, value)

    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(dropped[kept], clean[kept] / 0.5, **TIGHT)
    torch.testing.assert_close(dropped_output, dropped @ value, **TIGHT)


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention against torch.nn.MultiheadAttention


def self_attention_masks(batch: int, length: int) -> dict[str, tuple]:
    """name -> (our mask or None, our is_causal, torch key_padding_mask, torch attn_mask)."""
    tokens = torch.ones(batch, length, dtype=torch.long)
    tokens[1, -2:] = 0  # the second sequence ends in two padding positions
    padding = padding_mask(tokens, pad_id=0)  # [B, 1, 1, T]
    causal = causal_mask(length)  # [T, T]
    blocked_padding = to_torch_blocked(padding[:, 0, 0, :])  # [B, T], True = ignore
    blocked_causal = to_torch_blocked(causal)
    return {
        "none": (None, False, None, None),
        "key_padding": (padding, False, blocked_padding, None),
        "causal_mask": (causal, False, None, blocked_causal),
        "is_causal": (None, True, None, blocked_causal),
        "padding_and_is_causal": (padding, True, blocked_padding, blocked_causal),
    }


SELF_MASKS = ["none", "key_padding", "causal_mask", "is_causal", "padding_and_is_causal"]


@pytest.mark.parametrize("mask_name", SELF_MASKS)
@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch_multihead_attention(mask_name, use_sdpa, bias):
    torch.manual_seed(0)
    mha = make_mha(bias=bias)
    mha.use_sdpa = use_sdpa
    reference = torch_mha_like(mha)
    x = randn(2, 6, D_MODEL)
    mask, is_causal, key_padding_mask, attn_mask = self_attention_masks(2, 6)[mask_name]

    output, weights = mha(x, mask=mask, is_causal=is_causal)
    expected, _ = reference(
        x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False
    )
    torch.testing.assert_close(output, expected, **TIGHT)
    if use_sdpa:
        assert weights is None  # the fused kernel keeps no [T_q, T_k] weights


@pytest.mark.parametrize("mask_name", SELF_MASKS)
def test_self_attention_weights_match_torch_multihead_attention(mask_name):
    torch.manual_seed(0)
    mha = make_mha()
    reference = torch_mha_like(mha)
    x = randn(2, 6, D_MODEL)
    mask, is_causal, key_padding_mask, attn_mask = self_attention_masks(2, 6)[mask_name]

    output, weights = mha(x, mask=mask, is_causal=is_causal, need_weights=True)
    options = {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask, "need_weights": True}
    expected, per_head = reference(x, x, x, average_attn_weights=False, **options)
    _, averaged = reference(x, x, x, average_attn_weights=True, **options)

    torch.testing.assert_close(output, expected, **TIGHT)
    assert weights.shape == (2, N_HEADS, 6, 6)
    torch.testing.assert_close(weights, per_head, **TIGHT)
    torch.testing.assert_close(weights.mean(dim=1), averaged, **TIGHT)


@pytest.mark.parametrize(("uses_padding", "uses_attn_mask"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_cross_attention_matches_torch_multihead_attention(
    uses_padding, uses_attn_mask, use_sdpa, bias
):
    torch.manual_seed(0)
    mha = make_mha(bias=bias)
    mha.use_sdpa = use_sdpa
    reference = torch_mha_like(mha)
    target, memory = randn(2, 4, D_MODEL), randn(2, 7, D_MODEL)  # T_q = 4 != T_k = 7
    source = torch.ones(2, 7, dtype=torch.long)
    source[0, -3:] = 0
    padding = padding_mask(source, pad_id=0)  # [B, 1, 1, S]
    general = random_mask(4, 7)  # [T, S]
    mask = combine_masks(padding if uses_padding else None, general if uses_attn_mask else None)
    options = {
        "key_padding_mask": to_torch_blocked(padding[:, 0, 0, :]) if uses_padding else None,
        "attn_mask": to_torch_blocked(general) if uses_attn_mask else None,
    }

    output, _ = mha(target, memory, mask)
    expected, _ = reference(target, memory, memory, need_weights=False, **options)
    torch.testing.assert_close(output, expected, **TIGHT)

    output, weights = mha(target, memory, mask, need_weights=True)
    expected, per_head = reference(
        target, memory, memory, need_weights=True, average_attn_weights=False, **options
    )
    torch.testing.assert_close(output, expected, **TIGHT)
    torch.testing.assert_close(weights, per_head, **TIGHT)


def test_multihead_attention_fails_a_comparison_with_a_wrong_head_count():
    """The torch comparison can fail: the same weights split into a different number of heads."""
    torch.manual_seed(0)
    mha = make_mha()
    reference = torch_mha_like(mha)
    wrong = MultiHeadAttention(D_MODEL, N_HEADS // 2).to(DTYPE).eval()
    wrong.load_state_dict(mha.state_dict())
    x = randn(2, 6, D_MODEL)
    expected, _ = reference(x, x, x, need_weights=False)
    torch.testing.assert_close(mha(x)[0], expected, **TIGHT)
    assert not torch.allclose(wrong(x)[0], expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"d_model": 10, "n_heads": 4}, "d_model=10 is not divisible by n_heads=4"),
        ({"d_model": 0, "n_heads": 4}, "d_model and n_heads must be positive"),
        ({"d_model": 8, "n_heads": 2, "dropout": 1.0}, r"dropout=1.0 is not in \[0, 1\)"),
    ],
)
def test_multihead_attention_rejects_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**arguments)


# ---------------------------------------------------------------------------------------------
# A query that may attend to nothing, through MultiHeadAttention


@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("with_position_bias", [False, True])
def test_fully_masked_query_row_through_multihead_attention_is_finite(use_sdpa, with_position_bias):
    torch.manual_seed(0)
    mha = make_mha()
    mha.use_sdpa = use_sdpa
    x = randn(2, 5, D_MODEL).requires_grad_()
    mask = random_mask(2, 1, 5, 5)
    mask[0, 0, 3] = False  # batch 0, query 3 sees nothing
    position_bias = randn(1, N_HEADS, 5, 5) if with_position_bias else None

    output, _ = mha(x, mask=mask, positions=PositionState(bias=position_bias))
    assert torch.isfinite(output).all()
    # Zero attention output: what is left is W^O·0 + b^O.
    torch.testing.assert_close(output[0, 3], mha.out.bias.detach(), **TIGHT)

    output.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for name, parameter in mha.named_parameters():
        assert torch.isfinite(parameter.grad).all(), name


# ---------------------------------------------------------------------------------------------
# The efficient (SDPA) and explicit paths compute the same thing


def path_outputs(mha: MultiHeadAttention, *args, **options) -> tuple[torch.Tensor, torch.Tensor]:
    mha.use_sdpa = True
    efficient, no_weights = mha(*args, **options)
    assert no_weights is None
    mha.use_sdpa = False
    explicit, _ = mha(*args, **options)
    mha.use_sdpa = True
    return efficient, explicit


@pytest.mark.parametrize("mask_kind", ["none", "padding", "general"])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("bias_kind", ["none", "alibi", "random_per_batch"])
def test_efficient_and_explicit_paths_agree(mask_kind, is_causal, bias_kind):
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(2, 6, D_MODEL)
    tokens = torch.ones(2, 6, dtype=torch.long)
    tokens[1, -2:] = 0
    mask = {
        "none": None,
        "padding": padding_mask(tokens, pad_id=0),
        "general": random_mask(2, N_HEADS, 6, 6),
    }[mask_kind]
    position_bias = {
        "none": None,
        "alibi": at.ALiBi(N_HEADS)(6, 6).to(DTYPE),
        "random_per_batch": randn(2, N_HEADS, 6, 6),
    }[bias_kind]

    options = {"mask": mask, "is_causal": is_causal, "positions": PositionState(bias=position_bias)}
    efficient, explicit = path_outputs(mha, x, **options)
    torch.testing.assert_close(efficient, explicit, **TIGHT)
    with_weights, _ = mha(x, need_weights=True, **options)
    torch.testing.assert_close(with_weights, efficient, **TIGHT)


@pytest.mark.parametrize("key_len", [6, CPU_MATH_MAX_KEYS, CPU_MATH_MAX_KEYS + 1])
def test_cpu_kernel_choice_computes_the_same_attention_on_both_sides_of_the_cut(key_len):
    """Short keys in half precision on a CPU take torch's math kernel, the rest its fused kernel:
    on either side the efficient path equals the explicit one, output and gradients."""
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(2, key_len, D_MODEL).requires_grad_()
    tokens = torch.ones(2, key_len, dtype=torch.long)
    tokens[1, -3:] = 0
    mask = padding_mask(tokens, pad_id=0)
    efficient, explicit = path_outputs(mha, x, mask=mask, is_causal=True)
    torch.testing.assert_close(efficient, explicit, **TIGHT)
    (gradient,) = torch.autograd.grad(efficient.sum(), x)
    (expected,) = torch.autograd.grad(explicit.sum(), x)
    torch.testing.assert_close(gradient, expected, **TIGHT)


@pytest.mark.parametrize(
    "dtype, key_len, math",
    [
        (torch.bfloat16, 6, True),
        (torch.bfloat16, CPU_MATH_MAX_KEYS, True),
        (torch.bfloat16, CPU_MATH_MAX_KEYS + 1, False),
        (torch.float16, 64, True),
        (torch.float32, 6, False),  # fp32: the fused kernel is the faster one at every length
        (torch.float32, CPU_MATH_MAX_KEYS, False),
    ],
)
def test_the_cpu_kernel_choice_depends_on_the_precision_and_the_key_length(dtype, key_len, math):
    from torch.nn.attention import SDPBackend

    with _sdpa_backend(torch.device("cpu"), key_len, dtype):
        allowed = torch._fused_sdp_choice(*(torch.zeros(1, 1, key_len, 8, dtype=dtype),) * 3)
    assert (allowed == SDPBackend.MATH.value) is math
    with _sdpa_backend(torch.device("cuda"), key_len, dtype):  # never on another device
        assert torch.backends.cuda.flash_sdp_enabled()


def test_efficient_and_explicit_paths_agree_for_cross_attention():
    torch.manual_seed(0)
    mha = make_mha()
    target, memory = randn(3, 4, D_MODEL), randn(3, 9, D_MODEL)
    efficient, explicit = path_outputs(mha, target, memory, random_mask(3, 1, 4, 9))
    torch.testing.assert_close(efficient, explicit, **TIGHT)


def test_is_causal_equals_an_explicit_causal_mask_on_both_paths():
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(2, 7, D_MODEL)
    for efficient in path_outputs(mha, x, is_causal=True):
        for explicit in path_outputs(mha, x, mask=causal_mask(7)):
            torch.testing.assert_close(efficient, explicit, **TIGHT)
    unmasked, _ = mha(x)
    assert not torch.allclose(unmasked, mha(x, is_causal=True)[0])


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_dropout_changes_train_output_and_not_eval_output(use_sdpa):
    torch.manual_seed(0)
    mha = make_mha(dropout=0.5)
    mha.use_sdpa = use_sdpa
    no_dropout = make_mha(dropout=0.0)
    no_dropout.load_state_dict(mha.state_dict())
    x = randn(2, 6, D_MODEL)

    evaluated, _ = mha(x)
    torch.testing.assert_close(evaluated, mha(x)[0], rtol=0, atol=0)
    torch.testing.assert_close(evaluated, no_dropout(x)[0], **TIGHT)
    mha.train()
    trained, _ = mha(x)
    assert not torch.allclose(trained, evaluated, rtol=1e-3, atol=1e-3)


def test_explicit_path_dropout_is_applied_to_the_attention_weights():
    torch.manual_seed(0)
    p = 0.5
    mha = make_mha(dropout=p)
    x = randn(2, 6, D_MODEL)
    _, clean = mha(x, need_weights=True)
    mha.train()
    output, dropped = mha(x, need_weights=True)

    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    # Every weight is either dropped or kept and rescaled by 1/(1-p) ...
    torch.testing.assert_close(dropped[kept], clean[kept] / (1 - p), **TIGHT)
    # ... and the output is made from those dropped weights.
    _, _, value = mha.project(x, None)
    torch.testing.assert_close(output, mha.out(mha._merge_heads(dropped @ value)), **TIGHT)


# ---------------------------------------------------------------------------------------------
# The KV cache


@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("positional", ["none", "rope", "alibi"])
def test_kv_cache_one_position_at_a_time_equals_full_causal_attention(use_sdpa, positional):
    torch.manual_seed(0)
    mha = make_mha()
    mha.use_sdpa = use_sdpa
    length = 8
    x = randn(2, length, D_MODEL)
    encoding = at.PositionalEncoding(positional, d_model=D_MODEL, n_heads=N_HEADS, max_len=16)
    encoding = encoding.to(DTYPE)

    def positions(length: int, offset: int) -> at.PositionState:
        return encoding.position_state(length, offset, dtype=DTYPE)

    expected = full_causal(mha, x, positions=positions(length, 0))
    cache = KVCache()
    steps = []
    for position in range(length):
        output, _ = mha(
            x[:, position : position + 1],
            is_causal=True,
            positions=positions(1, position),
            cache=cache,
        )
        steps.append(output)
        assert len(cache) == position + 1
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TIGHT)


@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("with_rotary", [False, True])
def test_kv_cache_chunked_prefill_equals_full_causal_attention(use_sdpa, with_rotary):
    torch.manual_seed(0)
    mha = make_mha()
    mha.use_sdpa = use_sdpa
    x = randn(2, 10, D_MODEL)
    encoding = at.PositionalEncoding(
        "rope" if with_rotary else "none", d_model=D_MODEL, n_heads=N_HEADS, max_len=16
    )
    expected = full_causal(mha, x, positions=encoding.position_state(10, dtype=DTYPE))

    cache, pieces, start = KVCache(), [], 0
    for chunk in (4, 2, 1, 3):  # several positions at once into a non-empty cache
        positions = encoding.position_state(chunk, start, dtype=DTYPE)
        output, _ = mha(
            x[:, start : start + chunk], is_causal=True, positions=positions, cache=cache
        )
        pieces.append(output)
        start += chunk
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, **TIGHT)


def test_positions_that_do_not_start_at_the_cache_length_are_refused():
    mha = make_mha()
    encoding = at.PositionalEncoding("rope", d_model=D_MODEL, n_heads=N_HEADS, max_len=16)
    x = randn(1, 5, D_MODEL)
    cache = KVCache()
    mha(x[:, :3], is_causal=True, positions=encoding.position_state(3), cache=cache)
    with pytest.raises(ValueError, match="positions start at offset 0 but the cache holds 3"):
        mha(x[:, 3:], is_causal=True, positions=encoding.position_state(2), cache=cache)
    assert len(cache) == 3  # the refused call added nothing


def test_kv_cache_without_is_causal_lets_a_chunk_see_its_later_positions():
    """The cache adds no causality of its own: is_causal=True is what hides the future."""
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(1, 5, D_MODEL)
    cache = KVCache()
    mha(x[:, :2], is_causal=True, cache=cache)
    chunk, _ = mha(x[:, 2:], cache=cache)
    bidirectional, _ = mha(x)
    torch.testing.assert_close(chunk, bidirectional[:, 2:], **TIGHT)


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_cross_attention_cache_reuses_memory_keys_and_values(use_sdpa):
    """Semantics: the first call projects the memory into the cache; later calls read the cache
    and ignore the ``key_value`` they are given (the encoder memory does not change while
    decoding). So a different memory on the second call must not change the output."""
    torch.manual_seed(0)
    mha = make_mha()
    mha.use_sdpa = use_sdpa
    memory, other_memory = randn(2, 7, D_MODEL), randn(2, 7, D_MODEL)
    memory_mask = random_mask(2, 1, 1, 7)
    first, second = randn(2, 1, D_MODEL), randn(2, 1, D_MODEL)
    cache = KVCache()

    output, _ = mha(first, memory, memory_mask, cache=cache)
    torch.testing.assert_close(output, mha(first, memory, memory_mask)[0], **TIGHT)
    assert len(cache) == 7
    cached_key = cache.key.clone()

    output, _ = mha(second, other_memory, memory_mask, cache=cache)
    torch.testing.assert_close(output, mha(second, memory, memory_mask)[0], **TIGHT)
    assert not torch.allclose(output, mha(second, other_memory, memory_mask)[0])
    assert len(cache) == 7  # not appended to
    torch.testing.assert_close(cache.key, cached_key, rtol=0, atol=0)


def test_kv_cache_append_concatenates_along_positions():
    torch.manual_seed(0)
    cache = KVCache()
    assert len(cache) == 0
    first = randn(2, 3, 4, D_K), randn(2, 3, 4, D_K)
    second = randn(2, 3, 1, D_K), randn(2, 3, 1, D_K)
    cache.append(*first)
    key, value = cache.append(*second)
    assert len(cache) == 5
    torch.testing.assert_close(key, torch.cat([first[0], second[0]], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(value, torch.cat([first[1], second[1]], dim=2), rtol=0, atol=0)


def test_kv_cache_reorder_selects_batch_rows():
    torch.manual_seed(0)
    cache = KVCache()
    key, value = randn(3, 2, 4, D_K), randn(3, 2, 4, D_K)
    cache.append(key, value)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    torch.testing.assert_close(cache.key, key[index], rtol=0, atol=0)
    torch.testing.assert_close(cache.value, value[index], rtol=0, atol=0)

    empty = KVCache()
    empty.reorder(index)  # nothing cached yet: nothing to do, no error
    assert empty.key is None and len(empty) == 0


def test_decoding_after_kv_cache_reorder_equals_decoding_the_reordered_batch():
    """Beam search: reorder the cache mid-decoding, then go on; as if the batch had always been
    in the new order."""
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(3, 6, D_MODEL)
    index = torch.tensor([1, 1, 0])
    cache = KVCache()
    for position in range(3):
        mha(x[:, position : position + 1], is_causal=True, cache=cache)
    cache.reorder(index)
    reordered = x[index]
    steps = [
        mha(reordered[:, position : position + 1], is_causal=True, cache=cache)[0]
        for position in range(3, 6)
    ]
    expected = full_causal(mha, reordered)[:, 3:]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TIGHT)


# ---------------------------------------------------------------------------------------------
# Head sizes of their own: d_k and d_v apart from d_model / H (Vaswani et al. Table 3, row B)
#
# nn.MultiheadAttention ties each head to d_model / H, so a model with d_k or d_v of their own is
# held against the formula written out in plain torch instead.

HEAD_SIZES = [(3, 3), (6, 2), (2, 7), (D_K, D_K + 1)]  # (d_k, d_v): H·d_k and H·d_v != d_model


def make_sized_mha(d_k: int | None, d_v: int | None, bias: bool = True) -> MultiHeadAttention:
    mha = MultiHeadAttention(D_MODEL, N_HEADS, bias=bias, d_k=d_k, d_v=d_v).to(DTYPE).eval()
    if bias:
        with torch.no_grad():
            mha.qkv.bias.normal_()
            mha.out.bias.normal_()
    return mha


def plain_multihead_attention(
    query: torch.Tensor,
    memory: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    n_heads: int,
    d_k: int,
    d_v: int,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Vaswani et al. §3.2.2 written out: per head h, softmax(Q W_h^Q (K W_h^K)ᵀ / √d_k) V W_h^V,
    the heads concatenated and projected by W^O. ``weight``: rows W^Q (H·d_k), W^K (H·d_k), W^V
    (H·d_v); ``allowed``: bool ``[T_q, T_k]`` or ``[B, 1, 1, T_k]``, True = may attend."""
    rows = [n_heads * d_k, n_heads * d_k, n_heads * d_v]
    weights = weight.split(rows)
    biases = bias.split(rows) if bias is not None else (None, None, None)
    heads = []
    for head in range(n_heads):
        key_part = slice(head * d_k, (head + 1) * d_k)
        value_part = slice(head * d_v, (head + 1) * d_v)
        q = query @ weights[0][key_part].T  # [B, T_q, d_k]
        k = memory @ weights[1][key_part].T  # [B, T_k, d_k]
        v = memory @ weights[2][value_part].T  # [B, T_k, d_v]
        if bias is not None:
            q, k, v = q + biases[0][key_part], k + biases[1][key_part], v + biases[2][value_part]
        scores = q @ k.transpose(1, 2) / d_k**0.5  # [B, T_q, T_k]
        if allowed is not None:
            mask = allowed if allowed.dim() == 2 else allowed[:, 0]  # [T_q, T_k] or [B, 1, T_k]
            scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(scores.softmax(-1) @ v)  # [B, T_q, d_v]
    output = torch.cat(heads, dim=-1) @ out_weight.T  # [B, T_q, d_model]
    return output if out_bias is None else output + out_bias


def plain_reference(mha: MultiHeadAttention, query, memory, allowed=None) -> torch.Tensor:
    return plain_multihead_attention(
        query,
        memory,
        mha.qkv.weight,
        mha.qkv.bias,
        mha.out.weight,
        mha.out.bias,
        mha.n_heads,
        mha.d_k,
        mha.d_v,
        allowed,
    )


def test_the_plain_reference_matches_torch_multihead_attention_at_tied_head_sizes():
    """The reference below is itself right where torch can check it (d_k = d_v = d_model / H)."""
    torch.manual_seed(0)
    mha = make_mha()
    x = randn(2, 6, D_MODEL)
    expected, _ = torch_mha_like(mha)(x, x, x, need_weights=False)
    torch.testing.assert_close(plain_reference(mha, x, x), expected, **TIGHT)


@pytest.mark.parametrize(("d_k", "d_v"), HEAD_SIZES)
@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_head_sizes_of_their_own_match_a_plain_torch_reference(d_k, d_v, use_sdpa, bias):
    torch.manual_seed(0)
    mha = make_sized_mha(d_k, d_v, bias)
    mha.use_sdpa = use_sdpa
    assert mha.qkv.weight.shape == (N_HEADS * (2 * d_k + d_v), D_MODEL)
    assert mha.out.weight.shape == (D_MODEL, N_HEADS * d_v)
    x = randn(2, 6, D_MODEL)
    padding = padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]), pad_id=0)  # [B, 1, 1, T]
    for mask, is_causal, allowed in [
        (None, False, None),
        (padding, False, padding),
        (None, True, causal_mask(6)),
    ]:
        output, _ = mha(x, mask=mask, is_causal=is_causal)
        torch.testing.assert_close(output, plain_reference(mha, x, x, allowed), **TIGHT)
    # Cross-attention (T_q != T_k), with its explicit path's weights.
    target, memory = randn(2, 4, D_MODEL), randn(2, 7, D_MODEL)
    output, weights = mha(target, memory, need_weights=True)
    torch.testing.assert_close(output, plain_reference(mha, target, memory), **TIGHT)
    assert weights.shape == (2, N_HEADS, 4, 7)


def test_default_head_sizes_are_bit_identical_to_the_tied_code():
    """d_k = d_v = None builds exactly the module of before: the same parameter shapes, and the
    same output to the last bit as the tied computation (split by d_model) written out below."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()  # float32: bit-identity, not tolerance
    explicit = MultiHeadAttention(D_MODEL, N_HEADS, d_k=D_K, d_v=D_K).eval()
    explicit.load_state_dict(mha.state_dict())
    assert [tuple(p.shape) for p in mha.parameters()] == [
        (3 * D_MODEL, D_MODEL),
        (3 * D_MODEL,),
        (D_MODEL, D_MODEL),
        (D_MODEL,),
    ]
    x = torch.randn(2, 6, D_MODEL)
    q, k, v = mha.qkv(x).split(D_MODEL, dim=-1)  # the code before head sizes of their own
    q, k, v = (t.view(2, 6, N_HEADS, D_K).transpose(1, 2) for t in (q, k, v))
    with _sdpa_backend(x.device, 6, x.dtype):  # the kernel the module chooses
        tied = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tied = mha.out(tied.transpose(1, 2).reshape(2, 6, D_MODEL))
    for module in (mha, explicit):
        output, _ = module(x, is_causal=True)
        assert torch.equal(output, tied)


@pytest.mark.parametrize(("d_k", "d_v"), [(6, 2), (2, 7)])
@pytest.mark.parametrize("use_sdpa", [True, False])
@pytest.mark.parametrize("positional", ["none", "rope", "relative", "alibi"])
def test_kv_cache_with_head_sizes_of_their_own_equals_full_causal_attention(
    d_k, d_v, use_sdpa, positional
):
    torch.manual_seed(0)
    mha = make_sized_mha(d_k, d_v)
    mha.use_sdpa = use_sdpa
    x = randn(2, 8, D_MODEL)
    encoding = at.PositionalEncoding(
        positional, d_model=D_MODEL, n_heads=N_HEADS, max_len=16, d_k=d_k
    ).to(DTYPE)
    if positional == "rope":
        assert encoding.rotary.d_k == d_k  # rope rotates the query/key size, not d_model / H
    if positional == "relative":
        with torch.no_grad():
            encoding.bias.bias.weight.normal_()
    expected = full_causal(mha, x, positions=encoding.position_state(8, dtype=DTYPE))
    cache, pieces, start = KVCache(), [], 0
    for chunk in (3, 1, 1, 2, 1):
        positions = encoding.position_state(chunk, start, dtype=DTYPE)
        output, _ = mha(
            x[:, start : start + chunk], is_causal=True, positions=positions, cache=cache
        )
        pieces.append(output)
        start += chunk
    assert cache.key.shape[-1] == d_k and cache.value.shape[-1] == d_v
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, **TIGHT)


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_cross_attention_cache_with_head_sizes_of_their_own(use_sdpa):
    torch.manual_seed(0)
    mha = make_sized_mha(6, 2)
    mha.use_sdpa = use_sdpa
    target, memory = randn(2, 4, D_MODEL), randn(2, 7, D_MODEL)
    expected, _ = mha(target, memory)
    cache = KVCache()
    steps = [mha(target[:, t : t + 1], memory, cache=cache)[0] for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TIGHT)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"d_model": 16, "n_heads": 4, "d_k": 0}, "d_k=0 is not accepted"),
        ({"d_model": 16, "n_heads": 4, "d_v": -2}, "d_v=-2 is not accepted"),
        ({"d_model": 18, "n_heads": 4, "d_k": 4}, "unless d_k and d_v are given"),
    ],
)
def test_bad_head_sizes_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**arguments)
    assert MultiHeadAttention(18, 4, d_k=4, d_v=5).out.in_features == 20


# ---------------------------------------------------------------------------------------------
# The module's name is not hidden by a function of the same name


def test_the_attention_module_is_importable_by_its_name():
    """``annotated_transformer.attention`` is the module (it was once shadowed by a function
    exported under that name, which broke ``at.attention.MultiHeadAttention``)."""
    import annotated_transformer.attention as module

    assert isinstance(module, types.ModuleType)
    assert module.MultiHeadAttention is at.MultiHeadAttention
    assert at.attention is module
    assert module.dot_product_attention is at.dot_product_attention
    # No name the package exports is also the name of one of its modules.
    modules = {info.name for info in pkgutil.iter_modules(at.__path__)}
    assert modules & set(at.__all__) == set()


# -- QK-norm: each head's queries and keys RMS-normalised before their dot product ----------------


def test_qk_norm_is_attention_over_rms_normalised_queries_and_keys():
    """Against a restatement in plain torch: project, split heads, F.rms_norm over d_k with the
    learnt gains, softmax(q k^T / sqrt(d_k)) v, merge, W^O; both of the module's paths."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, qk_norm=True).double().eval()
    with torch.no_grad():  # gains away from 1, so that a missing gain shows
        attention.q_norm.weight.uniform_(0.5, 2.0)
        attention.k_norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    q, k, v = attention.qkv(x).split(16, dim=-1)
    heads = [t.view(2, 5, 4, 4).transpose(1, 2) for t in (q, k, v)]  # [B, H, T, d_k]
    q = F.rms_norm(heads[0], (4,), attention.q_norm.weight, 1e-5)
    k = F.rms_norm(heads[1], (4,), attention.k_norm.weight, 1e-5)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # sqrt(d_k) = 2
    expected = attention.out((weights @ heads[2]).transpose(1, 2).reshape(2, 5, 16))
    for use_sdpa in (True, False):
        attention.use_sdpa = use_sdpa
        actual, _ = attention(x)
        torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-10)


def test_qk_norm_off_has_no_parameters_and_on_adds_two_gains():
    plain, normed = MultiHeadAttention(16, 4), MultiHeadAttention(16, 4, qk_norm=True)
    assert plain.q_norm is None and plain.k_norm is None
    extra = {name for name, _ in normed.named_parameters()} - {
        name for name, _ in plain.named_parameters()
    }
    assert extra == {"q_norm.weight", "k_norm.weight"}
    assert normed.q_norm.weight.shape == (4,)
