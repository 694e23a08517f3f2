"""Chapter 03's extrapolation experiment: per-position losses against a direct computation, the
in-window check against its definition, and a whole (tiny) run."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer import extrapolation as ex
from annotated_transformer.data.text import LanguageModelCorpus
from annotated_transformer.data.tokenizers import CharTokenizer
from annotated_transformer.model import build_model
from annotated_transformer.results.experiments import ResultsStore, run_key

TINY = ex.ExtrapolationConfig(
    context=16, eval_length=32, d_model=16, n_heads=2, n_layers=1, d_ff=32, steps=3,
    batch_size=4, stride=4, check_every=2, check_characters=400, groups=4,
)  # fmt: skip


def corpus() -> LanguageModelCorpus:
    text = "To be, or not to be, that is the question. " * 40
    tokenizer = CharTokenizer.build(text)
    ids = torch.tensor(tokenizer.encode(text))
    return LanguageModelCorpus("tiny", {"train": ids[:1400], "valid": ids[1400:]}, tokenizer)


def tiny_model(positional: str, vocab_size: int = 20) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ex.model_config(positional, TINY, vocab_size))


def test_position_losses_match_a_direct_cross_entropy_per_window_and_position():
    model = tiny_model("rope")
    tokens = torch.randint(20, (200,), generator=torch.Generator().manual_seed(0))
    starts = ex.window_starts(len(tokens), 12, stride=5)
    losses = ex.position_losses(model, tokens, starts, 12, batch_windows=3)  # [W, 12]
    assert losses.shape == (len(starts), 12)
    with torch.no_grad():
        for row, start in enumerate(starts.tolist()):
            logits = model(tokens[None, start : start + 12])[0]  # [12, V]
            for position in range(12):
                target = tokens[start + position + 1]
                direct = F.cross_entropy(logits[position], target)
                torch.testing.assert_close(losses[row, position], direct)


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "relative", "rope", "alibi"])
def test_the_first_positions_of_a_long_window_read_as_a_window_of_the_training_context(positional):
    # the experiment reads its in-window check from the 256-long windows: a causal model's
    # first T positions must not see the rest
    model = tiny_model(positional)
    tokens = torch.randint(20, (300,), generator=torch.Generator().manual_seed(1))
    starts = ex.window_starts(len(tokens), TINY.eval_length, TINY.stride)
    long = ex.position_losses(model, tokens, starts, TINY.eval_length)
    short = ex.position_losses(model, tokens, starts, TINY.context)
    torch.testing.assert_close(long[:, : TINY.context], short)


def test_blocks_that_are_multiples_of_the_stride_predict_the_same_characters():
    starts = ex.window_starts(1000, 64, stride=16)

    def targets(first, stop):  # the text positions block [first, stop) predicts, with counts
        found = (starts[:, None] + torch.arange(first, stop) + 1).flatten()
        return torch.bincount(found, minlength=1100)

    early, late = targets(32, 48), targets(48, 64)
    inside = slice(64, 32 + int(starts[-1]))  # away from the text's two ends
    torch.testing.assert_close(early[inside], late[inside])
    assert (early[inside] == 1).all()


def test_block_change_is_the_difference_of_block_means_with_a_batch_means_error():
    losses = torch.rand(40, 16, generator=torch.Generator().manual_seed(2))
    change, error = ex.block_change(losses, (8, 12), (12, 16), groups=4)
    direct = (losses[:, 12:16].mean() - losses[:, 8:12].mean()).item()
    assert change == pytest.approx(direct, abs=1e-6)  # float32 sums in another order
    per_group = [(part[:, 12:16].mean() - part[:, 8:12].mean()).item() for part in losses.split(10)]
    mean = sum(per_group) / 4
    spread = math.sqrt(sum((value - mean) ** 2 for value in per_group) / 3)
    assert error == pytest.approx(spread / 2, rel=1e-4)


def test_the_in_window_check_compares_the_last_two_quarters_against_the_tolerance():
    assert ex.in_window_blocks(64) == ((32, 48), (48, 64))
    config = dataclasses.replace(TINY, tolerance=0.05)
    rising = torch.zeros(8, 32)
    rising[:, 12:16] = 0.2  # the last quarter of a 16-position window
    assert ex.in_window_check(rising, config)["change"] == pytest.approx(0.2)
    assert not ex.in_window_check(rising, config)["flat"]
    assert ex.in_window_check(torch.ones(8, 32), config) == {
        "change": 0.0,
        "standard_error": 0.0,
        "flat": True,
    }


def test_reading_blocks_name_the_window_end_then_the_doublings_beyond():
    assert ex.reading_blocks(ex.PROFILES["cpu"]) == {
        "48-63": (48, 64),
        "64-127": (64, 128),
        "128-255": (128, 256),
    }


def test_a_context_whose_quarter_is_not_a_multiple_of_the_stride_is_refused():
    with pytest.raises(ValueError, match="multiple of stride"):
        ex.ExtrapolationConfig(context=64, stride=12)
    with pytest.raises(ValueError, match="not among"):
        ex.ExtrapolationConfig(encodings=("rotary",))


def test_a_tiny_run_measures_every_encoding_and_learned_refuses_the_long_windows():
    config = dataclasses.replace(TINY, encodings=("learned", "alibi"))
    result = ex.run(config, corpus(), log=None)
    learned, alibi = result["metrics"]["learned"], result["metrics"]["alibi"]
    assert "max_len" in learned["refusal"] and alibi["refusal"] is None
    assert len(learned["curve"]) == config.context and len(alibi["curve"]) == config.eval_length
    assert set(learned["blocks"]) == {"12-15"}
    assert set(alibi["blocks"]) == {"12-15", "16-31"}
    assert [row["step"] for row in result["history"] if row["encoding"] == "alibi"] == [2, 3]
    rows = ex.table_rows(result["metrics"], config)
    assert rows[0]["rise 16-31"] is None
    rise = alibi["blocks"]["16-31"] - alibi["blocks"]["12-15"]
    assert rows[1]["rise 16-31"] == pytest.approx(rise, abs=1e-6)


def test_the_numbers_do_not_depend_on_the_number_of_jobs():
    config = dataclasses.replace(TINY, steps=2, check_every=0, encodings=("none", "rope"))
    text = corpus()
    one, two = ex.run(config, text, log=None), ex.run(config, text, log=None, jobs=2)
    for name in config.encodings:  # equal up to the order of float sums (threads differ)
        assert one["metrics"][name]["curve"] == pytest.approx(
            two["metrics"][name]["curve"], abs=1e-3
        )
    losses = [[row["train_loss"] for row in run["history"]] for run in (one, two)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-4)


def test_a_record_config_round_trips_and_a_stored_run_is_found_by_its_key(tmp_path):
    config = ex.record_config("cpu")
    assert config["experiment"] == "extrapolation" and config["profile"] == "cpu"
    assert ex.config_from_record(config) == ex.PROFILES["cpu"]
    assert ex.stored_record(tmp_path, "cpu") is None
    record = {"config": config, "metrics": {}, "history": [], "provenance": {}}
    ResultsStore(tmp_path / "results" / "extrapolation").save(run_key(config), record)
    assert ex.stored_record(tmp_path, "cpu")["config"] == config


def test_run_and_store_trains_once_then_reads_the_stored_record(tmp_path, monkeypatch):
    monkeypatch.setitem(ex.PROFILES, "cpu", dataclasses.replace(TINY, encodings=("alibi",)))
    first = ex.run_and_store(tmp_path, "cpu", log=None, corpus=corpus())
    assert first["provenance"]["seed"] == 0 and "alibi" in first["metrics"]
    assert ex.stored_record(tmp_path, "cpu") == first

    def no_training(*arguments, **options):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(ex, "run", no_training)
    assert ex.run_and_store(tmp_path, "cpu", log=None, corpus=corpus()) == first
