"""annotated_transformer: the companion package of the annotated-transformer course.

Each module holds what one chapter teaches::

    attention.py   01  scaled dot-product and multi-head attention, the KV cache
    masking.py     02  padding and causal masks (True = may attend)
    positional.py  03  sinusoidal, learned, relative, RoPE, ALiBi, none
    extrapolation.py 03 the length-extrapolation experiment: per-position loss, in-window check
    norms.py       04  LayerNorm and RMSNorm from scratch
    layers.py      04/05  residual sublayers (pre/post norm), feed-forward, encoder/decoder layers
    config.py      05/08  TransformerConfig and TrainConfig, validated; the public check_* helpers
    model.py       05  the three architectures, build_model, the parameter count
    optim.py       06  Adam/AdamW parameter groups, the Noam and warmup+cosine schedules
    losses.py      07  label smoothing as a KL divergence / cross-entropy
    decode.py      12  greedy, beam search and sampling on the KV cache (used from 08 on)
    data/          08  data files, tokenizers, corpora, token-budget batches
    metrics.py     08  loss, perplexity, accuracy, BLEU/chrF (sacrebleu), confidence intervals
    train.py       08  the functions of training: seeding, one update, evaluation, divergence
    trainer.py     08  the Trainer: the loop (early_stopping.py, resuming.py, run_lock.py,
                       checkpoint.py, run_state.py, distributed.py beside it)
    tasks.py       08  build_task, task_from_info: every task by one call; the data-set tasks
    task_options.py 08 Task, TaskInfo, TASKS, check_options: what a task is and accepts
    copy_task.py   08  copy_task, copy_batch: the synthetic task that proves the pipeline learns
    fit.py         08  fit_task: seed, build the model, train (CLI, chapters 08-10, ablations)
    training_log.py 08 the history rows as TensorBoard curves (train --log tensorboard)
    evaluation.py  08  translate held-out splits (one budget), score_translations (BLEU/chrF)
    settings.py    08  section.key=value routing for --config/--set and papermill overrides
    profiles.py    08  run sizes (smoke / cpu / reference / gpu) per task, for chapters 08-10
    pretrained.py  08  trained models as safetensors + JSON, loaded with no pickle
    baselines.py   08  unigram and bigram count baselines for language models
    __main__.py    08  python -m annotated_transformer train|generate|translate|evaluate
    experiments.py 08  the results store: records with provenance, keyed by their config
    ablation/      09  ablation studies over seeds, their statistics, Vaswani et al. Table 3
    attention_maps.py  10  trained models' attention as stored maps, head measures, bertviz
    cost.py        11  FLOPs and memory of attention and of whole models, in closed form
    diagrams.py    01-12  the book's diagrams, drawn with matplotlib (the ``book`` extra)

The modules of chapters 08-11, and extrapolation.py, are imported by name
(``from annotated_transformer import cost``); the names below are the building blocks every
chapter uses. ``at.diagrams`` is imported on first use, so that the package runs without
matplotlib.
"""

from .attention import (
    DecoderCache,
    KVCache,
    LayerCache,
    MultiHeadAttention,
    dot_product_attention,
)
from .checkpoint import CheckpointError
from .config import TrainConfig, TransformerConfig
from .decode import beam_search, greedy_decode, sample
from .early_stopping import EarlyStopping
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
from .resuming import ResumeMismatch
from .run_lock import RunDirectoryLocked
from .train import TrainingDiverged, evaluate, seed_everything
from .trainer import Trainer

__version__ = "0.1.0"

_LAZY_MODULES = ("diagrams",)  # need an optional extra: imported when first used


def __getattr__(name: str) -> object:
    """``at.diagrams``: the module, imported on first use (PEP 562)."""
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
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
