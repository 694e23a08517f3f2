"""Trained models as plain files: safetensors weights and a JSON description, no pickle (ch. 08).

The course ships the reference models it trained (``models/<task>/``) in this form, and any run's
``best.pt`` can be exported to it. A pretrained directory holds two files:

- ``model.safetensors``: the weights, stored as ``float16`` by default (half the size; the course
  measures the metric of the stored weights, not of the fp32 ones), loaded back as ``float32``;
- ``config.json``: ``{"format", "version", "model_config", "tokenizer", "task", "metadata"}`` —
  the :class:`~annotated_transformer.config.TransformerConfig` fields, the tokenizer's state, the
  task's plain data (special ids, options) and free metadata (the run's provenance, its metric).

Nothing in either file can run code: safetensors holds raw tensors, the rest is JSON.

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

from .config import TransformerConfig
from .model import build_model

FORMAT = "annotated-transformer-pretrained"
VERSION = 1
WEIGHTS, DESCRIPTION = "model.safetensors", "config.json"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


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

    ``tokenizer``: anything with ``to_dict()`` (or a plain dict); ``dtype``: one of
    ``float16``, ``bfloat16``, ``float32``. Tied weights are stored once. Returns the directory.
    """
    from safetensors.torch import save_model

    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of: {', '.join(DTYPES)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stored = copy.deepcopy(model).to("cpu", DTYPES[dtype])
    for tensor in stored.state_dict().values():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ValueError(f"the model has non-finite weights in {dtype}: nothing was written")
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
    temporary = directory / f".{WEIGHTS}.tmp"
    save_model(stored, str(temporary), metadata={"format": FORMAT})
    os.replace(temporary, directory / WEIGHTS)
    text = json.dumps(description, indent=1, ensure_ascii=False, default=str) + "\n"
    (directory / f".{DESCRIPTION}.tmp").write_text(text, encoding="utf-8")
    os.replace(directory / f".{DESCRIPTION}.tmp", directory / DESCRIPTION)
    return directory


def load_pretrained(directory: str | os.PathLike, device: str | torch.device = "cpu") -> Pretrained:
    """Load a directory written by :func:`save_pretrained`: the model in eval mode on ``device``
    (float32), its tokenizer, the task's plain data and the metadata."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from .data.tokenizers import tokenizer_from_dict

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
        load_model(model, str(directory / WEIGHTS), strict=True)
    except (SafetensorError, RuntimeError, OSError) as error:
        raise ValueError(
            f"{directory / WEIGHTS} does not hold this model's weights: {error}"
        ) from error
    return Pretrained(
        model=model.to(device).eval(),
        tokenizer=tokenizer_from_dict(description["tokenizer"]),
        task=description.get("task", {}),
        metadata=description.get("metadata", {}),
    )
