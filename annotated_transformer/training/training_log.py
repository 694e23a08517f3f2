"""Training curves outside the run folder (chapter 08): TensorBoard.

The run folder's ``history.csv``/``.json`` is the record; a training log shows the same history
rows live. :func:`open_training_log` returns an ``on_log`` callback of the
:class:`~annotated_transformer.trainer.Trainer`, which calls it with each row it appends to the
history, so the curves hold exactly the history's numbers. With ``"tensorboard"`` each row becomes
scalars in ``RUN/tensorboard/`` (``tensorboard --logdir RUN/tensorboard``), under the tags of
:func:`scalar_tags`. It needs the ``tensorboard`` package: ``pip install
"annotated-transformer[tensorboard]"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import check_choice

LOG_CHOICES = ("tensorboard",)
TENSORBOARD_FOLDER = "tensorboard"  # inside the run directory


class MissingExtra(ModuleNotFoundError):
    """An optional feature whose package is not installed; the message names the extra."""


def check_training_log(log: str | None, run_dir: str | Path | None) -> None:
    """Refuse, before any work, an unknown log, a log without a run directory to write into, or
    one whose package is missing (:class:`MissingExtra`, naming the extra to install)."""
    if log is None:
        return
    check_choice("log", log, LOG_CHOICES)
    if run_dir is None:
        raise ValueError(f"log={log!r} writes into the run directory: set checkpoint_dir (--out)")
    _summary_writer()


def _summary_writer() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch imports the tensorboard package itself
        raise MissingExtra(
            "--log tensorboard needs the tensorboard package, which is not installed: "
            "pip install 'annotated-transformer[tensorboard]' (or pip install tensorboard)"
        ) from error
    return SummaryWriter


def scalar_tags(row: dict[str, Any]) -> dict[str, float]:
    """The scalars of one history row by TensorBoard tag: ``train/loss``, ``train/lr``,
    ``train/tokens_per_second`` and, on rows that evaluated, ``eval/NAME`` for each evaluation
    metric (``eval/loss``, ``eval/perplexity``, ``eval/accuracy``, extra metrics such as BLEU;
    not the token count)."""
    tags = {
        "train/loss": row["train_loss"],
        "train/lr": row["lr"],
        "train/tokens_per_second": row["tokens_per_second"],
    }
    for key, value in row.items():
        if key.startswith("eval_") and key != "eval_tokens" and _is_number(value):
            tags["eval/" + key.removeprefix("eval_")] = value
    return tags


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@contextmanager
def open_training_log(
    log: str | None, run_dir: str | Path | None, *, enabled: bool = True
) -> Iterator[Callable[[Any, dict[str, Any]], None] | None]:
    """An ``on_log`` callback ``(trainer, row) -> None`` writing the rows to ``log``, closed
    (flushed) on exit; None when ``log`` is None or not ``enabled`` (the processes of a
    ``torchrun`` launch other than the first)."""
    if log is None or not enabled:
        yield None
        return
    check_training_log(log, run_dir)
    writer = _summary_writer()(log_dir=str(Path(run_dir) / TENSORBOARD_FOLDER))

    def write_row(trainer: Any, row: dict[str, Any]) -> None:
        for tag, value in scalar_tags(row).items():
            writer.add_scalar(tag, value, row["step"])

    try:
        yield write_row
    finally:
        writer.close()
