"""norms.py against torch.nn.LayerNorm and torch.nn.RMSNorm, in float64."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.norms import NORM_CHOICES, LayerNorm, RMSNorm, build_norm

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
SHAPES = [(5,), (3, 5), (2, 3, 5), (2, 1, 4, 5)]


def with_random_parameters(module: nn.Module) -> nn.Module:
    """float64 and random gain (and bias): the default ones/zeros would hide a dropped parameter."""
    module = module.double()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()
    return module


def copy_parameters(source: nn.Module, target: nn.Module) -> nn.Module:
    target.load_state_dict(source.state_dict())
    return target


@pytest.mark.parametrize("explicit", [True, False], ids=["formula", "fused"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
def test_layernorm_matches_torch_layernorm(shape, eps, explicit):
    torch.manual_seed(0)
    d_model = shape[-1]
    ours = with_random_parameters(LayerNorm(d_model, eps, explicit=explicit))
    reference = copy_parameters(ours, nn.LayerNorm(d_model, eps=eps).double())
    x = 3 * torch.randn(*shape, dtype=torch.float64) + 1
    torch.testing.assert_close(ours(x), reference(x), **TIGHT)


@pytest.mark.parametrize("explicit", [True, False], ids=["formula", "fused"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
def test_rmsnorm_matches_torch_rmsnorm(shape, eps, explicit):
    torch.manual_seed(0)
    d_model = shape[-1]
    ours = with_random_parameters(RMSNorm(d_model, eps, explicit=explicit))
    reference = copy_parameters(ours, nn.RMSNorm(d_model, eps=eps).double())
    x = 3 * torch.randn(*shape, dtype=torch.float64) + 1
    torch.testing.assert_close(ours(x), reference(x), **TIGHT)


def test_layernorm_and_rmsnorm_differ_on_inputs_with_a_mean():
    """RMSNorm does not centre: the two comparisons above cannot both pass by accident."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, dtype=torch.float64) + 2
    layer, rms = LayerNorm(6).double(), RMSNorm(6).double()
    assert not torch.allclose(layer(x), rms(x), atol=1e-2)
    centred = x - x.mean(dim=-1, keepdim=True)  # with zero mean they coincide
    torch.testing.assert_close(layer(centred), rms(centred), **TIGHT)


@pytest.mark.parametrize("explicit", [True, False], ids=["formula", "fused"])
def test_layernorm_passes_gradcheck_in_float64(explicit):
    torch.manual_seed(0)
    norm = with_random_parameters(LayerNorm(5, explicit=explicit))
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)

    def function(x, weight, bias):
        return torch.func.functional_call(norm, {"weight": weight, "bias": bias}, (x,))

    assert torch.autograd.gradcheck(function, (x, norm.weight, norm.bias))


@pytest.mark.parametrize("explicit", [True, False], ids=["formula", "fused"])
def test_rmsnorm_passes_gradcheck_in_float64(explicit):
    torch.manual_seed(0)
    norm = with_random_parameters(RMSNorm(5, explicit=explicit))
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)

    def function(x, weight):
        return torch.func.functional_call(norm, {"weight": weight}, (x,))

    assert torch.autograd.gradcheck(function, (x, norm.weight))


def test_layernorm_with_unit_gain_and_zero_bias_gives_zero_mean_unit_variance():
    torch.manual_seed(0)
    eps = 1e-5
    norm = LayerNorm(64, eps).double()
    x = 5 * torch.randn(3, 7, 64, dtype=torch.float64) - 2
    y = norm(x)
    torch.testing.assert_close(y.mean(dim=-1), torch.zeros(3, 7, dtype=torch.float64), **TIGHT)
    # Biased variance of the output: exactly var / (var + eps) by construction.
    variance = x.var(dim=-1, unbiased=False)
    torch.testing.assert_close(y.var(dim=-1, unbiased=False), variance / (variance + eps), **TIGHT)
    # With inputs of variance ~25 that is 1 to within eps / 25.
    torch.testing.assert_close(
        y.var(dim=-1, unbiased=False), torch.ones(3, 7, dtype=torch.float64), rtol=0, atol=1e-6
    )


def test_rmsnorm_with_unit_gain_gives_unit_root_mean_square():
    torch.manual_seed(0)
    norm = RMSNorm(64, eps=0.0).double()
    y = norm(3 * torch.randn(3, 7, 64, dtype=torch.float64) + 1)
    torch.testing.assert_close(
        y.pow(2).mean(dim=-1).sqrt(), torch.ones(3, 7, dtype=torch.float64), **TIGHT
    )


@pytest.mark.parametrize(
    ("name", "expected_type"), [("layernorm", LayerNorm), ("rmsnorm", RMSNorm)]
)
def test_build_norm_returns_the_named_layer_with_its_eps(name, expected_type):
    norm = build_norm(name, 8, eps=1e-3)
    assert type(norm) is expected_type
    assert norm.eps == 1e-3 and norm.weight.shape == (8,)


def test_build_norm_rejects_unknown_names_listing_all_choices():
    assert NORM_CHOICES == ("layernorm", "rmsnorm")
    with pytest.raises(
        ValueError, match=re.escape("norm='batchnorm' is not one of: layernorm, rmsnorm")
    ):
        build_norm("batchnorm", 8)


@pytest.mark.parametrize("norm_class", [LayerNorm, RMSNorm])
def test_formula_and_fused_kernel_agree_in_value_and_gradient(norm_class):
    """The explicit formula (what chapter 04 derives) and the fused default are the same function."""
    torch.manual_seed(0)
    formula = with_random_parameters(norm_class(16, explicit=True))
    fused = copy_parameters(formula, norm_class(16).double())
    assert fused.explicit is False  # the fast path is the default
    x = torch.randn(3, 7, 16, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(fused(x), formula(x), rtol=1e-12, atol=1e-12)
    (gradient_fused,) = torch.autograd.grad(fused(x).square().sum(), x)
    (gradient_formula,) = torch.autograd.grad(formula(x).square().sum(), x)
    torch.testing.assert_close(gradient_fused, gradient_formula, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rmsnorm_in_half_precision_on_the_cpu_matches_the_fused_kernel(dtype):
    """The formula that replaces F.rms_norm for a half-precision input on the CPU: the same
    output and gradients as the fused kernel, to one rounding of that precision."""
    torch.manual_seed(0)
    x = (3 * torch.randn(4, 10, 64)).to(dtype).requires_grad_()  # [B, T, d_model]
    ours = with_random_parameters(RMSNorm(64))
    output = ours(x)
    assert output.dtype == dtype
    grad = torch.randn_like(output)
    output.backward(grad)
    x_grad, weight_grad = x.grad.clone(), ours.weight.grad.clone()
    x.grad, ours.weight.grad = None, None
    fused = F.rms_norm(x, (64,), ours.weight.to(dtype), ours.eps)  # the kernel it replaces
    fused.backward(grad)
    tolerance = {"atol": 0.05, "rtol": 0.02}  # a few roundings of an 8-bit mantissa
    torch.testing.assert_close(output, fused, **tolerance)
    torch.testing.assert_close(x_grad, x.grad, **tolerance)
    torch.testing.assert_close(weight_grad, ours.weight.grad, atol=0.5, rtol=0.02)
    exact = RMSNorm(64).double()
    exact.load_state_dict(ours.state_dict())
    torch.testing.assert_close(output.double(), exact(x.double()), atol=0.1, rtol=0.02)
