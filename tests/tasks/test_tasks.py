import pytest
import torch

from annotated_transformer.config import TransformerConfig
from annotated_transformer.data import DigitTokenizer, TokenizerProtocol, tokenizer_from_dict
from annotated_transformer.tasks import build_task, task_from_info
from annotated_transformer.tasks.copy_task import copy_batch, copy_task
from annotated_transformer.tasks.task_options import TASKS, TaskInfo
from annotated_transformer.training.train import data_generator

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
    assert isinstance(tokenizer, TokenizerProtocol)
    assert isinstance(tokenizer_from_dict(tokenizer.to_dict()), DigitTokenizer)
    with pytest.raises(ValueError, match="'morse' is not one of: digits, char, word, bpe"):
        tokenizer_from_dict({"type": "morse"})


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
    assert task.info.options["length"] == 6
    assert task_from_info(task.info.to_dict()).info == task.info


def test_unknown_tasks_and_architectures_are_named():
    with pytest.raises(ValueError, match="task='wmt' is not one of: cmn-eng, copy, multi30k, ptb"):
        build_task("wmt")
    with pytest.raises(ValueError, match="arch='encoder-only' is not one of"):
        copy_task(arch="encoder-only")


def test_every_task_is_built_by_one_call_with_the_same_signature():
    assert sorted(TASKS) == ["cmn-eng", "copy", "multi30k", "ptb", "tinyshakespeare", "wikitext-2"]
    task = build_task("copy", {"length": 4, "eval_sequences": 8}, seed=3, arch="decoder-only")
    assert task.model_defaults["arch"] == "decoder-only"
    assert task.info.options == {
        "arch": "decoder-only",
        "seed": 3,
        "length": 4,
        "batch_size": 64,
        "batches_per_epoch": 100,
        "eval_sequences": 8,
    }
    rebuilt = task_from_info(task.info)
    assert torch.equal(rebuilt.splits["test"][0].inputs, task.splits["test"][0].inputs)


def test_task_info_reads_the_dicts_that_old_checkpoints_stored():
    old_language_model = {  # no source_eos: written before TaskInfo existed
        "name": "tinyshakespeare",
        "options": {"context_length": 64},
        "pad_id": None,
        "bos_id": None,
        "eos_id": None,
        "max_new_tokens": 200,
    }
    info = TaskInfo.from_dict(old_language_model)
    assert (info.source_eos, info.max_new_tokens, info.pad_id) == (False, 200, None)
    assert TaskInfo.from_dict(info.to_dict()) == info
    with pytest.raises(ValueError, match="does not say which task"):
        TaskInfo.from_dict({"options": {}})


@pytest.mark.parametrize(
    ("task", "options", "message"),
    [
        ("copy", {"length": 0}, "data.length=0 is not accepted: use a positive integer"),
        ("copy", {"batches_per_epoch": -1}, "data.batches_per_epoch=-1 is not accepted"),
        ("copy", {"eval_sequences": 0}, "data.eval_sequences=0 is not accepted"),
        ("copy", {"context_length": 8}, "'context_length' is not an option of the task 'copy'"),
        ("tinyshakespeare", {"context_length": 0}, "data.context_length=0 is not accepted"),
        ("ptb", {"batch_size": -1}, "data.batch_size=-1 is not accepted"),
        ("multi30k", {"max_train_pairs": 0}, "data.max_train_pairs=0 is not accepted"),
        ("multi30k", {"bpe_vocab_size": 1.5}, "data.bpe_vocab_size=1.5 is not accepted"),
        ("multi30k", {"source": 3}, "data.source=3 is not accepted: use a string or null"),
    ],
)
def test_task_options_are_checked_before_any_data_is_read(task, options, message):
    with pytest.raises(ValueError) as error:
        build_task(task, options)
    assert message in str(error.value)
