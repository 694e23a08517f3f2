"""Resume only the run that was saved; apply and record the changes asked for by name."""

import pytest
import torch
from conftest import tiny_model
from test_train import RandomSource, quiet_config

from annotated_transformer.training.checkpoint import load_checkpoint
from annotated_transformer.training.resuming import (
    CHANGEABLE_ON_RESUME,
    ResumeMismatch,
    check_allow_changes,
)
from annotated_transformer.training.trainer import Trainer

TASK = {"name": "copy", "options": {"length": 6, "vocab": 11}}


@pytest.fixture
def saved(tmp_path):
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=4, checkpoint_dir=tmp_path), RandomSource(), task=TASK
    )
    trainer.fit()
    return tmp_path / "last.pt"


def resumer(model=None, task=TASK, **overrides):
    config = quiet_config(**{"max_steps": 4, **overrides})
    return Trainer(model or tiny_model(), config, RandomSource(), task=task)


def test_a_changed_lr_is_refused_with_the_listing(saved):
    with pytest.raises(ResumeMismatch) as error:
        resumer(lr=1e-2).resume(saved)
    message = str(error.value)
    assert f"{saved} was saved by a run with other settings" in message
    assert "train.lr: 0.003 -> 0.01 (may change: pass --allow-change train.lr" in message
    assert error.value.differences == [("train.lr", 0.003, 0.01)]


def test_an_allowed_lr_change_takes_effect_and_is_recorded(saved, tmp_path):
    trainer = resumer(lr=1e-2, max_steps=6, checkpoint_dir=tmp_path)
    trainer.resume(saved, allow_changes={"lr", "train.max_steps"})
    assert [group["lr"] for group in trainer.optimizer.param_groups] == [1e-2, 1e-2]
    trainer.fit()
    assert [row["lr"] for row in trainer.history[-2:]] == [1e-2, 1e-2]
    expected = [
        {"step": 4, "field": "lr", "from": 0.003, "to": 0.01},
        {"step": 4, "field": "max_steps", "from": 4, "to": 6},
    ]
    assert trainer.changes == expected
    assert load_checkpoint(tmp_path / "last.pt")["changes"] == expected


def test_a_changed_warmup_cosine_schedule_is_evaluated_at_the_resumed_step(tmp_path):
    config = dict(schedule="warmup_cosine", warmup=2, max_steps=4, checkpoint_dir=tmp_path)
    Trainer(tiny_model(), quiet_config(**config), RandomSource(), task=TASK).fit()
    trainer = resumer(**{**config, "max_steps": 8})
    trainer.resume(tmp_path / "last.pt", allow_changes=["max_steps"])
    from annotated_transformer.optim import warmup_cosine_lr

    expected = warmup_cosine_lr(5, max_lr=3e-3, warmup=2, total_steps=8)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12)


def test_every_difference_is_listed_in_one_error(saved):
    model = tiny_model(d_ff=64)
    task = {"name": "copy", "options": {"length": 7, "vocab": 11}}
    with pytest.raises(ResumeMismatch) as error:
        resumer(model=model, task=task, seed=1, lr=1e-2).resume(saved, allow_changes={"lr"})
    lines = str(error.value).splitlines()[1:]
    assert lines == [
        "  model.d_ff: 32 -> 64 (may not change on resume)",
        "  train.lr: 0.003 -> 0.01 (allowed)",
        "  train.seed: 0 -> 1 (may not change on resume)",
        "  task.options.length: 6 -> 7 (may not change on resume)",
    ]
    assert "3 of 4 differences refused" in str(error.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"seed": 1},
        {"optimizer": "adam"},
        {"accumulation": 2},
        {"early_stopping_metric": "accuracy"},
    ],
)
def test_fields_that_define_the_run_are_refused_even_when_named(saved, overrides):
    (field,) = overrides
    with pytest.raises(ValueError, match=f"allow_changes: '{field}' may not change on resume"):
        resumer(**overrides).resume(saved, allow_changes={field})
    with pytest.raises(ResumeMismatch, match=f"train.{field}: .* \\(may not change on resume\\)"):
        resumer(**overrides).resume(saved)


def test_allow_changes_names_must_be_fields():
    with pytest.raises(
        ValueError, match="'learning_rate' is not a TrainConfig field.*may change: max_steps, lr"
    ):
        check_allow_changes(["learning_rate"])
    assert check_allow_changes("train.lr") == {"lr"}
    assert "seed" not in CHANGEABLE_ON_RESUME


def test_fields_that_never_change_results_are_not_compared(saved, tmp_path):
    trainer = resumer(log_every=3, progress=False, checkpoint_dir=tmp_path / "moved")
    trainer.resume(saved)
    assert trainer.changes == [] and trainer.step == 4


def test_a_changed_tokenizer_is_refused(tmp_path):
    Trainer(
        tiny_model(),
        quiet_config(max_steps=1, checkpoint_dir=tmp_path),
        RandomSource(),
        tokenizer={"vocab": ["a", "b"]},
    ).fit()
    config = quiet_config(max_steps=1)
    other = Trainer(tiny_model(), config, RandomSource(), tokenizer={"vocab": ["a", "c"]})
    with pytest.raises(ResumeMismatch, match="tokenizer: differs from the checkpoint's \\(may not"):
        other.resume(tmp_path / "last.pt")


def test_an_exact_resume_after_an_allowed_no_op_is_still_bit_exact(tmp_path):
    whole = Trainer(tiny_model(dropout=0.1), quiet_config(max_steps=6), RandomSource())
    whole.fit()
    first = Trainer(
        tiny_model(dropout=0.1), quiet_config(max_steps=3, checkpoint_dir=tmp_path), RandomSource()
    )
    first.fit()
    second = Trainer(tiny_model(dropout=0.1, seed=5), quiet_config(max_steps=6), RandomSource())
    second.resume(tmp_path / "last.pt", allow_changes={"max_steps"})
    second.fit()
    torch.testing.assert_close(second.model.state_dict(), whole.model.state_dict(), rtol=0, atol=0)


def test_a_checkpoint_from_before_a_task_field_existed_resumes_through_task_info(tmp_path):
    from annotated_transformer.tasks.task_options import TaskInfo
    from annotated_transformer.training.checkpoint import save_checkpoint

    info = TaskInfo(name="copy", options={"length": 6}, pad_id=0, bos_id=1, eos_id=None)
    config = quiet_config(max_steps=4, checkpoint_dir=tmp_path)
    Trainer(tiny_model(), config, RandomSource(), task=info).fit()
    state = load_checkpoint(tmp_path / "last.pt")
    del state["task"]["source_eos"]  # as written before TaskInfo had the field
    save_checkpoint(tmp_path / "old.pt", state)
    Trainer(tiny_model(), quiet_config(max_steps=4), RandomSource(), task=info).resume(
        tmp_path / "old.pt"
    )  # the absent field takes its default: no difference
    other = TaskInfo(name="copy", options={"length": 6}, pad_id=0, bos_id=2, eos_id=None)
    with pytest.raises(ResumeMismatch, match="task.bos_id: 1 -> 2"):
        Trainer(tiny_model(), quiet_config(max_steps=4), RandomSource(), task=other).resume(
            tmp_path / "old.pt"
        )
