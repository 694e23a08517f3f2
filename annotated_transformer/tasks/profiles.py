"""Run sizes: how big each task's run is under each profile, in one shape, keyed by task name.

Two families, one shape. :data:`TRAINING` sizes chapter 08's runs (and chapter 10's smoke
models); :data:`ABLATION` sizes every run of chapter 09's studies. A *profile* names a budget:
``smoke`` (seconds on a CPU: the book and CI), ``cpu`` (a real run on a 2-core CPU in about 15
minutes), ``reference`` (the course's reference results: at most 90 minutes per run on 2 CPU
cores), ``gpu`` (the full run on one GPU). Under each profile, each task (by the name users type: ``copy``,
``tinyshakespeare``, ``multi30k``, ``ptb``, ``wikitext-2``, ``cmn-eng``) has a :data:`RunSize`::

    {"data": task options, "model": TransformerConfig fields, "train": TrainConfig fields,
     "evaluation": how the run is measured (test_sentences, bleu_resamples, eval_batches, ...)}

Adding a profile (say ``reference``, for long CPU runs) is adding one key with a size per task:
:func:`run_size` and the chapters find it by name, and its records get keys of their own.
"""

from __future__ import annotations

import copy
from typing import Any

from .task_options import canonical_task, task_spec

RunSize = dict[str, dict[str, Any]]
SECTIONS = ("data", "model", "train", "evaluation")


def _size(data=None, model=None, train=None, evaluation=None) -> RunSize:
    return {
        "data": data or {},
        "model": model or {},
        "train": train or {},
        "evaluation": evaluation or {},
    }


def _small(d_model: int, n_layers: int, dropout: float, d_ff: int | None = None) -> dict:
    return {
        "d_model": d_model,
        "n_heads": 4,
        "n_layers": n_layers,
        "d_ff": d_ff or 4 * d_model,
        "dropout": dropout,
    }


# Chapter 08. `cpu`: all four of chapter 08's tasks in about 13 minutes on 2 idle cores
# (measured); `gpu`: Tiny Shakespeare follows nanoGPT's character model. The sizes of the stored
# records (results/*.json) are these: changing one gives those runs new keys.
_SMOKE_TRAIN = {"max_steps": 60, "warmup": 10, "lr": 3e-3, "eval_every": 30, "eval_batches": 4}
TRAINING: dict[str, dict[str, RunSize]] = {
    "smoke": {
        "copy": _size(train={"max_steps": 250}),
        "tinyshakespeare": _size(
            {"context_length": 64, "batch_size": 16}, _small(64, 2, 0.0), _SMOKE_TRAIN
        ),
        "multi30k": _size(
            {"bpe_vocab_size": 1000, "max_train_pairs": 4000, "max_tokens": 1024},
            _small(64, 2, 0.0),
            {**_SMOKE_TRAIN, "keep_evaluations": 2},  # the averaging path, proved
            {"test_sentences": 64},
        ),
        "ptb": _size(
            {"context_length": 32, "batch_size": 8},
            _small(32, 1, 0.0),
            {"max_steps": 40, "warmup": 10, "lr": 3e-3, "eval_every": 20, "eval_batches": 2},
        ),
    },
    "cpu": {
        "copy": _size(train={"max_steps": 400}),
        "tinyshakespeare": _size(
            {"context_length": 128, "batch_size": 16},
            _small(128, 3, 0.0),
            {"max_steps": 1500, "warmup": 100, "lr": 2e-3, "eval_every": 250, "eval_batches": 10},
        ),
        "multi30k": _size(
            {"bpe_vocab_size": 4000, "max_tokens": 2048},
            _small(128, 3, 0.1),
            {"max_steps": 1200, "warmup": 150, "lr": 1e-3, "eval_every": 300, "eval_batches": 10},
            {"test_sentences": None},  # the whole test split
        ),
        "ptb": _size(
            {"context_length": 64, "batch_size": 16},
            _small(128, 2, 0.1),
            {"max_steps": 600, "warmup": 60, "lr": 3e-3, "eval_every": 200, "eval_batches": 10},
        ),
    },
    "gpu": {
        "copy": _size(train={"max_steps": 400}),
        "tinyshakespeare": _size(
            {"context_length": 256, "batch_size": 64},
            {"d_model": 384, "n_heads": 6, "n_layers": 6, "d_ff": 1536, "dropout": 0.2},
            {"max_steps": 5000, "warmup": 100, "lr": 1e-3, "min_lr": 1e-4, "eval_every": 250},
        ),
        "multi30k": _size(
            {"bpe_vocab_size": 8000, "max_tokens": 8192},
            {"d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 2048, "dropout": 0.1},
            {"max_steps": 10000, "warmup": 1000, "lr": 5e-4, "eval_every": 500},
            {"test_sentences": None},
        ),
        "ptb": _size(
            {"context_length": 256, "batch_size": 64},
            {"d_model": 512, "n_heads": 8, "n_layers": 6, "d_ff": 2048, "dropout": 0.4},
            {"max_steps": 10000, "warmup": 500, "lr": 5e-4, "eval_every": 500},
        ),
    },
}
# The corpora chapter 08 does not run take their sibling's sizes: WikiText-2 is a word-level
# corpus like the Penn Treebank, cmn-eng a small parallel corpus like Multi30k.
for _sizes in TRAINING.values():
    _sizes["wikitext-2"] = copy.deepcopy(_sizes["ptb"])
    _sizes["cmn-eng"] = copy.deepcopy(_sizes["multi30k"])

# `reference`: the course's reference results (chapter 08 leads with them), each the best recipe
# found for at most 90 minutes of wall time on 2 CPU cores with bf16 autocast. Each recipe was
# chosen by short probes stored in results/reference/probes/ (scripts/reference_probes.py). A task
# appears here once its recipe is measured; the others are not sized for this profile.
# Tiny Shakespeare: nanoGPT's 6 x 384 shape, GPT-style (N(0, 0.02) init, no embedding scaling)
# with rotary positions; dropout only where the paper puts it (sublayer outputs and embeddings:
# on a CPU, dropout on the [B, H, T, T] weights and the [B, T, d_ff] hidden layer costs as much as
# the model). Its second recipe, after the lever probes (chapter 08): Muon for the layers' weight
# matrices, ReLU^2, 1375 updates of 32 x 256 characters (about 11M characters, 11 epochs of the
# training split) evaluated every 125, and the last four evaluations kept so that their mean can
# replace the best one (chosen on validation). The first recipe (AdamW, GELU, 3500 updates,
# record tinyshakespeare-reference-seed0-b867757fff44) is the one its probes changed.
# The decoders' GPT style (Tiny Shakespeare, PTB): N(0, 0.02) init, no embedding scaling, rotary
# positions, GELU, dropout only on sublayer outputs and embeddings; AdamW as nanoGPT sets it.
_GPT_STYLE = {
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "init": "normal",
    "scale_embeddings": False,
    "positional": "rope",
    "activation": "gelu",
}
_GPT_TRAINING = {
    "weight_decay": 0.1,
    "betas": [0.9, 0.99],
    "precision": "bf16",
    "grad_clip": 1.0,
    "log_every": 25,
}
TRAINING["reference"] = {
    "tinyshakespeare": _size(
        {"context_length": 256, "batch_size": 32, "batches_per_epoch": 1000},
        {
            "d_model": 384,
            "n_heads": 6,
            "n_layers": 6,
            "d_ff": 1536,
            "dropout": 0.2,
            **_GPT_STYLE,
            "activation": "relu2",
        },
        {
            "lr": 2e-3,
            "min_lr": 2e-4,
            "warmup": 100,
            "max_steps": 1375,
            "optimizer": "muon",
            **_GPT_TRAINING,
            "eval_every": 125,
            "eval_batches": None,
            "keep_evaluations": 4,
        },
    ),
    # Multi30k: a pre-norm 4 + 4 layer encoder-decoder of width 256 (9.4M parameters, shared
    # embeddings over a joint 8k BPE), rotary positions and GELU (probes: valid loss 3.75 after
    # 250 updates against 4.19 with sinusoidal positions and ReLU); batches of 6000 padded
    # positions, 3100 updates (about 36 epochs), dropout 0.2 on sublayer outputs and embeddings
    # only, label smoothing 0.1; the whole test split decoded greedily and with beam search.
    "multi30k": _size(
        {"bpe_vocab_size": 8000, "max_tokens": 6000},
        {
            "d_model": 256,
            "n_heads": 8,
            "n_layers": 4,
            "d_ff": 1024,
            "dropout": 0.2,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "norm_position": "pre",
            "positional": "rope",
            "activation": "gelu",
        },
        {
            "lr": 1e-3,
            "min_lr": 1e-5,
            "warmup": 400,
            "max_steps": 3100,
            "weight_decay": 0.01,
            "label_smoothing": 0.1,
            "precision": "bf16",
            "grad_clip": 1.0,
            "log_every": 25,
            "eval_every": 250,
            "eval_batches": None,
        },
        {"test_sentences": None},  # the whole test split
    ),
    # Penn Treebank: a 6-layer decoder of width 256 (7.3M parameters with the 10k-word embedding
    # tied to the output layer), GPT-style like Tiny Shakespeare, dropout 0.3 on sublayer outputs
    # and embeddings (probes after 600 updates: valid loss 4.985 at 6 x 256, 4.914 at 6 x 384 but
    # 1.5x slower per update and 29 MB in fp16, 5.066 at 6 x 384 with dropout 0.5); 6000 updates
    # of 32 x 128 words (about 26 epochs of the 930k-word training split).
    "ptb": _size(
        {"context_length": 128, "batch_size": 32, "batches_per_epoch": 1000},
        {
            "d_model": 256,
            "n_heads": 4,
            "n_layers": 6,
            "d_ff": 1024,
            "dropout": 0.3,
            **_GPT_STYLE,
        },
        {
            "lr": 1e-3,
            "min_lr": 1e-4,
            "warmup": 200,
            "max_steps": 6000,
            **_GPT_TRAINING,
            "eval_every": 300,
            "eval_batches": None,
        },
    ),
}
# WikiText-2: the Penn Treebank recipe (one recipe, two corpora) on a schedule the CPU budget holds.
# Its 33k-word vocabulary makes the tied embedding 8.5M of 13.2M parameters, so the shipped file
# is weight-only int8 (pretrained.shipping_dtype). The first run (on an H100: 6000 updates, about
# 12 epochs of the 2.1M training words) was still improving at its end; on the 2-core Xeon an
# update costs 1.78 times a PTB update (chapter 08's estimate: 157 min for 6000), so the 90-minute
# budget holds about 3400 at that run's pace. The same Xeon has run far slower on other days: two
# CPU attempts, stopped, measured 2.2 s an update (updates 50 to 150, cosine to 2700) and 2.5 s
# (updates 25 to 75, cosine to 2000) where the PTB run's pace gives 1.6. The CPU run's cosine ends
# at 1500 updates, a quarter of the H100 run's: about 63 minutes at 2.5 s, with room for a slower
# stretch and for the evaluations of the larger validation split.
TRAINING["reference"]["wikitext-2"] = copy.deepcopy(TRAINING["reference"]["ptb"])
TRAINING["reference"]["wikitext-2"]["train"]["max_steps"] = 1500
# Chinese->English: the Multi30k recipe unchanged (no probe of its own): a joint 8k BPE over
# jieba-segmented Chinese and English, 4 + 4 x 256, rotary positions, GELU, 3100 updates of 6000
# positions. The course's cmn-eng training split has as many pairs as Multi30k's (28.9k) but
# shorter ones, so the same updates see it more often (the CPU run reached epoch 39 at update 2000,
# where Multi30k's reference run was in epoch 24): the model kept is the best on the validation
# split. Its first run (on an H100, 3100 updates
# planned) was best at update 1500 and stopped early at 2750: on this data the recipe overfits,
# and a probe of its own would try more regularisation. On the CPU its cosine ends at update 2000,
# past that best: 70 minutes on the 2-core Xeon at about 2 s an update, with the test decoding.
TRAINING["reference"]["cmn-eng"] = copy.deepcopy(TRAINING["reference"]["multi30k"])
TRAINING["reference"]["cmn-eng"]["train"]["max_steps"] = 2000

# The PTB reference run's twin trained without the causal mask (chapter 08's leak, shown on PTB
# itself): the same model and recipe on a shorter schedule. Reading the next word off the input
# needs no 80-minute budget, and a twin trained less would, if anything, understate the leak.
LEAK_TWIN_UPDATES = 1500

# The source report's PTB "encoder-only (BERT-like)" model, as its section 4.4 describes it (4
# layers, d_model 256, 8 heads, d_ff 1024, dropout 0.1, windows of 128), trained on BERT's
# masked-token objective: chapter 08's test of its test perplexity of 40.8 (token accuracy
# 48.7 %). What the report leaves unsaid (positions, norms, optimiser, schedule, 6000 updates of
# 32 windows: its 30 epochs are about 6800) is the PTB reference recipe's.
REPORT_MASKED_LM: dict[str, dict[str, Any]] = {
    "data": {"objective": "masked", "mask_probability": 0.15},
    "model": {"n_layers": 4, "d_model": 256, "n_heads": 8, "d_ff": 1024, "dropout": 0.1},
}


def masked_lm_config(task_name: str, task: Any, profile: str, seed: int) -> dict[str, Any]:
    """The record config of the report's masked model on ``task`` (built with
    ``REPORT_MASKED_LM["data"]``): :func:`training_config` with the report's data and model."""
    config = training_config(task_name, task, profile, seed)
    config["data"] = {**config["data"], **REPORT_MASKED_LM["data"]}
    config["model"] = {**config["model"], **REPORT_MASKED_LM["model"]}
    return config


def _ablation(
    translation: RunSize,
    language_model: RunSize,
    train: dict,
    cmn_eng_train: dict | None = None,
) -> dict[str, RunSize]:
    """A profile of chapter 09: Multi30k's size, Tiny Shakespeare's, the ``train`` settings both
    share; cmn-eng takes Multi30k's size with ``cmn_eng_train`` over its ``train`` section."""
    for size in (translation, language_model):
        size["train"] = {**train, **size["train"]}
    cmn_eng = copy.deepcopy(translation)
    cmn_eng["train"].update(cmn_eng_train or {})
    return {
        "multi30k": translation,
        "cmn-eng": cmn_eng,
        "tinyshakespeare": language_model,
    }


# Chapter 09. `smoke`: seconds per run on a 2-core CPU, proves the pipeline, measures nothing;
# `cpu`: about a minute and a half per run (400 updates measured 65 s on a shared 2-core CPU), a
# 15-run study in under half an hour; `gpu`: one H100, bf16, a minute or two per run. The stored
# records (results/ablation/*.json) carry these sizes in their configs and keys.
ABLATION: dict[str, dict[str, RunSize]] = {
    "smoke": _ablation(
        _size(
            {"bpe_vocab_size": 600, "max_train_pairs": 2000, "max_tokens": 512, "max_length": 32},
            {"d_model": 32, "d_ff": 64},
            {"max_steps": 16, "warmup": 4, "lr": 3e-3, "eval_every": 8},
            {"test_sentences": 64, "bleu_resamples": 20, "max_new_tokens": 16},
        ),
        _size(
            {"context_length": 64, "batch_size": 16},
            {"d_model": 32, "d_ff": 64},
            {"max_steps": 16, "warmup": 4, "lr": 3e-3, "eval_every": 8},
            {"eval_batches": 8},
        ),
        {"eval_batches": 2, "log_every": 4},
    ),
    "cpu": _ablation(
        _size(
            {"bpe_vocab_size": 2000, "max_train_pairs": 10000, "max_tokens": 1024},
            {"d_model": 64, "d_ff": 256},
            {"max_steps": 600, "warmup": 60, "lr": 2e-3, "eval_every": 150},
            {"test_sentences": None, "bleu_resamples": 100},
        ),
        _size(
            {"context_length": 128, "batch_size": 16},
            {"d_model": 64, "d_ff": 256},
            {"max_steps": 500, "warmup": 50, "lr": 2e-3, "eval_every": 100},
            {"eval_batches": 40},
        ),
        {"eval_batches": 10, "log_every": 20},
    ),
    "gpu": _ablation(
        _size(
            {"bpe_vocab_size": 8000, "max_tokens": 4096},
            {"d_model": 256, "d_ff": 1024},
            {"max_steps": 2500, "warmup": 250, "lr": 1e-3, "eval_every": 250, "precision": "bf16"},
            {"test_sentences": None, "bleu_resamples": 200},
        ),
        _size(
            {"context_length": 256, "batch_size": 64},
            {"d_model": 256, "d_ff": 1024},
            {"max_steps": 2000, "warmup": 200, "lr": 1e-3, "eval_every": 250, "precision": "bf16"},
            {"eval_batches": None},
        ),
        {"eval_batches": 20, "log_every": 50},
    ),
    # Chosen by the probes of scripts/ablation_probes.py (results/ablation/probes/): baselines far
    # from trivial in a few minutes of 2-core CPU each, bf16. Tiny Shakespeare: the `cpu` size of
    # chapter 08 (3 x 128 over 16 windows of 128 characters), without label smoothing (it taxes
    # the NLL the studies score) and without dropout (2000 updates see 4 M characters, about four
    # passes: nothing to regularise yet); 1500 updates reached 1.782, 3000 reached 1.624.
    # Precision `auto`: bf16 where the CPU has it natively (the probes' Xeon: 1.3x faster than
    # fp32, the same loss), fp32 elsewhere (emulated bf16 ran 10x slower on an AMD EPYC); each
    # record's provenance says which.
    "reference": _ablation(
        # Translation: 3 + 3 x 128 with GELU and rotary positions over a joint 4k BPE, no dropout,
        # updates of 2000 positions. The probes (fp32 on a 2-core AMD EPYC): 3 + 3 x 256 over an
        # 8k BPE, 500 updates (12.5 min), reached greedy test BLEU 29.0 on Multi30k with rotary
        # positions, 14.4 with the paper's sinusoids (below the bar of 20), and only 8.1 on
        # cmn-eng. A model a quarter the cost per token (0.46 s an update against 1.4 s) did as
        # well in half the minutes: Multi30k 28.9 after 750 updates (7 min; 36.1 after 1500, in
        # 13.7), cmn-eng 22.7 after 1500 (12.5 min). So Multi30k's studies, 75 runs, take 750
        # updates (about 7.5 hours: the stored architecture study ran an encoder-decoder in 5.2
        # min, a one-stack model in about 11.5) and the factorial's 48 runs 1500 (about 10). The base
        # has rotary positions: the positional study compares the others against them; Table 3's
        # row E (learned instead of sinusoidal) is read from the positional study, not against
        # this base (ablation.table3_coverage says so).
        _size(
            {"bpe_vocab_size": 4000, "max_train_pairs": None, "max_tokens": 2000},
            {
                "d_model": 128,
                "d_ff": 512,
                "activation": "gelu",
                "dropout": 0.0,
                "positional": "rope",
            },
            {"max_steps": 750, "warmup": 75, "lr": 3e-3, "eval_every": 250},
            {"test_sentences": None, "bleu_resamples": 200},
        ),
        _size(
            {"context_length": 128, "batch_size": 16},
            {"d_model": 128, "d_ff": 512, "dropout": 0.0},
            {
                "max_steps": 2000,
                "warmup": 100,
                "lr": 2e-3,
                "label_smoothing": 0.0,
                "eval_every": 500,
            },
            {"eval_batches": None},
        ),
        {"precision": "auto", "eval_batches": None, "log_every": 50},
        {"max_steps": 1500, "warmup": 150, "eval_every": 500},
    ),
}
# Chapter 03's length-extrapolation experiment (extrapolation.ExtrapolationConfig fields over its
# defaults: 2 x 64 character models at context 64, one per positional encoding).
EXTRAPOLATION: dict[str, dict[str, Any]] = {
    # The chapter's live run: 150 updates, read on the first 8k validation characters, seconds
    # per model. It proves the pipeline and shows the check on models stopped early.
    "smoke": {"eval_characters": 8192, "check_characters": 8192},
    # The stored run (scripts/extrapolation.py): sized for the in-window change to settle, with
    # the rate decayed to min_lr (the run checks that it did); read on the whole validation text.
    "cpu": {
        "steps": 5000,
        "batch_size": 32,
        "warmup": 100,
        "check_every": 500,
        "eval_characters": None,
    },
}
FAMILIES = {"training": TRAINING, "ablation": ABLATION}


def profile_names(family: str = "training") -> list[str]:
    return list(_family(family))


# `auto`, the chapters' default: what this machine can run in minutes, never a long run by
# surprise. The `gpu` sizes were measured on one H100; a GPU with less memory than this (Colab's
# T4 or L4) is also a slower one, and gets the `cpu` sizes, which it runs in a few minutes.
GPU_PROFILE_MIN_GIB = 35  # an A100-40GB reports 39.6 GiB; an L4 22


def resolve_profile(profile: str = "auto", family: str = "training") -> tuple[str, str]:
    """``(profile, why)``. ``auto``: ``smoke`` without a GPU (seconds: the book, CI, a Colab CPU
    runtime); ``cpu`` on Apple silicon (MPS: a laptop runs the CPU sizes in minutes); ``gpu`` on a GPU with at least :data:`GPU_PROFILE_MIN_GIB` GiB of memory (A100,
    H100); ``cpu`` on a smaller one (Colab's T4 or L4). Any other name must be a profile of
    ``family``; an unknown one is refused with the valid names."""
    if profile != "auto":
        if profile not in _family(family):
            raise ValueError(
                f"profile={profile!r} is not one of: auto, {', '.join(_family(family))}"
            )
        return profile, f"profile={profile!r} was asked for"
    import torch  # here, not at import time: the sizes above are plain data

    if not torch.cuda.is_available():
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "cpu", "profile='auto' on Apple silicon (MPS): the cpu profile's sizes"
        return "smoke", "profile='auto' and no GPU: the smoke profile (seconds per run)"
    name = torch.cuda.get_device_name(0)
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30
    if memory >= GPU_PROFILE_MIN_GIB:
        return "gpu", f"profile='auto' on {name} ({memory:.0f} GiB): the gpu profile"
    return "cpu", (
        f"profile='auto' on {name} ({memory:.0f} GiB, under {GPU_PROFILE_MIN_GIB}): the cpu "
        "profile's sizes, minutes on this GPU (the gpu profile is sized for an H100)"
    )


def _family(family: str) -> dict[str, dict[str, RunSize]]:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not one of: {', '.join(FAMILIES)}")
    return FAMILIES[family]


def run_size(profile: str, task: str, family: str = "training") -> RunSize:
    """A copy of the size of ``task``'s run under ``profile``; unknown names are refused with
    the list of known ones."""
    sizes = _family(family)
    if profile not in sizes:
        raise ValueError(f"profile={profile!r} is not one of: {', '.join(sizes)}")
    name = canonical_task(task)
    if name not in sizes[profile]:
        task_spec(task)  # an unknown task: the list of every task
        raise ValueError(
            f"task={task!r} has no {family} size under profile {profile!r}; sized: "
            f"{', '.join(sizes[profile])}"
        )
    return copy.deepcopy(sizes[profile][name])


def check_evaluation(evaluation: dict[str, Any]) -> None:
    """Refuse a bad evaluation setting before anything trains (``test_sentences=-5``)."""
    for key, value in evaluation.items():
        if key == "decode":
            if value != "greedy":
                raise ValueError(f"evaluation.decode={value!r} is not one of: greedy")
            continue
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (key != "bleu_resamples")
        ):
            floor = "0" if key == "bleu_resamples" else "1"
            raise ValueError(
                f"evaluation.{key}={value!r} is not accepted: use an integer >= {floor} or null"
            )


def parse_task_list(tasks: str | list[str], profile: str, family: str = "training") -> list[str]:
    """``"copy,tinyshakespeare"`` (a papermill parameter) -> task names, each checked: an unknown
    name is refused with the tasks this profile sizes."""
    names = [name.strip() for name in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [canonical_task(name) for name in names if name]
    if not names:
        raise ValueError(
            f"tasks={tasks!r} names no task; sized: {', '.join(_family(family)[profile])}"
        )
    for name in names:
        run_size(profile, name, family)
    return names


def training_config(task_name: str, task: Any, profile: str, seed: int) -> dict[str, Any]:
    """The record config of chapter 08's run of ``task`` (its key in the results store): the
    task's defaults overridden by the profile's sizes."""
    size = run_size(profile, task_name)
    check_evaluation(size["evaluation"])
    config = {
        "task": canonical_task(task_name),
        "profile": profile,
        "seed": seed,
        "data": size["data"],
        "model": {**task.model_defaults, **size["model"]},
        "train": {**task.train_defaults, **size["train"]},
    }
    if "test_sentences" in size["evaluation"]:
        config["test_sentences"] = size["evaluation"]["test_sentences"]
    return config
