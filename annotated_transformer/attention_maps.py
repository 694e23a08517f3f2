"""Attention maps of a trained model: captured, stored as plain data, measured (chapter 10).

A *map* is a JSON-safe dict, small enough for a book page or for a training run to store beside
its record (:meth:`annotated_transformer.experiments.ResultsStore.save_attention`); chapter 10
captures them live from the shipped models (``models/``):

- encoder-decoder (:func:`capture_translation`)::

    {"kind": "encoder-decoder", "source", "translation", "source_ids", "target_ids",
     "source_tokens", "target_tokens", "output_tokens",
     "encoder": [L][H][S][S], "decoder": [L][H][T][T], "cross": [L][H][T][S]}

  ``target_tokens`` are the decoder's inputs (the start symbol, then the translation);
  ``output_tokens`` what each decoder position predicts (the translation, then the end symbol);
  the ``*_ids`` are the token ids the model read, to run it again on the same input;
- decoder-only (:func:`capture_text`)::

    {"kind": "decoder-only", "text", "ids", "tokens", "decoder": [L][H][T][T]}

Every row of weights is one query's distribution over the keys (queries on the first axis, keys on
the second), rounded to ``decimals`` places so that stored maps and book pages stay small.
Tokens are stored as the text of each piece (``" Zwei"``, ``"\\n"``, ``"</s>"``);
:func:`readable_tokens` turns them into labels for axes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .decode import greedy_decode
from .results.evaluation import decoding_budget, generated_ids
from .tasks.task_options import TaskInfo

STACKS = {"encoder-decoder": ("encoder", "decoder", "cross"), "decoder-only": ("decoder",)}


# -- tokens ----------------------------------------------------------------------------------


def _special_names(tokenizer: Any) -> dict[int, str]:
    names = {}
    for attribute, default in (("pad", "<pad>"), ("bos", "<s>"), ("eos", "</s>")):
        index = getattr(tokenizer, f"{attribute}_id", None)
        if index is not None:
            names[int(index)] = getattr(tokenizer, f"{attribute}_token", default)
    return names


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text of each token id, specials included (``"<s>"``, ``"</s>"``).

    Byte-level BPE gives each piece's text with its leading space (``" Zwei"``); character and word
    vocabularies give their symbols; any other tokenizer decodes one id at a time.
    """
    ids = [int(index) for index in ids]
    inner = getattr(tokenizer, "tokenizer", None)
    if inner is not None and hasattr(inner, "decode_batch"):  # BPETokenizer
        return inner.decode_batch([[index] for index in ids], skip_special_tokens=False)
    symbols = getattr(tokenizer, "symbols", None)
    if symbols is not None:  # CharTokenizer, WordTokenizer
        return [symbols[index] for index in ids]
    specials = _special_names(tokenizer)
    return [specials.get(index) or tokenizer.decode([index]) or f"<{index}>" for index in ids]


READABLE = {" ": "␣", "\n": "⏎", "\t": "⇥"}


def readable_tokens(tokens: Sequence[str]) -> list[str]:
    """Labels for an axis: a leading space becomes ``▁`` (a new word), whitespace and control
    characters become visible.

    >>> readable_tokens([" Zwei", "ge", " ", "\\n", "\\x17"])
    ['▁Zwei', 'ge', '␣', '⏎', '\\\\x17']
    """
    labels = []
    for token in tokens:
        if token in READABLE:
            labels.append(READABLE[token])
            continue
        prefix, body = ("▁", token[1:]) if token.startswith(" ") else ("", token)
        body = "".join(
            READABLE.get(character)
            or (character if character.isprintable() else ascii(character)[1:-1])
            for character in body
        )
        labels.append(prefix + body)
    return labels


# -- capture ---------------------------------------------------------------------------------


def _rounded(weights: Sequence[Tensor], decimals: int) -> list:
    """Per-layer ``[1, H, T_q, T_k]`` tensors -> nested lists ``[L][H][T_q][T_k]``.

    Rounded in float64, so that 0.123 is written as 0.123 (a float32 0.123 prints 0.12300000339...).
    """
    return [layer[0].detach().double().cpu().round(decimals=decimals).tolist() for layer in weights]


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def capture_translation(
    model: nn.Module,
    tokenizer: Any,
    source: str,
    info: TaskInfo | dict[str, Any],
    *,
    translation: str | None = None,
    decimals: int = 3,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """The attention of an encoder-decoder translating ``source`` (see the module docstring).

    The source is encoded as the training batches build it (its pieces, then ``eos`` when
    ``info.source_eos``). Without ``translation`` the model translates greedily within
    :func:`~annotated_transformer.evaluation.decoding_budget` (further capped by
    ``max_new_tokens``), as every held-out translation is decoded; with one, the model reads it
    teacher-forced. Either way one forward pass with ``return_attention=True`` gives the maps.
    ``info`` is a task's :class:`~annotated_transformer.task_options.TaskInfo` (or its dict).
    """
    info = TaskInfo.from_dict(info)
    was_training = model.training
    model.eval()
    device = _device(model)
    bos_id, eos_id = info.bos_id, info.eos_id
    source_ids = tokenizer.encode(source)
    if info.source_eos and eos_id is not None:
        source_ids = [*source_ids, eos_id]
    src = torch.tensor([source_ids], dtype=torch.long, device=device)  # [1, S]
    if translation is None:
        budget = decoding_budget(src.size(1), info, model.config.max_len, 1, max_new_tokens)
        decoded = greedy_decode(
            model, src=src, max_new_tokens=budget, bos_id=bos_id, eos_id=eos_id
        )[0].tolist()  # bos, the translation, maybe eos
        generated = generated_ids(decoded, info)
        ended = eos_id is not None and eos_id in decoded[1:]
        translation = tokenizer.decode(generated)
    else:
        generated, ended = tokenizer.encode(translation), eos_id is not None
    inputs = [bos_id, *generated]
    tgt = torch.tensor([inputs], dtype=torch.long, device=device)  # [1, T]
    _, maps = model(src, tgt, return_attention=True)  # per layer [1, H, T_q, T_k]
    model.train(was_training)
    outputs = [*generated, eos_id] if ended else generated
    return {
        "kind": "encoder-decoder",
        "source": source,
        "translation": translation,
        "source_ids": source_ids,
        "target_ids": inputs,
        "source_tokens": token_strings(tokenizer, source_ids),
        "target_tokens": token_strings(tokenizer, inputs),
        # What each decoder position predicts; one shorter than target_tokens when the greedy
        # translation stopped at max_new_tokens without an end symbol.
        "output_tokens": token_strings(tokenizer, outputs),
        "encoder": _rounded(maps["encoder"], decimals),  # [L][H][S][S]
        "decoder": _rounded(maps["decoder"], decimals),  # [L][H][T][T]
        "cross": _rounded(maps["cross"], decimals),  # [L][H][T][S]
    }


@torch.no_grad()
def capture_text(model: nn.Module, tokenizer: Any, text: str, *, decimals: int = 3) -> dict:
    """The attention of a decoder-only model reading ``text`` (see the module docstring)."""
    ids = tokenizer.encode(text)
    max_len = model.config.max_len
    if not ids or len(ids) > max_len:
        raise ValueError(f"text has {len(ids)} tokens; the model reads 1 to {max_len}")
    was_training = model.training
    model.eval()
    tokens = torch.tensor([ids], dtype=torch.long, device=_device(model))  # [1, T]
    _, maps = model(tokens, return_attention=True)
    model.train(was_training)
    return {
        "kind": "decoder-only",
        "text": text,
        "ids": ids,
        "tokens": token_strings(tokenizer, ids),
        "decoder": _rounded(maps["decoder"], decimals),  # [L][H][T][T]
    }


# -- back to tensors, and to bertviz ---------------------------------------------------------


def may_attend(stack: str, n_queries: int, n_keys: int) -> Tensor:
    """``[T_q, T_k]``, True where a query of ``stack`` may attend to a key: every key, except in
    the decoder's self-attention, where query ``t`` sees itself and the earlier positions."""
    visible = torch.ones(n_queries, n_keys, dtype=torch.bool)
    return visible.tril() if stack == "decoder" else visible


def uniform_map(attention_map: dict[str, Any]) -> dict[str, Any]:
    """The same map with every query spreading its weight evenly over the keys it may see
    (:func:`may_attend`): the baseline a measure of a head is compared with. Not rounded."""
    uniform = dict(attention_map)
    for stack, weights in to_tensors(attention_map).items():  # [L, H, T_q, T_k]
        visible = may_attend(stack, *weights.shape[-2:]).double()  # [T_q, T_k]
        rows = visible / visible.sum(-1, keepdim=True)  # [T_q, T_k]
        uniform[stack] = rows.expand_as(weights).tolist()
    return uniform


def stacks(attention_map: dict[str, Any]) -> tuple[str, ...]:
    """The stacks a map holds: ``("encoder", "decoder", "cross")`` or ``("decoder",)``."""
    kind = attention_map.get("kind")
    if kind not in STACKS:
        raise ValueError(f"kind={kind!r} is not one of: {', '.join(STACKS)}")
    return STACKS[kind]


def to_tensors(attention_map: dict[str, Any]) -> dict[str, Tensor]:
    """Each stack of a stored map as one float64 tensor ``[L, H, T_q, T_k]``."""
    return {
        name: torch.tensor(attention_map[name], dtype=torch.float64)
        for name in stacks(attention_map)
    }


def axis_tokens(attention_map: dict[str, Any], stack: str) -> tuple[list[str], list[str]]:
    """``(query tokens, key tokens)`` of one stack: the labels of its y and x axes."""
    if attention_map["kind"] == "decoder-only":
        return attention_map["tokens"], attention_map["tokens"]
    source, target = attention_map["source_tokens"], attention_map["target_tokens"]
    return {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}[
        stack
    ]


def bertviz_inputs(
    attention_map: dict[str, Any], *, decimals: int | None = None, readable: bool = True
) -> dict[str, Any]:
    """Keyword arguments for bertviz's ``head_view`` and ``model_view``.

    Encoder-decoder: ``encoder_attention``, ``decoder_attention``, ``cross_attention`` (tuples of
    ``[1, H, T_q, T_k]`` tensors, one per layer), ``encoder_tokens``, ``decoder_tokens``;
    decoder-only: ``attention`` and ``tokens``. Tensors are float64, so bertviz writes the rounded
    numbers short into the page; ``decimals`` rounds further. ``readable`` labels tokens with
    :func:`readable_tokens`.
    """
    tensors = to_tensors(attention_map)
    if decimals is not None:
        tensors = {name: value.round(decimals=decimals) for name, value in tensors.items()}

    def layers(name: str) -> tuple[Tensor, ...]:
        return tuple(layer[None] for layer in tensors[name])  # each [1, H, T_q, T_k]

    label = readable_tokens if readable else list
    if attention_map["kind"] == "decoder-only":
        return {"attention": layers("decoder"), "tokens": label(attention_map["tokens"])}
    return {
        "encoder_attention": layers("encoder"),
        "decoder_attention": layers("decoder"),
        "cross_attention": layers("cross"),
        "encoder_tokens": label(attention_map["source_tokens"]),
        "decoder_tokens": label(attention_map["target_tokens"]),
    }


# -- what a head does, measured --------------------------------------------------------------
# Every measure takes weights [..., T_q, T_k] (one head, a layer's heads, or [L, H, T_q, T_k])
# and averages over the query positions, so it returns [...]: one number per head.


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean weight that query ``t`` puts on key ``t - 1``, over ``t = 1 .. T-1``.

    1 for a perfect previous-token head; ``1/T`` for uniform attention over ``T`` keys.
    """
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # [...]


def key_mass(weights: Tensor, keys: Sequence[int]) -> Tensor:
    """Mean total weight the queries put on the key positions ``keys`` (e.g. ``[0]``: the first
    token; the positions of the delimiters)."""
    if not len(keys):
        return weights.new_zeros(weights.shape[:-2])
    return weights[..., list(keys)].sum(-1).mean(-1)  # [...]


DELIMITERS = frozenset({".", ",", "!", "?", ";", ":", "-", "<s>", "</s>", "<eos>"})


def delimiter_positions(tokens: Sequence[str]) -> list[int]:
    """Positions of punctuation, start/end symbols and pure whitespace (``" "``, ``"\\n"``)."""
    return [index for index, token in enumerate(tokens) if token.strip() in DELIMITERS | {""}]


def sink_score(weights: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """How much of a head's weight parks on one key that its queries share: an *attention sink*
    (Xiao et al. 2024), such as BERT's heads resting on ``[SEP]`` (Clark et al. 2019).

    ``weights``: ``[..., T_q, T_k]`` (one head ``[T_q, T_k]``, a layer's heads ``[H, T_q, T_k]``,
    a batch ``[B, H, T_q, T_k]``). ``mask``: True where a query may attend to a key, broadcastable
    to ``weights`` (``[T_q, T_k]``, e.g. :func:`may_attend`); None means every query sees every
    key. The sink is the key that receives the most weight summed over the queries (the earliest
    such key on a tie); the score is that sum divided by the number of queries that may attend to
    it, so a causal query placed before the sink neither counts for nor against it.

    Returns ``(score, position)``, both ``[...]``: the score is 1 when every query puts all its
    weight on one key and ``1/T_k`` for uniform attention over all keys; uniform causal attention
    sinks on key 0 with ``(1 + 1/2 + ... + 1/T) / T``. A delimiter head that looks at the nearest
    boundary of each query spreads its weight over several boundaries and scores lower.
    """
    received = weights.sum(-2)  # [..., T_k]: the weight each key receives from all queries
    position = received.argmax(-1, keepdim=True)  # [..., 1]
    if mask is None:
        viewers = torch.full_like(received, weights.size(-2))  # [..., T_k]
    else:
        viewers = mask.to(weights.dtype).sum(-2).expand_as(received)  # [..., T_k]
    share = received.gather(-1, position) / viewers.gather(-1, position).clamp(min=1)  # [..., 1]
    return share.squeeze(-1), position.squeeze(-1)


def sink_tokens(maps: Sequence[dict[str, Any]], stack: str, layer: int, head: int) -> Counter[str]:
    """How many of ``maps`` have their sink (the key :func:`sink_score` names) on each token, for
    one head: ``Counter({"\\n": 32})`` says the head's sink is a newline in all 32 maps."""
    found: Counter[str] = Counter()
    for attention_map in maps:
        weights = to_tensors(attention_map)[stack][layer, head]  # [T_q, T_k]
        _, position = sink_score(weights, may_attend(stack, *weights.shape))
        found[axis_tokens(attention_map, stack)[1][int(position)]] += 1
    return found


def attention_entropy(weights: Tensor) -> Tensor:
    """Mean entropy (nats) of the queries' distributions: 0 when each query looks at one key,
    ``log T`` for uniform attention over ``T`` keys (``0 log 0 = 0``)."""
    return -torch.special.xlogy(weights, weights).sum(-1).mean(-1)  # [...]


Alignment = dict[int, set[int]]  # query position -> the key positions it aligns with


def _word(token: str) -> str:
    return token.strip().lower()


def identical_alignment(
    query_tokens: Sequence[str], key_tokens: Sequence[str], min_length: int = 3
) -> Alignment:
    """Align pieces spelt alike on both sides (names, numbers, shared words: ``" Ball"`` and
    ``" ball"``), ignoring case and the leading space.

    Start and end symbols never align. Pieces shorter than ``min_length`` characters are
    skipped unless they are numbers: a
    German ``en`` and an English ``en`` are parts of unrelated words. A piece that occurs at
    several source positions aligns with all of them. High precision, low recall: most words of
    a sentence have no identical counterpart, and a frequent piece can still match by accident.
    """
    where: dict[str, set[int]] = {}
    for position, token in enumerate(key_tokens):
        where.setdefault(_word(token), set()).add(position)
    alignment = {}
    for position, token in enumerate(query_tokens):
        word = _word(token)
        if word in where and word not in DELIMITERS and (len(word) >= min_length or word.isdigit()):
            alignment[position] = where[word]
    return alignment


def diagonal_alignment(n_queries: int, n_keys: int, width: int = 1) -> Alignment:
    """The monotone band: query ``t`` aligns with the keys within ``width`` of
    ``t · (n_keys - 1) / (n_queries - 1)``, the diagonal stretched to the two lengths.

    A crude reference that assumes both languages say things in the same order; German puts the
    verb last in subordinate clauses, so a perfect aligner disagrees with it there.
    """
    scale = (n_keys - 1) / max(n_queries - 1, 1)
    alignment = {}
    for query in range(n_queries):
        centre = round(query * scale)
        alignment[query] = set(range(max(centre - width, 0), min(centre + width, n_keys - 1) + 1))
    return alignment


def argmax_hits(weights: Tensor, alignment: Alignment) -> Tensor:
    """How many aligned queries have their largest weight on one of their aligned keys: ``[...]``
    (divide by ``len(alignment)`` for a rate)."""
    hits = weights.new_zeros(weights.shape[:-2])
    if not alignment:
        return hits
    best = weights.argmax(-1)  # [..., T_q]
    for query, keys in alignment.items():
        hits = hits + torch.isin(best[..., query], torch.tensor(sorted(keys))).to(weights.dtype)
    return hits


def chance_hits(alignment: Alignment, n_keys: int) -> float:
    """The expected number of hits of a head whose argmax is uniform over the ``n_keys`` keys."""
    return sum(len(keys) / n_keys for keys in alignment.values())


ALIGNMENTS = ("identical", "diagonal")
QUERY_SIDES = ("output", "input")


def cross_alignment(
    maps: Sequence[dict[str, Any]], reference: str = "identical", side: str = "output"
) -> dict[str, Any]:
    """How often each cross-attention head's argmax follows a reference alignment, over ``maps``.

    ``reference``: ``"identical"`` (:func:`identical_alignment`) or ``"diagonal"``
    (:func:`diagonal_alignment`). ``side``: align the source with the token each decoder position
    *predicts* (``"output"``, as Bahdanau et al.'s alignments) or with the token it *reads*
    (``"input"``, one step behind).

    Returns ``{"rate": [L, H] hits / aligned queries, "chance": the rate of a uniform argmax,
    "queries": how many aligned queries were counted}``. The end symbol and padding never count.
    """
    if reference not in ALIGNMENTS:
        raise ValueError(f"reference={reference!r} is not one of: {', '.join(ALIGNMENTS)}")
    if side not in QUERY_SIDES:
        raise ValueError(f"side={side!r} is not one of: {', '.join(QUERY_SIDES)}")
    hits, chance, queries = None, 0.0, 0
    for attention_map in maps:
        cross = to_tensors(attention_map)["cross"]  # [L, H, T, S]
        source = attention_map["source_tokens"]
        # Leave out the source's end symbol: every query may look there (a resting place).
        keys = source[:-1] if source and source[-1] in ("</s>", "<eos>") else source
        tokens = attention_map["output_tokens" if side == "output" else "target_tokens"]
        tokens = tokens[: cross.size(-2)]
        symbols = {query for query, token in enumerate(tokens) if token in ("<s>", "</s>")}
        if reference == "identical":
            alignment = identical_alignment(tokens, keys)
        else:
            # The translation's own tokens: the input side starts with <s>, the output side
            # ends with </s>.
            words = [query for query in range(len(tokens)) if query not in symbols]
            band = diagonal_alignment(len(words), len(keys))
            alignment = {query: band[rank] for rank, query in enumerate(words)}
        alignment = {query: keys for query, keys in alignment.items() if query not in symbols}
        found = argmax_hits(cross, alignment)  # [L, H]
        hits = found if hits is None else hits + found
        chance += chance_hits(alignment, cross.size(-1))
        queries += len(alignment)
    if hits is None or queries == 0:
        return {"rate": hits, "chance": float("nan"), "queries": 0}
    return {"rate": hits / queries, "chance": chance / queries, "queries": queries}


def head_scores(maps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per stack, layer and head, each measure averaged over ``maps``:
    ``previous`` (:func:`previous_token_score`, self-attention only), ``first`` (weight on key 0),
    ``last`` (on the last key: the source's end symbol in the encoder and cross-attention),
    ``delimiter`` (on :func:`delimiter_positions`), ``sink`` (:func:`sink_score`, causal in the
    decoder's self-attention), ``entropy`` (nats) and ``max_entropy`` (mean ``log`` of the number
    of keys a query may see: the entropy of uniform attention)."""
    sums: dict[tuple[str, int, int], dict[str, list[float]]] = {}
    for attention_map in maps:
        for stack, weights in to_tensors(attention_map).items():  # [L, H, T_q, T_k]
            _, key_tokens = axis_tokens(attention_map, stack)
            n_queries, n_keys = weights.shape[-2:]
            mask = may_attend(stack, n_queries, n_keys)  # [T_q, T_k]
            visible = mask.sum(-1).double()  # [T_q]: how many keys each query sees
            scores = {
                "first": key_mass(weights, [0]),
                "last": key_mass(weights, [n_keys - 1]),
                "delimiter": key_mass(weights, delimiter_positions(key_tokens)),
                "sink": sink_score(weights, mask)[0],
                "entropy": attention_entropy(weights),
                "max_entropy": torch.full(weights.shape[:2], visible.log().mean().item()),
            }
            if stack != "cross" and n_queries > 1:
                scores["previous"] = previous_token_score(weights)
            layers, heads = weights.shape[:2]
            for layer in range(layers):
                for head in range(heads):
                    row = sums.setdefault((stack, layer, head), {})
                    for name, value in scores.items():
                        row.setdefault(name, []).append(float(value[layer, head]))
    return [
        {"stack": stack, "layer": layer, "head": head}
        | {name: sum(values) / len(values) for name, values in row.items()}
        for (stack, layer, head), row in sums.items()
    ]


# -- causal tests: a head zeroed, and induction ---------------------------------------------


def attention_modules(model: nn.Module) -> dict[tuple[str, int], MultiHeadAttention]:
    """Every attention of ``model`` by (stack, layer), the stacks named as the maps name them:
    ``encoder`` and ``decoder`` for self-attention, ``cross`` for the decoder's cross-attention."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            stack, _, layer, kind = name.split(".")  # e.g. decoder.layers.0.cross_attention
            found["cross" if kind == "cross_attention" else stack, int(layer)] = module
    return found


@contextmanager
def heads_zeroed(attention: MultiHeadAttention, heads: Iterable[int]) -> Iterator[None]:
    """Inside the block, each head in ``heads`` of ``attention`` outputs zero: its slice of the
    concatenated heads ``[B, T, H·d_v]`` is zeroed before ``W^O``, as if its value vectors were
    all zero (the head masks of Michel et al. 2019). The model is unchanged on leaving."""
    heads = sorted(set(heads))
    if any(not 0 <= head < attention.n_heads for head in heads):
        raise ValueError(f"heads={heads}: this attention has heads 0 to {attention.n_heads - 1}")
    width = attention.d_v

    def zero(module: nn.Module, inputs: tuple[Tensor]) -> tuple[Tensor]:
        merged = inputs[0].clone()  # [B, T, H·d_v]
        for head in heads:
            merged[..., head * width : (head + 1) * width] = 0
        return (merged,)

    handle = attention.out.register_forward_pre_hook(zero)
    try:
        yield
    finally:
        handle.remove()


def head_ablation(model: nn.Module, measure: Callable[[], float]) -> list[dict[str, Any]]:
    """``measure()`` (a held-out loss, say) with each head of ``model`` zeroed in turn
    (:func:`heads_zeroed`): one row per stack, layer and head, with ``value`` and ``change``
    (``value`` minus the intact model's ``measure()``, so positive when the head mattered for a
    loss)."""
    intact = measure()
    rows = []
    for (stack, layer), attention in attention_modules(model).items():
        for head in range(attention.n_heads):
            with heads_zeroed(attention, [head]):
                value = measure()
            rows.append(
                {"stack": stack, "layer": layer, "head": head, "value": value,
                 "change": value - intact}
            )  # fmt: skip
    return rows


def repeated_random_tokens(
    vocab_size: int, length: int, batch: int, seed: int = 0, low: int = 0
) -> Tensor:
    """``[batch, 2·length]``: ``length`` uniformly random tokens from ``low`` to ``vocab_size -
    1``, then the same ``length`` again. After the first copy, a model that finds the earlier
    occurrence of the current token and predicts what followed it (an *induction head*, Olsson
    et al. 2022) can predict the whole second copy; nothing else in the sequence can."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(low, vocab_size, (batch, length), generator=generator)  # [B, n]
    return torch.cat([first, first], dim=1)  # [B, 2n]


@torch.no_grad()
def prefix_matching_scores(model: nn.Module, tokens: Tensor, length: int) -> Tensor:
    """``[L, H]``: each decoder head's mean weight, from every query ``t`` of the second copy of
    :func:`repeated_random_tokens`, on key ``t - length + 1``: the token that followed the earlier
    occurrence of token ``t`` (Olsson et al.'s prefix-matching score). Uniform causal attention
    scores :func:`uniform_prefix_matching`."""
    was_training = model.training
    model.eval()
    _, maps = model(tokens.to(_device(model)), return_attention=True)
    model.train(was_training)
    weights = torch.stack(maps["decoder"]).float().cpu()  # [L, B, H, 2n, 2n]
    queries = torch.arange(length, 2 * length)  # [n]: the second copy
    return weights[..., queries, queries - length + 1].mean(dim=(1, -1))  # [L, H]


def uniform_prefix_matching(length: int) -> float:
    """What uniform causal attention scores in :func:`prefix_matching_scores`: query ``t`` sees
    ``t + 1`` keys, so ``1 / (t + 1)`` averaged over the second copy's queries."""
    return sum(1 / (t + 1) for t in range(length, 2 * length)) / length


@torch.no_grad()
def copy_losses(model: nn.Module, tokens: Tensor, length: int) -> tuple[float, float]:
    """The mean next-token loss (nats) over the first copy and over the second copy of
    :func:`repeated_random_tokens`: random tokens cost about ``log V`` in the first; a model that
    copies in context pays far less in the second. The second copy's first token is left out
    (what precedes it says nothing about it), so both means cover ``length - 1`` predictions."""
    was_training = model.training
    model.eval()
    tokens = tokens.to(_device(model))
    logits = model(tokens[:, :-1]).float()  # [B, 2n - 1, V]
    model.train(was_training)
    losses = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # [B, 2n - 1]: the loss of predicting token t + 1
    return losses[:, : length - 1].mean().item(), losses[:, length:].mean().item()


def train_on_repeats(
    model: nn.Module, steps: int, length: int, batch: int = 64, lr: float = 3e-3
) -> list[float]:
    """Train ``model`` (decoder-only) for ``steps`` AdamW updates on fresh
    :func:`repeated_random_tokens` each step (seeds 0, 1, ...): the task on which Olsson et al.
    watch induction heads form. Returns the training loss of each update."""
    vocab = model.config.vocab_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        tokens = repeated_random_tokens(vocab, length, batch, seed=step)  # [B, 2n]
        logits = model(tokens[:, :-1])  # [B, 2n - 1, V]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def induction_rule(tokens: Tensor, context: int = 3) -> tuple[Tensor, Tensor]:
    """What copying would predict in a text: at each position ``t`` of each row, find the latest
    earlier position ``j < t`` whose last ``context`` tokens equal those ending at ``t``, and
    predict that token ``t + 1`` is token ``j + 1`` (an induction head's rule, by lookup).

    Returns ``found`` and ``right``, both ``[B, T - 1]`` booleans for the predictions of tokens
    ``1 .. T - 1``: whether an earlier occurrence exists in the row, and whether the rule then
    predicts the next token correctly (False where none was found)."""
    batch, length = tokens.shape
    found = torch.zeros(batch, length - 1, dtype=torch.bool)
    right = torch.zeros(batch, length - 1, dtype=torch.bool)
    for b, row in enumerate(tokens.tolist()):
        for t in range(context - 1, length - 1):
            tail = row[t - context + 1 : t + 1]
            for j in range(t - 1, context - 2, -1):
                if row[j - context + 1 : j + 1] == tail:
                    found[b, t], right[b, t] = True, row[j + 1] == row[t + 1]
                    break
    return found, right
