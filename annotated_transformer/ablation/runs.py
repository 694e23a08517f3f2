"""Training one run: the three architectures on translation and on a character LM.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batch import Batch
from ..model import count_parameters
from ..results.evaluation import score_translations, translate
from ..results.experiments import canonical_json, run_key
from ..tasks import build_task
from ..training.checkpoint import CheckpointError
from ..training.fit import fit_task
from ..training.resuming import ResumeMismatch
from ..training.run_folder import RUN_FILE, read_launches, record_launch
from ..training.train import evaluate, resolve_precision
from .configs import build_configs, task_fields
from .studies import task_kind


def prefix_lm_batch(batch: Batch, pad_id: int) -> Batch:
    """A translation batch as one sequence per pair: ``source </s> <s> target``, predicting
    ``target </s>``.

    The inputs are the encoder-decoder's encoder input followed by its decoder input; the
    targets are padding (no loss) over the source and the encoder-decoder's targets after it, so
    the loss is on exactly the same tokens as the encoder-decoder's. A causal (decoder-only)
    model reading it is a *prefix LM*; a bidirectional (encoder-only) one sees each answer.
    """
    if batch.src is None:
        raise ValueError("prefix_lm_batch needs a translation batch (with src)")
    source_lengths = (batch.src != pad_id).sum(1).tolist()  # [B]
    target_lengths = (batch.inputs != pad_id).sum(1).tolist()  # [B]
    rows = len(source_lengths)
    width = max(s + t for s, t in zip(source_lengths, target_lengths, strict=True))
    inputs = torch.full((rows, width), pad_id, dtype=torch.long)  # [B, L]
    targets = torch.full((rows, width), pad_id, dtype=torch.long)  # [B, L]
    for row, (s, t) in enumerate(zip(source_lengths, target_lengths, strict=True)):
        inputs[row, :s] = batch.src[row, :s]
        inputs[row, s : s + t] = batch.inputs[row, :t]
        targets[row, s : s + t] = batch.targets[row, :t]
    return Batch(inputs=inputs, targets=targets)


@dataclass(frozen=True)
class PrefixSource:
    """A translation data source re-read as :func:`prefix_lm_batch` sequences."""

    source: Callable[[int, torch.Generator], Iterable[Batch]]
    pad_id: int

    def __call__(self, epoch: int, generator: torch.Generator) -> Iterator[Batch]:
        return (prefix_lm_batch(batch, self.pad_id) for batch in self.source(epoch, generator))


@torch.no_grad()
def last_position_loss(
    model: nn.Module, batches: Iterable[Batch], max_batches: int | None = None
) -> float:
    """Mean loss (nats) of the last position of each window only: the one prediction whose answer
    is not among the inputs, so even a model that reads the future must really predict it."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            break
        logits = model(batch.inputs.to(device))[:, -1].float()  # [B, V]
        total += F.cross_entropy(logits, batch.targets[:, -1].to(device), reduction="sum").item()
        count += batch.targets.size(0)
    model.train(was_training)
    return total / max(count, 1)


# ---------------------------------------------------------------------------------------------
# Training one run

# How many times a run with a checkpoint folder saves ``last.pt`` along its updates: every tenth
# of the run (a cmn-eng reference run of 12.5 min on a 2-core CPU saves every 75 s or so).
SAVES_PER_RUN = 10


@functools.lru_cache(maxsize=4)
def _load_task(name: str, options_json: str) -> Any:
    return build_task(name, json.loads(options_json))


def load_task(name: str, options: dict[str, Any]) -> Any:
    """The task ``name`` built with ``options``, once per process (runs of a study share it)."""
    task_kind(name)
    return _load_task(name, canonical_json(options))


class RunFolderError(ValueError):
    """A run's checkpoint folder holds a checkpoint this run cannot continue from; the message
    says why and names the folder to delete."""


def run_folder(checkpoint_root: str | os.PathLike, config: dict[str, Any]) -> Path:
    """``checkpoint_root/<run key>``: where the run ``config`` keeps its checkpoints while it
    trains (:func:`train_run`)."""
    return Path(checkpoint_root) / run_key(config)


def train_run(
    config: dict[str, Any],
    device: str = "auto",
    checkpoint_root: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Train the run ``config`` (from :func:`run_configs`) and measure it.

    Returns ``{"metrics", "history", "samples", "device", "precision"}`` for
    :func:`~annotated_transformer.experiments.run_or_load`. A run whose loss stops being finite
    returns ``metrics["diverged"] = True`` and the history so far, instead of raising: one
    diverged cell must not stop a study.

    ``checkpoint_root``: the run saves ``last.pt`` in :func:`run_folder` ten times along its
    updates (:data:`SAVES_PER_RUN`), and a run stopped part-way that is trained again continues
    from its last one exactly (same weights, optimizer, data position and random state); it then
    also returns ``"resumed"`` (the earlier parts' training seconds and the code the first part
    started with), so that the record's wall time is the whole run's. The folder stays; the
    caller removes it once the record is saved.
    """
    kind = task_kind(config["task"])
    task = load_task(config["task"], config["data"])
    arch = config["model"]["arch"]
    folder = resume = first_code = None
    if checkpoint_root is not None:
        folder = run_folder(checkpoint_root, config)
        if (folder / "last.pt").is_file():
            resume = folder / "last.pt"
            launches = folder / RUN_FILE  # the code the first part started with, if it says
            if launches.is_file():
                first_code = (read_launches(launches) or [{}])[0].get("code")
        else:  # a fresh start: the folder says what it holds and which code began the run
            record_launch(folder, [], config["task"], config.get("profile"), config, "ablation run")
    model_config, train_config = build_configs(
        config,
        task_fields(task, arch),
        device,
        checkpoint_dir=None if folder is None else str(folder),
        save_every=None
        if folder is None
        else max(1, config["train"]["max_steps"] // SAVES_PER_RUN),
    )
    pad = model_config.pad_id
    train_data, splits = task.train, dict(task.splits)
    if kind == "translation" and arch != "encoder-decoder":  # one stack: a prefix LM
        train_data = PrefixSource(task.train, pad)
        splits = {
            name: [prefix_lm_batch(b, pad) for b in batches] for name, batches in splits.items()
        }
    try:
        fit = fit_task(
            task,
            model_config,
            train_config,
            train_data=train_data,
            eval_data=splits["valid"],
            resume=resume,
            raise_on_divergence=False,
        )
    except (CheckpointError, ResumeMismatch) as error:  # a damaged file, or other code's run
        raise RunFolderError(
            f"{error}\nThe run cannot continue from {folder}: delete that folder to train the "
            "run from its start."
        ) from error
    resumed = {}
    if resume is not None:
        resumed = {"resumed": {"wall_time_s": fit.resumed_elapsed, "code": first_code}}
    metrics: dict[str, Any] = {"parameters": count_parameters(fit.model)}
    if fit.diverged is not None:
        metrics.update({"diverged": True, "diverged_at": fit.diverged.step})
        return {
            "metrics": metrics,
            "history": fit.history,
            "device": fit.device,
            "precision": resolve_precision(fit.device, train_config.precision),
            **resumed,
        }
    model, evaluation = fit.model, config["evaluation"]
    samples: dict[str, Any] = {}
    if kind == "translation":
        # Validation for choosing, test for reporting: both splits decoded the same way, so a
        # study can be read on the split that chooses (valid_bleu) and reported on test.
        limit = evaluation.get("test_sentences")
        for split in ("valid", "test"):
            held_out = evaluate(model, splits[split], pad, precision=train_config.precision)
            metrics.update(
                {f"{split}_{name}": held_out[name] for name in ("loss", "perplexity", "accuracy")}
            )
            references = task.references[split][:limit]
            hypotheses = translate(
                model,
                task.splits[split],
                task.tokenizer,
                task.info,
                limit=limit,
                max_new_tokens=evaluation.get("max_new_tokens"),
            )
            scores = score_translations(
                hypotheses, references, resamples=evaluation.get("bleu_resamples") or 0
            )
            metrics.update(
                {
                    f"{split}_bleu": scores.bleu,
                    f"{split}_chrf": scores.chrf,
                    f"{split}_sentences": scores.sentences,
                }
            )
            if scores.bleu_low is not None:
                metrics.update(
                    {f"{split}_bleu_low": scores.bleu_low, f"{split}_bleu_high": scores.bleu_high}
                )
        metrics.update({"bleu_signature": scores.signature, "decode": "greedy"})
        samples = {"reference": references[:3], "hypothesis": hypotheses[:3]}
    else:
        split = "test" if "test" in splits else "valid"  # Tiny Shakespeare has no test split
        batches = evaluation.get("eval_batches")
        result = evaluate(
            model, splits[split], pad, max_batches=batches, precision=train_config.precision
        )
        metrics.update(
            {
                f"{split}_loss": result["loss"],
                f"{split}_bits_per_char": result["loss"] / math.log(2),
                f"{split}_accuracy": result["accuracy"],
                f"{split}_last_position_loss": last_position_loss(model, splits[split], batches),
                f"{split}_tokens": result["tokens"],
            }
        )
    return {
        "metrics": metrics,
        "history": fit.history,
        "samples": samples,
        "device": fit.device,
        "precision": resolve_precision(fit.device, train_config.precision),
        **resumed,
    }
