"""The closed forms of cost.py against torch's own FLOP counter and against real tensors."""

import pytest
import torch
from conftest import tiny_config
from torch.utils.flop_counter import FlopCounterMode

import annotated_transformer as at
from annotated_transformer.cost import (
    attention_flops,
    attention_scores_bytes,
    decoding_flops,
    forward_flops,
    kv_cache_bytes,
    linear_flops,
    matmul_parameters,
    training_flops_per_token,
)
from annotated_transformer.model import build_model


def config_of(**overrides):
    # three heads of width 8: a head count other than two catches a formula that forgets H
    sizes = dict(vocab_size=23, d_model=24, n_heads=3, n_layers=2, d_ff=40, max_len=64)
    return tiny_config(**{**sizes, "pad_id": None, **overrides})


def explicit(model):
    """The explicit attention path: its products are plain matmuls torch's counter sees."""
    for module in model.modules():
        if isinstance(module, at.MultiHeadAttention):
            module.use_sdpa = False
    return model.eval()


def counted_flops(function, *args):
    with FlopCounterMode(display=False) as counter:
        function(*args)
    return counter.get_total_flops()


def test_attention_flops_match_torch_flop_counter():
    query, key = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8)
    value = torch.randn(2, 3, 7, 8)
    measured = counted_flops(at.dot_product_attention, query, key, value)
    assert measured == attention_flops(2, 3, 5, 7, 8) == 4 * 2 * 3 * 5 * 7 * 8


def test_linear_flops_match_a_layers_projections():
    layer = at.EncoderLayer(config_of()).eval()
    for module in layer.modules():
        if isinstance(module, at.MultiHeadAttention):
            module.use_sdpa = False
    x = torch.randn(2, 6, 24)
    measured = counted_flops(layer, x)
    assert measured == linear_flops(24, 40, 2 * 6) + attention_flops(2, 3, 6, 6, 8)
    assert linear_flops(24, 96, 10) == 24 * 10 * 24**2  # d_ff = 4d: 24·T·d²


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-only"])
def test_forward_flops_match_torch_flop_counter_on_the_model(arch):
    config = config_of(arch=arch)
    model = explicit(build_model(config))
    tokens = torch.randint(23, (3, 10))
    assert counted_flops(model, tokens) == forward_flops(config, 3, 10)


def test_training_flops_are_three_forward_passes_and_match_the_counter():
    config = config_of()
    assert training_flops_per_token(config, 10) * 3 * 10 == 3 * forward_flops(config, 3, 10)
    model = explicit(build_model(config)).train()
    tokens = torch.randint(23, (3, 10))

    def step():
        model(tokens).sum().backward()

    # The backward of the input embedding is a scatter, not a product: the counter agrees.
    assert counted_flops(step) == training_flops_per_token(config, 10) * 3 * 10
    weights = sum(
        module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear)
    )
    assert matmul_parameters(config) == weights


def test_decoding_flops_match_the_counter_with_and_without_the_cache():
    config = config_of()
    model = explicit(build_model(config))
    prompt = torch.randint(23, (1, 4))
    for cache in (True, False):
        measured = counted_flops(
            lambda cache=cache: at.greedy_decode(
                model, prompt=prompt, max_new_tokens=6, use_cache=cache
            )
        )
        assert measured == decoding_flops(config, 4, 6, cache)
    assert decoding_flops(config, 4, 6, True) < decoding_flops(config, 4, 6, False)


def test_memory_formulas_match_real_tensors():
    scores = torch.empty(2, 3, 5, 7)
    assert attention_scores_bytes(2, 3, 5, 7) == scores.numel() * scores.element_size()
    config = config_of()
    model = build_model(config).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(23, (2, 9)), cache=cache)
    held = sum(
        layer.key.numel() * layer.key.element_size() + layer.value.numel() * 4
        for layer in cache.self_attention
    )
    assert kv_cache_bytes(config, 2, 9) == held


def test_an_encoder_decoder_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="one stack"):
        forward_flops(config_of(arch="encoder-decoder"), 1, 4)


def test_head_sizes_of_their_own_are_refused_with_a_reason():
    with pytest.raises(ValueError, match=r"H·d_k = H·d_v = d_model; got .*d_k=2"):
        forward_flops(config_of(d_k=2), 1, 4)
    tied = config_of()
    assert forward_flops(config_of(d_k=tied.d_head, d_v=tied.d_head), 1, 4) == forward_flops(
        tied, 1, 4
    )
