"""End to end: nanoGPT's README CPU recipe against our command line with the same recipe.

nanoGPT's README trains a small character model of Tiny Shakespeare on a CPU with

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False \\
        --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 \\
        --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

and reports a validation loss of about 1.88. This script trains that recipe both ways on this
machine, one after the other, and reports the training time each needs to reach a validation loss
of ``--target`` (1.89), measured from the first evaluation (after start-up and data preparation)
to the first evaluation at or below the target:

- **nanoGPT**: its own ``train.py`` when a checkout is given (``--nanogpt-repo PATH`` or
  ``AT_NANOGPT_REPO``; the checkout's ``data/shakespeare_char/prepare.py`` is run on the course's
  copy of ``input.txt``). Without a checkout, its ``model.py`` (``--nanogpt``, ``AT_NANOGPT`` or
  fetched, as in the benchmark suite) trained by :func:`nanogpt_loop`, which restates what its
  ``train.py`` does for this recipe (random windows of the 90 % / 10 % split, AdamW with its
  decay groups and betas (0.9, 0.99), linear warm-up over 100 updates then cosine to 1e-4,
  clipping at 1.0, fp32 on a CPU, an estimate of both losses over 20 batches every 250 updates);
- **ours**: ``python -m annotated_transformer train --task tinyshakespeare`` with the same
  model (learned positions, pre-norm, GELU, biases, tied embeddings), batches, schedule and
  evaluation, in bf16 autocast where the CPU has it (``--precision auto``).

    python benchmarks/nanogpt_recipe.py --json benchmarks/results/nanogpt-recipe-cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:  # `python benchmarks/nanogpt_recipe.py` from a checkout
    sys.path.insert(0, str(REPOSITORY))

from annotated_transformer.data import fetch  # noqa: E402
from annotated_transformer.training.provenance import code_version, provenance  # noqa: E402
from annotated_transformer.training.train import resolve_precision  # noqa: E402
from benchmarks.models import load_nanogpt  # noqa: E402

# The README's command line, on top of config/train_shakespeare_char.py.
RECIPE = {
    "block_size": 64, "batch_size": 12, "n_layer": 4, "n_head": 4, "n_embd": 128,
    "dropout": 0.0, "bias": False, "max_iters": 2000, "lr_decay_iters": 2000,
    "learning_rate": 1e-3, "min_lr": 1e-4, "warmup_iters": 100, "beta1": 0.9, "beta2": 0.99,
    "weight_decay": 0.1, "grad_clip": 1.0, "eval_interval": 250, "eval_iters": 20,
}  # fmt: skip
README_ARGS = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
    "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
    "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
EVAL_LINE = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def time_to_target(
    evaluations: list[tuple[int, float, float]], target: float, start: float | None = None
) -> dict:
    """``evaluations``: (step, seconds, validation loss) in order. The seconds from ``start``
    (default: the first evaluation) to the first at or below ``target`` (None: never)."""
    start = evaluations[0][1] if start is None else start
    hit = next(((step, t, loss) for step, t, loss in evaluations if loss <= target), None)
    return {
        "evaluations": [
            {"step": s, "seconds": round(t - start, 2), "val_loss": v} for s, t, v in evaluations
        ],  # fmt: skip
        "reached_at_step": hit[0] if hit else None,
        "seconds_to_target": round(hit[1] - start, 2) if hit else None,
        "final_val_loss": evaluations[-1][2],
    }


def shakespeare_text() -> str:
    return Path(fetch("tinyshakespeare/input.txt")).read_text(encoding="utf-8")


def nanogpt_loop(module, seed: int = 1337) -> list[tuple[int, float, float]]:
    """nanoGPT's train.py for the README recipe, restated over its model.py (see the docstring);
    returns (step, seconds, validation loss) at every evaluation."""
    text = shakespeare_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], dtype=np.int64)
    split = int(0.9 * len(data))
    train, val = torch.from_numpy(data[:split]), torch.from_numpy(data[split:])
    r = RECIPE
    torch.manual_seed(seed)
    config = module.GPTConfig(
        block_size=r["block_size"], vocab_size=len(chars), n_layer=r["n_layer"],
        n_head=r["n_head"], n_embd=r["n_embd"], dropout=r["dropout"], bias=r["bias"],
    )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        model = module.GPT(config)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=r["learning_rate"], betas=(r["beta1"], r["beta2"]),
    )  # fmt: skip

    def batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(source) - r["block_size"], (r["batch_size"],))
        x = torch.stack([source[i : i + r["block_size"]] for i in starts])
        y = torch.stack([source[i + 1 : i + 1 + r["block_size"]] for i in starts])
        return x, y

    def learning_rate(it: int) -> float:
        if it < r["warmup_iters"]:
            return r["learning_rate"] * (it + 1) / (r["warmup_iters"] + 1)
        ratio = (it - r["warmup_iters"]) / (r["lr_decay_iters"] - r["warmup_iters"])
        coefficient = 0.5 * (1.0 + math.cos(math.pi * ratio))
        return r["min_lr"] + coefficient * (r["learning_rate"] - r["min_lr"])

    @torch.no_grad()
    def estimate(source: torch.Tensor) -> float:
        model.eval()
        losses = [float(model(*batch(source))[1]) for _ in range(r["eval_iters"])]
        model.train()
        return sum(losses) / len(losses)

    evaluations = []
    x, y = batch(train)
    for it in range(r["max_iters"] + 1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(it)
        if it % r["eval_interval"] == 0:
            estimate(train)  # train.py estimates both splits
            evaluations.append((it, time.perf_counter(), estimate(val)))
        _, loss = model(x, y)
        x, y = batch(train)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return evaluations


def nanogpt_train_py(checkout: Path) -> list[tuple[int, float, float]]:
    """nanoGPT's own train.py with the README recipe, in a copy of ``checkout``."""
    work = Path(tempfile.mkdtemp(prefix="nanogpt-run-"))
    subprocess.run(["cp", "-r", f"{checkout}/.", str(work)], check=True)
    data = work / "data" / "shakespeare_char"
    (data / "input.txt").write_text(shakespeare_text(), encoding="utf-8")  # no download
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    command = [sys.executable, "-u", "train.py", *README_ARGS, f"--out_dir={work / 'out'}"]
    evaluations = []
    with subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            match = EVAL_LINE.search(line)
            if match:
                evaluations.append((int(match[1]), time.perf_counter(), float(match[3])))
    if process.returncode:
        raise RuntimeError(f"nanoGPT's train.py exited with {process.returncode}")
    return evaluations


def ours(precision: str) -> list[tuple[int, float, float]]:
    """Our command line with the recipe; (step, seconds, validation loss) from its history."""
    r = RECIPE
    settings = {
        "model": {
            "d_model": r["n_embd"], "n_heads": r["n_head"], "n_layers": r["n_layer"],
            "d_ff": 4 * r["n_embd"], "dropout": r["dropout"], "max_len": r["block_size"],
            "positional": "learned", "norm_position": "pre", "activation": "gelu",
            "tie_embeddings": True, "init": "normal", "scale_embeddings": False,
            "bias": r["bias"],
        },
        "data": {"context_length": r["block_size"], "batch_size": r["batch_size"],
                 "eval_batch_size": r["batch_size"]},
        "train": {
            "max_steps": r["max_iters"], "lr": r["learning_rate"], "min_lr": r["min_lr"],
            "warmup": r["warmup_iters"], "schedule": "warmup_cosine",
            "weight_decay": r["weight_decay"], "betas": [r["beta1"], r["beta2"]],
            "grad_clip": r["grad_clip"], "eval_every": r["eval_interval"],
            "eval_batches": r["eval_iters"], "precision": precision, "device": "cpu",
        },
    }  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="ours-run-"))
    config = work / "recipe.json"
    config.write_text(json.dumps(settings), encoding="utf-8")
    command = [sys.executable, "-m", "annotated_transformer", "train", "--task",
               "tinyshakespeare", "--config", str(config), "--out", str(work / "run"), "--quiet"]  # fmt: skip
    subprocess.run(command, check=True, cwd=REPOSITORY)
    history = json.loads((work / "run" / "history.json").read_text(encoding="utf-8"))
    rows = [row for row in history if row.get("eval_loss") is not None]
    # Wall times count from the start of training (the first evaluation is at eval_every).
    return [(row["step"], row["wall_time"], row["eval_loss"]) for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt-repo", default=os.environ.get("AT_NANOGPT_REPO"))
    parser.add_argument("--nanogpt", help="nanoGPT's model.py (else AT_NANOGPT, else fetched)")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--target", type=float, default=1.89)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    code = code_version()
    torch.set_num_threads(os.cpu_count() or 1)
    started = time.perf_counter()
    if args.nanogpt_repo:
        runner, evaluations = "train.py", nanogpt_train_py(Path(args.nanogpt_repo))
        origin = args.nanogpt_repo
    else:
        module, origin = load_nanogpt(args.nanogpt)
        if module is None:
            print(f"skipped: {origin}; give --nanogpt-repo or --nanogpt", file=sys.stderr)
            return 2
        runner, evaluations = "train.py restated (nanogpt_loop)", nanogpt_loop(module)
    reference = time_to_target(evaluations, args.target)
    print(f"nanoGPT ({runner}, fp32): {reference}")
    precision = resolve_precision("cpu", args.precision)
    mine = time_to_target(ours(precision), args.target, start=0.0)
    print(f"ours ({precision}): {mine}")
    ratio = (
        reference["seconds_to_target"] / mine["seconds_to_target"]
        if reference["seconds_to_target"] and mine["seconds_to_target"]
        else None
    )
    print(f"ours reaches val loss <= {args.target} {ratio:.2f}x sooner" if ratio else "no ratio")
    document = {
        "recipe": RECIPE,
        "target_val_loss": args.target,
        "nanogpt": {"runner": runner, "source": origin, "precision": "fp32", **reference},
        "ours": {"precision": precision, **mine},
        "ratio": ratio,
        **provenance(1337, time.perf_counter() - started, "cpu", code),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
