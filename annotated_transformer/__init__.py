"""annotated_transformer: the companion package of the annotated-transformer course.

The top level holds the concepts the chapters derive, one module each::

    attention.py      01  scaled dot-product and multi-head attention, the KV cache
    masking.py        02  padding and causal masks (True = may attend)
    positional.py     03  sinusoidal, learned, relative, RoPE, ALiBi, none
    extrapolation.py  03  the length-extrapolation experiment: per-position loss, in-window check
    norms.py          04  LayerNorm and RMSNorm from scratch
    layers.py      04/05  residual sublayers (pre/post norm), feed-forward, encoder/decoder layers
    config.py      05/08  TransformerConfig and TrainConfig, validated; the public check_* helpers
    model.py          05  the three architectures, build_model, the parameter count
    minimal.py        05  the paper's base model on one page, in plain torch
    optim.py          06  Adam/AdamW parameter groups, the Noam and warmup+cosine schedules
    losses.py         07  label smoothing as a KL divergence / cross-entropy
    metrics.py        08  loss, perplexity, accuracy, BLEU/chrF (sacrebleu), confidence intervals
    attention_maps.py 10  trained models' attention as stored maps, head measures, bertviz
    cost.py           11  FLOPs and memory of attention and of whole models, in closed form
    decode.py         12  greedy, beam search and sampling on the KV cache (used from 08 on)
    __main__.py       08  python -m annotated_transformer train|generate|translate|evaluate

The machinery that trains, stores and ships them lives in wings, one subpackage a concern::

    data/             08  data files, tokenizers, corpora, token-budget batches
    tasks/            08  what is trained on and at which size: tasks, profiles, settings
    training/         08  the loop and what keeps a run safe: Trainer, checkpoints, locks
    results/          08  what a run leaves for readers: the results store, shipped models
    ablation/         09  ablation studies over seeds, their statistics, Vaswani et al. Table 3
    book/             --  what only the book needs: its diagrams and the Colab cell

The names below are the building blocks every chapter uses (``at.Trainer``, ``at.build_model``,
...); modules are imported by their path (``from annotated_transformer import cost``,
``from annotated_transformer.results import experiments``). The modules that lived at the top
level before the wings (``at.experiments``, ``at.checkpoint``, ...) are still reachable by their
old names. ``at.diagrams`` is imported on first use, so that the package runs without
matplotlib.
"""

# First, before this package imports torch: on a Mac, what MPS lacks runs on the CPU (torch reads
# the setting once, when it is imported). The chapters' first cell does the same, since a chapter
# imports torch before the package (annotated_transformer.book.colab).
from .training import mps as _mps  # noqa: F401  (sets the fallback when imported)

# isort: split
from .attention import (
    DecoderCache,
    KVCache,
    LayerCache,
    MultiHeadAttention,
    dot_product_attention,
)
from .config import TrainConfig, TransformerConfig
from .decode import beam_search, greedy_decode, sample
from .layers import DecoderLayer, EncoderLayer, FeedForward, LayerWeights, Residual
from .losses import SMOOTHING_CONVENTIONS, LabelSmoothingLoss, entropy, smoothed_targets
from .masking import causal_mask, combine_masks, decoder_mask, padding_mask, to_torch_blocked
from .model import (
    DecoderOnlyTransformer,
    EncoderDecoderTransformer,
    EncoderOnlyTransformer,
    build_model,
    count_parameters,
    parameter_count,
)
from .norms import LayerNorm, RMSNorm, build_norm
from .optim import (
    OPTIMIZER_CHOICES,
    SCHEDULE_CHOICES,
    build_optimizer,
    build_scheduler,
    noam_lr,
    parameter_groups,
    warmup_cosine_lr,
)
from .positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    PositionState,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    sinusoidal_shift_matrix,
    sinusoidal_table,
)
from .training.checkpoint import CheckpointError
from .training.early_stopping import EarlyStopping
from .training.resuming import ResumeMismatch
from .training.run_lock import RunDirectoryLocked
from .training.train import TrainingDiverged, evaluate, seed_everything
from .training.trainer import Trainer

__version__ = "0.1.0"

# Modules by the name they had at the top level before the wings: ``at.experiments`` and
# ``from annotated_transformer import checkpoint`` keep working, imported on first use (PEP 562),
# ``diagrams`` among them because it needs an optional extra (matplotlib).
_MOVED_MODULES = {
    **{
        name: f"training.{name}"
        for name in (
            "checkpoint",
            "distributed",
            "early_stopping",
            "fit",
            "resuming",
            "run_folder",
            "run_lock",
            "run_state",
            "train",
            "trainer",
            "training_log",
        )
    },
    **{
        name: f"tasks.{name}"
        for name in (
            "baselines",
            "copy_task",
            "profiles",
            "settings",
            "task_options",
            "train_settings",
        )
    },
    **{name: f"results.{name}" for name in ("evaluation", "experiments", "pretrained")},
    "diagrams": "book.diagrams",
    "colab": "book.colab",
}


def __getattr__(name: str) -> object:
    """A module by its old top-level name (``at.experiments``), imported on first use."""
    if name in _MOVED_MODULES:
        import importlib

        return importlib.import_module(f".{_MOVED_MODULES[name]}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OPTIMIZER_CHOICES",
    "SCHEDULE_CHOICES",
    "SMOOTHING_CONVENTIONS",
    "ALiBi",
    "CheckpointError",
    "DecoderCache",
    "DecoderLayer",
    "DecoderOnlyTransformer",
    "EncoderDecoderTransformer",
    "EncoderLayer",
    "EarlyStopping",
    "EncoderOnlyTransformer",
    "FeedForward",
    "KVCache",
    "LabelSmoothingLoss",
    "LayerCache",
    "LayerNorm",
    "LayerWeights",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionState",
    "PositionalEncoding",
    "RMSNorm",
    "RelativePositionBias",
    "Residual",
    "ResumeMismatch",
    "RunDirectoryLocked",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "TransformerConfig",
    "alibi_slopes",
    "beam_search",
    "build_model",
    "build_norm",
    "build_optimizer",
    "build_scheduler",
    "causal_mask",
    "combine_masks",
    "count_parameters",
    "decoder_mask",
    "dot_product_attention",
    "entropy",
    "evaluate",
    "greedy_decode",
    "noam_lr",
    "padding_mask",
    "parameter_count",
    "parameter_groups",
    "sample",
    "seed_everything",
    "sinusoidal_shift_matrix",
    "sinusoidal_table",
    "smoothed_targets",
    "to_torch_blocked",
    "warmup_cosine_lr",
]
