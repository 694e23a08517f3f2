import errno
import json
import math
import os
import pickle
import random
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model

from annotated_transformer.config import TrainConfig
from annotated_transformer.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    UnsafeCheckpointError,
    atomic_write_files,
    atomic_write_text,
    load_checkpoint,
    load_model,
    remove_orphan_temporaries,
    save_checkpoint,
)
from annotated_transformer.training.run_state import rng_state, set_rng_state, write_history
from annotated_transformer.training.trainer import Trainer


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


class FullDisk:
    """A file whose device fills after ``room`` bytes: each write past it raises ENOSPC."""

    def __init__(self, handle, room):
        self.handle, self.room = handle, room

    def write(self, data):
        if self.handle.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def test_a_full_disk_under_torch_save_gives_our_message_not_torchs(tmp_path, monkeypatch):
    # torch.save turns the ENOSPC of its writer into "RuntimeError: [enforce fail at
    # inline_container.cc:...] unexpected pos ...": the message must still be ours.
    path = save_checkpoint(tmp_path / "last.pt", checkpoint(1))
    real_save = torch.save
    monkeypatch.setattr(
        torch, "save", lambda state, handle: real_save(state, FullDisk(handle, 600))
    )
    with pytest.raises(CheckpointWriteError) as error:
        save_checkpoint(path, {**checkpoint(2), "large": torch.zeros(10_000)})
    message = str(error.value)
    assert f"could not write {path}: no space left on the device" in message
    assert "the previous last.pt is unchanged" in message and "inline_container" not in message
    assert error.value.errno == errno.ENOSPC
    assert [entry.name for entry in tmp_path.iterdir()] == ["last.pt"]
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(3))


@pytest.mark.parametrize(
    ("free", "reason"), [(0, "no space left on the device"), (10**12, "the write failed")]
)
def test_torchs_bare_write_failure_is_ours_too(free, reason, tmp_path, monkeypatch):
    def writer_fails(state, handle):  # as torch raises when the C++ writer itself fails
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", writer_fails)
    usage = shutil.disk_usage(tmp_path)._replace(free=free)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    with pytest.raises(CheckpointWriteError, match=f"could not write .*last.pt: {reason}"):
        save_checkpoint(tmp_path / "last.pt", checkpoint(1))
    assert list(tmp_path.iterdir()) == []


def test_an_error_that_is_no_write_failure_is_not_dressed_as_one(tmp_path, monkeypatch):
    def bug(state, handle):
        raise RuntimeError("a bug, not a disk")

    monkeypatch.setattr(torch, "save", bug)
    with pytest.raises(RuntimeError, match="a bug, not a disk") as error:
        save_checkpoint(tmp_path / "last.pt", checkpoint(1))
    assert not isinstance(error.value, CheckpointWriteError)


def test_files_written_together_are_all_kept_when_one_fails(tmp_path):
    atomic_write_files({tmp_path / "a": b"old a", tmp_path / "b": b"old b"})

    def fails(handle):
        handle.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointWriteError, match="no space left"):
        atomic_write_files({tmp_path / "a": b"new a", tmp_path / "b": fails})
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["a", "b"]
    assert (tmp_path / "a").read_bytes() == b"old a" and (tmp_path / "b").read_bytes() == b"old b"


@pytest.mark.parametrize("platform", ["win32", "linux"])
def test_the_directory_is_synced_where_the_os_can_open_it(platform, tmp_path, monkeypatch):
    # Windows cannot open a directory (os.open raises PermissionError): the write must not try.
    monkeypatch.setattr(sys, "platform", platform)
    real_open, opened = os.open, []

    def windows_like_open(path, flags, *rest):
        if Path(path).is_dir():
            opened.append(path)
            if platform == "win32":
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *rest)

    monkeypatch.setattr(os, "open", windows_like_open)
    atomic_write_text(tmp_path / "history.json", "[]\n")
    assert (tmp_path / "history.json").read_text(encoding="utf-8") == "[]\n"
    assert opened == ([] if platform == "win32" else [tmp_path])


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
    model = tiny_model("encoder-decoder", vocab_size=9)
    config = model.config
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
    with zipfile.ZipFile(path) as archive:  # no module path is pickled: a move cannot break it
        pickled = b"".join(archive.read(name) for name in archive.namelist() if ".pkl" in name)
    assert pickled and b"annotated_transformer" not in pickled
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


# ---------------------------------------------------------------------------------------------
# Every bad file: one CheckpointError naming the file and what is wrong


def saved_model_checkpoint(path, **config_overrides):
    model = tiny_model(**config_overrides)
    state = {
        "format": CHECKPOINT_FORMAT,
        "model_config": model.config.to_dict(),
        "model": model.state_dict(),
    }
    save_checkpoint(path, state)
    return state


def write_zip(path):
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not a checkpoint")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.write_bytes(b""), "is empty \\(0 bytes\\)"),
        (
            lambda path: path.write_bytes(bytes(range(256)) * 8),
            "does not start like the zip archive",
        ),
        (
            lambda path: path.write_text("epoch,loss\n1,2.0\n"),
            "does not start like the zip archive",
        ),
        (write_zip, "is truncated or is not a torch checkpoint archive"),
        (
            lambda path: torch.save({"state_dict": {}}, path),
            "not an annotated-transformer checkpoint",
        ),
        (lambda path: torch.save([1, 2], path), "not an annotated-transformer checkpoint"),
    ],
    ids=["empty", "random-bytes", "text", "foreign-zip", "plain-torch-dict", "plain-torch-list"],
)
def test_a_file_that_is_not_our_checkpoint_gets_one_clear_error(tmp_path, make, message):
    path = tmp_path / "bad.pt"
    make(path)
    with pytest.raises(CheckpointError, match=f"{path}.*{message}|{message}.*{path}") as error:
        load_checkpoint(path)
    assert "arbitrary code" not in str(error.value)
    with pytest.raises(CheckpointError):
        load_model(path)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_a_truncated_checkpoint_gets_one_clear_error(tmp_path, fraction):
    path = tmp_path / "last.pt"
    saved_model_checkpoint(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(CheckpointError, match=f"{path} is truncated or is not a torch checkpoint"):
        load_model(path)


def test_a_missing_file_and_a_directory_are_named(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match=f"no checkpoint at {tmp_path / 'nope.pt'}"):
        load_model(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match=f"{tmp_path} is a directory, not a checkpoint file"):
        load_model(tmp_path)


def test_missing_weights_and_mismatched_weights_are_named(tmp_path):
    path = tmp_path / "last.pt"
    state = saved_model_checkpoint(path)
    save_checkpoint(path, {key: value for key, value in state.items() if key != "model"})
    with pytest.raises(CheckpointError, match=f"{path} is incomplete or damaged: model is missing"):
        load_model(path)
    wrong = {**state, "model_config": {**state["model_config"], "d_ff": 64}}
    save_checkpoint(path, wrong)
    with pytest.raises(
        CheckpointError,
        match="weights disagree with its model_config: .*has shape \\[32, 16\\], the config needs \\[64, 16\\]",
    ):
        load_model(path)
    fewer = {**state, "model": {k: v for k, v in state["model"].items() if "embedding" not in k}}
    save_checkpoint(path, fewer)
    with pytest.raises(
        CheckpointError,
        match="weights disagree with its model_config: missing embedding.embedding.weight",
    ):
        load_model(path)
    bad_config = {**state, "model_config": {**state["model_config"], "positional": "rotary"}}
    save_checkpoint(path, bad_config)
    with pytest.raises(
        CheckpointError, match="invalid model_config: positional='rotary' is not one of"
    ):
        load_model(path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_len", 10**9, "max_len=1000000000 \\(limit 1,048,576\\)"),
        ("vocab_size", 10**12, "vocab_size=1000000000000 \\(limit 16,777,216\\)"),
        (
            "d_model",
            2**16,
            "describes a model of .* parameters and buffers, more than the 2,147,483,648",
        ),
    ],
)
def test_oversized_configs_are_refused_before_anything_is_allocated(
    tmp_path, field, value, message
):
    path = tmp_path / "last.pt"
    state = saved_model_checkpoint(path)
    values = {**state["model_config"], field: value}
    if field == "d_model":
        values.update(n_heads=2, max_len=2**15)
    save_checkpoint(path, {**state, "model_config": values})
    with pytest.raises(CheckpointError, match=f"{path} .*{message}"):
        load_model(path)


def test_non_finite_weights_are_never_written_nor_loaded(tmp_path):
    path = tmp_path / "last.pt"
    state = saved_model_checkpoint(path)
    poisoned = {name: tensor.clone() for name, tensor in state["model"].items()}
    name = next(iter(poisoned))
    poisoned[name][0] = math.nan
    with pytest.raises(
        CheckpointError, match=f"refusing to write {path}: \\['model'\\]\\['{name}'\\] holds nan"
    ):
        save_checkpoint(path, {**state, "model": poisoned})
    assert torch.equal(load_checkpoint(path)["model"][name], state["model"][name])  # kept
    torch.save({**state, "model": poisoned}, path)  # written by someone else
    with pytest.raises(
        CheckpointError, match=f"{path} holds non-finite weights: \\['{name}'\\] holds nan"
    ):
        load_model(path)


def test_a_full_disk_gives_a_clear_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "last.pt", checkpoint(1))

    def full_disk(state, handle):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(
        CheckpointWriteError,
        match=f"could not write {path}: no space left on the device.*the previous last.pt is unchanged",
    ) as error:
        save_checkpoint(path, checkpoint(2))
    assert error.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_orphan_temporaries_are_removed(tmp_path):
    (tmp_path / ".last.pt.k2j3.tmp").write_bytes(b"x")
    (tmp_path / "last.pt").write_bytes(b"y")
    assert remove_orphan_temporaries(tmp_path) == [tmp_path / ".last.pt.k2j3.tmp"]
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
