"""The loading stage: a spec file (or standard input) and its ``KEY=VALUE`` overrides in, a
checked :class:`~trainc.schemas.TrainSpec` and the record of where each key was set out.

Its steps, in :func:`load_spec`'s order, each in its module:

1. read the YAML file (:mod:`.yaml_source`: libyaml with OmegaConf's scalar rules, a key ->
   file:line map);
2. parse the overrides (:mod:`.overrides`: Hydra's grammar);
3. compose the presets of the ``defaults:`` list with the spec's body (:mod:`.presets`: Hydra,
   cached in memory and on disk, from the package's ``conf/`` and the spec's own folder,
   :mod:`.paths`);
4. record where each key was set (:func:`_provenance`);
5. apply the key overrides (:mod:`.overrides`);
6. check every key and type against the structured-config schema (:mod:`.schema_check`).

The pipeline and the other packages import this package, not its modules: the names below
(``__all__``) are its interface, the modules' shared names its internals. Hydra and OmegaConf are
imported only in this package, and only when needed (overrides, a cold preset cache,
interpolations, errors). Every user mistake becomes a
:class:`~trainc.compiler.diagnostics.Diagnostic` (TRC000-TRC008) naming the key and, where known,
the file and line; nothing here raises for bad input.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Location, diag, location_of
from trainc.compiler.load.overrides import (
    COMMAND_LINE,
    Provenance,
    apply_key_overrides,
    parse_overrides,
)
from trainc.compiler.load.paths import (
    GROUPS,
    _artifact_preset,
    _shown_preset,
    artifact_file,
    conf_dir,
)
from trainc.compiler.load.presets import _PRESET_CACHE as _PRESET_CACHE  # tests reset it
from trainc.compiler.load.presets import _compose, preset_names
from trainc.compiler.load.schema_check import (
    MAP_KEYS,
    SchemaResult,
    check_spec,
    field_types,
    schema_keys,
    to_spec,
)
from trainc.compiler.load.yaml_source import _defaults_list, _node_lines, _read_yaml, scalar_texts
from trainc.compiler.load.yaml_source import located_at as _at
from trainc.schemas import TrainSpec

__all__ = [
    "GROUPS",
    "MAP_KEYS",
    "STDIN",
    "Loaded",
    "SchemaResult",
    "artifact_file",
    "check_spec",
    "conf_dir",
    "field_types",
    "load_spec",
    "preset_names",
    "schema_keys",
    "to_spec",
]

#: The spec path that means standard input, and how diagnostics name it.
STDIN, STDIN_SHOWN = "-", "<stdin>"


@dataclass
class Loaded:
    """Result of :func:`load_spec`.

    ``spec`` is None when any error was found. ``where`` maps each dotted key that some file or
    override set to the :class:`Location` that set it last; ``explicit`` holds the keys set by the
    spec file itself or the command line (not by a preset), which the planner treats as constraints.
    """

    path: str
    spec: TrainSpec | None
    diagnostics: list[Diagnostic]
    where: dict[str, Location] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()
    presets: dict[str, str] = field(default_factory=dict)
    #: With schema errors: the spec with the failed keys (``broken``) at defaults/placeholders,
    #: for the rules that do not read them (see
    #: :class:`~trainc.compiler.load.schema_check.SchemaResult`).
    partial: TrainSpec | None = None
    broken: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------------
# the loader: its steps in order
# ---------------------------------------------------------------------------------------------


def load_spec(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Loaded:
    """Compose the spec at ``path`` with its defaults list and the ``KEY=VALUE`` overrides.

    ``path`` ``-`` reads the spec from standard input (shown as ``<stdin>``); its presets
    (``model/NAME.yaml`` ...) are looked up in the working folder.
    Returns a :class:`Loaded` whose ``spec`` is a :class:`TrainSpec` when there were no errors.
    Group overrides (``model=llama3-8b``) choose presets; other overrides (``parallel.tp=4``) are
    applied after composition, as Hydra does. Never raises for bad input.

    The steps: read the spec file, parse the overrides, compose the presets, record where each
    key was set, apply the key overrides, check the schema; the first step that fails ends the
    load with its diagnostics.
    """
    shown, spec_path, node, failed = _read_spec(path)
    if failed:
        return Loaded(shown, None, failed)
    parsed = parse_overrides(overrides)
    if parsed.diagnostics:
        return Loaded(shown, None, parsed.diagnostics)
    if node is None and not overrides:
        return Loaded(shown, None, [_empty_spec(shown)])
    cfg, presets, failed = _compose(spec_path, shown, node, parsed.groups)
    if failed:
        return Loaded(shown, None, _from_command_line(failed, parsed.groups))
    prov = _provenance(node, presets, spec_path, shown)
    problem = apply_key_overrides(cfg, parsed.keys, overrides, prov)
    if problem:
        return Loaded(shown, None, [problem])
    return _checked(shown, spec_path, cfg, presets, prov)


def _read_spec(
    path: str | os.PathLike[str],
) -> tuple[str, Path, yaml.Node | None, list[Diagnostic]]:
    """Step 1, read the spec file (or standard input for ``-``): (its name in diagnostics, its
    path, its YAML node, TRC000 diagnostics)."""
    shown = str(path)
    spec_path = Path(path)
    data = None
    if shown == STDIN:  # the spec on standard input: presets next to it = in the working folder
        shown, spec_path = STDIN_SHOWN, Path.cwd() / STDIN_SHOWN
        try:
            data = sys.stdin.buffer.read()
        except (OSError, ValueError) as e:  # closed or unreadable stdin
            d = diag(
                R.SPEC_UNREADABLE,
                f"cannot read the spec from standard input: {e}",
                "<file>",
                fix="pipe a YAML spec into trainc, or give its path",
            )
            return shown, spec_path, None, [_at(d, shown, None)]
    node, diags = _read_yaml(spec_path, shown, data)
    return shown, spec_path, node, diags


def _empty_spec(shown: str) -> Diagnostic:
    """An empty file (or only comments): one finding, not a "missing value" per required key."""
    return _at(
        diag(
            R.SPEC_UNREADABLE,
            f"{shown} is empty: a spec names at least the model, the cluster and the global batch",
            "<file>",
            fix="start from a bundled example (examples/*.yaml), or write defaults: "
            "[{model: llama3-8b}, {cluster: dgx-h100}, _self_] and "
            "training.global_batch_size",
        ),
        shown,
        None,
    )


def _from_command_line(diags: list[Diagnostic], group_overrides: list[str]) -> list[Diagnostic]:
    """Composition diagnostics about a group a ``GROUP=NAME`` override chose, located on the
    command line."""
    from_cli = {o.split("=", 1)[0]: i for i, o in enumerate(group_overrides)}
    return [_at(d, COMMAND_LINE, None) if d.key in from_cli else d for d in diags]


def _provenance(
    node: yaml.Node | None, presets: dict[str, str], spec_path: Path, shown: str
) -> Provenance:
    """Step 4, record where each key was set: the lines and source texts of every layer (the
    presets and the spec's own body) in defaults-list order, the last layer winning."""
    where: dict[str, Location] = {}
    spec_lines: dict[str, Location] = {}
    _node_lines(node, "", shown, spec_lines) if node is not None else None
    # the source text of scalars YAML read as another type than a string, layer by layer
    texts: dict[str, str | None] = {}
    spec_texts: dict[str, str | None] = {}
    scalar_texts(node, "", spec_texts)
    self_seen = False
    order = _defaults_list(node)
    order += [(g, None) for g in presets if g not in {x for x, _ in order}]
    for group, _opt in order:
        if group == "_self_":
            where.update(spec_lines)
            texts.update(spec_texts)
            self_seen = True
        elif group in presets:
            where.update(
                _preset_lines(
                    presets[group], group, _shown_preset(presets[group], spec_path, shown)
                )
            )
            texts.update(_preset_texts(presets[group], group))
    assert self_seen
    raw: dict[str, tuple[str, bool]] = {k: (t, False) for k, t in texts.items() if t is not None}
    # (a list's items are key[i]: an override of the list drops them, with key + "[")
    explicit = {k for k, loc in where.items() if loc.file == shown}
    return Provenance(where, raw, explicit)


def _checked(
    shown: str, spec_path: Path, cfg: dict[str, Any], presets: dict[str, str], prov: Provenance
) -> Loaded:
    """Step 6, check the schema: the :class:`Loaded` of the composed spec, its diagnostics
    located where their keys were set."""
    checked = check_spec(cfg, prov.raw)
    located = [_locate_one(d, prov.where) for d in checked.diagnostics]
    return Loaded(
        shown,
        checked.spec,
        located,
        prov.where,
        frozenset(prov.explicit),
        {g: _artifact_preset(p, spec_path) for g, p in presets.items()},
        partial=checked.partial,
        broken=checked.broken,
    )


@cache
def _preset_lines(pfile: str, group: str, shown: str) -> dict[str, Location]:
    pnode, _ = _read_yaml(Path(pfile), shown)
    out: dict[str, Location] = {}
    if pnode is not None:
        _node_lines(pnode, group + ".", shown, out)
    return out


@cache
def _preset_texts(pfile: str, group: str) -> dict[str, str | None]:
    pnode, _ = _read_yaml(Path(pfile), pfile)
    out: dict[str, str | None] = {}
    scalar_texts(pnode, group + ".", out)
    return out


def _locate_one(d: Diagnostic, where: dict[str, Location]) -> Diagnostic:
    if d.locations:
        return d
    return dataclasses.replace(d, locations=(location_of(d.key, where),))
