"""Attention maps of a trained model: captured, stored as plain data, measured (chapter 10).

A *map* is a JSON-safe dict that a training run stores beside its record
(:meth:`annotated_transformer.experiments.ResultsStore.save_attention`), so that the book shows a
trained model's attention without shipping its weights:

- encoder-decoder (:func:`capture_translation`)::

    {"kind": "encoder-decoder", "source", "translation", "source_tokens", "target_tokens",
     "output_tokens", "encoder": [L][H][S][S], "decoder": [L][H][T][T], "cross": [L][H][T][S]}

  ``target_tokens`` are the decoder's inputs (the start symbol, then the translation);
  ``output_tokens`` what each decoder position predicts (the translation, then the end symbol);
- decoder-only (:func:`capture_text`)::

    {"kind": "decoder-only", "text", "tokens", "decoder": [L][H][T][T]}

Every row of weights is one query's distribution over the keys (queries on the first axis, keys on
the second), rounded to ``decimals`` places so that stored maps and book pages stay small.
Tokens are stored as the text of each piece (``" Zwei"``, ``"\\n"``, ``"</s>"``);
:func:`readable_tokens` turns them into labels for axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .decode import greedy_decode

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
    info: dict[str, Any],
    *,
    translation: str | None = None,
    decimals: int = 3,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """The attention of an encoder-decoder translating ``source`` (see the module docstring).

    The source is encoded as the training batches build it (its pieces, then ``eos`` when
    ``info["source_eos"]``). Without ``translation`` the model translates greedily (up to
    ``max_new_tokens``, by default ``info["max_new_tokens"]`` capped at ``2·S + 10`` as chapter 08
    decodes); with one, the model reads it teacher-forced. Either way one forward pass with
    ``return_attention=True`` gives the maps. ``info`` is a task's ``Task.info`` (``bos_id``,
    ``eos_id``, ``source_eos``, ...).
    """
    was_training = model.training
    model.eval()
    device = _device(model)
    bos_id, eos_id = info["bos_id"], info["eos_id"]
    source_ids = tokenizer.encode(source)
    if info.get("source_eos", True) and eos_id is not None:
        source_ids = [*source_ids, eos_id]
    src = torch.tensor([source_ids], dtype=torch.long, device=device)  # [1, S]
    if translation is None:
        if max_new_tokens is None:
            limit = info.get("max_new_tokens") or 64
            max_new_tokens = min(limit, 2 * src.size(1) + 10)
        decoded = greedy_decode(
            model, src=src, max_new_tokens=max_new_tokens, bos_id=bos_id, eos_id=eos_id
        )[0].tolist()  # bos, the translation, maybe eos
        if eos_id is not None and eos_id in decoded[1:]:
            generated = decoded[1 : decoded.index(eos_id, 1)]
            ended = True
        else:
            generated, ended = decoded[1:], False
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
        "tokens": token_strings(tokenizer, ids),
        "decoder": _rounded(maps["decoder"], decimals),  # [L][H][T][T]
    }


# -- back to tensors, and to bertviz ---------------------------------------------------------


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
