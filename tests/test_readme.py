"""The README is short, and every result it shows is the stored record's, at the precision shown."""

import re
from pathlib import Path

import pytest
from conftest import load_script

from annotated_transformer.results.experiments import ResultsStore
from annotated_transformer.results.probes import CPU_RUNS, PROBES_DIRECTORY, read_cpu_run

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# the README's row -> (task, metric, where it ran, whether it is the task's CPU run
# (probes.CPU_RUNS) rather than its newest reference record)
ROWS = {
    "Tiny Shakespeare (characters)": ("tinyshakespeare", "valid_loss", "Xeon", False),
    "Multi30k de→en": ("multi30k", "test_bleu_beam", "Xeon", False),
    "Penn Treebank (words)": ("ptb", "test_perplexity", "Xeon", False),
    "WikiText-2 (words)": ("wikitext-2", "test_perplexity", "H100", False),
    "WikiText-2, on the CPU": ("wikitext-2", "test_perplexity", "Xeon", True),
    "Chinese→English (cmn-eng)": ("cmn-eng", "test_bleu_beam", "H100", False),
    "Chinese→English, on the CPU": ("cmn-eng", "test_bleu_beam", "Xeon", True),
}


def table_rows() -> dict[str, list[str]]:
    section = README.split("## What the course measured", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # past the head
    return {
        cells[0]: cells[1:]
        for cells in ([c.strip() for c in r.strip("|").split("|")] for r in rows)
    }


def test_the_readme_is_short():
    words = len(README.split())
    assert words <= 1500, f"the README has {words} words; the reference lives in book/"


@pytest.mark.parametrize("row", ROWS)
def test_each_headline_result_is_the_stored_reference_record(row):
    task, metric, where, cpu = ROWS[row]
    shown, ran = table_rows()[row][:2]
    if cpu:
        record = read_cpu_run(ROOT, task)
        assert record["config"]["task"] == task
    else:
        record = ResultsStore(ROOT / "results").find(task=task, profile="reference")[0]
    number = re.search(r"\d+\.\d+", shown).group(0)  # the first number: the result
    digits = len(number.split(".")[1])
    assert float(number) == round(record["metrics"][metric], digits)
    assert where in record["provenance"]["device"] and where in ran
    minutes = re.search(r"([\d.]+) min", ran).group(1)
    places = len(minutes.split(".")[1]) if "." in minutes else 0
    assert float(minutes) == round(record["provenance"]["wall_time_s"] / 60, places)


def test_the_table_covers_every_reference_task():
    assert set(table_rows()) == set(ROWS)


def test_the_command_line_pages_tiny_shakespeare_reference_row_is_the_stored_record():
    """book/command_line.md's reference Tiny Shakespeare row: its minutes, best evaluation (and its
    update) and averaged loss, at the precision shown, are the newest reference record's."""
    page = (ROOT / "book" / "command_line.md").read_text(encoding="utf-8")
    row = next(
        line
        for line in page.splitlines()
        if line.startswith("| `train --task tinyshakespeare --profile reference`")
    )
    record = ResultsStore(ROOT / "results").find(task="tinyshakespeare", profile="reference")[0]
    metrics = record["metrics"]
    minutes = int(re.search(r"\| (\d+) min", row).group(1))
    assert minutes == round(record["provenance"]["wall_time_s"] / 60)
    best, step = re.search(r"best evaluation (\d\.\d{3}) \(update (\d+)\)", row).groups()
    assert float(best) == round(metrics["best_valid_loss"], 3)
    assert int(step) == metrics["best_step"]
    averaged = re.search(r"last four evaluations' weights, (\d\.\d{3})", row).group(1)
    assert len(metrics["averaging_averaged_steps"]) == 4  # "its last four evaluations"
    assert float(averaged) == round(metrics["averaging_valid_loss_averaged"], 3)


# a task whose command-line reference row is its CPU run: (its metric, the words before the CPU
# run's number, the words before the GPU run's number, the digits shown)
CPU_ROWS = {
    "wikitext-2": ("test_perplexity", "perplexity ", "reached ", 1),
    "cmn-eng": ("test_bleu_beam", "sacreBLEU ", "scored ", 2),
}


@pytest.mark.parametrize("task", CPU_ROWS)
def test_the_command_line_pages_reference_row_is_the_cpu_run_and_the_profile(task):
    """book/command_line.md's reference row of a task that ran on a GPU first: the cosine it names
    is the profile's, and its minutes and result are the CPU run's (stored beside the probes,
    probes.CPU_RUNS), the GPU run's result the newest reference record's."""
    from annotated_transformer.tasks.profiles import TRAINING

    metric, cpu_words, gpu_words, digits = CPU_ROWS[task]
    page = (ROOT / "book" / "command_line.md").read_text(encoding="utf-8")
    row = next(
        line
        for line in page.splitlines()
        if line.startswith(f"| `train --task {task} --profile reference`")
    )
    steps = TRAINING["reference"][task]["train"]["max_steps"]
    assert f"cosine to {steps})" in row
    assert f"`{(PROBES_DIRECTORY / CPU_RUNS[task]).as_posix()}`" in row
    cpu = read_cpu_run(ROOT, task)
    assert cpu["config"]["train"]["max_steps"] == steps
    assert "CPU" in cpu["provenance"]["device"]
    minutes = int(re.search(r"\| (\d+) min", row).group(1))
    assert minutes == round(cpu["provenance"]["wall_time_s"] / 60)
    number = rf"(\d+\.\d{{{digits}}})"
    shown = float(re.search(cpu_words + number, row).group(1))
    assert shown == round(cpu["metrics"][metric], digits)
    gpu = ResultsStore(ROOT / "results").find(task=task, profile="reference")[0]
    assert "CPU" not in gpu["provenance"]["device"]
    gpu_shown = float(re.search(gpu_words + number, row).group(1))
    assert gpu_shown == round(gpu["metrics"][metric], digits)
    # the GPU column: its planned updates, where it stopped early if it did, and its minutes
    assert f"{gpu['config']['train']['max_steps']} " in row.split("|")[-2]
    stopped = re.search(r"stopped early at (\d+)", row)
    trained = gpu["history"][-1]["step"]
    assert (int(stopped.group(1)) if stopped else gpu["config"]["train"]["max_steps"]) == trained
    gpu_minutes = float(re.search(r"([\d.]+) min \(H100", row).group(1))
    assert gpu_minutes == round(gpu["provenance"]["wall_time_s"] / 60, 1)
    if metric == "test_bleu_beam":  # a translator's row also gives greedy BLEU and chrF
        greedy = float(re.search(r"greedy (\d+\.\d\d)", row).group(1))
        assert greedy == round(cpu["metrics"]["test_bleu_greedy"], 2)
        chrf = float(re.search(r"chrF (\d+\.\d)", row).group(1))
        assert chrf == round(cpu["metrics"]["test_chrf_beam"], 1)


def test_every_probe_the_command_line_page_names_is_defined():
    """A `reference_probes.py TASK NAME ...` command on book/command_line.md names probes that
    scripts/reference_probes.py defines for that task (a renamed probe would fail the reader)."""
    probes = load_script("reference_probes").PROBES
    page = (ROOT / "book" / "command_line.md").read_text(encoding="utf-8")
    text = " ".join(page.split())  # commands wrapped across lines
    commands = re.findall(
        r"scripts/reference_probes\.py ([a-z0-9-]+)((?: reference-[\w.-]+)+)", text
    )
    assert commands, "the page names no probe"
    for task, names in commands:
        for name in names.split():
            assert name.rstrip(".`") in probes[task], (task, name)
