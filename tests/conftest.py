"""Shared test set-up: the data sets are read from AT_DATA_DIR, by default the shared copy
beside the checkout (as the Makefile and CI set it)."""

import os
from pathlib import Path

os.environ.setdefault("AT_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
