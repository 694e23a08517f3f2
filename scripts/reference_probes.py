"""Short probes that chose the reference runs' recipes (chapter 08): each trains a candidate for a
few hundred updates on the real task and stores its history, so the choice can be re-read.

    python scripts/reference_probes.py tinyshakespeare         # every probe of that task, in turn
    python scripts/reference_probes.py tinyshakespeare NAME    # the named probes only
    python scripts/reference_probes.py study tinyshakespeare   # the task's three-seed lever study

A probe runs the schedule of the full run (same warmup and max_steps) and stops after
``PROBE_STEPS`` updates: the learning curves are comparable where the full run would be. A probe
keeps ``last.pt`` in ``checkpoints/probes/TASK-NAME/`` while it trains: stopped (Ctrl-C, a
signal, a lost session), the same command continues it exactly; the folder is removed once the
record is written. A translation probe also decodes the validation split with beam search at its
end (``valid_bleu``, and ``averaged.valid_bleu`` for the mean of its kept weights): on Multi30k
the loss stopped separating the levers, so they are read on validation BLEU.

The lever study (``ablation.levers.LEVER_STUDY``) trains the `reference` profile's recipe and each
of its arms at seeds 0 to 2 to the end of the schedule, one run at a time, into
``results/reference/levers/``; a run already stored is skipped, so the same command goes on
where it stopped.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from annotated_transformer.__main__ import resolve_settings
from annotated_transformer.ablation.levers import (
    LEVER_STUDY,
    LEVER_STUDY_DIRECTORY,
    lever_study_runs,
)
from annotated_transformer.model import build_model
from annotated_transformer.results.decoding import paper_beam_scores
from annotated_transformer.results.probes import PROBES_DIRECTORY
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.task_options import TASKS
from annotated_transformer.training.averaging import average_checkpoints, evaluation_checkpoints
from annotated_transformer.training.checkpoint import load_checkpoint
from annotated_transformer.training.fit import run_configs
from annotated_transformer.training.provenance import code_version, provenance
from annotated_transformer.training.run_lock import (
    RunDirectoryLocked,
    RunLock,
    check_run_directory,
    describe_holder,
)
from annotated_transformer.training.train import seed_everything
from annotated_transformer.training.trainer import Trainer, TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / PROBES_DIRECTORY
CHECKPOINTS = ROOT / "checkpoints" / "probes"  # a probe's run folder while it trains (ignored)
SAVE_EVERY = 100  # updates between saves of last.pt (about 6 minutes at the reference size)


def lever_probes(
    reference: dict, changes: dict[str, dict], steps: int, average: int | None = None
) -> dict[str, dict]:
    """One probe per lever: ``reference`` (the probed recipe's ``model``/``train`` overrides of the
    task's BASE, and ``data`` where it has any) with the lever's ``change`` over it (a ``data``
    change too: the vocabulary's size), on the reference's schedule, stopped after ``steps``
    updates: ``{"reference-<lever>-<steps>": probe}``. With ``average``, each keeps the weights of
    its last ``average`` evaluations and scores their mean as well."""

    def probe(change: dict) -> dict:
        data = {**reference.get("data", {}), **change.get("data", {})}
        return (
            ({"data": data} if data else {})
            | {
                "model": {**reference["model"], **change.get("model", {})},
                "train": {**reference["train"], **change.get("train", {})},
                "steps": steps,
            }
            | ({"average": average} if average else {})
        )

    return {f"reference-{lever}-{steps}": probe(change) for lever, change in changes.items()}


BASE = {
    "tinyshakespeare": {
        "data": {"context_length": 256, "batch_size": 32, "batches_per_epoch": 1000},
        "model": {
            "d_model": 384,
            "n_heads": 6,
            "n_layers": 6,
            "d_ff": 1536,
            "dropout": 0.2,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
        },
        "train": {
            "lr": 1e-3,
            "min_lr": 1e-4,
            "warmup": 100,
            "max_steps": 4300,
            "weight_decay": 0.1,
            "betas": [0.9, 0.99],
            "precision": "bf16",
            "grad_clip": 1.0,
            "log_every": 25,
        },
    },
}
BASE["multi30k"] = {
    "data": {"bpe_vocab_size": 8000, "max_tokens": 6000},
    "model": {
        "d_model": 256,
        "n_heads": 8,
        "n_layers": 4,
        "d_ff": 1024,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "norm_position": "pre",
    },
    "train": {
        "lr": 1e-3,
        "min_lr": 1e-5,
        "warmup": 400,
        "max_steps": 3300,
        "weight_decay": 0.01,
        "label_smoothing": 0.1,
        "precision": "bf16",
        "grad_clip": 1.0,
        "log_every": 25,
        "eval_batches": 10,
        "early_stopping_patience": None,
    },
}
PROBES = {
    "tinyshakespeare": {
        "xavier-sinusoidal": {},
        "normal-learned-gelu": {
            "model": {
                "init": "normal",
                "scale_embeddings": False,
                "positional": "learned",
                "activation": "gelu",
            }
        },
        "normal-rope-gelu": {
            "model": {
                "init": "normal",
                "scale_embeddings": False,
                "positional": "rope",
                "activation": "gelu",
            }
        },
        "normal-rope-gelu-lr2e-3": {
            "model": {
                "init": "normal",
                "scale_embeddings": False,
                "positional": "rope",
                "activation": "gelu",
            },
            "train": {"lr": 2e-3, "min_lr": 2e-4},
        },
    },
}
# The reference recipe (3500 updates) was lowest at update 1600 (1.4898) and 0.11 higher by its
# end: it overfits with the learning rate still high. The schedule lever, alone: the same recipe
# with its cosine ending at update 2000, trained to the end ("steps": a probe that runs the whole
# schedule, since an overfit shows only late).
REFERENCE_TINYSHAKESPEARE = {
    "model": PROBES["tinyshakespeare"]["normal-rope-gelu-lr2e-3"]["model"],
    "train": {"lr": 2e-3, "min_lr": 2e-4, "max_steps": 3500, "eval_every": 200,
              "eval_batches": None},
}  # fmt: skip
PROBES["tinyshakespeare"]["reference-schedule-2000"] = {
    "model": REFERENCE_TINYSHAKESPEARE["model"],
    "train": {**REFERENCE_TINYSHAKESPEARE["train"], "max_steps": 2000},
    "steps": 2000,
}
# The levers of the reference-results issue, one at a time against the reference recipe, each run
# on the full schedule to update 1600, where the reference was at its best (1.4898): Muon for the
# layers' matrices (its update matched to AdamW's rms, so the same rate), QK-norm, ReLU², more
# dropout against the overfit, and tokens started at rms 1. Defined before any of them has run.
PROBES["tinyshakespeare"] |= lever_probes(
    REFERENCE_TINYSHAKESPEARE,
    {
        "muon": {"train": {"optimizer": "muon"}},
        "qk-norm": {"model": {"qk_norm": True}},
        "relu2": {"model": {"activation": "relu2"}},
        "dropout-0.3": {"model": {"dropout": 0.3}},
        "token-rms-1": {"model": {"token_rms": 1.0}},
    },
    1600,
)
# Checkpoint averaging, measured inside a probe at no cost to its training: the weights of its
# last five evaluations kept ("average": 5), their mean scored beside the last weights. Evaluating
# every 100 updates instead of 200 changes no update, and puts the five at updates 1200 to 1600.
# Defined before it ran, on the next probe in the queue (dropout 0.3).
PROBES["tinyshakespeare"]["reference-dropout-0.3-1600"]["train"]["eval_every"] = 100
PROBES["tinyshakespeare"]["reference-dropout-0.3-1600"]["average"] = 5
# Penn Treebank (929k training words, 10k vocabulary): the question is how much regularisation a
# model needs that sees the corpus ~25 times in 90 minutes. Windows of 128 words (short enough for
# the math attention kernel), 32 per batch.
BASE["ptb"] = {
    "data": {"context_length": 128, "batch_size": 32, "batches_per_epoch": 1000},
    "model": {
        "d_model": 384,
        "n_heads": 6,
        "n_layers": 6,
        "d_ff": 1536,
        "dropout": 0.3,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "init": "normal",
        "scale_embeddings": False,
        "positional": "rope",
        "activation": "gelu",
    },
    "train": {
        "lr": 1e-3,
        "min_lr": 1e-4,
        "warmup": 200,
        "max_steps": 6000,
        "weight_decay": 0.1,
        "betas": [0.9, 0.99],
        "precision": "bf16",
        "grad_clip": 1.0,
        "log_every": 25,
        "eval_every": 300,
        "eval_batches": None,
    },
}
PROBES["ptb"] = {
    "d384-l6-drop0.3": {},
    "d384-l6-drop0.5": {"model": {"dropout": 0.5}},
    "d256-l4-drop0.3": {"model": {"d_model": 256, "n_heads": 4, "n_layers": 4, "d_ff": 1024}},
    # the shipped model's budget (~20 MB in fp16) holds about 10M parameters: 6 x 384 over a
    # 10k vocabulary has 14.5M, 6 x 256 has 7.3M
    "d256-l6-drop0.3": {"model": {"d_model": 256, "n_heads": 4, "n_layers": 6, "d_ff": 1024}},
}
PROBES["multi30k"] = {
    "d256-l4-sinusoidal": {},
    "d256-l4-rope-gelu": {"model": {"positional": "rope", "activation": "gelu"}},
}
# Multi30k's levers, against its reference recipe (the reference profile: dropout 0.2, rotary
# positions, GELU, 3100 updates evaluated every 250), each stopped at update 1000, where the
# reference run's validation loss was 1.748 on its way to a plateau of about 1.62 from update 1500:
# token embeddings started at rms 1 (chapter 09's study measured +5.2 BLEU at its size) and Muon.
# Defined before either has run.
REFERENCE_MULTI30K = {
    "model": {"positional": "rope", "activation": "gelu", "dropout": 0.2},
    "train": {
        "max_steps": 3100,
        "eval_every": 250,
        "eval_batches": None,
        "early_stopping_patience": 5,
    },
}
PROBES["multi30k"] |= lever_probes(
    REFERENCE_MULTI30K,
    {"token-rms-1": {"model": {"token_rms": 1.0}}, "muon": {"train": {"optimizer": "muon"}}},
    1000,
)
# Regularisation against Multi30k's overfit. Two candidates (tokens at rms 1, Muon) reached about
# 1.64-1.65 and then rose, above the reference's best 1.6126 (update 2250): updates no longer
# limit it, regularisation does. Dropout 0.3 on the residual branches (0.2 in the reference), and
# dropout 0.1 inside attention and the feed-forward layer (0 in the reference), each on the full
# reference schedule to update 2250, where the reference was at its best; the last four
# evaluations' weights (1500 to 2250) are kept and their mean scored, at no cost to the training.
# Label smoothing is left out: the validation loss is the plain negative log-likelihood, which more
# smoothing raises whatever it does to BLEU, so a loss probe cannot judge it. Defined before
# either has run.
# dropout inside attention (on its weights) and the feed-forward layer (after its activation)
INNER_DROPOUT = {"model": {"attention_dropout": 0.1, "activation_dropout": 0.1}}
PROBES["multi30k"] |= lever_probes(
    REFERENCE_MULTI30K,
    {
        "dropout-0.3": {"model": {"dropout": 0.3}},
        "inner-dropout-0.1": INNER_DROPOUT,
    },
    2250,
    average=4,
)
# Multi30k's levers read on validation BLEU (a translation probe decodes the validation split with
# beam 4 at its end, with its last weights and with the mean of its last four evaluations'): the
# loss stopped separating them (dropout 0.3 lowered it to 1.5724 at update 2250 and did not raise
# test BLEU). Each on the reference schedule to update 2250, where the reference was at its best,
# set against the shipped model's validation BLEU (scripts/compare_translators.py --split valid).
# Label smoothing 0.2 (0.1 in the reference): more smoothing raises the plain negative
# log-likelihood whatever it does to BLEU, so only BLEU can judge it. A joint BPE of 5000 tokens
# (8000 in the reference): for 29k training pairs smaller vocabularies have done better in
# low-resource translation (Sennrich and Zhang 2019; Araabi and Monz 2020), each subword seen more
# often. The sublayers' dropout (inner-dropout-0.1, above) is read the same way. Defined before
# either has run.
PROBES["multi30k"] |= lever_probes(
    REFERENCE_MULTI30K,
    {
        "smoothing-0.2": {"train": {"label_smoothing": 0.2}},
        "bpe-5000": {"data": {"bpe_vocab_size": 5000}},
    },
    2250,
    average=4,
)
# The Penn Treebank's levers, against its reference recipe (the reference profile: 6 x 256, dropout
# 0.3, rotary positions, GELU, AdamW, 6000 updates evaluated every 300; test perplexity 86.6), each
# stopped at update 1500, where the reference run's validation loss was 4.687 on its way to 4.553:
# Muon for the layers' matrices and the squared ReLU, the two levers the Tiny Shakespeare recipe
# adopted. The target (78.4 with at most 10M parameters) needs about 0.1 nats, and 6000 updates
# took 88.6 min on the first run's Xeon, more on a slower machine. The reference was level from
# update 4200 (4.5547 there, 4.5515 at 6000) while its training loss kept falling: a lever must
# lower that floor, not only reach it sooner, and a probe to 1500 shows the pace only.
# Defined before either has run.
REFERENCE_PTB = {"model": {"d_model": 256, "n_heads": 4, "n_layers": 6, "d_ff": 1024}, "train": {}}
PROBES["ptb"] |= lever_probes(
    REFERENCE_PTB,
    {"muon": {"train": {"optimizer": "muon"}}, "relu2": {"model": {"activation": "relu2"}}},
    1500,
)
# Regularisation against the Penn Treebank's floor: the reference was level from update 4200 while
# its training loss kept falling, so each probe runs the reference schedule to update 4200 and is
# read there, with the last four evaluations' weights (3300 to 4200) kept and their mean scored:
# dropout 0.4 on the residual branches (0.3 in the reference), and dropout 0.1 inside attention and
# the feed-forward layer (0 in the reference). The validation loss is what the target measures
# (perplexity is its exponential), so a loss probe judges these levers directly, unlike
# Multi30k's, whose lower loss with dropout 0.3 did not raise its BLEU. About 70 minutes each on
# the 2-core Xeon. Defined before either has run. The PTB candidate (fixed while the first of them
# ran, before either finished): every lever whose probe ends more than 0.01 nats below the
# reference at the probe's stop, together, on the reference's schedule of 6000 updates.
PROBES["ptb"] |= lever_probes(
    REFERENCE_PTB,
    {
        "dropout-0.4": {"model": {"dropout": 0.4}},
        "inner-dropout-0.1": INNER_DROPOUT,
    },
    4200,
    average=4,
)
# Chinese->English (cmn-eng): Multi30k's recipe (BASE and REFERENCE_MULTI30K) on the cosine of 2000
# updates of its CPU run (results.probes.CPU_RUNS: test BLEU 34.36, the run its result is judged
# on). That run's validation loss was level from update 1500 (1.8915, 1.8910, 1.8905 at 2000),
# where the same recipe on a 3100-update cosine (the H100 run) had begun to rise: the corpus has as
# many pairs as Multi30k's, shorter ones, and is seen more often (epoch 39 at update 2000, where
# Multi30k's reference run is in epoch 24). The lever
# against that: dropout 0.3 on the residual branches (0.2 in the recipe), run to the end of the
# schedule (the CPU run was best at its end) with the last four evaluations' weights kept, and
# read on validation BLEU, paired over the sentences with the CPU run's translations of the
# validation split (stored in the H100-against-CPU comparison, scripts/compare_translators.py
# --split valid). About 70 minutes on the 2-core Xeon. Defined before it has run.
BASE["cmn-eng"] = copy.deepcopy(BASE["multi30k"])
REFERENCE_CMN_ENG = {
    "model": REFERENCE_MULTI30K["model"],
    "train": {**REFERENCE_MULTI30K["train"], "max_steps": 2000},
}
PROBES["cmn-eng"] = lever_probes(REFERENCE_CMN_ENG, {"dropout-0.3": {"model": {"dropout": 0.3}}},
                                 2000, average=4)  # fmt: skip
# Updates per probe: a few hundred where the early curve decides (the model's shape and positions);
# more for the word-level corpora, whose question is regularisation: a million training words
# are seen several times within the full run, and only a longer probe shows which dropout holds.
# (Every task with probes needs an entry, though a probe with its own "steps", as cmn-eng's is,
# does not use it: train_probe reads the default before the probe's own.)
PROBE_STEPS = {"tinyshakespeare": 250, "multi30k": 250, "ptb": 600, "cmn-eng": 250}


VALID_SENTENCES = None  # of the validation split a translation probe decodes (None: all)


def validation_bleu(model: torch.nn.Module, task) -> dict:
    """``model`` decoding the validation split of translation ``task`` (its first
    ``VALID_SENTENCES``) with chapter 08's beam search (``decoding.paper_beam_scores``): BLEU,
    lowercased BLEU and chrF with the signature, and the translations (so that two probes, or a
    probe and a shipped model, can be paired on them)."""
    scores = paper_beam_scores(
        model, task.splits["valid"], task.tokenizer, task.info, task.references["valid"],
        limit=VALID_SENTENCES,
    )  # fmt: skip
    return {"split": "valid", **scores}


def assignments(*parts: dict) -> list[str]:
    """``--set`` assignments (``section.key=json``) of ``{"model": {...}, "train": {...}}`` parts,
    later parts over earlier ones."""
    return [
        f"{section}.{key}={json.dumps(value)}"
        for part in parts
        for section, values in part.items()
        for key, value in values.items()
    ]


def study_settings(task_name: str, overrides: dict) -> dict:
    """The settings of a lever study's arm: the `reference` profile's recipe of ``task_name`` with
    ``overrides`` (``{"model": {...}, "train": {...}}``) over it."""
    return resolve_settings(task_name, {}, assignments(overrides), profile="reference")


def probe_folder(task_name: str, name: str) -> Path:
    """A probe's run folder while it trains: ``last.pt`` every SAVE_EVERY updates, so that a probe
    stopped (a signal, a lost session) continues exactly where it was when started again."""
    return CHECKPOINTS / f"{task_name}-{name}"


class ProbeBusy(RuntimeError):
    """The probe is already training in another live process; the message names it."""


@contextlib.contextmanager
def probe_lock(task_name: str, name: str) -> Iterator[None]:
    """Hold probe ``task_name`` ``name`` for the whole of its run, from before its folder is read
    or cleared until its record is written and the folder removed: a second start meanwhile
    raises :class:`ProbeBusy`. The lock lives beside the run folder (``CHECKPOINTS/.locks/``),
    since the Trainer refuses a run folder whose lock this process already holds; a run folder a
    live Trainer holds (a probe started by an older copy of this script) is refused too."""
    lock = RunLock(CHECKPOINTS / ".locks" / f"{task_name}-{name}")
    try:
        lock.acquire()
        check_run_directory(probe_folder(task_name, name))
    except RunDirectoryLocked:
        lock.release()
        holder = lock.holder() or RunLock(probe_folder(task_name, name)).holder() or {}
        raise ProbeBusy(
            f"{task_name} {name} is already training ({describe_holder(holder)}); wait for it "
            f"to end, or stop it (Ctrl-C: it saves and continues when started again)"
        ) from None
    try:
        yield
    finally:
        lock.release()


def probe(
    task_name: str,
    name: str,
    overrides: dict,
    settings: dict | None = None,
    seed: int = 0,
    out: Path = OUT,
) -> dict:
    """Train ``BASE[task_name]`` with ``overrides`` for PROBE_STEPS updates (or the probe's own
    ``"steps"``), or the given ``settings`` (a lever study's arm), at ``seed``; store its history
    in ``out``. The probe is held for the whole run (:func:`probe_lock`): started twice, the
    second raises :class:`ProbeBusy` before anything is read or cleared."""
    with probe_lock(task_name, name):
        return train_probe(task_name, name, overrides, settings, seed, out)


def train_probe(
    task_name: str, name: str, overrides: dict, settings: dict | None, seed: int, out: Path
) -> dict:
    """:func:`probe`'s work, with the probe held."""
    run_dir = probe_folder(task_name, name)
    overrides = dict(overrides)
    steps = overrides.pop("steps", PROBE_STEPS[task_name])
    average = overrides.pop("average", None)
    if settings is None:
        settings = resolve_settings(task_name, {}, assignments(BASE[task_name], overrides))
    task = build_task(task_name, settings["data"], seed=seed)
    train = {**settings["train"], "progress": False, "seed": seed}
    train["eval_every"] = min(train.get("eval_every") or steps, steps)
    train.update(checkpoint_dir=str(run_dir), save_every=SAVE_EVERY)
    if average:
        train["keep_evaluations"] = average
    model_config, train_config = run_configs(task, settings["model"], train)
    started_file = run_dir / "probe.json"  # the code the first part started with
    last = run_dir / "last.pt"
    resuming = last.is_file() and started_file.is_file()
    code = json.loads(started_file.read_text())["code"] if resuming else code_version()
    if not resuming:  # a fresh start: nothing of an earlier, unfinished attempt is kept
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        started_file.write_text(json.dumps({"code": code}), encoding="utf-8")
    seed_everything(train_config.seed)
    trainer = Trainer(
        build_model(model_config), train_config, task.train, task.splits["valid"],
        tokenizer=task.tokenizer, task=task.info,
    )  # fmt: skip
    resumed_at = None
    if resuming:
        trainer.resume(last)
        resumed_at = trainer.step
        print(f"{task_name} {name}: continuing from update {resumed_at}", flush=True)
    try:
        trainer.fit(steps=steps - trainer.step)  # the full run's schedule, stopped early
    except TrainingInterrupted as stop:
        print(f"{task_name} {name}: {stop}; run the same command to continue", flush=True)
        raise SystemExit(130) from None
    finished = time.perf_counter()
    metrics = trainer.evaluate()
    record = {
        "task": task_name, "probe": name, "overrides": overrides, "settings": settings,
        "steps": steps, "valid_loss": metrics["loss"], "history": trainer.history,
    }  # fmt: skip
    # A translator's loss stopped separating its levers (chapter 08: Multi30k's dropout 0.3 lowered
    # it and not BLEU): its probe also decodes the validation split, read where the loss is.
    translation = TASKS[task_name].kind == "translation"
    if translation:
        record["valid_bleu"] = validation_bleu(trainer.model, task)
    if average:
        kept = evaluation_checkpoints(run_dir)[-average:]
        trainer.model.load_state_dict(average_checkpoints(kept))
        record["averaged"] = {
            "last": average,
            "steps": [load_checkpoint(path)["step"] for path in kept],
            "valid_loss": trainer.evaluate()["loss"],
        }
        if translation:
            record["averaged"]["valid_bleu"] = validation_bleu(trainer.model, task)
        record["overrides"] = {**overrides, "average": average}
    # wall time: the training of every part (Trainer.elapsed) and this part's final evaluations
    wall_time = trainer.elapsed + time.perf_counter() - finished
    record["provenance"] = provenance(train_config.seed, wall_time, None, code)
    if resumed_at is not None:
        record["provenance"]["resumed"] = {"at_step": resumed_at, "finished_with": code_version()}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{task_name}-{name}.json").write_text(
        json.dumps(record, indent=1) + "\n", encoding="utf-8"
    )
    shutil.rmtree(run_dir)  # the record is written: its checkpoints are no longer needed
    bleu = f", valid BLEU {record['valid_bleu']['bleu']:.2f}" if translation else ""
    averaged = (
        f", the mean of the last {average} evaluations' weights {record['averaged']['valid_loss']:.4f}"
        + (f" (BLEU {record['averaged']['valid_bleu']['bleu']:.2f})" if translation else "")
        if average
        else ""
    )
    print(
        f"{task_name} {name}: valid loss {metrics['loss']:.4f}{bleu} after {steps} updates"
        f"{averaged} ({record['provenance']['wall_time_s']:.0f} s)",
        flush=True,
    )
    return record


def lever_study(task_name: str) -> None:
    """Train every run of ``task_name``'s lever study not yet stored, one at a time."""
    out = ROOT / LEVER_STUDY_DIRECTORY
    for arm, seed in lever_study_runs(task_name):
        name = f"{arm}-seed{seed}"
        if (out / f"{task_name}-{name}.json").is_file():
            continue  # stored: the study goes on with the next run
        settings = study_settings(task_name, LEVER_STUDY[task_name][arm])
        keep = settings["train"]["keep_evaluations"]
        overrides = {**LEVER_STUDY[task_name][arm], "steps": settings["train"]["max_steps"]}
        probe(task_name, name, {**overrides, "average": keep}, settings, seed, out)


USAGE = "usage: reference_probes.py TASK [NAME ...] | reference_probes.py study TASK"


def chosen_probes(argv: list[str]) -> tuple[str, list[str]]:
    """The task and probe names of a command line (``TASK [NAME ...]``; no name: every probe of
    the task), each checked before anything trains: an unknown one stops the script with the
    names it knows."""
    if not argv:
        sys.exit(f"{USAGE}\ntasks with probes: {', '.join(PROBES)}")
    task_name, names = argv[0], argv[1:]
    if task_name not in PROBES:
        sys.exit(
            f"reference_probes.py: no probes for task {task_name!r}; tasks: {', '.join(PROBES)}"
        )
    unknown = [name for name in names if name not in PROBES[task_name]]
    if unknown:
        sys.exit(
            f"reference_probes.py: {task_name} has no probe {', '.join(map(repr, unknown))}; "
            f"its probes: {', '.join(PROBES[task_name])}"
        )
    return task_name, names or list(PROBES[task_name])


def main(argv: list[str]) -> None:
    """The command line: ``TASK [NAME ...]`` or ``study TASK``. A probe already training stops the
    command with its process named, and with the probes of the command it did not reach."""
    if argv[:1] == ["study"]:
        try:
            lever_study(argv[1] if len(argv) > 1 else "")
        except ValueError as error:  # an unknown task: the studied ones are named
            sys.exit(f"reference_probes.py study TASK: {error}")
        except ProbeBusy as error:
            sys.exit(f"reference_probes.py: {error}")
        return
    task_name, names = chosen_probes(argv)
    for number, name in enumerate(names):
        try:
            probe(task_name, name, PROBES[task_name][name])
        except ProbeBusy as error:
            rest = names[number + 1 :]
            sys.exit(
                f"reference_probes.py: {error}" + (f"; not run: {', '.join(rest)}" if rest else "")
            )


if __name__ == "__main__":
    torch.set_num_threads(2)
    main(sys.argv[1:])
