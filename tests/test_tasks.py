import pytest
import torch

from annotated_transformer.config import TransformerConfig
from annotated_transformer.tasks import (
    DigitTokenizer,
    copy_batch,
    copy_task,
    get_task,
    tokenizer_from_state,
)
from annotated_transformer.train import data_generator

BOS, SEP, PAD = DigitTokenizer.bos_id, DigitTokenizer.sep_id, DigitTokenizer.pad_id


def test_encoder_decoder_copy_batch_feeds_the_target_shifted_right():
    batch = copy_batch(torch.tensor([[3, 1, 4]]))
    assert batch.src.tolist() == [[6, 4, 7]]
    assert batch.inputs.tolist() == [[BOS, 6, 4]]
    assert batch.targets.tolist() == [[6, 4, 7]]


def test_decoder_only_copy_batch_scores_only_the_copy():
    batch = copy_batch(torch.tensor([[3, 1, 4]]), arch="decoder-only")
    assert batch.src is None
    assert batch.inputs.tolist() == [[BOS, 6, 4, 7, SEP, 6, 4]]
    assert batch.targets.tolist() == [[PAD, PAD, PAD, PAD, 6, 4, 7]]


def test_the_digit_tokenizer_round_trips_and_names_a_bad_character():
    tokenizer = DigitTokenizer()
    assert tokenizer.encode("31 4|") == [6, 4, 7, SEP]
    assert tokenizer.decode([BOS, 6, 4, 7, SEP, PAD]) == "3 1 4 |"
    with pytest.raises(ValueError, match="digits and '\\|' only, got 'x'"):
        tokenizer.encode("3x")
    assert isinstance(tokenizer_from_state(tokenizer.state_dict()), DigitTokenizer)
    with pytest.raises(ValueError, match="morse"):  # not ours: the data package's error
        tokenizer_from_state({"type": "morse"})


def test_the_copy_source_is_a_function_of_epoch_and_generator():
    task = copy_task(batch_size=4, batches_per_epoch=3)
    first = [b.src for b in task.train(0, data_generator(0, 0))]
    again = [b.src for b in task.train(0, data_generator(0, 0))]
    later = [b.src for b in task.train(1, data_generator(0, 1))]
    assert len(first) == 3
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], later[0])


def test_the_copy_task_fits_its_model_defaults_and_holds_out_two_splits():
    task = copy_task(arch="decoder-only", length=6, batch_size=8, eval_sequences=20)
    config = TransformerConfig(**task.model_defaults)
    assert config.arch == "decoder-only" and config.max_len >= 2 * 6 + 1
    assert [len(task.splits[name]) for name in ("valid", "test")] == [3, 3]
    assert not torch.equal(task.splits["valid"][0].inputs, task.splits["test"][0].inputs)
    assert task.info["options"]["length"] == 6
    assert get_task("copy")(**task.info["options"]).info == task.info


def test_unknown_tasks_and_architectures_are_named():
    with pytest.raises(ValueError, match="task='wmt' is not one of: cmn-eng, copy, multi30k, ptb"):
        get_task("wmt")
    with pytest.raises(ValueError, match="arch='encoder-only' is not one of"):
        copy_task(arch="encoder-only")


def test_profile_settings_names_the_profiles_and_refuses_others():
    from annotated_transformer.tasks import PROFILES, profile_settings

    assert list(PROFILES) == ["smoke", "cpu", "gpu"]
    assert profile_settings("cpu") is PROFILES["cpu"]
    for settings in PROFILES.values():
        assert set(settings) == {"copy", "shakespeare", "multi30k", "ptb"}
    with pytest.raises(ValueError, match="profile='fast' is not one of: smoke, cpu, gpu"):
        profile_settings("fast")
