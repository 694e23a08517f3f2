"""The configurations: the model's (chapter 05) and the training run's (chapter 08).

Two dataclasses, each validated on construction: :class:`TransformerConfig` (the model's shape and
behaviour) and :class:`TrainConfig` (everything else that defines a training run). Every choice is
a name; every name and size is checked here, once, with an error that says which field was wrong,
what it was, and what is accepted. The checks are public functions (:func:`check_choice`,
:func:`check_positive_int`, :func:`check_non_negative_int`, :func:`check_number`,
:func:`check_bool`) so that other modules validate their options the same way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .norms import NORM_CHOICES
from .optim import OPTIMIZER_CHOICES, SCHEDULE_CHOICES
from .positional import POSITIONAL_CHOICES

ARCH_CHOICES = ("encoder-decoder", "decoder-only", "encoder-only")
NORM_POSITION_CHOICES = ("post", "pre")
ACTIVATION_CHOICES = ("relu", "gelu", "relu2")
INIT_CHOICES = ("xavier", "normal")
DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
PRECISION_CHOICES = ("fp32", "bf16", "auto")
MODE_CHOICES = ("auto", "min", "max")
# Field -> its choices, for the command line's --help (each is checked in its class's
# __post_init__).
FIELD_CHOICES = {
    "arch": ARCH_CHOICES,
    "positional": POSITIONAL_CHOICES,
    "norm": NORM_CHOICES,
    "norm_position": NORM_POSITION_CHOICES,
    "activation": ACTIVATION_CHOICES,
    "init": INIT_CHOICES,
    "optimizer": OPTIMIZER_CHOICES,
    "schedule": SCHEDULE_CHOICES,
    "device": DEVICE_CHOICES,
    "precision": PRECISION_CHOICES,
    "early_stopping_mode": MODE_CHOICES,
}
HIGHER_IS_BETTER = ("accuracy", "bleu", "chrf")  # early_stopping_mode="auto" maximises these


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
    d_k: int | None = None  # query and key size per head; defaults to d_model / n_heads
    d_v: int | None = None  # value size per head; defaults to d_model / n_heads (Table 3, row
    # B changes d_k alone: its parameter counts, 58M and 60M against 65M, keep d_v = 64)
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
    activation: str = "relu"  # or "gelu", "relu2" (max(0, x)², Primer)
    qk_norm: bool = False  # RMSNorm each head's queries and keys before their dot product
    bias: bool = True  # biases in the attention and feed-forward projections
    pad_id: int | None = 0  # None: the inputs are never padded
    scale_embeddings: bool = True  # multiply embeddings by √d_model (§3.4)
    tie_embeddings: bool = False  # output projection shares the (target) embedding matrix
    share_embeddings: bool = False  # encoder-decoder: source and target share one embedding
    init: str = "xavier"
    token_rms: float | None = None  # a token vector's rms at the start, √d_model scale included:
    # the embeddings drawn from N(0, (token_rms / scale)²) whatever ``init`` says. None: as
    # ``init`` draws them (Xavier's rule makes it √(2·d_model / (V + d_model)), small for a large
    # vocabulary V); 1.0 is fairseq's N(0, 1/d_model) under the √d_model scale.
    relative_max_distance: int = 16
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        check_choice("arch", self.arch, ARCH_CHOICES)
        check_choice("positional", self.positional, POSITIONAL_CHOICES)
        check_choice("norm", self.norm, NORM_CHOICES)
        check_choice("norm_position", self.norm_position, NORM_POSITION_CHOICES)
        check_choice("activation", self.activation, ACTIVATION_CHOICES)
        check_choice("init", self.init, INIT_CHOICES)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            check_positive_int(name, getattr(self, name))
        for name in (
            "src_vocab_size",
            "tgt_vocab_size",
            "n_encoder_layers",
            "n_decoder_layers",
            "d_k",
            "d_v",
        ):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        check_positive_int("relative_max_distance", self.relative_max_distance)
        for name in (
            "residual",
            "bias",
            "qk_norm",
            "scale_embeddings",
            "tie_embeddings",
            "share_embeddings",
        ):
            check_bool(name, getattr(self, name))
        if self.final_norm is not None:
            check_bool("final_norm", self.final_norm)
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
            if value is not None and not (is_number(value) and 0 <= value < 1):
                raise ValueError(f"{name}={value!r} is not accepted: use a number in [0, 1)")
        if not (is_number(self.norm_eps) and self.norm_eps > 0):
            raise ValueError(f"norm_eps={self.norm_eps!r} is not accepted: use a positive number")
        if self.token_rms is not None:
            check_number("token_rms", self.token_rms, 0.0, low_open=True)
        if not (is_number(self.rope_base) and self.rope_base > 1):
            raise ValueError(f"rope_base={self.rope_base!r} is not accepted: use a number > 1")
        if self.d_model % self.n_heads != 0 and (self.d_k is None or self.d_v is None):
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"accepted are d_model that are multiples of n_heads (each head gets "
                f"d_model / n_heads dimensions), or both head sizes d_k and d_v set"
            )
        if self.positional == "rope" and self.key_size % 2 != 0:
            where = (
                f"d_k={self.d_k}"
                if self.d_k is not None
                else f"d_model / n_heads = {self.d_model} / {self.n_heads} = {self.key_size}"
            )
            raise ValueError(
                f"positional='rope' needs an even head size d_k (it rotates pairs of each "
                f"query's and key's dimensions), but {where} is odd: accepted are an even d_k, "
                f"or (d_k unset) d_model and n_heads with an even d_model / n_heads"
            )
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"positional='sinusoidal' needs an even d_model, got {self.d_model}")
        if self.pad_id is not None:
            smallest_vocab = min(self.source_vocab_size, self.target_vocab_size)
            if not (is_int(self.pad_id) and 0 <= self.pad_id < smallest_vocab):
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
        """``d_model / n_heads``: each head's size unless ``d_k`` or ``d_v`` says otherwise."""
        return self.d_model // self.n_heads

    @property
    def key_size(self) -> int:
        """``d_k``, the size of each head's queries and keys."""
        return self.d_head if self.d_k is None else self.d_k

    @property
    def value_size(self) -> int:
        """``d_v``, the size of each head's values (``n_heads · d_v`` go into ``W^O``)."""
        return self.d_head if self.d_v is None else self.d_v

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


@dataclass
class TrainConfig:
    """Everything that defines a training run (the model's shape is in ``TransformerConfig``)."""

    optimizer: str = "adamw"
    lr: float = 1e-3  # constant: the rate; warmup_cosine: the peak; noam: unused (see noam_factor)
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    schedule: str = "constant"
    warmup: int = 0  # updates of linear warmup (noam, warmup_cosine)
    noam_factor: float = 1.0
    min_lr: float = 0.0  # warmup_cosine: the rate at max_steps
    max_steps: int = 1000  # optimizer updates, not micro-batches
    label_smoothing: float = 0.0
    grad_clip: float | None = None  # max global gradient norm; None: no clipping
    accumulation: int = 1  # micro-batches per optimizer update
    eval_every: int | None = None  # updates between evaluations; None: only at the end
    eval_batches: int | None = None  # batches per evaluation; None: the whole evaluation set
    early_stopping_metric: str = "loss"  # an evaluation metric: loss, perplexity, accuracy, ...
    early_stopping_patience: int | None = None  # evaluations without improvement; None: never
    early_stopping_mode: str = "auto"  # auto: max for accuracy/bleu/chrf, min otherwise
    checkpoint_dir: str | None = None  # None: write nothing (a notebook experiment)
    save_every: int | None = None  # updates between last.pt saves; None: at each evaluation
    # the weights of the last N evaluations kept as checkpoint_dir/eval-<step>.pt, for averaging
    # (training.averaging; the command line's `average`); 0: none kept
    keep_evaluations: int = 0
    seed: int = 0
    device: str = "auto"  # auto: cuda, else mps (Apple silicon), else cpu
    # bf16: autocast to bfloat16 (CUDA; on CPU, CPU autocast); auto: bf16 where the device has it
    # natively (train.native_bf16), else fp32
    precision: str = "fp32"
    compile: bool = False  # torch.compile the model (on CPU it needs a C++ compiler; slow start)
    log_every: int = 10  # updates per history row
    progress: bool = True  # a tqdm progress bar (main process only)

    def __post_init__(self) -> None:
        check_choice("optimizer", self.optimizer, OPTIMIZER_CHOICES)
        check_choice("schedule", self.schedule, SCHEDULE_CHOICES)
        check_choice("device", self.device, DEVICE_CHOICES)
        check_choice("precision", self.precision, PRECISION_CHOICES)
        check_choice("early_stopping_mode", self.early_stopping_mode, MODE_CHOICES)
        for name in ("max_steps", "accumulation", "log_every"):
            check_positive_int(name, getattr(self, name))
        for name in ("eval_every", "eval_batches", "early_stopping_patience", "save_every"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        for name in ("warmup", "seed", "keep_evaluations"):
            check_non_negative_int(name, getattr(self, name))
        for name in ("lr", "eps", "noam_factor"):
            check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("weight_decay", "min_lr"):
            check_number(name, getattr(self, name), low=0.0)
        check_number("label_smoothing", self.label_smoothing, low=0.0, high=1.0)
        if self.grad_clip is not None:
            check_number("grad_clip", self.grad_clip, low=0.0, low_open=True)
        if not (isinstance(self.betas, (tuple, list)) and len(self.betas) == 2):
            raise ValueError(f"betas={self.betas!r} is not accepted: use two numbers in [0, 1)")
        self.betas = tuple(self.betas)
        for beta in self.betas:
            check_number("betas", beta, low=0.0, high=1.0)
        if self.schedule == "noam" and self.warmup < 1:
            raise ValueError(f"warmup={self.warmup} is not accepted with schedule='noam': use >= 1")
        if self.schedule == "warmup_cosine" and self.max_steps <= self.warmup:
            raise ValueError(
                f"schedule='warmup_cosine' needs max_steps > warmup, got max_steps="
                f"{self.max_steps}, warmup={self.warmup}"
            )
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr={self.min_lr} is not accepted: use a value <= lr={self.lr}")
        if not isinstance(self.early_stopping_metric, str) or not self.early_stopping_metric:
            raise ValueError(
                f"early_stopping_metric={self.early_stopping_metric!r} is not accepted: use the "
                f"name of an evaluation metric (loss, perplexity, accuracy)"
            )
        for name in ("compile", "progress"):
            check_bool(name, getattr(self, name))
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = str(self.checkpoint_dir)
            if not self.checkpoint_dir:
                raise ValueError(
                    "checkpoint_dir='' is not accepted: use a directory path, or None to write "
                    "nothing"
                )

    @property
    def maximize(self) -> bool:
        """Whether a larger ``early_stopping_metric`` is better."""
        if self.early_stopping_mode == "auto":
            return self.early_stopping_metric in HIGHER_IS_BETTER
        return self.early_stopping_mode == "max"

    def schedule_arguments(self, d_model: int) -> dict[str, Any]:
        """The keyword arguments of :func:`~annotated_transformer.optim.build_scheduler`."""
        if self.schedule == "noam":
            return {"d_model": d_model, "warmup": self.warmup, "factor": self.noam_factor}
        if self.schedule == "warmup_cosine":
            return {
                "max_lr": self.lr,
                "warmup": self.warmup,
                "total_steps": self.max_steps,
                "min_lr": self.min_lr,
            }
        return {"lr": self.lr}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build from a dict (a checkpoint, a JSON file); unknown keys are an error."""
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


def check_choice(field: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError: field='x' is not one of: a, b, c`` unless ``value`` is in ``choices``."""
    if value not in choices:
        raise ValueError(f"{field}={value!r} is not one of: {', '.join(choices)}")


def check_positive_int(field: str, value: object) -> None:
    """Raise a ValueError naming ``field`` unless ``value`` is an integer > 0 (not a bool)."""
    if not (is_int(value) and value > 0):
        raise ValueError(f"{field}={value!r} is not accepted: use a positive integer")


def check_non_negative_int(field: str, value: object) -> None:
    """Raise a ValueError naming ``field`` unless ``value`` is an integer >= 0 (not a bool)."""
    if not (is_int(value) and value >= 0):
        raise ValueError(f"{field}={value!r} is not accepted: use an integer >= 0")


def check_number(
    field: str, value: object, low: float, high: float = math.inf, low_open: bool = False
) -> None:
    """Raise a ValueError naming ``field`` unless ``value`` is a number in ``[low, high)``
    (``(low, high)`` with ``low_open``); NaN is never in range."""
    if not (is_number(value) and (value > low if low_open else value >= low) and value < high):
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{field}={value!r} is not accepted: use a number in {bracket}{low}, {high})"
        )


def check_bool(field: str, value: object) -> None:
    """Raise a ValueError naming ``field`` unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} is not accepted: use True or False")


def is_int(value: object) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an ``int`` to Python, never a size here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
