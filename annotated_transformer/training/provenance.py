"""Provenance (chapter 08): which code, software and machine produced a result.

Its one home, below the results store and the run folder that both record it: a run folder's
``run.json`` notes the :func:`code_version` a run started with, and every stored record carries
:func:`provenance` (git commit, dirty flag, torch and Python versions, device, date, wall time,
seed).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch


def _git(*arguments: str, cwd: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", *arguments],
            cwd=cwd,
            capture_output=True,
            text=True,
            encoding="utf-8",  # git writes UTF-8 paths; the locale's codec may not read them
            errors="replace",
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip()


def device_name(device: str | torch.device | None = None) -> str:
    """A readable name of the device that ran: the CUDA device's name, else the CPU's model."""
    device = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        return torch.cuda.get_device_name(device if device is not None else 0)
    if device is not None and device.type == "mps":
        return f"Apple MPS: {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name"):
                    return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def code_version(checkout: Path | None = None) -> dict[str, Any]:
    """The git commit of this checkout (``checkout``: a folder in it; this package's by
    default) and whether its code differs from it.

    ``git_commit`` is ``"unknown"`` outside a git checkout; ``git_dirty`` says whether tracked
    files differed from that commit, or a Python file not yet committed lay beside them (a new
    script a run may have been started from): then the commit alone does not reproduce the run.
    Files under ``results/`` do not count: they are the stored records, which no run reads, and
    a record or summary written by the previous run is often not committed yet when the next
    one starts. Other untracked files (an output notebook, a log) do not count either.
    """
    here = checkout or Path(__file__).resolve().parent
    commit = _git("rev-parse", "HEAD", cwd=here)
    not_results = ":(top,exclude)results"
    changed = _git(
        "status", "--porcelain", "--untracked-files=no", "--", ":(top)", not_results, cwd=here
    )
    new_code = _git(
        "ls-files",
        "--others",
        "--exclude-standard",
        "--",
        ":(top,glob)**/*.py",
        not_results,
        cwd=here,
    )
    dirty = bool(changed) or bool(new_code)
    return {"git_commit": commit or "unknown", "git_dirty": dirty if commit else None}


def provenance(
    seed: int,
    wall_time: float,
    device: str | torch.device | None = None,
    code: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Where a result came from: code version, software, hardware, time and seed.

    ``code`` is :func:`code_version` taken when the run *started* (the code that ran); without
    it, the checkout's version now.
    """
    return {
        **(code if code is not None else code_version()),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": device_name(device),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": float(wall_time),
        "seed": int(seed),
        "hostname": socket.gethostname(),
    }
