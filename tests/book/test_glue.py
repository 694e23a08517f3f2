"""book.glue: MyST-NB's glue in the book build, nothing where MyST-NB is absent (Colab)."""

import sys
import types

import numpy as np
import pandas as pd

from annotated_transformer.book import glue as glue_module


def test_glue_hands_the_value_to_myst_nb(monkeypatch):
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: calls.append((name, value, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    glue_module.glue("rise_alibi", 0.008)
    assert calls == [("rise_alibi", 0.008, False)]


def test_without_myst_nb_glue_does_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import raises ImportError
    assert glue_module.glue("anything", 1.0) is None


def test_numpy_scalars_are_glued_as_numbers_myst_nb_can_format(monkeypatch):
    # MyST-NB formats {glue:text}`name:.2f` with float(repr(value)); NumPy 2's repr of a
    # scalar is "np.float64(0.5)", which it cannot parse (the book build fails on the warning).
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: calls.append(value)
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    glue_module.glue("median", pd.Series([0.25, 0.5, 1.0]).median())
    glue_module.glue("count", np.int64(7))
    glue_module.glue("label", "layer 0 head 3")
    assert [type(value) for value in calls] == [float, int, str]
    assert format(float(repr(calls[0])), ".2f") == "0.50"
