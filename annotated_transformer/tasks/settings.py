"""Settings: ``section.key=value`` overrides routed to the model, the training run and the task.

One router for every way a run is configured: the command line's ``--config`` file and ``--set
KEY=VALUE``, and the chapters' papermill ``overrides`` (chapter 09). A key is a field name,
optionally qualified by its section (``model.d_model``, ``train.lr``, ``data.context_length``,
``evaluation.test_sentences``); a bare name must belong to exactly one section. Unknown keys are
refused with the list of accepted ones (and the closest names).

Values given as text (``--set``) are read as JSON (``1e-3``, ``true``, ``null``, ``[0.9, 0.98]``),
``True``/``False``/``None`` as Python spells them, and otherwise as text. ``none`` is the text
``"none"`` for a field whose default is text (``positional=none``: no positional encoding), else
``None`` (``max_train_pairs=none``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

Fields = Mapping[str, Mapping[str, Any]]  # section -> field name -> default
_WORDS = {"true": True, "false": False, "none": None, "null": None}


def dataclass_defaults(cls: type, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """Field name -> default value of a dataclass (``None`` where it has none)."""
    defaults = {}
    for item in dataclasses.fields(cls):
        if item.name in exclude:
            continue
        if item.default is not dataclasses.MISSING:
            defaults[item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:
            defaults[item.name] = item.default_factory()
        else:
            defaults[item.name] = None
    return defaults


def describe_fields(cls: type, choices: Mapping[str, Iterable[str]] | None = None) -> list[str]:
    """One line per field of dataclass ``cls``: name, type, default and, from ``choices`` (field
    -> names), the accepted values: ``"norm_position  str  default "post"  one of: post, pre"``."""
    choices = choices or {}
    defaults = dataclass_defaults(cls)
    fields = dataclasses.fields(cls)
    width = max(len(item.name) for item in fields)
    type_width = max(len(str(item.type)) for item in fields)
    lines = []
    for item in fields:
        line = f"{item.name:<{width}}  {item.type!s:<{type_width}}  default {json.dumps(defaults[item.name])}"
        if item.name in choices:
            line += f"  one of: {', '.join(choices[item.name])}"
        lines.append(line)
    return lines


def parse_value(text: str, default: Any = None) -> Any:
    """A value written as text: JSON when it parses, True/False/None words, else the text.

    ``default`` is the field's default: ``none`` stays text where the field holds text."""
    word = text.strip()
    if word.lower() == "none" and isinstance(default, str):
        return word.lower()
    if word.lower() in _WORDS:
        return _WORDS[word.lower()]
    try:
        return json.loads(word)
    except json.JSONDecodeError:
        return word


def parse_assignment(text: str) -> tuple[str, str]:
    """``"train.lr=1e-3"`` -> ``("train.lr", "1e-3")``."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise ValueError(f"--set {text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def route(items: Iterable[tuple[str, Any]], fields: Fields) -> dict[str, dict[str, Any]]:
    """Route ``(key, value)`` pairs to their sections: ``{section: {field: value}}``.

    A value that is text is read by :func:`parse_value` with the field's default; other values
    (a config file's, papermill's) are taken as they are.
    """
    sections = tuple(fields)
    routed: dict[str, dict[str, Any]] = {section: {} for section in sections}
    for key, value in items:
        section, name = resolve_key(str(key), fields)
        if isinstance(value, str):
            value = parse_value(value, fields[section][name])
        routed[section][name] = value
    return routed


def resolve_key(key: str, fields: Fields) -> tuple[str, str]:
    """``(section, field)`` of ``key``, or a ``ValueError`` that says what is accepted."""
    sections = tuple(fields)
    section, _, name = key.rpartition(".")
    if section and section not in fields:
        raise ValueError(
            f"setting {key!r}: the section {section!r} is not one of: {', '.join(sections)}"
        )
    if section:
        if name not in fields[section]:
            raise ValueError(
                f"setting {key!r}: {name!r} is not a {section} field{_hint(name, fields[section])};"
                f" accepted: {', '.join(sorted(fields[section]))}"
            )
        return section, name
    owners = [owner for owner in sections if name in fields[owner]]
    if len(owners) > 1:
        raise ValueError(
            f"setting {key!r} is ambiguous: write {' or '.join(f'{s}.{name}' for s in owners)}"
        )
    if not owners:
        known = sorted({field for names in fields.values() for field in names})
        accepted = "; ".join(f"{s}: {', '.join(sorted(fields[s]))}" for s in sections)
        raise ValueError(
            f"unknown setting {key!r} (no section has it){_hint(name, known)}; accepted: {accepted}"
        )
    return owners[0], name


def _hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def flatten(settings: Mapping[str, Any], sections: Iterable[str]) -> list[tuple[str, Any]]:
    """A config file's mapping (flat, or with section sub-mappings) as ``(key, value)`` pairs;
    ``task`` (which names the task, not a setting) is left out."""
    sections = tuple(sections)
    pairs = []
    for key, value in settings.items():
        if key in sections and isinstance(value, Mapping):
            pairs += [(f"{key}.{name}", inner) for name, inner in value.items()]
        elif key != "task":
            pairs.append((key, value))
    return pairs


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A JSON or YAML (``.yaml``, ``.yml``; needs PyYAML) file of settings, as a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"--config {path} is not UTF-8 text (byte {error.start + 1} is {error.object[error.start : error.start + 1]!r}): "
            f"save it as UTF-8"
        ) from error
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as error:
            raise ValueError(
                f"--config {path}: reading YAML needs PyYAML (pip install pyyaml)"
            ) from error
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"--config {path} is not valid YAML: {error}") from error
    else:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--config {path} is not valid JSON: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"--config {path} must hold a mapping of settings")
    return values


def parse_json_object(text: Any, name: str = "overrides") -> dict[str, Any]:
    """A papermill parameter that holds a mapping: a dict, its JSON text, or empty."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{name} must be a JSON object such as "
                f'\'{{"model.d_model": 128, "train.max_steps": 500}}\', got {text!r}: {error}'
            ) from error
    if not isinstance(text, dict):
        raise ValueError(f"{name} must be a dict or a JSON object, got {type(text).__name__}")
    return text
