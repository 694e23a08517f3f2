"""The chapters' explorers: ``ipywidgets.interact`` for a reader, and a view that cannot hang a
headless run.

A reader in Jupyter or Colab moves a control and the view is drawn again: that is
``widgets.interact``, whose views go through an ``Output`` widget. A headless run has no one to
move a control: the book's build and papermill execute the chapters with nbclient, which imitates
an ``Output`` widget by sending every captured output back to the kernel on the shell channel
while it waits on that same channel for the cell's reply. With a few outputs in one view that wait
can miss the reply and last until the cell's execution timeout, or forever without one
(jupyter/nbclient#312; seen here on most runs of a notebook of twelve such views). So where
``AT_HEADLESS`` is set (the Makefile, ``scripts/build_book.sh`` and the tests set it), the explorer
displays its controls and draws its first view directly, with no ``Output`` widget: the page shows
the same controls and the same first view, and nothing waits.

    from annotated_transformer.book.explorer import interact

    interact(show, depth=widgets.IntSlider(value=6, min=1, max=12))
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from IPython.display import display
from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

HEADLESS = "AT_HEADLESS"  # set (to anything but "" or "0"): no one will move a control


def headless() -> bool:
    """Whether this run has no reader to move a control (:data:`HEADLESS` is set)."""
    return os.environ.get(HEADLESS, "") not in ("", "0")


def _control(name: str, abbreviation: Any, default: Any) -> widgets.ValueWidget | widgets.fixed:
    """The widget ``interact`` would make of ``abbreviation`` (a widget, a tuple, a list...);
    a ``widgets.fixed`` value stays as it is (``interact`` shows no control for it)."""
    if isinstance(abbreviation, widgets.fixed):
        return abbreviation
    if isinstance(abbreviation, widgets.ValueWidget):
        control = abbreviation
    else:
        control = widgets.interactive.widget_from_abbrev(abbreviation, default)
        if control is None:
            raise ValueError(
                f"{name}={abbreviation!r} cannot be made into a control: pass a widget, a "
                "(min, max[, step]) tuple, a list of options, a bool or a string"
            )
    if not getattr(control, "description", ""):
        control.description = name
    return control


def interact(function: Callable[..., Any], **controls: Any) -> Any:
    """``widgets.interact(function, **controls)`` for a reader; where :func:`headless`, the
    controls displayed and ``function`` called once with their values (its result displayed
    when not ``None``, as ``interact`` does), without an ``Output`` widget. Returns what
    ``widgets.interact`` returns, or ``None`` when headless."""
    if not headless():
        return widgets.interact(function, **controls)
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    made = {
        name: _control(name, abbreviation, defaults.get(name))
        for name, abbreviation in controls.items()
    }
    shown = [control for control in made.values() if not isinstance(control, widgets.fixed)]
    display(widgets.VBox(shown, _dom_classes=["widget-interact"]))
    result = function(**{name: control.value for name, control in made.items()})
    show_inline_matplotlib_plots()
    if result is not None:
        display(result)
    return None
