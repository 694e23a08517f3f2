"""The command line: ``python -m annotated_transformer {train,generate,translate,evaluate}``.

Examples::

    python -m annotated_transformer train --task copy --out runs/copy
    python -m annotated_transformer train --task copy --set d_model=128 --set train.lr=1e-3 \\
        --config settings.yaml --out runs/copy
    python -m annotated_transformer train --task copy --out runs/copy --resume
    torchrun --standalone --nproc_per_node=2 -m annotated_transformer train --task copy --out runs/ddp
    echo "3 1 4 1 5 9 2 6 5 3" | python -m annotated_transformer translate runs/copy/best.pt --beam 4
    python -m annotated_transformer train --task copy --set arch=decoder-only --out runs/copy-lm
    python -m annotated_transformer generate runs/copy-lm/best.pt --prompt "3141592653|" --temperature 0
    python -m annotated_transformer evaluate runs/copy/best.pt --split test

Settings come from, later ones winning: the dataclasses' defaults, the task's defaults, the
``--config`` file (JSON, or YAML when PyYAML is installed), ``--set key=value`` (repeatable), and
``--out``. A key is a field of ``TransformerConfig`` or ``TrainConfig`` or an option of the task,
optionally qualified as ``model.KEY``, ``train.KEY`` or ``data.KEY``; a value is read as JSON
(``1e-3``, ``true``, ``null``, ``[0.9, 0.98]``) and otherwise taken as a string. A config file
holds the same keys, flat or under ``model``, ``train`` and ``data`` sections, and may name the
``task``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from .config import ARCH_CHOICES, TransformerConfig
from .decode import beam_search, greedy_decode, sample
from .distributed import DEVICE_CHOICES, Distributed, init_distributed, resolve_device
from .metrics import corpus_bleu, corpus_chrf
from .model import build_model
from .tasks import available_tasks, get_task, tokenizer_from_state
from .train import TrainConfig, Trainer, TrainingDiverged, evaluate, load_model, seed_everything

SECTIONS = ("model", "train", "data")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args, parser)
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer",
        description="Train, evaluate and run the Transformers of the annotated-transformer course.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train",
        help="train a model on a task (also under torchrun)",
        description=(
            "Train on a task. Settings, later ones winning: the dataclasses' defaults, the task's "
            "defaults, --config, --set, --out. A KEY is a field of TransformerConfig or "
            "TrainConfig or an option of the task; qualify it as model.KEY, train.KEY or "
            "data.KEY when it is ambiguous. Values are JSON (1e-3, true, null, [0.9, 0.98]) or "
            "text."
        ),
    )
    train.add_argument(
        "--task", help=f"the task to train on: {', '.join(sorted(available_tasks()))}"
    )
    train.add_argument("--config", type=Path, help="a JSON or YAML file of settings")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one setting, e.g. d_model=128 or train.lr=1e-3 (repeatable)",
    )
    train.add_argument("--out", type=Path, help="the run directory (checkpoints, history)")
    train.add_argument(
        "--resume",
        nargs="?",
        const="auto",
        metavar="CHECKPOINT",
        help="continue a run: from CHECKPOINT, or from OUT/last.pt when none is named",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    train.set_defaults(handler=_train)

    generate = commands.add_parser("generate", help="continue a prompt (decoder-only)")
    _add_checkpoint_arguments(generate)
    generate.add_argument("--prompt", required=True, help="the text to continue")
    generate.add_argument("--temperature", type=_non_negative_float, default=1.0, help="0: greedy")
    generate.add_argument(
        "--top-k", type=_positive_int, help="sample from the k most probable tokens"
    )
    generate.add_argument("--top-p", type=_probability, help="sample from the nucleus of mass p")
    generate.add_argument("--seed", type=int, default=0, help="the sampling seed")
    generate.set_defaults(handler=_generate)

    translate = commands.add_parser("translate", help="translate sentences (encoder-decoder)")
    _add_checkpoint_arguments(translate)
    translate.add_argument(
        "--text", action="append", help="a sentence (repeatable); default: lines of stdin"
    )
    translate.add_argument("--beam", type=_positive_int, default=1, help="beam size; 1: greedy")
    translate.add_argument("--alpha", type=_non_negative_float, default=0.6, help="length penalty")
    translate.set_defaults(handler=_translate)

    evaluate_command = commands.add_parser("evaluate", help="loss, perplexity, accuracy, BLEU")
    _add_checkpoint_arguments(evaluate_command)
    evaluate_command.add_argument("--split", default="valid", help="the held-out split")
    evaluate_command.add_argument(
        "--max-batches", type=_positive_int, help="evaluate on the first batches only"
    )
    evaluate_command.add_argument(
        "--beam", type=_positive_int, default=1, help="beam size for BLEU; 1: greedy"
    )
    evaluate_command.add_argument(
        "--alpha", type=_non_negative_float, default=0.6, help="length penalty"
    )
    evaluate_command.add_argument(
        "--no-bleu", action="store_true", help="skip decoding (BLEU and chrF)"
    )
    evaluate_command.set_defaults(handler=_evaluate)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not accepted: use a positive integer")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value} is not accepted: use a number >= 0")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not accepted: use a number in (0, 1]")
    return value


def _add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="a checkpoint written by train")
    parser.add_argument(
        "--max-new-tokens", type=_positive_int, help="default: the task's, or max_len - 1"
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)


# ---------------------------------------------------------------------------------------------
# Settings


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON when it parses (numbers, lists), Python's True/False/None, else text."""
    words = {"true": True, "false": False, "none": None, "null": None}
    if text.lower() in words:
        return words[text.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def resolve_settings(
    builder: Any, file_settings: dict[str, Any], assignments: list[str]
) -> dict[str, dict[str, Any]]:
    """Route the config file's and ``--set``'s keys to the model, train and data sections."""
    fields = {
        "model": {field.name for field in dataclasses.fields(TransformerConfig)},
        "train": {field.name for field in dataclasses.fields(TrainConfig)},
        "data": set(inspect.signature(builder).parameters) - {"seed", "arch", "tokenizer"},
    }
    settings: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}

    def put(key: str, value: Any) -> None:
        section, _, name = key.rpartition(".")
        sections = [section] if section else [s for s in SECTIONS if name in fields[s]]
        if len(sections) > 1:
            qualified = " or ".join(f"{s}.{name}" for s in sections)
            raise ValueError(f"setting {key!r} is ambiguous: write {qualified}")
        if section and section not in SECTIONS:
            raise ValueError(
                f"setting {key!r}: the section {section!r} is not one of: model, train, data"
            )
        if not sections or name not in fields[sections[0]]:
            known = sorted(set().union(*(fields[s] for s in ([section] if section else SECTIONS))))
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(
                f"unknown setting {key!r}{hint} Accepted: the fields of TransformerConfig and "
                f"TrainConfig, and the task's options ({', '.join(sorted(fields['data']))})"
            )
        settings[sections[0]][name] = value

    for key, value in file_settings.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, inner in value.items():
                put(f"{key}.{name}", inner)
        elif key != "task":
            put(key, value)
    for assignment in assignments:
        key, equals, value = assignment.partition("=")
        if not equals or not key:
            raise ValueError(f"--set {assignment!r} is not KEY=VALUE")
        put(key.strip(), parse_value(value.strip()))
    return settings


def read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as error:
            raise ValueError(
                f"--config {path}: reading YAML needs PyYAML (pip install pyyaml)"
            ) from error
        values = yaml.safe_load(text)
    else:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--config {path} is not valid JSON: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"--config {path} must hold a mapping of settings")
    return values


# ---------------------------------------------------------------------------------------------
# Commands


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        file_settings = read_config_file(args.config) if args.config else {}
        task_name = args.task or file_settings.get("task")
        if task_name is None:
            raise ValueError("name a task: --task NAME (or 'task' in the --config file)")
        builder = get_task(task_name)
        settings = resolve_settings(builder, file_settings, args.set)
        if args.out is not None:
            settings["train"]["checkpoint_dir"] = str(args.out)
        if args.quiet:
            settings["train"]["progress"] = False
        parameters = inspect.signature(builder).parameters
        options = dict(settings["data"])
        if "seed" in parameters:
            options["seed"] = settings["train"].get("seed", TrainConfig.seed)
        if "arch" in parameters and "arch" in settings["model"]:
            options["arch"] = settings["model"]["arch"]
        task = builder(**options)
        model_config = TransformerConfig.from_dict({**task.model_defaults, **settings["model"]})
        train_config = TrainConfig.from_dict({**task.train_defaults, **settings["train"]})
        resume = None
        if args.resume is not None:
            if args.resume != "auto":
                resume = Path(args.resume)
            elif train_config.checkpoint_dir is None:
                raise ValueError("--resume without a checkpoint needs --out, the run directory")
            else:
                resume = Path(train_config.checkpoint_dir) / "last.pt"
    except (ValueError, FileNotFoundError) as error:  # a bad setting; a data file not found
        parser.error(str(error))

    distributed = init_distributed(train_config.device)
    try:
        seed_everything(train_config.seed)
        model = build_model(model_config)
        trainer = Trainer(
            model,
            train_config,
            task.train,
            task.splits.get("valid"),
            tokenizer=task.tokenizer,
            task=task.info,
            distributed=distributed,
        )
        if resume is not None:
            try:
                trainer.resume(resume)
            except (ValueError, FileNotFoundError) as error:
                parser.error(str(error))
        trainer.fit()
        if distributed.is_main and not args.quiet:
            summary = {
                "task": task.name,
                "step": trainer.step,
                "stop_reason": trainer.stop_reason,
                **(trainer.history[-1] if trainer.history else {}),
                "best_" + train_config.early_stopping_metric: trainer.best_value,
                "best_step": trainer.best_step,
                "checkpoint": None
                if trainer.last_checkpoint is None
                else str(trainer.last_checkpoint),
            }
            print(json.dumps(summary))
    finally:
        if distributed.world_size > 1:
            torch.distributed.destroy_process_group()
    return 0


def _load(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    arch: tuple[str, ...],
    distributed: Distributed | None = None,
) -> tuple[torch.nn.Module, dict[str, Any], Any, dict[str, Any]]:
    device = resolve_device(args.device, distributed)
    try:
        model, state = load_model(args.checkpoint, device)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    if model.config.arch not in arch:
        parser.error(
            f"{args.checkpoint} holds a {model.config.arch} model; this command needs "
            f"{' or '.join(arch)}"
        )
    return model, state, tokenizer_from_state(state["tokenizer"]), state.get("task", {})


def _max_new_tokens(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    model: torch.nn.Module,
    info: dict,
    used: int = 1,
) -> int:
    """``--max-new-tokens``, else the task's default, within the model's ``max_len`` positions
    (``used`` of them hold the prompt, or the start symbol)."""
    room = model.config.max_len - used
    if room < 1:
        parser.error(f"the input fills all max_len={model.config.max_len} positions of the model")
    if args.max_new_tokens is None:
        return min(info.get("max_new_tokens") or room, room)
    if args.max_new_tokens > room:
        parser.error(
            f"--max-new-tokens {args.max_new_tokens} needs more than the model's max_len="
            f"{model.config.max_len} positions; use at most {room}"
        )
    return args.max_new_tokens


def _is_main_process() -> bool:
    # generate and translate do their work once, on the first process of a torchrun launch.
    return int(os.environ.get("RANK", "0")) == 0


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not _is_main_process():
        return 0
    model, _, tokenizer, info = _load(args, parser, ("decoder-only",))
    ids = tokenizer.encode(args.prompt)
    if info.get("bos_id") is not None:
        ids = [info["bos_id"], *ids]
    if not ids:
        parser.error("--prompt encodes to no tokens")
    prompt = torch.tensor([ids], device=next(model.parameters()).device)  # [1, T_0]
    generator = torch.Generator(prompt.device).manual_seed(args.seed)
    tokens = sample(
        model,
        prompt=prompt,
        max_new_tokens=_max_new_tokens(args, parser, model, info, used=prompt.size(1)),
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_id=info.get("eos_id"),
        generator=generator,
    )
    print(tokenizer.decode(tokens[0].tolist()))
    return 0


def _pad(rows: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], device=device)


def _cut(ids: list[int], eos_id: int | None) -> list[int]:
    return ids[: ids.index(eos_id)] if eos_id is not None and eos_id in ids else ids


def translate_sources(
    model: torch.nn.Module,
    sources: torch.Tensor,
    info: dict,
    *,
    max_new_tokens: int,
    beam: int = 1,
    alpha: float = 0.6,
) -> list[list[int]]:
    """Decode ``sources`` ``[B, S]``: the generated ids of each, without bos, cut at eos."""
    bos_id, eos_id = info.get("bos_id"), info.get("eos_id")
    if beam > 1:
        tokens = beam_search(
            model,
            src=sources,
            beam_size=beam,
            max_new_tokens=max_new_tokens,
            alpha=alpha,
            bos_id=bos_id,
            eos_id=eos_id,
        ).tokens
    else:
        tokens = greedy_decode(
            model, src=sources, max_new_tokens=max_new_tokens, bos_id=bos_id, eos_id=eos_id
        )
    return [_cut(row[1:], eos_id) for row in tokens.tolist()]


def _translate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not _is_main_process():
        return 0
    model, _, tokenizer, info = _load(args, parser, ("encoder-decoder",))
    lines = args.text if args.text else [line.rstrip("\n") for line in sys.stdin]
    lines = [line for line in lines if line.strip()]
    if not lines:
        parser.error("nothing to translate: give --text or lines on stdin")
    encode = getattr(tokenizer, "encode_source", tokenizer.encode)
    decode = getattr(tokenizer, "decode_target", tokenizer.decode)
    try:
        rows = [encode(line) for line in lines]
    except ValueError as error:
        parser.error(str(error))
    if info.get("source_eos"):  # the task trained on sources that end with eos
        rows = [[*row, info["eos_id"]] for row in rows]
    device = next(model.parameters()).device
    sources = _pad(rows, model.config.pad_id or 0, device)  # [B, S]
    outputs = translate_sources(
        model,
        sources,
        info,
        max_new_tokens=_max_new_tokens(args, parser, model, info),
        beam=args.beam,
        alpha=args.alpha,
    )
    for ids in outputs:
        print(decode(ids))
    return 0


def _evaluate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    distributed = init_distributed(args.device)
    model, _, tokenizer, info = _load(args, parser, ARCH_CHOICES, distributed)
    if "name" not in info:
        parser.error(f"{args.checkpoint} does not say which task it was trained on")
    builder = get_task(info["name"])
    options = dict(info.get("options", {}))
    if "tokenizer" in inspect.signature(builder).parameters:
        options["tokenizer"] = tokenizer  # the checkpoint's, not one learnt anew
    task = builder(**options)
    if args.split not in task.splits:
        parser.error(f"--split {args.split!r} is not one of: {', '.join(task.splits)}")
    batches = task.splits[args.split]
    if args.max_batches is not None:
        batches = batches[: args.max_batches]
    metrics: dict[str, Any] = evaluate(model, batches, model.config.pad_id, distributed=distributed)
    if model.config.arch == "encoder-decoder" and not args.no_bleu and distributed.is_main:
        decode = getattr(tokenizer, "decode_target", tokenizer.decode)
        device = next(model.parameters()).device
        hypotheses, references = [], []
        eos_id, pad_id = info.get("eos_id"), model.config.pad_id
        max_new_tokens = _max_new_tokens(args, parser, model, info)
        for batch in batches:
            outputs = translate_sources(
                model,
                batch.src.to(device),
                info,
                max_new_tokens=max_new_tokens,
                beam=args.beam,
                alpha=args.alpha,
            )
            hypotheses += [decode(ids) for ids in outputs]
            references += [
                decode([token for token in _cut(row, eos_id) if token != pad_id])
                for row in batch.targets.tolist()
            ]
        if args.split in task.references:  # the raw texts, as BLEU wants, not decoded ids
            references = task.references[args.split][: len(references)]
        bleu, chrf = corpus_bleu(hypotheses, references), corpus_chrf(hypotheses, references)
        metrics.update(
            bleu=bleu.score,
            bleu_signature=bleu.signature,
            chrf=chrf.score,
            exact_match=sum(h == r for h, r in zip(hypotheses, references, strict=True))
            / len(references),
        )
    if distributed.is_main:
        print(json.dumps({"checkpoint": str(args.checkpoint), "split": args.split, **metrics}))
    if distributed.world_size > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
