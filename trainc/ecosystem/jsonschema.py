"""``trainc schema``: the JSON Schema (draft 2020-12) of a spec file, generated from the schema
dataclasses in :mod:`trainc.schemas` (types, enums, defaults, descriptions from the field
docstrings), never hand-written.

The schema describes what the loader accepts in one YAML file: every section is closed
(``additionalProperties: false``; ``launch.env`` is a free mapping), types follow
:mod:`trainc.compiler.load.schema_check` (a ``str`` key also takes numbers, a ``float`` key takes
integers). Required keys are enforced only for a file without a Hydra ``defaults:`` list: with one,
presets may supply them and ``trainc lint`` checks the composed result.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import itertools
import json
import textwrap
import types
import typing
from functools import cache
from typing import Any

from trainc.compiler.load import GROUPS, MAP_KEYS, field_types, preset_names
from trainc.schemas import TrainSpec

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_SCALAR = ["string", "number", "boolean"]


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring written under it in the class body (read with :mod:`ast`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return out


def _split_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def type_schema(tp: Any, *, free_map: bool = False) -> dict[str, Any]:
    """JSON Schema of one field type (``free_map``: a mapping of names to scalars)."""
    base, optional = _split_optional(tp)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        names: list[Any] = [m.value for m in base]
        return {"enum": [*names, None] if optional else names}
    if base is bool:
        types_: list[str] = ["boolean"]
    elif base is int:
        types_ = ["integer"]
    elif base is float:
        types_ = ["number"]
    elif base is str:
        types_ = ["string"]  # an unquoted number there is TRC007: quote it
    elif typing.get_origin(base) is list:
        out: dict[str, Any] = {
            "type": ["array", "null"] if optional else "array",
            "items": {"type": "string"},
        }
        return out
    elif typing.get_origin(base) is dict or free_map:
        return {
            "type": ["object", "null"] if optional else "object",
            "additionalProperties": {"type": _SCALAR},
        }
    else:
        raise AssertionError(f"no JSON Schema for {tp!r}")
    if optional:
        types_.append("null")
    return {"type": types_[0] if len(types_) == 1 else types_}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return dataclasses.MISSING
    if dataclasses.is_dataclass(value):
        return dataclasses.MISSING
    return value.name if isinstance(value, enum.Enum) else value


def _section(cls: type, prefix: str, defs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema of ``cls`` as a closed object, the required-keys overlay for explicit specs)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    nested: dict[str, Any] = {}
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        tp = field_types(cls)[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            name = tp.__name__
            sub, sub_req = _section(tp, f"{prefix}{f.name}.", defs)
            defs[name] = sub
            prop: dict[str, Any] = {"$ref": f"#/$defs/{name}"}
            if sub_req:
                nested[f.name] = sub_req
        else:
            prop = type_schema(tp, free_map=f"{prefix}{f.name}" in MAP_KEYS)
            default = _default(f)
            if default is not dataclasses.MISSING:
                prop["default"] = default
        if f.name in docs:
            prop["description"] = docs[f.name]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        props[f.name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "title": cls.__name__,
        "description": inspect.cleandoc(cls.__doc__ or ""),
        "properties": props,
        "additionalProperties": False,
    }
    overlay: dict[str, Any] = {}
    if required:
        overlay["required"] = required
    if nested:
        overlay["properties"] = nested
    return schema, overlay


def _defaults_list() -> dict[str, Any]:
    groups = {g: {"type": ["string", "null"], "examples": preset_names(g)} for g in GROUPS}
    return {
        "type": "array",
        "description": "Hydra defaults list: presets (`- model: llama2-70b`) from the package's "
        "conf/ groups or from model/, cluster/ folders next to the spec, and "
        "`_self_` (where this file's own keys apply; last = they win).",
        "items": {
            "anyOf": [
                {"const": "_self_"},
                {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "properties": groups,
                    "additionalProperties": {"type": ["string", "null"]},
                },
            ]
        },
    }


@cache
def _build() -> str:
    defs: dict[str, Any] = {}
    root, overlay = _section(TrainSpec, "", defs)
    root["properties"] = {"defaults": _defaults_list(), **root["properties"]}
    schema: dict[str, Any] = {
        "$schema": DRAFT,
        "$id": "urn:trainc:spec",
        "title": "trainc spec",
        **{k: v for k, v in root.items() if k != "title"},
        # A spec without a defaults list is fully explicit: every required key must be in it.
        "if": {"not": {"required": ["defaults"]}},
        "then": overlay,
        "$defs": dict(sorted(defs.items())),
    }
    return json.dumps(schema, indent=2, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n"


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a trainc spec file (a fresh dict each call)."""
    return json.loads(_build())


def section_schema(section: str) -> dict[str, Any]:
    """The schema of one section (``model``, ``cluster``, ...) as a standalone document, for
    preset files (``model/*.yaml``); required keys are not enforced (presets may be partial)."""
    full = spec_schema()
    ref = full["properties"].get(section, {}).get("$ref")
    if not ref:
        raise KeyError(section)
    return {
        "$schema": DRAFT,
        "$id": f"urn:trainc:spec:{section}",
        "$ref": ref,
        "$defs": full["$defs"],
    }


def sections() -> list[str]:
    """Names of the spec's sections (the keys that hold a nested mapping)."""
    return [k for k, v in spec_schema()["properties"].items() if "$ref" in v]


def render(section: str | None = None) -> str:
    """The schema as deterministic JSON text (whole spec, or one section)."""
    if section is None:
        return _build()
    return json.dumps(section_schema(section), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
