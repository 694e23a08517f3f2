"""Checkpoints that survive a crash and never run code when loaded (chapter 08).

Two promises, each with a test:

- **Atomic writes.** A checkpoint (or a history file) is written to a temporary file in the same
  directory, flushed to disk, then moved over the old one with :func:`os.replace`, which is atomic
  on POSIX and Windows. A crash while saving leaves the previous file whole and no partial file
  behind.
- **Safe loading.** :func:`load_checkpoint` reads with ``torch.load(weights_only=True)``: only
  tensors and plain Python data (dicts, lists, tuples, strings, numbers, None) are unpickled, so
  a file from someone else cannot run code on your machine. Everything we save is such data: the
  configs as dicts, the tokenizer's JSON-serialisable state, the optimizer and scheduler state,
  and the random generators' states as tensors and lists.

What a checkpoint holds is described in :meth:`annotated_transformer.train.Trainer.state_dict`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import pickle
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

CHECKPOINT_FORMAT = "annotated-transformer-checkpoint/1"


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds objects other than tensors and plain data; loading it could run code."""


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then move it onto ``path``.

    If ``write`` raises (or the process dies), ``path`` keeps its previous content and the
    temporary file is removed (after a hard kill it may remain, as ``.NAME.*.tmp``, but never
    under the final name).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            # mkstemp creates the file readable by its owner only; give it the usual permissions.
            os.chmod(handle.name, 0o666 & ~_umask())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
        raise
    _fsync_directory(path.parent)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    # The rename itself lives in the directory entry; without this a power cut may forget it.
    if os.name != "posix":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """``torch.save(state)`` to ``path``, atomically."""
    return atomic_write(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint`, refusing anything that could run code.

    Raises:
        FileNotFoundError: no file at ``path``.
        UnsafeCheckpointError: the file holds pickled objects other than tensors and plain data.
        ValueError: the file is not a checkpoint of this package.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(
            f"refusing to load {path}: it holds objects other than tensors and plain Python data, "
            f"and unpickling them could run arbitrary code (torch.load weights_only=True said: "
            f"{str(error).splitlines()[0]})"
        ) from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{path} is not an annotated-transformer checkpoint: expected format "
            f"{CHECKPOINT_FORMAT!r}, found {found!r}"
        )
    return state


# ---------------------------------------------------------------------------------------------
# Random generators, as tensors and plain lists (what weights_only=True accepts)


def rng_state() -> dict[str, Any]:
    """The state of every global random generator: torch (CPU and CUDA), numpy, Python."""
    # ("MT19937", uint32[624], position, has_gauss, cached gaussian); numpy's legacy global
    # generator, the one third-party code draws from.
    numpy_state = np.random.get_state()  # noqa: NPY002
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "algorithm": str(numpy_state[0]),
            "keys": torch.from_numpy(numpy_state[1].astype(np.int64)),
            "position": int(numpy_state[2]),
            "has_gauss": int(numpy_state[3]),
            "cached_gaussian": float(numpy_state[4]),
        },
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        if len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([generator.cpu() for generator in state["cuda"]])
    numpy_state = state["numpy"]
    np.random.set_state(  # noqa: NPY002
        (
            numpy_state["algorithm"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = state["python"]
    random.setstate(
        (python_state["version"], tuple(python_state["internal"]), python_state["gauss_next"])
    )


# ---------------------------------------------------------------------------------------------
# History files


def write_history(directory: str | os.PathLike, history: Sequence[dict[str, Any]]) -> None:
    """Write ``history.json`` and ``history.csv`` in ``directory``, each atomically.

    The CSV has one column per key, in order of first appearance; a row without a key leaves its
    cell empty. In the JSON, non-finite numbers become ``null`` (JSON has no NaN or infinity).
    """
    directory = Path(directory)
    rows = [{key: _json_number(value) for key, value in row.items()} for row in history]
    atomic_write_text(directory / "history.json", json.dumps(rows, indent=1) + "\n")
    columns: list[str] = []
    for row in history:
        columns.extend(key for key in row if key not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    atomic_write_text(directory / "history.csv", buffer.getvalue())


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value
