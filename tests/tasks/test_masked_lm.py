"""BERT's masked-token objective on a language-model task (data.objective=masked): the
corruption's proportions, the held-out masks fixed, the task's model, refusals, and the readings
chapter 08 stores of the source report's model."""

import math

import pytest
import torch

from annotated_transformer.data import TokenMasking, masked_evaluation_windows
from annotated_transformer.results.masked_lm import every_position, masked_lm_readings
from annotated_transformer.tasks import build_task, task_from_info
from annotated_transformer.tasks.task_options import check_options
from annotated_transformer.training.fit import fit_task, run_configs

VOCAB, MASK, IGNORE = 50, 50, 51


def test_masking_follows_berts_proportions_and_scores_only_the_chosen_positions():
    tokens = torch.randint(VOCAB, (400, 500), generator=torch.Generator().manual_seed(1))
    batch = TokenMasking(VOCAB, MASK, IGNORE, 0.15)(tokens, torch.Generator().manual_seed(0))
    chosen = batch.targets != IGNORE
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.003)
    assert torch.equal(batch.targets[chosen], tokens[chosen])  # the answer is the original
    assert torch.equal(batch.inputs[~chosen], tokens[~chosen])  # the rest is left as it was
    inputs, originals = batch.inputs[chosen], tokens[chosen]
    masked = (inputs == MASK).float().mean().item()
    kept = (inputs == originals).float().mean().item()  # 10 %, plus random draws of itself
    assert masked == pytest.approx(0.8, abs=0.01)
    assert kept == pytest.approx(0.1 + 0.1 / VOCAB, abs=0.01)
    assert 1 - masked - kept == pytest.approx(0.1 * (1 - 1 / VOCAB), abs=0.01)
    assert int(batch.inputs.max()) <= MASK  # the ignored id is never an input


def test_held_out_windows_are_masked_the_same_way_every_time():
    tokens = torch.randint(VOCAB, (2000,), generator=torch.Generator().manual_seed(2))
    masking = TokenMasking(VOCAB, MASK, IGNORE)
    first = list(masked_evaluation_windows(tokens, 4, 32, masking))
    second = list(masked_evaluation_windows(tokens, 4, 32, masking))
    assert len(first) == len(second) > 1
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    restored = every_position(first[0], IGNORE)
    assert torch.equal(restored.targets, tokens[: first[0].inputs.numel()].view(4, 32))


def test_the_masked_ptb_task_builds_a_bidirectional_model_with_two_more_symbols():
    task = build_task("ptb", {"objective": "masked", "context_length": 32, "batch_size": 4})
    words = task.tokenizer.vocab_size
    defaults = task.model_defaults
    assert (defaults["arch"], defaults["vocab_size"], defaults["pad_id"]) == (
        "encoder-only",
        words + 2,
        words + 1,
    )
    batch = next(iter(task.train(0, torch.Generator().manual_seed(0))))
    assert batch.inputs.shape == batch.targets.shape == (4, 32)
    again = task_from_info(task.info.to_dict())  # a checkpoint rebuilds the same objective
    assert again.model_defaults == defaults
    assert torch.equal(again.splits["test"][0].targets, task.splits["test"][0].targets)
    # the next-token task is unchanged: its records keep their keys
    plain = build_task("ptb", {"context_length": 32})
    assert "objective" not in plain.info.options
    assert plain.model_defaults["arch"] == "decoder-only"


def test_a_bad_objective_or_model_is_refused_before_any_work():
    with pytest.raises(ValueError, match="one of: next-token, masked"):
        check_options("ptb", {"objective": "bert"})
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        check_options("ptb", {"mask_probability": 1.5})
    task = build_task("ptb", {"objective": "masked", "context_length": 32})
    with pytest.raises(ValueError, match="model.arch=encoder-only"):
        run_configs(task, {"arch": "decoder-only"})
    with pytest.raises(ValueError, match="leave model.pad_id unset"):
        run_configs(task, {"pad_id": 0})


def test_a_small_masked_model_learns_and_its_readings_cover_each_split():
    """Forty updates of a tiny model: the masked-token loss falls well below a uniform guess's,
    and every reading is a loss over the positions it names."""
    task = build_task("ptb", {"objective": "masked", "context_length": 32, "batch_size": 16})
    model_config, train_config = run_configs(
        task,
        {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "max_len": 32},
        {"max_steps": 40, "lr": 3e-3, "warmup": 4, "eval_every": 40, "eval_batches": 4},
        seed=0,
        progress=False,
    )
    fit = fit_task(task, model_config, train_config)
    # a uniform guess over the vocabulary scores log V; forty updates learn the word frequencies
    evaluated = [row["eval_loss"] for row in fit.history if "eval_loss" in row]
    assert evaluated[-1] < math.log(model_config.vocab_size) - 1.0
    task.splits = {name: batches[:4] for name, batches in task.splits.items()}
    readings = masked_lm_readings(fit.model, task)
    assert set(readings) == {"train", "valid", "test"}
    test_tokens = sum(batch.inputs.numel() for batch in task.splits["test"])
    assert readings["test"]["every"]["tokens"] == test_tokens
    assert readings["train"]["every"]["tokens"] == test_tokens  # as many training tokens
    for reading in readings.values():
        masked, every = reading["masked"], reading["every"]
        assert 4 * masked["tokens"] < every["tokens"] < 10 * masked["tokens"]  # 15 % chosen
        for measured in (masked, every):
            assert measured["perplexity"] == pytest.approx(math.exp(measured["loss"]))


def test_the_ladder_sets_each_ptb_number_beside_what_it_measures():
    from annotated_transformer.results.masked_lm import REPORT_PTB, ladder_rows

    causal = {"metrics": {"test_perplexity": 86.6}}
    leak = {"metrics": {"test_perplexity": 1.05}}
    readings = {
        f"{split}_{tokens}_{measure}": value
        for split in ("train", "valid", "test")
        for tokens, value in (("masked", 30.0), ("every", 2.0))
        for measure in ("perplexity", "accuracy")
    }
    rows = ladder_rows(causal, {"metrics": readings}, leak)
    assert [row["test ppl"] for row in rows] == [86.6, 40.8, 30.0, 2.0, 1.05]
    assert rows[1]["valid ppl"] == REPORT_PTB["valid"]["perplexity"]
    assert math.isnan(rows[0]["test accuracy"]) and rows[1]["test accuracy"] == 0.487
    assert len(ladder_rows(None, None, None)) == 1  # the report's row alone
