"""Tasks the command line trains on: the synthetic copy task and the course's data sets (ch. 08).

The copy task (:mod:`annotated_transformer.copy_task`) is the instant proof that the whole
pipeline learns; this module builds the data-set tasks and is the one door to every task.

A *task* bundles what training and the command line need: a training data source (see
:mod:`annotated_transformer.train` for the protocol), held-out splits, a tokenizer (a
:class:`~annotated_transformer.data.TokenizerProtocol`), defaults for the model and the training
run, and :class:`~annotated_transformer.task_options.TaskInfo`, the plain data a checkpoint keeps to rebuild the task. Every task is
built by one call, :func:`build_task` ``(name, options, *, seed, arch, tokenizer)``, which checks
the options (:data:`~annotated_transformer.task_options.KIND_OPTIONS`: names and values) before any data is read. ``copy`` and every
data set of :data:`annotated_transformer.data.DATASETS` is a task (:data:`~annotated_transformer.task_options.TASKS`): language
models (``tinyshakespeare``, ``ptb``, ``wikitext-2``) train a decoder-only model, translation
corpora (``multi30k``, ``cmn-eng``) an encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..data.tokenizers import TokenizerProtocol
from .copy_task import copy_task
from .task_options import Task, TaskInfo, check_options, task_spec

# ---------------------------------------------------------------------------------------------
# The course's data sets (annotated_transformer.data)


def language_model_task(
    name: str,
    *,
    seed: int = 0,
    context_length: int = 128,
    batch_size: int = 32,
    batches_per_epoch: int = 1000,
    eval_batch_size: int = 32,
    data_dir: str | None = None,
    objective: str = "next-token",
    mask_probability: float = 0.15,
) -> Task:
    """A language model on a named corpus: random training windows, and held-out splits as
    contiguous windows that predict every token once.

    ``objective="next-token"``: a decoder-only model predicts each next token. ``"masked"``:
    BERT's objective for an encoder-only model (:class:`~annotated_transformer.data.TokenMasking`,
    ``mask_probability`` of the positions): two symbols join the vocabulary, ``[MASK]`` (id
    ``V``) and an id ``V + 1`` that no input holds, the model's ``pad_id``, so the targets of
    the positions not chosen carry no loss; the held-out windows are masked by a fixed generator,
    the same positions in every evaluation, and the loss, perplexity and accuracy the trainer
    reports are those of the masked tokens.

    ``seed`` is unused (the windows are drawn from the trainer's generator); it is accepted so
    that every builder has the same call."""
    from ..data import (
        MaskedWindowSource,
        TokenMasking,
        WindowSource,
        evaluation_windows,
        load_language_model_corpus,
        masked_evaluation_windows,
    )

    corpus = load_language_model_corpus(name, data_dir=data_dir)
    tokenizer = corpus.tokenizer
    tokens = corpus.splits
    windows = WindowSource(tokens["train"], batch_size, context_length, batches_per_epoch)
    held_out = {split: ids for split, ids in tokens.items() if split != "train"}
    if objective == "masked":
        vocab_size = tokenizer.vocab_size
        masking = TokenMasking(vocab_size, vocab_size, vocab_size + 1, mask_probability)
        train: Any = MaskedWindowSource(windows, masking)
        splits = {
            split: list(masked_evaluation_windows(ids, eval_batch_size, context_length, masking))
            for split, ids in held_out.items()
        }
        arch, model_vocab, pad_id = "encoder-only", vocab_size + 2, vocab_size + 1
    else:
        train = windows
        splits = {
            split: list(evaluation_windows(ids, eval_batch_size, context_length))
            for split, ids in held_out.items()
        }
        # pad_id None: windows are never padded; id 0 is a real symbol
        arch, model_vocab, pad_id = "decoder-only", tokenizer.vocab_size, tokenizer.pad_id
    options = {
        "context_length": context_length,
        "batch_size": batch_size,
        "batches_per_epoch": batches_per_epoch,
        "eval_batch_size": eval_batch_size,
        "data_dir": data_dir,
    }
    if objective != "next-token":  # the records of next-token runs keep their old options
        options.update(objective=objective, mask_probability=mask_probability)
    return Task(
        name=name,
        train=train,
        splits=splits,
        tokenizer=tokenizer,
        # A small GPT (nanoGPT's "baby GPT" scale), trainable on a CPU in minutes.
        model_defaults={
            "arch": arch,
            "vocab_size": model_vocab,
            "pad_id": pad_id,
            "max_len": context_length,
            "d_model": 128,
            "n_heads": 4,
            "n_layers": 4,
            "d_ff": 512,
            "dropout": 0.1,
            "norm_position": "pre",
            "tie_embeddings": True,
        },
        train_defaults={
            "lr": 1e-3,
            "weight_decay": 0.1,
            "schedule": "warmup_cosine",
            "warmup": 100,
            "max_steps": 5000,
            "grad_clip": 1.0,
            "eval_every": 250,
            "eval_batches": 20,
            "log_every": 50,
        },
        info=TaskInfo(
            name,
            options,
            pad_id,
            bos_id=None,
            eos_id=None,  # a word-level <eos> ends a line, not the text
            max_new_tokens=200,
        ),
    )


def translation_task(
    name: str,
    *,
    seed: int = 0,
    source: str | None = None,
    target: str | None = None,
    bpe_vocab_size: int = 8000,
    max_tokens: int = 4096,
    max_length: int = 64,
    max_train_pairs: int | None = None,
    data_dir: str | None = None,
    tokenizer: Any = None,
) -> Task:
    """An encoder-decoder on a named parallel corpus, with a joint BPE vocabulary of
    ``bpe_vocab_size`` tokens (the model's ``vocab_size`` follows it).

    ``tokenizer``: a trained one (from a checkpoint), else one is learnt on the training split.
    Training pairs longer than ``max_length`` tokens are dropped, and with ``max_train_pairs`` only
    the first pairs are kept (a quick experiment); held-out splits keep every sentence, batched in order so that their rows line up with ``Task.references``.
    ``seed`` is unused (batches are shuffled by the trainer's generator).
    """
    from ..data import (
        TranslationSource,
        encode_corpus,
        load_translation_corpus,
        train_tokenizer,
        translation_batches,
    )

    corpus = load_translation_corpus(name, source=source, target=target, data_dir=data_dir)
    if max_train_pairs is not None:
        corpus.splits["train"] = corpus.splits["train"][:max_train_pairs]
    if tokenizer is None:
        tokenizer = train_tokenizer(corpus, bpe_vocab_size)
    encoded = encode_corpus(corpus, tokenizer, max_length)
    held_out = [split for split in encoded if split != "train"]
    longest = max(len(ids) for pairs in encoded.values() for pair in pairs for ids in pair)
    max_new_tokens = max(max_length, 2 * longest)  # enough for any held-out target
    return Task(
        name=name,
        train=TranslationSource(encoded["train"], tokenizer, max_tokens),
        splits={
            split: translation_batches(encoded[split], tokenizer, max_tokens) for split in held_out
        },
        tokenizer=tokenizer,
        # Smaller than the paper's base model, for a corpus of 30k sentences (and a laptop).
        model_defaults={
            "arch": "encoder-decoder",
            "vocab_size": tokenizer.vocab_size,
            "pad_id": tokenizer.pad_id,
            "max_len": max_new_tokens + 2,
            "d_model": 256,
            "n_heads": 8,
            "n_layers": 3,
            "d_ff": 1024,
            "dropout": 0.1,
            "norm_position": "pre",
            "share_embeddings": True,  # one joint vocabulary (§3.4)
            "tie_embeddings": True,
        },
        train_defaults={
            "lr": 5e-4,
            "schedule": "warmup_cosine",
            "warmup": 500,
            "max_steps": 10000,
            "label_smoothing": 0.1,  # §5.4
            "grad_clip": 1.0,
            "eval_every": 500,
            "log_every": 50,
            "early_stopping_patience": 5,
        },
        info=TaskInfo(
            name,
            {
                "source": corpus.source,
                "target": corpus.target,
                "bpe_vocab_size": bpe_vocab_size,
                "max_tokens": max_tokens,
                "max_length": max_length,
                "max_train_pairs": max_train_pairs,
                "data_dir": data_dir,
            },
            tokenizer.pad_id,
            tokenizer.bos_id,
            tokenizer.eos_id,
            source_eos=True,  # collate_pairs ends every source with eos
            max_new_tokens=max_new_tokens,
        ),
        references={split: [pair[1] for pair in corpus.splits[split]] for split in held_out},
    )


# ---------------------------------------------------------------------------------------------
# The registry: one builder signature, options checked before any data is read

# Names that records and chapters used before the task names were unified (results/*.json of
# chapter 08 say "shakespeare"); :func:`canonical_task` maps them to the name users type.


def build_task(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    arch: str | None = None,
    tokenizer: TokenizerProtocol | None = None,
) -> Task:
    """Task ``name`` built with ``options`` (see :data:`KIND_OPTIONS`), checked first.

    The one way to build a task, the same call for every task. ``arch``: the model's
    architecture (the copy task's batches depend on it; the others ignore it). ``tokenizer``: a
    trained one (a translation task rebuilt from a checkpoint); else one is learnt.
    """
    spec = task_spec(name)
    options = dict(options or {})
    check_options(spec.name, options)
    if spec.kind == "copy":
        return copy_task(arch=arch or "encoder-decoder", seed=seed, **options)
    if spec.kind == "language-model":
        return language_model_task(spec.name, seed=seed, **options)
    return translation_task(spec.name, seed=seed, tokenizer=tokenizer, **options)


def task_from_info(info: TaskInfo | Mapping[str, Any], tokenizer: Any = None) -> Task:
    """Rebuild the task a checkpoint was trained on (its :class:`TaskInfo`), with its tokenizer."""
    info = TaskInfo.from_dict(info)
    options = dict(info.options)
    seed, arch = options.pop("seed", 0), options.pop("arch", None)
    return build_task(info.name, options, seed=seed, arch=arch, tokenizer=tokenizer)
