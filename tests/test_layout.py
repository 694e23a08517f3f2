"""The package's layout is the course's table of contents: the concepts at the top, the machinery
in wings, no cycle between them, and nothing stored that names a module path."""

from __future__ import annotations

import ast
import graphlib
import json
from pathlib import Path

import pytest
import torch

import annotated_transformer as at

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "annotated_transformer"

# What a chapter derives: one module each, at the top level.
CONCEPTS = {
    "attention", "masking", "positional", "norms", "layers", "config", "model", "optim",
    "losses", "decode", "metrics", "cost", "attention_maps", "extrapolation", "minimal",
}  # fmt: skip
WINGS = {"data", "tasks", "training", "results", "ablation", "book"}
# The wings in the order they may import each other: a wing imports only wings before it.
WING_ORDER = ["data", "tasks", "training", "results", "ablation"]
# The concepts the model is built from import no wing but data; the two experiment modules of
# chapters 03 and 10 (they train or read stored runs) may use the wings.
EXPERIMENT_CONCEPTS = {"attention_maps", "extrapolation"}


def imported_modules(path: Path) -> set[str]:
    """Every module of the package that ``path`` imports, at any depth of its code, dotted."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names] if not node.module else []
            found.update(name for name in [target, *names] if name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def room(module: str) -> str | None:
    """The room a dotted module stands in: a concept's own name, a wing's name, else None."""
    parts = module.split(".")
    if parts[0] != "annotated_transformer" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in WINGS | CONCEPTS | {"__main__"} else None


def package_graph() -> dict[str, set[str]]:
    """Room -> the rooms it imports (a wing's inner imports dropped)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = room(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if source is None:
            continue
        targets = {room(name) for name in imported_modules(path)} - {None, source}
        graph.setdefault(source, set()).update(targets)
    return graph


def test_the_top_level_holds_the_concepts_and_the_wings_only():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert modules == CONCEPTS
    assert folders == WINGS
    strays = [p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert sorted(strays) == sorted(WINGS)  # no folder that is not a wing


def test_no_cycle_between_the_concepts_and_the_wings():
    graph = package_graph()
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError
    assert set(order) >= WINGS | CONCEPTS


def test_a_wing_imports_only_the_wings_before_it():
    graph = package_graph()
    for index, wing in enumerate(WING_ORDER):
        later = set(WING_ORDER[index + 1 :]) | {"book"}
        assert not graph[wing] & later, f"{wing} imports {sorted(graph[wing] & later)}"
        assert not graph[wing] & EXPERIMENT_CONCEPTS, wing
    assert graph["book"] <= CONCEPTS, graph["book"]  # the diagrams draw concepts only


def test_the_model_concepts_import_no_wing_but_data():
    graph = package_graph()
    for concept in CONCEPTS - EXPERIMENT_CONCEPTS:
        assert graph.get(concept, set()) <= CONCEPTS | {"data"}, (concept, graph[concept])


def test_the_package_imports_nothing_from_scripts_or_benchmarks():
    for path in PACKAGE.rglob("*.py"):
        roots = {name.split(".")[0] for name in imported_modules(path)}
        assert not roots & {"scripts", "benchmarks", "tests", "conftest"}, path


def test_the_graph_reader_sees_a_cycle_it_is_shown():
    """The cycle check can fail: a wing that imported a later one would be refused."""
    graph = package_graph()
    graph["data"] = graph["data"] | {"training"}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


@pytest.mark.parametrize(
    "old, new",
    [
        ("trainer", "training.trainer"),
        ("checkpoint", "training.checkpoint"),
        ("experiments", "results.experiments"),
        ("pretrained", "results.pretrained"),
        ("profiles", "tasks.profiles"),
        ("task_options", "tasks.task_options"),
        ("colab", "book.colab"),
    ],
)
def test_the_old_top_level_module_names_still_reach_their_modules(old, new):
    import importlib

    assert getattr(at, old) is importlib.import_module(f"annotated_transformer.{new}")
    namespace: dict = {}
    exec(f"from annotated_transformer import {old}", namespace)  # the form the chapters used
    assert namespace[old] is importlib.import_module(f"annotated_transformer.{new}")


def test_the_public_names_are_where_they_were():
    for name in at.__all__:
        assert getattr(at, name) is not None, name
    assert at.Trainer.__module__ == "annotated_transformer.training.trainer"
    assert at.tasks.build_task is at.tasks.build.build_task  # the old module's entry points
    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        at.not_a_module  # noqa: B018


def test_no_stored_artefact_names_a_module_path():
    """Records and shipped models are JSON and safetensors. (A checkpoint pickles only plain
    data: tests/training/test_checkpoint.py loads one with ``weights_only=True``.)"""
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "results").rglob("*.json")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "models").glob("*/config.json")]
    assert len(texts) > 100
    for text in texts:
        json.loads(text)
        assert "annotated_transformer." not in text


def test_every_stored_artefact_loads(tmp_path):
    from annotated_transformer.results.experiments import ResultsStore
    from annotated_transformer.results.pretrained import load_pretrained

    stores = [ROOT / "results", ROOT / "results" / "ablation"]  # the record stores
    records = [record for folder in stores for record in ResultsStore(folder).records()]
    assert len(records) > 400 and all(r["config"] and "metrics" in r for r in records)
    shipped = sorted(p.parent for p in (ROOT / "models").glob("*/config.json"))
    assert len(shipped) == 5
    for folder in shipped:
        loaded = load_pretrained(folder)
        assert isinstance(loaded.model, torch.nn.Module) and loaded.tokenizer is not None, folder


# ---------------------------------------------------------------------------------------------
# Windows: explicit UTF-8, no POSIX-only module

TEXT_CALLS = {"open", "read_text", "write_text", "TextIOWrapper", "fdopen"}
POSIX_ONLY = {"fcntl", "resource", "pwd", "grp", "termios", "tty", "pty", "posix"}


def text_calls_without_encoding(path: Path) -> list[str]:
    """Each call of ``path`` that opens a file as text with the locale's codec (cp1252 on
    Windows): no ``encoding=``, and no binary mode."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        if name not in TEXT_CALLS or any(word.arg == "encoding" for word in node.keywords):
            continue
        if isinstance(node.func, ast.Attribute) and ast.unparse(node.func) == "os.open":
            continue  # a descriptor, no codec
        modes = [arg for arg in node.args if isinstance(arg, ast.Constant)]
        modes += [word.value for word in node.keywords if word.arg == "mode"]
        if any(isinstance(mode, ast.Constant) and "b" in str(mode.value) for mode in modes):
            continue
        positional = {"read_text": 1, "write_text": 2}.get(name)  # encoding given positionally
        if positional is not None and len(node.args) >= positional:
            continue
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        found.append(f"{where}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_text_file_the_package_opens_names_its_encoding():
    found = [
        line for path in sorted(PACKAGE.rglob("*.py")) for line in text_calls_without_encoding(path)
    ]
    assert found == []


def test_the_encoding_check_sees_a_call_without_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "open('a')\nopen('a', 'rb')\nPath('a').read_text()\nPath('a').write_text('x', 'utf-8')\n",
        encoding="utf-8",
    )
    assert [line.split(": ", 1)[1] for line in text_calls_without_encoding(sample)] == [
        "open('a')",
        "Path('a').read_text()",
    ]


def test_no_posix_only_module_is_imported_by_the_package():
    imported = {
        (path.relative_to(ROOT).as_posix(), alias.name.split(".")[0])
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert {(path, name) for path, name in imported if name in POSIX_ONLY} == set()
