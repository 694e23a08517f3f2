"""Numbers for the book's prose: MyST-NB's ``glue`` where it is installed, a no-op elsewhere.

A chapter's sentence says ``{glue:text}`name:.2f``` and a hidden cell calls ``glue("name", value)``:
the built book prints the value the code computed, so a rerun that changes it changes the text.
MyST-NB comes with the ``book`` extra; on Colab or in a plain Jupyter, where the prose is not
rendered from the outputs, the call does nothing, and the cell's assertions still hold the
numbers to the stored record.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def glue(name: str, value: Any, display: bool = False) -> None:
    """Glue ``value`` under ``name`` for ``{glue:text}`` roles (MyST-NB), when it is installed.

    A NumPy scalar (a pandas cell, a ``.median()``) is glued as the Python number it holds:
    MyST-NB formats ``{glue:text}`name:.2f``` by parsing the value's ``repr``, which NumPy 2
    writes as ``np.float64(0.5)``, and the build would fail on the warning."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # not building the book: nothing reads the glued value
        return
    if isinstance(value, np.generic):
        value = value.item()
    myst_glue(name, value, display=display)
