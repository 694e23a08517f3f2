"""Chapter 12's decoding study (results/decoding.py) on tiny encoder-decoders: the grid scores what
greedy and beam search return, and the search-error rows hold the brute-force optimum."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from annotated_transformer.data.batch import Batch
from annotated_transformer.decode import beam_search, exhaustive_best, greedy_decode
from annotated_transformer.metrics import corpus_bleu
from annotated_transformer.results import decoding
from annotated_transformer.tasks.task_options import TaskInfo

VOCAB, PAD, BOS, EOS = 7, 0, 1, 2
INFO = TaskInfo("tiny", {}, PAD, BOS, EOS, source_eos=True, max_new_tokens=4)
WORDS = ["<pad>", "<s>", "</s>", "a", "b", "c", "d"]


class Words:
    def decode(self, ids):
        return " ".join(WORDS[i] for i in ids)


def model(seed: int, sharpen: float = 1.0):
    built = tiny_model("encoder-decoder", seed, vocab_size=VOCAB, n_layers=2, pad_id=PAD)
    with torch.no_grad():
        for parameter in built.parameters():
            parameter.mul_(sharpen)
    return built.eval()


SOURCES = torch.tensor([[3, 4, 5, EOS], [6, 3, EOS, PAD], [4, EOS, PAD, PAD]])  # [3, 4]
BATCHES = [Batch(inputs=SOURCES[:, :1], targets=SOURCES[:, :1], src=SOURCES)]
REFERENCES = ["a b c", "d a", "b"]


def test_the_grid_scores_greedy_once_and_each_beam_at_each_alpha():
    translator = model(0, sharpen=1.5)
    rows = decoding.beam_grid(
        translator, BATCHES, Words(), INFO, REFERENCES, (1, 3), (0.0, 1.5), resamples=20
    )
    assert [(row["beam"], row["alpha"]) for row in rows] == [(1, None), (3, 0.0), (3, 1.5)]
    assert rows[0]["vs_greedy"] == [0.0, 0.0, 0.0]  # greedy against itself
    for row in rows:
        assert row["vs_greedy"][0] == pytest.approx(row["bleu"] - rows[0]["bleu"])
        assert row["vs_greedy"][1] <= row["vs_greedy"][2]
        assert "vs_paper" not in row  # beam 4, alpha 0.6 is not in this grid

    def text(row):
        ids = row[1:].tolist()
        ids = ids[: ids.index(EOS)] if EOS in ids else ids
        return Words().decode([i for i in ids if i != PAD])  # a random model may emit padding

    budget = 4  # the task's max_new_tokens: below 2 * S + 10 and max_len - 1
    greedy = greedy_decode(translator, src=SOURCES, bos_id=BOS, eos_id=EOS, max_new_tokens=budget)
    expected = corpus_bleu([text(row) for row in greedy], REFERENCES)
    assert rows[0]["bleu"] == pytest.approx(expected.score)
    assert rows[0]["length_ratio"] == pytest.approx(expected.length_ratio)
    for row in rows[1:]:
        beam = beam_search(
            translator, src=SOURCES, bos_id=BOS, eos_id=EOS, max_new_tokens=budget,
            beam_size=3, alpha=row["alpha"],
        ).tokens  # fmt: skip
        assert row["bleu"] == pytest.approx(corpus_bleu([text(r) for r in beam], REFERENCES).score)


def test_short_sources_are_unpadded_and_in_order():
    chosen = decoding.short_sources(BATCHES, PAD, count=5, max_tokens=3)
    assert [source.tolist() for source in chosen] == [[[6, 3, EOS]], [[4, EOS]]]
    assert len(decoding.short_sources(BATCHES, PAD, count=1, max_tokens=4)) == 1


@pytest.mark.parametrize("seed", range(4))
def test_search_rows_hold_the_brute_force_optimum_and_every_beam_below_it(seed):
    translator = model(seed)
    sources = decoding.short_sources(BATCHES, PAD, count=3, max_tokens=4)
    rows = decoding.search_errors(translator, sources, INFO, (1, 2), max_expansions=10_000)
    for src, row in zip(sources, rows, strict=True):
        best, score = exhaustive_best(
            translator, VOCAB, src=src, bos_id=BOS, eos_id=EOS, alpha=0.0, max_new_tokens=4
        )
        assert row["proven"]
        assert row["optimum"] == pytest.approx(score, abs=1e-5)
        assert row["optimum_length"] == best.numel()
        assert all(value <= score + 1e-5 for value in row["beam_scores"].values())
        # the empty output's log P is the end symbol's at the first step: what exhaustive search
        # scores for the one-token sequence [</s>]
        first = translator.decode(
            torch.tensor([[BOS]]), translator.encode(src), translator.source_mask(src)
        )[0, -1]
        assert row["empty"] == pytest.approx(first.log_softmax(-1)[EOS].item(), abs=1e-6)
        assert row["empty"] <= score + 1e-5


def test_the_grid_table_puts_greedy_in_every_column_and_the_summary_counts_misses():
    record = {
        "metrics": {
            "grid": [
                {"beam": 1, "alpha": None, "bleu": 30.0},
                {"beam": 2, "alpha": 0.0, "bleu": 31.0},
                {"beam": 2, "alpha": 1.0, "bleu": 32.0},
            ],
            "search": [  # beam 1 misses once; one optimum is the empty output; one unproven
                {"beam_scores": {"1": -3.0, "2": -2.0}, "optimum": -2.0, "optimum_length": 5,
                 "empty": -9.0, "proven": True},
                {"beam_scores": {"1": -4.0, "2": -4.0}, "optimum": -1.5, "optimum_length": 1,
                 "empty": -1.5, "proven": True},
                {"beam_scores": {"1": -6.0, "2": -6.0}, "optimum": -6.0, "optimum_length": 7,
                 "empty": -5.0, "proven": False},
            ],
        }
    }  # fmt: skip
    table = decoding.grid_table(record)
    assert table.loc[1].tolist() == [30.0, 30.0] and table.loc[2].tolist() == [31.0, 32.0]
    assert list(table.columns) == [0.0, 1.0]
    counts = decoding.search_summary(record)
    assert (counts["proven"].count, counts["proven"].sentences) == (2, 3)
    assert (counts["errors 1"].count, counts["errors 1"].sentences) == (2, 2)
    assert counts["errors 2"].count == 1 and counts["empty optimum"].count == 1
    assert counts["empty beats beam 2"].count == 2 and counts["empty beats beam 2"].sentences == 3
    low, high = counts["errors 2"].low, counts["errors 2"].high
    assert 0 < low < 0.5 < high < 1  # Wilson's interval of 1 in 2
    assert decoding.format_count(counts["errors 2"]) == (
        f"1 / 2 ({100 * low:.0f}–{100 * high:.0f} %)"
    )


def test_the_stored_study_is_the_one_of_the_model_now_shipped_and_a_replaced_model_has_none(
    tmp_path,
):
    """Chapter 12 reads the study of ``models/multi30k``: a study measured on a model since
    replaced is not found (the script measures the new one) and a study with other settings is
    not either."""
    import json

    from annotated_transformer.results.experiments import run_key

    folder = tmp_path / "models" / "multi30k"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")

    def ship(record: str) -> None:
        (folder / "config.json").write_text(json.dumps({"metadata": {"record": record}}))

    study = decoding.DecodingStudy()
    store = decoding.results_store(tmp_path)
    for model_record, beams in (("run-a", list(study.beams)), ("run-b", [1, 2])):
        config = {**study.record_config("multi30k"), "beams": beams, "seed": 0}
        store.save(run_key(config), {"config": config, "metrics": {"record": model_record}})
    assert decoding.stored_record(tmp_path) is None  # nothing shipped
    ship("run-a")
    assert decoding.shipped_record(tmp_path) == "run-a"
    assert decoding.stored_record(tmp_path)["metrics"]["record"] == "run-a"
    ship("run-b")  # run-b's only study has other beams: not the default study
    assert decoding.stored_record(tmp_path) is None
    assert decoding.stored_record(tmp_path, decoding.DecodingStudy(beams=(1, 2))) is not None
    ship("run-c")  # a model with no study yet
    assert decoding.stored_record(tmp_path) is None
