"""pretrained.py: safetensors export and loading of trained models, with no pickle."""

import json

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.data.tokenizers import DigitTokenizer
from annotated_transformer.pretrained import is_pretrained, load_pretrained, save_pretrained


def model_of(arch: str, **overrides) -> torch.nn.Module:
    shared = {"tie_embeddings": True, "share_embeddings": arch == "encoder-decoder"}
    return tiny_model(arch, vocab_size=13, max_len=24, **shared, **overrides).eval()


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder"])
def test_float32_round_trip_is_exact_and_keeps_tied_weights(tmp_path, arch):
    model = model_of(arch)
    save_pretrained(tmp_path, model, DigitTokenizer(), {"bos_id": 1}, dtype="float32")
    loaded = load_pretrained(tmp_path)
    assert is_pretrained(tmp_path)
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert loaded.task == {"bos_id": 1} and isinstance(loaded.tokenizer, DigitTokenizer)
    assert not loaded.model.training
    # the output projection still is the (target) embedding after loading: one tensor, stored once
    projection = loaded.model.output_projection.weight
    assert any(
        projection is module.weight
        for module in loaded.model.modules()
        if module is not loaded.model.output_projection and hasattr(module, "weight")
    )


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
    with pytest.raises(ValueError, match="dtype='int8' is not one of"):
        save_pretrained(tmp_path, model_of("decoder-only"), DigitTokenizer(), dtype="int8")


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
    """models/*/config.json predate d_k and d_v: each loads, with d_k = d_v = d_model / n_heads."""
    from pathlib import Path

    from annotated_transformer import TransformerConfig

    shipped = sorted((Path(__file__).resolve().parent.parent / "models").glob("*/config.json"))
    assert shipped
    for path in shipped:
        values = json.loads(path.read_text(encoding="utf-8"))["model_config"]
        assert "d_k" not in values and "d_v" not in values
        config = TransformerConfig.from_dict(values)
        assert config.key_size == config.value_size == config.d_model // config.n_heads
