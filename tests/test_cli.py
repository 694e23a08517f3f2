import dataclasses
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from annotated_transformer.__main__ import main, resolve_settings
from annotated_transformer.config import TrainConfig, TransformerConfig
from annotated_transformer.decode import greedy_decode
from annotated_transformer.results.pretrained import save_pretrained
from annotated_transformer.tasks.copy_task import copy_task_batches
from annotated_transformer.tasks.settings import parse_value
from annotated_transformer.training.checkpoint import load_checkpoint, load_model

SHARED_DATA = Path(os.environ["AT_DATA_DIR"])  # set by conftest.py or the Makefile
TINY_MODEL = [
    "--set",
    "d_model=32",
    "--set",
    "n_heads=4",
    "--set",
    "d_ff=64",
    "--set",
    "n_layers=1",
]
FEW_STEPS = ["--set", "max_steps=2", "--set", "warmup=1", "--set", "eval_every=2"]


def needs_data(*files):
    """Data files the test reads: CI always has them, so a missing one is a failure, not a skip."""
    missing = [file for file in files if not (SHARED_DATA / file).is_file()]
    assert not missing, f"data files not in {SHARED_DATA} (set AT_DATA_DIR): {missing}"
    return lambda test: test


def run(capsys, *argv):
    """``python -m annotated_transformer ARGV`` in this process; returns (exit code, stdout)."""
    code = main([str(arg) for arg in argv])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """The copy task trained once with the task's defaults (about 250 updates, seconds on a CPU)."""
    directory = tmp_path_factory.mktemp("copy")
    capture = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", capture)
        code = main(["train", "--task", "copy", "--out", str(directory), "--set", "progress=false"])
    assert code == 0
    return directory, json.loads(capture.getvalue())


def test_training_the_copy_task_reaches_full_accuracy_on_fresh_sequences(copy_run):
    directory, summary = copy_run
    assert summary["stop_reason"] == "max_steps"
    assert summary["eval_accuracy"] == 1.0
    model, state = load_model(directory / "best.pt")
    generator = torch.Generator().manual_seed(2024)  # sequences the model has never seen
    (batch,) = copy_task_batches(1, 200, 10, generator)
    decoded = greedy_decode(model, src=batch.src, max_new_tokens=10, bos_id=state["task"]["bos_id"])
    assert torch.equal(decoded[:, 1:], batch.src)  # every sequence copied exactly
    assert sorted(path.name for path in directory.iterdir()) == [
        "best.pt",
        "config.json",
        "history.csv",
        "history.json",
        "last.pt",
        "run.json",
    ]


def test_the_run_directory_records_each_launch(copy_run):
    directory, _ = copy_run
    (launch,) = json.loads((directory / "run.json").read_text())["launches"]
    assert launch["task"] == "copy" and launch["profile"] is None
    assert launch["command"].startswith("python -m annotated_transformer")
    assert launch["settings"]["train"] == {"progress": False}
    assert len(launch["code"]["git_commit"]) == 40 and launch["started"][:2] == "20"


def test_the_run_directory_holds_the_resolved_config_every_field_spelled_out(copy_run):
    directory, _ = copy_run
    config = json.loads((directory / "config.json").read_text())
    assert set(config["model"]) == {item.name for item in dataclasses.fields(TransformerConfig)}
    assert set(config["train"]) == {item.name for item in dataclasses.fields(TrainConfig)}
    state = load_checkpoint(directory / "last.pt")
    assert config["model"] == json.loads(json.dumps(state["model_config"]))  # what was trained
    assert config["train"]["checkpoint_dir"] == str(directory)
    assert config["train"]["progress"] is False  # --set progress=false, resolved
    assert config["task"] == {"name": "copy", "options": state["task"]["options"]}
    assert TransformerConfig.from_dict(config["model"]).d_model == state["model_config"]["d_model"]


def test_without_out_a_run_goes_to_a_named_folder_and_says_where(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--task", "copy", *TINY_MODEL, *FEW_STEPS, "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"copy-\d{8}-\d{6}", folder.name)
    assert f"writing {Path('runs') / folder.name}/" in err
    assert {"last.pt", "best.pt", "run.json", "config.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["train"]["device"] == "cpu"


def test_train_says_where_it_writes_and_how_big_the_model_and_checkpoints_are(tmp_path, capsys):
    code = main(["train", "--task", "copy", *TINY_MODEL, *FEW_STEPS, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 0
    assert f"writing {tmp_path / 'r'}/" in err and "2 updates" in err and "MB each" in err
    parameters = sum(p.numel() for p in load_model(tmp_path / "r" / "last.pt")[0].parameters())
    assert f"{parameters / 1e6:.1f}M parameters" in err


def test_train_device_is_refused_unless_one_of_the_choices(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--task", "copy", "--device", "tpu"])
    assert "argument --device: invalid choice: 'tpu' (choose from" in capsys.readouterr().err


def test_log_tensorboard_writes_the_history_as_scalar_curves(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    steps = ["--set", "max_steps=4", "--set", "log_every=1", "--set", "warmup=1"]
    argv = ["train", "--task", "copy", *TINY_MODEL, *steps, "--set", "eval_every=2"]
    assert main([*argv, "--out", str(out), "--log", "tensorboard", "--quiet"]) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    history = json.loads((out / "history.json").read_text())
    columns = {
        "train/loss": "train_loss",
        "train/lr": "lr",
        "train/tokens_per_second": "tokens_per_second",
        "eval/loss": "eval_loss",
        "eval/perplexity": "eval_perplexity",
        "eval/accuracy": "eval_accuracy",
    }
    assert sorted(events.Tags()["scalars"]) == sorted(columns)
    for tag, column in columns.items():  # every row of the history, as the history holds it
        expected = [(row["step"], row[column]) for row in history if column in row]
        written = [(event.step, event.value) for event in events.Scalars(tag)]
        assert [step for step, _ in written] == [step for step, _ in expected], tag
        assert [value for _, value in written] == pytest.approx(
            [value for _, value in expected], rel=1e-6
        ), tag
    assert [event.step for event in events.Scalars("eval/loss")] == [2, 4]


def test_log_is_refused_unless_one_of_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "copy", "--log", "wandb"])
    assert exit_info.value.code == 2
    assert "argument --log: invalid choice: 'wandb' (choose from" in capsys.readouterr().err


def test_log_tensorboard_without_the_package_names_the_extra_before_training(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "copy", "--out", str(tmp_path / "run"), "--log", "tensorboard"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--log tensorboard needs the tensorboard package" in err
    assert "pip install 'annotated-transformer[tensorboard]'" in err
    assert not (tmp_path / "run").exists()  # refused before any work


def test_under_torchrun_a_run_needs_a_named_folder(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        main(["train", "--task", "copy"])
    assert "under torchrun, name the run directory: --out DIR" in capsys.readouterr().err


def test_train_help_lists_every_setting_with_type_default_and_choices(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for cls in (TransformerConfig, TrainConfig):
        for item in dataclasses.fields(cls):
            line = next(line for line in out.splitlines() if line.split()[:1] == [item.name])
            assert str(item.type) in line and "default" in line, line
    norm_position = next(line for line in out.splitlines() if "norm_position" in line)
    assert 'default "post"' in norm_position and "one of: post, pre" in norm_position
    assert "task options (data.KEY) of cmn-eng, multi30k:" in out
    assert "bpe_vocab_size   a positive integer, default 8000" in out


def test_a_profile_is_the_base_that_config_and_set_override():
    from annotated_transformer.tasks.profiles import run_size

    reference = run_size("reference", "tinyshakespeare")
    settings = resolve_settings("tinyshakespeare", {}, ["train.max_steps=7"], "reference")
    assert settings["model"] == reference["model"] and settings["data"] == reference["data"]
    assert settings["train"] == {**reference["train"], "max_steps": 7}
    with pytest.raises(ValueError, match="has no training size under profile 'reference'"):
        resolve_settings("copy", {}, [], "reference")


def test_translate_copies_sentences_from_arguments_and_stdin(copy_run, capsys, monkeypatch):
    directory, _ = copy_run
    code, out = run(
        capsys,
        "translate",
        directory / "best.pt",
        "--text",
        "3141592653",
        "--text",
        "2 7 1 8 2 8 1 8 2 8",
    )
    assert code == 0
    assert out.splitlines() == ["3 1 4 1 5 9 2 6 5 3", "2 7 1 8 2 8 1 8 2 8"]
    monkeypatch.setattr("sys.stdin", io.StringIO("1123581321\n\n9876543210\n"))
    code, out = run(capsys, "translate", directory / "best.pt", "--beam", "3")
    assert out.splitlines() == ["1 1 2 3 5 8 1 3 2 1", "9 8 7 6 5 4 3 2 1 0"]


def test_evaluate_reports_loss_perplexity_accuracy_and_bleu(copy_run, capsys):
    directory, _ = copy_run
    code = main(["evaluate", str(directory / "best.pt"), "--split", "test", "--max-batches", "2"])
    out, err = capsys.readouterr()
    metrics = json.loads(out)
    assert code == 0
    assert metrics["accuracy"] == 1.0 and metrics["exact_match"] == 1.0
    assert metrics["perplexity"] == pytest.approx(1.0, abs=0.05)
    assert metrics["bleu"] == pytest.approx(100.0)
    assert metrics["bleu_signature"].startswith("nrefs:1|")
    assert metrics["tokens"] == 2 * 64 * 10
    # progress bars (their counts may be redrawn too rarely to show the last one on a fast run)
    assert "loss on test" in err and "translate test" in err and "/2 [" in err


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_translate_and_evaluate_read_a_pretrained_directory(copy_run, capsys, tmp_path, dtype):
    """A shipped model (safetensors + config.json, no pickle) is read where a checkpoint is,
    whatever its storage dtype."""
    directory, _ = copy_run
    model, state = load_model(directory / "best.pt")
    shipped = save_pretrained(
        tmp_path / "copy", model, state["tokenizer"], state["task"], dtype=dtype
    )
    code, out = run(capsys, "translate", shipped, "--text", "3141592653")
    assert code == 0 and out.splitlines() == ["3 1 4 1 5 9 2 6 5 3"]
    code, out = run(capsys, "evaluate", shipped, "--split", "test", "--max-batches", "1")
    assert code == 0 and json.loads(out)["accuracy"] == 1.0


def test_resuming_a_finished_run_trains_no_further(copy_run, capsys):
    directory, _ = copy_run
    before = load_checkpoint(directory / "last.pt")
    code, out = run(capsys, "train", "--task", "copy", "--out", directory, "--resume", "--quiet")
    assert (code, out) == (0, "")
    after = load_checkpoint(directory / "last.pt")
    assert after["step"] == before["step"] == 250
    assert len(after["history"]) == len(before["history"])


def test_generate_continues_a_prompt_with_a_decoder_only_model(tmp_path, capsys):
    code, _ = run(
        capsys,
        "train",
        "--task",
        "copy",
        "--out",
        tmp_path,
        "--quiet",
        "--set",
        "arch=decoder-only",
        "--set",
        "max_steps=3",
        "--set",
        "warmup=1",
    )
    assert code == 0
    code, out = run(capsys, "generate", tmp_path / "last.pt", "--prompt", "3141592653|")
    words = out.split()
    assert code == 0
    assert words[:11] == "3 1 4 1 5 9 2 6 5 3 |".split()
    assert len(words) == 21  # the prompt and max_new_tokens = length = 10 more
    with pytest.raises(SystemExit):  # bos, 10 digits and | leave 10 of max_len = 22 positions
        main(
            [
                "generate",
                str(tmp_path / "last.pt"),
                "--prompt",
                "3141592653|",
                "--max-new-tokens",
                "11",
            ]
        )
    assert "use at most 10" in capsys.readouterr().err
    # temperature 0 is greedy decoding, and a tiny temperature samples the same tokens
    prompt = [tmp_path / "last.pt", "--prompt", "3141592653|"]
    code, greedy = run(capsys, "generate", *prompt, "--temperature", "0")
    assert code == 0 and greedy.split()[:11] == words[:11]
    for tiny in ("1e-8", "1e-300"):
        assert run(capsys, "generate", *prompt, "--temperature", tiny, "--seed", "3") == (0, greedy)


def test_average_writes_the_mean_of_the_kept_snapshots_and_evaluate_reads_it(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "copy", "--out", out, *TINY_MODEL, "--quiet"]
    steps = ["--set", "max_steps=6", "--set", "warmup=1", "--set", "eval_every=2"]
    steps += ["--set", "keep_evaluations=2"]
    assert run(capsys, *argv, *steps)[0] == 0
    assert sorted(path.name for path in out.glob("eval-*.pt")) == [
        "eval-0000004.pt",
        "eval-0000006.pt",
    ]
    code, printed = run(capsys, "average", out)
    assert code == 0
    report = json.loads(printed)
    assert report["checkpoint"] == str(out / "averaged.pt")
    assert [entry["step"] for entry in report["averaged"]] == [4, 6]
    averaged = load_checkpoint(out / "averaged.pt")["model"]
    newest, older = (load_checkpoint(out / e["file"])["model"] for e in report["averaged"][::-1])
    name = next(name for name in averaged if averaged[name].is_floating_point())
    torch.testing.assert_close(averaged[name], (newest[name] + older[name]) / 2)
    code, printed = run(capsys, "evaluate", out / "averaged.pt", "--max-batches", "1")
    assert code == 0 and json.loads(printed)["tokens"] > 0
    with pytest.raises(SystemExit) as exit_info:  # nothing is replaced unasked
        main(["average", str(out), "--last", "1"])
    assert exit_info.value.code == 2
    assert "averaged.pt exists: replace it with --overwrite" in capsys.readouterr().err
    assert run(capsys, "average", out, "--last", "1", "--overwrite")[0] == 0
    # a new run in the folder replaces the snapshots and their average with the rest
    assert run(capsys, *argv, *FEW_STEPS, "--overwrite")[0] == 0
    assert not list(out.glob("eval-*.pt")) and not (out / "averaged.pt").exists()


def test_commands_refuse_a_checkpoint_of_the_wrong_architecture(copy_run, capsys):
    directory, _ = copy_run
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", str(directory / "best.pt"), "--prompt", "12|"])
    assert exit_info.value.code == 2
    assert (
        "holds a encoder-decoder model; this command needs decoder-only" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train"], "name a task: --task NAME"),
        (["train", "--task", "nope"], "task='nope' is not one of: cmn-eng, copy, multi30k"),
        (["train", "--task", "copy", "--set", "d_modle=8"], "did you mean d_model"),
        (["train", "--task", "copy", "--set", "lr=-1"], "lr=-1 is not accepted"),
        (["train", "--task", "copy", "--set", "lr"], "--set 'lr' is not KEY=VALUE"),
        (["train", "--task", "copy", "--set", "optim.lr=1"], "section 'optim' is not one of"),
        (["train", "--task", "copy", "--set", "arch=encoder-only"], "arch='encoder-only'"),
        (["train", "--task", "copy", "--resume"], "--resume without a checkpoint needs --out"),
        (["train", "--task", "copy", "--config", "missing.json"], "missing.json: no such file"),
        (["translate"], "the following arguments are required: checkpoint"),
        (["translate", "x.pt", "--beam", "0"], "0 is not accepted: use a positive integer"),
        (["generate", "x.pt", "--prompt", "1", "--top-p", "2"], "use a number in (0, 1]"),
        (["evaluate", "missing.pt"], "no checkpoint at missing.pt"),
        (["average", "missing-run"], "missing-run is not a run folder"),
        (["average", "run", "--last", "0"], "0 is not accepted: use a positive integer"),
        (["train", "--task", "copy", "--set", "keep_evaluations=-1"], "keep_evaluations=-1"),
        (["fly"], "invalid choice: 'fly'"),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_set_values_are_read_as_json_or_text():
    assert parse_value("1e-3") == 0.001
    assert parse_value("[0.9, 0.98]") == [0.9, 0.98]
    assert [parse_value(word) for word in ("true", "False", "null", "None")] == [
        True,
        False,
        None,
        None,
    ]
    assert parse_value("pre") == "pre"
    assert parse_value("none", default="sinusoidal") == "none"  # positional=none: a choice
    assert parse_value("none", default=None) is None  # max_train_pairs=none: no limit


def test_settings_are_routed_to_model_train_and_data():
    settings = resolve_settings(
        "copy",
        {"model": {"d_model": 48}, "train": {"lr": 0.01}, "batch_size": 16, "task": "copy"},
        ["n_heads=4", "train.seed=3", "data.length=6", "lr=0.02"],
    )
    assert settings == {
        "model": {"d_model": 48, "n_heads": 4},
        "train": {"lr": 0.02, "seed": 3},
        "data": {"batch_size": 16, "length": 6},
    }


def test_a_yaml_config_file_and_set_override_the_task_defaults(tmp_path, capsys):
    config = tmp_path / "settings.yaml"
    config.write_text(
        "task: copy\nmodel:\n  d_model: 16\ntrain:\n  max_steps: 2\n  warmup: 1\nlength: 6\n"
    )
    code, _ = run(
        capsys,
        "train",
        "--config",
        config,
        "--set",
        "lr=0.01",
        "--out",
        tmp_path / "run",
        "--quiet",
    )
    assert code == 0
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    assert state["model_config"]["d_model"] == 16
    assert state["model_config"]["n_layers"] == 1  # the copy task's default
    assert (state["train_config"]["max_steps"], state["train_config"]["lr"]) == (2, 0.01)
    assert state["task"]["options"]["length"] == 6
    assert state["tokenizer"] == {"type": "digits"}


@needs_data("tinyshakespeare/input.txt")
def test_a_language_model_trains_generates_and_evaluates_on_tinyshakespeare(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("AT_DATA_DIR", str(SHARED_DATA))
    code, out = run(
        capsys,
        "train",
        "--task",
        "tinyshakespeare",
        "--out",
        tmp_path,
        *TINY_MODEL,
        *FEW_STEPS,
        "--set",
        "context_length=16",
        "--set",
        "eval_batches=2",
        "--set",
        "progress=false",
    )
    assert code == 0 and json.loads(out)["step"] == 2
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["model_config"]["arch"] == "decoder-only"
    assert state["model_config"]["pad_id"] is None  # id 0 is a character, never padding
    code, out = run(
        capsys, "generate", tmp_path / "last.pt", "--prompt", "ROMEO:", "--max-new-tokens", 5
    )
    assert code == 0 and out.startswith("ROMEO:") and len(out.rstrip("\n")) == len("ROMEO:") + 5
    code, out = run(capsys, "evaluate", tmp_path / "last.pt", "--max-batches", 1)
    assert json.loads(out)["tokens"] == 32 * 16


@needs_data("multi30k/train.de.gz", "multi30k/val.de.gz", "multi30k/test_2016_flickr.de.gz")
def test_a_translation_model_trains_translates_and_evaluates_on_multi30k(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("AT_DATA_DIR", str(SHARED_DATA))
    code, out = run(
        capsys,
        "train",
        "--task",
        "multi30k",
        "--out",
        tmp_path,
        *TINY_MODEL,
        *FEW_STEPS,
        "--set",
        "bpe_vocab_size=400",
        "--set",
        "max_train_pairs=1000",
        "--set",
        "max_tokens=256",
        "--set",
        "eval_batches=1",
        "--quiet",
    )
    assert code == 0
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["tokenizer"]["type"] == "bpe" and state["model_config"]["vocab_size"] == 400
    code, out = run(
        capsys, "translate", tmp_path / "last.pt", "--text", "Ein Hund.", "--max-new-tokens", 3
    )
    assert code == 0 and len(out.splitlines()) == 1

    def no_training(*args, **kwargs):
        raise AssertionError("evaluate must reuse the checkpoint's tokenizer")

    monkeypatch.setattr("annotated_transformer.data.train_tokenizer", no_training)
    code, out = run(
        capsys, "evaluate", tmp_path / "last.pt", "--max-batches", 1, "--max-new-tokens", 3
    )
    metrics = json.loads(out)
    assert code == 0 and {"loss", "accuracy", "bleu", "chrf"} <= set(metrics)


def test_each_launch_is_appended_and_a_chapter_names_its_own_command(tmp_path):
    from annotated_transformer.training.run_folder import RUN_FILE, record_launch

    record_launch(tmp_path, ["train", "--task", "copy"], "copy", None, {"train": {}})
    papermill = "papermill chapters/08_training.ipynb -p profile cpu -p tasks copy"
    record_launch(tmp_path, [], "copy", "cpu", {"train": {}}, command=papermill)
    first, second = json.loads((tmp_path / RUN_FILE).read_text())["launches"]
    assert first["command"] == "python -m annotated_transformer train --task copy"
    assert second["command"] == papermill and second["profile"] == "cpu"
    assert first["code"] == second["code"] and len(first["code"]["git_commit"]) == 40
