"""Measuring: alternating timers, training steps, peak memory, and the rows of the suite.

Every row compares "ours" with a "reference" measured in the same process, alternating the two
within each repeat (after a warm-up) and reporting medians. ``ratio > 1`` means we are better:
``ours / reference`` for a rate (tokens/s), ``reference / ours`` for a cost (MiB).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils import benchmark

import annotated_transformer as at
from annotated_transformer.cost import training_flops_per_token
from annotated_transformer.training.provenance import device_name
from annotated_transformer.training.train import autocast_factory
from benchmarks.models import (
    WORD_LEVEL,
    WORD_LEVEL_SMALLER,
    Plan,
    ReferenceDecoderOnly,
    ReferenceEncoderDecoder,
    Size,
    decoder_only_config,
    nanogpt_model,
    our_decoder_only,
    our_encoder_decoder,
    our_nanogpt_like,
)

LOWER_IS_BETTER = {"MiB", "ms"}  # units whose ratio is reference / ours

# Dense bf16 peak of the accelerators we know, for model FLOPs utilisation (vendor data sheets).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(
    model: nn.Module,
    inputs: tuple[Tensor, ...],
    targets: Tensor,
    optimizer,
    precision: str = "fp32",
    own_loss: bool = False,
):
    """One forward + backward + AdamW step; returns a callable with no host sync inside.

    ``precision="bf16"``: the forward pass under bf16 autocast (as the Trainer runs it).
    ``own_loss``: the model computes its loss itself, ``model(tokens, targets) -> (logits,
    loss)`` (nanoGPT's GPT).
    """
    device_type = inputs[0].device.type

    def step() -> None:
        with (
            torch.autocast(device_type, dtype=torch.bfloat16)
            if precision == "bf16"
            else contextlib.nullcontext()
        ):
            if own_loss:
                _, loss = model(*inputs, targets)
            else:
                logits = model(*inputs)  # [B, T, V]
                loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def time_alternating(
    runs: dict[str, Callable[[], None]], warmup: int, repeats: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of each run, alternating them (order flipped every repeat).

    Each call is timed by ``torch.utils.benchmark.Timer`` (which waits for the GPU where there is
    one), at the thread count the suite set; the alternation stays ours: drift of the machine
    (clocks, other work) then slows both sides of a row alike.
    """
    names = list(runs)
    threads = torch.get_num_threads()  # Timer's own default is one thread
    timers = {
        name: benchmark.Timer(stmt="run()", globals={"run": run}, num_threads=threads)
        for name, run in runs.items()
    }
    for _ in range(warmup):
        for name in names:
            runs[name]()
    synchronize(device)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            synchronize(device)
            seconds[name].append(timers[name].timeit(1).mean)
    return {name: statistics.median(values) for name, values in seconds.items()}


def row(name: str, ours: float, reference: float, unit: str, note: str = "") -> dict:
    ratio = reference / ours if unit in LOWER_IS_BETTER else ours / reference
    result = {"name": name, "ours": ours, "reference": reference, "unit": unit, "ratio": ratio}
    if note:
        result["note"] = note
    return result


OURS = ("ours-gpt", "ours-seq2seq", "ours-nanogpt")


def training_setup(
    kind: str,
    size: Size,
    device: torch.device,
    seed: int = 0,
    precision: str = "fp32",
    nanogpt: ModuleType | None = None,
):
    """(step callable, model, inputs, targets) for ``kind``: ours-gpt and reference-gpt (the
    ``torch.nn`` decoder), ours-seq2seq and reference-seq2seq (``nn.Transformer``), ours-nanogpt
    and nanogpt (nanoGPT's ``GPT``, from the ``nanogpt`` module).

    Each side trains as its code does: ours with :func:`annotated_transformer.build_optimizer`
    (the Trainer's, torch's fused AdamW), the references with ``torch.optim.AdamW``'s defaults
    (nanoGPT's own ``configure_optimizers`` asks for the fused kernel on CUDA only).
    """
    torch.manual_seed(seed)
    builders = {
        "ours-gpt": our_decoder_only,
        "reference-gpt": ReferenceDecoderOnly,
        "ours-seq2seq": our_encoder_decoder,
        "reference-seq2seq": ReferenceEncoderDecoder,
        "ours-nanogpt": our_nanogpt_like,
        "nanogpt": lambda size: nanogpt_model(nanogpt, size),
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
    if kind in OURS:
        optimizer = at.build_optimizer(model, lr=1e-4)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = training_step(model, inputs, targets, optimizer, precision, own_loss=kind == "nanogpt")
    return step, model, inputs, targets


def steps(step: Callable[[], None], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            step()

    return run


def bench_training(
    label: str,
    pair: tuple[str, str],
    size: Size,
    plan: Plan,
    device: torch.device,
    log,
    precision: str = "fp32",
    nanogpt: ModuleType | None = None,
    versus: str = "",
) -> list[dict]:
    """The tokens/s row of ``pair`` = (ours, reference) at ``size`` and ``precision``, and its
    peak-memory row; ``versus`` names a reference other than torch.nn's in the row's name."""
    setup = {"device": device, "precision": precision, "nanogpt": nanogpt}
    ours_step, ours_model, *_ = training_setup(pair[0], size, **setup)
    reference_step, reference_model, *_ = training_setup(pair[1], size, **setup)
    ours_parameters, reference_parameters = (
        at.count_parameters(ours_model),
        at.count_parameters(reference_model),
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
    versus = f" vs {versus}" if versus else ""
    autocast = "" if precision == "fp32" else f", {precision} autocast"
    label = f"{label} training{versus}{autocast}"
    rows = [
        row(
            f"{label} [{size.name}]",
            tokens / seconds["ours"],
            tokens / seconds["reference"],
            "tokens/s",
            note,
        )
    ]
    log(f"    {rows[-1]['ours']:,.0f} vs {rows[-1]['reference']:,.0f} tokens/s")
    del ours_step, ours_model, reference_step, reference_model
    if plan.memory:
        ours_memory = peak_memory(pair[0], size, **setup)
        reference_memory = peak_memory(pair[1], size, **setup)
        how = (
            "torch.cuda.max_memory_allocated rise in a step"
            if device.type == "cuda"
            else "CPU: activations saved for backward"
        )
        rows.append(
            row(
                f"{label} peak memory [{size.name}]",
                ours_memory,
                reference_memory,
                "MiB",
                f"{how}; {note}".rstrip("; "),
            )
        )
        log(f"    {ours_memory:,.1f} vs {reference_memory:,.1f} MiB")
    return rows


def peak_memory(kind: str, size: Size, device: torch.device, **setup) -> float:
    """MiB a training step needs beyond the parameters, gradients and optimizer state.

    CUDA: the rise of ``torch.cuda.max_memory_allocated`` in a step. CPU has no allocator
    statistics (and the maxrss of a process that imported torch hides a small step's peak), so
    there we count the activations autograd saves for the backward pass, each storage once and the
    parameters excluded: the part of a step's memory that differs between two models with the
    same parameters.
    """
    step, model, inputs, targets = training_setup(kind, size, device, **setup)
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
        step()  # the whole step: saved tensors are packed in its forward pass
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


def token_budget_batches(
    size: Size, lengths: list[int], device: torch.device, seed: int = 0
) -> list[tuple[Tensor, Tensor]]:
    """Random ``(tokens, targets)``, each ``[B, T]``, one pair per length ``T`` in ``lengths``,
    with ``B = size.batch * size.context // T`` (at least 1): about the same tokens in every
    batch, as a translator's token-budget batches, whose shape changes from update to update."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for length in lengths:
        shape = (max(1, size.batch * size.context // length), length)  # [B, T]
        tokens = torch.randint(size.vocab_size, shape, generator=generator)
        targets = torch.randint(size.vocab_size, shape, generator=generator)
        batches.append((tokens.to(device), targets.to(device)))
    return batches


def bench_compile(plan: Plan, device: torch.device, log, precision: str = "fp32") -> list[dict]:
    """``torch.compile`` (``plan.compile_backend``) vs eager training of our decoder-only model,
    the same weights and optimizer on both sides, at ``precision``: one row where every batch has
    the same shape (a language model's windows), one where three lengths take turns (a
    translator's token-budget batches, which make torch.compile trace again for a new shape).

    Compilation is timed apart, on the first call, and given in the note; the rows time what
    comes after it, as a long run would."""
    size = plan.decoder_sizes[-1]
    lengths = [size.context, size.context * 3 // 4, size.context // 2]
    rows = []
    for label, shapes in (("one shape", [size.context] * 3), ("three shapes", lengths)):
        batches = token_budget_batches(size, shapes, device)
        variants = {}  # each step's closure keeps its model and optimizer alive
        for name in ("compiled", "eager"):
            torch.manual_seed(0)
            model = our_decoder_only(size).to(device).train()
            optimizer = at.build_optimizer(model, lr=1e-4)
            forward = (
                torch.compile(model, backend=plan.compile_backend) if name == "compiled" else model
            )
            batch_steps = [
                training_step(forward, (tokens,), targets, optimizer, precision)
                for tokens, targets in batches
            ]
            variants[name] = lambda batch_steps=batch_steps: [step() for step in batch_steps]
        started = time.perf_counter()
        variants["compiled"]()  # traces and compiles every shape of the row
        synchronize(device)
        compile_seconds = time.perf_counter() - started
        seconds = time_alternating(variants, plan.warmup + 1, plan.repeats, device)
        tokens = sum(tokens.numel() for tokens, _ in batches)
        sizes = ", ".join(f"{t.shape[0]} x {t.shape[1]}" for t, _ in batches)
        result = row(
            f"torch.compile vs eager training, {precision}, {label} [{size.name}]",
            tokens / seconds["compiled"],
            tokens / seconds["eager"],
            "tokens/s",
            f"reference = the same model eager; batches {sizes} in turn; backend "
            f"{plan.compile_backend}, compiling took {compile_seconds:.0f} s. {size.note}".strip(),
        )
        log(f"  {result['name']}: ratio {result['ratio']:.2f} (compiling {compile_seconds:.0f} s)")
        rows.append(result)
    return rows


# The adaptive softmax's clusters over WikiText-2's vocabulary (Grave et al. 2017, as Baevski and
# Auli 2019 used it on WikiText-103, scaled): the 2000 most frequent words in the head, then the
# next 8000, then the rest, each tail cluster projected to d / 4 and d / 16.
ADAPTIVE_CUTOFFS = (2000, WORD_LEVEL_SMALLER)
ADAPTIVE_DIV = 4.0
HEADS = ("full", "smaller", "adaptive")  # word_level_step's output layers


def _words(size: Size, words: int) -> int:
    """``words`` of WikiText-2's vocabulary, scaled to ``size``'s (the smoke plan's is tiny)."""
    return max(2, round(words * size.vocab_size / WORD_LEVEL.vocab_size))


def adaptive_cutoffs(size: Size) -> list[int]:
    """:data:`ADAPTIVE_CUTOFFS`, scaled to ``size``'s vocabulary."""
    return [_words(size, words) for words in ADAPTIVE_CUTOFFS]


def word_level_step(
    size: Size, head: str, device: torch.device, precision: str, seed: int = 0
) -> Callable[[], None]:
    """One update of chapter 08's word-level recipe at ``size`` (rotary positions, GELU, dropout
    0.3, the embedding tied to the output layer), by its ``head``: ``"full"`` (a softmax over the
    whole vocabulary), ``"smaller"`` (the same over PTB's share of it) or ``"adaptive"``
    (``nn.AdaptiveLogSoftmaxWithLoss`` on the final hidden states, its own weights untied; it runs
    in fp32, as the module does not take bf16 inputs)."""
    if head not in HEADS:
        raise ValueError(f"head={head!r} is not one of: {', '.join(HEADS)}")
    vocab = _words(size, WORD_LEVEL_SMALLER) if head == "smaller" else size.vocab_size
    config = replace(
        decoder_only_config(replace(size, vocab_size=vocab)),
        positional="rope", activation="gelu", dropout=0.3, init="normal", tie_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = at.build_model(config).to(device).train()
    generator = torch.Generator().manual_seed(seed)
    shape = (size.batch, size.context)  # [B, T]
    tokens = torch.randint(vocab, shape, generator=generator).to(device)
    targets = torch.randint(vocab, shape, generator=generator).to(device)
    if head != "adaptive":
        return training_step(
            model, (tokens,), targets, at.build_optimizer(model, lr=1e-4), precision
        )
    adaptive = nn.AdaptiveLogSoftmaxWithLoss(
        size.d_model, vocab, adaptive_cutoffs(size), ADAPTIVE_DIV
    ).to(device)
    optimizer = torch.optim.AdamW([*model.parameters(), *adaptive.parameters()], lr=1e-4)
    model.output_projection = nn.Identity()  # the model returns its final hidden states
    forward_context = autocast_factory(device, precision)

    def step() -> None:
        with forward_context():
            hidden = model(tokens)  # [B, T, d_model]
        loss = adaptive(hidden.float().flatten(0, 1), targets.flatten()).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def bench_vocabulary(plan: Plan, device: torch.device, log, precision: str = "fp32") -> list[dict]:
    """What WikiText-2's vocabulary costs chapter 08's word-level recipe, one update at a time:
    the full softmax over it against PTB's smaller vocabulary (how much the larger output layer
    slows an update), and an adaptive softmax against the full one (how much of that it wins
    back)."""
    size = plan.word_level
    variants = {head: word_level_step(size, head, device, precision) for head in HEADS}
    seconds = time_alternating(
        {head: steps(step, plan.steps) for head, step in variants.items()},
        plan.warmup,
        plan.repeats,
        device,
    )
    tokens = size.batch * size.context * plan.steps
    words = f"{size.vocab_size:,} words"
    smaller = f"{_words(size, WORD_LEVEL_SMALLER):,}"
    note = (
        f"{size.n_layers} x {size.d_model} decoder, batch {size.batch} x {size.context}, "
        f"{precision}. {size.note}"
    )
    cutoffs = tuple(adaptive_cutoffs(size))
    rows = [
        row(
            f"word-level training, {words} vs {smaller} [{size.name}]",
            tokens / seconds["full"],
            tokens / seconds["smaller"],
            "tokens/s",
            f"reference = the same model over PTB's vocabulary; {note}".strip(),
        ),
        row(
            f"adaptive softmax vs full softmax over {words} [{size.name}]",
            tokens / seconds["adaptive"],
            tokens / seconds["full"],
            "tokens/s",
            f"cutoffs {cutoffs}, div {ADAPTIVE_DIV:g}, head in fp32; {note}".strip(),
        ),
    ]
    for result in rows:
        log(f"  {result['name']}: ratio {result['ratio']:.2f}")
    return rows


# --- CUDA-only rows (tests/test_benchmarks.py runs them on a CPU too) -------------------------


def set_sdpa(model: nn.Module, enabled: bool) -> None:
    for module in model.modules():
        if isinstance(module, at.MultiHeadAttention):
            module.use_sdpa = enabled


def flops_per_token(size: Size) -> float:
    """Training FLOPs per token: 6·N (matmul weights) + 12·L·T·d (attention), as nanoGPT;
    the closed form lives in ``annotated_transformer.cost``."""
    return training_flops_per_token(decoder_only_config(size), size.context)


def bench_cuda(plan: Plan, device: torch.device, log) -> list[dict]:
    """bf16 autocast vs fp32, SDPA vs explicit attention, ``torch.compile`` vs eager (the rows of
    :func:`bench_compile`, in bf16) and MFU: of the faster of eager and compiled, as the one-shape
    compile row timed them side by side.

    Rows for CUDA, but the code runs on any device (the tests run it on a CPU with the smoke plan,
    whose ``compile_backend="eager"`` traces by dynamo without compiling, so it takes seconds).
    """
    size = plan.decoder_sizes[-1]
    variants: dict[str, Callable[[], None]] = {}
    models = {}  # keeps every variant's model alive while the variants alternate
    for name, dtype, sdpa in [
        ("fp32", None, True),
        ("bf16", torch.bfloat16, True),
        ("bf16-explicit-attention", torch.bfloat16, False),
    ]:
        step, model, *_ = training_setup("ours-gpt", size, device)
        set_sdpa(model, sdpa)
        models[name] = model
        if dtype is not None:
            step = autocast(step, dtype, device)
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
            f"SDPA vs explicit attention training, bf16 [{size.name}]",
            speed["bf16"],
            speed["bf16-explicit-attention"],
            "tokens/s",
        ),
    ]
    for item in rows:
        log(f"  {item['name']}: ratio {item['ratio']:.2f}")
    compile_rows = bench_compile(plan, device, log, "bf16")
    rows += compile_rows
    # MFU of the faster of the two, both timed in one alternation: the one-shape compile row
    one_shape = compile_rows[0]
    paired = {"bf16": one_shape["reference"], "bf16-compiled": one_shape["ours"]}
    label = device_name(device)
    peak = next((flops for key, flops in PEAK_BF16_FLOPS.items() if key in label), None)
    if peak is not None:
        achieved = {name: value * flops_per_token(size) for name, value in paired.items()}
        best = max(achieved, key=achieved.get)
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
        log(f"  {rows[-1]['name']}: ratio {rows[-1]['ratio']:.2f}")
    return rows


def autocast(
    step: Callable[[], None], dtype: torch.dtype, device: torch.device
) -> Callable[[], None]:
    def run() -> None:
        with torch.autocast(device.type, dtype=dtype):
            step()

    return run
