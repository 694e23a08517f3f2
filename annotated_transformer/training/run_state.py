"""What a run keeps beside its weights (chapter 08): the random generators' states, and the
history of a run as CSV and JSON, written atomically.

Both are plain data (tensors, lists, numbers), so a checkpoint holding them still loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .checkpoint import atomic_write_text

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
