"""The results store (chapter 08): every run's config, metrics, history and provenance, on disk.

A *record* is one JSON file, ``results/<key>.json``, holding::

    {"key", "config", "metrics", "history", "provenance", "samples"}

- ``config``: everything that defines the run (task, profile, seed, model and training settings);
  the key is computed from it, so the same configuration always finds the same record;
- ``metrics``: the final numbers (test BLEU, test perplexity, accuracy, ...);
- ``history``: the trainer's rows (step, train loss, evaluation metrics, wall time);
- ``provenance``: who produced it: git commit (and whether the tree was dirty), torch and Python
  versions, device name, UTC date, wall time, seed (:func:`provenance`);
- ``samples``: optional text: generated samples, translations next to their references.

A run may also return attention maps (``"attention"``, a list of JSON-safe dicts, see
:mod:`annotated_transformer.attention_maps`); they go to ``results/attention/<key>.json`` beside the
record, because they are larger than the record itself and only chapter 10 reads them
(:meth:`ResultsStore.load_attention`).

Experiment chapters call :func:`run_or_load`: a stored record is shown as it is, a missing one is
trained and saved (``rerun=True`` trains again). Records are small; checkpoints never go here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..tasks.task_options import TASK_ALIASES, TASKS, canonical_task
from ..training.checkpoint import atomic_write_text
from ..training.provenance import code_version, provenance

RECORD_FIELDS = ("key", "config", "metrics", "history", "provenance", "samples")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal configs give equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def run_key(config: dict[str, Any]) -> str:
    """A stable file name for ``config``: a readable prefix and 12 hex digits of its SHA-256.

    The prefix is ``task-profile-seedN`` from the config's ``task``, ``profile`` and ``seed``
    (those present); the hash covers the whole config, so any change gives a new key.
    """
    digest = hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()[:12]
    parts = [str(config[name]) for name in ("task", "profile") if name in config]
    if "seed" in config:
        parts.append(f"seed{config['seed']}")
    prefix = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts))
    return f"{prefix}-{digest}" if prefix else digest


def legacy_keys(config: dict[str, Any]) -> list[str]:
    """The keys ``config`` had under the task's old names (:data:`~annotated_transformer.tasks.
    TASK_ALIASES`): records stored before the names were unified are found under them."""
    task = config.get("task")
    return [
        run_key({**config, "task": alias})
        for alias, name in TASK_ALIASES.items()
        if name == task and alias != task
    ]


def _plain(value: Any) -> Any:
    """JSON-safe: tensors and numpy numbers to Python numbers, non-finite floats to strings."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, torch.Tensor):
        return _plain(value.tolist())
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "inf", "nan": strict JSON has no such numbers
    return value


class ResultsStore:
    """Records as ``<root>/<key>.json``, written atomically (a crash leaves the old file)."""

    def __init__(self, root: str | os.PathLike = "results") -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", key):
            raise ValueError(f"key={key!r} is not accepted: use letters, digits, '_', '.', '-'")
        return self.root / f"{key}.json"

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def save(self, key: str, record: dict[str, Any]) -> Path:
        unknown = sorted(set(record) - set(RECORD_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown record fields: {', '.join(unknown)}; accepted: {', '.join(RECORD_FIELDS)}"
            )
        record = {"key": key, **{name: record[name] for name in record if name != "key"}}
        text = json.dumps(_plain(record), indent=1, sort_keys=True, allow_nan=False) + "\n"
        return atomic_write_text(self.path(key), text)

    def load(self, key: str) -> dict[str, Any]:
        with open(self.path(key), encoding="utf-8") as file:
            return json.load(file)

    def attention_path(self, key: str) -> Path:
        """Where the attention maps of run ``key`` live: ``<root>/attention/<key>.json``."""
        return self.path(key).parent / "attention" / f"{key}.json"

    def save_attention(self, key: str, maps: list[dict[str, Any]]) -> Path:
        """Write the attention maps of run ``key`` atomically (compact JSON, no indentation)."""
        if not isinstance(maps, list) or not all(isinstance(item, dict) for item in maps):
            raise TypeError("attention maps must be a list of dicts (one per sentence or text)")
        text = json.dumps(_plain(maps), separators=(",", ":"), allow_nan=False) + "\n"
        return atomic_write_text(self.attention_path(key), text)

    def load_attention(self, key: str) -> list[dict[str, Any]] | None:
        """The attention maps stored with run ``key``, or None when the run stored none."""
        path = self.attention_path(key)
        if not path.is_file():
            return None
        with open(path, encoding="utf-8") as file:
            return json.load(file)

    def records(self) -> list[dict[str, Any]]:
        """Every record under ``root`` (not its subfolders), ordered by key."""
        if not self.root.is_dir():
            return []
        return [self.load(path.stem) for path in sorted(self.root.glob("*.json"))]

    def find(
        self, *, leak_twins: bool = False, masked: bool = False, **filters: Any
    ) -> list[dict[str, Any]]:
        """Records whose ``config`` has every ``name=value`` of ``filters``, newest first.

        Task names are compared by :func:`~annotated_transformer.tasks.canonical_task`: a record
        stored as ``shakespeare`` is found by ``task="tinyshakespeare"`` and the other way round.
        A language model trained without its causal mask (:func:`is_leak_twin`) is left out
        unless ``leak_twins`` is set: it measures the leak, and must never be read as a result.
        A masked language model (:func:`is_masked_lm`) is left out unless ``masked`` is set: its
        perplexity is over hidden words seen from both sides, not comparable with a causal one.
        """

        def same(name: str, stored: Any, wanted: Any) -> bool:
            if name == "task" and isinstance(stored, str) and isinstance(wanted, str):
                return canonical_task(stored) == canonical_task(wanted)
            return stored == wanted

        found = [
            record
            for record in self.records()
            if (leak_twins or not is_leak_twin(record))
            and (masked or not is_masked_lm(record))
            and all(
                same(name, record.get("config", {}).get(name), value)
                for name, value in filters.items()
            )
        ]
        return sorted(found, key=lambda record: record.get("provenance", {}).get("date", ""))[::-1]


def is_leak_twin(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a language model trained without its causal mask (an encoder-only
    model on a language-model task, chapter 08's leak twin): every position sees the word it is
    asked to predict, so its perplexity measures the leak, not a model."""
    config = record.get("config", {})
    task = TASKS.get(canonical_task(str(config.get("task"))))
    arch = config.get("model", {}).get("arch")
    return (
        task is not None
        and task.kind == "language-model"
        and arch == "encoder-only"
        and not is_masked_lm(record)
    )


def is_masked_lm(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a language model trained on BERT's masked-token objective
    (``data.objective=masked``): bidirectional, but scored on words hidden from its input, so
    no leak; its perplexity is not a causal model's either."""
    return record.get("config", {}).get("data", {}).get("objective") == "masked"


def run_or_load(
    store: ResultsStore,
    config: dict[str, Any],
    train_fn: Callable[[dict[str, Any]], dict[str, Any]],
    rerun: bool = False,
) -> dict[str, Any]:
    """The stored record of ``config``, or ``train_fn(config)`` run, saved and returned.

    ``train_fn`` returns ``{"metrics", "history", "samples"?, "attention"?, "device"?,
    "precision"?, "resumed"?}`` (``precision``: the one the run computed in, kept in the
    provenance); this function adds the key, the config and the provenance (with the wall time it
    measured and ``config["seed"]``). Attention maps are saved beside the record
    (:meth:`save_attention`), first, so that a record on disk always has its maps.

    A run that continued from a checkpoint returns ``"resumed": {"wall_time_s": seconds of the
    earlier parts, "code": the code_version() its first part started with (if known)}``: the
    record's wall time is then the sum of all parts, and its commit the first part's (the code that
    did most of the training); the finishing part's commit is kept beside it.
    """
    key = run_key(config)
    if not rerun:
        for stored in (key, *legacy_keys(config)):
            if store.exists(stored):
                return store.load(stored)
    code = code_version()  # before training: a commit made during a long run is not its code
    started = time.perf_counter()
    result = dict(train_fn(config))
    wall_time = time.perf_counter() - started
    device = result.pop("device", None)
    precision = result.pop("precision", None)  # what a config's precision "auto" resolved to
    attention_maps = result.pop("attention", None)
    resumed = result.pop("resumed", None)
    first_code = code
    if resumed:
        wall_time += float(resumed["wall_time_s"])
        first_code = resumed.get("code") or code
    record = {
        "config": config,
        "metrics": result.pop("metrics", {}),
        "history": result.pop("history", []),
        "samples": result.pop("samples", {}),
        "provenance": provenance(config.get("seed", 0), wall_time, device, first_code),
    }
    if precision is not None:
        record["provenance"]["precision"] = precision
    if resumed:
        record["provenance"]["resumed"] = {
            "earlier_wall_time_s": float(resumed["wall_time_s"]),
            "finished_with": code,
        }
    if result:
        raise ValueError(f"train_fn returned unknown fields: {', '.join(sorted(result))}")
    if attention_maps is not None:
        store.save_attention(key, attention_maps)
    store.save(key, record)
    return store.load(key)
