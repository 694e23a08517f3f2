"""book.glue: MyST-NB's glue in the book build, nothing where MyST-NB is absent (Colab)."""

import sys
import types

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
