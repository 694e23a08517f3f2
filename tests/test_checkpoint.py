import json
import math
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from annotated_transformer.checkpoint import (
    CHECKPOINT_FORMAT,
    UnsafeCheckpointError,
    atomic_write_text,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from annotated_transformer.config import TrainConfig, TransformerConfig
from annotated_transformer.model import build_model
from annotated_transformer.run_state import rng_state, set_rng_state, write_history
from annotated_transformer.trainer import Trainer


def checkpoint(value):
    return {"format": CHECKPOINT_FORMAT, "weights": torch.full((3,), float(value))}


def test_save_then_load_round_trips(tmp_path):
    path = save_checkpoint(tmp_path / "run" / "last.pt", checkpoint(1))
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(3))


def test_a_crash_while_saving_keeps_the_previous_checkpoint_and_no_partial_file(
    tmp_path, monkeypatch
):
    path = save_checkpoint(tmp_path / "last.pt", checkpoint(1))
    real_save = torch.save

    def crash_midway(state, handle):
        real_save(state, handle)
        handle.truncate(handle.tell() // 2)  # half the bytes are written ...
        raise OSError("disk full")  # ... then the process fails

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, checkpoint(2))
    assert [entry.name for entry in tmp_path.iterdir()] == ["last.pt"]
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(3))


def test_an_interrupt_while_saving_also_cleans_up(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "last.pt", checkpoint(1))

    def interrupted(state, handle):
        handle.write(b"PK\x03\x04 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, checkpoint(2))
    assert [entry.name for entry in tmp_path.iterdir()] == ["last.pt"]
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(3))


class RunsCode:
    """Unpickling this object calls ``Path.touch(marker)``: any callable could stand there."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_loading_refuses_a_file_that_would_run_code(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "payload": RunsCode(marker)}, path)
    with pytest.raises(UnsafeCheckpointError, match="could run arbitrary code"):
        load_checkpoint(path)
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):  # the error is still an UnpicklingError
        load_checkpoint(path)
    # The payload is live: the unsafe loader runs it.
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_loading_rejects_a_file_that_is_not_our_checkpoint(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not an annotated-transformer checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_trainer_checkpoint_holds_only_plain_data_and_loads_with_weights_only(tmp_path):
    config = TransformerConfig(
        arch="encoder-decoder", vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=16
    )
    model = build_model(config)
    train_config = TrainConfig(
        max_steps=5,
        schedule="warmup_cosine",
        warmup=2,
        progress=False,
        device="cpu",
        checkpoint_dir=tmp_path,
    )
    trainer = Trainer(
        model,
        train_config,
        [],
        tokenizer={"type": "words", "vocabulary": ["<pad>", "a"]},
        task={"name": "demo"},
    )
    path = trainer.save()
    state = torch.load(path, weights_only=True)
    assert state["model_config"] == config.to_dict()
    assert state["train_config"]["max_steps"] == 5
    assert state["tokenizer"] == {"type": "words", "vocabulary": ["<pad>", "a"]}
    assert state["scheduler"]["lr_lambdas"][0]["name"] == "warmup_cosine"
    assert set(state["rng"][0]) == {"torch", "cuda", "numpy", "python"}
    loaded, _ = load_model(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)


def draws():
    # numpy's legacy global generator, on purpose: the one a checkpoint must restore
    return random.random(), float(np.random.rand()), torch.rand(2).tolist()  # noqa: NPY002


def test_random_states_survive_a_checkpoint(tmp_path):
    np.random.normal()  # noqa: NPY002 (leaves a cached Gaussian in the global state)
    save_checkpoint(tmp_path / "rng.pt", {"format": CHECKPOINT_FORMAT, "rng": rng_state()})
    expected = draws()
    draws()
    set_rng_state(load_checkpoint(tmp_path / "rng.pt")["rng"])
    assert draws() == expected


def test_history_files_hold_every_key_and_json_has_no_nan(tmp_path):
    history = [
        {"step": 1, "train_loss": 2.5},
        {"step": 2, "train_loss": 2.0, "eval_loss": 1.5, "eval_perplexity": math.inf},
    ]
    write_history(tmp_path, history)
    assert json.loads((tmp_path / "history.json").read_text())[1]["eval_perplexity"] is None
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert lines == [
        "step,train_loss,eval_loss,eval_perplexity",
        "1,2.5,,",
        "2,2.0,1.5,inf",
    ]


def test_atomic_write_text_replaces_the_whole_file(tmp_path):
    path = atomic_write_text(tmp_path / "notes.txt", "first version, long")
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
