"""Tests of annotated_transformer/ablation/: studies and configs, statistics against hand
computations, the Table 3 comparison, the prefix LM and encoder-only batches, and small real
studies (stored runs load, jobs=2 equals jobs=1)."""

import math
import statistics

import pytest
import torch
from conftest import tiny_model

from annotated_transformer import TransformerConfig
from annotated_transformer import ablation as ab
from annotated_transformer.data import collate_pairs
from annotated_transformer.metrics import t_quantile
from annotated_transformer.results.experiments import ResultsStore

PLACEHOLDER_TASK = {"vocab_size": 100, "pad_id": 0, "max_len": 128, "tie_embeddings": True}
# A translation study small enough for a test: a few updates on a few hundred pairs.
TINY = {
    "data.max_train_pairs": 400,
    "train.max_steps": 3,
    "train.eval_every": 3,
    "train.warmup": 1,
    "evaluation.test_sentences": 8,
    "evaluation.bleu_resamples": 5,
    "evaluation.max_new_tokens": 6,
}


# -- studies and configs -----------------------------------------------------------------------


@pytest.mark.parametrize("profile", ab.PROFILE_CHOICES)
@pytest.mark.parametrize("task", list(ab.TASKS))
def test_every_variant_of_every_study_builds_valid_configs(profile, task):
    kind = ab.task_kind(task)
    for name in ab.study_names():
        configs = ab.run_configs(name, task, seeds=1, profile=profile)
        assert len(configs) == len(ab.get_study(name).variants(kind)) > 1
        assert sum(config["baseline"] for config in configs) == 1, name
        for config in configs:
            fields = dict(PLACEHOLDER_TASK)
            if config["model"]["arch"] == "encoder-decoder":
                fields["share_embeddings"] = True
            model, train = ab.build_configs(config, fields)
            assert isinstance(model, TransformerConfig)
            assert train.seed == config["seed"] and train.max_steps > 0
            assert config["study"] == name and config["task"] == task


@pytest.mark.parametrize("profile", ab.PROFILE_CHOICES)
@pytest.mark.parametrize("task", ["multi30k", "tinyshakespeare"])
def test_a_one_factor_baseline_is_the_profile_base_itself(profile, task):
    # Every one-factor study changes one thing of the same base: its baseline is that base, also
    # where the profile's base is not the study's declared baseline (no dropout in `reference`).
    base = None
    for name in ab.study_names():
        if name == "factorial" or len(ab.get_study(name).factors) > 1 and task != "multi30k":
            continue
        if name in ("token_rms", "token_rms_learned"):  # every cell fixes its positions on purpose
            continue
        (config,) = [c for c in ab.run_configs(name, task, 1, profile) if c["baseline"]]
        trained = {key: config[key] for key in ("model", "train", "data", "evaluation")}
        base = base or trained
        assert trained == base, name


def test_the_baseline_follows_the_profile_and_falls_back_to_the_declared_one():
    assert ab.baseline_variant("dropout", "tinyshakespeare", "cpu") == "0.1"
    assert ab.baseline_variant("dropout", "tinyshakespeare", "reference") == "0.0"
    assert ab.baseline_variant("label_smoothing", "tinyshakespeare", "reference") == "0.0"
    # Table 3's `base`, `P_drop=0.0` and `eps_ls=0.0` all equal a base without either: declared
    assert ab.baseline_variant("table3", "tinyshakespeare", "reference") == "base"
    # the factorial's cells all differ from the base (its schedule is warmup+cosine): declared
    declared = ab.get_study("factorial").baseline_label("translation")
    assert ab.baseline_variant("factorial", "cmn-eng", "reference") == declared


def test_heads_keep_d_model_so_d_k_shrinks():
    configs = ab.run_configs("heads", "multi30k", seeds=1, profile="gpu")
    (d_model,) = {config["model"]["d_model"] for config in configs}
    sizes = {
        config["model"]["n_heads"]: ab.build_configs(config, PLACEHOLDER_TASK)[0].d_head
        for config in configs
    }
    assert sizes == {h: d_model // h for h in (1, 2, 4, 8, 16)}


def test_schedules_share_one_peak_rate():
    from annotated_transformer.optim import noam_lr

    for config in ab.run_configs("schedule", "multi30k", seeds=1, profile="gpu"):
        train = config["train"]
        if train["schedule"] == "noam":
            peak = noam_lr(train["warmup"], config["model"]["d_model"], train["warmup"])
            assert math.isclose(peak * train["noam_factor"], train["lr"])


def test_factorial_has_sixteen_cells_and_one_stack_models_get_both_stacks_layers():
    configs = ab.run_configs("factorial", "multi30k", seeds=[0, 5], profile="smoke")
    assert len(configs) == 32 and {c["seed"] for c in configs} == {0, 5}
    cells = {tuple(sorted(c["factors"].items())) for c in configs}
    assert len(cells) == 16
    by_arch = {
        c["model"]["arch"]: c["model"]["n_layers"]
        for c in ab.run_configs("architecture", "multi30k", 1, "smoke")
    }
    assert by_arch["decoder-only"] == by_arch["encoder-only"] == 2 * by_arch["encoder-decoder"]
    lm = {c["variant"] for c in ab.run_configs("architecture", "tinyshakespeare", 1, "smoke")}
    assert lm == {"decoder-only", "encoder-only"}


def test_the_factorials_tokens_start_no_smaller_than_the_sinusoids_added_to_them():
    """Xavier's rule starts a token of cmn-eng's 4k vocabulary at a third of the sinusoid's rms:
    the factorial's absolute level would measure that (the token_rms study), not the encoding."""
    import annotated_transformer as at

    position_rms = at.sinusoidal_table(64, 128).pow(2).mean().sqrt().item()  # 1/√2
    for config in ab.run_configs("factorial", "cmn-eng", 1, "reference"):
        vocab = config["data"]["bpe_vocab_size"]
        torch.manual_seed(0)
        model = at.build_model(at.TransformerConfig(**config["model"], vocab_size=vocab))
        for embedding in (model.src_embedding, model.tgt_embedding):
            with torch.no_grad():
                tokens = embedding(torch.arange(vocab)[None])  # [1, V, d_model]
            assert tokens.pow(2).mean().sqrt().item() > position_rms, config["variant"]


def test_bad_names_and_overrides_give_errors_that_list_the_valid_ones():
    with pytest.raises(ValueError, match="heads, depth"):
        ab.get_study("heds")
    with pytest.raises(ValueError, match="multi30k, cmn-eng, tinyshakespeare"):
        ab.run_configs("heads", "copy")
    with pytest.raises(ValueError, match="smoke, cpu, gpu"):
        ab.run_configs("heads", "multi30k", profile="tpu")
    with pytest.raises(ValueError, match="'d_modle' is not a model field.*d_model"):
        ab.parse_overrides({"model.d_modle": 64}, "translation")
    with pytest.raises(ValueError, match="section 'optim' is not one of: model, train"):
        ab.parse_overrides({"optim.lr": 1e-3}, "translation")
    with pytest.raises(ValueError, match="'seed' is not a train field"):
        ab.parse_overrides({"train.seed": 1}, "translation")
    with pytest.raises(ValueError, match="no section has it"):
        ab.parse_overrides({"d_modle": 64}, "translation")
    with pytest.raises(ValueError, match="JSON object"):
        ab.parse_overrides("{model.d_model: 64}", "translation")
    with pytest.raises(ValueError, match="context_length"):
        ab.parse_overrides({"data.context_length": 64}, "translation")
    with pytest.raises(ValueError, match="n_heads=3"):  # checked before anything trains
        ab.run_configs("norm", "multi30k", 1, "smoke", {"model.n_heads": 3})
    with pytest.raises(ValueError, match="max_steps > warmup"):
        ab.run_configs("norm", "multi30k", 1, "smoke", {"train.max_steps": 2})
    with pytest.raises(ValueError, match="seeds"):
        ab.parse_seeds(0)


def test_overrides_parse_from_json_and_bare_names_and_reach_every_run():
    parsed = ab.parse_overrides('{"max_steps": 7, "model.d_model": 48}', "translation")
    assert parsed == {"train.max_steps": 7, "model.d_model": 48}
    configs = ab.run_configs("dropout", "multi30k", seeds="1,2", profile="smoke", overrides=parsed)
    assert {(c["train"]["max_steps"], c["model"]["d_model"]) for c in configs} == {(7, 48)}
    assert ab.parse_seeds(3) == [0, 1, 2] and ab.parse_seeds("4, 2") == [4, 2]


def test_profile_and_jobs_resolution_says_why():
    profile, why = ab.resolve_profile("auto")
    assert "auto" in why
    if not torch.cuda.is_available():
        assert profile == "smoke"
    assert ab.resolve_profile("reference")[0] == "reference"
    with pytest.raises(ValueError, match="not one of: auto, smoke, cpu, gpu, reference"):
        ab.resolve_profile("probe")  # the probes' name for their records, not a profile
    assert ab.resolve_jobs(3, runs=2) == 2
    if not torch.cuda.is_available():
        assert ab.resolve_jobs("auto", runs=10) == 1
    with pytest.raises(ValueError, match="jobs"):
        ab.resolve_jobs(0)


# -- statistics ---------------------------------------------------------------------------------


def _record(study, variant, seed, value, metric="test_bleu", factors=None, baseline=False):
    return {
        "key": f"{study}-{variant}-{seed}",
        "config": {
            "study": study,
            "variant": variant,
            "factors": factors or {study: variant},
            "baseline": baseline,
            "seed": seed,
            "profile": "gpu",
            "task": "multi30k",
        },
        "metrics": {metric: value},
        "history": [],
        "provenance": {"device": "X", "git_commit": "0" * 40, "date": "2026-01-01T00:00:00"},
    }


def test_summary_matches_the_statistics_module_and_a_hand_t_interval():
    values = {"a": [20.0, 21.0, 23.0], "b": [18.0, 18.5]}
    records = [
        _record("s", label, seed, value, baseline=label == "a")
        for label, runs in values.items()
        for seed, value in enumerate(runs)
    ]
    rows = {row["variant"]: row for row in ab.summarize(records, "test_bleu")}
    for label, runs in values.items():
        row = rows[label]
        half = t_quantile(0.975, len(runs) - 1) * statistics.stdev(runs) / math.sqrt(len(runs))
        assert row["n"] == len(runs)
        assert math.isclose(row["mean"], statistics.mean(runs))
        assert math.isclose(row["std"], statistics.stdev(runs))
        assert math.isclose(row["ci_high"] - row["mean"], half)
        assert (row["min"], row["max"]) == (min(runs), max(runs))
    assert math.isclose(t_quantile(0.975, 2), 4.302652729911275, rel_tol=1e-9)  # a t table
    assert rows["b"]["vs_baseline"] == pytest.approx(18.25 - 64 / 3)
    assert "verdict" not in rows["a"]  # the baseline is not compared with itself


def test_welch_test_by_hand():
    first, second = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    result = ab.welch_test(first, second)
    standard_error = math.sqrt(1 / 3 + 1 / 3)
    assert result["difference"] == 3.0
    assert math.isclose(result["t"], 3.0 / standard_error)
    assert math.isclose(result["df"], 4.0)  # equal variances and sizes: n1 + n2 - 2
    # t = 3.67 lies between the 97.5% (2.776) and 99% (3.747) quantiles of t with 4 df.
    assert 0.02 < result["p_value"] < 0.05
    # With 4 df, P(|T| <= t) = sin θ (1 + cos² θ / 2), θ = atan(t / 2) (Abramowitz & Stegun 26.7.4).
    theta = math.atan(result["t"] / 2)
    inside = math.sin(theta) * (1 + math.cos(theta) ** 2 / 2)
    assert result["p_value"] == pytest.approx(1 - inside, rel=1e-9)


def test_noise_judgement_both_ways_and_with_one_run():
    clear = ab.judge([20.0, 20.1, 19.9], [22.0, 22.1, 21.9])
    assert clear["verdict"] == "differs" and clear["p_value"] < 0.001
    noisy = ab.judge([20.0, 23.0, 17.0], [21.0, 18.0, 24.0])
    assert noisy["verdict"] == "within noise" and noisy["p_value"] > 0.5
    single = ab.judge([20.0], [25.0, 26.0])
    assert single["verdict"] == "cannot judge" and math.isnan(single["p_value"])


def test_ranking_orders_by_mean_in_the_right_direction():
    records = [
        _record("s", label, seed, value + 0.1 * seed)
        for label, value in (("low", 1.0), ("mid", 2.0), ("high", 3.0))
        for seed in range(3)
    ]
    summary = ab.summarize(records, "test_bleu")
    assert [row["variant"] for row in ab.rank(summary, True)] == ["high", "mid", "low"]
    ranked = ab.rank(summary, False)
    assert [(row["rank"], row["variant"]) for row in ranked] == [
        (1, "low"),
        (2, "mid"),
        (3, "high"),
    ]
    assert ranked[0]["overlaps_best"] and not ranked[2]["overlaps_best"]


def _synthetic_factorial():
    # y = 10 + 2a + b - 0.5c + 3ab (a, b, c, d in {0, 1}); seed noise of ±0.2 that cancels.
    records = []
    for cell in range(16):
        a, b, c, d = (cell >> 3) & 1, (cell >> 2) & 1, (cell >> 1) & 1, cell & 1
        factors = {"A": f"a{a}", "B": f"b{b}", "C": f"c{c}", "D": f"d{d}"}
        y = 10 + 2 * a + b - 0.5 * c + 3 * a * b
        for seed, noise in enumerate((-0.2, 0.2)):
            label = ", ".join(factors.values())
            records.append(_record("factorial", label, seed, y + noise, factors=factors))
    return records


def test_a_synthetic_factorial_gives_back_its_main_effects_and_its_interaction():
    records = _synthetic_factorial()
    effects = {(row["factor"], row["level"]): row for row in ab.main_effects(records, "test_bleu")}
    # Main effect of A averages over b: 2 + 3 * mean(b) = 3.5; of B: 1 + 3 * mean(a) = 2.5.
    for factor, expected in (("A", 3.5), ("B", 2.5), ("C", -0.5), ("D", 0.0)):
        low, high = effects[(factor, f"{factor.lower()}0")], effects[(factor, f"{factor.lower()}1")]
        assert high["difference"] == pytest.approx(expected)
        assert high["mean"] - low["mean"] == pytest.approx(expected)
        assert low["n"] == high["n"] == 16
        assert low["effect"] == pytest.approx(-expected / 2)
    by_hand = [r["metrics"]["test_bleu"] for r in records if r["config"]["factors"]["A"] == "a1"]
    assert effects[("A", "a1")]["std"] == pytest.approx(statistics.stdev(by_hand))
    assert effects[("A", "a1")]["min"] == min(by_hand)
    table = ab.interaction(records, "test_bleu", "A", "B")
    assert table["rows"] == ["a0", "a1"] and table["columns"] == ["b0", "b1"]
    assert table["interaction"] == pytest.approx(3.0)
    assert table["means"][0][0] == pytest.approx(10 - 0.25)  # c averages to -0.25
    for other in ("C", "D"):
        assert ab.interaction(records, "test_bleu", "A", other)["interaction"] == pytest.approx(0)


def test_curves_average_the_seeds_at_common_steps():
    records = [_record("s", "v", seed, 0.0) for seed in range(2)]
    records[0]["history"] = [{"step": 10, "eval_loss": 3.0}, {"step": 20, "eval_loss": 2.0}]
    records[1]["history"] = [{"step": 10, "eval_loss": 5.0}, {"step": 20, "eval_loss": 2.0}]
    curve = ab.curves(records)["v"]
    assert curve["step"] == [10, 20] and curve["mean"] == [4.0, 2.0] and curve["n"] == 2
    assert curve["std"][0] == pytest.approx(statistics.stdev([3.0, 5.0]))


def test_table3_comparison_agrees_disagrees_and_says_within_noise():
    def runs(study, variant, values, metric="test_bleu"):
        return [_record(study, variant, s, v, metric) for s, v in enumerate(values)]

    records = (
        runs("heads", "8", [25.0, 25.1, 24.9])
        + runs("heads", "1", [22.0, 22.1, 21.9])  # paper: 1 head worse; ours: worse
        + runs("heads", "4", [27.0, 27.1, 26.9])  # paper: worse; ours: better
        + runs("heads", "16", [24.0, 26.0, 25.0])  # paper: same; ours: within noise
        + runs("depth", "3", [25.0, 26.0, 24.0])
        + runs("depth", "1", [24.0, 26.5, 23.5])  # paper: worse; ours: within noise
        + runs("dropout", "0.1", [25.0])
        + runs("dropout", "0.0", [24.0])  # one run each
    )
    rows = {row["trend"]: row for row in ab.vaswani_comparison(records, "test_bleu", True)}
    assert rows["1 head instead of 8"]["verdict"] == "agrees"
    assert rows["1 head instead of 8"]["paper_change"] == pytest.approx(24.9 - 25.8)
    assert rows["4 heads instead of 8"]["verdict"] == "disagrees"
    assert rows["16 heads instead of 8"]["verdict"] == "agrees"  # no clear change in either
    assert rows["fewer layers (paper 6 -> 2, ours 3 -> 1)"]["verdict"] == "within noise"
    assert rows["no dropout"]["verdict"] == "cannot judge"
    assert rows["twice the width d_model"]["verdict"] == "not run"
    assert rows["a quarter of the key size d_k at fixed h"]["verdict"] == "not run"
    assert rows["a quarter of the key size d_k at fixed h"]["note"] == "run: -p study table3"
    # A loss is compared with the paper's perplexity: lower is better.
    losses = runs("heads", "8", [2.0, 2.01, 1.99], "valid_loss") + runs(
        "heads", "1", [2.5, 2.51, 2.49], "valid_loss"
    )
    row = ab.vaswani_comparison(losses, "valid_loss", False)[0]
    assert row["paper_change"] == pytest.approx(5.29 - 4.92)
    assert (row["paper"], row["ours"], row["verdict"]) == ("worse", "worse", "agrees")


def test_table3_study_runs_every_row_of_table3_but_those_it_says_why_not():
    coverage = {row["paper"]: row for row in ab.table3_coverage("multi30k", "cpu")}
    assert list(coverage) == list(ab.VASWANI_TABLE3)
    variants = [v.label for v in ab.get_study("table3").variants("translation")]
    assert variants == list(ab.TABLE3_LEVELS)
    for name, row in coverage.items():
        if name in variants:
            assert row["status"] == "run"
        else:
            assert row["status"] == "not run" and row["ours"] == ab.TABLE3_NOT_RUN[name]
    assert set(coverage) - set(variants) == set(ab.TABLE3_NOT_RUN)
    # Every trend of the comparison is a row the table3 study runs.
    assert {trend.paper for trend in ab.TRENDS} == set(variants) - {"base"}


@pytest.mark.parametrize("profile", ab.PROFILE_CHOICES)
def test_table3_rows_keep_their_ratio_to_the_papers_base(profile):
    configs = {c["variant"]: c for c in ab.run_configs("table3", "multi30k", 1, profile)}
    base = configs["base"]["model"]
    d_model, layers, d_ff = base["d_model"], base["n_layers"], base["d_ff"]
    assert base["n_heads"] == 8 and "d_k" not in base

    def sizes(label):
        model, _ = ab.build_configs(configs[label], PLACEHOLDER_TASK)
        return model

    for heads in (1, 4, 16, 32):  # (A): d_k = d_v = d_model / h
        model = sizes(f"h={heads}")
        assert model.n_heads == heads and model.key_size == model.value_size == d_model // heads
    for size in (16, 32):  # (B): d_k alone, as 16 and 32 are to the paper's 64
        model = sizes(f"d_k={size}")
        assert model.key_size == d_model // 8 * size // 64 and model.value_size == d_model // 8
    assert [sizes(f"N={n}").n_layers for n in (2, 4, 8)] == [layers // 3, 2 * layers // 3, 4]
    assert [sizes(f"d_model={w}").d_model for w in (256, 1024)] == [d_model // 2, 2 * d_model]
    assert {sizes(f"d_model={w}").d_ff for w in (256, 1024)} == {d_ff}
    assert [sizes(f"d_ff={w}").d_ff for w in (1024, 4096)] == [d_ff // 2, 2 * d_ff]
    assert sizes("learned").positional == "learned"
    assert [configs[f"eps_ls={e}"]["train"]["label_smoothing"] for e in (0.0, 0.2)] == [0.0, 0.2]


def test_table3_variants_are_the_one_factor_studies_runs_under_other_names():
    """The same training config gives the same run: a stored heads or depth study fills the
    table3 study's cells (and the reverse) without training them again."""
    from annotated_transformer.ablation.runner import training_part
    from annotated_transformer.results.experiments import run_key

    def keys(study):
        return {
            run_key(training_part(c)): c["variant"]
            for c in ab.run_configs(study, "multi30k", 1, "cpu")
        }

    table3 = keys("table3")
    shared = {
        "heads": {"1": "h=1", "4": "h=4", "16": "h=16", "8": "base"},
        "depth": {"1": "N=2", "2": "N=4", "3": "base"},
        "dropout": {"0.0": "P_drop=0.0", "0.2": "P_drop=0.2"},
        "label_smoothing": {"0.0": "eps_ls=0.0", "0.2": "eps_ls=0.2"},
        "positional": {"learned": "learned", "sinusoidal": "base"},
    }
    for study, pairs in shared.items():
        found = {label: table3.get(key) for key, label in keys(study).items()}
        assert {label: found[label] for label in pairs} == pairs, study


def _runs_by_cell(study: str) -> dict[tuple[str, int], dict]:
    """The training part of each run of a Multi30k reference study (5 seeds), by (variant, seed)."""
    from annotated_transformer.ablation.runner import training_part

    return {
        (c["variant"], c["seed"]): training_part(c)
        for c in ab.run_configs(study, "multi30k", 5, "reference")
    }


def test_token_rms_study_reuses_the_positional_runs_and_changes_only_the_token_size():
    """Its cells "by init" are the positional study's sinusoidal and none runs (the plan trains
    only the two "rms 1" cells), which differ from them in model.token_rms alone."""
    from annotated_transformer.results.experiments import run_key

    positional, token_rms = _runs_by_cell("positional"), _runs_by_cell("token_rms")
    assert len(token_rms) == 4 * 5
    for (variant, seed), config in token_rms.items():
        encoding, size = variant.split(", ")
        twin = positional[(encoding, seed)]
        if size == "by init":
            assert run_key(config) == run_key(twin)
        else:
            assert config["model"] == {**twin["model"], "token_rms": 1.0}
            assert {k: v for k, v in config.items() if k != "model"} == {
                k: v for k, v in twin.items() if k != "model"
            }
    assert ab.plan_seeds("multi30k", "token_rms") == 5
    assert ab.PLAN["multi30k"].index("token_rms") == ab.PLAN["multi30k"].index("positional") + 1


def test_token_rms_rope_study_trains_only_the_rotary_cell_at_rms_1():
    """Three of its cells are runs of the positional and token_rms studies (rope by init,
    sinusoidal by init and at rms 1); its fourth, rope at rms 1, differs from rope by init in
    model.token_rms alone."""
    from annotated_transformer.results.experiments import run_key

    positional, token_rms = _runs_by_cell("positional"), _runs_by_cell("token_rms")
    rope = _runs_by_cell("token_rms_rope")
    stored = {run_key(config) for config in [*positional.values(), *token_rms.values()]}
    assert len(rope) == 4 * 5
    new = {cell for cell, config in rope.items() if run_key(config) not in stored}
    assert new == {("rope, rms 1", seed) for seed in range(5)}
    for seed in range(5):
        start, large = rope[("rope, by init", seed)], rope[("rope, rms 1", seed)]
        assert run_key(start) == run_key(positional[("rope", seed)])
        assert large["model"] == {**start["model"], "token_rms": 1.0}
        assert {k: v for k, v in large.items() if k != "model"} == {
            k: v for k, v in start.items() if k != "model"
        }
    assert ab.baseline_variant("token_rms_rope", "multi30k", "reference") == "rope, by init"
    assert ab.plan_seeds("multi30k", "token_rms_rope") == 5
    plan = ab.PLAN["multi30k"]
    assert plan.index("token_rms_rope") == plan.index("token_rms") + 1


def test_table3_comparison_skips_a_base_without_the_papers_value_of_the_row():
    """Our reference translation base has no dropout and rotary positions: row D's "no dropout"
    is that base itself, and row E's learned positions against it would measure rope -> learned.
    The comparison must not read either as the paper's change."""

    def runs(study, variant, values, baseline=False, model=None):
        records = [_record(study, variant, s, v, baseline=baseline) for s, v in enumerate(values)]
        for record in records:
            record["config"]["model"] = {"dropout": 0.0, "positional": "rope", **(model or {})}
            record["config"]["train"] = {"label_smoothing": 0.1}
        return records

    records = (
        runs("table3", "base", [25.0, 25.1, 24.9], baseline=True)
        + runs("table3", "P_drop=0.0", [25.0, 25.1, 24.9])  # the same runs under the row's name
        + runs("table3", "learned", [20.0, 20.1, 19.9], model={"positional": "learned"})
        + runs("table3", "eps_ls=0.0", [23.0, 23.1, 22.9])  # the base has the paper's 0.1
        + runs("positional", "sinusoidal", [21.0, 21.1, 20.9], model={"positional": "sinusoidal"})
        + runs("positional", "learned", [20.0, 20.1, 19.9], model={"positional": "learned"})
    )
    rows = {row["trend"]: row for row in ab.vaswani_comparison(records, "test_bleu", True)}
    no_dropout = rows["no dropout"]
    assert (no_dropout["ours"], no_dropout["verdict"]) == ("not comparable", "not comparable")
    assert "dropout=0.0, the paper's 0.1" in no_dropout["note"]
    assert no_dropout["note"].endswith("run -p study dropout")
    assert math.isnan(no_dropout["ours_change"])
    learned = rows["learned instead of sinusoidal positions"]
    assert learned["study"] == "positional"  # sinusoidal -> learned, not rope -> learned
    assert learned["ours_change"] == pytest.approx(-1.0)
    smoothing = rows["no label smoothing"]
    assert (smoothing["study"], smoothing["verdict"]) == ("table3", "agrees")
    # Without the positional study, row E has no comparable base either.
    alone = [r for r in records if r["config"]["study"] == "table3"]
    rows = {row["trend"]: row for row in ab.vaswani_comparison(alone, "test_bleu", True)}
    assert rows["learned instead of sinusoidal positions"]["verdict"] == "not comparable"
    assert rows["no dropout"]["verdict"] == "not comparable"
    assert rows["half the width d_model"]["verdict"] == "not run"


def test_table3_coverage_says_where_our_base_is_not_the_papers():
    reference = {row["paper"]: row for row in ab.table3_coverage("multi30k", "reference")}
    assert reference["P_drop=0.0"]["status"] == "same as base"
    assert reference["P_drop=0.0"]["ours"].startswith("none: our base has dropout=0.0")
    assert "dropout study's 0.1 -> 0.0" in reference["P_drop=0.0"]["ours"]
    assert "positional study's sinusoidal -> learned" in reference["learned"]["ours"]
    assert reference["eps_ls=0.0"]["ours"] == "label_smoothing=0.0 (base 0.1)"
    # The smaller profiles keep the paper's dropout and sinusoids: every row runs as itself.
    cpu = ab.table3_coverage("multi30k", "cpu")
    assert {row["status"] for row in cpu if row["paper"] != "big"} == {"run"}
    assert not any("not the row's change" in row["ours"] for row in cpu)


def test_norm_and_position_is_a_two_by_two_whose_corner_is_the_base():
    configs = ab.run_configs("norm_and_position", "tinyshakespeare", 1, "cpu")
    cells = {(c["model"]["norm"], c["model"]["norm_position"]) for c in configs}
    assert cells == {(n, p) for n in ("layernorm", "rmsnorm") for p in ("pre", "post")}
    (baseline,) = [c for c in configs if c["baseline"]]
    (base,) = [c for c in ab.run_configs("residual", "tinyshakespeare", 1, "cpu") if c["baseline"]]
    assert baseline["model"] == base["model"]


def test_table3_comparison_prefers_the_table3_study_and_adjusts_by_holm():
    def runs(study, variant, values, baseline=False):
        return [_record(study, variant, s, v, baseline=baseline) for s, v in enumerate(values)]

    records = (
        runs("table3", "base", [25.0, 25.1, 24.9], baseline=True)
        + runs("table3", "d_k=16", [23.0, 23.1, 22.9])  # paper: worse; ours: worse
        + runs("heads", "8", [25.0, 25.1, 24.9], baseline=True)
        + runs("heads", "1", [27.0, 27.1, 26.9])  # only the heads study: better
        + runs("table3", "h=4", [25.0, 25.3, 24.8])
    )
    rows = {row["trend"]: row for row in ab.vaswani_comparison(records, "test_bleu", True)}
    quarter = rows["a quarter of the key size d_k at fixed h"]
    assert (quarter["study"], quarter["verdict"]) == ("table3", "agrees")
    assert quarter["ours_low"] < quarter["ours_change"] < quarter["ours_high"] < 0
    assert (rows["1 head instead of 8"]["study"], rows["1 head instead of 8"]["ours"]) == (
        "heads",
        "better",
    )
    assert rows["4 heads instead of 8"]["study"] == "table3"
    judged = [row for row in rows.values() if "p_holm" in row]
    assert len(judged) == 3
    assert [row["p_holm"] for row in judged] == ab.holm([row["p_value"] for row in judged])


def test_save_tables_writes_a_factorials_effects_with_holm_verdicts(tmp_path):
    import json

    records = []
    for cell in range(4):
        a, b = cell >> 1, cell & 1
        factors = {"A": f"a{a}", "B": f"b{b}"}
        label = ", ".join(factors.values())
        for seed, noise in enumerate((-0.1, 0.0, 0.1)):
            value = 20 + 3 * a + noise * (1 + b)
            records.append(_record("grid", label, seed, value, factors=factors, baseline=cell == 0))
    paths = ab.save_tables(records, ResultsStore(tmp_path), "test_bleu", True)
    tables = json.loads(paths["json"].read_text())
    effects = {row["term"]: row for row in tables["effects"]}
    assert set(effects) == {"A", "B", "A × B"}
    assert effects["A"]["effect"] == pytest.approx(3.0) and effects["A"]["verdict"] == "differs"
    assert effects["B"]["verdict"] == "within noise"
    assert all("p_holm" in row and "diff_low" in row for row in tables["summary"][1:])


# -- one stack for source and target --------------------------------------------------------


def _translation_batch():
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]
    return collate_pairs(pairs, pad_id=0, bos_id=1, eos_id=2)


def test_prefix_lm_batch_puts_the_loss_on_the_target_tokens_only():
    batch = _translation_batch()
    joined = ab.prefix_lm_batch(batch, pad_id=0)
    assert joined.src is None
    assert joined.inputs.tolist() == [[5, 6, 7, 2, 1, 8, 9], [10, 2, 1, 11, 12, 13, 14]]
    assert joined.targets.tolist() == [[0, 0, 0, 0, 8, 9, 2], [0, 0, 11, 12, 13, 14, 2]]
    assert joined.num_tokens(0) == batch.num_tokens(0)  # the same tokens carry the loss
    # Each target but </s> is the next position's input: a shift by one.
    keep = (joined.targets[:, :-1] != 0) & (joined.targets[:, :-1] != 2)
    assert torch.equal(joined.inputs[:, 1:][keep], joined.targets[:, :-1][keep])


def _single_stack(arch):
    return tiny_model(arch, vocab_size=20, n_layers=2, max_len=512).eval()


@pytest.mark.parametrize("arch", ["decoder-only", "encoder-only"])
def test_only_the_encoder_only_model_sees_the_future(arch):
    model = _single_stack(arch)
    tokens = torch.randint(3, 20, (1, 10), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[0, 6] = 3 if tokens[0, 6] != 3 else 4
    with torch.no_grad():
        before, after = model(tokens), model(changed)  # [1, 10, 20]
    moved = not torch.allclose(before[:, :6], after[:, :6])
    assert moved == (arch == "encoder-only")


# -- real (tiny) studies ------------------------------------------------------------------------


def test_a_smoke_study_writes_records_then_loads_them(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    records = ab.run_study("norm", "multi30k", 1, "smoke", TINY, jobs=1, store=store, log=None)
    assert [r["config"]["variant"] for r in records] == ["layernorm", "rmsnorm"]
    for record in records:
        assert store.exists(record["key"])
        metrics = record["metrics"]
        assert metrics["test_sentences"] == 8 and 0 <= metrics["test_bleu"] <= 100
        # validation for choosing, test for reporting: both splits decoded and scored
        assert metrics["valid_sentences"] == 8 and 0 <= metrics["valid_bleu"] <= 100
        assert math.isfinite(metrics["valid_loss"]) and 0 <= metrics["valid_chrf"] <= 100
        assert metrics["test_bleu_low"] <= metrics["test_bleu_high"]
        assert math.isfinite(metrics["test_loss"]) and metrics["decode"] == "greedy"
        assert record["history"] and record["provenance"]["seed"] == 0
        # the precision the run computed in (the smoke profile's fp32), beside the device
        assert record["provenance"]["precision"] == "fp32"

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(ab.runner, "train_run", no_training)
    again = ab.run_study("norm", "multi30k", 1, "smoke", TINY, jobs=1, store=store, log=None)
    assert again == records
    # The residual study's baseline is the same training run as the norm study's: reused.
    trained = []
    monkeypatch.setattr(ab.runner, "train_run", lambda config, device: trained.append(config) or {})
    both = ab.run_study("residual", "multi30k", 1, "smoke", TINY, jobs=1, store=store, log=None)
    assert [config["variant"] for config in trained] == ["without"]
    assert both[0]["metrics"] == records[0]["metrics"] and both[0]["config"]["study"] == "residual"
    # With no time left only the stored (shared) baseline comes back.
    late = ab.run_study("dropout", "multi30k", 1, "smoke", TINY, store=store, budget_s=0)
    assert [record["config"]["variant"] for record in late] == ["0.1"]
    paths = ab.save_tables(records, store, "test_bleu", True)
    assert paths["csv"].read_text().startswith("variant,norm,n,mean")
    assert len(store.records()) == 5  # the summaries' folder holds no records


def test_missing_runs_train_seed_by_seed_and_come_back_in_config_order(tmp_path, monkeypatch):
    # A study stopped part-way must hold whole replicates: seed 0 of every variant first.
    store = ResultsStore(tmp_path)
    first = ab.run_study("norm", "multi30k", [1], "smoke", TINY, jobs=1, store=store, log=None)
    trained = []
    real_train = ab.runner.train_run

    def recording(config, device):
        trained.append((config["variant"], config["seed"]))
        return real_train(config, device=device)

    monkeypatch.setattr(ab.runner, "train_run", recording)
    records = ab.run_study("norm", "multi30k", 3, "smoke", TINY, jobs=1, store=store, log=None)
    assert trained == [
        ("layernorm", 0),
        ("rmsnorm", 0),
        ("layernorm", 2),
        ("rmsnorm", 2),
    ]  # seed 1 was stored by the first call
    assert [(r["config"]["variant"], r["config"]["seed"]) for r in records] == [
        ("layernorm", 0),
        ("layernorm", 1),
        ("layernorm", 2),
        ("rmsnorm", 0),
        ("rmsnorm", 1),
        ("rmsnorm", 2),
    ]
    assert records[1] == first[0] and records[4] == first[1]


def test_describe_lists_a_few_commits_and_counts_many_in_date_order():
    def record(commit, day, dirty=False):
        return {
            "config": {"profile": "reference"},
            "provenance": {
                "device": "cpu",
                "git_commit": commit * 40,
                "git_dirty": dirty,
                "date": f"2026-11-{day:02d}T10:00:00+00:00",
            },
        }

    few = [record("b", 3), record("a", 2), record("b", 4)]
    assert ab.describe(few) == (
        "3 runs; profile reference; device cpu; commit aaaaaaaa, bbbbbbbb; 2026-11-02 to 2026-11-04"
    )
    many = [record(c, day, dirty=c == "c") for day, c in enumerate("fedcba9", start=1)]
    assert ab.describe(many) == (
        "7 runs; profile reference; device cpu; 7 commits (1 with uncommitted changes), "
        "ffffffff to 99999999; 2026-11-01 to 2026-11-07"
    )
    smoke = [{**few[0], "config": {"profile": "smoke"}}]
    assert ab.describe(smoke).startswith("SMOKE RUN: proves the pipeline works, not a result.")


def test_two_jobs_give_the_same_numbers_as_one(tmp_path):
    one = ab.run_study(
        "norm", "multi30k", 1, "smoke", TINY, jobs=1, store=ResultsStore(tmp_path / "1"), log=None
    )
    two = ab.run_study(
        "norm", "multi30k", [0], "smoke", TINY, jobs=2, store=ResultsStore(tmp_path / "2"), log=None
    )
    assert [r["key"] for r in one] == [r["key"] for r in two]
    # The same runs; the workers compute with one thread each and this process with all the
    # cores, and math libraries may pick fewer threads on a busy machine: sums in another order,
    # so equal to float rounding, not bit for bit (measured: test_loss 6.2227587734 against
    # 6.2227587391 while another training shared the CPU).
    for first, second in zip(one, two, strict=True):
        numbers = {k for k, v in first["metrics"].items() if isinstance(v, float)}
        assert {k: first["metrics"][k] for k in numbers} == pytest.approx(
            {k: second["metrics"][k] for k in numbers}, rel=1e-6
        )
        assert {k: v for k, v in first["metrics"].items() if k not in numbers} == {
            k: v for k, v in second["metrics"].items() if k not in numbers
        }
        assert first["history"][-1]["train_loss"] == pytest.approx(
            second["history"][-1]["train_loss"], rel=1e-6
        )


def test_a_character_lm_study_measures_the_encoder_only_leak_honestly(tmp_path):
    overrides = {"max_steps": 3, "eval_every": 3, "warmup": 1, "evaluation.eval_batches": 2}
    records = ab.run_study(
        "architecture",
        "tinyshakespeare",
        1,
        "smoke",
        overrides,
        jobs=1,
        store=ResultsStore(tmp_path),
        log=None,
    )
    assert [r["config"]["model"]["arch"] for r in records] == ["decoder-only", "encoder-only"]
    for record in records:
        metrics = record["metrics"]
        assert metrics["valid_bits_per_char"] == pytest.approx(metrics["valid_loss"] / math.log(2))
        assert math.isfinite(metrics["valid_last_position_loss"])


# A character-LM run small enough for a test, with dropout so that resuming must restore the
# random state too; SAVES_PER_RUN checkpoints over 10 updates: one after every update.
RESUMABLE = {"max_steps": 10, "eval_every": 5, "warmup": 2, "evaluation.eval_batches": 2}


def _stop_at_update(monkeypatch, step: int) -> None:
    """Make the next training stop (as a killed process would) when it reaches ``step``."""
    from annotated_transformer.training.trainer import Trainer

    trigger = Trainer._trigger

    def stopping(self, event, *arguments):
        if event == "on_update" and self.step == step:
            raise KeyboardInterrupt
        return trigger(self, event, *arguments)

    monkeypatch.setattr(Trainer, "_trigger", stopping)


def _without_timings(history):
    return [
        {k: v for k, v in row.items() if k not in ("wall_time", "tokens_per_second")}
        for row in history
    ]


def test_a_run_stopped_part_way_continues_exactly_from_its_checkpoint(tmp_path, monkeypatch):
    from annotated_transformer.training.checkpoint import load_checkpoint
    from annotated_transformer.training.provenance import code_version

    config = ab.run_configs("dropout", "tinyshakespeare", [0], "smoke", RESUMABLE)[-1]
    assert config["model"]["dropout"] > 0
    whole = ab.train_run(config, "cpu")  # no checkpoints at all
    root = tmp_path / "runs"
    with monkeypatch.context() as patch:
        _stop_at_update(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            ab.train_run(config, "cpu", checkpoint_root=root)
    folder = ab.run_folder(root, config)
    assert load_checkpoint(folder / "last.pt")["step"] == 6  # saved after update 6, not 7
    resumed = ab.train_run(config, "cpu", checkpoint_root=root)
    # The same numbers as the run that never stopped: weights, data position and dropout's
    # random state all continued.
    assert resumed["metrics"] == whole["metrics"]
    # The history too, but the training loss of the first row logged after the resume: it
    # averages the updates since the resume (7 and 8), not since the last row (5 to 8).
    after = [row for row in resumed["history"] if row["step"] > 6][0]["step"]
    rows = [_without_timings(run["history"]) for run in (resumed, whole)]
    for history in rows:
        next(row for row in history if row["step"] == after).pop("train_loss")
    assert rows[0] == rows[1]
    assert "resumed" not in whole
    assert resumed["resumed"]["wall_time_s"] > 0
    assert resumed["resumed"]["code"] == code_version()


def test_a_study_continues_its_stopped_run_and_deletes_the_spent_checkpoints(tmp_path, monkeypatch):
    store, root = ResultsStore(tmp_path / "results"), tmp_path / "runs"
    study = ("residual", "tinyshakespeare", [0], "smoke", RESUMABLE)
    with monkeypatch.context() as patch:
        _stop_at_update(patch, 4)
        with pytest.raises(KeyboardInterrupt):
            ab.run_study(*study, jobs=1, store=store, log=None, checkpoint_root=root)
    assert store.records() == [] and len(list(root.iterdir())) == 1
    records = ab.run_study(*study, jobs=1, store=store, log=None, checkpoint_root=root)
    first, second = records  # the first run continued from update 3, the second ran whole
    assert first["provenance"]["resumed"]["earlier_wall_time_s"] > 0
    assert "resumed" not in second["provenance"]
    assert list(root.iterdir()) == []  # every record saved, every folder deleted
    plain = ab.run_study(*study, jobs=1, store=ResultsStore(tmp_path / "plain"), log=None)
    assert [r["metrics"] for r in records] == [r["metrics"] for r in plain]


def test_a_checkpoint_a_run_cannot_continue_from_names_the_folder_to_delete(tmp_path):
    config = ab.run_configs("residual", "tinyshakespeare", [0], "smoke", RESUMABLE)[0]
    folder = ab.run_folder(tmp_path, config)
    folder.mkdir(parents=True)
    (folder / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ab.RunFolderError, match="delete that folder") as error:
        ab.train_run(config, "cpu", checkpoint_root=tmp_path)
    assert str(folder) in str(error.value)
