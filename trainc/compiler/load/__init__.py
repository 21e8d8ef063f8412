"""Load a spec: read the YAML file, compose it with Hydra (its ``defaults:`` list pulls presets from
the package's ``conf/`` and from the spec's own folder), apply ``KEY=VALUE`` overrides, and check
every key and type against the structured-config schema.

Hydra and OmegaConf are imported only here and in :mod:`trainc.compiler.load.presets`, and only when
needed (overrides, a cold preset cache, interpolations, errors). Every user mistake becomes a
:class:`~trainc.compiler.diagnostics.Diagnostic` (TRC000-TRC006) naming the key and, where known,
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
from trainc.compiler.diagnostics import Diagnostic, Location, diag, did_you_mean, location_of
from trainc.compiler.load.presets import (
    _PRESET_CACHE,  # noqa: F401 - re-exported: tests reset it
    _compose_presets,
    _merge,
    conf_dir,
    preset_names,
)
from trainc.compiler.load.schema_check import MAP_KEYS, check_spec
from trainc.compiler.load.yaml_source import (
    _defaults_list,
    _node_lines,
    _read_yaml,
    construct,
    scalar_texts,
)
from trainc.schemas import TrainSpec

#: The spec path that means standard input, and how diagnostics name it.
STDIN, STDIN_SHOWN = "-", "<stdin>"
#: Hydra config groups shipped in ``trainc/conf``.
GROUPS = ("model", "cluster")
COMMAND_LINE = "<command line>"


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
# the loader
# ---------------------------------------------------------------------------------------------


def load_spec(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Loaded:
    """Compose the spec at ``path`` with its defaults list and the ``KEY=VALUE`` overrides.

    ``path`` ``-`` reads the spec from standard input (shown as ``<stdin>``); its presets
    (``model/NAME.yaml`` ...) are looked up in the working folder.
    Returns a :class:`Loaded` whose ``spec`` is a :class:`TrainSpec` when there were no errors.
    Group overrides (``model=llama3-8b``) choose presets; other overrides (``parallel.tp=4``) are
    applied after composition, as Hydra does. Never raises for bad input.
    """
    shown = str(path)
    spec_path = Path(path)
    data = None
    if shown == STDIN:  # the spec on standard input: presets next to it = in the working folder
        shown, spec_path = STDIN_SHOWN, Path.cwd() / STDIN_SHOWN
        try:
            data = sys.stdin.buffer.read()
        except (OSError, ValueError) as e:  # closed or unreadable stdin
            data = None
            d = diag(
                R.SPEC_UNREADABLE,
                f"cannot read the spec from standard input: {e}",
                "<file>",
                fix="pipe a YAML spec into trainc, or give its path",
            )
            return Loaded(shown, None, [_at(d, shown, None)])
    node, diags = _read_yaml(spec_path, shown, data)
    if diags:
        return Loaded(shown, None, diags)

    # --- parse overrides (Hydra's grammar; imported only when there are overrides) ----------
    group_overrides: list[str] = []
    key_overrides: list[tuple[str, Any, int]] = []
    if overrides:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        parser = OverridesParser.create()
    for i, text in enumerate(overrides):
        try:
            ov = parser.parse_overrides([text])[0]
            value = ov.value()
        except (HydraException, ValueError, RecursionError) as e:
            # ValueError: an integer beyond Python's 4300-digit conversion limit;
            # RecursionError: brackets nested thousands deep (both from Hydra's parser)
            msg = (str(e).splitlines() or [type(e).__name__])[0][:200]
            shown_ov = text if len(text) <= 80 else text[:77] + "..."
            key, sep, value = text.partition("=")
            quote = (
                (
                    f"; a value with characters outside Hydra's unquoted grammar (spaces, "
                    f"non-ASCII, brackets) is quoted: {key}='{value}' (in a shell: "
                    f"\"{key}='{value}'\")"
                )
                if sep and key and "'" not in value
                else ""
            )
            diags.append(
                _at(
                    diag(
                        R.BAD_OVERRIDE,
                        f"cannot parse override '{shown_ov}': {msg}",
                        "<command line>",
                        fix="write overrides as KEY=VALUE, e.g. "
                        "parallel.tp=4 or model=llama3-8b" + quote,
                    ),
                    COMMAND_LINE,
                    i + 1,
                )
            )
            continue
        key = ov.key_or_group
        if not key:
            diags.append(
                _at(
                    diag(
                        R.BAD_OVERRIDE,
                        f"override '{text[:80]}' has no key",
                        "<command line>",
                        fix="write overrides as KEY=VALUE, e.g. parallel.tp=4",
                    ),
                    COMMAND_LINE,
                    i + 1,
                )
            )
        elif ov.package or (ov.is_delete() and key in GROUPS):
            fix = (
                f"choose another preset instead ({key}=NAME)"
                if ov.is_delete()
                else "use plain KEY=VALUE overrides"
            )
            diags.append(
                _at(
                    diag(R.BAD_OVERRIDE, f"override '{text}' is not supported", key, fix=fix),
                    COMMAND_LINE,
                    i + 1,
                )
            )
        elif ov.is_delete():
            # Hydra's ~KEY (delete) and ~KEY=VALUE (delete if it holds VALUE): the key goes back
            # to its schema default
            key_overrides.append((key, (_DELETE, value if "=" in text else _DELETE), i + 1))
        elif key in GROUPS and isinstance(value, str):
            # A group the spec's defaults list does not name is appended (Hydra's '+group='),
            # after _self_: the chosen preset then replaces the spec's own section values.
            group_overrides.append(f"{key}={value}")
        else:
            key_overrides.append((key, value, i + 1))
    if diags:
        return Loaded(shown, None, diags)
    if node is None and not overrides:
        # an empty file (or only comments): one finding, not a "missing value" per required key
        return Loaded(
            shown,
            None,
            [
                _at(
                    diag(
                        R.SPEC_UNREADABLE,
                        f"{shown} is empty: a spec names at least the model, the cluster "
                        "and the global batch",
                        "<file>",
                        fix="start from a bundled example (examples/*.yaml), or write defaults: "
                        "[{model: llama3-8b}, {cluster: dgx-h100}, _self_] and "
                        "training.global_batch_size",
                    ),
                    shown,
                    None,
                )
            ],
        )

    # --- compose with Hydra ---------------------------------------------------------------
    cfg, presets, comp_diags = _compose(spec_path, shown, node, group_overrides)
    if comp_diags:
        from_cli = {o.split("=", 1)[0]: i for i, o in enumerate(group_overrides)}
        comp_diags = [_at(d, COMMAND_LINE, None) if d.key in from_cli else d for d in comp_diags]
        return Loaded(shown, None, comp_diags)

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
    # (a list's items are key[i]: an override of the list drops them below, with key + "[")
    explicit = {k for k, loc in where.items() if loc.file == shown}

    # --- key overrides ----------------------------------------------------------------------
    for key, value, idx in key_overrides:
        if isinstance(value, tuple) and value and value[0] is _DELETE:
            problem = _delete_path(cfg, key, value[1])
            if problem:
                return Loaded(
                    shown,
                    None,
                    [
                        _at(
                            diag(
                                R.BAD_OVERRIDE,
                                f"cannot apply '{overrides[idx - 1]}': {problem}",
                                key,
                                fix=f"delete a key the composed spec sets (trainc explain shows "
                                f"them), or set it: {key}=VALUE",
                            ),
                            COMMAND_LINE,
                            idx,
                        )
                    ],
                )
            for k in list(where):
                if k == key or k.startswith((key + ".", key + "[")):
                    del where[k]
            for k in list(raw):
                if k == key or k.startswith((key + ".", key + "[")):
                    del raw[k]
            explicit = {
                k for k in explicit if not (k == key or k.startswith((key + ".", key + "[")))
            }
            continue
        _set_path(cfg, key, value)
        loc = Location(key=key, file=COMMAND_LINE, line=idx)
        for k in list(where):
            if k.startswith(key + "."):
                del where[k]
        for k in list(raw):
            if k == key or k.startswith((key + ".", key + "[")):
                del raw[k]
        if value is None or isinstance(value, (bool, int, float)):
            raw[key] = (overrides[idx - 1].split("=", 1)[1], True)
        elif isinstance(value, dict):  # key={nccl: 2.20}: the source text of each entry
            raw.update(_override_map_texts(key, overrides[idx - 1].split("=", 1)[1], value))
        where[key] = loc
        explicit.add(key)
        if isinstance(value, dict):
            subs = [f"{key}.{k}" for k in value] if key in MAP_KEYS else _flatten(value, key + ".")
            for sub in subs:
                where[sub] = Location(key=sub, file=COMMAND_LINE, line=idx)
                explicit.add(sub)

    checked = check_spec(cfg, raw)
    located = [_locate_one(d, where) for d in checked.diagnostics]
    return Loaded(
        shown,
        checked.spec,
        located,
        where,
        frozenset(explicit),
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


def _resolved(path: str) -> Path:
    """``Path(path).resolve()``; an absolute path (every preset file is one) is resolved once
    per process (a lint of many specs asks for the same presets again), a relative one each
    time (it depends on the working folder)."""
    return _resolved_abs(path) if os.path.isabs(path) else Path(path).resolve()


@cache
def _resolved_abs(path: str) -> Path:
    return Path(path).resolve()


def _packaged(pfile: str) -> str | None:
    """``trainc/conf/<group>/<name>.yaml`` for a preset shipped with trainc, else None."""
    try:
        return "trainc/conf/" + _resolved(pfile).relative_to(_resolved(str(conf_dir()))).as_posix()
    except ValueError:
        return None


def _spec_relative(pfile: str, spec_path: Path) -> str | None:
    """The path of a preset relative to the spec's folder (``model/mine.yaml``), or None."""
    try:
        return _resolved(pfile).relative_to(spec_path.resolve().parent).as_posix()
    except ValueError:
        return None


def _shown_preset(pfile: str, spec_path: Path, shown: str) -> str:
    """A preset's path in diagnostics: ``trainc/conf/...`` for a packaged one; a spec-local one
    as a path next to the spec as the user named it (``runs/model/mine.yaml`` for
    ``runs/spec.yaml``), so it is relative when the spec path was."""
    packaged = _packaged(pfile)
    if packaged is not None:
        return packaged
    rel = _spec_relative(pfile, spec_path)
    if rel is None:
        return pfile
    return Path(os.path.normpath(os.path.join(os.path.dirname(shown), rel))).as_posix()


def artifact_file(file: str, spec_path: str | os.PathLike[str]) -> str:
    """A diagnostic's file as ``plan.json`` records it: ``<command line>``, ``<default>`` and
    ``trainc/conf/...`` as they are, a file in the spec's folder (the spec, a preset next to it)
    relative to that folder, so the same spec tree compiled from another checkout or by an
    absolute path gives the same bytes."""
    if file.startswith(("<", "trainc/conf/")):
        return file
    return _spec_relative(file, Path(spec_path)) or file


def _artifact_preset(pfile: str, spec_path: Path) -> str:
    """A preset's path in ``plan.json``: ``trainc/conf/...`` for a packaged one, else relative to
    the spec's folder (``model/mine.yaml``), so the artifacts do not depend on where the checkout
    lives."""
    return _packaged(pfile) or _spec_relative(pfile, spec_path) or pfile


def _at(d: Diagnostic, file: str, line: int | None) -> Diagnostic:
    return dataclasses.replace(d, locations=(Location(key=d.key, file=file, line=line),))


def _locate_one(d: Diagnostic, where: dict[str, Location]) -> Diagnostic:
    if d.locations:
        return d
    return dataclasses.replace(d, locations=(location_of(d.key, where),))


def _override_map_texts(key: str, text: str, value: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """The source text of each entry of a mapping override (``key={nccl: 2.20}``) that Hydra's
    grammar read as a number, boolean or null, as ``{dotted key: (text, True)}``, so that a
    string key's ``2.20`` is TRC007 (Hydra read it as 2.2) as it is in a file or as
    ``key.nccl=2.20``. The text comes from YAML's flow mapping of the same characters, which
    spells Hydra's plain scalars alike; a text YAML cannot read gives no entries."""
    try:
        node = yaml.compose("v: " + text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    texts: dict[str, str | None] = {}
    scalar_texts(node, "", texts)
    out: dict[str, tuple[str, bool]] = {}
    for sub, t in texts.items():
        if t is None or not sub.startswith("v."):
            continue
        cur: Any = value
        for part in sub[2:].split("."):
            cur = cur.get(part, _NO_VALUE) if isinstance(cur, dict) else _NO_VALUE
        if cur is None or isinstance(cur, (bool, int, float)):
            out[f"{key}.{sub[2:]}"] = (t, True)
    return out


_NO_VALUE = object()  # a path the parsed override does not have


def _flatten(value: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for k, v in value.items():
        key = prefix + str(k)
        out.append(key)
        if isinstance(v, dict) and key not in MAP_KEYS:
            out.extend(_flatten(v, key + "."))
    return out


_DELETE = object()  # marks a ~KEY override (and, as its expected value, "any value")


def _delete_path(cfg: dict[str, Any], key: str, expected: Any) -> str | None:
    """Remove ``key`` (dotted) from the composed spec, as Hydra's ``~KEY`` does; with
    ``~KEY=VALUE`` only if it holds VALUE. Returns why it cannot, or None."""
    parts = key.split(".")
    cur: Any = cfg
    for p in parts[:-1]:
        cur = cur.get(p) if isinstance(cur, dict) else None
    if not isinstance(cur, dict) or parts[-1] not in cur:
        return f"{key} is not set in the composed spec"
    if expected is not _DELETE and cur[parts[-1]] != expected:
        return f"{key} is {cur[parts[-1]]!r}, not {expected!r}"
    del cur[parts[-1]]
    return None


def _set_path(cfg: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = cfg
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def _compose(
    spec_path: Path, shown: str, node: yaml.Node | None, group_overrides: list[str]
) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
    """Compose the spec: Hydra composes the presets of its defaults list, the spec's own body is
    merged at its ``_self_`` position (as Hydra's defaults-list order does).

    Hydra's compose of its own config tree costs ~0.1 s, so the preset segments before and after
    ``_self_`` are composed once per process and cached (``trainc lint`` over many specs). A test
    checks the result equals a plain Hydra compose of the whole spec.
    Returns the plain container, the preset file per group, and diagnostics.
    """
    spec_dir = spec_path.resolve().parent
    entries = _defaults_list(node)
    for ov in group_overrides:
        group, opt = ov.split("=", 1)
        idx = next((i for i, (g, _) in enumerate(entries) if g == group), None)
        if idx is None:  # as Hydra's +group=opt: appended, after _self_
            entries.append((group, opt))
        else:
            entries[idx] = (group, opt)
    self_at = entries.index(("_self_", None))
    for g, o in entries:  # a preset next to the spec gets the spec's YAML checks first
        local = spec_dir / g / f"{o}.yaml"
        if o is not None and local.is_file():
            _, bad = _read_yaml(local, _shown_preset(str(local), spec_path, shown))
            if bad:
                return {}, {}, bad

    try:
        before, choices_b = _compose_presets(str(spec_dir), tuple(entries[:self_at]))
        after, choices_a = _compose_presets(str(spec_dir), tuple(entries[self_at + 1 :]))
        body = construct(node) or {}
        body.pop("defaults", None)
        merged = _merge(_merge(before, body), after)
        if "${" in repr(merged):  # interpolations: let OmegaConf resolve them
            from omegaconf import OmegaConf

            merged = OmegaConf.to_container(OmegaConf.create(merged), resolve=True)
        container = merged
    except Exception as e:
        return _compose_failure(e, shown)
    if not isinstance(container, dict):
        return (
            {},
            {},
            [_at(diag(R.SPEC_UNREADABLE, f"{shown} must be a mapping", "<file>"), shown, None)],
        )
    presets = {}
    for group, opt in {**choices_b, **choices_a}.items():
        for base in (spec_dir, conf_dir()):
            f = base / group / f"{opt}.yaml"
            if f.exists():
                presets[group] = str(f)
                break
    return container, presets, []


def _compose_failure(
    e: Exception, shown: str
) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
    """Turn a Hydra / OmegaConf / YAML failure into a diagnostic; re-raise anything else."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    def fail(
        rule: R.Rule, msg: str, key: str, fix: str | None
    ) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
        return {}, {}, [_at(diag(rule, msg, key, fix=fix), shown, None)]

    if isinstance(e, MissingConfigException):
        group = next(
            (g for g in GROUPS if e.missing_cfg_file and e.missing_cfg_file.startswith(g + "/")),
            None,
        )
        options = list(e.options or []) or (preset_names(group) if group else [])
        if group and e.missing_cfg_file:
            opt = e.missing_cfg_file.split("/", 1)[1]
            msg = f"{group} preset '{opt}' does not exist{did_you_mean(opt, options)}"
            return fail(
                R.UNKNOWN_CHOICE,
                msg,
                group,
                f"use one of: {', '.join(options)}" if options else None,
            )
        return fail(
            R.UNKNOWN_CHOICE,
            str(e).splitlines()[0],
            "defaults",
            f"available: {', '.join(options)}" if options else None,
        )
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:  # a preset's YAML
        mark = e.problem_mark
        d = diag(
            R.SPEC_UNREADABLE,
            f"{mark.name}:{mark.line + 1}: {e.problem or e}",
            "<file>",
            fix="correct the YAML at that line",
        )
        return {}, {}, [_at(d, str(mark.name), mark.line + 1)]
    # AssertionError: Hydra asserts on some malformed defaults entries (an empty group name,
    # `defaults: [{"": 0}]`, fails in hydra/core/default_element.py; found by the fuzz test)
    if isinstance(
        e,
        (
            HydraException,
            OmegaConfBaseException,
            yaml.YAMLError,
            ValueError,
            TypeError,
            KeyError,
            RecursionError,
            AssertionError,
        ),
    ):
        first = (str(e).splitlines() or [type(e).__name__])[0]
        return fail(
            R.SPEC_UNREADABLE,
            f"cannot compose {shown}: {first}",
            "defaults",
            "check the defaults: list (e.g. '- model: llama2-70b') and the YAML structure",
        )
    raise e
