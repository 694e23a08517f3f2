"""The lever probes of the reference runs (chapter 08): short runs of one recipe with one change,
stored by ``scripts/reference_probes.py`` in ``results/reference/probes/``, read side by side.

A lever probe trains the reference recipe with one change on the recipe's full schedule and stops
at a fixed update (``steps``), evaluating on the validation split as the reference run did. The
table compares each at that update with the reference run's own evaluation there, and, since a
lever may save updates but cost time per update, how many updates and how many seconds each
needed to first reach the reference's value::

    probes = read_probes(ROOT / PROBES_DIRECTORY, "tinyshakespeare", 1600)
    probed = read_probed_run(ROOT, "tinyshakespeare")  # the run the probes changed
    rows = lever_rows(probes, probed["history"], seconds_per_update)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..metrics import Interval

PROBE_PREFIX = "reference-"  # the probes of one lever against the reference recipe
PROBES_DIRECTORY = Path("results") / "reference" / "probes"  # under the checkout

# Tasks whose reference record ran on a GPU, and the record of their recipe's run on the CPU within
# the 90-minute budget, stored in PROBES_DIRECTORY (its model is not shipped where the GPU run's is
# better): the run the task's target is judged on (chapter 08).
CPU_RUNS = {
    "wikitext-2": "wikitext-2-candidate-cpu-1500.json",
    "cmn-eng": "cmn-eng-candidate-cpu-2000.json",
}


def read_cpu_run(root: str | os.PathLike, task: str) -> dict[str, Any] | None:
    """The stored CPU run of ``task`` (:data:`CPU_RUNS`) in the checkout at ``root``; None where
    the task has none or its record is not there."""
    if task not in CPU_RUNS:
        return None
    path = Path(root) / PROBES_DIRECTORY / CPU_RUNS[task]
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


# The reference record whose recipe each task's lever probes changed one setting of. The probes
# are read against that run even after a newer reference run (one that adopted levers) has
# replaced it as the task's result; a task not named here has no lever probes defined.
PROBED_REFERENCE = {
    "tinyshakespeare": "tinyshakespeare-reference-seed0-b867757fff44",
    "multi30k": "multi30k-reference-seed0-b33cc107e27e",
    "ptb": "ptb-reference-seed0-98dfc4156f72",
    "cmn-eng": "cmn-eng-reference-seed0-f0f3ea770061",  # its CPU run (CPU_RUNS), not the store's
}


def read_probed_run(root: str | os.PathLike, task: str) -> dict[str, Any]:
    """The record of the run ``task``'s lever probes changed (:data:`PROBED_REFERENCE`), in the
    checkout at ``root``: from the results store or, for a task judged on its CPU run
    (:data:`CPU_RUNS`) when the store does not hold it, that run's record. ``ValueError`` naming
    the tasks with probes if ``task`` has none, or if the CPU run's file holds another run;
    ``FileNotFoundError`` naming where it looked if the record is in neither place."""
    from .experiments import ResultsStore

    if task not in PROBED_REFERENCE:
        raise ValueError(
            f"{task!r} has no lever probes; tasks with probes: {', '.join(PROBED_REFERENCE)}"
        )
    key = PROBED_REFERENCE[task]
    store = ResultsStore(Path(root) / "results")
    if task not in CPU_RUNS or store.path(key).is_file():
        return store.load(key)
    record = read_cpu_run(root, task)
    path = Path(root) / PROBES_DIRECTORY / CPU_RUNS[task]
    if record is None:
        raise FileNotFoundError(
            f"run {key}, which {task}'s probes changed, is in neither {store.path(key)} nor {path}"
        )
    if record["key"] != key:
        raise ValueError(
            f"{path} holds run {record['key']}, not {key}, the run {task}'s probes changed: "
            f"restore that file, or name its run in PROBED_REFERENCE"
        )
    return record


def read_probes(directory: str | os.PathLike, task: str, steps: int) -> dict[str, dict[str, Any]]:
    """The lever probes of ``task`` in ``directory`` that stop at update ``steps``, by lever name
    (``reference-muon-1600`` is ``muon``), in name order; probes of other kinds (sizes, or a
    schedule run to its end) are left out."""
    found = {}
    for path in sorted(Path(directory).glob(f"{task}-{PROBE_PREFIX}*-{steps}.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["steps"] == steps:
            found[record["probe"].removeprefix(PROBE_PREFIX).removesuffix(f"-{steps}")] = record
    return found


def comparison_path(
    directory: str | os.PathLike, task: str, first: str, second: str, split: str = "test"
) -> Path:
    """Where ``scripts/compare_translators.py`` stores the paired comparison of the translations of
    runs ``first`` and ``second`` of ``task`` on ``split``: the test split's file names no split,
    another split's ends ``-<split>.json``, so that neither replaces the other."""
    suffix = "" if split == "test" else f"-{split}"
    return Path(directory) / f"{task}-translators-{first}-{second}{suffix}.json"


def read_comparison(
    directory: str | os.PathLike, task: str, first: str, second: str, split: str = "test"
) -> dict[str, Any]:
    """The stored paired comparison of runs ``first`` and ``second`` (:func:`comparison_path`),
    checked to be of that split with the two systems in that order (its ``difference`` is second
    minus first); ``ValueError`` if it is not."""
    path = comparison_path(directory, task, first, second, split)
    record = json.loads(path.read_text(encoding="utf-8"))
    systems = [system["record"] for system in record["systems"]]
    if record["split"] != split or systems != [first, second]:
        raise ValueError(
            f"{path} compares {systems} on {record['split']!r}, not [{first!r}, {second!r}] on "
            f"{split!r}: run scripts/compare_translators.py again for these two runs"
        )
    return record


def probe_bleu_difference(
    probe: dict[str, Any],
    shipped: dict[str, Any],
    references: Sequence[str],
    averaged: bool = False,
    resamples: int = 1000,
    against: str | None = None,
) -> Interval:
    """A translation probe's validation BLEU minus that of a system of a stored comparison (the
    shipped model, or the run named by ``against``), paired over the sentences
    (``metrics.bleu_difference``, no decoding): ``probe`` is its stored record (its
    ``valid_bleu`` translations, or with ``averaged`` those of the mean of its kept evaluations'
    weights), ``shipped`` a stored comparison on the validation split whose first system is the
    shipped model (``read_comparison(..., split="valid")``), ``references`` the split's. With
    ``against`` (a record key), the probe is set against that system of the comparison instead:
    a task judged on its CPU run (:data:`CPU_RUNS`) is probed against that run. A probe that
    decoded another number of sentences, or either record of another split, is refused."""
    from ..metrics import bleu_difference

    decoded = (probe["averaged"] if averaged else probe)["valid_bleu"]
    if decoded["split"] != "valid" or shipped["split"] != "valid":
        raise ValueError("a probe is read against another system on the validation split only")
    baseline = shipped["systems"][0]["translations"]
    if against is not None:
        systems = {system["record"]: system["translations"] for system in shipped["systems"]}
        if against not in systems:
            raise ValueError(
                f"the comparison holds {', '.join(systems)}, not {against!r}: compare that "
                f"run's translations first (scripts/compare_translators.py --split valid)"
            )
        baseline = systems[against]
    system = decoded["translations"]
    if not len(system) == len(baseline) == len(references):
        raise ValueError(
            f"probe {probe['probe']!r} decoded {len(system)} sentences, "
            f"{against or 'the shipped model'} {len(baseline)}, the split has "
            f"{len(references)}: pair them on the same sentences"
        )
    return bleu_difference(baseline, system, references, resamples=resamples)


def evaluations(history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(update, validation loss)`` of every evaluation in a run's history, in order."""
    return [(row["step"], row["eval_loss"]) for row in history if "eval_loss" in row]


def first_reaching(history: list[dict[str, Any]], level: float) -> int | None:
    """The update of the first evaluation at or below ``level``; None if none is."""
    return next((step for step, loss in evaluations(history) if loss <= level), None)


def seconds_per_update(history: list[dict[str, Any]], start: int, end: int) -> float:
    """A run's pace from update ``start`` to ``end``: the wall time its history logged at the two
    updates, over the updates between them. Read past the first updates, which include start-up
    work. ``ValueError`` naming the logged updates if either is not one of them."""
    walls = {row["step"]: row["wall_time"] for row in history if "wall_time" in row}
    missing = [step for step in (start, end) if step not in walls]
    if missing or end <= start:
        raise ValueError(
            f"pace from update {start} to {end}: needs two logged updates, the first earlier; "
            f"logged: {', '.join(map(str, sorted(walls)))}"
        )
    return (walls[end] - walls[start]) / (end - start)


def lever_rows(
    probes: dict[str, dict[str, Any]],
    reference: list[dict[str, Any]],
    seconds_per_update: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """One row per lever, and one for the reference run first, at the probes' common update.

    ``reference``: the reference run's history; ``seconds_per_update``: measured times by lever
    name (``"reference"`` for the recipe itself), or None. Each row: ``loss`` (the validation
    loss at that update), ``minus_reference`` (negative: better), ``updates_to_reference`` (the
    first evaluation at or below the reference's loss at that update), and with times,
    ``seconds_per_update`` and ``minutes_to_reference``.

    Raises:
        ValueError: probes that stop at different updates, or a reference without an evaluation
            at theirs.
    """
    stops = {record["steps"] for record in probes.values()}
    if len(stops) != 1:
        raise ValueError(f"the probes stop at different updates ({sorted(stops)}): compare alike")
    (stop,) = stops
    at_stop = dict(evaluations(reference)).get(stop)
    if at_stop is None:
        raise ValueError(f"the reference run has no evaluation at update {stop}")
    times = seconds_per_update or {}
    rows = {}
    for lever, history in [("reference", reference)] + [
        (lever, record["history"]) for lever, record in probes.items()
    ]:
        loss = dict(evaluations(history))[stop]
        reached = first_reaching(history, at_stop)
        row = {
            "loss": loss,
            "minus_reference": loss - at_stop,
            "updates_to_reference": reached,
        }
        if lever in times:
            row["seconds_per_update"] = times[lever]
            row["minutes_to_reference"] = None if reached is None else reached * times[lever] / 60
        rows[lever] = row
    return rows
