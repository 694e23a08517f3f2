"""Bad input, as a new user types it: each case must end in one clear message, before any work.

Command-line cases call ``main([...])`` and expect a non-zero exit with exactly one ``error:``
line naming the problem (no traceback); library cases expect a ``ValueError`` with the message.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import shlex
import shutil
import signal
import socket
from pathlib import Path, PurePosixPath

import pytest
import torch
from conftest import tiny_model

from annotated_transformer import ablation as ab
from annotated_transformer.__main__ import main
from annotated_transformer.results.evaluation import check_sampling, translate
from annotated_transformer.tasks import build_task
from annotated_transformer.tasks.profiles import (
    TRAINING,
    check_evaluation,
    parse_task_list,
    run_size,
)
from annotated_transformer.tasks.settings import parse_json_object, route
from annotated_transformer.training.checkpoint import (
    first_non_finite,
    load_checkpoint,
    save_checkpoint,
)
from annotated_transformer.training.run_lock import LOCK_NAME

TRAIN = ["train", "--task", "copy"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two copy-task checkpoints trained for two updates: encoder-decoder and decoder-only."""
    root = tmp_path_factory.mktemp("bad-input")
    quick = ["--quiet", "--set", "max_steps=2", "--set", "warmup=1", "--set", "d_model=16"]
    for arch in ("encoder-decoder", "decoder-only"):
        assert main([*TRAIN, "--out", str(root / arch), "--set", f"arch={arch}", *quick]) == 0
    (root / "not-a-checkpoint.pt").write_bytes(b"")
    (root / "a-file").write_text("x")
    return root


def expect_cli_error(argv, message, capsys, monkeypatch, stdin=""):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as exit_info:
        main([str(arg) for arg in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code != 0
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert message in errors[0], err
    return errors[0]


TRAIN_CASES = [
    (["train"], "name a task: --task NAME, one of: cmn-eng, copy, multi30k, ptb"),
    (["train", "--task", "nope"], "task='nope' is not one of: cmn-eng, copy, multi30k, ptb"),
    (["train", "--task", ""], "name a task: --task NAME"),
    ([*TRAIN, "--set", "d_modle=8"], "did you mean d_model"),
    ([*TRAIN, "--set", "lr"], "--set 'lr' is not KEY=VALUE"),
    ([*TRAIN, "--set", "=3"], "--set '=3' is not KEY=VALUE"),
    ([*TRAIN, "--set", "optim.lr=1"], "the section 'optim' is not one of: model, train, data"),
    ([*TRAIN, "--set", "model.lr=1"], "'lr' is not a model field"),
    ([*TRAIN, "--set", "data.d_model=1"], "'d_model' is not a data field"),
    ([*TRAIN, "--set", "context_length=0"], "unknown setting 'context_length'"),
    ([*TRAIN, "--set", "data.context_length=0"], "'context_length' is not a data field"),
    ([*TRAIN, "--set", "length=0"], "data.length=0 is not accepted: use a positive integer"),
    ([*TRAIN, "--set", "length=-3"], "data.length=-3 is not accepted"),
    ([*TRAIN, "--set", "length=2.5"], "data.length=2.5 is not accepted"),
    ([*TRAIN, "--set", "length=ten"], "data.length='ten' is not accepted"),
    ([*TRAIN, "--set", "length=true"], "data.length=True is not accepted"),
    ([*TRAIN, "--set", "length=null"], "data.length=None is not accepted"),
    ([*TRAIN, "--set", "batches_per_epoch=0"], "data.batches_per_epoch=0 is not accepted"),
    ([*TRAIN, "--set", "batches_per_epoch=-1"], "data.batches_per_epoch=-1 is not accepted"),
    ([*TRAIN, "--set", "eval_sequences=0"], "data.eval_sequences=0 is not accepted"),
    ([*TRAIN, "--set", "batch_size=-1"], "data.batch_size=-1 is not accepted"),
    ([*TRAIN, "--set", "batch_size=0"], "data.batch_size=0 is not accepted"),
    ([*TRAIN, "--set", "data.batch_size=[1]"], "data.batch_size=[1] is not accepted"),
    (["train", "--task", "tinyshakespeare", "--set", "context_length=0"], "context_length=0"),
    (["train", "--task", "tinyshakespeare", "--set", "batch_size=-1"], "data.batch_size=-1"),
    (["train", "--task", "tinyshakespeare", "--set", "eval_batch_size=0"], "eval_batch_size=0"),
    (["train", "--task", "tinyshakespeare", "--set", "length=5"], "unknown setting 'length'"),
    (["train", "--task", "ptb", "--set", "batches_per_epoch=0"], "batches_per_epoch=0"),
    (["train", "--task", "wikitext-2", "--set", "context_length=-8"], "context_length=-8"),
    (["train", "--task", "multi30k", "--set", "max_train_pairs=0"], "max_train_pairs=0"),
    (["train", "--task", "multi30k", "--set", "max_train_pairs=-5"], "max_train_pairs=-5"),
    (["train", "--task", "multi30k", "--set", "bpe_vocab_size=0"], "bpe_vocab_size=0"),
    (["train", "--task", "multi30k", "--set", "max_tokens=0"], "data.max_tokens=0"),
    (["train", "--task", "multi30k", "--set", "max_length=0"], "data.max_length=0"),
    (["train", "--task", "multi30k", "--set", "source=3"], "data.source=3 is not accepted"),
    (["train", "--task", "cmn-eng", "--set", "max_length=-1"], "data.max_length=-1"),
    (["train", "--task", "cmn-eng", "--set", "context_length=5"], "unknown setting"),
    ([*TRAIN, "--set", "batch_size=1000000000"], "gives batches of 22,000,000,000 tokens"),
    ([*TRAIN, "--set", "length=100000"], "more than the 1,048,576 this package trains on"),
    (["train", "--task", "ptb", "--set", "eval_batch_size=10000000"], "data.eval_batch_size="),
    (["train", "--task", "multi30k", "--set", "max_tokens=10000000"], "use a smaller batch"),
    ([*TRAIN, "--set", "lr=-1"], "lr=-1 is not accepted"),
    ([*TRAIN, "--set", "arch=encoder-only"], "arch='encoder-only'"),
    ([*TRAIN, "--set", "positional=rotary"], "positional='rotary' is not one of"),
    ([*TRAIN, "--resume"], "--resume without a checkpoint needs --out"),
    ([*TRAIN, "--resume", "missing.pt"], "--resume: no checkpoint at missing.pt"),
    ([*TRAIN, "--allow-change", "train.lr"], "--allow-change is for --resume"),
    ([*TRAIN, "--resume", "x.pt", "--allow-change", "train.rl"], "'rl' is not a train field"),
    ([*TRAIN, "--config", "missing.json"], "missing.json: no such file"),
]


@pytest.mark.parametrize(("argv", "message"), TRAIN_CASES)
def test_train_refuses_bad_settings_before_any_work(argv, message, capsys, monkeypatch):
    expect_cli_error(argv, message, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("{not json", ".json", "is not valid JSON"),
        ("[1, 2]", ".json", "must hold a mapping of settings"),
        ("model: [", ".yaml", "is not valid YAML"),
        ("- 1\n", ".yaml", "must hold a mapping of settings"),
        ('{"model": {"d_modle": 8}}', ".json", "'d_modle' is not a model field"),
        ('{"length": 0}', ".json", "data.length=0 is not accepted"),
        ('{"task": "nope"}', ".json", "task='nope' is not one of"),
    ],
)
def test_a_bad_config_file_is_one_clear_error(text, suffix, message, tmp_path, capsys, monkeypatch):
    path = tmp_path / f"settings{suffix}"
    path.write_text(text)
    argv = ["train", "--config", path] + ([] if "task" in text else ["--task", "copy"])
    expect_cli_error(argv, message, capsys, monkeypatch)


def test_an_out_that_is_a_file_is_refused_before_training(checkpoints, capsys, monkeypatch):
    expect_cli_error(
        [*TRAIN, "--out", checkpoints / "a-file"],
        "is a file, not a directory",
        capsys,
        monkeypatch,
    )


@pytest.mark.parametrize("out", ["", " "])
def test_an_empty_out_is_refused_before_training(out, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were it accepted, the run would land here
    expect_cli_error(
        [*TRAIN, "--out", out], "is not accepted: name a directory", capsys, monkeypatch
    )
    assert list(tmp_path.iterdir()) == []


def test_an_out_this_process_cannot_write_is_refused(tmp_path, capsys, monkeypatch):
    # Running as root, a chmod would not stop a write: the check itself is what is tested.
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: Path(path) != tmp_path and real_access(path, mode)
    )
    expect_cli_error(
        [*TRAIN, "--out", tmp_path / "run"], "this process cannot write in", capsys, monkeypatch
    )
    assert not (tmp_path / "run").exists()


def test_an_out_that_holds_a_run_is_refused_naming_its_files(finished_run, capsys, monkeypatch):
    argv, out = finished_run
    before = {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()}
    expect_cli_error(  # argv has --quiet: refused all the same, out loud
        argv, f"{out} already holds a run (last.pt, best.pt, history.csv", capsys, monkeypatch
    )
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()} == before


def test_overwrite_replaces_a_run_and_keeps_its_launches(finished_run, capsys):
    argv, out = finished_run
    (launch,) = json.loads((out / "run.json").read_text(encoding="utf-8"))["launches"]
    assert main([str(arg) for arg in [*argv, "--overwrite"]]) == 0
    first, second = json.loads((out / "run.json").read_text(encoding="utf-8"))["launches"]
    assert first == launch
    assert "--overwrite" in second["command"]
    assert {"last.pt", "history.csv"} <= set(second["replaced"])
    assert load_checkpoint(out / "last.pt")["step"] == 2


@pytest.mark.parametrize("text", ['{"launches": [', "[]", '{"launches": 3}', "\udcff"])
def test_a_damaged_run_json_is_named(text, finished_run, capsys, monkeypatch):
    argv, out = finished_run
    (out / "run.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    expect_cli_error([*argv, "--resume"], f"{out / 'run.json'} is damaged", capsys, monkeypatch)


def test_overwrite_and_resume_together_are_refused(finished_run, capsys, monkeypatch):
    argv, _ = finished_run
    expect_cli_error([*argv, "--resume", "--overwrite"], "choose one", capsys, monkeypatch)


GENERATE_CASES = [
    (["--temperature", "inf"], "temperature=inf is not accepted: use a finite number > 0"),
    (["--temperature", "inf", "--top-k", "3"], "temperature=inf is not accepted"),
    (["--temperature", "nan"], "temperature=nan is not accepted"),
    (["--temperature", "-1"], "temperature=-1.0 is not accepted"),
    (["--temperature", "hot"], "'hot' is not accepted: use a number"),
    (["--temperature", "0", "--top-k", "3"], "temperature=0 is greedy decoding"),
    (["--temperature", "0", "--top-p", "0.5"], "temperature=0 is greedy decoding"),
    (["--top-k", "0"], "0 is not accepted: use a positive integer"),
    (["--top-k", "-2"], "-2 is not accepted: use a positive integer"),
    (["--top-k", "many"], "'many' is not accepted: use a positive integer"),
    (["--top-p", "0"], "top_p=0.0 is not accepted: use a number in (0, 1]"),
    (["--top-p", "1.5"], "top_p=1.5 is not accepted"),
    (["--top-p", "-0.1"], "top_p=-0.1 is not accepted"),
    (["--top-p", "nan"], "top_p=nan is not accepted"),
    (["--max-new-tokens", "0"], "0 is not accepted: use a positive integer"),
    (["--max-new-tokens", "100"], "--max-new-tokens 100 needs more than the model's max_len=22"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
]


@pytest.mark.parametrize(("extra", "message"), GENERATE_CASES)
def test_generate_refuses_bad_sampling_settings(extra, message, checkpoints, capsys, monkeypatch):
    argv = ["generate", checkpoints / "decoder-only" / "last.pt", "--prompt", "12|", *extra]
    expect_cli_error(argv, message, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("12x", "digits and '|' only, got 'x'"),
        ("hello", "digits and '|' only, got 'h'"),
        ("1" * 30, "--prompt has 31 tokens; the model reads at most max_len=22"),
        ("1" * 21, "the input fills all max_len=22 positions"),
    ],
)
def test_generate_names_a_bad_prompt(prompt, message, checkpoints, capsys, monkeypatch):
    argv = ["generate", checkpoints / "decoder-only" / "last.pt", "--prompt", prompt]
    expect_cli_error(argv, message, capsys, monkeypatch)


TRANSLATE_CASES = [
    (["--beam", "0"], "0 is not accepted: use a positive integer"),
    (["--beam", "-1"], "-1 is not accepted"),
    (["--beam", "wide"], "'wide' is not accepted"),
    (["--alpha", "-1"], "-1.0 is not accepted: use a finite number >= 0"),
    (["--alpha", "inf"], "inf is not accepted"),
    (["--alpha", "nan"], "nan is not accepted"),
    (["--max-new-tokens", "0"], "0 is not accepted"),
    (["--max-new-tokens", "50"], "--max-new-tokens 50 needs more than the model's max_len=22"),
    (["--text", "1 2 x"], "digits and '|' only, got 'x'"),
    (["--text", "1" * 100], "the source has 100 tokens; the model reads at most max_len=22"),
    (["--text", "|" * 23], "the source has 23 tokens"),
]


@pytest.mark.parametrize(("extra", "message"), TRANSLATE_CASES)
def test_translate_refuses_bad_settings_and_sources(
    extra, message, checkpoints, capsys, monkeypatch
):
    argv = ["translate", checkpoints / "encoder-decoder" / "last.pt", *extra]
    if "--text" not in extra:
        argv += ["--text", "1 2 3"]
    expect_cli_error(argv, message, capsys, monkeypatch)


def test_translate_with_nothing_to_translate(checkpoints, capsys, monkeypatch):
    argv = ["translate", checkpoints / "encoder-decoder" / "last.pt"]
    expect_cli_error(argv, "nothing to translate", capsys, monkeypatch, stdin="\n  \n")


@pytest.mark.parametrize("model", ["checkpoint", "shipped"])
def test_a_beam_the_machine_cannot_hold_is_refused_before_decoding(
    model, checkpoints, capsys, monkeypatch
):
    path = checkpoints / "encoder-decoder" / "last.pt" if model == "checkpoint" else None
    text = "3 1 4" if model == "checkpoint" else "Ein Hund."
    path = path or Path(__file__).resolve().parents[1] / "models" / "multi30k"
    monkeypatch.setattr("annotated_transformer.decode.free_memory", lambda device: 2 * 10**9)
    decoded = []
    monkeypatch.setattr("annotated_transformer.decode._Stepper.__call__", decoded.append)
    expect_cli_error(
        ["translate", path, "--text", text, "--beam", "1000000", "--device", "cpu"],
        "GB this cpu device can spare (80% of its free memory); use beam_size <= ",
        capsys,
        monkeypatch,
    )
    assert decoded == []  # refused before the first step


def test_a_source_longer_than_the_budget_translates_with_a_visible_warning(
    checkpoints, capsys, monkeypatch
):
    code = main(["translate", str(checkpoints / "encoder-decoder" / "last.pt"), "--text", "1" * 15])
    captured = capsys.readouterr()
    assert code == 0 and len(captured.out.split()) == 10  # the copy task's max_new_tokens
    assert "warning: 1 of 1 outputs stopped at the decoding budget" in captured.err


@pytest.mark.parametrize(
    ("command", "extra", "message"),
    [
        ("generate", ["--prompt", "1"], "holds a encoder-decoder model; this command needs"),
        ("translate", ["--text", "1"], "holds a decoder-only model; this command needs"),
    ],
)
def test_a_checkpoint_of_the_wrong_architecture(
    command, extra, message, checkpoints, capsys, monkeypatch
):
    other = "encoder-decoder" if command == "generate" else "decoder-only"
    argv = [command, checkpoints / other / "last.pt", *extra]
    expect_cli_error(argv, message, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--split", "train"], "--split 'train' is not one of: valid, test"),
        (["--split", "nope"], "--split 'nope' is not one of"),
        (["--max-batches", "0"], "0 is not accepted"),
        (["--beam", "0"], "0 is not accepted"),
        (["--beam", "2.5"], "'2.5' is not accepted: use a positive integer"),
        (["--alpha", "-0.6"], "argument --alpha: -0.6 is not accepted: use a finite number >= 0"),
        (["--alpha", "nan"], "nan is not accepted"),
        (["--alpha=-inf"], "-inf is not accepted"),  # "--alpha -inf" reads as an option
        (["--alpha", "long"], "'long' is not accepted: use a number"),
        (["--beam", "4", "--no-bleu"], "--beam 4 with --no-bleu: nothing is decoded"),
    ],
)
def test_evaluate_refuses_bad_settings(extra, message, checkpoints, capsys, monkeypatch):
    argv = ["evaluate", checkpoints / "encoder-decoder" / "last.pt", *extra]
    expect_cli_error(argv, message, capsys, monkeypatch)


def test_evaluate_refuses_a_beam_for_a_model_it_does_not_decode(checkpoints, capsys, monkeypatch):
    argv = ["evaluate", checkpoints / "decoder-only" / "last.pt", "--beam", "4"]
    expect_cli_error(
        argv, "a decoder-only model is evaluated by its loss only", capsys, monkeypatch
    )


INFO = {"name": "copy", "pad_id": 0, "bos_id": 1, "eos_id": 2}


class Untouchable:
    """Batches that fail if anything reads them: the check must come first."""

    def __iter__(self):
        raise AssertionError("the batches were read before the settings were checked")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"alpha": -0.6}, "alpha=-0.6 is not accepted: the length penalty's exponent is a finite"),
        ({"alpha": math.nan}, "alpha=nan is not accepted"),
        ({"alpha": -1, "beam_size": 1}, "alpha=-1 is not accepted"),  # refused even when greedy
        ({"beam_size": 0}, "beam_size=0 is not accepted: use a positive integer"),
        ({"beam_size": 2.0}, "beam_size=2.0 is not accepted"),
    ],
)
def test_translate_refuses_bad_decoding_settings_before_reading_a_batch(settings, message):
    model = tiny_model("encoder-decoder", vocab_size=8)
    with pytest.raises(ValueError) as error:
        translate(model, Untouchable(), tokenizer=None, info=INFO, **settings)
    assert message in str(error.value)


def test_translate_refuses_a_beam_for_a_one_stack_model_before_reading_a_batch():
    model = tiny_model("decoder-only", vocab_size=8)
    with pytest.raises(ValueError, match="a one-stack model is decoded greedily only"):
        translate(model, Untouchable(), tokenizer=None, info=INFO, beam_size=4)


@pytest.mark.parametrize("command", ["evaluate", "translate", "generate"])
def test_a_missing_checkpoint_is_named(command, capsys, monkeypatch):
    argv = (
        [command, "missing.pt", "--prompt", "1"]
        if command == "generate"
        else [command, "missing.pt"]
    )
    expect_cli_error(argv, "no checkpoint at missing.pt", capsys, monkeypatch)


# ---------------------------------------------------------------------------------------------
# Library entries: the same checks, for the chapters (papermill) and scripts


FIELDS = {"model": {"d_model": 512, "positional": "sinusoidal"}, "train": {"lr": 1e-3}}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([("d_modle", 1)], "unknown setting 'd_modle' (no section has it); did you mean d_model?"),
        ([("optim.lr", 1)], "the section 'optim' is not one of: model, train"),
        ([("train.d_model", 1)], "'d_model' is not a train field; accepted: lr"),
        ([("model.learning_rate", 1)], "accepted: d_model, positional"),
    ],
)
def test_the_settings_router_lists_what_it_accepts(items, message):
    with pytest.raises(ValueError) as error:
        route(items, FIELDS)
    assert message in str(error.value)


def test_the_router_reads_none_as_a_choice_where_the_field_holds_text():
    routed = route([("positional", "none"), ("lr", "null")], FIELDS)
    assert routed == {"model": {"positional": "none"}, "train": {"lr": None}}


def test_an_ambiguous_bare_key_names_both_sections():
    with pytest.raises(ValueError, match="write model.seed or train.seed"):
        route([("seed", 1)], {"model": {"seed": 0}, "train": {"seed": 0}})


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "message"),
    [
        (math.inf, 5, None, "temperature=inf is not accepted"),
        (-math.inf, None, None, "temperature=-inf is not accepted"),
        (math.nan, None, None, "temperature=nan is not accepted"),
        (-0.5, None, None, "temperature=-0.5 is not accepted"),
        (1.0, 0, None, "top_k=0 is not accepted: use an integer >= 1"),
        (1.0, True, None, "top_k=True is not accepted"),
        (1.0, None, 0.0, "top_p=0.0 is not accepted"),
        (1.0, None, 1.01, "top_p=1.01 is not accepted"),
        (0.0, 1, None, "temperature=0 is greedy decoding"),
    ],
)
def test_check_sampling(temperature, top_k, top_p, message):
    with pytest.raises(ValueError) as error:
        check_sampling(temperature, top_k, top_p)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ("abc", "seeds='abc' is not accepted: use a count (3) or distinct integers"),
        ("1,x", "seeds='1,x' is not accepted"),
        ("-1", "seeds='-1' is not accepted"),
        ("1,1", "use distinct integers >= 0"),
        (0, "seeds=0 is not accepted: use at least 1"),
        (-2, "seeds=-2 is not accepted"),
        (True, "seeds=True is not accepted"),
        ([], "use distinct integers >= 0"),
    ],
)
def test_chapter_09s_seeds_are_checked(seeds, message):
    with pytest.raises(ValueError) as error:
        ab.parse_seeds(seeds)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("{bad", "overrides must be a JSON object"),
        ("[1]", "overrides must be a dict or a JSON object, got list"),
        ({"model.d_modle": 1}, "'d_modle' is not a model field; did you mean d_model?"),
        ({"optim.lr": 1}, "the section 'optim' is not one of: model, train, data, evaluation"),
        ({"train.seed": 1}, "'seed' is not a train field"),
        ({"data.context_length": 64}, "'context_length' is not a data field"),
        ({"evaluation.eval_batches": 2}, "'eval_batches' is not a evaluation field"),
    ],
)
def test_chapter_09s_overrides_are_routed_by_the_one_router(overrides, message):
    with pytest.raises(ValueError) as error:
        ab.parse_overrides(overrides, "translation")
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"evaluation.test_sentences": -5}, "evaluation.test_sentences=-5 is not accepted"),
        ({"evaluation.test_sentences": 0}, "evaluation.test_sentences=0 is not accepted"),
        ({"evaluation.bleu_resamples": -1}, "evaluation.bleu_resamples=-1 is not accepted"),
        ({"evaluation.max_new_tokens": 0}, "evaluation.max_new_tokens=0 is not accepted"),
        ({"data.max_train_pairs": 0}, "max_train_pairs"),
        ({"model.n_heads": 3}, "n_heads=3"),
    ],
)
def test_a_studys_bad_values_fail_before_anything_trains(overrides, message):
    with pytest.raises(ValueError) as error:
        ab.run_configs("heads", "multi30k", 1, "smoke", overrides)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("evaluation", "message"),
    [
        ({"test_sentences": -5}, "evaluation.test_sentences=-5 is not accepted"),
        ({"test_sentences": 2.5}, "evaluation.test_sentences=2.5"),
        ({"eval_batches": "all"}, "evaluation.eval_batches='all'"),
        ({"decode": "beam"}, "evaluation.decode='beam' is not one of: greedy"),
    ],
)
def test_check_evaluation(evaluation, message):
    with pytest.raises(ValueError) as error:
        check_evaluation(evaluation)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ("foo", "task='foo' is not one of"),
        ("copy,foo", "task='foo' is not one of"),
        ("", "names no task"),
    ],
)
def test_chapter_08s_task_list(tasks, message):
    with pytest.raises(ValueError) as error:
        parse_task_list(tasks, "smoke")
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("profile", "task", "message"),
    [
        ("fast", "copy", "profile='fast' is not one of: smoke, cpu, gpu"),
        ("cpu", "wmt", "task='wmt' is not one of"),
    ],
)
def test_run_size_names(profile, task, message):
    with pytest.raises(ValueError) as error:
        run_size(profile, task)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("copy", {"length": 0}, "data.length=0"),
        ("copy", {"nope": 1}, "'nope' is not an option of the task 'copy'; accepted: length"),
        ("ptb", {"context_length": 0}, "data.context_length=0"),
        ("multi30k", {"max_train_pairs": 0}, "data.max_train_pairs=0"),
        ("nope", {}, "task='nope' is not one of"),
    ],
)
def test_build_task_checks_options(name, options, message):
    with pytest.raises(ValueError) as error:
        build_task(name, options)
    assert message in str(error.value)


def test_a_papermill_mapping_parameter():
    assert parse_json_object("") == {} and parse_json_object('{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="got int"):
        parse_json_object(3)


# ---------------------------------------------------------------------------------------------
# Broken checkpoints given to evaluate / translate / generate: one clear error each, before any
# model is allocated (the oversized sizes are read from the file and bounded first)


def rewrite(source, path, **changes):
    """``source``'s checkpoint with entries replaced (None removes one; ``model_config`` and
    ``model`` dicts are merged into the saved ones)."""
    state = load_checkpoint(source)
    for key, value in changes.items():
        if value is None:
            state.pop(key)
        elif key in ("model_config", "model"):
            state[key] = {**state[key], **value}
        else:
            state[key] = value
    save_checkpoint(path, state)


def changed(**changes):
    """A maker of ``source``'s checkpoint with ``changes`` (see :func:`rewrite`)."""
    return lambda source, path: rewrite(source, path, **changes)


def truncated(source, path):
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def non_finite_weights(source, path):
    state = load_checkpoint(source)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    torch.save(state, path)  # save_checkpoint would refuse it: written as a damaged file would be


BROKEN_CHECKPOINTS = {
    "truncated": (truncated, "is truncated or is not a torch checkpoint archive"),
    "empty": (lambda source, path: path.write_bytes(b""), "is empty (0 bytes)"),
    "random-bytes": (
        lambda source, path: path.write_bytes(bytes(range(256)) * 16),
        "does not start like the zip archive torch.save writes",
    ),
    "plain-text": (
        lambda source, path: path.write_text("epoch 1: loss 2.3\n"),
        "its first bytes are b'epoc'",
    ),
    "foreign-dict": (
        lambda source, path: torch.save({"weights": torch.zeros(3)}, path),
        "is not an annotated-transformer checkpoint: expected format",
    ),
    "bare-tensor": (lambda source, path: torch.save(torch.zeros(3), path), "found 'Tensor'"),
    "pickled-object": (
        lambda source, path: torch.save({"path": PurePosixPath("/")}, path),
        "unpickling them could run arbitrary code",
    ),
    "other-format": (
        changed(format=99),
        "expected format 'annotated-transformer-checkpoint/1', found 99",
    ),
    "no-weights": (
        changed(model=None),
        "is incomplete or damaged: model is missing",
    ),
    "no-config": (
        changed(model_config=None),
        "is incomplete or damaged: model_config is missing",
    ),
    "config-disagrees": (
        changed(model_config={"d_ff": 64}),
        "the weights disagree with its model_config",
    ),
    "missing-tensor": (
        changed(model={"extra.weight": torch.zeros(2)}),
        "the weights disagree with its model_config: unexpected extra.weight",
    ),
    "max_len-1e9": (
        changed(model_config={"max_len": 10**9}),
        "max_len=1000000000 (limit 1,048,576)",
    ),
    "vocab_size-1e12": (
        changed(model_config={"vocab_size": 10**12}),
        "vocab_size=1000000000000 (limit 16,777,216)",
    ),
    "d_model-2**20": (
        changed(model_config={"d_model": 2**20}),
        "d_model=1048576 (limit 65,536)",
    ),
    "n_layers-1e6": (
        changed(model_config={"n_layers": 10**6}),
        "n_layers=1000000 (limit 512)",
    ),
    "too-many-parameters": (
        changed(model_config={"vocab_size": 2**24, "d_model": 4096}),
        "more than the 2,147,483,648 this package loads",
    ),
    "negative-max_len": (
        changed(model_config={"max_len": -1}),
        "has an invalid model_config: max_len=-1 is not accepted",
    ),
    "text-size": (
        changed(model_config={"d_model": "16"}),
        "d_model='16' is not accepted: use a positive integer",
    ),
    "non-finite-weights": (non_finite_weights, "holds non-finite weights"),
    "no-tokenizer": (
        changed(tokenizer=None),
        "is incomplete or damaged: tokenizer is missing",
    ),
    "unknown-tokenizer": (
        changed(tokenizer={"type": "sentencepiece"}),
        "tokenizer type 'sentencepiece' is not one of: digits, char, word, bpe",
    ),
    "no-task": (
        changed(task=None),
        "does not say which task it was trained on",
    ),
}
COMMANDS = {
    "evaluate": ("encoder-decoder", []),
    "translate": ("encoder-decoder", ["--text", "1 2 3"]),
    "generate": ("decoder-only", ["--prompt", "12|"]),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", sorted(BROKEN_CHECKPOINTS))
def test_a_broken_checkpoint_is_one_clear_error(
    kind, command, checkpoints, tmp_path, capsys, monkeypatch
):
    make, message = BROKEN_CHECKPOINTS[kind]
    arch, extra = COMMANDS[command]
    path = tmp_path / f"{kind}.pt"
    make(checkpoints / arch / "last.pt", path)
    expect_cli_error([command, path, *extra], message, capsys, monkeypatch)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_directory_is_not_a_checkpoint(command, checkpoints, capsys, monkeypatch):
    arch, extra = COMMANDS[command]
    argv = [command, checkpoints / arch, *extra]
    expect_cli_error(argv, "is a directory, not a checkpoint file (try", capsys, monkeypatch)


def test_a_translation_checkpoint_whose_task_has_no_bos_id(
    checkpoints, tmp_path, capsys, monkeypatch
):
    path = tmp_path / "no-bos.pt"
    rewrite(checkpoints / "encoder-decoder" / "last.pt", path, task={"name": "copy"})
    argv = ["translate", path, "--text", "1 2"]
    expect_cli_error(
        argv, "has no bos_id: the decoder's first input is unknown", capsys, monkeypatch
    )


# ---------------------------------------------------------------------------------------------
# A shipped-model folder (models/<task>/) whose files were damaged, mixed or edited

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """Copies of two shipped models, a character and a BPE one; each test edits config.json and
    the fixture puts it back."""
    root = tmp_path_factory.mktemp("shipped")
    for name in ("tinyshakespeare", "multi30k"):
        shutil.copytree(MODELS / name, root / name)
    return root


def edited(description, change):
    description = json.loads(json.dumps(description))
    change(description)
    return description


def drop(*keys):
    def change(description):
        target = description
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return change


def put(value, *keys):
    def change(description):
        target = description
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def fewer_symbols(description):
    description["tokenizer"]["symbols"] = description["tokenizer"]["symbols"][:61]


SHIPPED_CASES = [
    ("tinyshakespeare", drop("model_config"), "config.json has no 'model_config'"),
    ("tinyshakespeare", drop("tokenizer"), "config.json has no 'tokenizer'"),
    ("tinyshakespeare", drop("tokenizer", "symbols"), "the char tokenizer's 'symbols' is missing"),
    ("tinyshakespeare", put("sixty", "tokenizer", "symbols"), "'symbols' is 'sixty', not a list"),
    ("tinyshakespeare", put([1, 2], "tokenizer"), "'tokenizer' is [1, 2], not the tokenizer's"),
    ("tinyshakespeare", put("big", "model_config", "d_model"), "has an invalid model_config"),
    ("tinyshakespeare", put(10**9, "model_config", "max_len"), "max_len=1000000000 (limit"),
    ("tinyshakespeare", put("x", "task", "eos_id"), "task: 'eos_id' is 'x', not an integer"),
    ("tinyshakespeare", put("int4", "dtype"), "dtype='int4' is not one of: float32, float16"),
    ("tinyshakespeare", put(2, "version"), "has version 2; this package reads version 1"),
    (
        "tinyshakespeare",
        fewer_symbols,
        "the tokenizer has 61 tokens, but tokenizer_vocab_size records 65",
    ),
    (
        "tinyshakespeare",
        put("0" * 64, "weights_sha256"),
        "model.safetensors is not the file",
    ),
    (
        "multi30k",
        put('{"model": {', "tokenizer", "tokenizer"),
        "the bpe tokenizer's 'tokenizer' cannot be read by the tokenizers library",
    ),
]


@pytest.mark.parametrize(("name", "change", "message"), SHIPPED_CASES)
def test_a_damaged_shipped_model_is_one_clear_error_naming_the_file_and_key(
    name, change, message, shipped, capsys, monkeypatch
):
    folder = shipped / name
    original = (folder / "config.json").read_text(encoding="utf-8")
    command = ["generate", folder, "--prompt", "ROMEO:"]
    if name == "multi30k":
        command = ["translate", folder, "--text", "Ein Hund."]
    try:
        description = edited(json.loads(original), change)
        (folder / "config.json").write_text(json.dumps(description), encoding="utf-8")
        error = expect_cli_error(command, message, capsys, monkeypatch)
        assert f"{folder / 'config.json'}" in error or f"{folder / 'model.safetensors'}" in error
    finally:
        (folder / "config.json").write_text(original, encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"format": "annotated-transformer-pretrained", ', "config.json is not valid JSON"),
        (b"\xff\xfe not utf-8", "config.json is not valid JSON"),
    ],
)
def test_a_shipped_config_that_is_not_json_is_named(content, message, shipped, capsys, monkeypatch):
    folder = shipped / "tinyshakespeare"
    original = (folder / "config.json").read_bytes()
    try:
        (folder / "config.json").write_bytes(content)
        expect_cli_error(
            ["generate", folder, "--prompt", "A"], f"{folder / message}", capsys, monkeypatch
        )
    finally:
        (folder / "config.json").write_bytes(original)


def test_another_models_weights_beside_a_config_are_refused(shipped, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(MODELS / "ptb" / "config.json", folder / "config.json")
    shutil.copy(shipped / "tinyshakespeare" / "model.safetensors", folder / "model.safetensors")
    expect_cli_error(
        ["generate", folder, "--prompt", "the"],
        f"{folder / 'model.safetensors'} is not the file {folder / 'config.json'} describes",
        capsys,
        monkeypatch,
    )


def test_a_prompt_outside_a_character_vocabulary_says_what_may_be_typed(capsys, monkeypatch):
    expect_cli_error(
        ["generate", MODELS / "tinyshakespeare", "--prompt", "ROMEO: é"],
        "'é' is not in this model's vocabulary: it reads the 65 characters",
        capsys,
        monkeypatch,
    )


@pytest.mark.parametrize("source", ["stdin", "--text"])
def test_text_that_is_not_utf8_is_named(source, checkpoints, capsys, monkeypatch):
    bad = b"3 1 \xff 4".decode("utf-8", "surrogateescape")  # as Python reads such bytes
    argv = ["translate", checkpoints / "encoder-decoder" / "last.pt"]
    where = "line 1 of stdin" if source == "stdin" else "--text 1"
    if source == "--text":
        argv += ["--text", bad]
    expect_cli_error(
        argv, f"{where} is not UTF-8 text (at character 5)", capsys, monkeypatch, stdin=bad
    )


def test_a_config_file_that_is_not_utf8_is_named(tmp_path, capsys, monkeypatch):
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"d_model": "\xe9"}')  # Latin-1, as an editor on Windows may save it
    expect_cli_error(
        ["train", "--task", "copy", "--config", path],
        f"--config {path} is not UTF-8 text (byte 14 is b'\\xe9')",
        capsys,
        monkeypatch,
    )


# ---------------------------------------------------------------------------------------------
# Each field of TransformerConfig and TrainConfig, set to what it does not accept (the copy task
# is built, nothing trains: every case fails in the checks)


FIELD_CASES = [
    ("model.d_model=0", "d_model=0 is not accepted: use a positive integer"),
    ("model.d_model=-16", "d_model=-16 is not accepted"),
    ("model.d_model=10**9", "d_model='10**9' is not accepted: use a positive integer"),
    ("model.n_heads=0", "n_heads=0 is not accepted"),
    ("model.n_heads=3", "d_model=16 is not divisible by n_heads=3"),
    ("model.n_layers=0", "n_layers=0 is not accepted"),
    ("model.n_encoder_layers=0", "n_encoder_layers=0 is not accepted"),
    ("model.d_ff=0", "d_ff=0 is not accepted"),
    ("model.dropout=1", "dropout=1 is not accepted: use a number in [0, 1)"),
    ("model.dropout=-0.1", "dropout=-0.1 is not accepted"),
    ("model.dropout=nan", "dropout='nan' is not accepted"),
    ("model.attention_dropout=2", "attention_dropout=2 is not accepted"),
    ("model.activation_dropout=-1", "activation_dropout=-1 is not accepted"),
    ("model.max_len=0", "max_len=0 is not accepted: use a positive integer"),
    ("model.max_len=5", "model.max_len=5 is too short for the task 'copy'"),
    ("model.max_len=1000000000", "max_len=1000000000 (limit 1,048,576)"),
    ("model.vocab_size=1000000000000", "vocab_size=1000000000000 (limit 16,777,216)"),
    (
        "model.vocab_size=3",
        "model.vocab_size=3 is smaller than the vocabulary of the task 'copy' (13 tokens)",
    ),
    ("model.norm=batch", "norm='batch' is not one of: layernorm, rmsnorm"),
    ("model.norm_position=middle", "norm_position='middle' is not one of: post, pre"),
    ("model.activation=tanh", "activation='tanh' is not one of: relu, gelu"),
    ("model.init=zeros", "init='zeros' is not one of: xavier, normal"),
    ("model.norm_eps=0", "norm_eps=0 is not accepted: use a positive number"),
    ("model.rope_base=0", "rope_base=0 is not accepted: use a number > 1"),
    ("model.relative_max_distance=0", "relative_max_distance=0 is not accepted"),
    ("model.pad_id=-1", "pad_id=-1 is not accepted: use None or an id in"),
    ("model.residual=maybe", "residual='maybe' is not accepted: use True or False"),
    ("model.tie_embeddings=2", "tie_embeddings=2 is not accepted: use True or False"),
    ("model.src_vocab_size=0", "src_vocab_size=0 is not accepted"),
    ("train.max_steps=0", "max_steps=0 is not accepted: use a positive integer"),
    ("train.max_steps=-1", "max_steps=-1 is not accepted"),
    ("train.warmup=-1", "warmup=-1 is not accepted: use an integer >= 0"),
    ("train.warmup=50", "schedule='warmup_cosine' needs max_steps > warmup"),
    ("train.lr=nan", "lr='nan' is not accepted"),
    ("train.lr=inf", "lr='inf' is not accepted"),
    ("train.lr=0", "lr=0 is not accepted"),
    ("train.min_lr=-1", "min_lr=-1 is not accepted"),
    ("train.grad_clip=-1", "grad_clip=-1 is not accepted"),
    (
        "train.label_smoothing=1.5",
        "label_smoothing=1.5 is not accepted: use a number in [0.0, 1.0)",
    ),
    ("train.schedule=nope", "schedule='nope' is not one of: constant, noam, warmup_cosine"),
    ("train.precision=fp8", "precision='fp8' is not one of: fp32, bf16, auto"),
    ("train.betas=[2,0.9]", "betas=2 is not accepted"),
    ("train.betas=1", "betas=1 is not accepted: use two numbers in [0, 1)"),
    ("train.weight_decay=-1", "weight_decay=-1 is not accepted"),
    ("train.eps=0", "eps=0 is not accepted"),
    ("train.eval_every=0", "eval_every=0 is not accepted"),
    ("train.save_every=-1", "save_every=-1 is not accepted"),
    ("train.log_every=0", "log_every=0 is not accepted"),
    ("train.accumulation=0", "accumulation=0 is not accepted"),
    ("train.eval_batches=0", "eval_batches=0 is not accepted"),
    ("train.early_stopping_patience=-1", "early_stopping_patience=-1 is not accepted"),
    ("train.early_stopping_metric=bleu", "early_stopping_metric='bleu' is not among the"),
    ("train.early_stopping_mode=up", "early_stopping_mode='up' is not one of: auto, min, max"),
    ("train.device=tpu", "device='tpu' is not one of: auto, cpu, cuda, mps"),
    ("train.compile=3", "compile=3 is not accepted: use True or False"),
    ("train.seed=-1", "seed=-1 is not accepted"),
    ("train.seed=x", "train.seed='x' is not accepted"),
    ("train.accumulate=2", "'accumulate' is not a train field; did you mean accumulation?"),
]


@pytest.mark.parametrize(("setting", "message"), FIELD_CASES)
def test_each_config_field_refuses_what_it_does_not_accept(setting, message, capsys, monkeypatch):
    quick = ["--quiet", "--set", "max_steps=2", "--set", "warmup=1", "--set", "d_model=16"]
    expect_cli_error([*TRAIN, *quick, "--set", setting], message, capsys, monkeypatch)


UNSIZED_FOR_REFERENCE = [name for name in ("copy", "ptb", "wikitext-2", "cmn-eng")
                         if name not in TRAINING["reference"]]  # fmt: skip


@pytest.mark.parametrize("task", UNSIZED_FOR_REFERENCE)
def test_a_profile_that_does_not_size_the_task(task, capsys, monkeypatch):
    argv = ["train", "--task", task, "--profile", "reference"]
    expect_cli_error(
        argv, f"task={task!r} has no training size under profile 'reference'", capsys, monkeypatch
    )


# ---------------------------------------------------------------------------------------------
# A run directory: resumed with other settings, held by a live run, diverging


RUN = ["--quiet", "--set", "max_steps=2", "--set", "warmup=1", "--set", "d_model=16"]


@pytest.fixture
def finished_run(checkpoints, tmp_path):
    """A copy of the decoder-only run (its settings: ``RUN`` and ``arch=decoder-only``)."""
    out = tmp_path / "run"
    shutil.copytree(checkpoints / "decoder-only", out)
    return [*TRAIN, "--out", out, *RUN, "--set", "arch=decoder-only"], out


@pytest.mark.parametrize(
    ("change", "listed"),
    [
        ("train.lr=0.01", "train.lr: 0.005 -> 0.01 (may change"),
        ("seed=1", "train.seed: 0 -> 1 (may not change on resume)"),
        ("d_model=32", "model.d_model: 16 -> 32 (may not change on resume)"),
        ("length=7", "task.options.length: 10 -> 7 (may not change on resume)"),
        ("train.label_smoothing=0.2", "train.label_smoothing: 0.0 -> 0.2"),
    ],
)
def test_resume_refuses_changed_settings_listing_them(
    change, listed, finished_run, capsys, monkeypatch
):
    argv, _ = finished_run
    expect_cli_error([*argv, "--resume", "--set", change], listed, capsys, monkeypatch)


def test_resume_applies_a_change_it_is_allowed_and_records_it(finished_run, capsys):
    argv, out = finished_run
    change = ["--set", "max_steps=3", "--allow-change", "train.max_steps"]
    assert main([str(arg) for arg in [*argv, "--resume", *change]]) == 0
    state = load_checkpoint(out / "last.pt")
    assert state["step"] == 3 and state["train_config"]["max_steps"] == 3


def test_allow_change_without_resume_is_refused(finished_run, capsys, monkeypatch):
    argv, _ = finished_run
    expect_cli_error(
        [*argv, "--allow-change", "train.lr"], "--allow-change is for --resume", capsys, monkeypatch
    )


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_directory_held_by_a_live_process_is_refused(
    resume, finished_run, capsys, monkeypatch
):
    argv, out = finished_run
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": "2024-05-01T10:00:00+00:00",
    }
    (out / LOCK_NAME).write_text(json.dumps(holder))
    argv = [*argv, "--resume"] if resume else argv
    expect_cli_error(argv, f"pid {os.getpid()} on host", capsys, monkeypatch)


@pytest.mark.parametrize("max_steps", [30, 21])
def test_divergence_exits_non_zero_naming_the_last_good_checkpoint(
    max_steps, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "diverged"
    settings = [f"max_steps={max_steps}", "warmup=1", "d_model=16", "save_every=1", "train.lr=1e4"]
    argv = [*TRAIN, "--out", out, "--quiet", *[arg for s in settings for arg in ("--set", s)]]
    expect_cli_error(
        argv, f"the last good checkpoint is kept at {out / 'last.pt'}", capsys, monkeypatch
    )
    state = load_checkpoint(out / "last.pt")
    assert first_non_finite(state) is None  # weights and Adam moments
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "train",
                "--task",
                "copy",
                "--out",
                str(out),
                "--resume",
                "--quiet",
                *[arg for s in settings for arg in ("--set", s)],
            ]
        )
    assert exit_info.value.code != 0


@pytest.mark.parametrize(("name", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_train_saves_and_prints_the_resume_command(
    name, status, tmp_path, capsys, monkeypatch
):
    from annotated_transformer.training.trainer import Trainer

    real_update = Trainer._update

    def update_then_signal(trainer, *arguments, **options):
        checked = real_update(trainer, *arguments, **options)
        if trainer.step == 2 and trainer.model.training:
            signal.raise_signal(getattr(signal, name))  # Ctrl-C, or a scheduler's SIGTERM
        return checked

    monkeypatch.setattr(Trainer, "_update", update_then_signal)
    out = tmp_path / "run"
    argv = [*TRAIN, "--out", str(out), *map(str, RUN[1:]), "--set", "max_steps=5"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == status and "Traceback" not in err
    resume = shlex.join(["python", "-m", "annotated_transformer", *argv, "--resume"])
    assert f"error: interrupted ({name}): saved {out / 'last.pt'} at update 2; " in err
    assert f"continue with: {resume}" in err
    assert not (out / LOCK_NAME).exists()
    monkeypatch.setattr(Trainer, "_update", real_update)
    assert main([*argv, "--resume"]) == 0  # the printed command, run
    assert load_checkpoint(out / "last.pt")["step"] == 5


def test_sigterm_outside_training_ends_with_a_message(checkpoints, capsys, monkeypatch):
    def terminated(*arguments, **options):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr("annotated_transformer.__main__.translate", terminated)
    before = signal.getsignal(signal.SIGTERM)
    expect_cli_error(
        ["translate", checkpoints / "encoder-decoder" / "last.pt", "--text", "1 2"],
        "error: interrupted",
        capsys,
        monkeypatch,
    )
    assert signal.getsignal(signal.SIGTERM) is before  # given back


# ---------------------------------------------------------------------------------------------
# Generation and papermill parameters (more)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--temperature=-inf"], "temperature=-inf is not accepted"),
        (["--top-p", "inf"], "top_p=inf is not accepted"),
        (["--top-k", "1.5"], "'1.5' is not accepted: use a positive integer"),
        (["--prompt", "é"], "digits and '|' only, got 'é'"),
    ],
)
def test_generate_refuses_more_bad_settings(extra, message, checkpoints, capsys, monkeypatch):
    argv = ["generate", checkpoints / "decoder-only" / "last.pt", "--prompt", "12|", *extra]
    expect_cli_error(argv, message, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([1.5], "seeds=[1.5] is not accepted: use distinct integers >= 0"),
        (["a"], "seeds=['a'] is not accepted"),
        ([True, 2], "seeds=[True, 2] is not accepted"),
        ([-1, 2], "seeds=[-1, 2] is not accepted"),
        ("1.5", "seeds='1.5' is not accepted"),
        (",", "seeds=',' is not accepted"),
    ],
)
def test_chapter_09s_seed_lists_are_checked(seeds, message):
    with pytest.raises(ValueError) as error:
        ab.parse_seeds(seeds)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("tasks", "profile", "message"),
    [
        (" , ", "smoke", "names no task"),
        ("copy,wmt", "cpu", "task='wmt' is not one of"),
        ("copy", "reference", "task='copy' has no training size under profile 'reference'"),
        ("copy", "fast", "profile='fast' is not one of"),
    ],
)
def test_chapter_08s_task_list_against_its_profile(tasks, profile, message):
    with pytest.raises(ValueError) as error:
        parse_task_list(tasks, profile)
    assert message in str(error.value)


def test_a_disk_that_fills_during_training_says_how_to_continue(tmp_path, capsys, monkeypatch):
    """The first last.pt is written, a later save finds the disk full: one error line that keeps
    the good checkpoint and names the command that continues from it."""
    import annotated_transformer.training.checkpoint as checkpoint_module

    saves, real_save = [], torch.save

    def fills_up(state, handle, *args, **kwargs):
        saves.append(1)
        if len(saves) > 2:  # update 1: best.pt and last.pt written
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(state, handle, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", fills_up)
    out = tmp_path / "run"
    argv = [*TRAIN, "--out", out, *RUN, "--set", "max_steps=4", "--set", "eval_every=1"]
    line = expect_cli_error(argv, "no space left on the device", capsys, monkeypatch)
    assert f"the run continues from {out / 'last.pt'} with: python -m annotated_transformer" in line
    assert line.rstrip().endswith("--resume") and "free some space" in line
    assert load_checkpoint(out / "last.pt")["step"] == 1  # the good one, unchanged
