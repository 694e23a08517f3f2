"""Benchmarks: our models against their ``torch.nn`` equivalents, side by side in one run.

    python benchmarks/run.py                 # the full suite on whatever device is present
    python benchmarks/run.py --quick         # a few minutes on a 2-core CPU (reduced sizes, labelled)
    python benchmarks/run.py --json PATH     # also write the results as JSON
    python benchmarks/run.py --profile --json results/profile-cpu.json   # torch.profiler tables,
                                             # ours beside nanoGPT's GPT, fp32 and bf16
    python benchmarks/run.py --table PATH    # a stored results document as a Markdown table
    python benchmarks/run.py --quick --store # store it (results/, history/) and compare with the last
    python benchmarks/run.py --nanogpt PATH  # nanoGPT's model.py (else AT_NANOGPT, else fetched)

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
from annotated_transformer.training.train import native_bf16  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    bench_beam,
    bench_compile,
    bench_cuda,
    bench_decoding,
    bench_training,
    bench_vocabulary,
    synchronize,
    training_setup,
)
from benchmarks.models import Size, load_nanogpt, make_plan  # noqa: E402
from benchmarks.report import format_table, markdown_table, regressions  # noqa: E402

ONLY = ("compile", "vocabulary")  # the rows --only runs by themselves
ONLY_BENCHES = {"compile": bench_compile, "vocabulary": bench_vocabulary}
ONLY_TITLES = {
    "compile": "torch.compile vs eager",
    "vocabulary": "word-level training by output layer",
}
RESULTS = REPOSITORY / "benchmarks" / "results"  # the latest document of each device and mode
HISTORY = RESULTS / "history"  # every stored document, for regressions


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):  # not on every platform
        return None


def run_suite(
    mode: str = "full",
    device: str | None = None,
    log=print,
    nanogpt: str | None = None,
    only: str | None = None,
) -> dict:
    """Run every benchmark of ``mode`` (full, quick, smoke) and return the results document.

    The decoder rows run against ``torch.nn`` and against nanoGPT's GPT (``nanogpt``: its
    model.py; see :func:`benchmarks.models.load_nanogpt`), in fp32 and, on a CPU with native
    bf16, under bf16 autocast too. ``only="compile"``: the ``torch.compile`` rows alone (on a CPU,
    :func:`benchmarks.measure.bench_compile`), in a document of the same form;
    ``only="vocabulary"``: the word-level recipe's update by its output layer alone
    (:func:`benchmarks.measure.bench_vocabulary`).
    """
    if only not in (None, *ONLY):
        raise ValueError(f"only={only!r} is not one of: {', '.join(ONLY)}")
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
    # On CUDA, bf16 is measured by bench_cuda's rows; on a CPU only where it is native.
    precisions = ["fp32", "bf16"] if not cuda and native_bf16(device) else ["fp32"]
    if not cuda and "bf16" not in precisions:
        skipped.append({"name": "bf16 training", "reason": "this CPU has no native bf16"})
    if only is not None:  # on CUDA in bf16, as bench_cuda's rows
        precision = "bf16" if cuda else precisions[-1]
        log(f"{ONLY_TITLES[only]} ({precision}):")
        results += ONLY_BENCHES[only](plan, device, log, precision)
        document = suite_document(mode, device, code, started, load_before, results, skipped, None)
        return {**document, "only": only}
    module, origin = load_nanogpt(nanogpt) if mode != "smoke" or nanogpt else (None, "")
    if module is None:
        reason = origin or "smoke mode: nanoGPT is not fetched (give --nanogpt PATH)"
        skipped.append({"name": "decoder-only training vs nanoGPT", "reason": reason})
        log(f"  skipped: decoder-only training vs nanoGPT ({reason})")
    for precision in precisions:
        log(f"training throughput ({precision}), decoder-only vs nn.TransformerEncoder:")
        for size in plan.decoder_sizes:
            results += bench_training(
                "decoder-only", ("ours-gpt", "reference-gpt"), size, plan, device, log, precision
            )
        if module is not None:
            log(f"training throughput ({precision}), decoder-only vs nanoGPT ({origin}):")
            for size in plan.decoder_sizes:
                results += bench_training(
                    "decoder-only",
                    ("ours-nanogpt", "nanogpt"),
                    size,
                    plan,
                    device,
                    log,
                    precision,
                    module,
                    versus="nanoGPT",
                )
        log(f"training throughput ({precision}), encoder-decoder vs nn.Transformer (post-norm):")
        results += bench_training(
            "encoder-decoder",
            ("ours-seq2seq", "reference-seq2seq"),
            plan.translation,
            plan,
            device,
            log,
            precision,
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
        for only in ONLY:
            log(f"{ONLY_TITLES[only]} ({precisions[-1]}):")
            results += ONLY_BENCHES[only](plan, device, log, precisions[-1])
        for name in (
            "bf16 autocast vs fp32",
            "SDPA vs explicit attention",
            "model FLOPs utilisation",
        ):
            skipped.append({"name": name, "reason": "CUDA only; no CUDA device present"})
            log(f"  skipped: {name} (CUDA only)")
    nanogpt_origin = origin if module is not None else None
    return suite_document(
        mode, device, code, started, load_before, results, skipped, nanogpt_origin
    )


def suite_document(
    mode: str,
    device: torch.device,
    code: dict,
    started: float,
    load_before: list[float] | None,
    results: list[dict],
    skipped: list[dict],
    nanogpt: str | None,
) -> dict:
    """The results document of a run that started at ``started`` (``time.perf_counter``) with the
    machine's load at ``load_before``, measuring ``code`` (``code_version``)."""
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
        "nanogpt": nanogpt,
        "results": results,
        "skipped": skipped,
    }


# The shapes the profile compares: nanoGPT's README CPU size at a longer context (4 x 128,
# context 128, batch 32) and its Shakespeare size (6 x 384, context 256) at batch 8.
PROFILE_SIZES = [
    Size("4x128", 65, 128, 4, 4, 512, 128, 32),
    Size("6x384", 65, 384, 6, 6, 1536, 256, 8),
]


def profile_step(
    kind: str,
    size: Size,
    device: torch.device,
    precision: str = "fp32",
    nanogpt=None,
    steps: int = 3,
    row_limit: int = 12,
) -> list[dict]:
    """torch.profiler's operators of ``steps`` training steps of ``kind`` (after two warm-up
    steps): name, self time per step in ms, calls per step; the top ``row_limit`` by self time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    step, *_ = training_setup(kind, size, device, precision=precision, nanogpt=nanogpt)
    for _ in range(2):
        step()
    synchronize(device)
    with torch_profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        synchronize(device)
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in events)
    rows = [
        {"op": event.key, "self_ms": event.self_cpu_time_total / 1e3 / steps,
         "calls": event.count // steps}
        for event in events[:row_limit]
    ]  # fmt: skip
    return [*rows, {"op": "total", "self_ms": total / 1e3 / steps, "calls": None}]


def profile(device: torch.device, nanogpt: str | None = None, log=print) -> dict:
    """Profiler tables of one training step, ours beside nanoGPT's GPT (or, without it, the
    torch.nn decoder), at :data:`PROFILE_SIZES`, in fp32 and (where native) bf16 autocast."""
    module, origin = load_nanogpt(nanogpt)
    pair = ("ours-nanogpt", "nanogpt") if module is not None else ("ours-gpt", "reference-gpt")
    if module is None:
        log(f"nanoGPT skipped ({origin}): profiling against the torch.nn decoder")
    precisions = ["fp32", "bf16"] if native_bf16(device) else ["fp32"]
    code = code_version()
    started = time.perf_counter()
    tables = []
    for size in PROFILE_SIZES:
        for precision in precisions:
            for kind in pair:
                table = profile_step(kind, size, device, precision, module)
                tables.append({"size": size.name, "precision": precision, "model": kind,
                               "ops": table})  # fmt: skip
                log(f"{kind} [{size.name}, {precision}]: {table[-1]['self_ms']:.1f} ms a step")
    origin_doc = provenance(0, time.perf_counter() - started, device, code)
    return {
        "device": origin_doc["device"], "torch": origin_doc["torch_version"],
        "git_commit": origin_doc["git_commit"], "uncommitted_changes": origin_doc["git_dirty"],
        "date": origin_doc["date"], "threads": torch.get_num_threads(),
        "reference": origin if module is not None else "torch.nn decoder",
        "sizes": [vars(size) for size in PROFILE_SIZES], "tables": tables,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true", help="reduced sizes: minutes on a CPU")
    modes.add_argument("--smoke", action="store_true", help="tiny sizes: seconds; checks the suite")
    parser.add_argument("--json", type=Path, help="write the results document here")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--profile", action="store_true", help="profile a training step instead")
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="only these rows (compile: torch.compile's; vocabulary: the word-level update by "
        "its output layer)",
    )
    parser.add_argument("--table", type=Path, help="print a stored JSON as Markdown, run nothing")
    parser.add_argument("--nanogpt", help="nanoGPT's model.py or checkout (else AT_NANOGPT, fetch)")
    parser.add_argument(
        "--store",
        action="store_true",
        help="write results/<device>-<mode>.json and a copy in results/history/, and compare "
        "with the last stored run of this device and mode",
    )
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(args.table.read_text())))
        return None
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        document = profile(device, args.nanogpt)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
            print(f"wrote {args.json}")
        return None
    if args.only and args.store:
        parser.error("--store keeps the whole suite's documents; with --only give --json PATH")
    mode = "quick" if args.quick else "smoke" if args.smoke else "full"
    document = run_suite(mode, args.device, nanogpt=args.nanogpt, only=args.only)
    print(format_table(document))
    paths = [args.json] if args.json else []
    if args.store:
        history = stored_history(document["device_type"], mode)
        for line in regressions(document, history):
            print(line)
        stamp = document["date"][:10] + "-" + (document["git_commit"] or "unknown")[:7]
        name = f"{document['device_type']}-{mode}"
        paths += [RESULTS / f"{name}.json", HISTORY / f"{name}-{stamp}.json"]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return document


def stored_history(device_type: str, mode: str) -> list[dict]:
    """The stored documents of ``device_type`` and ``mode`` in results/history/, oldest first."""
    documents = [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(HISTORY.glob(f"{device_type}-{mode}-*.json"))
    ]
    return sorted(documents, key=lambda document: document["date"])


if __name__ == "__main__":
    main()
