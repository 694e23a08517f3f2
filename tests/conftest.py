"""Shared test set-up: the data sets are read from AT_DATA_DIR, by default the shared copy
beside the checkout (as the Makefile and CI set it); the one tiny-model factory the tests build
their models with (``from conftest import tiny_config, tiny_model``)."""

import importlib.util
import os
from pathlib import Path
from types import ModuleType

os.environ.setdefault("AT_HEADLESS", "1")  # chapters executed here: explorers drawn headless
os.environ.setdefault("AT_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

from annotated_transformer.config import TransformerConfig  # noqa: E402 (after AT_DATA_DIR)
from annotated_transformer.model import build_model  # noqa: E402
from annotated_transformer.training.train import seed_everything  # noqa: E402

# The smallest model that still has every part: two heads, one layer of each stack.
TINY = {
    "vocab_size": 11,
    "d_model": 16,
    "n_heads": 2,
    "n_layers": 1,
    "d_ff": 32,
    "max_len": 16,
    "dropout": 0.0,
    "pad_id": 0,
}


def tiny_config(arch: str = "decoder-only", **overrides) -> TransformerConfig:
    """``TINY`` for ``arch``, with ``overrides`` (any TransformerConfig field) on top."""
    return TransformerConfig(**{**TINY, "arch": arch, **overrides})


def tiny_model(arch: str = "decoder-only", seed: int = 0, **overrides):
    """A freshly initialised model of ``tiny_config(arch, **overrides)``, seeded by ``seed`` (in
    training mode, as ``build_model`` returns it)."""
    config = tiny_config(arch, **overrides)
    seed_everything(seed)
    return build_model(config)


def eval_history(*losses: float, every: int = 200) -> list[dict]:
    """A trainer's history with a training row before each evaluation, every ``every`` updates:
    the shape the probes and the lever study read their validation losses from."""
    rows = []
    for index, loss in enumerate(losses, 1):
        rows.append({"step": index * every - 1, "train_loss": 9.0})
        rows.append({"step": index * every, "train_loss": 9.0, "eval_loss": loss})
    return rows


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (the scripts folder is no package)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
