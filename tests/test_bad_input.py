"""Bad input, as a new user types it: each case must end in one clear message, before any work.

Command-line cases call ``main([...])`` and expect a non-zero exit with exactly one ``error:``
line naming the problem (no traceback); library cases expect a ``ValueError`` with the message.
"""

from __future__ import annotations

import io
import math

import pytest

from annotated_transformer import ablation as ab
from annotated_transformer.__main__ import main
from annotated_transformer.evaluation import check_sampling
from annotated_transformer.profiles import check_evaluation, parse_task_list, run_size
from annotated_transformer.settings import parse_json_object, route
from annotated_transformer.tasks import build_task

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


TRAIN_CASES = [
    (["train"], "name a task: --task NAME"),
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
    ],
)
def test_evaluate_refuses_bad_settings(extra, message, checkpoints, capsys, monkeypatch):
    argv = ["evaluate", checkpoints / "encoder-decoder" / "last.pt", *extra]
    expect_cli_error(argv, message, capsys, monkeypatch)


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
