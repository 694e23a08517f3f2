"""Early stopping (chapter 08): stop when an evaluation metric has not improved for a while."""

from __future__ import annotations

import math
from typing import Any

from ..config import HIGHER_IS_BETTER, MODE_CHOICES, check_choice, check_positive_int


class EarlyStopping:
    """Follows one metric over evaluations; :meth:`update` says whether it improved.

    Args:
        metric: the name of the metric (used in messages and to resolve ``mode="auto"``).
        patience: evaluations in a row without improvement after which :attr:`should_stop`
            becomes True; None: never.
        mode: ``"min"``, ``"max"``, or ``"auto"``: max for accuracy, BLEU and chrF, min otherwise.

    A NaN value never improves (and counts as an evaluation without improvement).
    """

    def __init__(self, metric: str = "loss", patience: int | None = None, mode: str = "auto"):
        check_choice("early_stopping_mode", mode, MODE_CHOICES)
        if patience is not None:
            check_positive_int("early_stopping_patience", patience)
        self.metric, self.patience, self.mode = metric, patience, mode
        self.maximize = metric in HIGHER_IS_BETTER if mode == "auto" else mode == "max"
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.bad_evaluations = 0

    def update(self, value: float, step: int | None = None) -> bool:
        """Record the metric's ``value`` (evaluated after update ``step``); True if it improved
        on the best so far (the first finite value always does)."""
        value = float(value)
        improved = not math.isnan(value) and (
            self.best_value is None
            or (value > self.best_value if self.maximize else value < self.best_value)
        )
        if improved:
            self.best_value, self.best_step, self.bad_evaluations = value, step, 0
        else:
            self.bad_evaluations += 1
        return improved

    @property
    def should_stop(self) -> bool:
        """Whether ``patience`` evaluations in a row brought no improvement."""
        return self.patience is not None and self.bad_evaluations >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_value": self.best_value,
            "best_step": self.best_step,
            "bad_evaluations": self.bad_evaluations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_value = state["best_value"]
        self.best_step = state["best_step"]
        self.bad_evaluations = state["bad_evaluations"]
