"""Ablation studies (chapter 09): which design choices matter, measured over seeds.

A *study* changes one *factor* of a base model over its *levels* and keeps everything else fixed
(heads, depth, dropout, ...; ``table3``: every row of Vaswani et al.'s Table 3 that a config
expresses), or crosses several factors in a full factorial design (``factorial``: positional
encoding × norm × schedule × label smoothing, 2×2×2×2 = 16 cells; ``norm_and_position``: 2×2). Each level is a set
of *overrides* of the configs, addressed as ``"model.<TransformerConfig field>"``,
``"train.<TrainConfig field>"``, ``"data.<task option>"`` or ``"evaluation.<option>"``.

The pieces:

- :data:`STUDIES` (``study_names()``, :func:`get_study`) and :data:`PROFILES` (``smoke``: seconds
  per run on a CPU, what CI runs; ``cpu``: a real study on a 2-core CPU in about half an hour;
  ``gpu``: a minute or two per run on one GPU, several runs at once);
- :func:`run_configs` turns (study, task, seeds, profile, overrides) into one JSON-safe config per
  run; :func:`run_study` loads the stored ones and trains the missing ones, several at once in
  worker processes if asked (each saves its own record atomically, so an interrupted study
  resumes where it stopped);
- :func:`train_run` trains one config: an encoder-decoder, a decoder-only *prefix LM* or an
  encoder-only model on translation (test loss and greedy test BLEU), a causal or bidirectional
  model on a character LM (validation loss, bits per character, and the last-position loss);
- pure analysis of records: :func:`summarize` (mean, std, 95% t interval, min, max),
  :func:`rank`, :func:`welch_test` and :func:`judge` (is a difference beyond seed noise?),
  :func:`holm` (the p-values of a study's several comparisons adjusted together; every verdict
  is on the adjusted values), :func:`main_effects`, :func:`interaction`,
  :func:`factorial_effects` (main effects and two-way interactions with intervals and tests),
  :func:`curves`, and :func:`vaswani_comparison`, which states for each trend of Vaswani et al.
  2017, Table 3, whether our runs agree (:func:`table3_coverage`: which rows run, and why not);
- the stored studies as the chapter leads with them: :func:`stored_studies` (grouped by task,
  study and profile), :func:`verdict_table` (Holm-corrected verdicts, effects with 95%
  intervals, and what a run of each variant cost: :func:`variant_costs`),
  :func:`trivial_baseline` (the bigram, or the copied source) and
  :func:`check_claims` (the source reports' claims, measured).

One file per step, each importable on its own::

    studies.py     the studies, their factors and levels, which tasks they apply to
    configs.py     the profiles (smoke / cpu / gpu), overrides, one config per variant and seed
    runs.py        training and measuring one run (prefix LM and encoder-only translation too)
    runner.py      run_study: stored runs loaded, missing ones trained, several at once
    statistics.py  summaries, t intervals, Welch's test, Holm, main effects, interactions, curves
    vaswani.py     Table 3 of the paper and the computed comparison with our trends
    report.py      the provenance line of every table, and the tables written as files
    verdicts.py    the stored studies: verdicts, trivial baselines, the source reports' claims
"""

from __future__ import annotations

from .configs import (  # noqa: F401
    BASE,
    EVALUATION_OPTIONS,
    PROFILES,
    TASK_OPTIONS,
    accepted_fields,
    baseline_variant,
    build_configs,
    parse_overrides,
    parse_seeds,
    run_configs,
    task_fields,
)
from .report import (  # noqa: F401
    describe,
    save_tables,
)
from .runner import (  # noqa: F401
    check_parameters,
    default_store,
    resolve_jobs,
    resolve_profile,
    run_study,
)
from .runs import (  # noqa: F401
    SAVES_PER_RUN,
    PrefixSource,
    RunFolderError,
    last_position_loss,
    load_task,
    prefix_lm_batch,
    run_folder,
    train_run,
)
from .statistics import (  # noqa: F401
    POWER,
    SAME_RUNS,
    baseline_twins,
    curves,
    default_metric,
    detectable_difference,
    factorial_effects,
    holm,
    holm_verdicts,
    interaction,
    is_usable,
    judge,
    main_effects,
    rank,
    standardized_detectable,
    summarize,
    usable_runs,
    variant_values,
    welch_test,
)
from .studies import (  # noqa: F401
    PLAN,
    PLAN_SEEDS,
    PLANNED_SEEDS,
    PROFILE_CHOICES,
    RUNNER_FIELDS,
    SECTIONS,
    STUDIES,
    TABLE3_LEVELS,
    TASK_FIELDS,
    TASKS,
    Factor,
    Scale,
    Study,
    Variant,
    applicability,
    get_study,
    has_follow_up,
    plan_seeds,
    study_names,
    task_kind,
)
from .vaswani import (  # noqa: F401
    PAPER_TOLERANCE,
    TABLE3_NOT_RUN,
    TRENDS,
    VASWANI_TABLE3,
    Trend,
    paper_direction,
    table3_coverage,
    vaswani_comparison,
)
from .verdicts import (  # noqa: F401
    BASE_CHOICES,
    CLAIMS,
    FACTORIAL_REPORT,
    FACTORIAL_REPORT_INTERACTION,
    PROFILE_ORDER,
    SAME_MARGIN,
    SEED_CHOICES,
    TRIVIAL_MARGIN,
    Claim,
    StoredStudy,
    TrivialBaseline,
    at_trivial_level,
    balanced_runs,
    check_claims,
    choices_on_splits,
    counted,
    difference_interval,
    factor_effects,
    factorial_against_report,
    factorial_cells,
    measures_nothing,
    overview,
    plan_progress,
    probe_table,
    seed_spread,
    stored_studies,
    trivial_baseline,
    variant_costs,
    verdict_table,
)
