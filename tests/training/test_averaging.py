"""averaging.py: the evaluation checkpoints a run keeps, and their mean against one by hand."""

import pytest
import torch
from conftest import tiny_model
from test_train import RandomSource, quiet_config, random_batch

from annotated_transformer.training.averaging import (
    KeepEvaluations,
    average_checkpoints,
    average_run,
    best_or_average,
    evaluation_checkpoints,
)
from annotated_transformer.training.checkpoint import CheckpointError, load_checkpoint
from annotated_transformer.training.train import evaluate
from annotated_transformer.training.trainer import Trainer


def trained_run(tmp_path, keep=3, max_steps=10, eval_every=2):
    config = quiet_config(max_steps=max_steps, eval_every=eval_every, checkpoint_dir=tmp_path)
    model = tiny_model()
    held_out = [random_batch(torch.Generator().manual_seed(1))]
    trainer = Trainer(model, config, RandomSource(), held_out)
    trainer.add_callback("on_evaluate", KeepEvaluations(tmp_path, keep=keep))
    trainer.fit()
    return trainer


def test_a_run_keeps_the_weights_of_its_last_evaluations_only(tmp_path):
    trainer = trained_run(tmp_path, keep=3, max_steps=10, eval_every=2)
    kept = evaluation_checkpoints(tmp_path)
    assert [load_checkpoint(path)["step"] for path in kept] == [6, 8, 10]
    last = load_checkpoint(kept[-1])
    for name, tensor in trainer.model.state_dict().items():  # the newest: the final weights
        torch.testing.assert_close(last["model"][name], tensor, rtol=0, atol=0)
    assert "loss" in last["metrics"]


def test_the_average_is_the_mean_of_the_weights_computed_by_hand(tmp_path):
    trained_run(tmp_path, keep=3)
    paths = evaluation_checkpoints(tmp_path)
    states = [load_checkpoint(path)["model"] for path in paths]
    averaged = average_checkpoints(paths)
    assert averaged.keys() == states[0].keys()
    for name in averaged:
        by_hand = sum(state[name].double() for state in states) / len(states)
        torch.testing.assert_close(averaged[name].double(), by_hand)
        assert averaged[name].dtype == states[0][name].dtype
    moved = [name for name in averaged if not torch.equal(states[0][name], states[-1][name])]
    assert moved, "the weights did not change between evaluations: the test shows nothing"
    model = tiny_model()
    model.load_state_dict(averaged)  # a state dict the model takes as it is
    # one checkpoint averaged is itself
    single = average_checkpoints(paths[-1:])
    for name, tensor in states[-1].items():
        torch.testing.assert_close(single[name], tensor, rtol=0, atol=0)


def test_checkpoints_of_different_models_are_refused_naming_the_files(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    trained_run(first, keep=1, max_steps=2)
    config = quiet_config(max_steps=2, eval_every=2, checkpoint_dir=second)
    held_out = [random_batch(torch.Generator().manual_seed(1))]
    other = Trainer(tiny_model(d_ff=64), config, RandomSource(), held_out)
    other.add_callback("on_evaluate", KeepEvaluations(second, keep=1))
    other.fit()
    paths = evaluation_checkpoints(first) + evaluation_checkpoints(second)
    with pytest.raises(CheckpointError, match=r"are checkpoints of different models"):
        average_checkpoints(paths)
    with pytest.raises(CheckpointError, match="needs at least one checkpoint"):
        average_checkpoints([])
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        average_checkpoints([tmp_path / "missing.pt"])
    with pytest.raises(ValueError, match=r"keep=0 is not accepted"):
        KeepEvaluations(tmp_path, keep=0)


def test_keep_evaluations_in_the_config_keeps_files_that_load_alone(tmp_path):
    config = quiet_config(max_steps=8, eval_every=2, checkpoint_dir=tmp_path, keep_evaluations=2)
    held_out = [random_batch(torch.Generator().manual_seed(1))]
    trainer = Trainer(tiny_model(), config, RandomSource(), held_out, task={"name": "random"})
    trainer.fit()
    kept = evaluation_checkpoints(tmp_path)
    assert [path.name for path in kept] == ["eval-0000006.pt", "eval-0000008.pt"]
    newest = load_checkpoint(kept[-1])
    assert newest["task"] == {"name": "random"} and "tokenizer" in newest
    assert newest["model_config"] == trainer.model_config.to_dict()
    for name, tensor in trainer.model.state_dict().items():
        torch.testing.assert_close(newest["model"][name], tensor, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("overrides", "evaluates", "message"),
    [
        ({"keep_evaluations": 3}, True, r"keep_evaluations=3 keeps files in the run directory"),
        ({"keep_evaluations": -1}, True, r"keep_evaluations"),
        ({"keep_evaluations": 2, "checkpoint_dir": "x"}, False, r"no evaluation data"),
    ],
)
def test_keep_evaluations_is_refused_before_any_work_where_it_cannot_keep(
    tmp_path, overrides, evaluates, message
):
    if "checkpoint_dir" in overrides:
        overrides = {**overrides, "checkpoint_dir": tmp_path / "run"}
    with pytest.raises(ValueError, match=message):
        config = quiet_config(**overrides)
        held_out = [random_batch(torch.Generator().manual_seed(1))] if evaluates else None
        Trainer(tiny_model(), config, RandomSource(), held_out)
    assert not (tmp_path / "run").exists()


def test_resuming_from_an_earlier_checkpoint_drops_the_snapshots_of_the_abandoned_steps(tmp_path):
    config = quiet_config(max_steps=10, eval_every=2, checkpoint_dir=tmp_path, keep_evaluations=5)
    held_out = [random_batch(torch.Generator().manual_seed(1))]
    trainer = Trainer(tiny_model(), config, RandomSource(), held_out)
    trainer.fit(steps=4)  # last.pt at update 4
    (tmp_path / "last.pt").rename(tmp_path / "at-4.pt")
    trainer.fit()
    assert len(evaluation_checkpoints(tmp_path)) == 5
    again = Trainer(tiny_model(), config, RandomSource(), held_out)
    again.resume(tmp_path / "at-4.pt")
    assert [path.name for path in evaluation_checkpoints(tmp_path)] == [
        "eval-0000002.pt",
        "eval-0000004.pt",
    ]
    again.fit()
    steps = [load_checkpoint(path)["step"] for path in evaluation_checkpoints(tmp_path)]
    assert steps == [2, 4, 6, 8, 10]


def test_average_run_is_the_mean_of_the_newest_snapshots_with_the_run_s_tokenizer(tmp_path):
    trained_run(tmp_path, keep=4)
    paths = evaluation_checkpoints(tmp_path)
    state = average_run(tmp_path, last=3)
    assert [entry["step"] for entry in state["averaged_from"]] == [6, 8, 10]
    expected = average_checkpoints(paths[-3:])
    for name, tensor in expected.items():
        torch.testing.assert_close(state["model"][name], tensor, rtol=0, atol=0)
    newest = load_checkpoint(paths[-1])
    assert state["model_config"] == newest["model_config"] and state["step"] == 10
    everything = average_run(tmp_path)
    assert len(everything["averaged_from"]) == 4
    with pytest.raises(CheckpointError, match=r"holds 4 evaluation snapshots .* fewer than the 5"):
        average_run(tmp_path, last=5)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"keep_evaluations=N"):
        average_run(tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"not a run folder"):
        average_run(tmp_path / "missing")


def test_best_or_average_loads_whichever_scores_lower_on_the_held_out_batches(tmp_path):
    trained_run(tmp_path, keep=3, max_steps=10, eval_every=2)
    held_out = [random_batch(torch.Generator().manual_seed(s)) for s in (1, 2)]
    best = load_checkpoint(tmp_path / "best.pt")["model"]
    mean = average_checkpoints(evaluation_checkpoints(tmp_path))
    by_hand = {}
    for name, weights in (("best", best), ("averaged", mean)):
        model = tiny_model()
        model.load_state_dict(weights)
        by_hand[name] = evaluate(model, held_out, model.config.pad_id)["loss"]
    assert by_hand["best"] != by_hand["averaged"], "a tie shows nothing"
    model = tiny_model()
    choice = best_or_average(model, tmp_path, held_out, model.config.pad_id)
    assert choice["valid_loss_best"] == pytest.approx(by_hand["best"], rel=1e-6)
    assert choice["valid_loss_averaged"] == pytest.approx(by_hand["averaged"], rel=1e-6)
    assert choice["chosen"] == min(by_hand, key=by_hand.get)
    assert choice["averaged_steps"] == [6, 8, 10]
    chosen = best if choice["chosen"] == "best" else mean
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, chosen[name], rtol=0, atol=0)
    (tmp_path / "best.pt").unlink()
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        best_or_average(tiny_model(), tmp_path, held_out, 0)


def test_average_run_names_the_mistake_of_a_file_for_a_folder(tmp_path):
    trained_run(tmp_path, keep=1)
    with pytest.raises(CheckpointError, match=r"last.pt is a file: name the run folder"):
        average_run(tmp_path / "last.pt")
