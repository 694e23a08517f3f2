"""One run at a time per run directory (chapter 08), on every OS.

Two runs writing one directory would leave ``last.pt`` from one and ``best.pt`` from the other. A
:class:`RunLock` is a file, ``run.lock``, created with ``O_CREAT | O_EXCL`` (atomic on POSIX and
Windows: of two processes creating it, exactly one succeeds) and holding who took it: the process
id, when that process started, the host and the time. It is removed when the run ends, normally
or by an exception.

A process killed hard (``kill -9``, a power cut) cannot remove its lock. A lock whose process is
gone is *stale*: on the same host, where the process can be checked (``psutil``, on every OS; a
process id reused since by another process counts as gone), the next run takes it over with a
warning; a lock from another host (a shared file system) cannot be checked and is refused, with
the path to remove by hand. The check and the takeover happen under ``filelock``'s OS lock
(``fcntl`` on POSIX, ``msvcrt`` on Windows; released by the OS if the process dies), so two runs
finding the same stale lock cannot both take it over. That guard is a file of this host's
temporary folder, named after the run directory: only runs on one host take a lock over.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import socket
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout

from .checkpoint import remove_orphan_temporaries

LOCK_NAME = "run.lock"
GUARD_TIMEOUT = 30  # seconds: another process checks and takes run.lock in far less


class RunDirectoryLocked(RuntimeError):
    """Another live process holds the run directory; the message names it."""


def _process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if it cannot be read."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def _process_alive(pid: int, started: float | None = None) -> bool:
    """Whether process ``pid`` exists (``psutil``: no signal is sent; ``os.kill(pid, 0)`` would
    deliver CTRL_C_EVENT on Windows) and, when ``started`` is known, is the process that
    started then rather than a later one given the same id."""
    if pid <= 0 or not psutil.pid_exists(pid):
        return False
    if started is None:
        return True
    now_started = _process_started(pid)
    return now_started is None or abs(now_started - started) < 1.0


def guard_path(directory: str | os.PathLike) -> Path:
    """The file of ``filelock``'s OS lock held while ``directory``'s run lock is checked and
    taken (a moment, not a run): in this host's temporary folder, named after the directory."""
    digest = hashlib.sha256(str(Path(directory).resolve()).encode("utf-8")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"annotated-transformer-{digest}.lock"


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 on host 'x', started 2024-01-01T12:00:00`` from a lock file's content."""
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')!r}, started "
        f"{holder.get('started', 'at an unknown time')}"
    )


class RunLock:
    """The lock of run directory ``directory``: :meth:`acquire`, :meth:`release`, or ``with``.

    ``acquire`` raises :class:`RunDirectoryLocked` when a live process holds the directory (this
    one included: two trainers of one process must not share a directory either), takes over a
    stale lock with a warning, and creates the directory if needed.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.held = False
        self._token = f"{os.getpid()}-{id(self)}-{os.urandom(4).hex()}"

    def holder(self) -> dict[str, Any] | None:
        """The content of the lock file (None: no lock). A lock file that cannot be read (being
        written this instant, or damaged) reads as an unknown holder."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError:
            return {}
        try:
            holder = json.loads(text)
        except ValueError:
            return {}
        return holder if isinstance(holder, dict) else {}

    def check(self) -> None:
        """Raise :class:`RunDirectoryLocked` if a live process holds the lock (no side effect)."""
        holder = self.holder()
        if holder is not None and not self._stale(holder):
            raise self._locked_error(holder)

    def acquire(self) -> None:
        if self.held:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        content = {
            "pid": os.getpid(),
            "process_started": _process_started(os.getpid()),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "token": self._token,
        }
        try:
            with FileLock(guard_path(self.directory), timeout=GUARD_TIMEOUT):
                self._take(content)
        except Timeout:
            raise self._locked_error(self.holder() or {}) from None

    def _take(self, content: dict[str, Any]) -> None:
        """Create the lock file, taking over a stale one (under the guard: no other process
        checks or takes it meanwhile)."""
        for _ in range(3):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is None:  # released meanwhile: try again
                    continue
                if not self._stale(holder):
                    raise self._locked_error(holder) from None
                warnings.warn(
                    f"taking over the stale lock {self.path} of a run that is gone "
                    f"({describe_holder(holder)})",
                    stacklevel=4,
                )
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(content, handle)
            self.held = True
            return
        raise self._locked_error(self.holder() or {})

    def release(self) -> None:
        """Remove the lock file if this object holds it (never another process's lock)."""
        if not self.held:
            return
        self.held = False
        holder = self.holder()
        if holder is not None and holder.get("token") == self._token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the lock for the duration, if not held already. On taking it, remove the
        temporary files that interrupted saves left in the directory (no other run writes there
        now), with a warning."""
        if self.held:
            yield
            return
        self.acquire()
        try:
            removed = remove_orphan_temporaries(self.directory)
            if removed:
                warnings.warn(
                    f"removed {len(removed)} temporary file(s) left by an interrupted save in "
                    f"{self.directory}: {', '.join(path.name for path in removed)}",
                    stacklevel=3,
                )
            yield
        finally:
            self.release()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exception: object) -> None:
        self.release()

    def _stale(self, holder: dict[str, Any]) -> bool:
        pid, started = holder.get("pid"), holder.get("process_started")
        on_this_host = holder.get("host") == socket.gethostname()
        if not (on_this_host and isinstance(pid, int) and not isinstance(pid, bool)):
            return False
        return not _process_alive(pid, started if isinstance(started, (int, float)) else None)

    def _locked_error(self, holder: dict[str, Any]) -> RunDirectoryLocked:
        if not holder:
            who = "an unknown process (the lock file cannot be read)"
        else:
            who = describe_holder(holder)
        return RunDirectoryLocked(
            f"{self.directory} is in use by another run: {who}. Wait for it to end, or use "
            f"another directory; if that run is gone (e.g. on another host), remove {self.path}"
        )


def check_run_directory(directory: str | os.PathLike | None, check_lock: bool = True) -> None:
    """Raise a ValueError if ``directory`` cannot be a run directory (it is a file, or under
    one, or in a folder this process cannot write), and :class:`RunDirectoryLocked` if a live
    run holds it (with ``check_lock``). Writes nothing: the command line can call it before any
    work."""
    if directory is None:
        return
    path = Path(directory)
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(
                f"checkpoint_dir={str(directory)!r} is not accepted: {parent} is a file, not a "
                f"directory"
            )
        if parent.exists():
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ValueError(
                    f"checkpoint_dir={str(directory)!r} is not accepted: this process cannot "
                    f"write in {parent.resolve()}; choose a folder you can write"
                )
            break
    if check_lock:
        RunLock(path).check()
