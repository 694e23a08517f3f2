"""What a Mac needs before torch is imported; done when this module is imported, which the
package does first (it imports nothing heavy)."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

MPS_FALLBACK = "PYTORCH_ENABLE_MPS_FALLBACK"


def enable_mps_fallback(
    platform: str = sys.platform, environ: MutableMapping[str, str] = os.environ
) -> None:
    """On macOS, let the operations Apple's GPU (MPS) lacks run on the CPU instead of failing.

    torch reads :data:`MPS_FALLBACK` once, when it is first imported, so this must run before
    ``import torch``; a value the reader set (``0``, to see which operations fall back) is kept.
    """
    if platform == "darwin":
        environ.setdefault(MPS_FALLBACK, "1")


enable_mps_fallback()
