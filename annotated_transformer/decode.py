"""Decoding: greedy, beam search and sampling, all on the key/value cache (chapter 12).

One interface for both causal architectures:

- decoder-only: ``prompt`` ``[B, T_0]`` (equal lengths; no padding inside a prompt), continued;
- encoder-only, with ``use_cache=False`` only: a prompt too, the whole sequence read again at
  every step (chapter 09 measures what a bidirectional model does when it must generate);
- encoder-decoder: ``src`` ``[B, S]`` (padded with ``pad_id``), decoded from ``bos_id``.

Every function returns the whole sequence (prompt or ``bos_id`` first) as ``[B, T]``; positions
after a sequence's ``eos_id`` hold ``pad_id``. With ``use_cache=False`` each step recomputes the
whole prefix (the slow reference the cache is tested against).

A decoder-only model conditions on at most ``window`` tokens, by default its ``max_len`` (the
training context): past it, each step reads only the last ``window`` tokens, recomputed without the
cache, as nanoGPT crops its context. Absolute positions never seen in training (sinusoidal past the
training length, or learned ones past ``max_len``) otherwise turn a long sample into garbage.
``window=None`` feeds the whole sequence (to study extrapolation, chapter 03).

Every entry point first bounds what it is asked against what the device can hold
(:func:`check_decoding_memory`): a beam of a million hypotheses is refused, naming the limit,
before anything is allocated.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .model import (
    DecoderCache,
    DecoderOnlyTransformer,
    EncoderDecoderTransformer,
    EncoderOnlyTransformer,
)

Window = int | str | None  # an int, "max_len" (the model's), or None (no limit)


class _Stepper:
    """Feeds a growing prefix to a model and returns the logits of its last position."""

    def __init__(
        self, model: nn.Module, src: Tensor | None, use_cache: bool, window: Window = "max_len"
    ) -> None:
        self.model = model
        self.encoder_decoder = isinstance(model, EncoderDecoderTransformer)
        encoder_only = isinstance(model, EncoderOnlyTransformer)
        if not (self.encoder_decoder or encoder_only or isinstance(model, DecoderOnlyTransformer)):
            raise TypeError(
                f"decoding needs a decoder-only, encoder-decoder or encoder-only model, got "
                f"{type(model).__name__}"
            )
        if encoder_only and use_cache:
            # Bidirectional: each new token changes every earlier position, so nothing can be
            # cached; re-reading the whole prefix each step still never shows it the future.
            raise TypeError(
                "an encoder-only model has no causal decoder, so no KV cache: decode it with "
                "use_cache=False (the whole sequence is read again at every step)"
            )
        if self.encoder_decoder and src is None:
            raise ValueError("an encoder-decoder model needs src to decode from")
        if not self.encoder_decoder and src is not None:
            raise ValueError("a decoder-only model takes a prompt, not src")
        self.memory = self.memory_mask = None
        if self.encoder_decoder:
            self.memory = model.encode(src)  # [B, S, d_model]
            self.memory_mask = model.source_mask(src)  # [B, 1, 1, S] or None
        self.cache: DecoderCache | None = model.new_cache() if use_cache else None
        self.fed = 0  # how many prefix positions the cache holds
        window = _resolve_window(model, window)
        self.window = None if self.encoder_decoder else window  # a translation's target is short

    def __call__(self, prefix: Tensor) -> Tensor:
        """``prefix``: ``[B, T]``, the whole sequence so far. Returns ``[B, V]`` logits."""
        if self.window is not None and prefix.size(1) > self.window:
            # Past the window: the last `window` tokens at positions 0.., as in training. Every
            # position shifts at each step, so the cache cannot be reused.
            return self.model(prefix[:, -self.window :])[:, -1]  # [B, V]
        new = prefix if self.cache is None else prefix[:, self.fed :]  # [B, T_new]
        if self.encoder_decoder:
            logits = self.model.decode(new, self.memory, self.memory_mask, cache=self.cache)
        elif self.cache is None:
            logits = self.model(new)  # [B, T, V]; also an encoder-only model
        else:
            logits = self.model(new, cache=self.cache)
        self.fed = prefix.size(1)
        return logits[:, -1]  # [B, V]

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the batch (beam search)."""
        if self.cache is not None:
            self.cache.reorder(index)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, index)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, index)


def _resolve_window(model: nn.Module, window: Window) -> int | None:
    if window == "max_len":
        return model.config.max_len
    if window is None or (isinstance(window, int) and not isinstance(window, bool) and window > 0):
        return window
    raise ValueError(
        f"window={window!r} is not accepted: use a positive int, 'max_len' (the model's training "
        f"context) or None (no limit)"
    )


def _start(
    model: nn.Module, src: Tensor | None, prompt: Tensor | None, bos_id: int | None
) -> Tensor:
    if isinstance(model, EncoderDecoderTransformer):
        if src is None:
            raise ValueError("an encoder-decoder model needs src to decode from")
        if bos_id is None:
            raise ValueError("encoder-decoder decoding needs bos_id, the first decoder input")
        return torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    if src is not None:
        raise ValueError("a decoder-only model takes a prompt, not src")
    if prompt is None or prompt.dim() != 2 or prompt.size(1) == 0:
        raise ValueError("decoder-only decoding needs a prompt of shape [B, T_0] with T_0 >= 1")
    return prompt


def _pad_id(model: nn.Module, eos_id: int | None) -> int:
    pad = model.config.pad_id
    return pad if pad is not None else (eos_id if eos_id is not None else 0)


# The share of the device's free memory one decoding pass may take by the estimate below: the
# estimate leaves out the allocator's slack and the model's own activations.
DECODING_MEMORY_SHARE = 0.8


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device``: CUDA's own count, else the machine's available memory (MPS
    shares it)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


def decoding_bytes(
    model: nn.Module,
    rows: int,
    length: int,
    source_length: int = 0,
    use_cache: bool = True,
    window: int | None = None,
) -> int:
    """About the bytes a decoding pass of ``rows`` sequences (beams count as rows) of up to
    ``length`` tokens holds at its peak: per row, a few float32 copies of the logits
    (``[rows, V]``: the logits, their log-softmax, the beam's candidates), the tokens, the
    key/value cache of every decoder layer (self-attention over ``length`` positions, or the
    last ``window``; cross-attention over ``source_length``) and the encoder's memory; without
    the cache (or past the window), the activations of the prefix recomputed at each step."""
    config = model.config
    heads, layers = config.n_heads, config.decoder_layers
    read = length if window is None else min(length, window)  # positions one step reads
    per_position = heads * (config.key_size + config.value_size) * layers * 4  # K and V, float32
    per_row = 4 * config.target_vocab_size * 4 + length * 8
    per_row += per_position * (read + source_length) + source_length * (config.d_model * 4 + 8)
    if not use_cache or read < length:  # the prefix again each step: [H, T, T] and [T, d_ff]
        per_row += (heads * read * read + read * (config.d_ff + 4 * config.d_model)) * 4
    return rows * per_row


def check_decoding_memory(
    model: nn.Module,
    *,
    batch: int,
    length: int,
    beam_size: int = 1,
    source_length: int = 0,
    use_cache: bool = True,
    window: Window = "max_len",
) -> None:
    """Refuse, with a ValueError naming the limit, a decoding pass of ``batch`` inputs,
    ``beam_size`` hypotheses each, up to ``length`` tokens, whose :func:`decoding_bytes` exceed
    :data:`DECODING_MEMORY_SHARE` of the memory free on the model's device. Nothing is
    allocated."""
    if not isinstance(model, (DecoderOnlyTransformer, EncoderDecoderTransformer)):
        return  # nothing to bound: _Stepper says what it decodes (or an encoder-only model)
    device = next(model.parameters()).device
    window = (
        None if isinstance(model, EncoderDecoderTransformer) else _resolve_window(model, window)
    )

    def needs(rows: int) -> int:
        return decoding_bytes(model, rows, length, source_length, use_cache, window)

    needed, budget = needs(batch * beam_size), int(free_memory(device) * DECODING_MEMORY_SHARE)
    if needed <= budget:
        return
    largest_beam = budget // max(needs(batch), 1)
    if beam_size > 1 and largest_beam >= 1:
        advice = f"use beam_size <= {largest_beam} for {batch} input(s)"
    elif budget >= needs(beam_size):
        advice = f"decode at most {budget // needs(beam_size)} input(s) at a time"
    else:
        advice = "decode fewer new tokens (max_new_tokens) or on a device with more memory"
    what = f"beam_size={beam_size} for {batch} input(s)" if beam_size > 1 else f"{batch} input(s)"
    raise ValueError(
        f"decoding {what} up to {length:,} tokens needs about {needed / 1e9:.1f} GB "
        f"({batch * beam_size:,} sequences, each with {model.config.target_vocab_size:,}-token "
        f"logits and its cache), more than the {budget / 1e9:.1f} GB this {device.type} device "
        f"can spare ({DECODING_MEMORY_SHARE:.0%} of its free memory); {advice}"
    )


@torch.no_grad()
def _generate(
    model: nn.Module,
    choose,
    src: Tensor | None,
    prompt: Tensor | None,
    max_new_tokens: int,
    bos_id: int | None,
    eos_id: int | None,
    use_cache: bool,
    window: Window = "max_len",
) -> Tensor:
    """Shared loop of greedy decoding and sampling; ``choose`` maps ``[B, V]`` logits to ``[B]``."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    tokens = _start(model, src, prompt, bos_id)  # [B, T_0]
    check_decoding_memory(
        model,
        batch=tokens.size(0),
        length=tokens.size(1) + max_new_tokens,
        source_length=0 if src is None else src.size(1),
        use_cache=use_cache,
        window=window,
    )
    was_training = model.training
    model.eval()
    step = _Stepper(model, src, use_cache, window)
    finished = torch.zeros(tokens.size(0), dtype=torch.bool, device=tokens.device)
    pad = _pad_id(model, eos_id)
    for _ in range(max_new_tokens):
        next_token = choose(step(tokens))  # [B]
        next_token = next_token.masked_fill(finished, pad)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # [B, T + 1]
        if eos_id is not None:
            finished |= next_token == eos_id
            if bool(finished.all()):
                break
    model.train(was_training)
    return tokens


def greedy_decode(
    model: nn.Module,
    *,
    src: Tensor | None = None,
    prompt: Tensor | None = None,
    max_new_tokens: int = 64,
    bos_id: int | None = None,
    eos_id: int | None = None,
    use_cache: bool = True,
    window: Window = "max_len",
) -> Tensor:
    """Take the most probable token at every step. Returns ``[B, T_0 + n]``."""

    def choose(logits: Tensor) -> Tensor:
        return logits.argmax(-1)  # [B]

    return _generate(model, choose, src, prompt, max_new_tokens, bos_id, eos_id, use_cache, window)


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit outside the top ``k`` and outside the nucleus of mass ``p``.

    The nucleus (Holtzman et al. 2020) is the smallest set of most probable tokens whose probability
    sums to at least ``p``; the most probable token is always kept.

    Args:
        logits: ``[B, V]``.
    """
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # [B, V]
        probabilities = sorted_logits.softmax(-1)
        mass_before = probabilities.cumsum(-1) - probabilities  # mass of strictly better tokens
        drop_sorted = mass_before >= top_p  # keeps the first token whose mass reaches p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(
    model: nn.Module,
    *,
    src: Tensor | None = None,
    prompt: Tensor | None = None,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    window: Window = "max_len",
) -> Tensor:
    """Sample each token from softmax(logits / temperature), optionally top-k / top-p filtered.

    ``temperature=0`` is greedy decoding. Any finite positive temperature is safe: the logits are
    shifted so that the largest is 0 and divided in float64 (where no positive temperature rounds
    to 0), so a tiny temperature sends the others to -inf (probability 0) rather than overflowing
    to inf/inf = NaN; as ``temperature -> 0`` the samples become the greedy tokens (a tie is
    broken at random). Pass a seeded ``generator`` for reproducible samples.
    """
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(
            f"temperature={temperature} is not accepted: use a finite number > 0, or 0 for "
            f"greedy decoding"
        )

    def choose(logits: Tensor) -> Tensor:
        if temperature == 0:
            return logits.argmax(-1)
        logits = logits.double()  # [B, V]; float64 holds every positive temperature
        shifted = logits - logits.amax(-1, keepdim=True)  # [B, V], <= 0, the best at 0
        filtered = filter_logits(shifted / temperature, top_k, top_p)
        return torch.multinomial(filtered.softmax(-1), 1, generator=generator)[:, 0]  # [B]

    return _generate(model, choose, src, prompt, max_new_tokens, bos_id, eos_id, use_cache, window)


def check_length_penalty(alpha: float) -> None:
    """Refuse a length-penalty exponent ``alpha`` that beam search cannot use.

    A negative ``alpha`` makes the penalty shrink with length, so it favours short outputs even
    more than ``alpha = 0`` does, and it breaks beam search's stopping rule, which assumes a
    longer hypothesis is never divided by less (see :func:`beam_search`).
    """
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, numbers.Real)
        or not math.isfinite(alpha)
        or alpha < 0
    ):
        raise ValueError(
            f"alpha={alpha!r} is not accepted: the length penalty's exponent is a finite number "
            f">= 0 (0: the plain log probability; Vaswani et al. used 0.6)"
        )


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} is not accepted: use an integer >= 1")


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's length penalty ``((5 + length) / 6) ** alpha`` (Wu et al. 2016, eq. 14).

    A hypothesis scores ``log P(y) / length_penalty(|y|)``; ``alpha = 0`` is the plain log
    probability (which favours short outputs), Vaswani et al. used ``alpha = 0.6``. A negative
    ``alpha`` is refused (:func:`check_length_penalty`).
    """
    check_length_penalty(alpha)
    return ((5 + length) / 6) ** alpha


@dataclass
class BeamResult:
    tokens: Tensor  # [B, T]: the best hypothesis of each input, pad_id after eos
    scores: Tensor  # [B]: its length-normalised log probability


@torch.no_grad()
def beam_search(
    model: nn.Module,
    *,
    src: Tensor | None = None,
    prompt: Tensor | None = None,
    beam_size: int = 4,
    max_new_tokens: int = 64,
    alpha: float = 0.6,
    bos_id: int | None = None,
    eos_id: int | None = None,
    use_cache: bool = True,
    window: Window = "max_len",
) -> BeamResult:
    """Batched beam search with GNMT's length penalty.

    Each input keeps ``beam_size`` live hypotheses. Every step extends each by every token and walks
    the ``2·beam_size`` best extensions, best first: one that ends in ``eos_id`` goes to the input's
    finished list (scored ``log P / length_penalty``), another continues, until ``beam_size``
    continue; extensions ranked below those are dropped, ending ones included. An input
    is done when no live hypothesis can still beat its ``beam_size``-th finished one: a live score
    ``s < 0`` can at best reach ``s / length_penalty(max length)``, since log probabilities only
    fall and the penalty only grows with length (``alpha >= 0``, checked first). So the search
    returns the best hypothesis it can reach, with no early-stopping heuristic.

    The length counts generated tokens, ``eos_id`` included. Hypotheses that reach
    ``max_new_tokens`` without ``eos_id`` are scored as they stand.
    """
    _check_count("beam_size", beam_size)
    _check_count("max_new_tokens", max_new_tokens)
    check_length_penalty(alpha)
    start = _start(model, src, prompt, bos_id)  # [B, T_0]
    batch, start_len = start.shape
    check_decoding_memory(
        model,
        batch=batch,
        beam_size=beam_size,
        length=start_len + max_new_tokens,
        source_length=0 if src is None else src.size(1),
        use_cache=use_cache,
        window=window,
    )
    was_training = model.training
    model.eval()
    device = start.device
    expand = torch.arange(batch, device=device).repeat_interleave(beam_size)  # [B·K]
    source = None if src is None else src.index_select(0, expand)  # [B·K, S]
    step = _Stepper(model, source, use_cache, window)
    tokens = start.index_select(0, expand)  # [B·K, T_0]
    # Only the first beam of each input is live at the start, so the K copies do not repeat.
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, Tensor]]] = [[] for _ in range(batch)]
    done = [False] * batch
    best_possible = length_penalty(max_new_tokens, alpha)
    own_rows = (torch.arange(batch, device=device) * beam_size)[:, None].repeat(1, beam_size)

    for length in range(1, max_new_tokens + 1):
        log_probs = step(tokens).float().log_softmax(-1)  # [B·K, V]
        vocab = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(batch, -1)  # [B, K·V]
        top_scores, top_index = candidates.topk(min(2 * beam_size, candidates.size(-1)), dim=-1)
        beam_index, token_index = top_index // vocab, top_index % vocab  # [B, 2K]

        next_scores = torch.full((batch, beam_size), float("-inf"), device=device)
        # Rows of an input with no live hypothesis keep pointing at that input's own rows.
        next_rows = own_rows.clone()
        next_tokens = torch.zeros(batch, beam_size, dtype=torch.long, device=device)
        for b in range(batch):
            kept = 0
            for score, beam, token in zip(
                top_scores[b].tolist(),
                beam_index[b].tolist(),
                token_index[b].tolist(),
                strict=True,
            ):
                if done[b] or kept == beam_size or score == float("-inf"):
                    break
                row = b * beam_size + beam
                if eos_id is not None and token == eos_id:
                    hypothesis = torch.cat([tokens[row, start_len:], tokens.new_tensor([token])])
                    finished[b].append((score / length_penalty(length, alpha), hypothesis))
                    continue
                next_scores[b, kept], next_rows[b, kept], next_tokens[b, kept] = score, row, token
                kept += 1
            finished[b].sort(key=lambda item: -item[0])
            del finished[b][beam_size:]
            if len(finished[b]) == beam_size:
                best_live = next_scores[b].max().item()
                done[b] = done[b] or best_live / best_possible <= finished[b][-1][0]
        if all(done):
            break
        rows = next_rows.view(-1)  # [B·K]
        tokens = torch.cat([tokens.index_select(0, rows), next_tokens.view(-1, 1)], dim=1)
        step.reorder(rows)
        scores = next_scores

    # Inputs that ran out of length: their live hypotheses compete as they stand.
    for b in range(batch):
        if done[b]:
            continue
        for k in range(beam_size):
            if scores[b, k].item() > float("-inf"):
                hypothesis = tokens[b * beam_size + k, start_len:]
                penalised = scores[b, k].item() / length_penalty(hypothesis.numel(), alpha)
                finished[b].append((penalised, hypothesis))
        finished[b].sort(key=lambda item: -item[0])

    model.train(was_training)
    pad = _pad_id(model, eos_id)
    best = [finished[b][0] for b in range(batch)]
    width = max(hypothesis.numel() for _, hypothesis in best)
    out = torch.full((batch, start_len + width), pad, dtype=torch.long, device=device)
    out[:, :start_len] = start
    for b, (_, hypothesis) in enumerate(best):
        out[b, start_len : start_len + hypothesis.numel()] = hypothesis
    return BeamResult(out, torch.tensor([score for score, _ in best]))


def exhaustive_best(
    model: nn.Module,
    vocab_size: int,
    *,
    src: Tensor | None = None,
    prompt: Tensor | None = None,
    max_new_tokens: int,
    alpha: float = 0.6,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> tuple[Tensor, float]:
    """The best continuation of one input by enumerating every sequence (tests and exercises).

    Scores exactly as :func:`beam_search`: sequences end at ``eos_id`` or at ``max_new_tokens``.
    Costs ``vocab_size ** max_new_tokens`` forward passes of the prefix tree: tiny models only.
    """
    _check_count("max_new_tokens", max_new_tokens)
    check_length_penalty(alpha)
    start = _start(model, src, prompt, bos_id)
    if start.size(0) != 1:
        raise ValueError("exhaustive_best takes one input (batch size 1)")
    was_training = model.training
    model.eval()
    best: tuple[float, list[int]] = (-math.inf, [])
    with torch.no_grad():
        step = _Stepper(model, src, use_cache=False, window=None)  # the whole prefix every time

    def log_probs(prefix: list[int]) -> Tensor:
        sequence = torch.cat([start, start.new_tensor([prefix])], dim=1) if prefix else start
        return step(sequence)[0].float().log_softmax(-1)  # [V]

    def visit(prefix: list[int], total: float) -> None:
        nonlocal best
        if len(prefix) == max_new_tokens:
            score = total / length_penalty(len(prefix), alpha)
            best = max(best, (score, prefix))
            return
        for token, value in enumerate(log_probs(prefix).tolist()):
            extended, new_total = [*prefix, token], total + value
            if eos_id is not None and token == eos_id:
                best = max(best, (new_total / length_penalty(len(extended), alpha), extended))
            else:
                visit(extended, new_total)

    with torch.no_grad():
        visit([], 0.0)
    model.train(was_training)
    return torch.tensor(best[1]), best[0]


@dataclass(frozen=True)
class ExactResult:
    """What :func:`exact_search` found for one input."""

    tokens: Tensor  # [n]: the best continuation, ``eos_id`` included when it ends
    score: float  # its length-normalised log probability
    expansions: int  # prefixes scored (one forward pass each)
    proven: bool  # False: stopped at ``max_expansions``, the best found so far (a lower bound)


def exact_search(
    model: nn.Module,
    *,
    src: Tensor | None = None,
    prompt: Tensor | None = None,
    max_new_tokens: int,
    alpha: float = 0.0,
    bos_id: int | None = None,
    eos_id: int | None = None,
    lower_bound: float = -math.inf,
    max_expansions: int | None = None,
) -> ExactResult:
    """The best continuation of one input, found exactly by depth-first branch and bound.

    Scores as :func:`beam_search` and :func:`exhaustive_best` do (it returns the same score as the
    latter), but prunes: a prefix with log probability ``s <= 0`` can at best finish at
    ``s / length_penalty(max_new_tokens, alpha)`` (log probabilities only fall; the penalty only
    grows with length), so a prefix whose bound does not beat the best sequence found so far is
    not extended. Children are tried most probable first, so the first dive is greedy's output
    and every later one prunes against it. ``lower_bound``: a score already reached (a beam's
    output), pruning from the start; if nothing beats it the result holds no tokens and
    ``score == lower_bound``. This is the exact search with which Stahlberg & Byrne (2019) found
    the empty translation to be a Transformer's most probable output for most of a WMT test set.

    ``max_expansions``: stop after that many forward passes and return the best found, with
    ``proven=False`` (the true optimum may be better). The model runs on the whole prefix at every
    expansion (no cache), the source encoded once.
    """
    _check_count("max_new_tokens", max_new_tokens)
    check_length_penalty(alpha)
    if max_expansions is not None:
        _check_count("max_expansions", max_expansions)
    start = _start(model, src, prompt, bos_id)  # [1, T_0]
    if start.size(0) != 1:
        raise ValueError("exact_search takes one input (batch size 1)")
    was_training = model.training
    model.eval()
    ceiling = length_penalty(max_new_tokens, alpha)  # the largest penalty any sequence gets
    best_score, best_tokens = lower_bound, None
    expansions, proven = 0, True
    with torch.no_grad():
        step = _Stepper(model, src, use_cache=False, window=None)

        def visit(prefix: list[int], total: float) -> None:
            nonlocal best_score, best_tokens, expansions, proven
            if max_expansions is not None and expansions >= max_expansions:
                proven = False
                return
            expansions += 1
            sequence = torch.cat([start, start.new_tensor([prefix])], 1) if prefix else start
            log_probs = step(sequence)[0].float().log_softmax(-1)  # [V]
            values, order = log_probs.sort(descending=True)  # [V], [V]
            for value, token in zip(values.tolist(), order.tolist(), strict=True):
                extended, new_total = [*prefix, token], total + value
                if new_total / ceiling <= best_score:
                    break  # this child cannot win, and every later one is less probable
                if (eos_id is not None and token == eos_id) or len(extended) == max_new_tokens:
                    score = new_total / length_penalty(len(extended), alpha)
                    if score > best_score:
                        best_score, best_tokens = score, extended
                else:
                    visit(extended, new_total)

        visit([], 0.0)
    model.train(was_training)
    tokens = torch.tensor(best_tokens if best_tokens is not None else [], dtype=torch.long)
    return ExactResult(tokens, best_score, expansions, proven)
