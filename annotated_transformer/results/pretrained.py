"""Trained models as plain files: safetensors weights and a JSON description, no pickle (ch. 08).

The course ships the reference models it trained (``models/<task>/``) in this form, and any run's
``best.pt`` can be exported to it. A pretrained directory holds two files:

- ``model.safetensors``: the weights, stored as ``float16`` by default (half the size; the course
  measures the metric of the stored weights, not of the fp32 ones), or as weight-only ``int8``
  (about a quarter of fp32, for a model whose fp16 file is over the shipping budget); loaded as
  ``float32`` either way;
- ``config.json``: ``{"format", "version", "dtype", "model_config", "tokenizer", "task",
  "metadata"}`` — the storage dtype, the :class:`~annotated_transformer.config.TransformerConfig`
  fields, the tokenizer's state, the task's plain data (special ids, options) and free metadata
  (the run's provenance, its metric).

Nothing in either file can run code: safetensors holds raw tensors, the rest is JSON.

Weight-only int8 is the simplest post-training quantization: each weight matrix with at least
``INT8_MIN_ELEMENTS`` entries (embeddings, projections) is stored row by row as
``round(w / scale)`` in ``[-127, 127]`` with ``scale = max|w_row| / 127`` (symmetric, one float32
scale per row, under the name ``<weight>.scale``), so that every entry comes back within
``scale / 2`` of its value; the other tensors (biases, norms) are stored as ``float16``. Loading
multiplies back: the model computes in float32 as usual, only the file is smaller.

    >>> shipped = load_pretrained("models/tinyshakespeare")          # doctest: +SKIP
    >>> shipped.model, shipped.tokenizer, shipped.task["eos_id"]      # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import TransformerConfig, check_choice
from ..model import build_model

FORMAT = "annotated-transformer-pretrained"
VERSION = 1
WEIGHTS, DESCRIPTION = "model.safetensors", "config.json"
FLOAT_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = (*FLOAT_DTYPES, "int8")  # the storage dtypes save_pretrained accepts
INT8_MIN_ELEMENTS = 1024  # smaller matrices stay float16: a negligible share of the bytes
SCALE = ".scale"  # int8 storage: the name of a weight's per-row scales is <weight name>.scale
# One shipped model's file: the "at most ~20 MB each", with the margin that Tiny
# Shakespeare's fp16 file (shipped first) takes. A model whose fp16 file is larger ships as int8.
SHIP_MAX_BYTES = 22_000_000


@dataclass
class Pretrained:
    """A loaded pretrained directory: the model (eval mode), its tokenizer and plain data."""

    model: nn.Module
    tokenizer: Any
    task: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def is_pretrained(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory with the two files of a pretrained model."""
    path = Path(path)
    return path.is_dir() and (path / WEIGHTS).is_file() and (path / DESCRIPTION).is_file()


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 of a matrix ``weight`` [R, C], rounded to nearest: the int8 values
    [R, C] and the float32 scales [R], with ``|weight - values * scale[:, None]| <= scale / 2``.
    A row of zeros gets scale 0."""
    weight = weight.detach().float()
    scale = weight.abs().amax(dim=1) / 127  # [R]: the row's largest |w| maps to 127
    divisor = torch.where(scale > 0, scale, torch.ones_like(scale))  # [R]
    values = torch.round(weight / divisor[:, None]).clamp(-127, 127)  # [R, C]
    return values.to(torch.int8), scale


def dequantize_int8(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 matrix [R, C] that int8 ``values`` [R, C] with per-row ``scale`` [R] stand for."""
    return values.float() * scale.float()[:, None]  # [R, C]


def _tied_groups(state: dict[str, torch.Tensor]) -> list[list[str]]:
    """The names (sorted) of each tensor that appears under several names: tied weights."""
    names: dict[tuple, list[str]] = {}
    for name, tensor in state.items():
        where = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        names.setdefault((*where, tensor.shape, tensor.stride()), []).append(name)
    return [sorted(group) for group in names.values() if len(group) > 1]


def _stored_tensors(model: nn.Module, dtype: str) -> dict[str, torch.Tensor]:
    """The tensors the file of ``model`` stored as ``dtype`` holds, by name: each tied weight once
    (under the first of its names, as safetensors' ``save_model`` keeps it)."""
    check_choice("dtype", dtype, DTYPES)
    state = model.state_dict()
    for group in _tied_groups(state):
        for alias in group[1:]:
            del state[alias]
    stored = {}
    for name, tensor in state.items():
        tensor = tensor.detach().to("cpu")
        floating = tensor.is_floating_point()
        matrix = floating and tensor.dim() == 2 and tensor.numel() >= INT8_MIN_ELEMENTS
        if dtype == "int8" and matrix:
            stored[name], stored[name + SCALE] = quantize_int8(tensor)
        elif floating:  # int8 storage keeps vectors and small matrices in float16
            stored[name] = tensor.to(FLOAT_DTYPES.get(dtype, torch.float16)).contiguous()
        else:
            stored[name] = tensor.contiguous()
    for name, tensor in stored.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ValueError(f"the model has non-finite weights in {dtype} ({name})")
    return stored


def _loaded_state(model: nn.Module, stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict of ``model`` from the tensors of its file: int8 matrices multiplied back by
    their scales, each tied weight under all of its names."""
    quantized = {name for name, tensor in stored.items() if tensor.dtype == torch.int8}
    state = {}
    for name, tensor in stored.items():
        if name in quantized:
            if name + SCALE not in stored:
                raise ValueError(f"the int8 tensor {name} has no scales ({name}{SCALE})")
            tensor = dequantize_int8(tensor, stored[name + SCALE])
        elif name.removesuffix(SCALE) in quantized:
            continue  # the scales of an int8 matrix, used with it
        state[name] = tensor
    for group in _tied_groups(model.state_dict()):
        present = [name for name in group if name in state]
        for name in group if present else []:
            state.setdefault(name, state[present[0]])
    return state


def as_stored(model: nn.Module, dtype: str = "float16") -> nn.Module:
    """A copy of ``model`` (eval mode, on its device) with the weights that
    :func:`load_pretrained` gives back from a file saved with ``dtype``: what is measured is
    what is shipped."""
    stored = copy.deepcopy(model).eval()
    stored.load_state_dict(_loaded_state(stored, _stored_tensors(model, dtype)))
    return stored


def _serialized(model: nn.Module, dtype: str) -> bytes:
    from safetensors.torch import save

    return save(_stored_tensors(model, dtype), metadata={"format": FORMAT, "dtype": dtype})


def stored_bytes(model: nn.Module, dtype: str = "float16") -> int:
    """The size in bytes of the weights file :func:`save_pretrained` writes for ``model``."""
    return len(_serialized(model, dtype))


def shipping_dtype(model: nn.Module, max_bytes: int = SHIP_MAX_BYTES) -> str:
    """``float16`` if that file of ``model`` fits in ``max_bytes``, else ``int8``."""
    return "float16" if stored_bytes(model, "float16") <= max_bytes else "int8"


def save_pretrained(
    directory: str | os.PathLike,
    model: nn.Module,
    tokenizer: Any,
    task: dict[str, Any] | None = None,
    *,
    dtype: str = "float16",
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` (built by :func:`~annotated_transformer.model.build_model`) to ``directory``.

    ``tokenizer``: anything with ``to_dict()`` (or a plain dict); ``dtype``: one of ``DTYPES``
    (``float32``, ``float16``, ``bfloat16``, ``int8``: weight-only, see the module's docstring).
    Tied weights are stored once. Returns the directory.
    """
    weights = _serialized(model, dtype)  # raises before anything is written
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = tokenizer if isinstance(tokenizer, dict) else tokenizer.to_dict()
    description = {
        "format": FORMAT,
        "version": VERSION,
        "dtype": dtype,
        "model_config": model.config.to_dict(),
        "tokenizer": state,
        "task": dict(task or {}),
        "metadata": dict(metadata or {}),
    }
    if dtype == "int8":
        description["int8"] = {
            "scheme": "symmetric, per row, round to nearest",
            "scale": f"float32, stored as <weight>{SCALE}",
            "min_elements": INT8_MIN_ELEMENTS,
            "others": "float16",
        }
    temporary = directory / f".{WEIGHTS}.tmp"
    temporary.write_bytes(weights)
    os.replace(temporary, directory / WEIGHTS)
    text = json.dumps(description, indent=1, ensure_ascii=False, default=str) + "\n"
    (directory / f".{DESCRIPTION}.tmp").write_text(text, encoding="utf-8")
    os.replace(directory / f".{DESCRIPTION}.tmp", directory / DESCRIPTION)
    return directory


def load_pretrained(directory: str | os.PathLike, device: str | torch.device = "cpu") -> Pretrained:
    """Load a directory written by :func:`save_pretrained`: the model in eval mode on ``device``
    (float32, whatever the storage dtype), its tokenizer, the task's plain data and the metadata."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ..data.tokenizers import tokenizer_from_dict

    directory = Path(directory)
    if not is_pretrained(directory):
        raise FileNotFoundError(
            f"{directory} is not a pretrained model directory: it needs {WEIGHTS} and "
            f"{DESCRIPTION} (written by annotated_transformer.pretrained.save_pretrained)"
        )
    try:
        description = json.loads((directory / DESCRIPTION).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{directory / DESCRIPTION} is not valid JSON: {error}") from error
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise ValueError(f"{directory / DESCRIPTION} is not an {FORMAT} description")
    if description.get("version") != VERSION:
        raise ValueError(
            f"{directory / DESCRIPTION} has version {description.get('version')!r}; this "
            f"package reads version {VERSION}"
        )
    config = TransformerConfig.from_dict(description["model_config"])
    model = build_model(config)
    try:
        stored = load_file(str(directory / WEIGHTS))
        model.load_state_dict(_loaded_state(model, stored))
    except (SafetensorError, RuntimeError, OSError, ValueError) as error:
        raise ValueError(
            f"{directory / WEIGHTS} does not hold this model's weights: {error}"
        ) from error
    return Pretrained(
        model=model.to(device).eval(),
        tokenizer=tokenizer_from_dict(description["tokenizer"]),
        task=description.get("task", {}),
        metadata=description.get("metadata", {}),
    )
