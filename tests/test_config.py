"""TransformerConfig: each validation error names the field and the bad value; resolved values."""

import dataclasses
import re

import pytest
from conftest import tiny_config

from annotated_transformer import TransformerConfig
from annotated_transformer.config import (
    ACTIVATION_CHOICES,
    ARCH_CHOICES,
    INIT_CHOICES,
    NORM_POSITION_CHOICES,
)
from annotated_transformer.norms import NORM_CHOICES
from annotated_transformer.positional import POSITIONAL_CHOICES


def small_config(**overrides) -> TransformerConfig:
    return tiny_config(**{"vocab_size": 10, "n_layers": 2, "max_len": 32, **overrides})


def field_and_value(field: str, value: object) -> str:
    """The regex that finds ``field=value`` (as ``repr`` writes the value) in an error message."""
    return re.escape(f"{field}={value!r}")


# ---------------------------------------------------------------------------------------------
# Valid configurations


def test_defaults_are_the_paper_base_model():
    config = TransformerConfig()
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (512, 8, 6, 2048)
    assert config.dropout == 0.1
    assert config.d_head == 64
    assert config.norm_position == "post"
    assert config.positional == "sinusoidal"


@pytest.mark.parametrize(
    ("field", "choices"),
    [
        ("arch", ARCH_CHOICES),
        ("positional", POSITIONAL_CHOICES),
        ("norm", NORM_CHOICES),
        ("norm_position", NORM_POSITION_CHOICES),
        ("activation", ACTIVATION_CHOICES),
        ("init", INIT_CHOICES),
    ],
)
def test_every_listed_choice_is_accepted(field, choices):
    for choice in choices:
        assert getattr(small_config(**{field: choice}), field) == choice


# ---------------------------------------------------------------------------------------------
# Choices


@pytest.mark.parametrize(
    ("field", "bad", "choices"),
    [
        ("arch", "decoder_only", ARCH_CHOICES),
        ("positional", "rotary", POSITIONAL_CHOICES),
        ("norm", "batchnorm", NORM_CHOICES),
        ("norm_position", "middle", NORM_POSITION_CHOICES),
        ("activation", "swish", ACTIVATION_CHOICES),
        ("init", "kaiming", INIT_CHOICES),
        ("positional", None, POSITIONAL_CHOICES),
    ],
)
def test_unknown_choice_names_field_value_and_every_valid_name(field, bad, choices):
    with pytest.raises(ValueError, match=field_and_value(field, bad)) as error:
        small_config(**{field: bad})
    message = str(error.value)
    assert message.endswith("is not one of: " + ", ".join(choices))


# ---------------------------------------------------------------------------------------------
# Sizes

REQUIRED_SIZES = ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len")
OPTIONAL_SIZES = ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers")


@pytest.mark.parametrize(
    "field", REQUIRED_SIZES + OPTIONAL_SIZES + ("d_k", "d_v", "relative_max_distance")
)
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_non_positive_or_non_integer_size_is_rejected(field, bad):
    with pytest.raises(ValueError, match=field_and_value(field, bad) + ".*positive integer"):
        small_config(**{field: bad})


@pytest.mark.parametrize("bad", [0, -0.5, float("nan"), float("inf"), True, "1"])
def test_token_rms_accepts_none_or_a_positive_finite_number(bad):
    with pytest.raises(ValueError, match=field_and_value("token_rms", bad) + ".*number in"):
        small_config(token_rms=bad)
    assert small_config(token_rms=None).token_rms is None
    assert small_config(token_rms=1).token_rms == 1


@pytest.mark.parametrize("field", OPTIONAL_SIZES)
def test_optional_sizes_accept_none_and_positive_integers(field):
    assert getattr(small_config(**{field: None}), field) is None
    assert getattr(small_config(arch="encoder-decoder", **{field: 3}), field) == 3


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-only"])
@pytest.mark.parametrize("field", OPTIONAL_SIZES)
def test_encoder_decoder_sizes_are_refused_by_single_stack_models(arch, field):
    """A decoder-only model has one stack and one vocabulary: n_decoder_layers=12 would be ignored."""
    with pytest.raises(
        ValueError, match=field_and_value(field, 3) + ".*only with arch='encoder-decoder'"
    ):
        small_config(arch=arch, **{field: 3})


@pytest.mark.parametrize(
    "field",
    ["residual", "bias", "scale_embeddings", "tie_embeddings", "share_embeddings", "final_norm"],
)
@pytest.mark.parametrize("bad", ["false", 0, 1, None])
def test_yes_no_fields_must_be_booleans(field, bad):
    if field == "final_norm" and bad is None:  # None means "decide from norm_position"
        assert small_config(final_norm=None).use_final_norm is False
        return
    with pytest.raises(ValueError, match=field_and_value(field, bad) + ".*True or False"):
        small_config(**{field: bad})


def test_d_model_not_divisible_by_n_heads_names_both():
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible by n_heads=4"):
        small_config(d_model=30, n_heads=4, positional="none")


def test_rope_with_odd_head_size_is_rejected():
    # d_head = 18 / 2 = 9
    with pytest.raises(ValueError, match=r"positional='rope' needs an even head size.*18 / 2 = 9"):
        small_config(d_model=18, n_heads=2, positional="rope")
    assert small_config(d_model=20, n_heads=2, positional="rope").d_head == 10


def test_head_sizes_default_to_d_model_over_n_heads_and_can_be_set_apart():
    config = small_config(d_model=24, n_heads=3, positional="none")
    assert (config.d_k, config.d_v, config.key_size, config.value_size) == (None, None, 8, 8)
    config = small_config(d_model=24, n_heads=3, d_k=4, positional="none")
    assert (config.key_size, config.value_size) == (4, 8)  # Table 3, row B: d_k alone
    # d_model need not divide into heads when both sizes are given ...
    config = small_config(d_model=30, n_heads=4, d_k=6, d_v=5, positional="none")
    assert (config.key_size, config.value_size) == (6, 5)
    # ... but one left to its default still needs d_model / n_heads.
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible.*both head sizes d_k"):
        small_config(d_model=30, n_heads=4, d_k=6, positional="none")


def test_rope_with_an_odd_d_k_is_rejected_and_an_even_one_accepted():
    with pytest.raises(ValueError, match=r"positional='rope' needs an even head size d_k.*d_k=5"):
        small_config(d_model=20, n_heads=2, d_k=5, positional="rope")
    assert small_config(d_model=18, n_heads=2, d_k=4, d_v=9, positional="rope").key_size == 4


def test_sinusoidal_with_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match=r"positional='sinusoidal' needs an even d_model, got 9"):
        small_config(d_model=9, n_heads=1, positional="sinusoidal")
    assert small_config(d_model=9, n_heads=1, positional="learned").d_model == 9


# ---------------------------------------------------------------------------------------------
# Rates and other numbers


@pytest.mark.parametrize("field", ["dropout", "attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, "0.1", True, float("nan")])
def test_dropout_outside_zero_one_is_rejected(field, bad):
    with pytest.raises(ValueError, match=field_and_value(field, bad) + r".*\[0, 1\)"):
        small_config(**{field: bad})


@pytest.mark.parametrize("field", ["dropout", "attention_dropout", "activation_dropout"])
def test_dropout_accepts_zero_and_just_below_one(field):
    assert getattr(small_config(**{field: 0}), field) == 0
    assert getattr(small_config(**{field: 0.999}), field) == 0.999


@pytest.mark.parametrize("bad", [0, -1e-5, "1e-5", float("nan"), True])
def test_norm_eps_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match=field_and_value("norm_eps", bad) + ".*positive number"):
        small_config(norm_eps=bad)


@pytest.mark.parametrize("bad", [1, 0.5, -10000.0, "10000", True])
def test_rope_base_must_exceed_one(bad):
    with pytest.raises(ValueError, match=field_and_value("rope_base", bad) + ".*> 1"):
        small_config(rope_base=bad)


# ---------------------------------------------------------------------------------------------
# Padding id and shared embeddings


@pytest.mark.parametrize("bad", [-1, 10, 11, 1.0, "0", True])
def test_pad_id_outside_the_vocabulary_is_rejected(bad):
    with pytest.raises(ValueError, match=field_and_value("pad_id", bad) + r".*\[0, 10\)"):
        small_config(vocab_size=10, pad_id=bad)


def test_pad_id_must_fit_the_smaller_vocabulary_of_an_encoder_decoder():
    with pytest.raises(ValueError, match=r"pad_id=7 .*\[0, 5\)"):
        small_config(arch="encoder-decoder", src_vocab_size=20, tgt_vocab_size=5, pad_id=7)
    assert small_config(pad_id=None).pad_id is None
    assert small_config(pad_id=9).pad_id == 9


def test_share_embeddings_needs_an_encoder_decoder():
    for arch in ("decoder-only", "encoder-only"):
        with pytest.raises(ValueError, match=rf"share_embeddings=True .*arch={arch!r}"):
            small_config(arch=arch, share_embeddings=True)


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match=r"src_vocab_size=12 and tgt_vocab_size=10"):
        small_config(arch="encoder-decoder", share_embeddings=True, src_vocab_size=12)
    config = small_config(arch="encoder-decoder", share_embeddings=True, src_vocab_size=10)
    assert config.source_vocab_size == config.target_vocab_size == 10


# ---------------------------------------------------------------------------------------------
# Resolved values


def test_layer_counts_default_to_n_layers():
    config = small_config(n_layers=3)
    assert (config.encoder_layers, config.decoder_layers) == (3, 3)
    config = small_config(
        arch="encoder-decoder", n_layers=3, n_encoder_layers=5, n_decoder_layers=1
    )
    assert (config.encoder_layers, config.decoder_layers) == (5, 1)


def test_vocab_sizes_default_to_vocab_size():
    config = small_config(arch="encoder-decoder", vocab_size=10)
    assert (config.source_vocab_size, config.target_vocab_size) == (10, 10)
    config = small_config(arch="encoder-decoder", src_vocab_size=30, tgt_vocab_size=20)
    assert (config.source_vocab_size, config.target_vocab_size) == (30, 20)


def test_final_norm_defaults_to_pre_norm_and_can_be_forced():
    assert small_config(norm_position="pre").use_final_norm is True
    assert small_config(norm_position="post").use_final_norm is False
    assert small_config(norm_position="post", final_norm=True).use_final_norm is True
    assert small_config(norm_position="pre", final_norm=False).use_final_norm is False


def test_attention_dropout_defaults_to_dropout():
    assert small_config(dropout=0.3).attention_dropout_p == 0.3
    assert small_config(dropout=0.3, attention_dropout=0.0).attention_dropout_p == 0.0


def test_activation_dropout_defaults_to_dropout_and_reaches_the_feed_forward():
    import torch

    from annotated_transformer import build_model

    assert small_config(dropout=0.3).activation_dropout_p == 0.3
    config = small_config(arch="decoder-only", dropout=0.3, activation_dropout=0.0)
    model = build_model(config)
    rates = {
        name: module.p
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Dropout)
    }
    feed_forward = [p for name, p in rates.items() if "feed_forward.dropout" in name]
    others = [p for name, p in rates.items() if "feed_forward.dropout" not in name]
    assert feed_forward and set(feed_forward) == {0.0}
    assert others and set(others) == {0.3}


def test_head_size_and_causality():
    assert small_config(d_model=24, n_heads=3, positional="none").d_head == 8
    assert small_config(arch="decoder-only").causal
    assert small_config(arch="encoder-decoder").causal
    assert not small_config(arch="encoder-only").causal


# ---------------------------------------------------------------------------------------------
# Dictionaries


def test_to_dict_from_dict_roundtrip():
    config = small_config(
        arch="encoder-decoder",
        src_vocab_size=13,
        n_decoder_layers=3,
        positional="rope",
        norm="rmsnorm",
        norm_position="pre",
        pad_id=None,
        init="normal",
    )
    values = config.to_dict()
    assert values["src_vocab_size"] == 13 and values["positional"] == "rope"
    assert set(values) == {field.name for field in dataclasses.fields(TransformerConfig)}
    assert TransformerConfig.from_dict(values) == config


def test_from_dict_lists_the_unknown_keys():
    values = {**small_config().to_dict(), "n_head": 4, "dropuot": 0.1}
    with pytest.raises(ValueError, match=r"unknown TransformerConfig fields: dropuot, n_head;"):
        TransformerConfig.from_dict(values)


def test_from_dict_validates_values():
    with pytest.raises(ValueError, match=field_and_value("norm", "layer")):
        TransformerConfig.from_dict({**small_config().to_dict(), "norm": "layer"})
