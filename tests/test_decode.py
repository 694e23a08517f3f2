"""Decoding: greedy, beam search and sampling, against exhaustive search and uncached decoding."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.decode import (
    beam_search,
    decoding_bytes,
    exact_search,
    exhaustive_best,
    filter_logits,
    greedy_decode,
    length_penalty,
    sample,
)

VOCAB, EOS, BOS, PAD = 6, 1, 2, 0
ARCHS = ["decoder-only", "encoder-decoder"]


def sharp_model(
    arch: str, seed: int, positional: str = "sinusoidal", pad_id=None, sharpen=1.5, max_len=512
):
    """A random tiny model; sharpening the weights gives peaked, varied next-token distributions."""
    model = tiny_model(
        arch,
        seed,
        vocab_size=VOCAB,
        n_layers=2,
        pad_id=pad_id,
        positional=positional,
        max_len=max_len,
    )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(sharpen)
    return model.eval()


def inputs(arch: str, batch: int = 1) -> dict:
    if arch == "decoder-only":
        return {"prompt": torch.tensor([[3, 4], [4, 5], [5, 3]])[:batch]}
    src = torch.tensor([[3, 4, 5, 0], [4, 4, 3, 3], [5, 0, 0, 0]])[:batch]
    return {"src": src, "bos_id": BOS}


def start_length(arch: str) -> int:
    return 2 if arch == "decoder-only" else 1


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("seed", range(6))
def test_beam_search_finds_the_exhaustive_optimum(arch, seed):
    model = sharp_model(arch, seed)
    best, best_score = exhaustive_best(
        model, VOCAB, max_new_tokens=4, eos_id=EOS, alpha=0.6, **inputs(arch)
    )
    # A beam of (V-1)^(L-1) + 1 never fills before the last step, so every candidate that ends is
    # finished, and at the last step all candidates share one length and one penalty: the search
    # cannot miss the optimum. With (V-1)^(L-1) exactly, the beam fills at step L-1 and an ending
    # candidate ranked below every continuing prefix is never looked at (chapter 12, exercise 4).
    result = beam_search(
        model,
        beam_size=(VOCAB - 1) ** 3 + 1,
        max_new_tokens=4,
        eos_id=EOS,
        alpha=0.6,
        **inputs(arch),
    )
    begin = start_length(arch)
    assert result.tokens[0, begin : begin + best.numel()].tolist() == best.tolist()
    assert result.scores[0].item() == pytest.approx(best_score, abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_exact_search_finds_the_exhaustive_optimum_with_fewer_forward_passes(arch, alpha):
    """Branch and bound against brute force, on models sharp enough to make pruning pay and flat
    enough (sharpen 1.0) for greedy to miss the optimum of some of them."""
    pruned = 0
    for seed in range(8):
        model = sharp_model(arch, seed, sharpen=1.0 + 0.25 * (seed % 3))
        best, best_score = exhaustive_best(
            model, VOCAB, max_new_tokens=4, eos_id=EOS, alpha=alpha, **inputs(arch)
        )
        found = exact_search(model, max_new_tokens=4, eos_id=EOS, alpha=alpha, **inputs(arch))
        assert found.proven
        assert found.score == pytest.approx(best_score, abs=1e-5)
        assert found.tokens.tolist() == best.tolist()
        everything = sum((VOCAB - 1) ** n for n in range(4))  # every prefix brute force scores
        assert found.expansions <= everything
        pruned += found.expansions < everything
    assert pruned >= 6  # the bound prunes for (nearly) every model


def test_exact_search_stops_at_its_budget_and_starts_from_a_lower_bound():
    model = sharp_model("encoder-decoder", 3, sharpen=1.0)
    arguments = {"max_new_tokens": 4, "eos_id": EOS, "alpha": 0.0, **inputs("encoder-decoder")}
    full = exact_search(model, **arguments)
    assert full.proven and full.expansions > 3
    cut = exact_search(model, max_expansions=3, **arguments)
    assert not cut.proven and cut.expansions == 3 and cut.score <= full.score
    # a bound no sequence beats: nothing is returned, and the bound stands
    above = exact_search(model, lower_bound=full.score + 1e-3, **arguments)
    assert above.proven and above.tokens.numel() == 0 and above.score == full.score + 1e-3
    # a bound just below the optimum (a beam's output, say) still finds it, with fewer passes
    below = exact_search(model, lower_bound=full.score - 1e-3, **arguments)
    assert below.tokens.tolist() == full.tokens.tolist() and below.expansions <= full.expansions
    with pytest.raises(ValueError, match="one input"):
        exact_search(model, max_new_tokens=4, eos_id=EOS, **inputs("encoder-decoder", batch=2))
    with pytest.raises(ValueError, match="max_expansions"):
        exact_search(model, max_expansions=0, **arguments)


def test_a_beam_one_slot_short_of_exhaustive_skips_an_ending_candidate_ranked_last():
    """At step L-1 the (V-1)^(L-1) continuing prefixes fill a beam of that size, and the loop stops
    before an ending candidate ranked below all of them, although it is the optimum; one slot more
    reaches it. Here L = 2: the first token ends (p = 0.15) or not (p = 0.17 each), then every
    continuation is uniform (p = 1/6), so no two-token sequence comes near the ending one."""
    model = sharp_model("decoder-only", 0)
    first = torch.full((VOCAB,), 0.17).index_fill(0, torch.tensor([EOS]), 0.15).log()

    def hook(module, args, output):  # [B, T, V]: uncached, so position 0 is the prompt
        logits = torch.zeros_like(output)
        logits[:, 0] = first
        return logits

    handle = model.output_projection.register_forward_hook(hook)
    arguments = {"prompt": torch.tensor([[3]]), "max_new_tokens": 2, "eos_id": EOS, "alpha": 0.6}
    optimum, optimum_score = exhaustive_best(model, VOCAB, **arguments)
    short = beam_search(model, beam_size=VOCAB - 1, use_cache=False, **arguments)
    enough = beam_search(model, beam_size=VOCAB, use_cache=False, **arguments)
    handle.remove()
    assert optimum.tolist() == [EOS]
    assert short.tokens.size(1) == 3 and short.scores.item() < optimum_score - 1
    assert enough.tokens[0, 1:].tolist() == [EOS]
    assert enough.scores.item() == pytest.approx(optimum_score, abs=1e-5)


def test_narrow_beam_can_miss_the_optimum_but_never_beats_it():
    """The exhaustive comparison can fail: a beam of 1 misses the optimum for some models."""
    missed = 0
    for seed in range(20):
        model = sharp_model("decoder-only", seed, sharpen=1.0)
        _, best_score = exhaustive_best(
            model, VOCAB, max_new_tokens=4, eos_id=EOS, alpha=0.0, **inputs("decoder-only")
        )
        narrow = beam_search(
            model, beam_size=1, max_new_tokens=4, eos_id=EOS, alpha=0.0, **inputs("decoder-only")
        )
        assert narrow.scores[0].item() <= best_score + 1e-6
        missed += narrow.scores[0].item() < best_score - 1e-6
    assert missed > 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_equals_greedy(arch, seed):
    # Without a length penalty a finished hypothesis always outscores its live sibling, so a beam
    # of one follows the argmax path exactly (with alpha > 0 it may keep exploring).
    model = sharp_model(arch, seed)
    greedy = greedy_decode(model, max_new_tokens=6, eos_id=EOS, **inputs(arch, 3))
    beam = beam_search(
        model, beam_size=1, max_new_tokens=6, eos_id=EOS, alpha=0.0, **inputs(arch, 3)
    )
    width = max(greedy.size(1), beam.tokens.size(1))
    pad = model.config.pad_id if model.config.pad_id is not None else EOS

    def widen(tokens):
        return torch.nn.functional.pad(tokens, (0, width - tokens.size(1)), value=pad)

    assert torch.equal(widen(greedy), widen(beam.tokens))


def test_batched_beam_search_equals_one_input_at_a_time():
    model = sharp_model("encoder-decoder", 3, pad_id=PAD)
    batched = beam_search(
        model, beam_size=3, max_new_tokens=5, eos_id=EOS, **inputs("encoder-decoder", 3)
    )
    for index in range(3):
        single_inputs = {
            "src": inputs("encoder-decoder", 3)["src"][index : index + 1],
            "bos_id": BOS,
        }
        single = beam_search(model, beam_size=3, max_new_tokens=5, eos_id=EOS, **single_inputs)
        length = single.tokens.size(1)
        assert batched.tokens[index, :length].tolist() == single.tokens[0].tolist()
        assert batched.scores[index].item() == pytest.approx(single.scores[0].item(), abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "relative", "rope", "alibi"])
def test_cached_and_uncached_decoding_agree_token_for_token(arch, positional):
    model = sharp_model(arch, 7, positional=positional, pad_id=PAD)
    args = dict(max_new_tokens=8, eos_id=EOS, **inputs(arch, 3))
    assert torch.equal(greedy_decode(model, **args), greedy_decode(model, use_cache=False, **args))
    cached_beam = beam_search(model, beam_size=3, **args)
    uncached_beam = beam_search(model, beam_size=3, use_cache=False, **args)
    assert torch.equal(cached_beam.tokens, uncached_beam.tokens)
    torch.testing.assert_close(cached_beam.scores, uncached_beam.scores)
    draws = [
        sample(
            model,
            top_k=4,
            top_p=0.9,
            generator=torch.Generator().manual_seed(5),
            use_cache=c,
            **args,
        )
        for c in (True, False)
    ]
    assert torch.equal(draws[0], draws[1])


def forcing(model, tokens_per_row):
    """A hook that makes row ``b`` of every step's logits pick ``tokens_per_row[b]``."""
    forced = torch.tensor(tokens_per_row)

    def hook(module, args, output):
        boost = torch.nn.functional.one_hot(forced, output.size(-1)).to(output.dtype) * 1e4
        return output + boost[:, None, :]

    return model.output_projection.register_forward_hook(hook)


def test_tokens_after_eos_are_padding():
    """Row 0 ends at once, row 1 never: row 0 is padded while row 1 keeps decoding."""
    model = sharp_model("decoder-only", 0, pad_id=PAD)
    handle = forcing(model, [EOS, 3])
    out = greedy_decode(model, prompt=torch.tensor([[3, 4], [5, 5]]), max_new_tokens=4, eos_id=EOS)
    handle.remove()
    assert out.tolist() == [[3, 4, EOS, PAD, PAD, PAD], [5, 5, 3, 3, 3, 3]]


def test_greedy_stops_when_every_sequence_ended():
    model = sharp_model("decoder-only", 0)
    handle = forcing(model, [EOS, EOS])
    out = greedy_decode(model, prompt=torch.tensor([[3, 4], [5, 5]]), max_new_tokens=10, eos_id=EOS)
    handle.remove()
    assert out.tolist() == [[3, 4, EOS], [5, 5, EOS]]


@pytest.mark.parametrize("decoder", [greedy_decode, sample, beam_search, exhaustive_best])
@pytest.mark.parametrize("training", [True, False])
def test_every_decoder_runs_in_eval_mode_and_gives_back_the_mode_it_found(decoder, training):
    model = sharp_model("decoder-only", 0).train(training)
    modes = []
    handle = model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    arguments = {"prompt": torch.tensor([[3, 4]]), "max_new_tokens": 2, "eos_id": EOS}
    if decoder is exhaustive_best:
        decoder(model, VOCAB, **arguments)
    else:
        decoder(model, **arguments)
    handle.remove()
    assert modes and not any(modes)  # dropout off while decoding
    assert model.training == training


def test_filter_logits_matches_brute_force():
    torch.manual_seed(0)
    logits = torch.randn(4, 10)
    kept = filter_logits(logits, top_k=3)
    for row in range(4):
        top3 = set(logits[row].topk(3).indices.tolist())
        assert {i for i in range(10) if kept[row, i] > float("-inf")} == top3
    nucleus = filter_logits(logits, top_p=0.7)
    probabilities = logits.softmax(-1)
    for row in range(4):
        order = probabilities[row].argsort(descending=True).tolist()
        mass, expected = 0.0, set()
        for index in order:  # smallest prefix of the sorted tokens whose mass reaches p
            expected.add(index)
            mass += probabilities[row, index].item()
            if mass >= 0.7:
                break
        assert {i for i in range(10) if nucleus[row, i] > float("-inf")} == expected


def test_sampling_follows_the_model_distribution():
    """Empirical frequencies of the first sampled token match softmax(logits / temperature)."""
    model = sharp_model("decoder-only", 2, sharpen=1.0)
    prompt = torch.tensor([[3, 4]]).repeat(4000, 1)
    with torch.no_grad():
        expected = (model(prompt[:1])[0, -1] / 0.7).softmax(-1)
    out = sample(
        model,
        prompt=prompt,
        max_new_tokens=1,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    frequencies = torch.bincount(out[:, -1], minlength=VOCAB).float() / 4000
    torch.testing.assert_close(frequencies, expected, atol=0.03, rtol=0)


def test_temperature_zero_is_greedy():
    model = sharp_model("encoder-decoder", 4)
    args = dict(max_new_tokens=6, eos_id=EOS, **inputs("encoder-decoder", 3))
    assert torch.equal(sample(model, temperature=0.0, **args), greedy_decode(model, **args))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("temperature", [1e-3, 1e-30, 1e-300, 5e-324])
def test_a_tiny_temperature_samples_the_greedy_tokens(arch, temperature):
    """As temperature -> 0 the softmax concentrates on the argmax: no overflow, no NaN, even at
    the smallest positive double (logits / 5e-324 would be inf / inf without the shift)."""
    model = sharp_model(arch, 4)
    args = dict(max_new_tokens=6, eos_id=EOS, **inputs(arch, 3))
    sampled = sample(
        model, temperature=temperature, generator=torch.Generator().manual_seed(0), **args
    )
    assert torch.equal(sampled, greedy_decode(model, **args))


@pytest.mark.parametrize("temperature", [float("inf"), float("-inf"), float("nan"), -1.0])
def test_a_temperature_that_is_not_finite_and_non_negative_is_refused(temperature):
    model = sharp_model("decoder-only", 0)
    with pytest.raises(ValueError, match=f"temperature={temperature} is not accepted"):
        sample(model, prompt=torch.tensor([[3]]), temperature=temperature)


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(10, 0.0) == 1.0


def count_forward_calls(model) -> list[int]:
    """A one-element list that counts the forward passes of every module of ``model``."""
    calls = [0]
    for module in model.modules():
        module.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


BAD_ALPHAS = [-0.6, -1, float("nan"), float("inf"), float("-inf"), True, "0.6", None]


@pytest.mark.parametrize("alpha", BAD_ALPHAS)
@pytest.mark.parametrize("arch", ARCHS)
def test_a_bad_length_penalty_is_refused_before_any_work(arch, alpha):
    """A negative alpha would make the penalty shrink with length and beam search's stopping rule
    unsound; it is named, with what is accepted, before the model runs."""
    model = sharp_model(arch, 0)
    calls = count_forward_calls(model)
    if arch == "encoder-decoder":
        args = {"src": torch.tensor([[3, 4]]), "bos_id": BOS}
    else:
        args = {"prompt": torch.tensor([[3]])}
    message = f"alpha={alpha!r} is not accepted: the length penalty's exponent is a finite number"
    with pytest.raises(ValueError, match=re.escape(message)):
        beam_search(model, alpha=alpha, eos_id=EOS, **args)
    with pytest.raises(ValueError, match=re.escape(message)):
        exhaustive_best(model, VOCAB, max_new_tokens=2, alpha=alpha, eos_id=EOS, **args)
    with pytest.raises(ValueError, match=re.escape(message)):
        length_penalty(3, alpha)
    assert calls == [0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beam_size": 0}, "beam_size=0 is not accepted: use an integer >= 1"),
        ({"beam_size": -2}, "beam_size=-2 is not accepted"),
        ({"beam_size": 2.5}, "beam_size=2.5 is not accepted"),
        ({"beam_size": True}, "beam_size=True is not accepted"),
        ({"max_new_tokens": 0}, "max_new_tokens=0 is not accepted: use an integer >= 1"),
    ],
)
def test_bad_beam_settings_are_refused_before_any_work(settings, message):
    model = sharp_model("encoder-decoder", 0)
    calls = count_forward_calls(model)
    with pytest.raises(ValueError, match=re.escape(message)):
        beam_search(model, src=torch.tensor([[3, 4]]), bos_id=BOS, eos_id=EOS, **settings)
    assert calls == [0]


def test_bad_arguments_give_clear_errors():
    decoder = sharp_model("decoder-only", 0)
    translator = sharp_model("encoder-decoder", 0)
    with pytest.raises(ValueError, match="needs src"):
        greedy_decode(translator, bos_id=BOS)
    with pytest.raises(ValueError, match="needs bos_id"):
        greedy_decode(translator, src=torch.tensor([[3, 4]]))
    with pytest.raises(ValueError, match="takes a prompt, not src"):
        greedy_decode(decoder, src=torch.tensor([[3, 4]]))
    with pytest.raises(ValueError, match="needs a prompt"):
        greedy_decode(decoder)
    with pytest.raises(ValueError, match="beam_size=0 is not accepted: use an integer >= 1"):
        beam_search(decoder, prompt=torch.tensor([[3]]), beam_size=0)
    with pytest.raises(ValueError, match="top_p must be in"):
        sample(decoder, prompt=torch.tensor([[3]]), top_p=1.5)
    encoder = tiny_model("encoder-only", vocab_size=6)
    with pytest.raises(TypeError, match="encoder-only model has no causal decoder"):
        greedy_decode(encoder, prompt=torch.tensor([[3]]))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
def test_generation_past_max_len_conditions_on_the_last_max_len_tokens(positional):
    model = sharp_model("decoder-only", 3, positional, max_len=6)
    prompt = torch.tensor([[3, 4, 5], [5, 3, 3]])
    # The reference: nanoGPT's loop, cropping the context to the last max_len tokens every step.
    expected = prompt
    with torch.no_grad():
        for _ in range(10):
            logits = model(expected[:, -6:])[:, -1]  # [B, V]
            expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], dim=1)
    for use_cache in (True, False):
        got = greedy_decode(model, prompt=prompt, max_new_tokens=10, use_cache=use_cache)
        assert torch.equal(got, expected)
    beam = beam_search(model, prompt=prompt, beam_size=1, max_new_tokens=10, alpha=0.0)
    assert torch.equal(beam.tokens, expected)  # beam size 1 is greedy, windowed too


def test_window_none_feeds_everything_and_bad_windows_are_refused():
    model = sharp_model("decoder-only", 3, "learned", max_len=6)
    prompt = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match="max_len=6"):  # learned positions stop at max_len
        greedy_decode(model, prompt=prompt, max_new_tokens=10, window=None)
    assert greedy_decode(model, prompt=prompt, max_new_tokens=10, window=4).shape == (1, 13)
    for bad in (0, -1, "all", True):
        with pytest.raises(ValueError, match="window=.* is not accepted"):
            greedy_decode(model, prompt=prompt, max_new_tokens=2, window=bad)


def test_encoder_only_decodes_without_cache_reading_the_whole_prefix_each_step():
    model = sharp_model("encoder-only", 4, pad_id=PAD)
    prompt = torch.tensor([[3, 4, 5], [5, 5, 3]])
    # The reference loop: the whole sequence so far, the last position's argmax, pad after eos.
    expected, finished = prompt, torch.zeros(2, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(6):
            token = model(expected)[:, -1].argmax(-1).masked_fill(finished, PAD)  # [B]
            expected = torch.cat([expected, token[:, None]], dim=1)
            finished |= token == EOS
            if finished.all():
                break
    got = greedy_decode(model, prompt=prompt, max_new_tokens=6, eos_id=EOS, use_cache=False)
    assert torch.equal(got, expected)
    with pytest.raises(TypeError, match="use_cache=False"):
        greedy_decode(model, prompt=prompt, max_new_tokens=6)


# ---------------------------------------------------------------------------------------------
# Bounded before allocated


@pytest.fixture
def one_gigabyte_free(monkeypatch):
    monkeypatch.setattr("annotated_transformer.decode.free_memory", lambda device: 10**9)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_a_beam_the_device_cannot_hold_is_refused_naming_the_largest_that_fits(
    arch, one_gigabyte_free
):
    model = tiny_model(arch)
    inputs = {"src": torch.tensor([[3, 4, 5]]), "bos_id": 1}
    if arch == "decoder-only":
        inputs = {"prompt": torch.tensor([[3, 4, 5]])}
    with pytest.raises(ValueError, match=r"beam_size=1000000 for 1 input\(s\)") as error:
        beam_search(model, beam_size=10**6, max_new_tokens=8, eos_id=2, **inputs)
    largest = int(re.search(r"use beam_size <= (\d+)", str(error.value)).group(1))
    assert "more than the 0.8 GB this cpu device can spare" in str(error.value)
    start, source = (3, 0) if arch == "decoder-only" else (1, 3)  # the prompt, or bos and src
    assert (
        decoding_bytes(model, largest, start + 8, source, window=16 if source == 0 else None)
        <= 0.8e9
    )
    beam_search(model, beam_size=4, max_new_tokens=8, eos_id=2, **inputs)  # a usual beam passes


def test_new_tokens_the_device_cannot_hold_are_refused(one_gigabyte_free):
    model = tiny_model("decoder-only")
    prompt = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match="decode fewer new tokens"):
        greedy_decode(model, prompt=prompt, max_new_tokens=10**9, window=None)
    with pytest.raises(ValueError, match=r"decode at most \d+ input\(s\) at a time"):
        sample(model, prompt=prompt.repeat(10**6, 1), max_new_tokens=400)


def test_the_decoding_estimate_grows_with_what_is_asked():
    model = tiny_model("encoder-decoder")
    base = decoding_bytes(model, rows=4, length=10, source_length=5)
    assert decoding_bytes(model, rows=8, length=10, source_length=5) == 2 * base
    assert decoding_bytes(model, rows=4, length=20, source_length=5) > base
    assert decoding_bytes(model, rows=4, length=10, source_length=5, use_cache=False) > base
