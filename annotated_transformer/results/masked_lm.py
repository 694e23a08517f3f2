"""What a masked language model's numbers measure (chapter 08's test of a report's PTB perplexity).

A bidirectional model trained on BERT's objective (``data.objective=masked``) is scored on the
tokens it had to guess: ``[MASK]`` (or a random or unchanged token) in the input, the original as
the target. :func:`masked_lm_readings` reads one trained model several ways, so that a reported
perplexity can be matched to what produced it:

- ``masked``: the chosen positions only (BERT's masked-token perplexity and accuracy);
- ``every``: every position of the same corrupted windows, the 85 % the model sees unchanged
  included (what a perplexity over "all tokens" of a masked model would print).

Each reading comes for the held-out splits and for the training split's first windows (masked
the same way, in eval mode), as a report printing train / valid / test would have.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from torch import nn

from ..data.batch import Batch
from ..data.text import MaskedWindowSource, masked_evaluation_windows
from ..training.train import evaluate


def every_position(batch: Batch, ignore_id: int) -> Batch:
    """``batch`` (masked) with the original token as the target at every position: the chosen
    positions keep their targets, the others take their (unchanged) input."""
    chosen = batch.targets != ignore_id  # [B, T]
    return Batch(inputs=batch.inputs, targets=batch.targets.where(chosen, batch.inputs))


def training_windows(task: Any, tokens: int) -> list[Batch]:
    """The first ``tokens`` of ``task``'s training split as masked evaluation windows, masked
    like the held-out splits (the same generator seed)."""
    source = task.train
    if not isinstance(source, MaskedWindowSource):
        raise ValueError(f"task {task.name!r} is not a masked-token task (data.objective=masked)")
    windows = source.windows
    return list(
        masked_evaluation_windows(
            windows.tokens[:tokens], windows.batch_size, windows.context_length, source.masking
        )
    )


def masked_lm_readings(
    model: nn.Module, task: Any, *, precision: str = "fp32"
) -> dict[str, dict[str, dict[str, float]]]:
    """``{split: {"masked" | "every": {"loss", "perplexity", "accuracy", "tokens"}}}`` for
    ``train`` (as many of its first tokens as the test split has), ``valid`` and ``test``."""
    ignore_id = model.config.pad_id
    test_tokens = sum(batch.inputs.numel() for batch in task.splits["test"])
    splits: dict[str, Iterable[Batch]] = {
        "train": training_windows(task, test_tokens + 1),
        **{name: task.splits[name] for name in ("valid", "test")},
    }
    readings = {}
    for name, batches in splits.items():
        batches = list(batches)
        readings[name] = {
            "masked": evaluate(model, batches, ignore_id, precision=precision),
            "every": evaluate(
                model,
                [every_position(batch, ignore_id) for batch in batches],
                ignore_id,
                precision=precision,
            ),
        }
    return readings


# The source report's PTB "encoder-only (BERT-like), unidirectional or bidirectional" model (its
# sections 4.4 and 6.1.1): perplexity and token accuracy by split, and what it said of its size.
REPORT_PTB = {
    "train": {"perplexity": 22.6, "accuracy": 0.558},
    "valid": {"perplexity": 39.3, "accuracy": 0.493},
    "test": {"perplexity": 40.8, "accuracy": 0.487},
}


def ladder_rows(
    causal: dict[str, Any] | None, masked: dict[str, Any] | None, leak: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Chapter 08's ladder of PTB numbers, each with what it measures: the causal reference run
    (the next word from the words before it), the report's model as it printed its numbers, the
    masked model read two ways (:func:`masked_lm_readings`, stored in ``masked``'s metrics as
    ``{split}_{masked|every}_{perplexity|accuracy}``) and the model without its causal mask (the
    next word, which it reads off its own input). A record that is not stored gives no row."""
    rows: list[dict[str, Any]] = []
    nan = math.nan

    def row(name: str, predicts: str, sees: str, values: dict[str, tuple[float, float]]) -> None:
        rows.append(
            {
                "model": name,
                "predicts": predicts,
                "sees": sees,
                **{f"{split} ppl": values.get(split, (nan, nan))[0] for split in REPORT_PTB},
                "test accuracy": values.get("test", (nan, nan))[1],
            }
        )

    if causal is not None:
        row(
            "causal (reference run)",
            "each next word",
            "the words before it",
            {"test": (causal["metrics"]["test_perplexity"], nan)},
        )
    row(
        "the report's encoder-only model",
        "as printed",
        "unstated",
        {split: (v["perplexity"], v["accuracy"]) for split, v in REPORT_PTB.items()},
    )
    if masked is not None:
        metrics = masked["metrics"]
        for tokens, name, predicts in (
            ("masked", "masked model, scored on the masked words", "the 15 % masked words"),
            ("every", "masked model, scored on every word", "every word of the corrupted text"),
        ):
            row(
                name,
                predicts,
                "the words on both sides",
                {
                    split: (
                        metrics[f"{split}_{tokens}_perplexity"],
                        metrics[f"{split}_{tokens}_accuracy"],
                    )
                    for split in REPORT_PTB
                },
            )
    if leak is not None:
        row(
            "no causal mask (leak twin)",
            "each next word",
            "the next word itself",
            {"test": (leak["metrics"]["test_perplexity"], nan)},
        )
    return rows
