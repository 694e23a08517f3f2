"""Held-out translation and its scores: one decoding budget, one clean-up, one report (ch. 08).

Every place that turns a trained model's held-out sources into text calls :func:`translate` (the
command line's ``translate`` and ``evaluate``, chapter 08, the ablation runner, the attention
maps), and every BLEU/chrF report comes from :func:`score_translations`.

The decoding budget (:func:`decoding_budget`): a source of ``S`` tokens gets at most

    min(info.max_new_tokens, 2·S + 10, max_len - used)

new tokens: the task's longest target, a generous multiple of the source (a translation is rarely
twice as long as its source; ``+ 10`` gives short sources room), and the positions the model has
left (``used``: the start symbol of an encoder-decoder, the whole prompt of one stack). Batched
decoding uses the longest source of the batch. The output of each sentence: the generated ids
after the start symbol (or after the prompt), cut at the first ``eos``, padding dropped
(:func:`generated_ids`), then decoded by the tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..data.batch import Batch
from ..decode import beam_search, check_length_penalty, greedy_decode
from ..metrics import SACREBLEU_SEED, bleu_interval, corpus_bleu, corpus_chrf
from ..tasks.task_options import TaskInfo


def decoding_budget(
    source_length: int, info: TaskInfo, max_len: int, used: int = 1, cap: int | None = None
) -> int:
    """New tokens allowed for a source of ``source_length`` tokens (see the module docstring);
    ``cap``: a further limit (``--max-new-tokens``, an evaluation setting)."""
    limits = [2 * source_length + 10, max_len - used]
    if info.max_new_tokens is not None:
        limits.append(info.max_new_tokens)
    if cap is not None:
        limits.append(cap)
    return max(min(limits), 0)


def generated_ids(row: Sequence[int], info: TaskInfo, start: int = 1) -> list[int]:
    """The ids a decoder generated: ``row`` after ``start`` positions (the start symbol, or the
    prompt), up to the first ``eos``, without padding."""
    ids = [int(token) for token in row[start:]]
    if info.eos_id is not None and info.eos_id in ids:
        ids = ids[: ids.index(info.eos_id)]
    return [token for token in ids if token != info.pad_id]


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def check_source_length(length: int, max_len: int) -> None:
    if length > max_len:
        raise ValueError(
            f"the source has {length} tokens; the model reads at most max_len={max_len}: shorten it"
        )


@torch.no_grad()
def translate(
    model: nn.Module,
    batches: Iterable[Batch],
    tokenizer: Any,
    info: TaskInfo | dict[str, Any],
    *,
    beam_size: int = 1,
    alpha: float = 0.6,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Translations of the first ``limit`` sources of ``batches`` (all: None), in order.

    Encoder-decoder: greedy (``beam_size=1``) or beam search from the start symbol on the KV
    cache. One stack (decoder-only, encoder-only: a translation task read as a prefix LM): greedy
    from the prompt ``source </s> <s>``; sources of equal length from all batches are decoded
    together (a prompt has no padding inside); encoder-only without the cache (it is
    bidirectional). ``warn``: called once when some outputs stopped at the budget without
    ``eos`` (the task has one) or when a source was longer than the budget (it has none).
    """
    info = TaskInfo.from_dict(info)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} is not accepted: use a positive integer")
    check_length_penalty(alpha)  # even when greedy: a bad value is a mistake worth naming
    device, arch, max_len = _device(model), model.config.arch, model.config.max_len
    if arch != "encoder-decoder" and beam_size > 1:
        raise ValueError(f"beam_size={beam_size}: a one-stack model is decoded greedily only")
    cut = 0  # outputs that hit the budget

    def decode_rows(tokens: Tensor, start: int, budget: int, lengths: list[int]) -> list[str]:
        nonlocal cut
        texts = []
        for row, length in zip(tokens.tolist(), lengths, strict=True):
            ids = generated_ids(row, info, start)
            if info.eos_id is not None:  # stopped without its end symbol
                cut += info.eos_id not in row[start:] and len(row) - start >= budget
            else:  # no end symbol (the copy task): a source longer than what may come out
                cut += length > budget
            texts.append(tokenizer.decode(ids))
        return texts

    outputs: list[str] = []
    sources: list[Tensor] = []  # one stack: every source (with its </s>), decoded below
    for batch in batches:
        if limit is not None and len(outputs) + len(sources) >= limit:
            break
        src = batch.src.to(device)  # [B, S]
        check_source_length(src.size(1), max_len)
        if arch != "encoder-decoder":
            sources += [row[row != info.pad_id] for row in src]
            continue
        budget = decoding_budget(src.size(1), info, max_len, 1, max_new_tokens)
        arguments = {"src": src, "max_new_tokens": budget, "bos_id": info.bos_id}
        if beam_size > 1:
            tokens = beam_search(
                model, beam_size=beam_size, alpha=alpha, eos_id=info.eos_id, **arguments
            ).tokens  # [B, 1 + n]
        else:
            tokens = greedy_decode(model, eos_id=info.eos_id, **arguments)  # [B, 1 + n]
        outputs += decode_rows(tokens, 1, budget, (src != info.pad_id).sum(1).tolist())
    sources = sources[:limit] if limit is not None else sources
    texts: list[str] = [""] * len(sources)
    lengths = [len(source) for source in sources]
    for length in sorted(set(lengths)):
        rows = [row for row, value in enumerate(lengths) if value == length]
        budget = decoding_budget(length, info, max_len, length + 1, max_new_tokens)
        for chunk in range(0, len(rows), 256):
            group = rows[chunk : chunk + 256]
            start = torch.full((len(group), 1), info.bos_id, dtype=torch.long, device=device)
            prompt = torch.cat([torch.stack([sources[row] for row in group]), start], 1)
            tokens = greedy_decode(  # prompt: [b, length + 1]
                model,
                prompt=prompt,
                max_new_tokens=budget,
                eos_id=info.eos_id,
                use_cache=arch == "decoder-only",  # encoder-only: bidirectional, no cache
            )
            decoded = decode_rows(tokens, length + 1, budget, [length] * len(group))
            for row, text in zip(group, decoded, strict=True):
                texts[row] = text
    outputs += texts
    outputs = outputs[:limit] if limit is not None else outputs
    if cut and warn is not None:
        warn(
            f"{cut} of {len(outputs)} outputs stopped at the decoding budget (the task's "
            f"max_new_tokens={info.max_new_tokens}, 2·S + 10, or max_len={max_len}); they may "
            f"be cut short"
        )
    return outputs


def source_batch(
    texts: Sequence[str], tokenizer: Any, info: TaskInfo, max_len: int, pad_id: int | None
) -> Batch:
    """User sentences as a batch the way training saw sources (ending with ``eos`` when the task
    did), refusing a sentence longer than the model's ``max_len``."""
    rows = []
    for text in texts:
        ids = tokenizer.encode(text)
        if info.source_eos and info.eos_id is not None:
            ids = [*ids, info.eos_id]
        if not ids:
            raise ValueError(f"{text!r} encodes to no tokens")
        check_source_length(len(ids), max_len)
        rows.append(ids)
    width = max(len(row) for row in rows)
    pad = pad_id if pad_id is not None else 0
    src = torch.tensor([row + [pad] * (width - len(row)) for row in rows])  # [B, S]
    return Batch(inputs=src[:, :1], targets=src[:, :1], src=src)


@dataclass(frozen=True)
class TranslationScores:
    """Corpus scores of one set of translations (sacreBLEU, with the signature that makes BLEU
    reproducible); ``bleu_low``/``bleu_high``: the bootstrap interval (None without resamples)."""

    bleu: float
    bleu_lowercase: float
    chrf: float
    signature: str
    sentences: int
    exact_match: float
    bleu_low: float | None = None
    bleu_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_translations(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    resamples: int = 0,
    seed: int = SACREBLEU_SEED,
) -> TranslationScores:
    """BLEU (cased and lowercased), chrF, exact match, and with ``resamples`` (0: none)
    sacreBLEU's 95% bootstrap interval of BLEU over sentences
    (:func:`annotated_transformer.metrics.bleu_interval`; ``seed``: its resampling seed)."""
    bleu = corpus_bleu(hypotheses, references)
    low = high = None
    if resamples:
        interval = bleu_interval(hypotheses, references, resamples=resamples, seed=seed)
        low, high = interval.low, interval.high
    matches = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    return TranslationScores(
        bleu=bleu.score,
        bleu_lowercase=corpus_bleu(hypotheses, references, lowercase=True).score,
        chrf=corpus_chrf(hypotheses, references).score,
        signature=bleu.signature,
        sentences=len(references),
        exact_match=matches / len(references),
        bleu_low=low,
        bleu_high=high,
    )


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse sampling settings that would be ignored or crash, saying what is accepted."""
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(
            f"temperature={temperature} is not accepted: use a finite number > 0, or 0 for "
            f"greedy decoding"
        )
    if top_k is not None and (isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"top_k={top_k} is not accepted: use an integer >= 1")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} is not accepted: use a number in (0, 1]")
    if temperature == 0 and (top_k is not None or top_p is not None):
        raise ValueError(
            "temperature=0 is greedy decoding: top_k and top_p would be ignored; drop them or "
            "use a temperature > 0"
        )
