"""attention_maps: capture on tiny models, round trips, bertviz inputs, and the head measures
checked on hand-built attention whose right answer is known."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.attention_maps import (
    argmax_hits,
    attention_entropy,
    axis_tokens,
    bertviz_inputs,
    capture_text,
    capture_translation,
    chance_hits,
    cross_alignment,
    delimiter_positions,
    diagonal_alignment,
    head_scores,
    identical_alignment,
    key_mass,
    may_attend,
    previous_token_score,
    readable_tokens,
    sink_score,
    sink_tokens,
    to_tensors,
    token_strings,
    uniform_map,
)
from annotated_transformer.data.batching import collate_pairs
from annotated_transformer.data.tokenizers import BPETokenizer, CharTokenizer
from annotated_transformer.results.experiments import ResultsStore
from annotated_transformer.tasks.task_options import TaskInfo

PAIRS = [
    ("Zwei junge Männer spielen Fußball .", "Two young men play soccer ."),
    ("Ein Hund läuft im Schnee .", "A dog runs in the snow ."),
    ("Eine Frau spielt Gitarre .", "A woman plays the guitar ."),
]
SOURCE = "Ein Hund spielt im Schnee ."


@pytest.fixture(scope="module")
def bpe():
    texts = [sentence for pair in PAIRS for sentence in pair] * 3
    return BPETokenizer.train(texts, vocab_size=400, min_frequency=1)


@pytest.fixture(scope="module")
def info(bpe):
    return TaskInfo(
        "multi30k", {}, bpe.pad_id, bpe.bos_id, bpe.eos_id, source_eos=True, max_new_tokens=12
    )


@pytest.fixture(scope="module")
def translator(bpe):
    return tiny_model(
        "encoder-decoder",
        vocab_size=bpe.vocab_size,
        pad_id=bpe.pad_id,
        n_layers=2,
        max_len=512,
        dropout=0.1,  # on: the capture must switch it off
    )


@pytest.fixture(scope="module")
def characters():
    return CharTokenizer.build("First Citizen:\nBefore we proceed any further, hear me speak.\n")


@pytest.fixture(scope="module")
def language_model(characters):
    return tiny_model(
        vocab_size=characters.vocab_size, pad_id=None, max_len=32, n_layers=3, dropout=0.1
    )


def rows_sum_to_one(weights: torch.Tensor, decimals: int = 3) -> None:
    """Each row sums to 1 within the rounding of its entries (half a unit of the last place)."""
    tolerance = weights.size(-1) * 0.5 * 10**-decimals + 1e-9
    assert (weights.sum(-1) - 1).abs().max() <= tolerance


# -- capture ---------------------------------------------------------------------------------


def test_capture_translation_gives_every_stack_with_tokens_on_its_axes(translator, bpe, info):
    record = capture_translation(translator, bpe, SOURCE, info)
    assert record["kind"] == "encoder-decoder" and record["source"] == SOURCE
    source, target = record["source_tokens"], record["target_tokens"]
    assert source[-1] == "</s>" and "".join(source[:-1]) == " " + SOURCE  # byte-level BPE
    assert target[0] == "<s>"
    tensors = to_tensors(record)
    layers, heads = 2, 2
    assert tensors["encoder"].shape == (layers, heads, len(source), len(source))
    assert tensors["decoder"].shape == (layers, heads, len(target), len(target))
    assert tensors["cross"].shape == (layers, heads, len(target), len(source))
    for stack, weights in tensors.items():
        queries, keys = axis_tokens(record, stack)
        assert weights.shape[-2:] == (len(queries), len(keys))
        rows_sum_to_one(weights)
    causal = torch.ones(len(target), len(target), dtype=torch.bool).triu(1)
    assert (tensors["decoder"][..., causal] == 0).all()  # no query sees a later position
    assert translator.training  # the capture restored the mode it found


def test_the_source_is_encoded_as_the_training_batches_build_it(translator, bpe, info):
    record = capture_translation(translator, bpe, SOURCE, info, translation="A dog .")
    batch = collate_pairs([(bpe.encode(SOURCE), bpe.encode("A dog ."))], *info_ids(info))
    assert record["source_tokens"] == token_strings(bpe, batch.src[0].tolist())
    assert record["target_tokens"] == token_strings(bpe, batch.inputs[0].tolist())
    assert record["output_tokens"] == token_strings(bpe, batch.targets[0].tolist())


def info_ids(info):
    return info.pad_id, info.bos_id, info.eos_id


def test_greedy_capture_reads_the_models_own_translation(translator, bpe, info):
    record = capture_translation(translator, bpe, SOURCE, info)
    # Greedy: what each position predicts is the argmax of the model's logits at that position.
    src = torch.tensor([record["source_ids"]])  # [1, S]
    assert record["source_ids"] == bpe.encode(SOURCE) + [bpe.eos_id]
    tgt = torch.tensor([record["target_ids"]])  # [1, T]
    translator.eval()
    with torch.no_grad():
        predicted = translator(src, tgt).argmax(-1)[0].tolist()
    translator.train()
    assert token_strings(bpe, predicted)[: len(record["output_tokens"])] == record["output_tokens"]
    assert len(record["target_tokens"]) <= 1 + info.max_new_tokens


def test_greedy_maps_are_one_forward_pass_over_the_ids_it_stores(translator, bpe, info):
    record = capture_translation(translator, bpe, SOURCE, info, max_new_tokens=6, decimals=6)
    src, tgt = torch.tensor([record["source_ids"]]), torch.tensor([record["target_ids"]])
    translator.eval()
    with torch.no_grad():
        _, maps = translator(src, tgt, return_attention=True)
    translator.train()
    for stack, weights in to_tensors(record).items():
        expected = torch.cat(maps[stack]).double()  # [L, H, T_q, T_k]
        torch.testing.assert_close(weights, expected, atol=5e-7, rtol=0)


def test_capture_is_deterministic_and_json_safe_with_rounded_weights(translator, bpe, info):
    first = capture_translation(translator, bpe, SOURCE, info, decimals=2)
    second = capture_translation(translator, bpe, SOURCE, info, decimals=2)
    assert first == second
    text = json.dumps(first, allow_nan=False)
    numbers = [float(number) for number in json.dumps(first["cross"]).replace("[", "").replace(
        "]", "").split(",")]  # fmt: skip
    assert all(round(number, 2) == number for number in numbers)
    assert "0.0000" not in text  # no float32 noise such as 0.12000000476837158


def test_capture_text_gives_causal_maps_over_the_characters(language_model, characters):
    text = "Before we proceed"
    record = capture_text(language_model, characters, text)
    assert record["kind"] == "decoder-only" and record["tokens"] == list(text)
    weights = to_tensors(record)["decoder"]
    assert weights.shape == (3, 2, len(text), len(text))
    rows_sum_to_one(weights)
    assert weights[..., 0, 0].eq(1).all()  # the first query can only see itself


def test_capture_text_refuses_a_text_longer_than_the_context(language_model, characters):
    with pytest.raises(ValueError, match="1 to 32"):
        capture_text(language_model, characters, "hear me speak " * 3)


def test_maps_round_trip_through_the_results_store(tmp_path, translator, bpe, info,
                                                   language_model, characters):  # fmt: skip
    maps = [
        capture_translation(translator, bpe, SOURCE, info),
        capture_text(language_model, characters, "hear me"),
    ]
    store = ResultsStore(tmp_path)
    path = store.save_attention("run", maps)
    assert path == store.attention_path("run")
    loaded = store.load_attention("run")
    assert loaded == maps
    for before, after in zip(maps, loaded, strict=True):
        for stack, weights in to_tensors(before).items():
            torch.testing.assert_close(to_tensors(after)[stack], weights)


def test_token_strings_and_readable_labels(bpe, characters):
    ids = bpe.encode(" Zwei") + [bpe.eos_id]
    assert token_strings(bpe, ids)[-1] == "</s>"
    assert "".join(token_strings(bpe, ids[:-1])) == " Zwei"
    assert token_strings(characters, characters.encode("a\n")) == ["a", "\n"]
    assert readable_tokens([" Zwei", "ge", " ", "\n", "\x17", "</s>"]) == [
        "▁Zwei", "ge", "␣", "⏎", "\\x17", "</s>"
    ]  # fmt: skip


# -- bertviz ---------------------------------------------------------------------------------


def test_bertviz_inputs_have_its_shapes(translator, bpe, info, language_model, characters):
    record = capture_translation(translator, bpe, SOURCE, info)
    inputs = bertviz_inputs(record)
    assert len(inputs["encoder_attention"]) == 2
    S, T = len(record["source_tokens"]), len(record["target_tokens"])  # noqa: N806
    assert inputs["encoder_attention"][0].shape == (1, 2, S, S)
    assert inputs["decoder_attention"][0].shape == (1, 2, T, T)
    assert inputs["cross_attention"][0].shape == (1, 2, T, S)
    assert inputs["encoder_tokens"] == readable_tokens(record["source_tokens"])
    text = bertviz_inputs(capture_text(language_model, characters, "hear"), decimals=1)
    assert set(text) == {"attention", "tokens"} and text["tokens"] == list("hear")
    assert all(value == round(value, 1) for value in text["attention"][0].flatten().tolist())


def test_bertviz_renders_the_tokens(translator, bpe, info, language_model, characters):
    bertviz = pytest.importorskip("bertviz")
    record = capture_translation(translator, bpe, "Ein Hund .", info, translation="A dog .")
    head = bertviz.head_view(**bertviz_inputs(record), html_action="return").data
    model = bertviz.model_view(
        **bertviz_inputs(record), display_mode="light", html_action="return"
    ).data
    for html in (head, model):
        for token in ("Hund", "dog", "</s>", "<s>"):
            assert json.dumps(token)[1:] in html  # bertviz shows "▁Hund" as " Hund"
    text = capture_text(language_model, characters, "hear")
    html = bertviz.head_view(**bertviz_inputs(text), html_action="return").data
    assert '"left_text": ["h", "e", "a", "r"]' in html


# -- the measures, on attention whose answer is known ----------------------------------------


def uniform(n_queries: int, n_keys: int) -> torch.Tensor:
    return torch.full((n_queries, n_keys), 1 / n_keys)


def previous_token_head(length: int) -> torch.Tensor:
    weights = torch.zeros(length, length)
    weights[0, 0] = 1
    weights[torch.arange(1, length), torch.arange(length - 1)] = 1
    return weights


def test_previous_token_score_is_one_for_a_perfect_head_and_one_over_t_for_uniform():
    assert previous_token_score(previous_token_head(6)).item() == 1
    assert previous_token_score(uniform(6, 6)).item() == pytest.approx(1 / 6)
    assert previous_token_score(torch.eye(6)).item() == 0
    stacked = torch.stack([previous_token_head(5), uniform(5, 5)])[None]  # [1, 2, 5, 5]
    assert previous_token_score(stacked).shape == (1, 2)


def test_entropy_is_zero_for_one_hot_rows_and_log_t_for_uniform():
    assert attention_entropy(torch.eye(5)).item() == 0
    assert attention_entropy(uniform(5, 8)).item() == pytest.approx(math.log(8))


def test_key_mass_on_the_first_token_and_on_delimiters():
    weights = torch.zeros(4, 4)
    weights[:, 0] = 1
    assert key_mass(weights, [0]).item() == 1
    assert key_mass(uniform(4, 4), [1, 3]).item() == pytest.approx(0.5)
    assert key_mass(uniform(4, 4), []).item() == 0
    assert delimiter_positions(["<s>", " A", " dog", " .", "\n", " ", "</s>"]) == [0, 3, 4, 5, 6]


def sink_head(length: int, sink: int, weight: float = 0.9) -> torch.Tensor:
    """Causal attention: every query that may see key ``sink`` puts ``weight`` there and spreads
    the rest evenly over the other keys it sees; the queries before it attend uniformly."""
    weights = torch.tril(torch.ones(length, length))
    weights /= weights.sum(-1, keepdim=True)
    for query in range(sink, length):
        others = query  # the keys 0 .. query other than the sink
        weights[query, : query + 1] = (1 - weight) / others if others else 0
        weights[query, sink] = weight if others else 1
    return weights


def test_a_head_parked_on_key_0_is_a_sink_at_position_0():
    weights = torch.zeros(6, 6)
    weights[:, 0] = 0.9
    weights[:, 1:] = 0.1 / 5
    score, position = sink_score(weights)
    assert score.item() >= 0.9 - 1e-6  # six float32 0.9s summed
    assert position.item() == 0
    causal = sink_head(8, sink=0)
    score, position = sink_score(causal, may_attend("decoder", 8, 8))
    assert score.item() == pytest.approx((1 + 7 * 0.9) / 8)
    assert position.item() == 0


def test_a_previous_token_head_and_uniform_attention_are_no_sinks():
    score, _ = sink_score(previous_token_head(8))  # [T, T]: a diagonal one step below
    assert score.item() <= 2 / 8  # key 0 gets queries 0 and 1: 2 of 8
    assert sink_score(torch.eye(8), may_attend("decoder", 8, 8))[0].item() == pytest.approx(1 / 8)
    assert sink_score(uniform(5, 8))[0].item() == pytest.approx(1 / 8)
    assert sink_score(uniform(5, 8))[1].item() == 0  # a tie: the earliest key
    causal = torch.tril(torch.ones(6, 6))
    causal /= causal.sum(-1, keepdim=True)
    score, position = sink_score(causal, may_attend("decoder", 6, 6))
    assert score.item() == pytest.approx(sum(1 / (t + 1) for t in range(6)) / 6)
    assert position.item() == 0


def test_a_causal_sink_is_scored_over_the_queries_that_may_see_it():
    # Key 3 takes 0.9 of every query from 3 on; queries 0 to 2 cannot attend to it at all.
    weights = sink_head(10, sink=3)
    score, position = sink_score(weights, may_attend("decoder", 10, 10))
    assert position.item() == 3
    assert score.item() == pytest.approx(0.9)  # the mean over queries 3 to 9, which see it
    # Without the mask the queries before the sink count as zeros: 7 of 10 queries.
    assert sink_score(weights)[0].item() == pytest.approx((0.9 * 7) / 10)


def test_sink_score_is_per_head_over_batches_and_heads():
    heads = torch.stack([sink_head(6, sink=2), previous_token_head(6), uniform(6, 6)])
    batch = torch.stack([heads, heads.flip(0)])  # [B=2, H=3, 6, 6]
    score, position = sink_score(batch, may_attend("decoder", 6, 6))
    assert score.shape == position.shape == (2, 3)
    assert position[0].tolist() == [2, 0, 0]
    assert torch.equal(score[1], score[0].flip(0))
    assert score[0, 0].item() == pytest.approx(0.9)
    assert score[0, 1].item() == pytest.approx(2 / 6)  # key 0: queries 0 and 1


def test_sink_tokens_count_the_token_each_map_sinks_on():
    record = hand_built_translation()  # cross head 1 rests on </s>; encoder uniform: a tie
    assert sink_tokens([record] * 3, "cross", 0, 1) == {"</s>": 3}
    assert sink_tokens([record], "encoder", 0, 0) == {" Zwei": 1}


def test_identical_alignment_matches_names_numbers_and_shared_words_only():
    source = [" Zwei", " Männer", " spielen", " Ball", " in", " Berlin", " 2", " .", "</s>"]
    output = [" Two", " men", " play", " ball", " in", " Berlin", " 2", " .", "</s>"]
    # "in" is two letters (skipped: too short to trust), "." is punctuation, "2" a number.
    assert identical_alignment(output, source) == {3: {3}, 5: {5}, 6: {6}}


def test_diagonal_alignment_is_the_identity_on_a_square_and_stretches_otherwise():
    assert diagonal_alignment(4, 4, width=0) == {0: {0}, 1: {1}, 2: {2}, 3: {3}}
    assert diagonal_alignment(3, 5, width=1) == {0: {0, 1}, 1: {1, 2, 3}, 2: {3, 4}}


def test_argmax_hits_and_chance():
    weights = torch.eye(4)[None]  # [1, 4, 4]: query t looks at key t
    assert argmax_hits(weights, {0: {0}, 1: {1}, 2: {3}}).tolist() == [2]
    assert chance_hits({0: {0}, 1: {1, 2}}, n_keys=4) == pytest.approx(0.75)


def hand_built_translation() -> dict:
    """One sentence, two cross-attention heads: head 0 follows the alignment exactly, head 1
    always looks at the end symbol."""
    source = [" Zwei", " Hunde", " in", " Berlin", " .", "</s>"]
    target = ["<s>", " Two", " dogs", " in", " Berlin", " ."]
    output = [" Two", " dogs", " in", " Berlin", " .", "</s>"]
    aligned = torch.zeros(6, 6)
    aligned[torch.arange(6), torch.arange(6)] = 1  # output token t comes from source token t
    resting = torch.zeros(6, 6)
    resting[:, -1] = 1
    cross = torch.stack([aligned, resting])[None]  # [1, 2, T, S]
    self_attention = torch.stack([previous_token_head(6), torch.tril(torch.ones(6, 6))])
    self_attention[1] /= self_attention[1].sum(-1, keepdim=True)  # causal uniform
    return {
        "kind": "encoder-decoder",
        "source": "Zwei Hunde in Berlin .",
        "translation": "Two dogs in Berlin .",
        "source_tokens": source,
        "target_tokens": target,
        "output_tokens": output,
        "encoder": torch.stack([uniform(6, 6), uniform(6, 6)])[None].tolist(),
        "decoder": self_attention[None].tolist(),
        "cross": cross.tolist(),
    }


def test_cross_alignment_finds_the_aligned_head_and_reports_chance():
    record = hand_built_translation()
    identical = cross_alignment([record], "identical", "output")
    assert identical["queries"] == 1  # only " Berlin" is spelt alike (" in" is too short)
    assert identical["rate"].tolist() == [[1.0, 0.0]]
    diagonal = cross_alignment([record], "diagonal", "output")
    # Five words on each side (without </s>): the band of width 1 always holds the aligned key.
    assert diagonal["queries"] == 5
    assert diagonal["rate"].tolist() == [[1.0, 0.0]]
    assert diagonal["chance"] == pytest.approx((2 + 3 + 3 + 3 + 2) / 5 / 6)
    # Read from the input side, the same head is one step ahead of the alignment.
    shifted = cross_alignment([record], "identical", "input")
    assert shifted["rate"].tolist() == [[0.0, 0.0]]
    with pytest.raises(ValueError, match="one of: identical, diagonal"):
        cross_alignment([record], "fast_align")


def test_head_scores_name_the_previous_token_and_end_symbol_heads():
    rows = {
        (row["stack"], row["layer"], row["head"]): row
        for row in head_scores([hand_built_translation()] * 2)
    }
    assert rows[("decoder", 0, 0)]["previous"] == pytest.approx(1)
    assert rows[("decoder", 0, 1)]["previous"] == pytest.approx(
        sum(1 / (t + 1) for t in range(1, 6)) / 5
    )
    assert rows[("cross", 0, 1)]["last"] == pytest.approx(1)
    assert rows[("cross", 0, 1)]["sink"] == pytest.approx(1)  # every query on </s>
    assert rows[("cross", 0, 0)]["sink"] == pytest.approx(1 / 6)  # the alignment: one each
    assert rows[("cross", 0, 1)]["entropy"] == pytest.approx(0)
    assert rows[("encoder", 0, 0)]["entropy"] == pytest.approx(math.log(6))
    assert rows[("encoder", 0, 0)]["max_entropy"] == pytest.approx(math.log(6))
    assert "previous" not in rows[("cross", 0, 0)]
    assert len(rows) == 2 + 2 + 2


def test_uniform_map_is_the_baseline_of_each_measure():
    record = hand_built_translation()
    baseline = {
        (row["stack"], row["layer"], row["head"]): row for row in head_scores([uniform_map(record)])
    }
    assert baseline[("decoder", 0, 0)]["previous"] == pytest.approx(
        sum(1 / (t + 1) for t in range(1, 6)) / 5
    )
    assert baseline[("encoder", 0, 1)]["previous"] == pytest.approx(1 / 6)
    assert baseline[("cross", 0, 0)]["entropy"] == pytest.approx(math.log(6))
    assert baseline[("cross", 0, 0)]["sink"] == pytest.approx(1 / 6)
    assert baseline[("decoder", 0, 0)]["sink"] == pytest.approx(
        sum(1 / (t + 1) for t in range(6)) / 6
    )  # causal: key 0 is seen by every query
    for row in baseline.values():
        assert row["entropy"] == pytest.approx(row["max_entropy"])


# -- heads zeroed, induction ----------------------------------------------------------------


def test_zeroing_a_head_is_zeroing_its_columns_of_w_o_and_leaves_the_model_as_it_was():
    from annotated_transformer.attention_maps import attention_modules, heads_zeroed

    model = tiny_model("encoder-decoder", 0, n_heads=4).eval()
    src, tgt = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 9, 10]])
    modules = attention_modules(model)
    assert {stack for stack, _ in modules} == {"encoder", "decoder", "cross"}
    assert modules["cross", 0] is model.decoder.layers[0].cross_attention
    intact = model(src, tgt)
    attention = modules["cross", 0]
    width = attention.d_v
    with heads_zeroed(attention, [2]):
        zeroed = model(src, tgt)
    # the reference: the same head removed by editing W^O's weights
    edited = tiny_model("encoder-decoder", 0, n_heads=4).eval()
    with torch.no_grad():
        edited.decoder.layers[0].cross_attention.out.weight[:, 2 * width : 3 * width] = 0
    torch.testing.assert_close(zeroed, edited(src, tgt))
    assert not torch.allclose(zeroed, intact)
    torch.testing.assert_close(model(src, tgt), intact)  # the hook is gone
    with pytest.raises(ValueError, match="heads 0 to 3"):
        with heads_zeroed(attention, [4]):
            pass


def test_head_ablation_reports_no_change_for_a_head_that_writes_nothing():
    from annotated_transformer.attention_maps import head_ablation

    model = tiny_model("decoder-only", 1, n_heads=2).eval()
    tokens = torch.tensor([[3, 4, 5, 6, 7, 3, 4]])
    with torch.no_grad():  # head 1 of layer 0 writes nothing already
        attention = model.decoder.layers[0].self_attention
        attention.out.weight[:, attention.d_v :] = 0

    def loss():
        with torch.no_grad():
            logits = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[0, 1:]).item()

    rows = head_ablation(model, loss)
    assert len(rows) == model.config.n_layers * 2
    by_head = {(r["stack"], r["layer"], r["head"]): r for r in rows}
    assert by_head["decoder", 0, 1]["change"] == pytest.approx(0.0, abs=1e-7)
    assert abs(by_head["decoder", 0, 0]["change"]) > 1e-4


def test_prefix_matching_reads_the_key_after_the_earlier_occurrence():
    from annotated_transformer.attention_maps import (
        copy_losses,
        prefix_matching_scores,
        repeated_random_tokens,
        uniform_prefix_matching,
    )

    tokens = repeated_random_tokens(20, 6, batch=3, seed=4)
    assert tokens.shape == (3, 12) and torch.equal(tokens[:, :6], tokens[:, 6:])
    model = tiny_model("decoder-only", 2, n_heads=2, vocab_size=20).eval()
    scores = prefix_matching_scores(model, tokens, 6)  # [L, H]
    with torch.no_grad():
        _, maps = model(tokens, return_attention=True)
    for layer, weights in enumerate(maps["decoder"]):  # [B, H, 12, 12]
        for head in range(2):
            by_hand = sum(weights[b, head, t, t - 5].item() for b in range(3) for t in range(6, 12))
            assert scores[layer, head].item() == pytest.approx(by_hand / 18, abs=1e-6)
    assert uniform_prefix_matching(6) == pytest.approx(sum(1 / t for t in range(7, 13)) / 6)
    first, second = copy_losses(model, tokens, 6)
    with torch.no_grad():
        logits = model(tokens[:, :-1])
    losses = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), tokens[:, 1:], reduction="none"
    )
    assert first == pytest.approx(losses[:, :5].mean().item())
    assert second == pytest.approx(losses[:, 6:].mean().item())


def test_a_two_layer_model_trained_on_repeats_learns_induction_and_the_measures_see_it():
    """Olsson et al.'s setting, small: on sequences of random tokens repeated once, a two-layer
    model learns in a few hundred updates to copy the second copy from the first; the copy loss
    falls from log V to near 0 there, and some head's prefix-matching score rises far above
    uniform attention's. The untrained model shows neither."""
    import annotated_transformer as at
    from annotated_transformer.attention_maps import (
        copy_losses,
        prefix_matching_scores,
        repeated_random_tokens,
        train_on_repeats,
        uniform_prefix_matching,
    )

    torch.manual_seed(0)
    config = at.TransformerConfig(
        arch="decoder-only", vocab_size=32, d_model=64, n_heads=2, n_layers=2, d_ff=128,
        max_len=64, dropout=0.0, pad_id=None,
    )  # fmt: skip
    model = at.build_model(config)
    held_out = repeated_random_tokens(32, 16, batch=64, seed=10**6)
    before = copy_losses(model, held_out, 16)
    losses = train_on_repeats(model, steps=300, length=16)
    assert len(losses) == 300 and losses[-1] < losses[0]
    first, second = copy_losses(model, held_out, 16)
    assert before[1] > 3.0 and first > 3.0  # log 32 = 3.47: random tokens stay random
    assert second < 0.5  # ... but the second copy is read off the first
    assert prefix_matching_scores(model, held_out, 16).max() > 8 * uniform_prefix_matching(16)


def test_the_induction_rule_predicts_what_followed_the_latest_earlier_occurrence():
    from annotated_transformer.attention_maps import induction_rule

    #                        0  1  2  3  4  5  6  7  8
    tokens = torch.tensor([[1, 2, 3, 1, 2, 4, 1, 2, 4]])
    found, right = induction_rule(tokens, context=2)
    # position 4 ends in (1, 2), seen ending at 1: predicts 3, the text has 4
    # position 7 ends in (1, 2), latest earlier at 4: predicts 4, right
    assert found[0].nonzero().flatten().tolist() == [4, 7]
    assert right[0].nonzero().flatten().tolist() == [7]
    found, _ = induction_rule(tokens, context=3)  # (1, 2, 4) ends at 5 and at 8, the last token
    assert not found.any()  # ... which predicts nothing: no three-token tail recurs before it
