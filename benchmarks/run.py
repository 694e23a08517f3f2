"""Benchmarks: our models against their ``torch.nn`` equivalents, side by side in one run.

    python benchmarks/run.py                 # the full suite on whatever device is present
    python benchmarks/run.py --quick         # a few minutes on a 2-core CPU (reduced sizes, labelled)
    python benchmarks/run.py --json PATH     # also write the results as JSON
    python benchmarks/run.py --profile       # torch.profiler tables of one training step, both models
    python benchmarks/run.py --table PATH    # a stored results document as a Markdown table

Every row compares "ours" with a "reference" measured in the same process, alternating the two
within each repeat (after a warm-up) and reporting medians. ``ratio > 1`` means we are better:
``ours / reference`` for a rate (tokens/s), ``reference / ours`` for a cost (MiB).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:  # `python benchmarks/run.py` from a checkout
    sys.path.insert(0, str(REPOSITORY))

import annotated_transformer as at  # noqa: E402
from annotated_transformer.cost import training_flops_per_token  # noqa: E402

LOWER_IS_BETTER = {"MiB", "ms"}  # units whose ratio is reference / ours

# Dense bf16 peak of the accelerators we know, for model FLOPs utilisation (vendor data sheets).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


@dataclass
class Size:
    """One model-and-batch shape; ``note`` labels a reduced variant."""

    name: str
    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    context: int
    batch: int
    note: str = ""


# nanoGPT's Shakespeare (character) configuration: train_shakespeare_char.py.
NANOGPT = Size("nanogpt-shakespeare", 65, 384, 6, 6, 1536, 256, 64)
SMALL = Size("small-cpu", 65, 128, 4, 4, 512, 64, 16)
# The Annotated Transformer's Multi30k model (base sizes); context = source and target length.
MULTI30K = Size("multi30k", 8000, 512, 8, 6, 2048, 32, 32)


@dataclass
class Plan:
    """How much to run: the sizes and the repeat counts of one mode."""

    mode: str
    decoder_sizes: list[Size]
    translation: Size
    warmup: int
    repeats: int
    steps: int  # training steps per timed block
    decode_tokens: list[int]
    decode_size: Size
    beam_sentences: int
    beam_new_tokens: int
    memory: bool


def make_plan(mode: str, cuda: bool) -> Plan:
    if mode == "full":
        return Plan(
            "full",
            [SMALL, NANOGPT],
            MULTI30K,
            warmup=3,
            repeats=7,
            steps=5 if cuda else 2,
            decode_tokens=[256, 512],
            decode_size=NANOGPT if cuda else SMALL,
            beam_sentences=32,
            beam_new_tokens=40,
            memory=True,
        )
    if mode == "quick":
        nanogpt = NANOGPT if cuda else replace(NANOGPT, batch=2, note="quick: batch 64 -> 2")
        multi30k = (
            MULTI30K
            if cuda
            else replace(MULTI30K, n_layers=2, batch=8, note="quick: 2+2 layers, batch 8")
        )
        return Plan(
            "quick",
            [SMALL, nanogpt],
            multi30k,
            warmup=1,
            repeats=3,
            steps=2,
            decode_tokens=[256, 512],
            decode_size=SMALL,
            beam_sentences=8,
            beam_new_tokens=30,
            memory=True,
        )
    if mode == "smoke":  # seconds: for the test of the suite itself, not for numbers
        tiny = Size("tiny", 17, 16, 2, 1, 32, 8, 2, note="smoke")
        return Plan(
            "smoke",
            [tiny],
            replace(tiny, name="tiny-translation"),
            warmup=0,
            repeats=1,
            steps=1,
            decode_tokens=[8],
            decode_size=tiny,
            beam_sentences=2,
            beam_new_tokens=4,
            memory=True,
        )
    raise ValueError(f"mode={mode!r} is not one of: full, quick, smoke")


# --- the models, ours and the reference -------------------------------------------------------


def our_decoder_only(size: Size, max_len: int | None = None) -> nn.Module:
    return at.build_model(decoder_only_config(size, max_len))


def decoder_only_config(size: Size, max_len: int | None = None) -> at.TransformerConfig:
    return at.TransformerConfig(
        arch="decoder-only",
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        n_heads=size.n_heads,
        n_layers=size.n_layers,
        d_ff=size.d_ff,
        dropout=0.0,
        max_len=max_len or size.context,
        positional="learned",
        norm_position="pre",
        pad_id=None,
        scale_embeddings=False,  # the reference does not scale; a multiply is not free
    )


class ReferenceDecoderOnly(nn.Module):
    """GPT from ``torch.nn`` parts: embeddings + learned positions, pre-norm
    ``nn.TransformerEncoderLayer`` stack with a causal mask, final LayerNorm, linear head."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        self.embedding = nn.Embedding(size.vocab_size, size.d_model)
        self.positions = nn.Embedding(size.context, size.d_model)
        layer = nn.TransformerEncoderLayer(
            size.d_model, size.n_heads, size.d_ff, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(
            layer, size.n_layers, norm=nn.LayerNorm(size.d_model), enable_nested_tensor=False
        )
        self.head = nn.Linear(size.d_model, size.vocab_size, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        length = tokens.size(1)
        positions = torch.arange(length, device=tokens.device)  # [T]
        x = self.embedding(tokens) + self.positions(positions)  # [B, T, d_model]
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        x = self.layers(x, mask=mask, is_causal=True)  # [B, T, d_model]
        return self.head(x)  # [B, T, V]


def our_encoder_decoder(size: Size) -> nn.Module:
    config = at.TransformerConfig(
        arch="encoder-decoder",
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        n_heads=size.n_heads,
        n_layers=size.n_layers,
        d_ff=size.d_ff,
        dropout=0.0,
        max_len=max(size.context, 64),
        positional="learned",
        norm_position="post",
        final_norm=True,  # nn.Transformer ends each stack with a LayerNorm
        pad_id=None,
        scale_embeddings=False,
    )
    return at.build_model(config)


class ReferenceEncoderDecoder(nn.Module):
    """``nn.Transformer`` (post-norm, a LayerNorm after each stack) with our embeddings' shapes."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        max_len = max(size.context, 64)
        self.src_embedding = nn.Embedding(size.vocab_size, size.d_model)
        self.tgt_embedding = nn.Embedding(size.vocab_size, size.d_model)
        self.src_positions = nn.Embedding(max_len, size.d_model)
        self.tgt_positions = nn.Embedding(max_len, size.d_model)
        self.transformer = nn.Transformer(
            size.d_model,
            size.n_heads,
            size.n_layers,
            size.n_layers,
            size.d_ff,
            dropout=0.0,
            batch_first=True,
        )
        self.head = nn.Linear(size.d_model, size.vocab_size, bias=False)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_positions = torch.arange(src.size(1), device=src.device)  # [S]
        tgt_positions = torch.arange(tgt.size(1), device=tgt.device)  # [T]
        source = self.src_embedding(src) + self.src_positions(src_positions)  # [B, S, d_model]
        target = self.tgt_embedding(tgt) + self.tgt_positions(tgt_positions)  # [B, T, d_model]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        x = self.transformer(source, target, tgt_mask=mask, tgt_is_causal=True)
        return self.head(x)  # [B, T, V]


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


# --- measuring --------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(model: nn.Module, inputs: tuple[Tensor, ...], targets: Tensor, optimizer):
    """One forward + backward + AdamW step; returns a callable with no host sync inside."""

    def step() -> None:
        logits = model(*inputs)  # [B, T, V]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def time_alternating(
    runs: dict[str, Callable[[], None]], warmup: int, repeats: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of each run, alternating them (order flipped every repeat)."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    synchronize(device)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            synchronize(device)
            start = time.perf_counter()
            runs[name]()
            synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def row(name: str, ours: float, reference: float, unit: str, note: str = "") -> dict:
    ratio = reference / ours if unit in LOWER_IS_BETTER else ours / reference
    result = {"name": name, "ours": ours, "reference": reference, "unit": unit, "ratio": ratio}
    if note:
        result["note"] = note
    return result


def training_setup(kind: str, size: Size, device: torch.device, seed: int = 0):
    """(step callable, model, inputs, targets) for ``kind`` in ours-gpt, reference-gpt, ours-seq2seq,
    reference-seq2seq."""
    torch.manual_seed(seed)
    builders = {
        "ours-gpt": our_decoder_only,
        "reference-gpt": ReferenceDecoderOnly,
        "ours-seq2seq": our_encoder_decoder,
        "reference-seq2seq": ReferenceEncoderDecoder,
    }
    model = builders[kind](size).to(device).train()
    generator = torch.Generator().manual_seed(seed)
    shape = (size.batch, size.context)
    tokens = torch.randint(size.vocab_size, shape, generator=generator).to(device)
    targets = torch.randint(size.vocab_size, shape, generator=generator).to(device)
    if kind.endswith("seq2seq"):
        src = torch.randint(size.vocab_size, shape, generator=generator).to(device)
        inputs = (src, tokens)
    else:
        inputs = (tokens,)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return training_step(model, inputs, targets, optimizer), model, inputs, targets


def steps(step: Callable[[], None], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            step()

    return run


def bench_training(
    label: str, pair: tuple[str, str], size: Size, plan: Plan, device: torch.device, log
) -> list[dict]:
    ours_step, ours_model, *_ = training_setup(pair[0], size, device)
    reference_step, reference_model, *_ = training_setup(pair[1], size, device)
    ours_parameters, reference_parameters = (
        count_parameters(ours_model),
        count_parameters(reference_model),
    )
    log(
        f"  {label} [{size.name}] parameters: ours {ours_parameters:,}, "
        f"reference {reference_parameters:,}" + (f" ({size.note})" if size.note else "")
    )
    if ours_parameters != reference_parameters:
        raise RuntimeError(f"{label}: parameter counts differ, the comparison would not be fair")
    seconds = time_alternating(
        {"ours": steps(ours_step, plan.steps), "reference": steps(reference_step, plan.steps)},
        plan.warmup,
        plan.repeats,
        device,
    )
    tokens = size.batch * size.context * plan.steps
    note = size.note
    rows = [
        row(
            f"{label} training [{size.name}]",
            tokens / seconds["ours"],
            tokens / seconds["reference"],
            "tokens/s",
            note,
        )
    ]
    log(f"    {rows[-1]['ours']:,.0f} vs {rows[-1]['reference']:,.0f} tokens/s")
    del ours_step, ours_model, reference_step, reference_model
    if plan.memory:
        ours_memory = peak_memory(pair[0], size, device)
        reference_memory = peak_memory(pair[1], size, device)
        how = (
            "torch.cuda.max_memory_allocated rise in a step"
            if device.type == "cuda"
            else "CPU: activations saved for backward"
        )
        rows.append(
            row(
                f"{label} training peak memory [{size.name}]",
                ours_memory,
                reference_memory,
                "MiB",
                f"{how}; {note}".rstrip("; "),
            )
        )
        log(f"    {ours_memory:,.1f} vs {reference_memory:,.1f} MiB")
    return rows


def peak_memory(kind: str, size: Size, device: torch.device) -> float:
    """MiB a training step needs beyond the parameters, gradients and optimizer state.

    CUDA: the rise of ``torch.cuda.max_memory_allocated`` in a step. CPU has no allocator
    statistics (and the maxrss of a process that imported torch hides a small step's peak), so
    there we count the activations autograd saves for the backward pass, each storage once and the
    parameters excluded: the part of a step's memory that differs between two models with the
    same parameters.
    """
    step, model, inputs, targets = training_setup(kind, size, device)
    if device.type == "cuda":
        step()  # the optimizer state exists from the first step on
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    parameters = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(*inputs)  # [B, T, V]
        F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return sum(saved.values()) / 2**20


def bench_decoding(plan: Plan, device: torch.device, log) -> list[dict]:
    size = plan.decode_size
    prompt_len = 16
    torch.manual_seed(0)
    model = our_decoder_only(size, max_len=prompt_len + max(plan.decode_tokens)).to(device).eval()
    prompt = torch.randint(size.vocab_size, (1, prompt_len)).to(device)
    rows = []
    for new_tokens in plan.decode_tokens:

        def decode(use_cache: bool, new_tokens: int = new_tokens) -> Callable[[], None]:
            return lambda: at.greedy_decode(
                model, prompt=prompt, max_new_tokens=new_tokens, use_cache=use_cache
            )

        seconds = time_alternating(
            {"cached": decode(True), "uncached": decode(False)},
            min(plan.warmup, 1),
            plan.repeats,
            device,
        )
        rows.append(
            row(
                f"greedy decoding, {new_tokens} new tokens, KV cache vs recompute [{size.name}]",
                new_tokens / seconds["cached"],
                new_tokens / seconds["uncached"],
                "tokens/s",
                "reference = our own greedy_decode(use_cache=False); batch 1, prompt 16",
            )
        )
        log(f"  greedy {new_tokens}: {rows[-1]['ours']:,.0f} vs {rows[-1]['reference']:,.0f} tok/s")
    return rows


def bench_beam(plan: Plan, device: torch.device, log) -> list[dict]:
    size = plan.translation
    torch.manual_seed(0)
    model = our_encoder_decoder(replace(size, context=max(size.context, plan.beam_new_tokens + 1)))
    model = model.to(device).eval()
    # Multi30k-length inputs: English sentences average about 13 words; 20 subword tokens.
    src = torch.randint(4, size.vocab_size, (plan.beam_sentences, 20)).to(device)

    def search(use_cache: bool) -> Callable[[], None]:
        return lambda: at.beam_search(
            model,
            src=src,
            beam_size=5,
            max_new_tokens=plan.beam_new_tokens,
            bos_id=1,
            eos_id=2,
            use_cache=use_cache,
        )

    seconds = time_alternating(
        {"cached": search(True), "uncached": search(False)},
        min(plan.warmup, 1),
        plan.repeats,
        device,
    )
    result = row(
        f"beam search (beam 5), KV cache vs recompute [{size.name}]",
        plan.beam_sentences / seconds["cached"],
        plan.beam_sentences / seconds["uncached"],
        "sentences/s",
        f"reference = our beam_search(use_cache=False); {plan.beam_sentences} inputs of 20 "
        f"tokens, up to {plan.beam_new_tokens} new; untrained weights. {size.note}".strip(),
    )
    log(f"  beam: {result['ours']:,.1f} vs {result['reference']:,.1f} sentences/s")
    return [result]


# --- CUDA-only rows ---------------------------------------------------------------------------


def set_sdpa(model: nn.Module, enabled: bool) -> None:
    for module in model.modules():
        if isinstance(module, at.attention.MultiHeadAttention):
            module.use_sdpa = enabled


def flops_per_token(size: Size) -> float:
    """Training FLOPs per token: 6·N (matmul weights) + 12·L·T·d (attention), as nanoGPT;
    the closed form lives in ``annotated_transformer.cost``."""
    return training_flops_per_token(decoder_only_config(size), size.context)


def bench_cuda(plan: Plan, device: torch.device, log) -> list[dict]:
    size = plan.decoder_sizes[-1]
    variants: dict[str, Callable[[], None]] = {}
    models = {}
    for name, dtype, compiled, sdpa in [
        ("fp32", None, False, True),
        ("bf16", torch.bfloat16, False, True),
        ("bf16-compiled", torch.bfloat16, True, True),
        ("bf16-explicit-attention", torch.bfloat16, False, False),
    ]:
        step, model, *_ = training_setup("ours-gpt", size, device)
        set_sdpa(model, sdpa)
        models[name] = model
        if compiled:
            compiled_model = torch.compile(model)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            tokens = torch.randint(size.vocab_size, (size.batch, size.context), device=device)
            step = training_step(compiled_model, (tokens,), tokens, optimizer)
        if dtype is not None:
            step = autocast(step, dtype)
        variants[name] = steps(step, plan.steps)
    seconds = time_alternating(variants, plan.warmup + 2, plan.repeats, device)
    tokens = size.batch * size.context * plan.steps
    speed = {name: tokens / value for name, value in seconds.items()}
    rows = [
        row(
            f"bf16 autocast vs fp32 training [{size.name}]",
            speed["bf16"],
            speed["fp32"],
            "tokens/s",
        ),
        row(
            f"torch.compile vs eager training, bf16 [{size.name}]",
            speed["bf16-compiled"],
            speed["bf16"],
            "tokens/s",
        ),
        row(
            f"SDPA vs explicit attention training, bf16 [{size.name}]",
            speed["bf16"],
            speed["bf16-explicit-attention"],
            "tokens/s",
        ),
    ]
    peak = next(
        (flops for key, flops in PEAK_BF16_FLOPS.items() if key in device_name(device)), None
    )
    if peak is not None:
        achieved = {name: speed[name] * flops_per_token(size) for name in speed}
        best = max(("bf16", "bf16-compiled"), key=lambda name: achieved[name])
        rows.append(
            {
                "name": f"model FLOPs utilisation, {best} [{size.name}]",
                "ours": achieved[best] / peak,
                "reference": 1.0,
                "unit": "fraction of peak",
                "ratio": achieved[best] / peak,
                "note": f"peak {peak / 1e12:.0f} TFLOP/s dense bf16; 6N + 12LTd FLOPs per token",
            }
        )
    for item in rows:
        log(f"  {item['name']}: ratio {item['ratio']:.2f}")
    return rows


def autocast(step: Callable[[], None], dtype: torch.dtype) -> Callable[[], None]:
    def run() -> None:
        with torch.autocast("cuda", dtype=dtype):
            step()

    return run


# --- the suite --------------------------------------------------------------------------------


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:  # Linux names the CPU model here; platform.processor() is often just the architecture
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):  # not on every platform
        return None


def git_commit() -> str | None:
    try:
        output = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return output.stdout.strip()


def measured_code_changed() -> bool | None:
    """Whether the code this suite measures (the package, this file) differs from ``git_commit``."""
    try:
        output = subprocess.run(
            ["git", "status", "--porcelain", "--", "annotated_transformer", "benchmarks/run.py"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return bool(output.stdout.strip())


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
    return {
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "mode": mode,
        "git_commit": git_commit(),
        "uncommitted_changes": measured_code_changed(),  # True: the code measured is not git_commit
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - started, 1),
        # Other work on the machine slows both sides of a row alike (they alternate), but it
        # lowers the absolute numbers and adds noise: the 1, 5, 15-minute load averages.
        "load_average": {"before": load_before, "after": load_average()},
        "python": platform.python_version(),
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


def format_table(document: dict) -> str:
    lines = [f"{'benchmark':<78} {'ours':>12} {'reference':>12} {'unit':>12} {'ratio':>6}"]
    for item in document["results"]:
        lines.append(
            f"{item['name']:<78} {item['ours']:>12,.4g} {item['reference']:>12,.4g} "
            f"{item['unit']:>12} {item['ratio']:>6.2f}"
        )
    for item in document["skipped"]:
        lines.append(f"{item['name']:<78} skipped: {item['reason']}")
    return "\n".join(lines)


def readable(value: float) -> str:
    """Four significant digits, without an exponent for large values: 20,040 not 2.004e+04."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def markdown_table(document: dict) -> str:
    """The results of a stored document as a Markdown table, with its provenance above it."""
    load = document.get("load_average") or {}
    lines = [
        f"`{document['mode']}` run on {document['device']} ({document['device_type']}, "
        f"{document.get('threads', '?')} threads), torch {document['torch']}, "
        f"commit {(document.get('git_commit') or 'unknown')[:7]}"
        + (" with uncommitted changes" if document.get("uncommitted_changes") else "")
        + f", {document['date']}; "
        f"{document['seconds']:.0f} s"
        + (
            f"; load average before {load['before'][0]:.2f}, after {load['after'][0]:.2f}"
            if load.get("before") and load.get("after")
            else ""
        )
        + ".",
        "",
        "| Row | ours | reference | unit | ratio |",
        "|---|---:|---:|---|---:|",
    ]
    for item in document["results"]:
        name = item["name"] + (f" ({item['note']})" if item.get("note") else "")
        lines.append(
            f"| {name} | {readable(item['ours'])} | {readable(item['reference'])} | {item['unit']} "
            f"| {item['ratio']:.2f} |"
        )
    return "\n".join(lines)


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
