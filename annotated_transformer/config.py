"""The model configuration: one dataclass, validated on construction (chapter 05).

Every choice is a name; every name and size is checked here, once, with an error that says which
field was wrong, what it was, and what is accepted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .norms import NORM_CHOICES
from .positional import POSITIONAL_CHOICES

ARCH_CHOICES = ("encoder-decoder", "decoder-only", "encoder-only")
NORM_POSITION_CHOICES = ("post", "pre")
ACTIVATION_CHOICES = ("relu", "gelu")
INIT_CHOICES = ("xavier", "normal")


@dataclass
class TransformerConfig:
    """Everything that defines a model's shape and behaviour.

    The defaults are the paper's base model (Vaswani et al. 2017, Table 3), as a decoder-only
    language model; ``arch="encoder-decoder"`` gives the translation model of the paper.
    """

    arch: str = "decoder-only"
    vocab_size: int = 256
    src_vocab_size: int | None = None  # encoder-decoder only; defaults to vocab_size
    tgt_vocab_size: int | None = None  # encoder-decoder only; defaults to vocab_size
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    n_encoder_layers: int | None = None  # defaults to n_layers
    n_decoder_layers: int | None = None  # defaults to n_layers
    d_ff: int = 2048
    dropout: float = 0.1  # on sublayer outputs and on embeddings + positions (§5.4)
    attention_dropout: float | None = None  # on attention weights; defaults to dropout
    activation_dropout: float | None = None  # inside the feed-forward, after the activation;
    # defaults to dropout. The paper drops only sublayer outputs and embeddings (§5.4); setting
    # both of these to 0 keeps exactly its sites (and on a CPU, where random numbers are slow,
    # removes the two largest dropout tensors: [B, H, T, T] and [B, T, d_ff]).
    max_len: int = 512
    positional: str = "sinusoidal"
    norm: str = "layernorm"
    norm_position: str = "post"  # "post": the paper; "pre": GPT-2 and most models since
    norm_eps: float = 1e-5
    final_norm: bool | None = None  # a norm after each stack; defaults to norm_position == "pre"
    residual: bool = True  # False removes the residual connections (an ablation, not a model)
    activation: str = "relu"
    bias: bool = True  # biases in the attention and feed-forward projections
    pad_id: int | None = 0  # None: the inputs are never padded
    scale_embeddings: bool = True  # multiply embeddings by √d_model (§3.4)
    tie_embeddings: bool = False  # output projection shares the (target) embedding matrix
    share_embeddings: bool = False  # encoder-decoder: source and target share one embedding
    init: str = "xavier"
    relative_max_distance: int = 16
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        _check_choice("arch", self.arch, ARCH_CHOICES)
        _check_choice("positional", self.positional, POSITIONAL_CHOICES)
        _check_choice("norm", self.norm, NORM_CHOICES)
        _check_choice("norm_position", self.norm_position, NORM_POSITION_CHOICES)
        _check_choice("activation", self.activation, ACTIVATION_CHOICES)
        _check_choice("init", self.init, INIT_CHOICES)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            _check_positive_int(name, getattr(self, name))
        for name in ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        _check_positive_int("relative_max_distance", self.relative_max_distance)
        for name in ("residual", "bias", "scale_embeddings", "tie_embeddings", "share_embeddings"):
            _check_bool(name, getattr(self, name))
        if self.final_norm is not None:
            _check_bool("final_norm", self.final_norm)
        if self.arch != "encoder-decoder":
            for name in (
                "src_vocab_size",
                "tgt_vocab_size",
                "n_encoder_layers",
                "n_decoder_layers",
            ):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} is accepted only with "
                        f"arch='encoder-decoder'; a {self.arch} model uses vocab_size and n_layers"
                    )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and 0 <= value < 1):
                raise ValueError(f"{name}={value!r} is not accepted: use a number in [0, 1)")
        if not (_is_number(self.norm_eps) and self.norm_eps > 0):
            raise ValueError(f"norm_eps={self.norm_eps!r} is not accepted: use a positive number")
        if not (_is_number(self.rope_base) and self.rope_base > 1):
            raise ValueError(f"rope_base={self.rope_base!r} is not accepted: use a number > 1")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"accepted are d_model that are multiples of n_heads (each head gets "
                f"d_model / n_heads dimensions)"
            )
        if self.positional == "rope" and self.d_head % 2 != 0:
            raise ValueError(
                f"positional='rope' needs an even head size, but d_model / n_heads = "
                f"{self.d_model} / {self.n_heads} = {self.d_head} is odd: choose d_model and "
                f"n_heads so that d_model / n_heads is even"
            )
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"positional='sinusoidal' needs an even d_model, got {self.d_model}")
        if self.pad_id is not None:
            smallest_vocab = min(self.source_vocab_size, self.target_vocab_size)
            if not (_is_int(self.pad_id) and 0 <= self.pad_id < smallest_vocab):
                raise ValueError(
                    f"pad_id={self.pad_id!r} is not accepted: use None or an id in "
                    f"[0, {smallest_vocab})"
                )
        if self.share_embeddings:
            if self.arch != "encoder-decoder":
                raise ValueError(
                    f"share_embeddings=True is accepted only with arch='encoder-decoder', "
                    f"got arch={self.arch!r}"
                )
            if self.source_vocab_size != self.target_vocab_size:
                raise ValueError(
                    f"share_embeddings=True needs one vocabulary, but src_vocab_size="
                    f"{self.source_vocab_size} and tgt_vocab_size={self.target_vocab_size}"
                )

    # Resolved values: the model reads these, so a default of None is resolved in one place.
    @property
    def d_head(self) -> int:
        """``d_k = d_v = d_model / n_heads``."""
        return self.d_model // self.n_heads

    @property
    def source_vocab_size(self) -> int:
        return self.src_vocab_size or self.vocab_size

    @property
    def target_vocab_size(self) -> int:
        return self.tgt_vocab_size or self.vocab_size

    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers or self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_layers

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_dropout_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @property
    def use_final_norm(self) -> bool:
        return self.norm_position == "pre" if self.final_norm is None else self.final_norm

    @property
    def causal(self) -> bool:
        """Whether the model's outputs may depend on earlier positions only."""
        return self.arch != "encoder-only"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Build from a dict (a checkpoint, a papermill parameter); unknown keys are an error."""
        return dataclass_from_dict(cls, values)


def dataclass_from_dict(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)``, with an error that lists unknown keys and the accepted ones."""
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} fields: {', '.join(unknown)}; "
            f"accepted are: {', '.join(sorted(known))}"
        )
    return cls(**values)


def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{field}={value!r} is not one of: {', '.join(choices)}")


def _check_positive_int(field: str, value: object) -> None:
    if not (_is_int(value) and value > 0):
        raise ValueError(f"{field}={value!r} is not accepted: use a positive integer")


def _check_bool(field: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} is not accepted: use True or False")


def _is_int(value: object) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an ``int`` to Python, never a size here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
