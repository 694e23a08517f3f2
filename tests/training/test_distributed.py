import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annotated_transformer.__main__ import main
from annotated_transformer.data.batch import Batch
from annotated_transformer.training.checkpoint import load_checkpoint
from annotated_transformer.training.distributed import Distributed, init_distributed, resolve_device

TORCHRUN = Path(sys.executable).parent / "torchrun"
REPOSITORY = Path(__file__).resolve().parents[2]


def numbered_batch(rows, with_src=True):
    column = torch.arange(rows)[:, None]  # [B, 1]: row i holds the number i
    return Batch(
        column.repeat(1, 3), column.repeat(1, 3), column.repeat(1, 2) if with_src else None
    )


@pytest.mark.parametrize("rows", [2, 5, 7, 8])
def test_shards_give_every_row_to_exactly_one_process(rows):
    batch = numbered_batch(rows)
    shards = [Distributed(rank, 3).shard(batch) for rank in range(3)]
    kept = [shard for shard, weight in shards if weight == 1.0]
    assert torch.cat([shard.inputs[:, 0] for shard in kept]).tolist() == list(range(rows))
    for shard, _ in shards:
        assert torch.equal(shard.inputs[:, 0], shard.src[:, 0])
        assert torch.equal(shard.inputs, shard.targets)


def test_a_process_without_rows_runs_a_stand_in_row_with_weight_zero():
    shard, weight = Distributed(rank=2, world_size=3).shard(numbered_batch(2, with_src=False))
    assert weight == 0.0
    assert shard.inputs.shape == (1, 3) and shard.src is None


def test_one_process_keeps_the_whole_batch_and_needs_no_process_group(monkeypatch):
    batch = numbered_batch(4)
    assert Distributed().shard(batch) == (batch, 1.0)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed() == Distributed()
    assert resolve_device("cpu") == torch.device("cpu")


COPY_SETTINGS = [
    "--set", "device=cpu",
    "--set", "max_steps=6",
    "--set", "warmup=1",
    "--set", "accumulation=2",
    "--set", "eval_every=3",
    "--set", "batch_size=7",  # odd: the two processes get 4 and 3 rows
    "--set", "eval_sequences=21",
    "--set", "length=6",
    "--set", "progress=false",
    # No biases: the key projection's bias has an exactly-zero gradient (softmax ignores a shift
    # shared by all keys), so Adam would turn round-off in it into full-size steps of random sign.
    "--set", "bias=false",
]  # fmt: skip


def test_torchrun_with_two_processes_trains_the_same_weights_as_one_process(tmp_path):
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "annotated_transformer",
        "train",
        "--task",
        "copy",
        "--out",
        str(tmp_path / "two"),
        *COPY_SETTINGS,
    ]
    finished = subprocess.run(
        command, cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.count('"stop_reason": "max_steps"') == 1  # only rank 0 reports

    capture = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", capture)
        assert (
            main(["train", "--task", "copy", "--out", str(tmp_path / "one"), *COPY_SETTINGS]) == 0
        )

    two = load_checkpoint(tmp_path / "two" / "last.pt")
    one = load_checkpoint(tmp_path / "one" / "last.pt")
    assert len(two["rng"]) == 2 and len(one["rng"]) == 1  # each process's random state
    assert two["step"] == one["step"] == 6
    # DDP averages gradients; each process's loss is scaled so that the average is the gradient
    # of the whole batch. Only the order of floating-point sums differs.
    for name, tensor in one["model"].items():
        torch.testing.assert_close(two["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    for single, double in zip(one["history"], two["history"], strict=True):
        assert double["train_loss"] == pytest.approx(single["train_loss"], rel=1e-5)
        if "eval_loss" in single:
            assert double["eval_loss"] == pytest.approx(single["eval_loss"], rel=1e-5)
            assert double["eval_tokens"] == single["eval_tokens"]


# ---------------------------------------------------------------------------------------------
# Apple silicon: auto picks CUDA, then MPS, then the CPU


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_auto_picks_cuda_then_mps_then_cpu(cuda, mps, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert resolve_device("auto").type == expected


def test_mps_is_accepted_where_it_exists_and_refused_with_the_choices_elsewhere(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device='mps' is not available: .*use device='cpu'"):
        resolve_device("mps")


def test_precision_auto_trains_in_fp32_on_mps(monkeypatch):
    from annotated_transformer.training.train import resolve_precision

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_precision(torch.device("mps"), "auto") == "fp32"


def test_the_command_line_accepts_device_mps(monkeypatch, capsys):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        main(["train", "--task", "copy", "--device", "mps", "--quiet"])
    err = capsys.readouterr().err
    assert "invalid choice" not in err and "device='mps' is not available" in err


@pytest.mark.parametrize(
    ("platform", "preset", "expected"),
    [("darwin", None, "1"), ("darwin", "0", "0"), ("linux", None, None), ("win32", None, None)],
)
def test_on_a_mac_ops_mps_lacks_fall_back_to_the_cpu_unless_the_reader_says_otherwise(
    platform, preset, expected
):
    from annotated_transformer.training.mps import MPS_FALLBACK, enable_mps_fallback

    environ = {} if preset is None else {MPS_FALLBACK: preset}
    enable_mps_fallback(platform, environ)
    assert environ.get(MPS_FALLBACK) == expected


def test_the_package_sets_the_mps_fallback_before_it_imports_torch():
    """torch reads the variable when it is imported: the package's first import is the one that
    sets it, and torch comes after it."""
    code = (
        "import sys\n"
        "order = []\n"
        "class Record:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        order.append(name)\n"
        "sys.meta_path.insert(0, Record())\n"
        "import annotated_transformer\n"
        "print(order.index('annotated_transformer.training.mps') < order.index('torch'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
