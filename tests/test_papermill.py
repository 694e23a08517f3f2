"""The experiment chapters' papermill conventions: a typed, documented parameters cell right after
the Colab cell, the same default profile everywhere, the task names users type, one seed allowed,
unknown values refused with the valid ones."""

import json
import re
from pathlib import Path

import pytest
import torch

from annotated_transformer import ablation as ab
from annotated_transformer.tasks.profiles import parse_task_list, resolve_profile

papermill_translators = pytest.importorskip("papermill.translators")

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
EXPERIMENTS = ("08_training.ipynb", "09_ablation.ipynb", "10_attention_visualisation.ipynb")


def parameters(name):
    """papermill's reading of the chapter's parameters cell (what --help-notebook prints), and
    the cell's place among the code cells."""
    notebook = json.loads((CHAPTERS / name).read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    (index,) = [
        i for i, cell in enumerate(code) if "parameters" in cell["metadata"].get("tags", [])
    ]
    source = {"source": "".join(code[index]["source"])}
    found = papermill_translators.PythonTranslator.inspect(source)
    return index, {parameter.name: parameter for parameter in found}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_parameters_cell_is_the_second_code_cell_and_every_parameter_has_a_type_and_help(name):
    index, found = parameters(name)
    assert index == 1  # after the Colab cell, as book/how_to_use.md says
    assert found
    for parameter in found.values():
        assert parameter.inferred_type_name in {"str", "int", "bool", "dict", "float"}, parameter
        assert parameter.help, parameter  # --help-notebook's one line


def test_profile_defaults_to_auto_in_both_experiment_chapters():
    for name in EXPERIMENTS[:2]:
        _, found = parameters(name)
        assert found["profile"].default == '"auto"'
        assert found["profile"].inferred_type_name == "str"


def test_auto_is_smoke_on_a_cpu_and_never_the_h100_profile_on_a_small_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for family in ("training", "ablation"):
        assert resolve_profile("auto", family)[0] == "smoke"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Tesla T4")

    class Properties:
        total_memory = 15 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: Properties)
    profile, why = resolve_profile("auto", "ablation")
    assert profile == "cpu" and "Tesla T4" in why
    assert ab.resolve_profile("auto")[0] == "cpu"  # chapter 09 asks the same function
    Properties.total_memory = 80 * 2**30
    assert resolve_profile("auto")[0] == "gpu"


def test_unknown_profiles_and_tasks_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="profile='big' is not one of: auto, smoke, cpu, gpu"):
        resolve_profile("big")
    with pytest.raises(ValueError, match="is not one of: auto, smoke, cpu, gpu, reference$"):
        resolve_profile("probe", "ablation")  # the ablation probes' records, not a profile
    with pytest.raises(ValueError, match="task='shakespear' is not one of: cmn-eng, copy"):
        parse_task_list("shakespear", "smoke")


def test_task_names_are_the_data_set_names_users_type():
    assert parse_task_list("tinyshakespeare", "smoke") == ["tinyshakespeare"]
    assert parse_task_list(" copy, shakespeare ", "cpu") == ["copy", "tinyshakespeare"]
    _, found = parameters("08_training.ipynb")
    typed = json.loads(found["tasks"].default).split(",")
    assert parse_task_list(found["tasks"].default.strip('"'), "smoke") == typed
    _, found = parameters("09_ablation.ipynb")
    assert json.loads(found["task"].default) in ab.PROFILES["smoke"]


def test_one_seed_is_a_study_whose_tables_show_numbers_without_intervals():
    assert ab.parse_seeds(1) == [0] and ab.parse_seeds("7") == [7]
    configs = ab.run_configs("heads", "multi30k", seeds=1, profile="smoke")
    assert {config["seed"] for config in configs} == {0}
    records = [
        {
            "config": {"variant": c["variant"], "factors": c["factors"], "seed": 0},
            "metrics": {"test_bleu": 10.0 + i},
        }
        for i, c in enumerate(configs)
    ]
    for row in ab.summarize(records, "test_bleu"):
        assert row["n"] == 1 and row["mean"] == pytest.approx(row["min"])
        assert row.get("verdict") in (None, "cannot judge")


def test_a_one_seed_study_shows_its_noise_without_a_spread():
    """`-p seeds 1` on a translation study used to end in StatisticsError (a mean of no stds):
    chapter 09's noise table shows the test set's bootstrap width and says a spread needs 2."""
    from annotated_transformer.book import studies as views

    configs = ab.run_configs("heads", "multi30k", seeds=1, profile="smoke")
    records = [
        {
            "config": {"variant": c["variant"], "factors": c["factors"], "seed": 0},
            "metrics": {
                "test_bleu": 10.0 + i,
                "test_bleu_low": 9.0 + i,
                "test_bleu_high": 11.0 + i,
                "test_sentences": 64,
            },
        }
        for i, c in enumerate(configs)
    ]
    table = views.noise_frame(records, "test_bleu")["BLEU"].tolist()
    assert table == ["2.00", "needs 2 seeds"]
    two = records + [
        {**r, "config": {**r["config"], "seed": 1}, "metrics": {"test_bleu": 12.0 + i}}
        for i, r in enumerate(records)
    ]
    assert views.noise_frame(two, "test_bleu")["BLEU"].tolist()[1] == "1.41"


def checking_cell(name: str) -> tuple[str, str]:
    """The parameters cell's source and that of the first code cell after it (past chapter 10's
    bertviz install), where every parameter is checked."""
    notebook = json.loads((CHAPTERS / name).read_text(encoding="utf-8"))
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    (index,) = [
        i for i, cell in enumerate(cells) if "parameters" in cell["metadata"].get("tags", [])
    ]
    following = [cell for cell in cells[index + 1 :] if "%pip" not in "".join(cell["source"])]
    return "".join(cells[index]["source"]), "".join(following[0]["source"])


BAD_PARAMETERS = [
    ("09_ablation.ipynb", {"seeds": 0}, "seeds=0 is not accepted: use at least 1"),
    ("09_ablation.ipynb", {"seeds": -1}, "seeds=-1 is not accepted"),
    ("09_ablation.ipynb", {"study": "nope"}, "study='nope' is not one of"),
    ("09_ablation.ipynb", {"task": "wmt"}, "task='wmt'"),
    ("09_ablation.ipynb", {"jobs": "0"}, "jobs=0 is not accepted"),
    ("09_ablation.ipynb", {"device": "tpu"}, "device='tpu' is not one of"),
    ("09_ablation.ipynb", {"budget_minutes": -5}, "budget_minutes=-5 is not accepted"),
    ("09_ablation.ipynb", {"overrides": {"model.d_modle": 8}}, "d_modle"),
    ("08_training.ipynb", {"seed": -1}, "seed=-1 is not accepted: use an integer >= 0"),
    ("08_training.ipynb", {"rerun": "yes"}, "rerun='yes' is not accepted: use True or False"),
    ("08_training.ipynb", {"ptb_twins": 0}, "ptb_twins=0 is not accepted: use True or False"),
    ("08_training.ipynb", {"tasks": "wmt"}, "task='wmt' is not one of"),
    ("10_attention_visualisation.ipynb", {"sentences": 0}, "sentences=0 is not accepted"),
    ("10_attention_visualisation.ipynb", {"passages": -3}, "passages=-3 is not accepted"),
    ("10_attention_visualisation.ipynb", {"use_stored": "no"}, "use_stored='no' is not accepted"),
]


@pytest.mark.parametrize(("name", "values", "message"), BAD_PARAMETERS)
def test_a_bad_parameter_stops_the_chapter_in_its_first_cell_before_any_work(name, values, message):
    """As ``papermill CHAPTER out.ipynb -p NAME VALUE`` runs it: the parameters cell, papermill's
    injected values, then the chapter's first cell, which must refuse before any work."""
    if name.startswith("10"):
        pytest.importorskip("bertviz")
    parameters_cell, first_cell = checking_cell(name)
    namespace = {"sys": __import__("sys")}
    exec(parameters_cell, namespace)  # noqa: S102 (the chapter's own code)
    namespace.update(values)
    with pytest.raises(ValueError, match=re.escape(message)):
        exec(first_cell, namespace)  # noqa: S102


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_default_parameters_pass_the_first_cell(name):
    if name.startswith("10"):
        pytest.importorskip("bertviz")
    parameters_cell, first_cell = checking_cell(name)
    namespace = {"sys": __import__("sys")}
    exec(parameters_cell, namespace)  # noqa: S102
    exec(first_cell, namespace)  # noqa: S102


ROOT = CHAPTERS.parent
TIMED_PAGES = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]


def papermill_commands(path: Path) -> list[str]:
    """Every ``papermill CHAPTER OUT ...`` command of a page that executes a chapter."""
    text = path.read_text(encoding="utf-8")
    return [
        match.group(0)
        for match in re.finditer(r"papermill chapters/\S+\.ipynb [^\s`]+\.ipynb[^`\n]*", text)
    ]


def test_every_papermill_command_of_the_readme_and_the_book_has_an_execution_timeout():
    commands = [command for page in TIMED_PAGES for command in papermill_commands(page)]
    assert len(commands) >= 8  # the README's and book/how_to_use.md's
    # and every command a chapter writes in its prose or prints for the reader to run
    in_chapters = [
        command for page in CHAPTERS.glob("*.ipynb") for command in papermill_commands(page)
    ]
    assert len(in_chapters) >= 7  # chapters 08 and 09
    missing = [c for c in commands + in_chapters if "--execution-timeout" not in c]
    assert missing == []
