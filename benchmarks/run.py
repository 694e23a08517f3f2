"""Benchmarks: our models against their ``torch.nn`` equivalents, side by side in one run.

    python benchmarks/run.py                 # the full suite on whatever device is present
    python benchmarks/run.py --quick         # a few minutes on a 2-core CPU (reduced sizes, labelled)
    python benchmarks/run.py --json PATH     # also write the results as JSON
    python benchmarks/run.py --profile       # torch.profiler tables of one training step, both models
    python benchmarks/run.py --table PATH    # a stored results document as a Markdown table

Every row compares "ours" with a "reference" measured in the same process, alternating the two
within each repeat (after a warm-up) and reporting medians. ``ratio > 1`` means we are better:
``ours / reference`` for a rate (tokens/s), ``reference / ours`` for a cost (MiB).

This file is the command line and the order of the suite; ``models.py`` holds the sizes and the
models compared, ``measure.py`` how each row is measured, ``report.py`` the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:  # `python benchmarks/run.py` from a checkout
    sys.path.insert(0, str(REPOSITORY))

from annotated_transformer.training.provenance import code_version, device_name, provenance  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    bench_beam,
    bench_cuda,
    bench_decoding,
    bench_training,
    synchronize,
    training_setup,
)
from benchmarks.models import NANOGPT, SMALL, Size, make_plan  # noqa: E402
from benchmarks.report import format_table, markdown_table  # noqa: E402


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):  # not on every platform
        return None


def run_suite(mode: str = "full", device: str | None = None, log=print) -> dict:
    """Run every benchmark of ``mode`` (full, quick, smoke) and return the results document."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    plan = make_plan(mode, cuda)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log(f"{mode} suite on {device_name(device)} ({device}), torch {torch.__version__}")
    load_before = load_average()
    code = code_version()  # the code that runs, before anything can change it
    started = time.perf_counter()
    results: list[dict] = []
    skipped: list[dict] = []
    log("training throughput, decoder-only vs nn.TransformerEncoder (pre-norm, causal):")
    for size in plan.decoder_sizes:
        results += bench_training(
            "decoder-only", ("ours-gpt", "reference-gpt"), size, plan, device, log
        )
    log("training throughput, encoder-decoder vs nn.Transformer (post-norm):")
    results += bench_training(
        "encoder-decoder",
        ("ours-seq2seq", "reference-seq2seq"),
        plan.translation,
        plan,
        device,
        log,
    )
    if not plan.memory:
        skipped.append({"name": "peak memory", "reason": f"not measured in {mode} mode"})
    log("decoding:")
    results += bench_decoding(plan, device, log)
    results += bench_beam(plan, device, log)
    if cuda:
        log("CUDA: precision, compilation, attention kernel, MFU:")
        results += bench_cuda(plan, device, log)
    else:
        for name in (
            "bf16 autocast vs fp32",
            "torch.compile vs eager",
            "SDPA vs explicit attention",
            "model FLOPs utilisation",
        ):
            skipped.append({"name": name, "reason": "CUDA only; no CUDA device present"})
            log(f"  skipped: {name} (CUDA only)")
    # The results store's provenance, under this document's own (stored, documented) keys.
    origin = provenance(0, time.perf_counter() - started, device, code)
    return {
        "device": origin["device"],
        "device_type": device.type,
        "torch": origin["torch_version"],
        "mode": mode,
        "git_commit": origin["git_commit"],
        "uncommitted_changes": origin["git_dirty"],  # True: the code measured is not git_commit
        "date": origin["date"],
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "seconds": round(origin["wall_time_s"], 1),
        # Other work on the machine slows both sides of a row alike (they alternate), but it
        # lowers the absolute numbers and adds noise: the 1, 5, 15-minute load averages.
        "load_average": {"before": load_before, "after": load_average()},
        "python": origin["python_version"],
        "results": results,
        "skipped": skipped,
    }


def profile(size: Size, device: torch.device, row_limit: int = 15) -> None:
    """Print torch.profiler's top operators of a few training steps of ours and the reference."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    for kind in ("ours-gpt", "reference-gpt"):
        step, *_ = training_setup(kind, size, device)
        for _ in range(2):
            step()
        synchronize(device)
        with torch_profile(activities=activities) as profiler:
            for _ in range(3):
                step()
            synchronize(device)
        print(f"\n=== {kind} [{size.name}] ===")
        print(profiler.key_averages().table(sort_by=sort, row_limit=row_limit))


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true", help="reduced sizes: minutes on a CPU")
    modes.add_argument("--smoke", action="store_true", help="tiny sizes: seconds; checks the suite")
    parser.add_argument("--json", type=Path, help="write the results document here")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--profile", action="store_true", help="profile a training step instead")
    parser.add_argument("--table", type=Path, help="print a stored JSON as Markdown, run nothing")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(args.table.read_text())))
        return None
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        profile(SMALL if device.type == "cpu" else NANOGPT, device)
        return None
    mode = "quick" if args.quick else "smoke" if args.smoke else "full"
    document = run_suite(mode, args.device)
    print(format_table(document))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return document


if __name__ == "__main__":
    main()
