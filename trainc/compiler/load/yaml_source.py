"""Reading spec YAML: libyaml with OmegaConf's scalar rules, a key -> file:line source map,
duplicate keys, and the ``defaults:`` list. Problems become TRC000 diagnostics."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Location, diag
from trainc.compiler.load.schema_check import MAP_KEYS


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """libyaml parser with OmegaConf's scalar rules: YAML 1.2 style floats (``1e-4`` is a float,
    not a string) and no timestamp type (``2024-01-01`` stays a string)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def construct(node: yaml.Node | None) -> Any:
    """Plain Python value of a composed YAML node (with :class:`_Loader`'s scalar rules)."""
    if node is None:
        return None
    return _Loader("").construct_document(node)


def located_at(d: Diagnostic, file: str, line: int | None) -> Diagnostic:
    """``d`` located at ``file``:``line`` (under its own key)."""
    return dataclasses.replace(d, locations=(Location(key=d.key, file=file, line=line),))


def _duplicate_key(node: yaml.Node, prefix: str = "") -> tuple[str, int] | None:
    """The first duplicated mapping key (dotted) and its line, if any."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            name = str(getattr(k, "value", ""))
            if name in seen:
                return prefix + name, k.start_mark.line + 1
            seen.add(name)
            found = _duplicate_key(v, prefix + name + ".")
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _duplicate_key(item, prefix)
            if found:
                return found
    return None


def _node_lines(
    node: yaml.Node, prefix: str, file: str, out: dict[str, Location], map_entries: bool = False
) -> None:
    """Record the line of every key; a free-form map (``launch.env``) gets its entries' lines
    (``launch.env.NAME``) but is not descended into further."""
    if not isinstance(node, yaml.MappingNode):
        return
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            continue
        key = prefix + str(k.value)
        out[key] = Location(key=key, file=file, line=k.start_mark.line + 1)
        if map_entries:
            continue
        _node_lines(v, key + ".", file, out, map_entries=key in MAP_KEYS)


_STR_TAG = "tag:yaml.org,2002:str"


def scalar_texts(
    node: yaml.Node | None, prefix: str, out: dict[str, str | None], map_entries: bool = False
) -> None:
    """For every key whose value is a scalar: its source text when YAML resolved it to another
    type than a string (an unquoted ``4:00:00`` -> int 14400, ``0123`` -> 83, ``yes`` -> True,
    ``1e3`` -> 1000.0, ``~`` -> None), else None. A free-form map (``launch.env``) records its
    entries (``launch.env.NAME``). The schema check uses the text to tell the user what YAML
    did to a string key's value and how to quote it."""
    if not isinstance(node, yaml.MappingNode):
        return
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            continue
        key = prefix + str(k.value)
        if isinstance(v, yaml.ScalarNode):
            out[key] = v.value if not v.style and v.tag != _STR_TAG else None  # plain: None or ""
        elif isinstance(v, yaml.SequenceNode):  # a list of strings: its items as key[i]
            for i, item in enumerate(v.value):
                if isinstance(item, yaml.ScalarNode):
                    plain = not item.style and item.tag != _STR_TAG
                    out[f"{key}[{i}]"] = item.value if plain else None
        elif not map_entries:
            scalar_texts(v, key + ".", out, map_entries=key in MAP_KEYS)


#: Most YAML nodes a spec may expand to through anchors and aliases (a real spec has a few
#: hundred; "billion laughs", 9 aliases over 8 levels, expands to 10^8 and would take minutes).
MAX_NODES = 20_000
#: Tags whose value a spec may hold: plain data (no timestamps, sets, binary or Python objects).
DATA_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge")
)


class _Unsafe(Exception):
    """A node graph that trainc refuses: (message, line, fix)."""


def _check_graph(node: yaml.Node) -> None:
    """Refuse a tag that is not plain data, and a graph that expands (through aliases, which
    share nodes) to more than :data:`MAX_NODES` nodes or refers to itself. Linear in the size
    of the composed graph: each node's expanded size is computed once."""
    size: dict[int, int] = {}
    active: set[int] = set()

    def visit(n: yaml.Node) -> int:
        key = id(n)
        if key in size:
            return size[key]
        if key in active:
            raise _Unsafe(
                "an anchor refers to itself (an alias inside its own anchor)",
                n.start_mark.line + 1,
                "remove the alias from inside its anchor",
            )
        if n.tag not in DATA_TAGS:
            raise _Unsafe(
                f"the tag {n.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed "
                "here: a spec holds plain data (mappings, lists, strings, numbers, "
                "booleans, null); trainc never constructs objects from YAML tags",
                n.start_mark.line + 1,
                'remove the tag and write the value as plain YAML (quote a date: "2024-01-01")',
            )
        active.add(key)
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(visit(k) + visit(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(visit(v) for v in n.value)
        else:
            total = 1
        active.discard(key)
        if total > MAX_NODES:
            raise _Unsafe(
                f"it expands to more than {MAX_NODES:,} values through anchors and "
                "aliases (&name / *name); a spec needs a few hundred",
                n.start_mark.line + 1,
                "write the values out instead of nesting aliases",
            )
        size[key] = total
        return total

    visit(node)


def _read_yaml(
    path: Path,
    shown: str,
    data: bytes | None = None,
) -> tuple[yaml.Node | None, list[Diagnostic]]:
    """Read and parse a YAML file (or ``data``, e.g. standard input) into a node tree; problems
    become TRC000 diagnostics."""

    def bad(
        msg: str, line: int | None = None, fix: str = "pass a readable UTF-8 YAML spec file"
    ) -> tuple[None, list[Diagnostic]]:
        d = diag(R.SPEC_UNREADABLE, msg, "<file>", fix=fix)
        return None, [
            dataclasses.replace(d, locations=(Location(key="<file>", file=shown, line=line),))
        ]

    if data is not None:
        raw = data
    elif not path.exists() and glob.has_magic(str(path)):
        # a quoted pattern (trainc lint 'specs/*.yaml') that the CLI expanded to nothing
        return bad(
            f"no file matches the pattern {shown} (matched from {os.getcwd()})",
            fix="check the pattern and the directory it is matched from, or name the spec files",
        )
    elif not path.exists():
        return bad(f"spec file {shown} does not exist")
    elif path.is_dir():
        return bad(f"{shown} is a directory, not a spec file")
    else:
        try:
            raw = path.read_bytes()
        except OSError as e:
            return bad(f"cannot read {shown}: {e.strerror or e}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return bad(f"{shown} is not valid UTF-8 (byte {e.start})")
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        return bad(f"{shown} is not valid YAML: {problem}", line)
    except RecursionError:
        return bad(f"{shown} is nested too deeply")
    if node is not None:
        try:
            _check_graph(node)
        except _Unsafe as e:
            return _refused(shown, *e.args)
        except RecursionError:
            return bad(f"{shown} is nested too deeply")
    if node is not None and not isinstance(node, yaml.MappingNode):
        return bad(f"{shown} must be a YAML mapping of sections (model:, cluster:, ...)", 1)
    try:
        dup = _duplicate_key(node) if node is not None else None
    except RecursionError:  # deep nesting, or an alias that contains itself (a: &a [*a])
        return bad(f"{shown} is nested too deeply (or an anchor refers to itself)")
    if dup:
        return bad(f"{shown} sets {dup[0]} twice", dup[1])
    return node, []


def _refused(shown: str, why: str, line: int, fix: str) -> tuple[None, list[Diagnostic]]:
    d = diag(R.SPEC_UNREADABLE, f"{shown} is refused: {why}", "<file>", fix=fix)
    return None, [
        dataclasses.replace(d, locations=(Location(key="<file>", file=shown, line=line),))
    ]


def _defaults_list(node: yaml.Node | None) -> list[tuple[str, str | None]]:
    """The spec's ``defaults:`` as (group or ``_self_``, option) pairs, ``_self_`` appended if absent."""
    out: list[tuple[str, str | None]] = []
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == "defaults" and isinstance(v, yaml.SequenceNode):
                for item in v.value:
                    if isinstance(item, yaml.ScalarNode) and item.value == "_self_":
                        out.append(("_self_", None))
                    elif isinstance(item, yaml.MappingNode) and len(item.value) == 1:
                        gk, gv = item.value[0]
                        out.append((str(gk.value).lstrip("+"), getattr(gv, "value", None)))
    if ("_self_", None) not in out:
        out.append(("_self_", None))
    return out
