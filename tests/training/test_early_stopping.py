import math

import pytest

from annotated_transformer.training.early_stopping import EarlyStopping


def test_stops_after_patience_evaluations_without_improvement():
    stopping = EarlyStopping("loss", patience=2)
    assert [stopping.update(value, step) for step, value in enumerate([3.0, 2.0, 2.5, 2.0])] == [
        True,
        True,
        False,
        False,
    ]
    assert stopping.should_stop and (stopping.best_value, stopping.best_step) == (2.0, 1)


def test_auto_mode_maximises_accuracy_bleu_and_chrf_and_minimises_the_rest():
    assert EarlyStopping("bleu").maximize and EarlyStopping("accuracy").maximize
    assert not EarlyStopping("perplexity").maximize
    assert not EarlyStopping("bleu", mode="min").maximize


def test_nan_never_improves_and_no_patience_never_stops():
    stopping = EarlyStopping("loss")
    assert not stopping.update(math.nan)
    assert stopping.best_value is None
    assert stopping.update(1.0)
    for _ in range(50):
        stopping.update(5.0)
    assert not stopping.should_stop


def test_state_round_trips():
    stopping = EarlyStopping("loss", patience=3)
    for value in (1.0, 2.0):
        stopping.update(value, 7)
    other = EarlyStopping("loss", patience=3)
    other.load_state_dict(stopping.state_dict())
    assert other.state_dict() == {"best_value": 1.0, "best_step": 7, "bad_evaluations": 1}


def test_choices_are_validated():
    with pytest.raises(ValueError, match="early_stopping_mode='up' is not one of: auto, min, max"):
        EarlyStopping("loss", mode="up")
    with pytest.raises(ValueError, match="early_stopping_patience=0 is not accepted"):
        EarlyStopping("loss", patience=0)
