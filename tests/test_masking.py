"""masking.py: the values of each mask, and the border with torch.nn.MultiheadAttention."""

import pytest
import torch
from torch import nn

from annotated_transformer.attention import MultiHeadAttention
from annotated_transformer.masking import (
    causal_mask,
    combine_masks,
    decoder_mask,
    padding_mask,
    to_torch_blocked,
)

PAD = 0


def causal_by_loops(size: int) -> torch.Tensor:
    mask = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        for j in range(size):
            mask[i, j] = j <= i
    return mask


def padded_tokens() -> torch.Tensor:
    """``[3, 5]`` token ids: no padding, two trailing pads, and a pad in the middle."""
    return torch.tensor([[5, 6, 7, 8, 9], [3, 4, 2, PAD, PAD], [1, PAD, 4, 4, PAD]])


# ---------------------------------------------------------------------------------------------
# causal_mask


@pytest.mark.parametrize("size", [0, 1, 2, 5, 9])
def test_causal_mask_equals_lower_triangle_with_diagonal_by_loops(size):
    mask = causal_mask(size)
    assert mask.dtype == torch.bool
    assert mask.shape == (size, size)
    assert torch.equal(mask, causal_by_loops(size))


def test_causal_mask_lets_each_position_see_itself_and_the_past_only():
    mask = causal_mask(4)
    assert mask.diagonal().all()
    assert mask.sum(dim=-1).tolist() == [1, 2, 3, 4]
    assert not mask.triu(diagonal=1).any()


def test_causal_mask_rejects_negative_size():
    with pytest.raises(ValueError, match="query_len must be >= 0, got -1"):
        causal_mask(-1)


@pytest.mark.parametrize(("query_len", "key_len"), [(1, 1), (1, 6), (3, 7), (4, 4), (0, 3)])
def test_causal_mask_with_a_cache_is_the_last_rows_of_the_square_mask_by_loops(query_len, key_len):
    """Queries that are the last ``query_len`` of ``key_len`` positions (a KV cache holds the rest):
    query ``i`` sits at ``i + key_len - query_len`` and sees the keys up to there."""
    mask = causal_mask(query_len, key_len)
    assert mask.shape == (query_len, key_len)
    assert torch.equal(mask, causal_by_loops(key_len)[key_len - query_len :])


def test_causal_mask_refuses_fewer_keys_than_queries():
    with pytest.raises(ValueError, match="key_len=2 < query_len=3"):
        causal_mask(3, 2)


# ---------------------------------------------------------------------------------------------
# padding_mask


def test_padding_mask_shape_and_values():
    tokens = padded_tokens()
    mask = padding_mask(tokens, pad_id=PAD)
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 1, 5)
    expected = [[True] * 5, [True, True, True, False, False], [True, False, True, True, False]]
    assert mask[:, 0, 0, :].tolist() == expected


def test_padding_mask_uses_the_given_pad_id_not_zero():
    tokens = torch.tensor([[0, 1, 2, 2]])
    assert padding_mask(tokens, pad_id=2)[0, 0, 0].tolist() == [True, True, False, False]


def test_padding_mask_rejects_tokens_that_are_not_two_dimensional():
    with pytest.raises(ValueError, match=r"tokens must be \[B, S\], got shape \(5,\)"):
        padding_mask(torch.arange(5), pad_id=PAD)


# ---------------------------------------------------------------------------------------------
# combine_masks and decoder_mask


def test_combine_masks_broadcasts_padding_and_causal_to_batch_query_key():
    tokens = padded_tokens()
    combined = combine_masks(padding_mask(tokens, PAD), causal_mask(5))
    assert combined.shape == (3, 1, 5, 5)
    for batch in range(3):
        for i in range(5):
            for j in range(5):
                expected = j <= i and tokens[batch, j].item() != PAD
                assert combined[batch, 0, i, j].item() == expected, (batch, i, j)


def test_combine_masks_skips_none_and_returns_none_for_no_masks():
    causal = causal_mask(3)
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, causal, None), causal)


def test_combine_masks_is_a_logical_and():
    torch.manual_seed(0)
    first, second, third = (torch.rand(2, 4, 4) < 0.5 for _ in range(3))
    assert torch.equal(combine_masks(first, second, third), first & second & third)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_combine_masks_rejects_non_bool_masks(dtype):
    with pytest.raises(TypeError, match=r"masks must be bool \(True = may attend\), got torch\."):
        combine_masks(causal_mask(3), torch.ones(3, 3, dtype=dtype))


def test_decoder_mask_is_causal_and_hides_padding():
    tokens = padded_tokens()
    mask = decoder_mask(tokens, pad_id=PAD)
    assert mask.shape == (3, 1, 5, 5)
    keys_not_padding = (tokens != PAD)[:, None, None, :]
    assert torch.equal(mask, causal_by_loops(5)[None, None] & keys_not_padding)


def test_decoder_mask_without_pad_id_is_the_causal_mask():
    mask = decoder_mask(padded_tokens(), pad_id=None)
    assert torch.equal(mask, causal_by_loops(5))


# ---------------------------------------------------------------------------------------------
# to_torch_blocked: the border with torch.nn.MultiheadAttention (True = blocked)


def test_to_torch_blocked_inverts_and_round_trips():
    torch.manual_seed(0)
    mask = torch.rand(2, 1, 4, 6) < 0.5
    blocked = to_torch_blocked(mask)
    assert blocked.dtype == torch.bool
    assert torch.equal(blocked, ~mask)
    assert torch.equal(to_torch_blocked(blocked), mask)


def ours_and_torch_mha() -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our attention and torch's, float64, eval, with the same weights."""
    ours = MultiHeadAttention(8, 2).double().eval()
    reference = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    with torch.no_grad():
        ours.qkv.bias.normal_()
        ours.out.bias.normal_()
        reference.in_proj_weight.copy_(ours.qkv.weight)
        reference.in_proj_bias.copy_(ours.qkv.bias)
        reference.out_proj.weight.copy_(ours.out.weight)
        reference.out_proj.bias.copy_(ours.out.bias)
    return ours, reference


def test_torch_multihead_attention_given_to_torch_blocked_attn_mask_matches_ours():
    torch.manual_seed(0)
    ours, reference = ours_and_torch_mha()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = torch.rand(5, 5) < 0.5  # True = may attend
    mask[:, 0] = True  # every query sees at least one key (torch gives NaN otherwise)

    expected, expected_weights = reference(
        x, x, x, attn_mask=to_torch_blocked(mask), average_attn_weights=False
    )
    output, weights = ours(x, mask=mask, need_weights=True)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-10, atol=1e-12)
    # Forgetting the conversion gives something else: the convention matters.
    mask[:, 1] = True  # (keep every row of the inverted mask attendable, too)
    unconverted, _ = reference(x, x, x, attn_mask=mask, need_weights=False)
    assert not torch.allclose(unconverted, ours(x, mask=mask)[0], rtol=1e-3, atol=1e-3)


def test_torch_multihead_attention_given_to_torch_blocked_key_padding_mask_matches_ours():
    torch.manual_seed(0)
    ours, reference = ours_and_torch_mha()
    tokens = padded_tokens()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    mask = padding_mask(tokens, PAD)  # [B, 1, 1, S]

    expected, _ = reference(
        x, x, x, key_padding_mask=to_torch_blocked(mask[:, 0, 0, :]), need_weights=False
    )
    output, _ = ours(x, mask=mask)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
