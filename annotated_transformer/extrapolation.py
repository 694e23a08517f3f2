"""Length extrapolation (chapter 03): six character models, one per positional encoding, trained
at one context and read at every position of longer windows.

The question is what happens *beyond* the training context. A model whose loss still changes
along the training window cannot answer it: were its loss rising inside the window (an
undertrained model, worse at late positions), a rise beyond the window would mix that with
extrapolation. So the experiment reads the extrapolation only after a check, the **in-window
change**: the mean loss over the last quarter of the training window minus the mean over the
quarter before it (positions ``[3T/4, T)`` against ``[T/2, 3T/4)`` for context ``T``), which must
lie within ``±tolerance`` (:func:`block_change`, :func:`in_window_check`).

Every position predicts the same characters: evaluation windows start every ``stride``
characters of the validation text (:func:`window_starts`), so a block of positions whose start
and length are multiples of ``stride`` covers the same targets as any other such block (up to
the text's two ends). A difference between blocks is the model's doing, not the text's.

- :data:`PROFILES`: ``smoke`` (the chapter's live run, seconds per model, not a result) and
  ``cpu`` (the stored run, ``python scripts/extrapolation.py``);
- :func:`run`: train the six models and measure them; returns the record's ``metrics`` and
  ``history`` (:func:`~annotated_transformer.experiments.run_or_load`'s ``train_fn`` shape);
- :func:`stored_record`: the stored run of a profile, or None.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TransformerConfig
from .data.text import LanguageModelCorpus, load_language_model_corpus, sample_windows
from .model import build_model
from .optim import build_optimizer, build_scheduler
from .results.experiments import ResultsStore, run_key, run_or_load
from .tasks.profiles import EXTRAPOLATION

# "none" first, then the two that change the embeddings, then the three inside attention.
ENCODINGS = ("none", "sinusoidal", "learned", "relative", "rope", "alibi")


@dataclass(frozen=True)
class ExtrapolationConfig:
    """One run of the experiment: the model, its training, and how it is read."""

    context: int = 64  # training context T; the in-window check reads [T/2, T)
    eval_length: int = 256  # windows read after training (learned: T only)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    steps: int = 150
    batch_size: int = 16
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 0
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    stride: int = 16  # evaluation windows start every `stride` characters
    eval_characters: int | None = None  # the first this many of the validation text; None: all
    check_every: int = 0  # an in-window check every this many updates (0: at the end only)
    check_characters: int = 16384  # validation characters read by those checks
    # nats: the largest in-window change counted as flat. Meant to sit above the check's
    # standard error on the whole validation text (printed beside the change) and below the
    # rises beyond the window that the experiment reads.
    tolerance: float = 0.01
    groups: int = 20  # contiguous groups of windows for the standard error
    seed: int = 0
    encodings: tuple[str, ...] = ENCODINGS

    def __post_init__(self) -> None:
        quarter = self.context // 4
        if self.context % 4 or quarter % self.stride:
            raise ValueError(
                f"context={self.context} and stride={self.stride} are not accepted: the "
                "in-window check compares quarters of the context, so context / 4 must be a "
                "multiple of stride"
            )
        if self.eval_length < self.context or self.eval_length % self.stride:
            raise ValueError(
                f"eval_length={self.eval_length} is not accepted: use a multiple of "
                f"stride={self.stride} no shorter than context={self.context}"
            )
        unknown = sorted(set(self.encodings) - set(ENCODINGS))
        if unknown:
            raise ValueError(f"encodings {unknown} are not among: {', '.join(ENCODINGS)}")


# The sizes live with every other run size, in profiles.EXTRAPOLATION.
PROFILES = {name: ExtrapolationConfig(**sizes) for name, sizes in EXTRAPOLATION.items()}


def model_config(
    positional: str, config: ExtrapolationConfig, vocab_size: int
) -> TransformerConfig:
    """The decoder-only character model of the experiment, with ``positional`` its only
    difference from the other five (``max_len`` = the training context: ``learned`` has rows for
    those positions only)."""
    return TransformerConfig(
        arch="decoder-only",
        vocab_size=vocab_size,
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=config.n_layers,
        d_ff=config.d_ff,
        dropout=0.0,
        max_len=config.context,
        positional=positional,
        norm_position="pre",
        pad_id=None,
    )


def window_starts(n_tokens: int, length: int, stride: int) -> Tensor:
    """Starts ``0, stride, 2·stride, ...`` of every window of ``length`` inputs (and one more
    target) that fits in ``n_tokens`` tokens: ``[W]``."""
    return torch.arange(0, n_tokens - length, stride)


@torch.no_grad()
def position_losses(
    model: nn.Module, tokens: Tensor, starts: Tensor, length: int, batch_windows: int = 64
) -> Tensor:
    """The cross-entropy of every next-token prediction in the windows at ``starts``.

    ``tokens``: ``[N]``; ``starts``: ``[W]``. Returns ``[W, length]``: entry ``[w, p]`` is the
    loss of predicting ``tokens[starts[w] + p + 1]`` from ``tokens[starts[w] : starts[w] + p +
    1]``. The model is put in eval mode.
    """
    model.eval()
    offsets = torch.arange(length + 1)  # [T + 1]
    rows = []
    for chunk in starts.split(batch_windows):
        windows = tokens[chunk[:, None] + offsets]  # [B, T + 1]
        logits = model(windows[:, :-1])  # [B, T, V]
        rows.append(F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none"))
    return torch.cat(rows)  # [W, T]


def block_change(
    losses: Tensor, early: tuple[int, int], late: tuple[int, int], groups: int = 20
) -> tuple[float, float]:
    """Mean loss over positions ``late = (start, stop)`` minus over ``early``, and its standard
    error.

    ``losses``: ``[W, T]`` from :func:`position_losses`, windows in the order of their starts.
    The standard error is that of batch means: the windows are cut into ``groups`` contiguous
    groups (neighbouring windows overlap, distant ones do not), the difference is taken in each,
    and their spread over ``sqrt(groups)`` is the error of the mean.
    """
    per_window = losses[:, late[0] : late[1]].mean(1) - losses[:, early[0] : early[1]].mean(1)
    by_group = torch.stack([part.mean() for part in per_window.tensor_split(groups)])  # [G]
    return per_window.mean().item(), (by_group.std() / math.sqrt(groups)).item()


def in_window_blocks(context: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two quarters the in-window check compares: ``[T/2, 3T/4)`` and ``[3T/4, T)``."""
    quarter = context // 4
    return (2 * quarter, 3 * quarter), (3 * quarter, context)


def in_window_check(losses: Tensor, config: ExtrapolationConfig) -> dict[str, Any]:
    """The in-window change of ``losses`` (``[W, >= T]``) with its standard error, and whether
    it lies within ``±config.tolerance``."""
    early, late = in_window_blocks(config.context)
    change, error = block_change(losses, early, late, config.groups)
    return {"change": change, "standard_error": error, "flat": abs(change) <= config.tolerance}


def reading_blocks(config: ExtrapolationConfig) -> dict[str, tuple[int, int]]:
    """The blocks of positions results are read on, named ``"first-last"``: the last quarter of
    the training window (the reference), then doublings beyond it (``[T, 2T)``, ``[2T, 4T)``, ...
    up to ``eval_length``)."""
    start, stop = in_window_blocks(config.context)[1]
    blocks = {f"{start}-{stop - 1}": (start, stop)}
    start = config.context
    while start < config.eval_length:
        stop = min(2 * start, config.eval_length)
        blocks[f"{start}-{stop - 1}"] = (start, stop)
        start = stop
    return blocks


def table_rows(metrics: dict[str, Any], config: ExtrapolationConfig) -> list[dict[str, Any]]:
    """One row per encoding of :func:`run`'s metrics: the in-window check, the loss over the
    window's last quarter, and the *rise* of each block beyond the window over it (None where
    the model refused the longer windows)."""
    names = list(reading_blocks(config))
    rows = []
    for encoding, measured in metrics.items():
        check, blocks = measured["in_window"], measured["blocks"]
        reference = blocks[names[0]]
        row = {
            "encoding": encoding,
            "in-window change": check["change"],
            "± s.e.": check["standard_error"],
            "check": "flat" if check["flat"] else "NOT FLAT",
            f"loss {names[0]}": reference,
        }
        for name in names[1:]:
            rise = measured["rises"].get(name)
            row[f"rise {name}"] = rise["change"] if rise is not None else None
        rows.append(row)
    return rows


def train_model(
    positional: str,
    config: ExtrapolationConfig,
    corpus: LanguageModelCorpus,
    log: Callable[[str], None] | None = None,
) -> tuple[nn.Module, list[dict[str, Any]]]:
    """Train one model on random training windows of ``config.context`` characters.

    Every model starts from ``config.seed`` and sees the same batches in the same order. AdamW,
    linear warmup then a cosine decay to ``min_lr``, gradients clipped to ``grad_clip``. Every
    ``check_every`` updates (and at the end) a history row records the mean training loss since
    the last row and the in-window change on the first ``check_characters`` validation
    characters. Returns the model (in eval mode) and the history.
    """
    torch.manual_seed(config.seed)
    model = build_model(model_config(positional, config, corpus.tokenizer.vocab_size))
    optimizer = build_optimizer(model, "adamw", lr=config.lr, weight_decay=config.weight_decay)
    scheduler = build_scheduler(
        optimizer,
        "warmup_cosine",
        max_lr=config.lr,
        warmup=config.warmup,
        total_steps=config.steps,
        min_lr=config.min_lr,
    )
    batches = torch.Generator().manual_seed(config.seed)
    valid = corpus.splits["valid"][: config.check_characters]
    check_starts = window_starts(len(valid), config.context, config.stride)
    history, running, count, started = [], 0.0, 0, time.perf_counter()
    for step in range(1, config.steps + 1):
        model.train()
        batch = sample_windows(corpus.splits["train"], config.batch_size, config.context, batches)
        logits = model(batch.inputs)  # [B, T, V]
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        running, count = running + loss.item(), count + 1
        if (config.check_every and step % config.check_every == 0) or step == config.steps:
            losses = position_losses(model, valid, check_starts, config.context)
            check = in_window_check(losses, config)
            history.append(
                {
                    "step": step,
                    "train_loss": running / count,
                    "in_window_change": check["change"],
                    "in_window_standard_error": check["standard_error"],
                    "wall_time_s": time.perf_counter() - started,
                }
            )
            running, count = 0.0, 0
            if log is not None:
                log(
                    f"{positional:>10} step {step:>5}: train loss {history[-1]['train_loss']:.3f}, "
                    f"in-window change {check['change']:+.3f} ± {check['standard_error']:.3f}"
                )
    return model.eval(), history


def measure(model: nn.Module, config: ExtrapolationConfig, tokens: Tensor) -> dict[str, Any]:
    """Read a trained model on validation ``tokens``: the loss at every position of windows of
    ``eval_length`` (or of ``context`` when the model refuses longer ones, as ``learned`` does,
    with the refusal kept), the in-window check, the mean loss over each reading block, and the
    rise of each block beyond the window over the window's last quarter, with its standard
    error."""
    starts = window_starts(len(tokens), config.eval_length, config.stride)
    refusal = None
    try:
        losses = position_losses(model, tokens, starts, config.eval_length)
    except ValueError as error:  # a learned table has no rows past max_len
        refusal = str(error)
        losses = position_losses(model, tokens, starts, config.context)
    read = {
        name: span for name, span in reading_blocks(config).items() if span[1] <= losses.size(1)
    }
    reference = next(iter(read.values()))
    rises = {}  # each block beyond the window against the window's last quarter
    for name, span in list(read.items())[1:]:
        change, error = block_change(losses, reference, span, config.groups)
        rises[name] = {"change": change, "standard_error": error}
    return {
        "curve": [round(value, 4) for value in losses.mean(0).tolist()],  # [T_read]
        "windows": len(starts),
        "in_window": in_window_check(losses, config),
        "blocks": {
            name: losses[:, start:stop].mean().item() for name, (start, stop) in read.items()
        },
        "rises": rises,
        "refusal": refusal,
    }


def record_config(profile: str, config: ExtrapolationConfig | None = None) -> dict[str, Any]:
    """The results-store config of a run: what defines it, hashed into its key."""
    config = config if config is not None else PROFILES[profile]
    fields = dataclasses.asdict(config)
    fields["encodings"] = list(config.encodings)
    return {"experiment": "extrapolation", "task": "tinyshakespeare", "profile": profile, **fields}


def config_from_record(config: dict[str, Any]) -> ExtrapolationConfig:
    """The :class:`ExtrapolationConfig` a record's config describes."""
    names = {field.name for field in dataclasses.fields(ExtrapolationConfig)}
    values = {name: value for name, value in config.items() if name in names}
    values["encodings"] = tuple(values.get("encodings", ENCODINGS))
    return ExtrapolationConfig(**values)


def run_encoding(
    positional: str,
    config: ExtrapolationConfig,
    corpus: LanguageModelCorpus | None = None,
    log: Callable[[str], None] | None = print,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train and measure one encoding: its metrics (:func:`measure`, plus ``steps`` and
    ``wall_time_s``) and its history rows (each naming the encoding)."""
    corpus = corpus if corpus is not None else load_language_model_corpus("tinyshakespeare")
    started = time.perf_counter()
    model, rows = train_model(positional, config, corpus, log)
    valid = corpus.splits["valid"][: config.eval_characters]
    metrics = {
        **measure(model, config, valid),
        "steps": config.steps,
        "wall_time_s": time.perf_counter() - started,
    }
    if log is not None:
        check = metrics["in_window"]
        log(
            f"{positional:>10}: in-window change {check['change']:+.3f} "
            f"± {check['standard_error']:.3f} ({'flat' if check['flat'] else 'NOT FLAT'}), "
            f"{metrics['wall_time_s']:.0f} s"
        )
    return metrics, [{"encoding": positional, **row} for row in rows]


def _run_encoding_in_worker(
    positional: str, config: ExtrapolationConfig, corpus: LanguageModelCorpus, log
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    torch.set_num_threads(1)  # one core per model: tiny matrices gain little from a second
    return run_encoding(positional, config, corpus, log)


def run(
    config: ExtrapolationConfig,
    corpus: LanguageModelCorpus | None = None,
    log: Callable[[str], None] | None = print,
    jobs: int = 1,
) -> dict[str, Any]:
    """Train and measure every encoding of ``config``: ``{"metrics": {encoding: ...},
    "history": [rows]}``. ``jobs > 1`` trains that many models at once, each in its own process
    on one thread; every model is seeded alike, so the numbers do not depend on ``jobs``."""
    corpus = corpus if corpus is not None else load_language_model_corpus("tinyshakespeare")
    if jobs <= 1:
        results = [run_encoding(name, config, corpus, log) for name in config.encodings]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [
                pool.submit(_run_encoding_in_worker, name, config, corpus, log)
                for name in config.encodings
            ]
            results = [future.result() for future in futures]
    metrics = {name: result[0] for name, result in zip(config.encodings, results, strict=True)}
    return {"metrics": metrics, "history": [row for result in results for row in result[1]]}


def results_store(root: str | Path) -> ResultsStore:
    """The store of this experiment's records: ``<root>/results/extrapolation``."""
    return ResultsStore(Path(root) / "results" / "extrapolation")


def stored_record(root: str | Path, profile: str = "cpu") -> dict[str, Any] | None:
    """The stored record of ``profile``'s run under checkout ``root``, or None when that exact
    configuration has not been run (a changed :data:`PROFILES` entry is a new run)."""
    store = results_store(root)
    key = run_key(record_config(profile))
    return store.load(key) if store.exists(key) else None


def run_and_store(
    root: str | Path,
    profile: str = "cpu",
    rerun: bool = False,
    jobs: int = 1,
    log: Callable[[str], None] | None = print,
    corpus: LanguageModelCorpus | None = None,
) -> dict[str, Any]:
    """Run ``profile`` unless it is stored (or ``rerun``), and store it with its provenance
    (``corpus``: Tiny Shakespeare unless given)."""

    def train(config: dict[str, Any]) -> dict[str, Any]:
        return run(config_from_record(config), corpus, log=log, jobs=jobs)

    return run_or_load(results_store(root), record_config(profile), train, rerun=rerun)
