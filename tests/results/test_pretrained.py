"""pretrained.py: safetensors export and loading of trained models, with no pickle."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from annotated_transformer.data.tokenizers import DigitTokenizer
from annotated_transformer.results.pretrained import (
    INT8_MIN_ELEMENTS,
    as_stored,
    dequantize_int8,
    is_pretrained,
    load_pretrained,
    quantize_int8,
    save_pretrained,
    shipping_dtype,
    stored_bytes,
)


def model_of(arch: str, **overrides) -> torch.nn.Module:
    shared = {"tie_embeddings": True, "share_embeddings": arch == "encoder-decoder"}
    return tiny_model(arch, vocab_size=13, max_len=24, **shared, **overrides).eval()


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder"])
def test_a_round_trip_gives_the_stored_weights_and_keeps_tied_weights(tmp_path, arch, dtype):
    model = model_of(arch, d_model=32, d_ff=64)  # int8: the 32 x 32 and larger matrices
    save_pretrained(tmp_path, model, DigitTokenizer(), {"bos_id": 1}, dtype=dtype)
    loaded = load_pretrained(tmp_path)
    assert is_pretrained(tmp_path)
    stored = as_stored(model, dtype).state_dict()  # what the chapter measures before shipping
    for (name, a), (_, b), (_, c) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), stored.items(), strict=True
    ):
        assert b.dtype == a.dtype and torch.equal(b, c), name
        assert torch.equal(a, b) or dtype == "int8", name  # float32: exact
    assert loaded.task == {"bos_id": 1} and isinstance(loaded.tokenizer, DigitTokenizer)
    assert not loaded.model.training
    # the output projection still is the (target) embedding after loading: one tensor, stored once
    projection = loaded.model.output_projection.weight
    assert any(
        projection is module.weight
        for module in loaded.model.modules()
        if module is not loaded.model.output_projection and hasattr(module, "weight")
    )
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == dtype


def test_float16_weights_are_half_the_size_and_round_to_the_stored_values(tmp_path):
    model = model_of("decoder-only")
    save_pretrained(tmp_path / "fp32", model, DigitTokenizer(), dtype="float32")
    save_pretrained(tmp_path / "fp16", model, DigitTokenizer())
    size32 = (tmp_path / "fp32" / "model.safetensors").stat().st_size
    size16 = (tmp_path / "fp16" / "model.safetensors").stat().st_size
    assert size16 < 0.6 * size32
    loaded = load_pretrained(tmp_path / "fp16").model
    for name, tensor in model.state_dict().items():
        expected = tensor.half().float() if tensor.is_floating_point() else tensor
        assert torch.equal(loaded.state_dict()[name], expected), name


def test_the_description_is_json_and_names_its_format(tmp_path):
    save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer(), metadata={"x": 1})
    description = json.loads((tmp_path / "config.json").read_text())
    assert description["format"] == "annotated-transformer-pretrained"
    assert description["model_config"]["d_model"] == 16 and description["metadata"] == {"x": 1}


def test_non_finite_weights_are_refused_and_nothing_is_written(tmp_path):
    model = model_of("decoder-only")
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite weights"):
        save_pretrained(tmp_path / "bad", model, DigitTokenizer())
    assert not (tmp_path / "bad" / "model.safetensors").exists()


def test_bad_directories_get_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a pretrained model directory"):
        load_pretrained(tmp_path)
    save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer())
    description = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**description, "format": "other"}))
    with pytest.raises(ValueError, match="is not an annotated-transformer-pretrained"):
        load_pretrained(tmp_path)
    wider = {**description, "model_config": {**description["model_config"], "d_model": 32}}
    (tmp_path / "config.json").write_text(json.dumps(wider))
    with pytest.raises(ValueError, match="does not hold this model's weights"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match="dtype='int4' is not one of: float32, float16, bfloat16, int8"
    ):
        save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer(), dtype="int4")
    # an int8 matrix without its scales is refused, not loaded as values 1 / scale too large
    save_pretrained(tmp_path, model_of("decoder-only", d_model=32), DigitTokenizer(), dtype="int8")
    tensors = load_file(tmp_path / "model.safetensors")
    kept = {name: tensor for name, tensor in tensors.items() if not name.endswith(".scale")}
    save_file(kept, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="its sha256 differs from the weights_sha256 recorded"):
        load_pretrained(tmp_path)
    description = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    del description["weights_sha256"]  # as a description written before digests were recorded
    (tmp_path / "config.json").write_text(json.dumps(description), encoding="utf-8")
    with pytest.raises(ValueError, match="has no scales"):
        load_pretrained(tmp_path)


def test_int8_rows_come_back_within_half_a_scale():
    generator = torch.Generator().manual_seed(0)
    magnitudes = torch.logspace(-4, 1, 20)[:, None]  # [20, 1]: rows of very different sizes
    weight = torch.randn(20, 300, generator=generator) * magnitudes  # [20, 300]
    weight[3] = 0.0  # a row of zeros: scale 0, stored exactly
    values, scale = quantize_int8(weight)
    assert values.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (20,)
    assert values.abs().amax(dim=1)[scale > 0].eq(127).all()  # each row's largest |w| is 127
    error = (weight - dequantize_int8(values, scale)).abs()  # [20, 300]
    assert (error <= scale[:, None] / 2 * (1 + 1e-5)).all()
    assert scale[3] == 0 and error[3].eq(0).all()


def test_int8_stores_large_matrices_as_int8_and_the_rest_as_float16(tmp_path):
    model = model_of("decoder-only", d_model=32, d_ff=64)
    save_pretrained(tmp_path, model, DigitTokenizer(), dtype="int8")
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        dtypes = {name: weights.get_slice(name).get_dtype() for name in weights.keys()}  # noqa: SIM118
    for name, tensor in model.state_dict().items():
        if name not in dtypes:  # a tied weight, stored once under its other name
            continue
        large = tensor.dim() == 2 and tensor.numel() >= INT8_MIN_ELEMENTS
        assert dtypes[name] == ("I8" if large else "F16"), name
        assert (dtypes.get(f"{name}.scale") == "F32") == large, name


@pytest.fixture(scope="module")
def trained_lm():
    """A small decoder-only model trained for a few seconds on a next-token rule with noise, so
    that its logits are not those of a random initialisation, and held-out tokens of the rule."""
    generator = torch.Generator().manual_seed(0)

    def stream(batch, length):  # [batch, length]: next = 5 * previous + 1 (mod 64), 10 % noise
        tokens = torch.randint(64, (batch, 1), generator=generator)
        for _ in range(length - 1):
            rule = (5 * tokens[:, -1:] + 1) % 64
            noise = torch.randint(64, (batch, 1), generator=generator)
            keep = torch.rand(batch, 1, generator=generator) < 0.9
            tokens = torch.cat([tokens, torch.where(keep, rule, noise)], dim=1)
        return tokens

    model = tiny_model(
        "decoder-only", vocab_size=64, d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=32,
        tie_embeddings=True,
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        tokens = stream(16, 33)  # [16, 33]
        logits = model(tokens[:, :-1])  # [16, 32, 64]
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), stream(64, 33)


def perplexity(model, tokens):
    with torch.no_grad():
        logits = model(tokens[:, :-1])  # [B, T, V]
    return logits, F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).exp().item()


def test_int8_changes_a_trained_models_logits_and_perplexity_little(trained_lm):
    model, held_out = trained_lm
    logits, reference = perplexity(model, held_out)
    assert reference < 10  # it learnt the rule (uniform guessing: 64)
    logits8, quantized = perplexity(as_stored(model, "int8"), held_out)
    assert (logits8 - logits).norm() / logits.norm() < 0.02
    assert abs(quantized / reference - 1) < 0.01


def test_int8_is_about_half_of_float16_and_shipping_picks_float16_when_it_fits(
    trained_lm, tmp_path
):
    model, _ = trained_lm
    sizes = {dtype: stored_bytes(model, dtype) for dtype in ("float32", "float16", "int8")}
    assert 0.45 < sizes["int8"] / sizes["float16"] < 0.6  # int8 values, float32 scales per row
    save_pretrained(tmp_path, model, DigitTokenizer(), dtype="int8")
    assert (tmp_path / "model.safetensors").stat().st_size == sizes["int8"]
    assert shipping_dtype(model, max_bytes=sizes["float16"]) == "float16"
    assert shipping_dtype(model, max_bytes=sizes["float16"] - 1) == "int8"


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder"])
def test_head_sizes_of_their_own_round_trip(tmp_path, arch):
    model = model_of(arch, positional="rope", d_k=6, d_v=4)
    save_pretrained(tmp_path, model, DigitTokenizer(), dtype="float32")
    loaded = load_pretrained(tmp_path)
    assert (loaded.model.config.d_k, loaded.model.config.d_v) == (6, 4)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_shipped_config_without_head_sizes_loads_with_them_unset():
    """Some models/*/config.json predate d_k and d_v (the later ones store them as null): each
    loads, with d_k = d_v = d_model / n_heads."""
    from pathlib import Path

    from annotated_transformer import TransformerConfig

    shipped = sorted((Path(__file__).resolve().parents[2] / "models").glob("*/config.json"))
    older = 0
    for path in shipped:
        values = json.loads(path.read_text(encoding="utf-8"))["model_config"]
        older += "d_k" not in values and "d_v" not in values
        assert values.get("d_k") is None and values.get("d_v") is None, path
        config = TransformerConfig.from_dict(values)
        assert config.key_size == config.value_size == config.d_model // config.n_heads
    assert older, "no shipped config predates d_k and d_v: the case is not exercised"


def test_weights_stored_in_another_dtype_are_refused_not_cast(tmp_path):
    import hashlib

    save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer(), dtype="float32")
    tensors = load_file(tmp_path / "model.safetensors")
    save_file({name: tensor.to(torch.int32) for name, tensor in tensors.items()}, tmp_path / "w")
    (tmp_path / "w").replace(tmp_path / "model.safetensors")
    description = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    digest = hashlib.sha256((tmp_path / "model.safetensors").read_bytes()).hexdigest()
    description["weights_sha256"] = digest  # a consistent pair: only the dtype is wrong
    (tmp_path / "config.json").write_text(json.dumps(description), encoding="utf-8")
    with pytest.raises(
        ValueError, match="is stored as int32, but config.json says dtype='float32'"
    ):
        load_pretrained(tmp_path)


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused_on_save(tmp_path):
    from annotated_transformer.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.build("abcdefghijklmnopqrst")  # 20 symbols, a 13-token model
    with pytest.raises(ValueError, match="the tokenizer has 20 tokens, more than the model's"):
        save_pretrained(tmp_path, model_of("decoder-only"), tokenizer)
    assert not (tmp_path / "config.json").exists()


def test_the_description_records_the_weights_digest_and_the_vocabulary(tmp_path):
    import hashlib

    save_pretrained(tmp_path, model_of("encoder-decoder"), DigitTokenizer())
    description = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    weights = (tmp_path / "model.safetensors").read_bytes()
    assert description["weights_sha256"] == hashlib.sha256(weights).hexdigest()
    assert description["tokenizer_vocab_size"] == DigitTokenizer.vocab_size
    assert sorted(entry.name for entry in tmp_path.iterdir()) == [
        "config.json",
        "model.safetensors",
    ]


def test_a_full_disk_while_shipping_keeps_the_previous_model(tmp_path, monkeypatch):
    import errno
    import os

    save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer())
    before = {name: (tmp_path / name).read_bytes() for name in ("config.json", "model.safetensors")}
    real_fsync, calls = os.fsync, []

    def full_on_the_second_file(descriptor):
        calls.append(descriptor)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", full_on_the_second_file)
    with pytest.raises(OSError, match="could not write .*config.json: no space left on the device"):
        save_pretrained(tmp_path, model_of("decoder-only", seed=1), DigitTokenizer())
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(entry.name for entry in tmp_path.iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
