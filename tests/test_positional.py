"""positional.py against the papers' formulas, written out independently in the tests.

- sinusoidal: Vaswani et al. 2017 §3.5, computed with Python floats in loops;
- ALiBi slopes: ``get_slopes`` from the paper's repository (ofirpress/attention_with_linear_biases);
- RoPE: Su et al. 2021 with each pair of dimensions read as one complex number.
"""

import math
import re

import pytest
import torch

from annotated_transformer.positional import (
    POSITIONAL_CHOICES,
    ALiBi,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    sinusoidal_shift_matrix,
    sinusoidal_table,
)

# The package returns float32 tables and slopes: one float32 rounding of a value in [-1, 1] is
# at most 6e-8 away.
FLOAT32_ROUNDING = {"rtol": 0.0, "atol": 1e-7}


# ---------------------------------------------------------------------------------------------
# Sinusoidal


def sinusoidal_by_loops(positions: range, d_model: int) -> torch.Tensor:
    """The paper's formula, one entry at a time, in float64."""
    table = torch.zeros(len(positions), d_model, dtype=torch.float64)
    for row, pos in enumerate(positions):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[row, 2 * i] = math.sin(angle)
            table[row, 2 * i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize(
    ("length", "d_model", "offset"), [(1, 2, 0), (7, 8, 0), (5, 6, 3), (4, 16, 100)]
)
def test_sinusoidal_table_matches_the_paper_formula_by_loops(length, d_model, offset):
    table = sinusoidal_table(length, d_model, offset)
    assert table.shape == (length, d_model)
    expected = sinusoidal_by_loops(range(offset, offset + length), d_model)
    torch.testing.assert_close(table.double(), expected, **FLOAT32_ROUNDING)


def test_sinusoidal_table_rejects_odd_d_model():
    with pytest.raises(ValueError, match="sinusoidal encodings need an even d_model, got 7"):
        sinusoidal_table(4, 7)


@pytest.mark.parametrize("shift", [1, 3, 10, 37, -3])
def test_sinusoidal_shift_matrix_maps_pe_of_pos_to_pe_of_pos_plus_k(shift):
    d_model = 16
    positions = range(3, 60)
    matrix = sinusoidal_shift_matrix(shift, d_model)
    assert matrix.dtype == torch.float64 and matrix.shape == (d_model, d_model)

    encodings = sinusoidal_by_loops(positions, d_model)  # [P, d_model], rows PE(pos)
    shifted = sinusoidal_by_loops(range(3 + shift, 60 + shift), d_model)  # rows PE(pos + k)
    torch.testing.assert_close(encodings @ matrix.T, shifted, rtol=0, atol=1e-12)
    # The same map takes the package's own (float32) table along.
    table = sinusoidal_table(len(positions), d_model, offset=3).double()
    package_shifted = sinusoidal_table(len(positions), d_model, offset=3 + shift).double()
    torch.testing.assert_close(table @ matrix.T, package_shifted, rtol=0, atol=1e-6)


@pytest.mark.parametrize("shift", [1, 3, 10])
def test_sinusoidal_shift_matrix_for_a_wrong_k_does_not_match(shift):
    d_model = 16
    encodings = sinusoidal_by_loops(range(0, 40), d_model)
    shifted = sinusoidal_by_loops(range(shift, 40 + shift), d_model)
    for wrong in (shift - 1, shift + 1, -shift):
        error = (encodings @ sinusoidal_shift_matrix(wrong, d_model).T - shifted).abs().max()
        assert error > 0.1, wrong


def test_sinusoidal_encoding_adds_the_table_within_max_len():
    torch.manual_seed(0)
    module = SinusoidalPositionalEncoding(d_model=8, max_len=10)
    x = torch.randn(2, 4, 8)
    expected = x + sinusoidal_by_loops(range(3, 7), 8).float()
    torch.testing.assert_close(module(x, offset=3), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("offset", "length"), [(6, 5), (20, 3), (0, 12)])
def test_sinusoidal_encoding_beyond_max_len_equals_the_table_computed_directly(offset, length):
    torch.manual_seed(0)
    module = SinusoidalPositionalEncoding(d_model=8, max_len=8)
    x = torch.randn(2, length, 8)
    output = module(x, offset=offset)
    torch.testing.assert_close(output, x + sinusoidal_table(length, 8, offset), rtol=0, atol=0)
    expected = x + sinusoidal_by_loops(range(offset, offset + length), 8).float()
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Learned


def test_learned_embedding_adds_the_rows_of_its_positions():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(d_model=6, max_len=8)
    x = torch.randn(2, 3, 6)
    expected = x + module.embedding.weight[4:7]
    torch.testing.assert_close(module(x, offset=4), expected, rtol=0, atol=0)
    module(torch.randn(1, 8, 6))  # exactly max_len positions is allowed


@pytest.mark.parametrize(("offset", "length", "reached"), [(0, 9, 9), (6, 3, 9), (8, 1, 9)])
def test_learned_embedding_beyond_max_len_raises_a_clear_value_error(offset, length, reached):
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(d_model=6, max_len=8)
    message = (
        f"sequence reaches position {reached} but positional='learned' has embeddings for "
        "max_len=8 positions only; raise max_len or use a positional choice that extrapolates"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        module(torch.randn(1, length, 6), offset=offset)


# ---------------------------------------------------------------------------------------------
# Relative position bias


def relative_bias_with_arange_table(n_heads: int, max_distance: int) -> RelativePositionBias:
    """A RelativePositionBias whose table holds 0, 1, 2, ... so that each entry names its cell."""
    module = RelativePositionBias(n_heads, max_distance)
    with torch.no_grad():
        module.bias.weight.copy_(torch.arange((2 * max_distance + 1) * n_heads).view(-1, n_heads))
    return module


def test_relative_position_bias_is_the_table_entry_of_the_clipped_distance():
    n_heads, max_distance = 3, 2
    module = relative_bias_with_arange_table(n_heads, max_distance)
    table = module.bias.weight.detach()
    bias = module(5, 7)
    assert bias.shape == (1, n_heads, 5, 7)
    for h in range(n_heads):
        for i in range(5):
            for j in range(7):
                clipped = max(-max_distance, min(max_distance, j - i))
                assert bias[0, h, i, j].item() == table[clipped + max_distance, h].item()


def test_relative_position_bias_depends_only_on_the_clipped_distance():
    module = relative_bias_with_arange_table(n_heads=2, max_distance=3)
    bias = module(9, 9)[0]  # [H, T, T]
    distance = torch.arange(9)[None, :] - torch.arange(9)[:, None]  # j - i
    clipped = distance.clamp(-3, 3)
    for value in range(-3, 4):
        cells = bias[:, clipped == value]  # [H, number of cells]
        assert torch.all(cells == cells[:, :1])  # one value per head and clipped distance
    # ... and different clipped distances give different entries (the table is all distinct).
    assert bias[0].unique().numel() == 7


@pytest.mark.parametrize(("query_len", "key_len", "offset"), [(1, 8, 7), (3, 8, 2), (2, 5, 3)])
def test_relative_position_bias_offset_equals_slicing_the_full_matrix(query_len, key_len, offset):
    module = relative_bias_with_arange_table(n_heads=2, max_distance=3)
    full = module(key_len, key_len)
    sliced = full[:, :, offset : offset + query_len, :]
    torch.testing.assert_close(module(query_len, key_len, offset), sliced, rtol=0, atol=0)


def test_relative_position_bias_rejects_max_distance_below_one():
    with pytest.raises(ValueError, match="relative_max_distance must be >= 1, got 0"):
        RelativePositionBias(n_heads=2, max_distance=0)


# ---------------------------------------------------------------------------------------------
# ALiBi


def get_slopes(n):
    """Verbatim from ofirpress/attention_with_linear_biases, fairseq/models/transformer.py."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    else:
        closest_power_of_2 = 2 ** math.floor(math.log2(n))
        return (
            get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
        )


def assert_slopes(actual: torch.Tensor, expected: list[float]) -> None:
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual.double(), expected, rtol=1e-7, atol=0)  # float32 rounding


def test_alibi_slopes_for_8_heads_are_the_published_halves():
    assert_slopes(alibi_slopes(8), [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])


def test_alibi_slopes_for_16_heads_are_powers_of_one_over_sqrt_two():
    assert_slopes(alibi_slopes(16), [2 ** (-0.5 * (i + 1)) for i in range(16)])


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 12, 20, 24, 32])
def test_alibi_slopes_match_the_reference_get_slopes(n_heads):
    slopes = alibi_slopes(n_heads)
    assert slopes.shape == (n_heads,)
    assert_slopes(slopes, get_slopes(n_heads))


def test_alibi_slopes_for_6_heads_interleave_the_12_head_sequence():
    """Spelled out: 4 heads' slopes, then every other slope of 8 heads."""
    expected = [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    assert_slopes(alibi_slopes(6), expected)
    assert get_slopes(6) == pytest.approx(expected, rel=1e-15)


def test_alibi_slopes_reject_non_positive_head_counts():
    with pytest.raises(ValueError, match="n_heads must be positive, got 0"):
        alibi_slopes(0)


def test_alibi_bias_is_minus_slope_times_distance():
    module = ALiBi(n_heads=6)
    slopes = get_slopes(6)
    bias = module(4, 6)
    assert bias.shape == (1, 6, 4, 6)
    expected = torch.zeros(1, 6, 4, 6, dtype=torch.float64)
    for h in range(6):
        for i in range(4):
            for j in range(6):
                expected[0, h, i, j] = -slopes[h] * abs(i - j)
    torch.testing.assert_close(bias.double(), expected, rtol=1e-7, atol=0)


@pytest.mark.parametrize(("query_len", "key_len", "offset"), [(1, 9, 8), (3, 9, 4)])
def test_alibi_offset_equals_slicing_the_full_matrix(query_len, key_len, offset):
    module = ALiBi(n_heads=4)
    sliced = module(key_len, key_len)[:, :, offset : offset + query_len, :]
    torch.testing.assert_close(module(query_len, key_len, offset), sliced, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# RoPE
#
# The package computes the angles m·θ in float32 (as fused kernels do), so these tests run in
# float32; the tolerances allow a few float32 roundings of angles up to ~60 radians (the largest
# error seen is 3e-6).

ROPE_TOLERANCE = {"rtol": 0.0, "atol": 1e-5}


def rope_by_complex_numbers(x: torch.Tensor, offset: int = 0, base: float = 10000.0):
    """Su et al. 2021: read (x_2j, x_2j+1) as x_2j + i·x_2j+1, multiply by e^{i·m·θ_j}."""
    d_k = x.size(-1)
    theta = torch.tensor([base ** (-2 * j / d_k) for j in range(d_k // 2)], dtype=torch.float64)
    positions = torch.arange(offset, offset + x.size(-2), dtype=torch.float64)
    angle = positions[:, None] * theta[None, :]  # [T, d_k / 2]
    rotation = torch.polar(torch.ones_like(angle), angle)  # e^{i m θ_j}
    pairs = torch.complex(x[..., 0::2].double(), x[..., 1::2].double())  # [..., T, d_k / 2]
    rotated = pairs * rotation
    return torch.stack([rotated.real, rotated.imag], dim=-1).flatten(-2)  # [..., T, d_k]


def rope_at(rope: RotaryEmbedding, vector: torch.Tensor, position: int) -> torch.Tensor:
    """Rotate one ``[d_k]`` vector as if it stood at ``position``."""
    return rope(vector.view(1, 1, 1, -1), offset=position).view(-1)


@pytest.mark.parametrize(
    ("d_k", "offset", "base"), [(8, 0, 10000.0), (16, 0, 10000.0), (16, 37, 500.0)]
)
def test_rope_matches_a_complex_number_reference(d_k, offset, base):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 20, d_k)
    rotated = RotaryEmbedding(d_k, base)(x, offset=offset)
    assert rotated.shape == x.shape and rotated.dtype == x.dtype
    expected = rope_by_complex_numbers(x, offset, base)
    torch.testing.assert_close(rotated.double(), expected, **ROPE_TOLERANCE)


def test_rope_complex_reference_comparison_fails_for_split_half_pairing():
    """The reference pairs adjacent dimensions; pairing i with i + d_k/2 (GPT-NeoX) differs."""
    torch.manual_seed(0)
    x = torch.randn(1, 1, 10, 8)
    permutation = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # adjacent pairs <- split halves
    split_half = RotaryEmbedding(8)(x[..., permutation], 0)[..., permutation.argsort()]
    assert not torch.allclose(split_half.double(), rope_by_complex_numbers(x), atol=1e-2)


def test_rope_score_depends_only_on_the_relative_position():
    torch.manual_seed(0)
    d_k = 16
    rope = RotaryEmbedding(d_k)
    query, key = torch.randn(d_k), torch.randn(d_k)

    def score(m: int, n: int) -> float:
        return torch.dot(rope_at(rope, query, m), rope_at(rope, key, n)).item()

    scores_by_offset = {}
    for offset in (-7, -1, 0, 1, 3, 12):
        scores = [score(n + offset, n) for n in range(0, 40, 3) if n + offset >= 0]
        assert max(scores) - min(scores) < 1e-5, offset  # same m - n, same score
        scores_by_offset[offset] = scores[0]
    # Different offsets give different scores.
    values = sorted(scores_by_offset.values())
    assert min(torch.tensor(values).diff()) > 1e-2


def test_rope_preserves_the_norm_of_every_pair_and_vector():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 30, 16)
    rotated = RotaryEmbedding(16)(x, offset=5)
    pair_norms = x.unflatten(-1, (-1, 2)).norm(dim=-1)
    torch.testing.assert_close(
        rotated.unflatten(-1, (-1, 2)).norm(dim=-1), pair_norms, rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=1e-6)


def test_rope_at_position_zero_is_the_identity_and_elsewhere_is_not():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 8)
    rotated = RotaryEmbedding(8)(x)
    torch.testing.assert_close(rotated[..., 0, :], x[..., 0, :], rtol=0, atol=0)
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :], atol=1e-3)


@pytest.mark.parametrize(("start", "length"), [(0, 4), (5, 1), (5, 4), (11, 6)])
def test_rope_offset_equals_slicing_a_longer_sequence(start, length):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 17, 8)
    sliced = rope(x)[..., start : start + length, :]
    torch.testing.assert_close(
        rope(x[..., start : start + length, :], start), sliced, rtol=0, atol=0
    )


def test_rope_rejects_odd_head_size():
    with pytest.raises(ValueError, match="rope needs an even head size d_k, got d_k=7"):
        RotaryEmbedding(7)


# ---------------------------------------------------------------------------------------------
# The PositionalEncoding dispatcher


def test_positional_encoding_rejects_unknown_names_listing_all_choices():
    message = "positional='rotary' is not one of: sinusoidal, learned, relative, rope, alibi, none"
    with pytest.raises(ValueError, match=re.escape(message)):
        PositionalEncoding("rotary", d_model=8, n_heads=2, max_len=16)
    assert POSITIONAL_CHOICES == ("sinusoidal", "learned", "relative", "rope", "alibi", "none")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sinusoidal", "absolute"),
        ("learned", "absolute"),
        ("relative", "bias"),
        ("alibi", "bias"),
        ("rope", "rotary"),
        ("none", None),
    ],
)
def test_positional_encoding_answers_one_question_per_scheme(name, kind):
    torch.manual_seed(0)
    encoding = PositionalEncoding(name, d_model=8, n_heads=2, max_len=16)
    x = torch.randn(2, 5, 8)
    added = encoding.add_absolute(x, offset=1)
    bias = encoding.attention_bias(5, 5)

    assert (kind == "absolute") == (not torch.equal(added, x))
    assert (kind == "bias") == (bias is not None)
    assert (kind == "rotary") == (encoding.rotary is not None)
    if kind == "bias":
        assert bias.shape == (1, 2, 5, 5)
    if kind == "rotary":
        assert encoding.rotary.d_k == 4  # d_model 8 / 2 heads
    if name == "sinusoidal":
        torch.testing.assert_close(added, x + sinusoidal_table(5, 8, offset=1), rtol=0, atol=0)


def test_rope_angles_survive_a_half_precision_cast():
    """A model cast with .half()/.to(bfloat16) keeps exact rotation angles (nothing to round)."""
    rotary = RotaryEmbedding(8).to(torch.bfloat16)
    x = torch.randn(1, 1, 4, 8)
    far = rotary(x.to(torch.bfloat16), offset=4000).float()
    exact = RotaryEmbedding(8)(x, offset=4000)
    torch.testing.assert_close(far, exact, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("name", POSITIONAL_CHOICES)
def test_position_state_holds_the_bias_and_the_rotation_of_its_positions(name):
    """One object per forward: the bias ``attention_bias`` gives and the rotation ``rotary`` does,
    for ``length`` new positions after ``offset`` cached ones."""
    torch.manual_seed(0)
    encoding = PositionalEncoding(name, d_model=8, n_heads=2, max_len=16)
    with torch.no_grad():
        for parameter in encoding.parameters():
            parameter.normal_()
    state = encoding.position_state(3, offset=4)
    queries = torch.randn(2, 2, 3, 4)  # [B, H, T, d_k]

    assert state.offset == 4
    expected_bias = encoding.attention_bias(3, 7, offset=4)  # keys 0..6, queries 4..6
    if expected_bias is None:
        assert state.bias is None
    else:
        torch.testing.assert_close(state.bias, expected_bias, rtol=0, atol=0)
    expected = queries if encoding.rotary is None else encoding.rotary(queries, offset=4)
    torch.testing.assert_close(state.rotate(queries), expected, rtol=0, atol=0)
