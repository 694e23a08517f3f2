"""One run per run directory: a live holder is refused by name, a dead one is taken over."""

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest
import torch
from conftest import tiny_model
from test_train import RandomSource, quiet_config

from annotated_transformer.training.run_lock import LOCK_NAME, RunDirectoryLocked, RunLock
from annotated_transformer.training.train import TrainingDiverged
from annotated_transformer.training.trainer import Trainer


def write_lock(directory, pid, host=None):
    directory.mkdir(parents=True, exist_ok=True)
    holder = {
        "pid": pid,
        "host": host or socket.gethostname(),
        "started": "2024-05-01T10:00:00+00:00",
    }
    (directory / LOCK_NAME).write_text(json.dumps(holder))


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_directory_held_by_a_live_process_is_refused_naming_it(tmp_path):
    write_lock(tmp_path, os.getppid())
    expected = (
        f"{tmp_path} is in use by another run: pid {os.getppid()} on host "
        f"'{socket.gethostname()}', started 2024-05-01T10:00:00\\+00:00"
    )
    with pytest.raises(RunDirectoryLocked, match=expected):
        Trainer(tiny_model(), quiet_config(checkpoint_dir=tmp_path), RandomSource())
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getppid()  # untouched


def test_a_lock_from_another_host_is_refused_with_the_file_to_remove(tmp_path):
    write_lock(tmp_path, dead_pid(), host="elsewhere.example")
    with pytest.raises(
        RunDirectoryLocked, match=f"on host 'elsewhere.example'.*remove {tmp_path / LOCK_NAME}"
    ):
        RunLock(tmp_path).acquire()


def test_a_stale_lock_is_taken_over_with_a_warning_and_released_after_the_run(tmp_path):
    pid = dead_pid()
    write_lock(tmp_path, pid)
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=2, checkpoint_dir=tmp_path), RandomSource()
    )
    holders = []
    trainer.add_callback(
        "on_update", lambda trainer: holders.append(RunLock(tmp_path).holder()["pid"])
    )
    with pytest.warns(UserWarning, match=f"taking over the stale lock .* \\(pid {pid} on host"):
        trainer.fit()
    assert holders == [os.getpid(), os.getpid()]  # held by this process while it trained
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_second_trainer_is_refused_while_the_first_one_trains(tmp_path):
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=2, checkpoint_dir=tmp_path), RandomSource()
    )
    refusals = []

    def start_another(trainer):
        with pytest.raises(RunDirectoryLocked, match=f"pid {os.getpid()} on host") as error:
            Trainer(tiny_model(), quiet_config(checkpoint_dir=tmp_path), RandomSource())
        refusals.append(error.value)

    trainer.add_callback("on_update", start_another)
    trainer.fit()
    assert len(refusals) == 2
    # Once the first run has finished, the directory is free again.
    Trainer(tiny_model(), quiet_config(max_steps=3, checkpoint_dir=tmp_path), RandomSource()).fit()


def test_the_lock_is_released_when_the_run_raises(tmp_path):
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=4, checkpoint_dir=tmp_path), RandomSource()
    )
    parameter = next(trainer.model.parameters())

    def poison(trainer):
        assert (tmp_path / LOCK_NAME).exists()
        parameter.data.fill_(torch.nan)

    trainer.add_callback("on_update", poison)
    with pytest.raises(TrainingDiverged):
        trainer.fit()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_held_by_another_live_process_is_refused(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from annotated_transformer.training.run_lock import RunLock;"
            f"lock = RunLock({str(tmp_path)!r}); lock.acquire(); print('held', flush=True);"
            "sys.stdin.read(); lock.release()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirectoryLocked, match=f"pid {holder.pid} on host"):
            RunLock(tmp_path).acquire()
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    assert not (tmp_path / LOCK_NAME).exists()  # released by its holder
    with RunLock(tmp_path):
        assert RunLock(tmp_path).holder()["pid"] == os.getpid()


def test_release_never_removes_another_holders_lock(tmp_path):
    lock = RunLock(tmp_path)
    lock.acquire()
    write_lock(tmp_path, os.getppid())  # replaced behind its back
    lock.release()
    assert (tmp_path / LOCK_NAME).exists()


# ---------------------------------------------------------------------------------------------
# Every OS: the holder's liveness through psutil, never a signal


@pytest.fixture
def no_signals(monkeypatch):
    """``os.kill(pid, 0)`` on Windows sends CTRL_C_EVENT: the lock must never call it. psutil
    answers from the process table there; so does this stand-in (psutil itself uses signal 0 on
    POSIX, where it is harmless)."""

    def refuse(*arguments):
        raise AssertionError(f"os.kill{arguments} called: on Windows signal 0 is CTRL_C_EVENT")

    monkeypatch.setattr(psutil, "pid_exists", lambda pid: pid in psutil.pids())
    monkeypatch.setattr(os, "kill", refuse)


def test_a_live_holder_is_refused_and_a_dead_one_taken_over_without_a_signal(no_signals, tmp_path):
    write_lock(tmp_path / "live", os.getppid())
    with pytest.raises(RunDirectoryLocked, match=f"pid {os.getppid()} on host"):
        RunLock(tmp_path / "live").acquire()
    pid = dead_pid()
    write_lock(tmp_path / "dead", pid)
    with pytest.warns(UserWarning, match=f"stale lock .* \\(pid {pid} on host"):
        with RunLock(tmp_path / "dead") as lock:
            assert lock.holder()["pid"] == os.getpid()
    assert not (tmp_path / "dead" / LOCK_NAME).exists()


def test_a_process_id_reused_by_another_process_is_a_stale_lock(tmp_path):
    # The holder's pid is alive, but it is not the process that took the lock: it started later.
    write_lock(tmp_path, os.getppid())
    holder = json.loads((tmp_path / LOCK_NAME).read_text(encoding="utf-8"))
    holder["process_started"] = psutil.Process(os.getppid()).create_time() - 3600
    (tmp_path / LOCK_NAME).write_text(json.dumps(holder), encoding="utf-8")
    with pytest.warns(UserWarning, match="taking over the stale lock"):
        RunLock(tmp_path).acquire()


def test_a_lock_records_when_its_process_started(tmp_path):
    with RunLock(tmp_path) as lock:
        holder = lock.holder()
    assert holder["process_started"] == pytest.approx(psutil.Process().create_time())


def test_the_lock_is_taken_under_filelocks_os_lock(tmp_path):
    # While another process holds the guard (checking or taking run.lock), a run waits for it;
    # one that cannot get it in time is refused, not let in.
    from filelock import FileLock

    from annotated_transformer.training import run_lock

    with FileLock(run_lock.guard_path(tmp_path)):
        guard_is_held = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from annotated_transformer.training import run_lock;"
                "run_lock.GUARD_TIMEOUT = 0.2;"
                f"lock = run_lock.RunLock({str(tmp_path)!r})\n"
                "try: lock.acquire()\n"
                "except run_lock.RunDirectoryLocked: sys.exit(3)",
            ],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert guard_is_held.returncode == 3
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path):  # free again
        pass
