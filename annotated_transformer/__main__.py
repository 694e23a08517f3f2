"""The command line: ``python -m annotated_transformer {train,generate,translate,evaluate,average}``.

Examples::

    python -m annotated_transformer train --task copy            # writes runs/copy-<date>-<time>/
    python -m annotated_transformer train --task copy --out runs/copy --device cpu
    python -m annotated_transformer train --help                 # every setting: type, default, choices
    python -m annotated_transformer train --task copy --set d_model=128 --set train.lr=1e-3 \\
        --config settings.yaml --out runs/copy
    python -m annotated_transformer train --task copy --out runs/copy --log tensorboard
    python -m annotated_transformer train --task copy --out runs/copy --resume
    python -m annotated_transformer train --task copy --out runs/copy --resume \\
        --set train.max_steps=500 --allow-change train.max_steps
    torchrun --standalone --nproc_per_node=2 -m annotated_transformer train --task copy --out runs/ddp
    echo "3 1 4 1 5 9 2 6 5 3" | python -m annotated_transformer translate runs/copy/best.pt --beam 4
    python -m annotated_transformer train --task copy --set arch=decoder-only --out runs/copy-lm
    python -m annotated_transformer generate runs/copy-lm/best.pt --prompt "3141592653|" --temperature 0
    python -m annotated_transformer evaluate runs/copy/best.pt --split test
    python -m annotated_transformer train --task copy --out runs/avg --set train.keep_evaluations=5 \\
        --set train.eval_every=100
    python -m annotated_transformer average runs/avg       # writes runs/avg/averaged.pt

Settings come from, later ones winning: the dataclasses' defaults, the task's defaults, the
``--config`` file (JSON, or YAML when PyYAML is installed), ``--set key=value`` (repeatable), and
``--out``/``--device``; :mod:`annotated_transformer.train_settings` resolves them (``model.KEY``,
``train.KEY``, ``data.KEY``, or a bare KEY that one section has) and lists them for ``train
--help``. Every setting is checked before anything trains. A run folder describes itself
(:mod:`annotated_transformer.run_folder`: ``run.json``, ``config.json``); without ``--out`` it is
``runs/<task>-<date>-<time>``. ``--log tensorboard`` also writes the history's curves to
``OUT/tensorboard/`` (:mod:`annotated_transformer.training_log`). Long commands show a progress
bar on stderr. An expected failure (a bad setting, a missing file, a diverged run, Ctrl-C) ends
with one ``error:`` line and a non-zero exit, a traceback only for a bug. Ctrl-C or SIGTERM
during training saves ``last.pt`` and prints the command that resumes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .config import ARCH_CHOICES, TrainConfig, check_non_negative_int
from .data.tokenizers import tokenizer_from_dict
from .decode import sample
from .results.evaluation import (
    check_sampling,
    generated_ids,
    score_translations,
    source_batch,
    translate,
)
from .results.pretrained import check_vocabulary, is_pretrained, load_pretrained
from .tasks import build_task, task_from_info
from .tasks.profiles import profile_names
from .tasks.settings import read_config_file, resolve_key
from .tasks.task_options import TASKS, TaskInfo, check_options, task_spec
from .tasks.train_settings import resolve_settings, settings_help, train_fields
from .training.averaging import average_run
from .training.checkpoint import (
    CheckpointWriteError,
    check_entries,
    load_model,
    save_checkpoint,
)
from .training.distributed import DEVICE_CHOICES, init_distributed, resolve_device
from .training.fit import fit_task, run_configs
from .training.run_folder import (
    check_new_run,
    checkpoint_megabytes,
    clear_run,
    default_out,
    parameter_count,
    record_launch,
    resolved_config,
    write_config,
)
from .training.run_lock import RunDirectoryLocked, check_run_directory
from .training.train import TrainingDiverged, evaluate
from .training.trainer import TrainingInterrupted
from .training.training_log import LOG_CHOICES, MissingExtra, check_training_log

# Failures a user can cause and fix: one message, no traceback. Anything else is a bug.
EXPECTED_ERRORS = (ValueError, OSError, TrainingDiverged, RunDirectoryLocked, MissingExtra)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what run.json records
    try:
        with _terminate_as_interrupt():
            return args.handler(args)
    except TrainingInterrupted as stop:
        again = f"; continue with: {_resume_command(args.argv, stop.checkpoint)}"
        parser.exit(
            128 + getattr(signal, stop.signal_name),
            f"{parser.prog}: error: {stop}{again if stop.checkpoint else ''}\n",
        )
    except KeyboardInterrupt:
        parser.exit(130, f"{parser.prog}: error: interrupted\n")
    except EXPECTED_ERRORS as error:
        message = str(error) or type(error).__name__
        parser.error(message.replace("\n", " "))


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler, a closed terminal) raises KeyboardInterrupt as Ctrl-C
    does, so that a command ends through its clean-up (locks released) and says so; during
    training the trainer turns both into a saved, resumable stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _resume_command(argv: list[str], checkpoint: Path) -> str:
    """The command line that continues a stopped ``train`` from ``checkpoint`` (its folder's
    ``last.pt``): the same arguments, ``--resume`` instead of ``--overwrite`` or of a named
    checkpoint, and the folder as ``--out`` if none was named."""
    kept: list[str] = []
    arguments = iter(argv)
    for argument in arguments:
        if argument == "--overwrite" or argument.startswith("--resume="):
            continue
        if argument == "--resume":
            following = next(arguments, None)
            if following is not None and following.startswith("-"):
                kept.append(following)  # not a checkpoint: the next option
            continue
        kept.append(argument)
    if not any(argument == "--out" or argument.startswith("--out=") for argument in kept):
        kept += ["--out", str(checkpoint.parent)]
    return shlex.join(["python", "-m", "annotated_transformer", *kept, "--resume"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer",
        description="Train, evaluate and run the Transformers of the annotated-transformer course.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train a model on a task (also under torchrun)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=settings_help(),
        description=(
            "Train on a task. Settings, later ones winning: the dataclasses' defaults, the task's "
            "defaults, --config, --set, --out. A KEY is a field of TransformerConfig or "
            "TrainConfig or an option of the task; qualify it as model.KEY, train.KEY or "
            "data.KEY when it is ambiguous. Values are JSON (1e-3, true, null, [0.9, 0.98]) or "
            "text. Every KEY is listed below."
        ),
    )
    train.add_argument("--task", help=f"the task to train on: {', '.join(sorted(TASKS))}")
    train.add_argument(
        "--profile", choices=profile_names(),
        help="start from this profile's run size (chapter 08's sizes: smoke, cpu, reference, gpu)",
    )  # fmt: skip
    train.add_argument("--config", type=Path, help="a JSON or YAML file of settings")
    train.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="one setting, e.g. d_model=128 or train.lr=1e-3 (repeatable)",
    )  # fmt: skip
    train.add_argument(
        "--out", type=_directory,
        help="the run directory: checkpoints, history, run.json, config.json "
        "(default: runs/TASK-DATE-TIME, a new one per launch); one that holds a run needs "
        "--resume or --overwrite",
    )  # fmt: skip
    train.add_argument(
        "--device", choices=DEVICE_CHOICES,
        help="where to train (default: the settings' device, auto: cuda, else mps, else cpu)",
    )  # fmt: skip
    train.add_argument(
        "--resume", nargs="?", const="auto", metavar="CHECKPOINT",
        help="continue a run: from CHECKPOINT, or from OUT/last.pt when none is named",
    )  # fmt: skip
    train.add_argument(
        "--overwrite", action="store_true",
        help="replace the run in OUT (its checkpoints, history and curves; run.json keeps its "
        "launches)",
    )  # fmt: skip
    train.add_argument(
        "--allow-change", action="append", default=[], metavar="KEY",
        help="with --resume: a setting that may differ from the checkpoint's (repeatable)",
    )  # fmt: skip
    train.add_argument(
        "--log", choices=LOG_CHOICES,
        help="also write the training curves (loss, lr, tokens/s, evaluation) to OUT/tensorboard/ "
        "(needs the [tensorboard] extra)",
    )  # fmt: skip
    train.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    train.set_defaults(handler=_train)

    generate = commands.add_parser("generate", help="continue a prompt (decoder-only)")
    _add_checkpoint_arguments(generate)
    generate.add_argument("--prompt", required=True, help="the text to continue")
    generate.add_argument(
        "--temperature", type=_number, default=1.0, help="0: greedy; else finite and > 0"
    )
    generate.add_argument("--top-k", type=_positive_int, help="sample from the k likeliest tokens")
    generate.add_argument("--top-p", type=_number, help="sample from the nucleus of mass p")
    generate.add_argument("--seed", type=int, default=0, help="the sampling seed")
    generate.set_defaults(handler=_generate)

    translate_command = commands.add_parser("translate", help="translate sentences")
    _add_checkpoint_arguments(translate_command)
    translate_command.add_argument(
        "--text", action="append", help="a sentence (repeatable); default: lines of stdin"
    )
    _add_beam_arguments(translate_command)
    translate_command.set_defaults(handler=_translate)

    evaluate_command = commands.add_parser("evaluate", help="loss, perplexity, accuracy, BLEU")
    _add_checkpoint_arguments(evaluate_command)
    evaluate_command.add_argument("--split", default="valid", help="the held-out split")
    evaluate_command.add_argument(
        "--max-batches", type=_positive_int, help="evaluate on the first batches only"
    )
    _add_beam_arguments(evaluate_command)
    evaluate_command.add_argument(
        "--no-bleu", action="store_true", help="skip decoding (BLEU and chrF)"
    )
    evaluate_command.set_defaults(handler=_evaluate)

    average_command = commands.add_parser(
        "average",
        help="average a run's last evaluation snapshots into one checkpoint",
        description=(
            "The element-wise mean of the weights a run kept at its last evaluations "
            "(eval-<step>.pt, written when trained with --set train.keep_evaluations=N), as one "
            "checkpoint that evaluate, translate and generate read (chapter 06, section 11)."
        ),
    )
    average_command.add_argument("run", type=Path, help="the run folder (train's --out)")
    average_command.add_argument(
        "--last", type=_positive_int, help="average the newest N snapshots (default: all kept)"
    )
    average_command.add_argument(
        "--out", type=Path, help="the checkpoint to write (default: RUN/averaged.pt)"
    )
    average_command.add_argument(
        "--overwrite", action="store_true", help="replace --out if it exists"
    )
    average_command.set_defaults(handler=_average)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not accepted: use a positive integer"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{value} is not accepted: use a positive integer"
        ) from None
    return value


def _directory(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not accepted: name a directory (an unset shell variable?); leave "
            f"--out out for a new runs/TASK-DATE-TIME"
        )
    return Path(text)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: use a number") from None


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{value} is not accepted: use a finite number >= 0")
    return value


def _add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint written by train, or a pretrained directory (models/multi30k)",
    )
    parser.add_argument(
        "--max-new-tokens", type=_positive_int,
        help="at most this many new tokens (default: the decoding budget, see evaluation.py)",
    )  # fmt: skip
    parser.add_argument(
        "--device", default="auto", choices=DEVICE_CHOICES,
        help="where to run (default: auto: cuda, else mps, else cpu)",
    )  # fmt: skip


def _add_beam_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=_positive_int, default=1, help="beam size; 1: greedy")
    parser.add_argument("--alpha", type=_non_negative_float, default=0.6, help="length penalty")


# ---------------------------------------------------------------------------------------------
# train


def _train(args: argparse.Namespace) -> int:
    file_settings = read_config_file(args.config) if args.config else {}
    task_name = args.task or file_settings.get("task")
    if task_name is None:
        raise ValueError(
            f"name a task: --task NAME, one of: {', '.join(sorted(TASKS))} (or 'task' in the "
            f"--config file)"
        )
    fields = train_fields(task_name)
    settings = resolve_settings(task_name, file_settings, args.set, args.profile)
    check_options(task_name, settings["data"])
    allowed = [".".join(resolve_key(key, fields)) for key in args.allow_change]
    if allowed and args.resume is None:
        raise ValueError(
            "--allow-change is for --resume: it names settings a resumed run may change"
        )
    if args.out is None and settings["train"].get("checkpoint_dir") is None:
        if args.resume == "auto":
            raise ValueError("--resume without a checkpoint needs --out, the run directory")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("under torchrun, name the run directory: --out DIR")
        args.out = default_out(task_spec(task_name).name)
    check_run_directory(args.out)  # a file, or a directory a live run holds: refused now
    out = args.out or settings["train"].get("checkpoint_dir")
    check_new_run(out, resume=args.resume is not None, overwrite=args.overwrite)
    check_training_log(args.log, args.out or settings["train"].get("checkpoint_dir"))
    fixed: dict[str, Any] = {}
    if args.out is not None:
        fixed["checkpoint_dir"] = str(args.out)
    if args.device is not None:
        fixed["device"] = args.device
    if args.quiet:
        fixed["progress"] = False
    resume = None
    if args.resume is not None:
        if args.resume == "auto" and out is None:
            raise ValueError("--resume without a checkpoint needs --out, the run directory")
        resume = Path(out) / "last.pt" if args.resume == "auto" else Path(args.resume)
        if not resume.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {resume}")
    seed = settings["train"].get("seed", TrainConfig.seed)
    check_non_negative_int("train.seed", seed)  # the task's data is drawn with it
    arch = settings["model"].get("arch")
    task = build_task(task_name, settings["data"], seed=seed, arch=arch)
    model_config, train_config = run_configs(task, settings["model"], settings["train"], **fixed)
    distributed = init_distributed(train_config.device)
    out = train_config.checkpoint_dir
    if out is not None and distributed.is_main:
        replaced = clear_run(out) if args.overwrite else []
        record_launch(out, args.argv, task_name, args.profile, settings, replaced=replaced)
        write_config(out, resolved_config(task, model_config, train_config))
        if not args.quiet:
            parameters = parameter_count(model_config)
            _note(
                f"training {task.name}: {parameters / 1e6:.1f}M parameters, "
                f"{train_config.max_steps} updates; writing {out}/ (run.json, config.json, "
                f"history, last.pt and best.pt of about {checkpoint_megabytes(parameters):.0f} MB "
                "each)"
            )
    try:
        try:
            fit = fit_task(
                task, model_config, train_config,
                resume=resume, allow_changes=allowed, distributed=distributed, log=args.log,
            )  # fmt: skip
        except CheckpointWriteError as error:  # a full disk: the last good last.pt is kept
            last = Path(out) / "last.pt" if out is not None else None
            if last is None or not last.is_file():
                raise
            raise CheckpointWriteError(
                error.errno,
                f"{error.strerror}; the run continues from {last} with: "
                f"{_resume_command(args.argv, last)}",
            ) from error
        trainer = fit.trainer
        if distributed.is_main and not args.quiet:
            summary = {
                "task": task.name,
                "step": trainer.step,
                "stop_reason": trainer.stop_reason,
                **(fit.history[-1] if fit.history else {}),
                "best_" + train_config.early_stopping_metric: trainer.best_value,
                "best_step": trainer.best_step,
                "checkpoint": None if trainer.last_checkpoint is None else str(trainer.last_checkpoint),
            }  # fmt: skip
            print(json.dumps(summary))
    finally:
        if distributed.world_size > 1:
            torch.distributed.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------
# generate, translate, evaluate


def _load(args: argparse.Namespace, arch: tuple[str, ...], distributed: Any = None):
    """The checkpoint's model (of one of ``arch``), tokenizer and task info."""
    device = resolve_device(args.device, distributed)
    if is_pretrained(args.checkpoint):  # a shipped model: safetensors and JSON, no pickle
        shipped = load_pretrained(args.checkpoint, device)
        model = shipped.model
        state = {"tokenizer": shipped.tokenizer.to_dict(), "task": shipped.task}
    else:
        model, state = load_model(args.checkpoint, device)
    if model.config.arch not in arch:
        raise ValueError(
            f"{args.checkpoint} holds a {model.config.arch} model; this command needs "
            f"{' or '.join(arch)}"
        )
    check_entries(state, args.checkpoint, {"tokenizer": dict})
    if not isinstance(state.get("task"), dict) or not state["task"].get("name"):
        raise ValueError(f"{args.checkpoint} does not say which task it was trained on")
    info = TaskInfo.from_dict(state["task"])
    if model.config.arch == "encoder-decoder" and info.bos_id is None:
        raise ValueError(
            f"{args.checkpoint}'s task {info.name!r} has no bos_id: the decoder's first input is "
            f"unknown"
        )
    try:
        tokenizer = tokenizer_from_dict(state["tokenizer"])
    except ValueError as error:
        raise ValueError(f"{args.checkpoint}: tokenizer: {error}") from error
    check_vocabulary(model.config, tokenizer.vocab_size, f"{args.checkpoint}'s tokenizer")
    return model, tokenizer, info


def _text(text: str, where: str) -> str:
    """``text`` if it is valid Unicode: bytes that were not UTF-8 reach Python as lone
    surrogates (its ``surrogateescape``), which no tokenizer reads."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{where} is not UTF-8 text (at character {error.start + 1}); convert it, e.g. with "
            f"iconv -t UTF-8"
        ) from None
    return text


def _room(args: argparse.Namespace, max_len: int, used: int) -> int | None:
    """``--max-new-tokens``, checked against the positions the model has left."""
    room = max_len - used
    if room < 1:
        raise ValueError(f"the input fills all max_len={max_len} positions of the model")
    if args.max_new_tokens is not None and args.max_new_tokens > room:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens} needs more than the model's "
            f"max_len={max_len} positions; use at most {room}"
        )
    return args.max_new_tokens


def _is_main_process() -> bool:
    # generate and translate do their work once, on the first process of a torchrun launch.
    return int(os.environ.get("RANK", "0")) == 0


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _progress(batches: list, what: str, show: bool = True) -> Any:
    """``batches`` under a progress bar on stderr (count, rate, time left)."""
    return tqdm(batches, desc=what, unit="batch", file=sys.stderr, leave=False, disable=not show)


def _generate(args: argparse.Namespace) -> int:
    check_sampling(args.temperature, args.top_k, args.top_p)
    if not _is_main_process():
        return 0
    model, tokenizer, info = _load(args, ("decoder-only",))
    ids = tokenizer.encode(_text(args.prompt, "--prompt"))
    if info.bos_id is not None:
        ids = [info.bos_id, *ids]
    if not ids:
        raise ValueError("--prompt encodes to no tokens")
    max_len = model.config.max_len
    if len(ids) > max_len:
        raise ValueError(
            f"--prompt has {len(ids)} tokens; the model reads at most max_len={max_len}"
        )
    cap = _room(args, max_len, len(ids))
    room = max_len - len(ids)
    max_new_tokens = cap or min(info.max_new_tokens or room, room)
    prompt = torch.tensor([ids], device=next(model.parameters()).device)  # [1, T_0]
    tokens = sample(
        model,
        prompt=prompt,
        max_new_tokens=max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_id=info.eos_id,
        generator=torch.Generator(prompt.device).manual_seed(args.seed),
    )
    print(tokenizer.decode(generated_ids(tokens[0].tolist(), info, start=0)))
    return 0


def _translate(args: argparse.Namespace) -> int:
    if not _is_main_process():
        return 0
    model, tokenizer, info = _load(args, ("encoder-decoder",))
    if args.text:
        lines = [_text(line, f"--text {number}") for number, line in enumerate(args.text, 1)]
    else:
        try:
            raw = sys.stdin.read()
        except UnicodeDecodeError as error:  # a strict stdin; else surrogates, checked below
            raise ValueError(
                f"stdin is not UTF-8 text (byte {error.start + 1} of a chunk is "
                f"{error.object[error.start : error.start + 1]!r}); convert it, e.g. with "
                f"iconv -t UTF-8"
            ) from None
        lines = [
            _text(line, f"line {number} of stdin")
            for number, line in enumerate(raw.splitlines(), 1)
        ]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("nothing to translate: give --text or lines on stdin")
    batches = [
        source_batch(
            lines[start : start + 64], tokenizer, info, model.config.max_len, model.config.pad_id
        )
        for start in range(0, len(lines), 64)
    ]  # 64 sentences a batch: a bar that moves, memory that stays small
    shown = _progress(batches, "translate")
    outputs = translate(
        model, shown, tokenizer, info, beam_size=args.beam, alpha=args.alpha,
        max_new_tokens=_room(args, model.config.max_len, 1), warn=_warn,
    )  # fmt: skip
    for text in outputs:
        print(text)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    if args.beam > 1 and args.no_bleu:
        raise ValueError(f"--beam {args.beam} with --no-bleu: nothing is decoded; drop one")
    distributed = init_distributed(args.device)
    model, tokenizer, info = _load(args, ARCH_CHOICES, distributed)
    if args.beam > 1 and model.config.arch != "encoder-decoder":
        raise ValueError(
            f"--beam {args.beam}: a {model.config.arch} model is evaluated by its loss only, "
            f"nothing is decoded; drop --beam"
        )
    task = task_from_info(info, tokenizer)
    if args.split not in task.splits:
        raise ValueError(f"--split {args.split!r} is not one of: {', '.join(task.splits)}")
    batches = task.splits[args.split][: args.max_batches]
    metrics: dict[str, Any] = evaluate(
        model, _progress(batches, f"loss on {args.split}", distributed.is_main),
        model.config.pad_id, distributed=distributed,
    )  # fmt: skip
    if model.config.arch == "encoder-decoder" and not args.no_bleu and distributed.is_main:
        what = f"translate {args.split}" + (f" (beam {args.beam})" if args.beam > 1 else "")
        hypotheses = translate(
            model, _progress(batches, what), tokenizer, info, beam_size=args.beam,
            alpha=args.alpha,
            max_new_tokens=_room(args, model.config.max_len, 1), warn=_warn,
        )  # fmt: skip
        if args.split in task.references:  # the raw texts, as BLEU wants, not decoded ids
            references = task.references[args.split][: len(hypotheses)]
        else:
            references = [
                tokenizer.decode(generated_ids(row, info, start=0))
                for batch in batches
                for row in batch.targets.tolist()
            ]
        scores = score_translations(hypotheses, references)
        metrics.update(
            bleu=scores.bleu,
            bleu_lowercase=scores.bleu_lowercase,
            bleu_signature=scores.signature,
            chrf=scores.chrf,
            exact_match=scores.exact_match,
        )
    if distributed.is_main:
        print(json.dumps({"checkpoint": str(args.checkpoint), "split": args.split, **metrics}))
    if distributed.world_size > 1:
        torch.distributed.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------
# average


def _average(args: argparse.Namespace) -> int:
    out = args.out or args.run / "averaged.pt"
    state = average_run(args.run, args.last)  # every check of the run's snapshots first
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory: name the checkpoint file to write")
    if out.exists() and not args.overwrite:
        raise ValueError(f"{out} exists: replace it with --overwrite, or name another --out")
    save_checkpoint(out, state)
    print(json.dumps({"checkpoint": str(out), "averaged": state["averaged_from"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
