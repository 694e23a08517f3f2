"""The benchmark suite's sizes and plans, and the models it compares: ours and ``torch.nn``'s.

Each pair is built to the same shape with the same number of parameters, so that a row compares
implementations, not models.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor, nn

import annotated_transformer as at


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
# Chapter 08's word-level recipe (the Penn Treebank's, run on WikiText-2 too): 6 layers of 256,
# windows of 128 words, 32 to a batch, over WikiText-2's vocabulary; bench_vocabulary sets it
# against PTB's vocabulary (WORD_LEVEL_SMALLER) and against an adaptive softmax.
WORD_LEVEL = Size("word-level", 33278, 256, 4, 6, 1024, 128, 32)
WORD_LEVEL_SMALLER = 10000  # the Penn Treebank's vocabulary


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
    word_level: Size = field(
        default_factory=lambda: WORD_LEVEL
    )  # bench_vocabulary's model and batch
    compile_backend: str = "inductor"  # torch.compile's; smoke: "eager" (traced, not compiled)


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
            word_level=WORD_LEVEL if cuda else replace(WORD_LEVEL, batch=4, note="quick: batch 4"),
        )
    if mode == "smoke":  # seconds: for the test of the suite itself, not for numbers
        tiny = Size("tiny", 17, 16, 2, 1, 64, 8, 2, note="smoke")  # d_ff = 4 d: nanoGPT's MLP
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
            word_level=replace(tiny, name="tiny-words", vocab_size=120),
            compile_backend="eager",  # seconds, no C++ compiler
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


# --- nanoGPT's GPT: read from a path or fetched at run time, never committed -----------------

NANOGPT_URL = "https://raw.githubusercontent.com/karpathy/nanoGPT/master/model.py"


def load_nanogpt(source: str | os.PathLike | None = None) -> tuple[ModuleType | None, str]:
    """nanoGPT's ``model.py`` as a module, and where it came from; ``(None, why)`` without it.

    ``source``: the file, or a nanoGPT checkout that holds it; else ``$AT_NANOGPT``; else the
    file is fetched from GitHub into a temporary folder (a machine with internet). The code is
    nanoGPT's own, so a row compares the implementations a reader would choose between.
    """
    source = source or os.environ.get("AT_NANOGPT")
    if source:
        path = Path(source)
        path = path / "model.py" if path.is_dir() else path
        if not path.is_file():
            return None, f"nanoGPT's model.py not found at {path} (--nanogpt or AT_NANOGPT)"
        origin = str(path)
    else:
        folder = Path(tempfile.mkdtemp(prefix="nanogpt-"))
        path = folder / "model.py"
        try:
            with urllib.request.urlopen(NANOGPT_URL, timeout=10) as response:
                path.write_bytes(response.read())
        except OSError as error:
            return None, (
                f"no nanoGPT model.py: none given (--nanogpt PATH or AT_NANOGPT) and fetching "
                f"{NANOGPT_URL} failed ({type(error).__name__}: {error})"
            )
        origin = NANOGPT_URL
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "GPT") or not hasattr(module, "GPTConfig"):
        return None, f"{origin} has no GPT and GPTConfig: not nanoGPT's model.py"
    return module, origin


def nanogpt_like_config(size: Size) -> at.TransformerConfig:
    """Our decoder-only model in nanoGPT's shape: learned positions, pre-norm with a final norm,
    GELU, biases, tied embeddings, N(0, 0.02) init (the same parameter count)."""
    return replace(decoder_only_config(size), activation="gelu", tie_embeddings=True, init="normal")


def our_nanogpt_like(size: Size) -> nn.Module:
    return at.build_model(nanogpt_like_config(size))


def nanogpt_model(module: ModuleType, size: Size) -> nn.Module:
    """nanoGPT's ``GPT`` at ``size`` (its MLP is 4·d_model wide: ``size.d_ff`` must be that)."""
    if size.d_ff != 4 * size.d_model:
        raise ValueError(f"{size.name}: nanoGPT's MLP is 4 x d_model, not d_ff={size.d_ff}")
    config = module.GPTConfig(
        block_size=size.context,
        vocab_size=size.vocab_size,
        n_layer=size.n_layers,
        n_head=size.n_heads,
        n_embd=size.d_model,
        dropout=0.0,
        bias=True,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        return module.GPT(config)
