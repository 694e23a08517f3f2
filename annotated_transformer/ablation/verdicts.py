"""The stored studies as chapter 09 leads with them: grouped by task, study and profile; each
with its verdict table (Holm-corrected, with the effect's 95% interval) and its trivial baseline
(the bigram of a language model, the copied source of a translation); the factorial's winning
levels; and the claims of the source reports, measured.

Part of :mod:`annotated_transformer.ablation` (chapter 09).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from statistics import mean, stdev
from typing import Any

from ..metrics import t_quantile
from ..results.experiments import run_key
from ..tasks.task_options import canonical_task
from .configs import run_configs
from .runner import training_part
from .statistics import (
    SAME_RUNS,
    default_metric,
    detectable_difference,
    holm,
    judge,
    rank,
    standardized_detectable,
    summarize,
    usable_runs,
    variant_values,
    welch_test,
)
from .studies import PLAN, PLANNED_SEEDS, STUDIES, TASKS, plan_seeds, task_kind

# The newest and largest profiles first: a study stored at several sizes is read at its largest.
PROFILE_ORDER = ("reference", "gpu", "cpu")
# How close to its trivial baseline a study's baseline may sit and still be said to measure
# nothing: nats per token for a loss, BLEU points for BLEU.
TRIVIAL_MARGIN = {"loss": 0.05, "bleu": 1.0}
# How far apart two variants may be and still be "the same", for a claim that says so: a claim
# agrees only when the whole 95% interval of the difference lies inside this margin (an interval
# wider than it cannot tell "the same" from a real effect: more seeds can).
SAME_MARGIN = {"loss": 0.02, "bleu": 1.0}


@dataclass(frozen=True)
class StoredStudy:
    """The real (not smoke) records of one study on one task at one profile: the newest record
    of each (variant, seed), in the study's order of variants."""

    task: str
    study: str
    profile: str
    records: tuple[dict[str, Any], ...]
    # True: every seed stored, those added after the planned ones included (a labelled
    # follow-up); False: the seeds its plan fixed before it ran (the primary analysis).
    follow_up: bool = False

    @property
    def metric(self) -> str:
        return default_metric(self.task)[0]

    @property
    def higher_is_better(self) -> bool:
        return default_metric(self.task)[1]

    @property
    def title(self) -> str:
        title = f"{self.task}, {self.study} study, {self.profile} profile"
        if self.follow_up:
            title += f", follow-up: its seeds past the planned {PLANNED_SEEDS} included"
        return title

    @property
    def baseline(self) -> str | None:
        found = [r["config"]["variant"] for r in self.records if r["config"].get("baseline")]
        return found[0] if found else None


SEED_CHOICES = ("planned", "follow-up")


def stored_studies(records: Iterable[dict[str, Any]], seeds: str = "planned") -> list[StoredStudy]:
    """``records`` (a results store's) grouped by task (the name users type, an old record's
    ``shakespeare`` included), study and profile, smoke runs left out, and a study whose baseline
    has no run yet left out too (:func:`plan_progress` counts it); the newest record of each
    (variant, seed) kept. Ordered by :data:`PROFILE_ORDER` (other
    profiles after it, by name), then by task, then in the order of :data:`STUDIES`.

    ``seeds="planned"``: the primary analysis, the seeds every plan fixed before its study ran
    (:data:`~annotated_transformer.ablation.studies.PLANNED_SEEDS`: 0, 1, 2). ``"follow-up"``:
    only the studies that trained more seeds afterwards, with all of them
    (``StoredStudy.follow_up``)."""
    if seeds not in SEED_CHOICES:
        raise ValueError(f"seeds={seeds!r}: use one of {', '.join(SEED_CHOICES)}")
    groups: dict[tuple[str, str, str], dict[tuple[str, int], dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: r["provenance"]["date"], reverse=True):
        config = record["config"]
        if config["profile"] == "smoke":
            continue
        key = (canonical_task(config["task"]), config["study"], config["profile"])
        if seeds == "planned" and config["seed"] >= PLANNED_SEEDS:
            continue
        groups.setdefault(key, {}).setdefault((config["variant"], config["seed"]), record)
    if seeds == "follow-up":
        groups = {
            key: runs
            for key, runs in groups.items()
            if any(seed >= PLANNED_SEEDS for _, seed in runs)
        }

    def variant_order(task: str, study: str) -> list[str]:
        if study not in STUDIES or task not in TASKS:
            return []
        return [variant.label for variant in STUDIES[study].variants(task_kind(task))]

    studies = []
    for (task, study, profile), runs in groups.items():
        if not any(record["config"].get("baseline") for record in runs.values()):
            continue  # under way, its baseline not trained yet: nothing to compare with
        order = variant_order(task, study)
        place = {label: index for index, label in enumerate(order)}
        ordered = sorted(
            runs.values(),
            key=lambda r: (place.get(r["config"]["variant"], len(order)), r["config"]["seed"]),
        )
        studies.append(
            StoredStudy(task, study, profile, tuple(ordered), follow_up=seeds == "follow-up")
        )
    names = list(STUDIES)

    def position(study: StoredStudy) -> tuple:
        rank_of_profile = (
            PROFILE_ORDER.index(study.profile)
            if study.profile in PROFILE_ORDER
            else len(PROFILE_ORDER)
        )
        known = names.index(study.study) if study.study in names else len(names)
        return (rank_of_profile, study.profile, study.task, known, study.study)

    return sorted(studies, key=position)


def difference_interval(
    baseline: Sequence[float], variant: Sequence[float], confidence: float = 0.95
) -> tuple[float, float]:
    """Welch's ``confidence`` interval of ``mean(variant) - mean(baseline)`` (the effect size in
    the metric's units), from ``scipy.stats.ttest_ind(...).confidence_interval``; NaN with fewer
    than 2 runs on a side, the difference itself when neither side has any spread."""
    from scipy import stats

    if len(baseline) < 2 or len(variant) < 2:
        return math.nan, math.nan
    if stdev(baseline) == 0 and stdev(variant) == 0:
        difference = mean(variant) - mean(baseline)
        return difference, difference
    interval = stats.ttest_ind(variant, baseline, equal_var=False).confidence_interval(confidence)
    return float(interval.low), float(interval.high)


def _direction(difference: float, higher_is_better: bool) -> str:
    return "better" if (difference > 0) == higher_is_better else "worse"


def variant_costs(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Variant label -> what one of its runs cost: ``parameters`` (the model's, from the
    record's metrics; NaN where a record has none) and ``minutes``, the shortest wall time of its
    runs (training and evaluation, from each record's provenance): the run least slowed by other
    work on a shared machine, as a benchmark reports its fastest repeat."""
    walls: dict[str, list[float]] = {}
    parameters: dict[str, float] = {}
    for record in records:
        label = record["config"]["variant"]
        walls.setdefault(label, []).append(record["provenance"]["wall_time_s"] / 60)
        count = record["metrics"].get("parameters")
        parameters.setdefault(label, float(count) if count is not None else math.nan)
    return {
        label: {"parameters": parameters[label], "minutes": min(minutes)}
        for label, minutes in walls.items()
    }


def verdict_table(
    records: Sequence[dict[str, Any]], metric: str, higher_is_better: bool, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """One row per variant, in the study's order: its rank, n, mean and 95% t interval; against
    the baseline variant the difference with Welch's 95% interval, the p-value, the p-value
    adjusted by Holm over the study's comparisons, and the verdict of the adjusted value:
    ``better`` or ``worse`` (beyond seed noise), ``within noise``, ``cannot judge`` (fewer than
    2 runs on a side), ``baseline``, or :data:`SAME_RUNS` (a variant whose runs are the
    baseline's own, not compared); ``detectable``: the smallest difference its comparison would
    have found at 80 % power (:func:`~annotated_transformer.ablation.statistics.detectable_difference`)
    at Holm's strictest level, ``alpha`` over the study's number of comparisons (the level a
    difference must pass to be called real whatever the other rows show); then what a run of it
    cost (:func:`variant_costs`)."""
    summary = summarize(records, metric)
    costs = variant_costs(records)
    places = {row["variant"]: row["rank"] for row in rank(summary, higher_is_better)}
    values = variant_values(records, metric)
    base = next((row["variant"] for row in summary if row["baseline"]), None)
    family = sum(not math.isnan(row.get("p_value", math.nan)) for row in summary)
    rows = []
    for row in summary:
        out = {
            "variant": row["variant"],
            "rank": places.get(row["variant"]),
            **{key: row.get(key, math.nan) for key in ("n", "mean", "ci_low", "ci_high")},
            "difference": row.get("vs_baseline", math.nan),
        }
        low, high = (
            difference_interval(values[base], values[row["variant"]])
            if base is not None
            and row["variant"] != base
            and values[row["variant"]]
            and row.get("verdict") != SAME_RUNS
            else (math.nan, math.nan)
        )
        out.update(
            {
                "diff_low": low,
                "diff_high": high,
                "p_value": row.get("p_value", math.nan),
                "p_holm": row.get("p_holm", math.nan),
                "detectable": detectable_difference(
                    values[base], values[row["variant"]], alpha / family
                )
                if family and not math.isnan(row.get("p_value", math.nan))
                else math.nan,
            }
        )
        if row["baseline"]:
            out["verdict"] = "baseline"
        elif row.get("verdict") == SAME_RUNS:
            out["verdict"] = SAME_RUNS
        elif math.isnan(out["p_holm"]):
            out["verdict"] = "cannot judge"
        elif out["p_holm"] < alpha:
            out["verdict"] = _direction(out["difference"], higher_is_better)
        else:
            out["verdict"] = "within noise"
        out.update(costs[row["variant"]])
        rows.append(out)
    return rows


@dataclass(frozen=True)
class TrivialBaseline:
    """What a model that has learnt nothing of the design reaches on a study's metric."""

    metric: str
    value: float
    name: str  # "bigram", "copied source": read as "the {name} level"
    detail: str  # how it was computed, one line


@functools.lru_cache(maxsize=16)
def _language_model_bigram(task: str, tokens: int | None) -> tuple[float, float, float]:
    from ..data import load_language_model_corpus
    from ..tasks.baselines import count_baselines

    corpus = load_language_model_corpus(task)
    splits, vocab = corpus.splits, corpus.tokenizer.vocab_size
    evaluated = splits["valid"] if tokens is None else splits["valid"][: tokens + 1]
    result = count_baselines(splits["train"], splits["valid"], evaluated, vocab)
    return result.bigram_loss, result.unigram_loss, result.lam


@functools.lru_cache(maxsize=16)
def _source_copied_bleu(task: str, sentences: int | None) -> tuple[float, str, str, int]:
    from ..data import load_translation_corpus
    from ..tasks.baselines import copied_source_score

    corpus = load_translation_corpus(task)  # read once: the score and the languages' names
    pairs = corpus.splits["test"][:sentences]
    return copied_source_score(pairs), corpus.source, corpus.target, len(pairs)


def trivial_baseline(study: StoredStudy) -> TrivialBaseline | None:
    """The study's trivial level on its metric: for a language model the interpolated bigram of
    the training split (:func:`~annotated_transformer.baselines.count_baselines`, on the
    validation tokens the runs were scored on, its weight chosen on the validation split), for
    translation the BLEU of copying each test source sentence as its translation. Reads the data
    (once per process); ``None`` for another metric."""
    first = study.records[0]
    if study.metric == "valid_loss":
        tokens = first["metrics"].get("valid_tokens")
        bigram, unigram, lam = _language_model_bigram(study.task, tokens)
        return TrivialBaseline(
            study.metric,
            bigram,
            "bigram",
            f"the interpolated bigram of the training split (weight {lam:.2f}, chosen on the "
            f"validation split); the unigram reaches {unigram:.3f}",
        )
    if study.metric == "test_bleu":
        limit = first["config"].get("evaluation", {}).get("test_sentences")
        bleu, source, target, sentences = _source_copied_bleu(study.task, limit)
        return TrivialBaseline(
            study.metric,
            bleu,
            "copied source",
            f"each of the {sentences} test sentences left in {source} as its {target} "
            f"translation, sacreBLEU as the runs",
        )
    return None


def _margin(metric: str) -> tuple[float, str]:
    return (
        (TRIVIAL_MARGIN["bleu"], "BLEU") if "bleu" in metric else (TRIVIAL_MARGIN["loss"], "nats")
    )


def at_trivial_level(level: float, trivial: TrivialBaseline, higher_is_better: bool) -> bool:
    """Whether ``level`` is no more than :data:`TRIVIAL_MARGIN` better than ``trivial``."""
    margin, _ = _margin(trivial.metric)
    gain = level - trivial.value if higher_is_better else trivial.value - level
    return gain <= margin


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless one: ``"1 seed"``, ``"3 seeds"``, ``"0 runs"``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def measures_nothing(
    study: StoredStudy,
    trivial_of: Callable[[StoredStudy], TrivialBaseline | None] = trivial_baseline,
) -> bool | None:
    """Whether the study's baseline variant sits at its trivial level (:func:`at_trivial_level`),
    so that its verdicts say how fast a variant leaves that level, not which design is better;
    ``None`` when there is no baseline or no trivial level to compare with."""
    values = variant_values(study.records, study.metric).get(study.baseline or "", [])
    trivial = trivial_of(study)
    if not values or trivial is None:
        return None
    return at_trivial_level(mean(values), trivial, study.higher_is_better)


def overview(
    studies: Sequence[StoredStudy],
    alpha: float = 0.05,
    trivial_of: Callable[[StoredStudy], TrivialBaseline | None] = trivial_baseline,
) -> list[dict[str, Any]]:
    """One row per stored study: its size, where it ran, the baseline against the trivial level
    (``trivial_of``: :func:`trivial_baseline`, which reads the data), and how many variants
    differ from the baseline after Holm's correction."""
    rows = []
    for study in studies:
        table = verdict_table(study.records, study.metric, study.higher_is_better, alpha)
        base = next((row for row in table if row["verdict"] == "baseline"), None)
        trivial = trivial_of(study)
        nothing = measures_nothing(study, trivial_of)
        rows.append(
            {
                "task": study.task,
                "study": study.study,
                "profile": study.profile,
                "variants": len(table),
                "seeds": len({r["config"]["seed"] for r in study.records}),
                "runs": len(study.records),
                "device": "; ".join(sorted({r["provenance"]["device"] for r in study.records})),
                "metric": study.metric,
                "baseline": None if base is None else base["mean"],
                "trivial": None if trivial is None else f"{trivial.name} {trivial.value:.3f}",
                "baseline vs trivial": {
                    None: "cannot tell",
                    True: "at it: measures nothing",
                    False: "above it",
                }[nothing],
                "beyond noise": sum(row["verdict"] in ("better", "worse") for row in table),
                "minutes": _minutes(study.records),
            }
        )
    return rows


def _minutes(records: Iterable[dict[str, Any]]) -> float:
    """The wall time of ``records``' runs in minutes (a shared baseline counts in each study)."""
    return round(sum(r["provenance"]["wall_time_s"] for r in records) / 60, 1)


def plan_progress(
    records: Iterable[dict[str, Any]], profile: str = "reference", seeds: int | None = None
) -> list[dict[str, Any]]:
    """One row per study of :data:`PLAN`: the runs it needs at ``profile`` with ``seeds`` seeds
    (by default the plan's, :func:`plan_seeds`: 3, or more where the spread demanded it), how
    many are stored among ``records`` (a results store's), their wall time in minutes (in total
    and per run) and what is left."""
    stored = {run_key(training_part(r["config"])): r for r in records}
    rows = []
    for task, studies in PLAN.items():
        for study in studies:
            count = seeds or plan_seeds(task, study)
            wanted = [run_key(training_part(c)) for c in run_configs(study, task, count, profile)]
            found = [stored[key] for key in wanted if key in stored]
            minutes = _minutes(found)
            rows.append(
                {
                    "task": task,
                    "study": study,
                    "runs": len(wanted),
                    "stored": len(found),
                    "minutes": minutes,
                    "s per run": round(60 * minutes / len(found)) if found else None,
                    "status": "done"
                    if len(found) == len(wanted)
                    else f"{len(wanted) - len(found)} to run",
                }
            )
    return rows


def seed_spread(studies: Sequence[StoredStudy], seeds: int = 3) -> list[dict[str, Any]]:
    """Per task and profile, the seed-to-seed spread of the studies' shared baseline (the
    baseline configuration that most seeds trained, each seed once) and the smallest difference
    between two variants of ``seeds`` seeds each that a 95 % interval can resolve at that spread:
    ``t(0.975, 2 (seeds - 1)) * std * sqrt(2 / seeds)``. An effect smaller than that is noise at
    this size, whatever a study calls it; ``detectable at 80% power``: the smallest true difference
    such a comparison finds four times in five (:func:`standardized_detectable`), larger again."""
    groups: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for study in studies:
        for record in study.records:
            config = record["config"]
            if not config.get("baseline") or study.metric not in record["metrics"]:
                continue
            training = {k: v for k, v in training_part(config).items() if k != "seed"}
            by_seed = groups.setdefault((study.task, study.profile), {}).setdefault(
                run_key(training), {}
            )
            by_seed[config["seed"]] = record["metrics"][study.metric]
    rows = []
    for (task, profile), configs in groups.items():
        values = list(max(configs.values(), key=len).values())
        row: dict[str, Any] = {"task": task, "profile": profile, "seeds": len(values)}
        row["mean"] = mean(values)
        if len(values) > 1:
            spread = stdev(values)
            row["std"] = spread
            row["resolvable difference"] = (
                t_quantile(0.975, 2 * (seeds - 1)) * spread * math.sqrt(2 / seeds)
            )
            # what two such studies would find 4 times in 5 (two-sided, alpha 0.05)
            row["detectable at 80% power"] = standardized_detectable(seeds, seeds) * spread
        rows.append(row)
    return rows


def _probe_batch(data: dict[str, Any]) -> str:
    """What one update of a probe reads: BPE positions (translation) or character windows."""
    if "max_tokens" in data:
        return f"{data['max_tokens']} positions, BPE {data['bpe_vocab_size']}"
    return f"{data['batch_size']} x {data['context_length']} characters"


def probe_table(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probes that sized the ``reference`` profile (``scripts/ablation_probes.py``), oldest
    first: each candidate's task, what it trained (model, batch, updates), its headline metric and
    wall time. The precision is the one the run used (its provenance: ``auto`` resolves to bf16
    or fp32 by machine), else the one its config asked for."""
    rows = []
    for record in sorted(records, key=lambda r: r["provenance"]["date"]):
        config, metrics = record["config"], record["metrics"]
        metric = default_metric(config["task"])[0]
        model, train = config["model"], config["train"]
        rows.append(
            {
                "task": config["task"],
                "candidate": config["variant"],
                "seed": config["seed"],
                "model": f"{model['n_layers']} x {model['d_model']}, {model['positional']}, "
                f"{model.get('activation', 'relu')}, dropout {model['dropout']}",
                "batch": _probe_batch(config["data"]),
                "updates": train["max_steps"],
                "label smoothing": train["label_smoothing"],
                "precision": record["provenance"].get("precision")
                or train.get("precision", "fp32"),
                "metric": metric,
                "value": metrics.get(metric),
                "wall s": round(record["provenance"]["wall_time_s"]),
                "device": record["provenance"]["device"],
            }
        )
    return rows


def factor_effects(
    records: Sequence[dict[str, Any]], metric: str, higher_is_better: bool, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """For each two-level factor of a factorial: the main effect (second level's mean minus the
    first's, over every run at each level, as :func:`main_effects`), Welch's 95% interval and
    p-value of the runs at one level against the other, Holm over the factors, and the
    ``winner``: the better level when the adjusted p is below ``alpha``, else ``None``. The runs
    at a level mix the cells of the other factors, which widens the interval: a factor called
    a winner here has won across them."""
    usable = usable_runs(records, metric)
    rows = []
    for factor in usable[0]["config"]["factors"] if usable else []:
        levels: dict[str, list[float]] = {}
        for record in usable:
            level = record["config"]["factors"][factor]
            levels.setdefault(level, []).append(float(record["metrics"][metric]))
        if len(levels) != 2:
            continue
        (first, low_runs), (second, high_runs) = levels.items()
        row: dict[str, Any] = {
            "factor": factor,
            "levels": f"{first} -> {second}",
            "effect": mean(high_runs) - mean(low_runs),
            "effect_low": math.nan,
            "effect_high": math.nan,
            "p_value": math.nan,
        }
        if len(low_runs) > 1 and len(high_runs) > 1:
            row["effect_low"], row["effect_high"] = difference_interval(low_runs, high_runs)
            row["p_value"] = judge(low_runs, high_runs, alpha)["p_value"]
        better = second if _direction(row["effect"], higher_is_better) == "better" else first
        row["better_level"] = better
        rows.append(row)
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows]), strict=True):
        row["p_holm"] = adjusted
        row["winner"] = row["better_level"] if adjusted < alpha else None
    return rows


def _design_size(study: StoredStudy) -> int:
    """How many cells a factorial ``study``'s design has: the product of its factors' levels, as
    :data:`STUDIES` defines them for the study's task kind (a factor it does not know: the
    levels its records show, at least 2)."""
    factors = list(study.records[0]["config"]["factors"])
    defined = {f.name: f for f in STUDIES[study.study].factors} if study.study in STUDIES else {}
    kind = task_kind(study.task) if study.task in TASKS else ""
    return math.prod(
        len(defined[f].labels(kind))
        if f in defined and kind
        else max(2, len({r["config"]["factors"][f] for r in study.records}))
        for f in factors
    )


def factorial_cells(study: StoredStudy) -> tuple[int, int]:
    """How many cells of a factorial ``study`` have a usable run (a finite metric, not diverged),
    and how many cells its design has (:data:`STUDIES`' levels of its factors). Its effects and
    winners need every cell: a factorial trained part-way (seed 0 of a few cells first) would
    compare one corner of the design with another."""
    factors = list(study.records[0]["config"]["factors"])
    with_runs = {
        tuple(r["config"]["factors"][f] for f in factors)
        for r in usable_runs(study.records, study.metric)
    }
    return len(with_runs), _design_size(study)


def balanced_runs(study: StoredStudy) -> tuple[list[dict[str, Any]], list[int]]:
    """The usable runs of the seeds that every cell of a factorial ``study`` has, and those
    seeds: the balanced design that a main effect pooled over runs assumes
    (:func:`factor_effects`, :func:`~annotated_transformer.ablation.statistics.main_effects`).
    A seed still under way (seed 1 of a few cells) would weight those cells twice and tilt
    every factor's mean towards them; its runs wait until the seed is complete. Empty while
    some cell has no run."""
    factors = list(study.records[0]["config"]["factors"])
    cells_of: dict[int, set[tuple[str, ...]]] = {}
    usable = usable_runs(study.records, study.metric)
    for r in usable:
        cells_of.setdefault(r["config"]["seed"], set()).add(
            tuple(r["config"]["factors"][f] for f in factors)
        )
    design = _design_size(study)
    seeds = sorted(seed for seed, cells in cells_of.items() if len(cells) == design)
    return [r for r in usable if r["config"]["seed"] in seeds], seeds


@dataclass(frozen=True)
class Claim:
    """A claim of a source report about a study: ``variant`` against ``other``, which it says is
    ``"better"`` or ``"the same"`` (the whole 95% interval of the difference within
    :data:`SAME_MARGIN`). A claim without variants (``variant=""``) is about the
    winning levels of a factorial: ``winners``, ``(factor, level)`` pairs, when the report's
    levels are known."""

    study: str
    says: str
    variant: str = ""
    other: str = ""
    expects: str = "better"
    winners: tuple[tuple[str, str], ...] = ()


CLAIMS = (
    Claim("heads", "2 heads beat 4", "2", "4", "better"),
    Claim("positional", "no positional encoding barely matters", "none", "sinusoidal", "the same"),
    # The same claim against fair baselines: the sinusoids above start with tokens a third of
    # their size (the token_rms study), so "none" is also set against the rotary positions the
    # course's base uses and against sinusoids whose tokens start at rms 1.
    Claim(
        "positional",
        "no positional encoding barely matters (against rotary, our base)",
        "none",
        "rope",
        "the same",
    ),
    Claim(
        "token_rms",
        "no positional encoding barely matters (against sinusoids, tokens at rms 1)",
        "none, rms 1",
        "sinusoidal, rms 1",
        "the same",
    ),
    # Table 3's row E (the paper: learned positions "nearly identical" to sinusoids), with the
    # sinusoids' handicap of small tokens removed from both sides.
    Claim(
        "token_rms_learned",
        "learned positions match sinusoids (Table 3 row E, tokens at rms 1)",
        "learned, rms 1",
        "sinusoidal, rms 1",
        "the same",
    ),
    Claim(
        "architecture",
        "decoder-only beats encoder-decoder",
        "decoder-only",
        "encoder-decoder",
        "better",
    ),
    Claim(
        "factorial",
        "the factorial's winning levels",
        winners=(
            ("positional", "relative"),
            ("norm", "rmsnorm"),
            ("optimizer", "noam"),
            ("smoothing", "ls=0.1"),
        ),
    ),
)

# The source report's 2^4 factorial (Chinese->English, one seed per cell, 192 test pairs, beam
# 5): the mean test BLEU of each factor's levels over the 8 cells at that level. Its "optimizer"
# is, like ours, Adam at a constant rate against Adam under Noam's warmup schedule: a schedule.
# It also reports the best cell (relative + RMSNorm + Adam + smoothing, 9.50), the worst
# (absolute + LayerNorm + Adam + no smoothing, 5.84) and "the strongest interaction is optimizer
# x smoothing".
FACTORIAL_REPORT: dict[str, dict[str, float]] = {
    "positional": {"absolute": 7.57, "relative": 8.52},
    "norm": {"layernorm": 8.00, "rmsnorm": 8.08},
    "optimizer": {"adam": 7.88, "noam": 8.21},
    "smoothing": {"ls=0": 7.53, "ls=0.1": 8.56},
}
FACTORIAL_REPORT_INTERACTION = ("optimizer", "smoothing")


def factorial_against_report(study: StoredStudy, alpha: float = 0.05) -> list[dict[str, Any]]:
    """Each factor of the factorial beside :data:`FACTORIAL_REPORT`: the report's two level
    means, its effect and winning level (one seed a cell: no interval), and ours over the seeds
    every cell has (:func:`balanced_runs`): the effect with Welch's 95 % interval, Holm's
    p-value over the factors, our winner (``None`` within noise) and whether it is the report's."""
    runs, _ = balanced_runs(study)
    effects = factor_effects(runs, study.metric, study.higher_is_better, alpha)
    ours = {row["factor"]: row for row in effects}
    rows = []
    for factor, levels in FACTORIAL_REPORT.items():
        (first, first_mean), (second, second_mean) = levels.items()
        reported = second if second_mean > first_mean else first
        measured = ours.get(factor, {})
        effect, low, high = (
            measured.get(key, math.nan) for key in ("effect", "effect_low", "effect_high")
        )
        if measured and measured["levels"] != f"{first} -> {second}":  # ours in the other order
            effect, low, high = -effect, -high, -low
        rows.append(
            {
                "factor": factor,
                "levels": f"{first} -> {second}",
                "report effect": second_mean - first_mean,
                "report winner": reported,
                "our effect": effect,
                "effect_low": low,
                "effect_high": high,
                "p_holm": measured.get("p_holm", math.nan),
                "our winner": measured.get("winner"),
                "same winner": measured.get("winner") == reported,
            }
        )
    return rows


def check_claims(
    studies: Sequence[StoredStudy],
    claims: Sequence[Claim] = CLAIMS,
    alpha: float = 0.05,
    trivial_of: Callable[[StoredStudy], TrivialBaseline | None] = trivial_baseline,
) -> list[dict[str, Any]]:
    """Each claim against every stored study it is about: our difference (``variant`` minus
    ``other``) with Welch's 95% interval and p-value (one planned comparison, unadjusted), what
    we measured, the smallest difference the comparison detects at 80 % power (``detectable``),
    and the verdict: ``agrees``, ``disagrees``, ``within noise`` (ours is not beyond
    seed noise: a difference the claim saw is not found, or, for a claim of "the same", a
    difference beyond :data:`SAME_MARGIN` is not ruled out), ``cannot judge``, or ``not stored``.
    ``at_trivial_level`` says whether that study's baseline sits at its trivial level
    (``trivial_of``, :func:`trivial_baseline` by default): then it measures nothing. A factorial
    claim lists the winners of :func:`factor_effects` over the seeds every cell has
    (:func:`balanced_runs`) and, where the claim names the report's, on how many factors they
    agree; until every cell has a run (:func:`factorial_cells`) it cannot judge."""
    rows = []
    for claim in claims:
        found = False
        for study in studies:
            if study.study != claim.study:
                continue
            values = variant_values(study.records, study.metric)
            if claim.variant and not (values.get(claim.variant) and values.get(claim.other)):
                continue
            found = True
            row: dict[str, Any] = {
                "claim": claim.says,
                "task": study.task,
                "profile": study.profile,
                "runs": len(study.records),
                "at_trivial_level": measures_nothing(study, trivial_of),
            }
            if row["at_trivial_level"] is True:
                # A baseline that has learnt nothing of the design cannot back a claim either way.
                row["measured"] = "the study's baseline sits at its trivial level"
                row["verdict"] = "measures nothing"
                rows.append(row)
                continue
            if not claim.variant:
                with_runs, design = factorial_cells(study)
                if with_runs < design:
                    row["measured"] = (
                        f"{with_runs} of its {design} cells have a run so far: "
                        "its winners need every cell"
                    )
                    row["verdict"] = "cannot judge"
                    rows.append(row)
                    continue
                runs, seeds = balanced_runs(study)
                if not seeds:  # every cell has a run, but of different seeds (one diverged)
                    row["measured"] = f"no seed has a usable run in all {design} cells yet"
                    row["verdict"] = "cannot judge"
                    rows.append(row)
                    continue
                effects = factor_effects(runs, study.metric, study.higher_is_better)
                winners = [f"{e['factor']}: {e['winner']}" for e in effects if e["winner"]]
                row["measured"] = ("; ".join(winners) or "no factor beyond seed noise") + (
                    f" (over the {counted(len(seeds), 'seed')} every cell has)"
                )
                expected = dict(claim.winners)
                judged = [e for e in effects if e["factor"] in expected]
                if judged:
                    agree = sum(e["winner"] == expected[e["factor"]] for e in judged)
                    noise = sum(e["winner"] is None for e in judged)
                    row["verdict"] = f"agrees on {agree} of {len(judged)} factors" + (
                        f" ({noise} within noise)" if noise else ""
                    )
                else:
                    row["verdict"] = "ours only: the report's levels are not recorded here"
                rows.append(row)
                continue
            first, second = values[claim.other], values[claim.variant]
            difference = mean(second) - mean(first)
            low, high = difference_interval(first, second)
            test = judge(first, second, alpha)
            direction = _direction(difference, study.higher_is_better)
            row.update(
                {
                    "difference": difference,
                    "diff_low": low,
                    "diff_high": high,
                    "p_value": test["p_value"],
                    # one planned comparison: the difference it finds 4 times in 5 at alpha
                    "detectable": detectable_difference(first, second, alpha),
                }
            )
            if test["verdict"] == "cannot judge":
                row["measured"], row["verdict"] = "fewer than 2 runs on a side", "cannot judge"
            elif test["verdict"] == "within noise":
                row["measured"] = f"{claim.variant} and {claim.other} within seed noise"
                row["verdict"] = "within noise"
                if claim.expects == "the same":
                    margin = SAME_MARGIN["bleu" if "bleu" in study.metric else "loss"]
                    if -margin < low and high < margin:
                        row["verdict"] = "agrees"
                    else:  # no difference found, but none ruled out either
                        row["measured"] += (
                            f"; its interval {low:+.3g} to {high:+.3g} is wider than ±{margin:g}: "
                            "too few seeds to call them the same"
                        )
            else:
                row["measured"] = f"{claim.variant} {direction} than {claim.other}"
                agree = claim.expects == direction
                row["verdict"] = "agrees" if agree else "disagrees"
            rows.append(row)
        if not found:
            rows.append(
                {
                    "claim": claim.says,
                    "measured": f"no stored study: run -p study {claim.study}",
                    "verdict": "not stored",
                }
            )
    return rows


# The ablation base's two choices, each (what was chosen, the base cell, the other cell), as
# scripts/validation_reread.py trained them again with validation BLEU (results/ablation-valid/).
BASE_CHOICES = (
    ("token vectors at rms 1, on the rotary base", "rope, by init", "rope, rms 1"),
    ("ALiBi instead of rotary positions", "rope, by init", "alibi"),
)


def choices_on_splits(
    records: Iterable[dict[str, Any]], choices: Sequence[tuple[str, str, str]] = BASE_CHOICES
) -> list[dict[str, Any]]:
    """Each choice read on the validation split (where a choice is made) and on the test split
    (where it is reported): per split, ``<split> base`` and ``<split> other`` (mean BLEU of each
    cell), ``<split> difference`` (other minus base) with Welch's 95% interval ``<split> low`` /
    ``<split> high`` and its ``<split> p``; ``n`` runs a cell. Records are keyed by their variant
    label, whatever study trained them."""
    records = list(records)
    rows = []
    for choice, base, other in choices:
        row: dict[str, Any] = {"choice": choice, "base": base, "other": other}
        for split in ("valid", "test"):
            values = variant_values(records, f"{split}_bleu")
            first, second = values.get(base, []), values.get(other, [])
            row["n"] = min(len(first), len(second))
            if row["n"] < 2:
                raise ValueError(f"{choice}: {base!r} and {other!r} need 2 runs each with {split}")
            test = welch_test(first, second)
            row |= {
                f"{split} base": mean(first), f"{split} other": mean(second),
                f"{split} difference": test["difference"], f"{split} low": test["low"],
                f"{split} high": test["high"], f"{split} p": test["p_value"],
            }  # fmt: skip
        rows.append(row)
    return rows
