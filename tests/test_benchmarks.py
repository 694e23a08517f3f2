"""The benchmark suite (benchmarks/run.py) runs end to end in its smoke mode and writes the
documented JSON; its CUDA-only rows run on a CPU too. No timing is asserted: the numbers of a
smoke run mean nothing."""

import functools
import importlib
import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


def load_suite():
    """benchmarks/run.py as a module, whatever the working directory and sys.path."""
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def suite_module(name: str):
    """``benchmarks.<name>``: importable once run.py has put the checkout on sys.path."""
    load_suite()
    return importlib.import_module(f"benchmarks.{name}")


def test_smoke_run_writes_the_documented_json(tmp_path):
    suite = load_suite()
    path = tmp_path / "results.json"
    suite.main(["--smoke", "--device", "cpu", "--json", str(path)])
    document = json.loads(path.read_text())

    for key in ("device", "torch", "git_commit", "date", "cpu_count", "threads", "results"):
        assert key in document
    assert isinstance(document["device"], str) and document["device"]
    assert document["torch"] == torch.__version__
    names = [item["name"] for item in document["results"]]
    assert len(names) == len(set(names))
    assert any("decoder-only training" in name for name in names)
    assert any("encoder-decoder training" in name for name in names)
    assert any("greedy decoding" in name for name in names)
    assert any("beam search" in name for name in names)
    assert sum(name.startswith("torch.compile vs eager") for name in names) == 2  # on a CPU too
    assert sum(name.startswith(("word-level training", "adaptive softmax")) for name in names) == 2
    for item in document["results"]:
        assert {"name", "ours", "reference", "unit", "ratio"} <= set(item)
        for key in ("ours", "reference", "ratio"):
            assert isinstance(item[key], (int, float)) and math.isfinite(item[key])
            assert item[key] > 0
        # ratio > 1 means we are better: ours / reference for a rate, the inverse for a cost.
        if item["unit"] in suite_module("measure").LOWER_IS_BETTER:
            expected = item["reference"] / item["ours"]
        else:
            expected = item["ours"] / item["reference"]
        assert math.isclose(item["ratio"], expected, rel_tol=1e-9)
    # On a machine without CUDA the CUDA-only rows are listed as skipped, not errors.
    for item in document["skipped"]:
        assert item["name"] and item["reason"]
    # Provenance: what was measured, where, and how busy the machine was.
    # The tests run in a git checkout on Linux: the commit and both load averages are known.
    assert re.fullmatch(r"[0-9a-f]{40}", document["git_commit"])
    load = document["load_average"]
    assert len(load["before"]) == 3 and len(load["after"]) == 3


@pytest.mark.parametrize(
    ("only", "starts"),
    [
        ("compile", ("torch.compile vs eager",)),
        ("vocabulary", ("word-level training", "adaptive softmax vs full softmax")),
    ],
)
def test_only_the_named_rows_run_with_only(tmp_path, only, starts):
    suite = load_suite()
    path = tmp_path / f"{only}.json"
    suite.main(["--smoke", "--device", "cpu", "--only", only, "--json", str(path)])
    document = json.loads(path.read_text())
    assert document["only"] == only and document["mode"] == "smoke"
    names = [item["name"] for item in document["results"]]
    assert len(names) == 2 and all(name.startswith(starts) for name in names)
    assert re.fullmatch(r"[0-9a-f]{40}", document["git_commit"])


def test_the_vocabulary_rows_measure_the_word_level_recipe_at_its_own_sizes():
    """The full plan's word-level model and batch are chapter 08's PTB/WikiText-2 recipe (the
    reference profile), over WikiText-2's vocabulary against PTB's; the smoke plan scales both
    vocabularies and the adaptive softmax's clusters down with it."""
    from annotated_transformer.__main__ import resolve_settings

    measure, models = suite_module("measure"), suite_module("models")
    size = models.make_plan("full", cuda=False).word_level
    recipe = resolve_settings("wikitext-2", {}, [], profile="reference")
    model, data = recipe["model"], recipe["data"]
    assert (size.d_model, size.n_heads, size.n_layers, size.d_ff) == (
        model["d_model"], model["n_heads"], model["n_layers"], model["d_ff"],
    )  # fmt: skip
    assert (size.context, size.batch) == (data["context_length"], data["batch_size"])
    assert measure._words(size, models.WORD_LEVEL_SMALLER) == 10000
    assert models.make_plan("quick", cuda=False).word_level.batch < size.batch
    smoke = models.make_plan("smoke", cuda=False).word_level
    small = [measure._words(smoke, words) for words in (*measure.ADAPTIVE_CUTOFFS,)]
    assert 2 <= small[0] < small[1] < smoke.vocab_size
    rows = measure.bench_vocabulary(
        models.make_plan("smoke", cuda=False), torch.device("cpu"), lambda *_: None
    )
    assert f"{smoke.vocab_size:,} words vs {small[1]:,}" in rows[0]["name"]
    assert f"cutoffs {tuple(small)}" in rows[1]["note"]
    with pytest.raises(ValueError, match="is not one of: full, smaller, adaptive"):
        measure.word_level_step(smoke, "tied", torch.device("cpu"), "fp32")


def test_only_with_store_is_refused_before_anything_runs(capsys):
    suite = load_suite()
    with pytest.raises(SystemExit) as stop:
        suite.main(["--smoke", "--only", "compile", "--store"])
    assert stop.value.code == 2
    assert "--store keeps the whole suite's documents" in capsys.readouterr().err


def test_readme_table_is_the_stored_json():
    """The README's results table is `run.py --table` of the stored JSON, never typed by hand."""
    suite = load_suite()
    folder = RUN.parent
    readme = (folder / "README.md").read_text()
    start = readme.index("<!-- results: results/cpu-quick.json -->")
    end = readme.index("<!-- /results -->", start)
    block = readme[start:end].split("\n", 1)[1].strip()
    document = json.loads((folder / "results" / "cpu-quick.json").read_text())
    assert block == suite.markdown_table(document)
    assert document["device_type"] == "cpu" and document["mode"] == "quick"


def test_cuda_only_rows_run_on_a_cpu(monkeypatch):
    """What only a CUDA run calls (bf16 autocast, torch.compile, the explicit-attention switch,
    MFU) runs here on a CPU at the smoke sizes, so that a broken name or shape shows without a
    GPU. ``torch.compile`` traces with the eager backend (seconds, no C++ compiler)."""
    measure, models = suite_module("measure"), suite_module("models")
    plan = models.make_plan("smoke", cuda=True)
    # A known accelerator's name, so that the MFU row is computed too.
    monkeypatch.setattr(measure, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    assert plan.compile_backend == "eager"
    rows = measure.bench_cuda(plan, torch.device("cpu"), lambda *_: None)

    names = [item["name"] for item in rows]
    for expected in ("bf16 autocast vs fp32", "SDPA vs explicit"):
        assert sum(name.startswith(expected) for name in names) == 1, names
    # compilation measured once, by bench_compile's two rows (one shape, three), in bf16
    compiled = [name for name in names if name.startswith("torch.compile vs eager")]
    assert [name.split(" [")[0] for name in compiled] == [
        "torch.compile vs eager training, bf16, one shape",
        "torch.compile vs eager training, bf16, three shapes",
    ]
    utilisation = next(item for item in rows if item["name"].startswith("model FLOPs utilisation"))
    assert utilisation["unit"] == "fraction of peak"
    # MFU takes the faster of eager and compiled, as the one-shape compile row timed them
    size, peak = plan.decoder_sizes[-1], measure.PEAK_BF16_FLOPS["H100"]
    for ours, reference, best in ((2e9, 1e9, "bf16-compiled"), (1e9, 3e9, "bf16")):
        made = [
            {"name": "compile", "ours": ours, "reference": reference, "ratio": ours / reference}
        ]
        monkeypatch.setattr(measure, "bench_compile", lambda *args, made=made: made)
        mfu = measure.bench_cuda(plan, torch.device("cpu"), lambda *_: None)[-1]
        assert mfu["name"].startswith(f"model FLOPs utilisation, {best} [")
        expected = max(ours, reference) * measure.flops_per_token(size) / peak
        assert mfu["ratio"] == pytest.approx(expected)
    for item in rows:
        for key in ("ours", "reference", "ratio"):
            assert math.isfinite(item[key]) and item[key] > 0


def test_token_budget_batches_keep_the_budget_and_change_the_shape():
    measure, models = suite_module("measure"), suite_module("models")
    size = models.make_plan("quick", cuda=False).decoder_sizes[-1]  # batch 2, context 256
    batches = measure.token_budget_batches(size, [256, 192, 128], torch.device("cpu"))
    assert [tuple(tokens.shape) for tokens, _ in batches] == [(2, 256), (2, 192), (4, 128)]
    for tokens, targets in batches:
        assert tokens.shape == targets.shape
        assert 0 <= int(tokens.min()) and int(tokens.max()) < size.vocab_size
        assert size.batch * size.context * 3 // 4 <= tokens.numel() <= size.batch * size.context


def test_the_compile_rows_run_on_a_cpu_at_one_shape_and_at_three():
    """The CPU's torch.compile rows (in the smoke plan traced by the eager backend): one row of
    batches of one shape, one of three lengths in turn, each naming its backend and batches."""
    measure, models = suite_module("measure"), suite_module("models")
    plan = models.make_plan("smoke", cuda=False)
    assert plan.compile_backend == "eager"
    assert models.make_plan("quick", cuda=False).compile_backend == "inductor"
    rows = measure.bench_compile(plan, torch.device("cpu"), lambda *_: None)
    assert [item["name"].split(", ")[-1].split(" [")[0] for item in rows] == [
        "one shape",
        "three shapes",
    ]
    context = plan.decoder_sizes[-1].context
    assert f"batches 2 x {context}, 2 x {context}, 2 x {context} in turn" in rows[0]["note"]
    assert "backend eager" in rows[1]["note"] and rows[1]["unit"] == "tokens/s"
    for item in rows:
        for key in ("ours", "reference", "ratio"):
            assert math.isfinite(item[key]) and item[key] > 0


def test_set_sdpa_switches_every_attention_of_our_model():
    measure, models = suite_module("measure"), suite_module("models")
    model = models.our_decoder_only(models.make_plan("smoke", cuda=False).decode_size)
    attentions = [m for m in model.modules() if type(m).__name__ == "MultiHeadAttention"]
    assert attentions
    measure.set_sdpa(model, False)
    assert not any(attention.use_sdpa for attention in attentions)
    measure.set_sdpa(model, True)
    assert all(attention.use_sdpa for attention in attentions)


def test_the_alternating_timer_measures_each_call_and_keeps_the_thread_count():
    """time_alternating (torch.utils.benchmark.Timer inside our alternation) gives each run's own
    duration: a call that sleeps 6 ms is timed at no less than that, and above one that sleeps
    2 ms; the suite's thread count is the one in force during the calls (Timer's default is 1)."""
    measure = suite_module("measure")
    import time

    seen = []
    runs = {
        "short": lambda: time.sleep(0.002),
        "long": lambda: (seen.append(torch.get_num_threads()), time.sleep(0.006)),
    }
    before = torch.get_num_threads()
    seconds = measure.time_alternating(runs, warmup=1, repeats=4, device=torch.device("cpu"))
    assert 0.002 <= seconds["short"] < seconds["long"]
    assert seconds["long"] >= 0.006
    assert set(seen) == {before} and torch.get_num_threads() == before


# A stand-in with nanoGPT's interface (GPTConfig, GPT(config), model(idx, targets) -> (logits,
# loss)), written by the test: the suite loads whatever model.py it is given the same way.
FAKE_NANOGPT = """
from dataclasses import dataclass
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 17
    n_layer: int = 1
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            config.n_embd, config.n_head, 4 * config.n_embd, 0.0, activation="gelu",
            batch_first=True, norm_first=True,
        )
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.TransformerEncoder(layer, config.n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        print("number of parameters: printed, as nanoGPT does")

    def forward(self, idx, targets=None):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        logits = self.lm_head(self.ln_f(self.h(x, mask=mask, is_causal=True)))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
"""


def test_the_nanogpt_rows_run_from_a_given_model_file(tmp_path, capsys):
    (tmp_path / "model.py").write_text(FAKE_NANOGPT)
    suite = load_suite()
    document = suite.run_suite("smoke", "cpu", log=lambda *_: None, nanogpt=str(tmp_path))
    names = [item["name"] for item in document["results"]]
    assert "decoder-only training vs nanoGPT [tiny]" in names
    assert document["nanogpt"] == str(tmp_path / "model.py")
    assert "number of parameters" not in capsys.readouterr().out  # its print is swallowed


def test_without_nanogpt_the_rows_are_skipped_with_the_reason(tmp_path):
    models = suite_module("models")
    module, why = models.load_nanogpt(tmp_path / "absent")
    assert module is None and "not found at" in why and "AT_NANOGPT" in why
    (tmp_path / "model.py").write_text("x = 1\n")
    module, why = models.load_nanogpt(tmp_path)
    assert module is None and "not nanoGPT's model.py" in why
    suite = load_suite()
    document = suite.run_suite("smoke", "cpu", log=lambda *_: None)  # smoke: nothing fetched
    skipped = {item["name"]: item["reason"] for item in document["skipped"]}
    assert "--nanogpt PATH" in skipped["decoder-only training vs nanoGPT"]


def test_bf16_rows_exactly_where_the_cpu_has_native_bf16(monkeypatch):
    suite = load_suite()
    for native in (True, False):
        monkeypatch.setattr(suite, "native_bf16", lambda device, native=native: native)
        document = suite.run_suite("smoke", "cpu", log=lambda *_: None)
        bf16 = [item["name"] for item in document["results"] if "bf16 autocast" in item["name"]]
        assert bool(bf16) is native
        assert ("bf16 training" in {item["name"] for item in document["skipped"]}) is not native


def test_a_fall_of_a_ratio_beyond_noise_is_reported_as_a_regression():
    report = suite_module("report")
    noise = report.RATIO_NOISE

    def document(ratio, device="CPU: X (2 cores)", commit="a" * 40):
        row = {"name": "decoder-only training [small-cpu]", "ratio": ratio}
        return {"device": device, "date": "2026-12-01T00:00:00+00:00", "git_commit": commit,
                "results": [row]}  # fmt: skip

    earlier = [document(0.8), document(1.20, commit="b" * 40)]  # the last one is compared with
    (line,) = report.regressions(document(1.20 - noise - 0.01), earlier)
    assert line.startswith("REGRESSION decoder-only training [small-cpu]") and "bbbbbbb" in line
    (line,) = report.regressions(document(1.20 - noise + 0.01), earlier)
    assert line.startswith("regressions: none")
    (line,) = report.regressions(document(0.1, device="another CPU"), earlier)
    assert "no earlier stored run" in line


def test_store_writes_the_latest_document_and_its_history_copy(tmp_path, monkeypatch):
    suite = load_suite()
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    monkeypatch.setattr(suite, "HISTORY", tmp_path / "history")
    suite.main(["--smoke", "--device", "cpu", "--store"])
    latest = json.loads((tmp_path / "cpu-smoke.json").read_text())
    (copy,) = (tmp_path / "history").glob("cpu-smoke-*.json")
    assert json.loads(copy.read_text()) == latest
    assert copy.name == f"cpu-smoke-{latest['date'][:10]}-{latest['git_commit'][:7]}.json"


def test_the_stored_history_holds_the_latest_cpu_run():
    """Every stored document of the latest CPU run is also in the history the next run compares
    with, so that a regression shows."""
    folder = RUN.parent / "results"
    latest = json.loads((folder / "cpu-quick.json").read_text())
    copies = [json.loads(p.read_text()) for p in (folder / "history").glob("cpu-quick-*.json")]
    assert latest in copies


def recipe_module(monkeypatch, **changes):
    """benchmarks/nanogpt_recipe.py with its recipe shrunk to seconds."""
    module = suite_module("nanogpt_recipe")
    small = {"max_iters": 6, "lr_decay_iters": 6, "warmup_iters": 2, "eval_interval": 3,
             "eval_iters": 2, "n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 8}  # fmt: skip
    monkeypatch.setattr(module, "RECIPE", {**module.RECIPE, **small, **changes})
    return module


def test_time_to_target_counts_from_the_first_evaluation_to_the_first_at_the_target():
    module = suite_module("nanogpt_recipe")
    evaluations = [(0, 10.0, 4.2), (250, 40.0, 2.1), (500, 70.0, 1.89), (750, 99.0, 1.7)]
    result = module.time_to_target(evaluations, 1.89)
    assert result["reached_at_step"] == 500 and result["seconds_to_target"] == 60.0
    assert result["final_val_loss"] == 1.7
    assert module.time_to_target(evaluations, 1.89, start=0.0)["seconds_to_target"] == 70.0
    assert module.time_to_target(evaluations, 1.0)["seconds_to_target"] is None


def test_both_sides_of_the_recipe_train_and_evaluate(tmp_path, monkeypatch):
    """The restated nanoGPT loop (over a model.py with nanoGPT's interface) and our command line
    both train the shrunk recipe and evaluate at every eval_interval."""
    module = recipe_module(monkeypatch)
    (tmp_path / "model.py").write_text(FAKE_NANOGPT)
    nanogpt, _ = suite_module("models").load_nanogpt(tmp_path)
    theirs = module.nanogpt_loop(nanogpt)
    assert [step for step, *_ in theirs] == [0, 3, 6]
    assert theirs[-1][2] < theirs[0][2]  # it learned something in 6 updates
    mine = module.ours("fp32")
    assert [step for step, *_ in mine] == [3, 6]
    assert all(math.isfinite(loss) for *_, loss in mine)


def test_the_profile_tables_of_a_step_sit_side_by_side(tmp_path, monkeypatch):
    """--profile: per shape and precision, the operators of ours and of the reference (nanoGPT's
    GPT, here the stand-in), each with its self time per step, and a total that bounds them."""
    suite = load_suite()
    models = suite_module("models")
    tiny = models.make_plan("smoke", cuda=False).decode_size
    monkeypatch.setattr(suite, "PROFILE_SIZES", [tiny])
    monkeypatch.setattr(suite, "native_bf16", lambda device: True)
    # every operator, not the top 12: at this tiny size a busy machine may push the matrix
    # products below the cut, and the test is about what the tables hold, not the ranking
    monkeypatch.setattr(
        suite, "profile_step", functools.partial(suite.profile_step, row_limit=10_000)
    )
    (tmp_path / "model.py").write_text(FAKE_NANOGPT)
    document = suite.profile(torch.device("cpu"), str(tmp_path), log=lambda *_: None)
    keys = [(t["size"], t["precision"], t["model"]) for t in document["tables"]]
    assert keys == [("tiny", p, m) for p in ("fp32", "bf16") for m in ("ours-nanogpt", "nanogpt")]
    for table in document["tables"]:
        *ops, total = table["ops"]
        assert total["op"] == "total" and ops
        assert sum(op["self_ms"] for op in ops) <= total["self_ms"] * 1.0001
        assert [op["self_ms"] for op in ops] == sorted((op["self_ms"] for op in ops), reverse=True)
        assert any(op["op"] in ("aten::mm", "aten::addmm") for op in ops)
