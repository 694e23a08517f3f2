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

And two refusals:

- **Nothing non-finite is written.** :func:`save_checkpoint` refuses a state holding a NaN or an
  infinity in any floating-point tensor (weights, optimizer moments), so a checkpoint on disk is
  always one training can continue from.
- **A bad file is one clear error.** Every way a file can fail to be our checkpoint (missing,
  empty, truncated, random bytes, another program's file or zip, code inside, missing entries, a
  config that disagrees with its weights, sizes beyond :data:`SIZE_LIMITS`) raises a
  :class:`CheckpointError` (a ValueError) naming the file and what is wrong; sizes read from a
  file are checked before anything is allocated (:func:`load_model` builds the model on the
  ``meta`` device first). A failed write (a full disk) raises :class:`CheckpointWriteError` (an
  OSError) and leaves the previous file whole.

What a checkpoint holds is described in :meth:`annotated_transformer.trainer.Trainer.state_dict`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..model import build_model

CHECKPOINT_FORMAT = "annotated-transformer-checkpoint/1"
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive
TEMPORARY_PATTERN = ".*.tmp"  # what atomic_write leaves behind when a process dies mid-write


class CheckpointError(ValueError):
    """A file is not a checkpoint this package can use; the message names the file and why."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No file at the checkpoint's path."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint holds objects other than tensors and plain data; loading it could run code."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint (or a history file) failed, e.g. a full disk; the previous file is
    unchanged."""


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then move it onto ``path``.

    If ``write`` raises (or the process dies), ``path`` keeps its previous content and the
    temporary file is removed (after a hard kill it may remain, as ``.NAME.*.tmp``, but never
    under the final name). A failed write (a full disk, whether the OS says so or torch's
    archive writer reports it as a ``RuntimeError``) raises :class:`CheckpointWriteError`.
    """
    path = Path(path)
    return atomic_write_files({path: write})[0]


def atomic_write_files(
    files: Mapping[str | os.PathLike, Callable[[IO[bytes]], None] | bytes],
) -> list[Path]:
    """Write several files that belong together (a shipped model's weights and description):
    each ``write(handle)`` (or the bytes) to a temporary file beside its path, all flushed to
    disk, and only then each moved onto its path. A failure before the moves leaves every file
    as it was; see :func:`atomic_write`."""
    staged: list[tuple[Path, str]] = []
    try:
        for target, write in files.items():
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = tempfile.NamedTemporaryFile(
                dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
            )
            staged.append((path, handle.name))
            with handle:
                # mkstemp creates the file readable by its owner only: give it the usual mode.
                os.chmod(handle.name, 0o666 & ~_umask())
                if isinstance(write, bytes):
                    handle.write(write)
                else:
                    write(handle)
                handle.flush()
                os.fsync(handle.fileno())
        for path, temporary in staged:
            os.replace(temporary, path)
    except BaseException as error:
        for _, temporary in staged:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        failure = None if isinstance(error, CheckpointWriteError) else _write_failure(error)
        if failure is not None:
            path = staged[-1][0] if staged else Path(next(iter(files)))
            raise _write_error(path, error, failure) from error
        raise
    for directory in {path.parent for path, _ in staged}:
        _fsync_directory(directory)
    return [path for path, _ in staged]


# torch.save reports a failed write of its zip archive as a RuntimeError with these words (the
# OSError, if any, is only its context): "[enforce fail at inline_container.cc:672] . unexpected
# pos 704 vs 598", "PytorchStreamWriter failed writing file data/0: file write failed".
TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "unexpected pos", "write failed")


def _write_failure(error: BaseException) -> BaseException | None:
    """The OSError behind ``error`` (itself, or the cause or context it was raised from), or
    ``error`` when it is torch's report of a failed write; None for any other error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    if isinstance(error, RuntimeError) and any(
        marker in str(error) for marker in TORCH_WRITE_FAILURES
    ):
        return error
    return None


def _disk_nearly_full(directory: Path, margin: int = 16 * 2**20) -> bool:
    try:
        return shutil.disk_usage(directory).free < margin
    except OSError:
        return False


def _write_error(path: Path, error: BaseException, failure: BaseException) -> CheckpointWriteError:
    code = getattr(failure, "errno", None)
    advice = "choose a directory this process can write, and try again"
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)) or (
        code is None and _disk_nearly_full(path.parent)
    ):
        reason = "no space left on the device (or the disk quota is used up)"
        advice = "free some space (or choose another directory), and try again"
    elif isinstance(failure, OSError):
        reason = failure.strerror or str(failure)
    else:
        reason = f"the write failed ({(str(error).splitlines() or [type(error).__name__])[0]})"
    kept = f"the previous {path.name} is unchanged" if path.exists() else "nothing was written"
    return CheckpointWriteError(
        code or errno.EIO, f"could not write {path}: {reason}; {kept}. To go on, {advice}"
    )


def remove_orphan_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files (``.NAME.*.tmp``) that writes interrupted by a hard kill left
    in ``directory``; returns them. Call it only while no other process writes there (the trainer
    holds the run directory's lock)."""
    removed = []
    for path in sorted(Path(directory).glob(TEMPORARY_PATTERN)):
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    # The rename itself lives in the directory entry; without this a power cut may forget it.
    # Windows cannot open a directory (NTFS journals the rename itself).
    if sys.platform == "win32":
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
    """``torch.save(state)`` to ``path``, atomically; refuses a state with non-finite tensors.

    Raises:
        CheckpointError: a floating-point tensor of ``state`` holds a NaN or an infinity
            (nothing is written).
        CheckpointWriteError: the write failed (e.g. a full disk); the previous file is unchanged.
    """
    bad = first_non_finite(state)
    if bad is not None:
        where, value = bad
        raise CheckpointError(
            f"refusing to write {path}: {where} holds {value}; a checkpoint never holds "
            f"non-finite weights or optimizer state"
        )
    return atomic_write(path, lambda handle: torch.save(state, handle))


def first_non_finite(tree: Any) -> tuple[str, float] | None:
    """``(where, value)`` of the first floating-point tensor in ``tree`` (nested dicts, lists,
    tuples) holding a NaN or an infinity, or None. One device read for all tensors."""
    tensors = [
        (where, tensor)
        for where, tensor in _tensors(tree, "")
        if tensor.is_floating_point() or tensor.is_complex()
    ]
    if not tensors:
        return None
    finite = torch.stack([torch.isfinite(tensor).all().to("cpu") for _, tensor in tensors])
    if bool(finite.all()):
        return None
    where, tensor = tensors[int((~finite).nonzero()[0])]
    value = tensor.detach().flatten()[~torch.isfinite(tensor.detach().flatten())][0]
    return where, float(value)


def _tensors(tree: Any, where: str) -> Iterator[tuple[str, Tensor]]:
    if isinstance(tree, Tensor):
        yield where or "the tensor", tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _tensors(value, f"{where}[{key!r}]")
    elif isinstance(tree, (list, tuple)):
        for index, value in enumerate(tree):
            yield from _tensors(value, f"{where}[{index}]")


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint`, refusing anything that could run code.

    Raises (each a :class:`CheckpointError`, a ValueError, naming the file and the problem):
        CheckpointNotFoundError: no file at ``path`` (also a FileNotFoundError).
        UnsafeCheckpointError: the file holds pickled objects other than tensors and plain data.
        CheckpointError: the file is empty, truncated, not a torch archive, or another
            program's file.
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint file (try {path}/last.pt)")
    if not path.is_file():
        raise CheckpointNotFoundError(f"no checkpoint at {path}")
    with open(path, "rb") as handle:
        head = handle.read(len(ZIP_MAGIC))
    if not head:
        raise CheckpointError(f"{path} is empty (0 bytes): not a checkpoint (an interrupted copy?)")
    if head != ZIP_MAGIC:
        raise CheckpointError(
            f"{path} is not a checkpoint: it does not start like the zip archive torch.save "
            f"writes (its first bytes are {head!r})"
        )
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        message = str(error)
        if "Unsupported global" in message or "Unsupported class" in message:
            raise UnsafeCheckpointError(
                f"refusing to load {path}: it holds objects other than tensors and plain Python "
                f"data, and unpickling them could run arbitrary code (torch.load "
                f"weights_only=True said: {_unsupported_line(message)})"
            ) from error
        raise CheckpointError(
            f"{path} is damaged: its pickled data cannot be read ({message.splitlines()[0]})"
        ) from error
    except Exception as error:  # noqa: BLE001 (torch reports a bad archive in several ways)
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        raise CheckpointError(
            f"{path} is truncated or is not a torch checkpoint archive: torch.load failed with "
            f"{type(error).__name__}: {first_line}"
        ) from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{path} is not an annotated-transformer checkpoint: expected format "
            f"{CHECKPOINT_FORMAT!r}, found {found!r}"
        )
    return state


def _unsupported_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if "Unsupported" in line]
    return lines[0] if lines else message.splitlines()[0]


def check_entries(state: dict[str, Any], path: str | os.PathLike, entries: dict[str, type]) -> None:
    """Raise a :class:`CheckpointError` unless ``state`` has every entry, of the given type."""
    problems = [
        f"{key} is missing" if key not in state else f"{key} is a {type(state[key]).__name__}"
        for key, kind in entries.items()
        if not isinstance(state.get(key), kind)
    ]
    if problems:
        raise CheckpointError(f"{path} is incomplete or damaged: {'; '.join(problems)}")


# ---------------------------------------------------------------------------------------------
# A model from a checkpoint, with its sizes bounded before anything is allocated

# Far above any model of this course, far below what a machine can allocate by mistake.
SIZE_LIMITS = {
    "vocab_size": 2**24,
    "src_vocab_size": 2**24,
    "tgt_vocab_size": 2**24,
    "d_model": 2**16,
    "d_ff": 2**18,
    "n_heads": 2**10,
    "d_k": 2**16,
    "d_v": 2**16,
    "n_layers": 2**9,
    "n_encoder_layers": 2**9,
    "n_decoder_layers": 2**9,
    "max_len": 2**20,
    "relative_max_distance": 2**20,
}
MAX_MODEL_ELEMENTS = 2**31  # parameters and buffers: 8 GiB in float32


def oversized(values: Mapping[str, Any]) -> list[str]:
    """Each size of a model config (a dict) above :data:`SIZE_LIMITS`, as ``"key=value (limit
    N)"``: read before the config is built, so a damaged file's sizes are never trusted."""
    return [
        f"{key}={values[key]!r} (limit {limit:,})"
        for key, limit in SIZE_LIMITS.items()
        if isinstance(values.get(key), int) and values[key] > limit
    ]


def model_elements(config: TransformerConfig) -> int:
    """The numbers (parameters and buffers) a model of ``config`` holds, counted on the ``meta``
    device: nothing is allocated. Call it on a config within :data:`SIZE_LIMITS`."""
    with torch.device("meta"):
        skeleton = build_model(config)
    return sum(tensor.numel() for tensor in (*skeleton.parameters(), *skeleton.buffers()))


def check_model_size(config: TransformerConfig) -> None:
    """Refuse, with a ``ValueError``, a model this package would not load back: a size above
    :data:`SIZE_LIMITS` or more than :data:`MAX_MODEL_ELEMENTS` numbers. For a model about to be
    built from settings (``--set vocab_size=10**12``), before anything is allocated."""
    too_large = oversized(config.to_dict())
    if too_large:
        raise ValueError(
            f"model sizes beyond what this package builds: {', '.join(too_large)}; use smaller "
            f"values"
        )
    elements = model_elements(config)
    if elements > MAX_MODEL_ELEMENTS:
        raise ValueError(
            f"the model would hold {elements:,} parameters and buffers, more than the "
            f"{MAX_MODEL_ELEMENTS:,} this package builds; use smaller sizes"
        )


def model_config_from(state: dict[str, Any], path: str | os.PathLike) -> TransformerConfig:
    """The checkpoint's :class:`TransformerConfig`, validated and with bounded sizes.

    Raises :class:`CheckpointError` for an invalid config, a size above :data:`SIZE_LIMITS`, or a
    model that would hold more than :data:`MAX_MODEL_ELEMENTS` numbers (counted on the ``meta``
    device, so nothing is allocated).
    """
    check_entries(state, path, {"model_config": dict})
    too_large = oversized(state["model_config"])
    if too_large:
        raise CheckpointError(
            f"{path} has a model_config with sizes beyond what this package loads: "
            f"{', '.join(too_large)}; the file is damaged or not meant for this package"
        )
    try:
        config = TransformerConfig.from_dict(state["model_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} has an invalid model_config: {error}") from error
    elements = model_elements(config)
    if elements > MAX_MODEL_ELEMENTS:
        raise CheckpointError(
            f"{path} describes a model of {elements:,} parameters and buffers, more than the "
            f"{MAX_MODEL_ELEMENTS:,} this package loads; the file is damaged or not meant for it"
        )
    return config


def check_weights_match(model: nn.Module, weights: dict[str, Any], path: str | os.PathLike) -> None:
    """Raise a :class:`CheckpointError` listing every missing, unexpected or mis-shaped tensor
    of ``weights`` against ``model`` (which may live on the ``meta`` device)."""
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    problems = [f"missing {name}" for name in expected if name not in weights]
    for name, tensor in weights.items():
        if name not in expected:
            problems.append(f"unexpected {name}")
        elif not isinstance(tensor, Tensor):
            problems.append(f"{name} is a {type(tensor).__name__}, not a tensor")
        elif tuple(tensor.shape) != expected[name]:
            problems.append(
                f"{name} has shape {list(tensor.shape)}, the config needs {list(expected[name])}"
            )
    if problems:
        shown = "; ".join(problems[:8]) + (
            f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
        )
        raise CheckpointError(f"{path}: the weights disagree with its model_config: {shown}")


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[nn.Module, dict[str, Any]]:
    """The model of a checkpoint, in eval mode on ``device``, and the checkpoint itself.

    Every check runs before the model is allocated: the file (:func:`load_checkpoint`), its
    config's sizes (:func:`model_config_from`), its weights' names and shapes against the config
    (on the ``meta`` device), and that the weights are finite. Raises :class:`CheckpointError`.
    """
    state = load_checkpoint(path)
    config = model_config_from(state, path)
    check_entries(state, path, {"model": dict})
    with torch.device("meta"):
        check_weights_match(build_model(config), state["model"], path)
    bad = first_non_finite(state["model"])
    if bad is not None:
        raise CheckpointError(f"{path} holds non-finite weights: {bad[0]} holds {bad[1]}")
    model = build_model(config)
    model.load_state_dict(state["model"])
    return model.to(device).eval(), state
