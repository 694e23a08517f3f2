"""The CUDA speed paths, exercised for real on CPU: ``torch.compile`` and bf16 autocast.

``compile=True`` must train the same function as eager mode, and bf16 autocast must compute nearly
the same losses as fp32 (bf16 keeps 8 bits of mantissa: agreement to about 1%). On a GPU the same
flags take the same code path with ``device_type="cuda"``.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.config import TrainConfig
from annotated_transformer.data.batch import Batch
from annotated_transformer.training.trainer import Trainer

VOCAB = 24


def model_and_data(arch: str):
    sizes = dict(vocab_size=VOCAB, d_model=32, n_heads=4, n_layers=2, d_ff=64, pad_id=None)
    model = tiny_model(arch, **sizes)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (8, 13), generator=generator)  # [B, T + 1]
    if arch == "encoder-decoder":
        batch = Batch(tokens[:, :-1], tokens[:, 1:], src=tokens[:, 1:].flip(1).contiguous())
    else:
        batch = Batch(tokens[:, :-1], tokens[:, 1:])
    return model, [batch] * 3


def losses(arch: str, **settings) -> list[float]:
    model, batches = model_and_data(arch)
    config = TrainConfig(
        max_steps=4, lr=1e-2, device="cpu", log_every=1, progress=False, **settings
    )
    return [row["train_loss"] for row in Trainer(model, config, batches).fit()]


@pytest.mark.skipif(shutil.which("g++") is None, reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_training_matches_eager_training():
    eager = losses("decoder-only")
    compiled = losses("decoder-only", compile=True)
    assert eager[-1] < eager[0]  # it learns
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder"])
def test_bf16_autocast_losses_follow_fp32(arch):
    full = losses(arch)
    half = losses(arch, precision="bf16")
    assert half != full  # autocast really changed the arithmetic
    torch.testing.assert_close(half, full, rtol=2e-2, atol=2e-2)
