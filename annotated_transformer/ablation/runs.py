"""Training one run: the three architectures on translation and on a character LM.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.batch import Batch
from ..decode import greedy_decode
from ..experiments import canonical_json
from ..metrics import bleu_interval, corpus_bleu, corpus_chrf
from ..model import build_model, count_parameters
from ..train import Trainer, TrainingDiverged, evaluate, seed_everything
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


def translate(
    model: nn.Module,
    batches: Iterable[Batch],
    task: Any,
    limit: int | None,
    max_new_tokens: int | None = None,
) -> list[str]:
    """Greedy translations of the first ``limit`` sentences of ``batches`` (all: None), in order,
    of at most ``2 S + 10`` tokens for a source of ``S`` (and at most ``max_new_tokens``).

    Encoder-decoder: :func:`~annotated_transformer.decode.greedy_decode` from ``<s>`` on the KV
    cache. One stack: the prompt ``source </s> <s>``; sources of equal length from all batches are
    decoded together (a prompt has no padding inside); decoder-only on the cache, encoder-only
    without it (``use_cache=False``: the whole sequence again at every step).
    """
    info, tokenizer = task.info, task.tokenizer
    pad, bos, eos = info["pad_id"], info["bos_id"], info["eos_id"]
    device = next(model.parameters()).device
    arch = model.config.arch

    def budget(source_length: int) -> int:
        return min(info["max_new_tokens"], 2 * source_length + 10, max_new_tokens or math.inf)

    outputs: list[str] = []
    sources: list[Tensor] = []  # one stack: every source (with its </s>), decoded below
    for batch in batches:
        if limit is not None and len(outputs) + len(sources) >= limit:
            break
        src = batch.src.to(device)  # [B, S]
        if arch == "encoder-decoder":
            tokens = greedy_decode(
                model, src=src, max_new_tokens=budget(src.size(1)), bos_id=bos, eos_id=eos
            )
            outputs += [tokenizer.decode(row.tolist()) for row in tokens]
        else:
            sources += [row[row != pad] for row in src]
    sources = sources[:limit] if limit is not None else sources
    texts: list[str] = [""] * len(sources)
    lengths = [len(source) for source in sources]
    for length in sorted(set(lengths)):
        rows = [row for row, value in enumerate(lengths) if value == length]
        for chunk in range(0, len(rows), 256):
            group = rows[chunk : chunk + 256]
            start = torch.full((len(group), 1), bos, dtype=torch.long, device=device)
            prompt = torch.cat([torch.stack([sources[row] for row in group]), start], 1)
            tokens = greedy_decode(  # prompt: [b, length + 1]
                model,
                prompt=prompt,
                max_new_tokens=budget(length),
                eos_id=eos,
                use_cache=arch == "decoder-only",  # encoder-only: bidirectional, no cache
            )
            for row, generated in zip(group, tokens[:, length + 1 :], strict=True):
                texts[row] = tokenizer.decode(generated.tolist())
    outputs += texts
    return outputs[:limit] if limit is not None else outputs


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


@functools.lru_cache(maxsize=4)
def _load_task(name: str, options_json: str) -> Any:
    from ..tasks import get_task

    return get_task(name)(**json.loads(options_json))


def load_task(name: str, options: dict[str, Any]) -> Any:
    """The task ``name`` built with ``options``, once per process (runs of a study share it)."""
    task_kind(name)
    return _load_task(name, canonical_json(options))


def train_run(config: dict[str, Any], device: str = "auto") -> dict[str, Any]:
    """Train the run ``config`` (from :func:`run_configs`) and measure it.

    Returns ``{"metrics", "history", "samples", "device"}`` for
    :func:`~annotated_transformer.experiments.run_or_load`. A run whose loss stops being finite
    returns ``metrics["diverged"] = True`` and the history so far, instead of raising: one
    diverged cell must not stop a study.
    """
    kind = task_kind(config["task"])
    task = load_task(config["task"], config["data"])
    arch = config["model"]["arch"]
    model_config, train_config = build_configs(config, task_fields(task, arch), device)
    seed_everything(config["seed"])  # before the model: a seed gives the same weights
    model = build_model(model_config)
    pad = model_config.pad_id
    train_data, splits = task.train, dict(task.splits)
    one_stack = kind == "translation" and arch != "encoder-decoder"
    if one_stack:
        train_data = PrefixSource(task.train, pad)
        splits = {
            name: [prefix_lm_batch(b, pad) for b in batches] for name, batches in splits.items()
        }
    trainer = Trainer(model, train_config, train_data, splits["valid"])
    metrics: dict[str, Any] = {"parameters": count_parameters(model)}
    try:
        history = trainer.fit()
    except TrainingDiverged as error:
        metrics.update({"diverged": True, "diverged_at": error.step})
        return {"metrics": metrics, "history": trainer.history, "device": trainer.device}
    model = trainer.model.eval()
    evaluation = config["evaluation"]
    samples: dict[str, Any] = {}
    if kind == "translation":
        test = evaluate(model, splits["test"], pad, precision=train_config.precision)
        metrics.update({f"test_{name}": test[name] for name in ("loss", "perplexity", "accuracy")})
        limit = evaluation.get("test_sentences")
        references = task.references["test"][:limit]
        hypotheses = translate(
            model, task.splits["test"], task, limit, evaluation.get("max_new_tokens")
        )
        bleu = corpus_bleu(hypotheses, references)
        metrics.update(
            {
                "test_bleu": bleu.score,
                "test_chrf": corpus_chrf(hypotheses, references).score,
                "bleu_signature": bleu.signature,
                "test_sentences": len(references),
                "decode": "greedy",
            }
        )
        if evaluation.get("bleu_resamples"):
            interval = bleu_interval(
                hypotheses, references, resamples=evaluation["bleu_resamples"], seed=0
            )
            metrics.update({"test_bleu_low": interval.low, "test_bleu_high": interval.high})
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
    return {"metrics": metrics, "history": history, "samples": samples, "device": trainer.device}
