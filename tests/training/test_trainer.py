"""The Trainer's guarantees: a diverged run never saves or returns, options are checked before any
work, callbacks, and the temporary files of interrupted saves are removed."""

import math
import signal
import warnings

import pytest
import torch
from conftest import tiny_model
from test_train import RandomSource, quiet_config, random_batch

from annotated_transformer.training.checkpoint import first_non_finite, load_checkpoint
from annotated_transformer.training.run_lock import LOCK_NAME
from annotated_transformer.training.train import TrainingDiverged
from annotated_transformer.training.trainer import Trainer, TrainingInterrupted


def all_finite(state):
    return first_non_finite(state["model"]) is None and first_non_finite(state["optimizer"]) is None


def eval_batches():
    return [random_batch(torch.Generator().manual_seed(1))]


@pytest.mark.parametrize("max_steps", [21, 2, 40])
@pytest.mark.parametrize("log_every", [1, 10])
def test_a_huge_learning_rate_raises_and_every_checkpoint_left_is_finite(
    tmp_path, max_steps, log_every
):
    config = quiet_config(
        lr=1e4,
        max_steps=max_steps,
        log_every=log_every,
        eval_every=5,
        save_every=1,
        checkpoint_dir=tmp_path,
    )
    trainer = Trainer(tiny_model(), config, RandomSource(), eval_batches())
    with pytest.raises(TrainingDiverged, match=r"training diverged at update \d+: the ") as error:
        trainer.fit()
    last = tmp_path / "last.pt"
    if last.exists():
        state = load_checkpoint(last)
        assert all_finite(state)
        assert error.value.checkpoint == last
        assert f"the last good checkpoint is kept at {last}" in str(error.value)
    else:
        assert "no checkpoint of this run was written before it" in str(error.value)
    assert not (tmp_path / "run.lock").exists()


def test_divergence_after_a_good_checkpoint_keeps_that_checkpoint(tmp_path):
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=4, checkpoint_dir=tmp_path), RandomSource()
    )
    trainer.fit()
    good = load_checkpoint(tmp_path / "last.pt")
    config = quiet_config(max_steps=30, lr=1e4, save_every=1, checkpoint_dir=tmp_path)
    resumed = Trainer(tiny_model(), config, RandomSource())
    resumed.resume(tmp_path / "last.pt", allow_changes={"lr", "max_steps", "save_every"})
    with pytest.raises(TrainingDiverged) as error:
        resumed.fit()
    state = load_checkpoint(tmp_path / "last.pt")
    assert all_finite(state)
    assert state["step"] >= good["step"]
    assert error.value.checkpoint == tmp_path / "last.pt"


def poison_at(trainer, step, poison):
    def callback(trainer):
        if trainer.step == step:
            poison(trainer)

    trainer.add_callback("on_update", callback)


def test_non_finite_weights_after_the_last_update_raise_and_are_not_saved(tmp_path):
    # The loss of every update is finite: only the weights after the last step are not.
    config = quiet_config(max_steps=6, save_every=3, checkpoint_dir=tmp_path)
    trainer = Trainer(tiny_model(), config, RandomSource())
    name, parameter = next(iter(trainer.model.named_parameters()))
    poison_at(trainer, 6, lambda trainer: parameter.data.fill_(math.inf))
    with pytest.raises(
        TrainingDiverged, match=f"update 6: the weights hold inf \\(first in \\[{name!r}\\]\\)"
    ) as error:
        trainer.fit()
    assert error.value.quantity == "weights"
    assert error.value.checkpoint == tmp_path / "last.pt"
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["step"] == 3 and all_finite(state)


def test_non_finite_weights_raise_even_without_a_checkpoint_dir():
    trainer = Trainer(tiny_model(), quiet_config(max_steps=3), RandomSource())
    parameter = next(trainer.model.parameters())
    poison_at(trainer, 3, lambda trainer: parameter.data.fill_(math.nan))
    with pytest.raises(TrainingDiverged, match="no checkpoint of this run was written"):
        trainer.fit()


def test_a_non_finite_optimizer_moment_is_never_saved(tmp_path):
    config = quiet_config(max_steps=4, save_every=2, checkpoint_dir=tmp_path)
    trainer = Trainer(tiny_model(), config, RandomSource())

    def poison(trainer):
        state = next(iter(trainer.optimizer.state.values()))
        state["exp_avg_sq"].fill_(math.inf)

    poison_at(trainer, 4, poison)
    with pytest.raises(TrainingDiverged, match="the optimizer state holds inf"):
        trainer.fit()
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 2


def test_a_non_finite_evaluation_loss_stops_the_run_before_saving(tmp_path):
    config = quiet_config(max_steps=4, eval_every=2, checkpoint_dir=tmp_path)
    trainer = Trainer(tiny_model(), config, RandomSource(), eval_batches())
    calls = []

    def broken(model, inputs, output):  # evaluation runs in eval mode
        calls.append(model.training)
        return output if model.training else output * math.nan

    trainer.model.output_projection.register_forward_hook(broken)
    with pytest.raises(TrainingDiverged, match="update 2: the evaluation loss is nan"):
        trainer.fit()
    assert not (tmp_path / "last.pt").exists() and not (tmp_path / "best.pt").exists()


def test_cuda_without_cuda_is_refused_before_any_work(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = quiet_config(device="cuda", checkpoint_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="device='cuda' is not available: torch finds no CUDA"):
        Trainer(tiny_model(), config, RandomSource())
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_dir_that_is_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "taken").write_text("a file")
    for directory in (tmp_path / "taken", tmp_path / "taken" / "below"):
        config = quiet_config(checkpoint_dir=directory)
        with pytest.raises(ValueError, match=f"{tmp_path / 'taken'} is a file, not a directory"):
            Trainer(tiny_model(), config, RandomSource())


def test_callbacks_see_every_update_row_and_evaluation():
    config = quiet_config(max_steps=4, log_every=2, eval_every=4)
    trainer = Trainer(tiny_model(), config, RandomSource(), eval_batches())
    seen = []
    trainer.add_callback("on_update", lambda trainer: seen.append(("update", trainer.step)))
    trainer.add_callback("on_log", lambda trainer, row: seen.append(("log", row["step"])))
    trainer.add_callback(
        "on_evaluate", lambda trainer, metrics: seen.append(("eval", "loss" in metrics))
    )
    trainer.fit()
    assert seen == [
        ("update", 1),
        ("update", 2),
        ("log", 2),
        ("update", 3),
        ("update", 4),
        ("eval", True),
        ("log", 4),
    ]
    with pytest.raises(ValueError, match="event='on_step' is not one of: on_update, on_log"):
        trainer.add_callback("on_step", print)


def test_a_run_removes_the_temporary_files_of_an_interrupted_save(tmp_path):
    orphans = [tmp_path / ".last.pt.abc123.tmp", tmp_path / ".history.json.x1.tmp"]
    for orphan in orphans:
        orphan.write_bytes(b"half a checkpoint")
    (tmp_path / "keep.tmp").write_text("not ours")
    trainer = Trainer(
        tiny_model(), quiet_config(max_steps=2, checkpoint_dir=tmp_path), RandomSource()
    )
    with pytest.warns(UserWarning, match=r"removed 2 temporary file\(s\) left by an interrupted"):
        trainer.fit()
    assert not any(orphan.exists() for orphan in orphans)
    assert (tmp_path / "keep.tmp").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left to remove: no warning
        Trainer(
            tiny_model(), quiet_config(max_steps=3, checkpoint_dir=tmp_path), RandomSource()
        ).fit()


def test_check_train_options_lets_a_command_line_check_before_any_work(tmp_path):
    from annotated_transformer.config import TrainConfig
    from annotated_transformer.training.trainer import check_train_options

    config = TrainConfig(early_stopping_metric="bleu", checkpoint_dir=str(tmp_path / "run"))
    assert (
        check_train_options(config, metrics=None) == torch.device("cpu")
        or torch.cuda.is_available()
    )
    with pytest.raises(
        ValueError, match="'bleu' is not among the evaluation metrics: loss, accuracy"
    ):
        check_train_options(config, metrics=("loss", "accuracy"))
    assert not (tmp_path / "run").exists()  # nothing written


# ---------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM: a saved, resumable stop


def signal_at(step, *names):
    """A callback that delivers ``names`` (signals) to this process after update ``step``, as a
    terminal's Ctrl-C or a scheduler's SIGTERM would (``raise_signal`` runs the handler on every
    OS; ``os.kill`` would end the process on Windows)."""

    def deliver(trainer):
        if trainer.step == step:
            for name in names:
                signal.raise_signal(getattr(signal, name))

    return deliver


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_saves_last_pt_at_the_updates_end_and_resumes_exactly(name, tmp_path):
    config = quiet_config(max_steps=8, checkpoint_dir=tmp_path / "stopped")
    handlers = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)]
    stopped = Trainer(tiny_model(), config, RandomSource())
    stopped.add_callback("on_update", signal_at(3, name))
    with pytest.raises(TrainingInterrupted) as error:
        stopped.fit()
    assert (error.value.step, error.value.signal_name) == (3, name)
    assert error.value.checkpoint == tmp_path / "stopped" / "last.pt"
    assert f"interrupted ({name}): saved {tmp_path / 'stopped' / 'last.pt'} at update 3" in str(
        error.value
    )
    assert load_checkpoint(tmp_path / "stopped" / "last.pt")["step"] == 3
    assert not (tmp_path / "stopped" / LOCK_NAME).exists()  # released
    assert [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)] == handlers

    resumed = Trainer(tiny_model(), config, RandomSource())
    resumed.resume(tmp_path / "stopped" / "last.pt")
    resumed.fit()
    whole = Trainer(tiny_model(), quiet_config(max_steps=8), RandomSource())
    whole.fit()
    for (key, a), (_, b) in zip(
        resumed.model.state_dict().items(), whole.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), key


def test_a_second_ctrl_c_stops_at_once_and_still_releases_the_lock(tmp_path):
    trainer = Trainer(tiny_model(), quiet_config(checkpoint_dir=tmp_path), RandomSource())
    trainer.add_callback("on_update", signal_at(2, "SIGINT", "SIGINT"))
    with pytest.raises(KeyboardInterrupt) as error:
        trainer.fit()
    assert not isinstance(error.value, TrainingInterrupted)
    assert not (tmp_path / "last.pt").exists()  # nothing saved: the user asked twice
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_signal_without_a_checkpoint_dir_says_nothing_was_saved():
    trainer = Trainer(tiny_model(), quiet_config(), RandomSource())
    trainer.add_callback("on_update", signal_at(1, "SIGTERM"))
    with pytest.raises(TrainingInterrupted, match="stopped at update 1; nothing saved"):
        trainer.fit()
