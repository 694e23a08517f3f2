"""The fast paths of issue #6 compute what the slow ones do: single-query cached attention with no
mask, the in-place key/value cache, the token check without a host read, and a trainer that reads
the loss back only every ``log_every`` updates. No timing here: speed is the benchmark suite's."""

import importlib
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

import annotated_transformer as at
from annotated_transformer.config import TrainConfig
from annotated_transformer.data.batch import Batch
from annotated_transformer.training.checkpoint import load_checkpoint
from annotated_transformer.training.train import TrainingDiverged, seed_everything
from annotated_transformer.training.trainer import Trainer

VOCAB = 13
attention_module = importlib.import_module("annotated_transformer.attention")


def model_of(arch="decoder-only", pad_id=None, positional="sinusoidal", seed=0, **overrides):
    sizes = {"vocab_size": VOCAB, "n_layers": 2, "max_len": 96, **overrides}
    return tiny_model(arch, seed, pad_id=pad_id, positional=positional, **sizes).eval()


# --- single-query cached attention ---------------------------------------------------------------


def test_single_query_with_a_cache_builds_no_causal_mask(monkeypatch):
    attention = at.MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 7, 16)  # [B, T, d_model]
    full, _ = attention(x, is_causal=True)
    cache = at.KVCache()
    attention(x[:, :6], is_causal=True, cache=cache)  # the prefix, through the fused causal kernel

    def refuse(*args, **kwargs):
        raise AssertionError("a single query must not build a causal mask")

    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(attention_module, "causal_mask", refuse)
    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    last, _ = attention(x[:, 6:], is_causal=True, cache=cache)
    assert calls == [{"attn_mask": None, "dropout_p": 0.0, "is_causal": False}]
    torch.testing.assert_close(last, full[:, 6:])


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_single_query_step_matches_the_uncached_last_row_with_padding(use_sdpa):
    attention = at.MultiHeadAttention(16, 4).eval()
    attention.use_sdpa = use_sdpa
    x = torch.randn(3, 9, 16)
    keep = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    keep[0, ..., 2] = keep[2, ..., 5:8] = False  # padding in the middle of some rows
    full, _ = attention(x, mask=keep, is_causal=True)
    cache = at.KVCache()
    attention(x[:, :8], mask=keep[..., :8], is_causal=True, cache=cache)
    last, _ = attention(x[:, 8:], mask=keep, is_causal=True, cache=cache)
    torch.testing.assert_close(last, full[:, 8:])


# --- the key/value cache writes in place ---------------------------------------------------------


def test_cache_appended_one_position_at_a_time_equals_concatenation():
    key, value = torch.randn(2, 3, 40, 4), torch.randn(2, 3, 40, 4)
    cache = at.KVCache()
    with torch.no_grad():
        cache.append(key[:, :, :5], value[:, :, :5])
        for position in range(5, 40):  # past several growths of the buffer
            all_keys, all_values = cache.append(
                key[:, :, position : position + 1], value[:, :, position : position + 1]
            )
    assert len(cache) == 40
    torch.testing.assert_close(all_keys, key, rtol=0, atol=0)
    torch.testing.assert_close(all_values, value, rtol=0, atol=0)
    # Appending in place leaves a key tensor handed out earlier as it was.
    with torch.no_grad():
        earlier = cache.key
        snapshot = earlier.clone()
        cache.append(torch.ones(2, 3, 1, 4), torch.ones(2, 3, 1, 4))
    torch.testing.assert_close(earlier, snapshot, rtol=0, atol=0)


def test_cache_reorder_then_append_equals_the_reference():
    key, value = torch.randn(4, 2, 12, 4), torch.randn(4, 2, 12, 4)
    index = torch.tensor([2, 2, 0, 3])
    cache = at.KVCache()
    with torch.no_grad():
        for position in range(10):
            cache.append(key[:, :, position : position + 1], value[:, :, position : position + 1])
        cache.reorder(index)
        keys, values = cache.append(key[:, :, 10:], value[:, :, 10:])
    expected_keys = torch.cat([key[index, :, :10], key[:, :, 10:]], dim=-2)
    expected_values = torch.cat([value[index, :, :10], value[:, :, 10:]], dim=-2)
    torch.testing.assert_close(keys, expected_keys, rtol=0, atol=0)
    torch.testing.assert_close(values, expected_values, rtol=0, atol=0)


def test_cache_still_passes_gradients_when_autograd_records():
    key = torch.randn(1, 1, 3, 2, requires_grad=True)
    cache = at.KVCache()
    cache.append(key[:, :, :1], key[:, :, :1])
    keys, values = cache.append(key[:, :, 1:], key[:, :, 1:])
    (keys.sum() + 2 * values.sum()).backward()
    torch.testing.assert_close(key.grad, torch.full_like(key, 3.0))


# --- decoding: cached and recomputed agree token for token ----------------------------------------


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "relative"])
def test_cached_greedy_decoding_matches_recomputation_over_a_long_run(positional):
    model = model_of(positional=positional, seed=1)
    prompt = torch.randint(VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
    cached = at.greedy_decode(model, prompt=prompt, max_new_tokens=70, use_cache=True)
    recomputed = at.greedy_decode(model, prompt=prompt, max_new_tokens=70, use_cache=False)
    assert cached.shape == (2, 75)
    assert torch.equal(cached, recomputed)


def test_cached_beam_search_with_padding_matches_recomputation():
    model = model_of("encoder-decoder", pad_id=0, seed=2)
    src = torch.randint(3, VOCAB, (3, 8), generator=torch.Generator().manual_seed(1))
    src[1, 5:] = 0  # a padded source row
    options = dict(src=src, beam_size=3, max_new_tokens=20, bos_id=1, eos_id=2)
    cached = at.beam_search(model, **options, use_cache=True)
    recomputed = at.beam_search(model, **options, use_cache=False)
    assert torch.equal(cached.tokens, recomputed.tokens)
    torch.testing.assert_close(cached.scores, recomputed.scores)


# --- the token check ------------------------------------------------------------------------------


def test_token_check_without_a_host_read_still_stops_an_out_of_range_id(monkeypatch):
    """On an accelerator (or under torch.compile) the range check is a device-side assert; on a
    CPU that assert raises at once, which lets us run that branch here."""
    model = model_of()
    tokens = torch.tensor([[1, 2, 3]])
    expected = model(tokens)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.testing.assert_close(model(tokens), expected)
    for bad in (VOCAB, -1):
        with pytest.raises(RuntimeError, match=rf"tokens contains an id outside .*0, {VOCAB}\)"):
            model(torch.tensor([[1, bad, 3]]))


# --- the trainer reads the loss every log_every updates -------------------------------------------


def batches(count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    result = []
    for _ in range(count):
        tokens = torch.randint(1, VOCAB, (4, 9), generator=generator)
        tokens[0, 6:] = 0  # padding: micro-batches hold different token counts
        result.append(Batch(tokens[:, :-1], tokens[:, 1:].clone()))
    return result


def trainer_of(tmp_path=None, **overrides):
    seed_everything(0)
    model = model_of(pad_id=0).train()
    values = dict(progress=False, device="cpu", max_steps=12, lr=3e-3)
    config = TrainConfig(**{**values, "checkpoint_dir": tmp_path, **overrides})
    return Trainer(model, config, batches(5)), model


def test_deferred_loss_reading_logs_the_same_losses():
    every, _ = trainer_of(log_every=1)
    window, _ = trainer_of(log_every=4)
    every_losses = [row["train_loss"] for row in every.fit()]
    window_losses = [row["train_loss"] for row in window.fit()]
    assert len(window_losses) == 3
    # Batches hold different token counts: a window's loss is the token-weighted mean.
    tokens = [batch.num_tokens(0) for batch in batches(5)]
    tokens = [tokens[index % 5] for index in range(12)]
    for row, loss in enumerate(window_losses):
        span = range(4 * row, 4 * row + 4)
        expected = sum(every_losses[i] * tokens[i] for i in span) / sum(tokens[i] for i in span)
        assert math.isclose(loss, expected, rel_tol=1e-12)
    torch.testing.assert_close(every.model.state_dict(), window.model.state_dict(), rtol=0, atol=0)


def test_the_loss_is_read_once_per_history_row(monkeypatch):
    trainer, _ = trainer_of(log_every=4)
    reads = []
    read = trainer._read_unchecked

    def counting():
        reads.append(trainer.step + 1)
        return read()

    monkeypatch.setattr(trainer, "_read_unchecked", counting)
    trainer.fit()
    assert reads == [4, 8, 12]


def test_a_non_finite_loss_between_reads_stops_at_the_next_read(tmp_path):
    trainer, model = trainer_of(tmp_path, log_every=4, save_every=4, grad_clip=1.0)

    def poison(module, inputs, output):  # the logits of update 6 become NaN
        return output * float("nan") if trainer.step == 5 else output

    model.output_projection.register_forward_hook(poison)
    with pytest.raises(TrainingDiverged, match="diverged at update 6: the loss is nan") as error:
        trainer.fit()
    assert trainer.step == 7  # noticed when update 8 read the losses, before its optimizer step
    assert error.value.step == 6
    saved = load_checkpoint(tmp_path / "last.pt")
    assert saved["step"] == 4
    assert all(torch.isfinite(tensor).all() for tensor in saved["model"].values())
