"""Load a spec: read the YAML file, compose it with Hydra (its ``defaults:`` list pulls presets from
the package's ``conf/`` and from the spec's own folder), apply ``KEY=VALUE`` overrides, and check
every key and type against the structured-config schema.

This is the only module that imports Hydra / OmegaConf. Every user mistake becomes a
:class:`~trainc.compiler.diagnostics.Diagnostic` (TRC000-TRC006) naming the key and, where known,
the file and line; nothing here raises for bad input.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
import os
import warnings
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainc import __version__
from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Location, diag, did_you_mean
from trainc.compiler.schema_check import MAP_KEYS, to_spec
from trainc.schemas import TrainSpec

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


def conf_dir() -> Path:
    """The package's Hydra config tree (``trainc/conf``)."""
    return Path(str(resources.files("trainc") / "conf"))


def preset_names(group: str) -> list[str]:
    """Preset names of a config group, sorted."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


# ---------------------------------------------------------------------------------------------
# YAML source map
# ---------------------------------------------------------------------------------------------


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """libyaml parser with OmegaConf's scalar rules: YAML 1.2 style floats (``1e-4`` is a float,
    not a string) and no timestamp type (``2024-01-01`` stays a string)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def construct(node: yaml.Node | None) -> Any:
    """Plain Python value of a composed YAML node (with :class:`_Loader`'s scalar rules)."""
    if node is None:
        return None
    return _Loader("").construct_document(node)


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


def _node_lines(node: yaml.Node, prefix: str, file: str, out: dict[str, Location]) -> None:
    if not isinstance(node, yaml.MappingNode):
        return
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            continue
        key = prefix + str(k.value)
        out[key] = Location(key=key, file=file, line=k.start_mark.line + 1)
        if key not in MAP_KEYS:
            _node_lines(v, key + ".", file, out)


def _read_yaml(path: Path, shown: str) -> tuple[yaml.Node | None, list[Diagnostic]]:
    """Read and parse a YAML file into a node tree; problems become TRC000 diagnostics."""

    def bad(msg: str, line: int | None = None) -> tuple[None, list[Diagnostic]]:
        d = diag(R.SPEC_UNREADABLE, msg, "<file>", fix="pass a readable UTF-8 YAML spec file")
        return None, [dataclasses.replace(d, locations=(Location(key="<file>", file=shown,
                                                                 line=line),))]

    if not path.exists():
        return bad(f"spec file {shown} does not exist")
    if path.is_dir():
        return bad(f"{shown} is a directory, not a spec file")
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
    if node is not None and not isinstance(node, yaml.MappingNode):
        return bad(f"{shown} must be a YAML mapping of sections (model:, cluster:, ...)", 1)
    try:
        dup = _duplicate_key(node) if node is not None else None
    except RecursionError:  # deep nesting, or an alias that contains itself (a: &a [*a])
        return bad(f"{shown} is nested too deeply (or an anchor refers to itself)")
    if dup:
        return bad(f"{shown} sets {dup[0]} twice", dup[1])
    return node, []


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


# ---------------------------------------------------------------------------------------------
# the loader
# ---------------------------------------------------------------------------------------------


def load_spec(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Loaded:
    """Compose the spec at ``path`` with its defaults list and the ``KEY=VALUE`` overrides.

    Returns a :class:`Loaded` whose ``spec`` is a :class:`TrainSpec` when there were no errors.
    Group overrides (``model=llama3-8b``) choose presets; other overrides (``parallel.tp=4``) are
    applied after composition, as Hydra does. Never raises for bad input.
    """
    shown = str(path)
    spec_path = Path(path)
    node, diags = _read_yaml(spec_path, shown)
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
            diags.append(_at(diag(R.BAD_OVERRIDE, f"cannot parse override '{shown_ov}': {msg}",
                                  "<command line>", fix="write overrides as KEY=VALUE, e.g. "
                                  "parallel.tp=4 or model=llama3-8b"), COMMAND_LINE, i + 1))
            continue
        key = ov.key_or_group
        if not key:
            diags.append(_at(diag(R.BAD_OVERRIDE, f"override '{text[:80]}' has no key",
                                  "<command line>", fix="write overrides as KEY=VALUE, e.g. "
                                  "parallel.tp=4"), COMMAND_LINE, i + 1))
        elif ov.is_delete() or ov.package:
            diags.append(_at(diag(R.BAD_OVERRIDE, f"override '{text}' is not supported",
                                  key, fix="use plain KEY=VALUE overrides"), COMMAND_LINE, i + 1))
        elif key in GROUPS and isinstance(value, str):
            # A group the spec's defaults list does not name is appended (Hydra's '+group='),
            # after _self_: the chosen preset then replaces the spec's own section values.
            group_overrides.append(f"{key}={value}")
        else:
            key_overrides.append((key, value, i + 1))
    if diags:
        return Loaded(shown, None, diags)

    # --- compose with Hydra ---------------------------------------------------------------
    cfg, presets, comp_diags = _compose(spec_path, shown, node, group_overrides)
    if comp_diags:
        from_cli = {o.split("=", 1)[0]: i for i, o in enumerate(group_overrides)}
        comp_diags = [_at(d, COMMAND_LINE, None) if d.key in from_cli else d for d in comp_diags]
        return Loaded(shown, None, comp_diags)

    where: dict[str, Location] = {}
    spec_lines: dict[str, Location] = {}
    _node_lines(node, "", shown, spec_lines) if node is not None else None
    self_seen = False
    order = _defaults_list(node)
    order += [(g, None) for g in presets if g not in {x for x, _ in order}]
    for group, _opt in order:
        if group == "_self_":
            where.update(spec_lines)
            self_seen = True
        elif group in presets:
            where.update(_preset_lines(presets[group], group))
    assert self_seen
    explicit = {k for k, loc in where.items() if loc.file == shown}

    # --- key overrides ----------------------------------------------------------------------
    for key, value, idx in key_overrides:
        _set_path(cfg, key, value)
        loc = Location(key=key, file=COMMAND_LINE, line=idx)
        for k in list(where):
            if k.startswith(key + "."):
                del where[k]
        where[key] = loc
        explicit.add(key)
        if isinstance(value, dict) and key not in MAP_KEYS:
            for sub in _flatten(value, key + "."):
                where[sub] = Location(key=sub, file=COMMAND_LINE, line=idx)
                explicit.add(sub)

    spec, schema_diags = to_spec(cfg)
    located = [_locate_one(d, where) for d in schema_diags]
    return Loaded(shown, spec, located, where, frozenset(explicit),
                  {g: _shown_preset(p) for g, p in presets.items()})


@cache
def _preset_lines(pfile: str, group: str) -> dict[str, Location]:
    pnode, _ = _read_yaml(Path(pfile), pfile)
    out: dict[str, Location] = {}
    _node_lines(pnode, group + ".", _shown_preset(pfile), out)
    return out


def _shown_preset(pfile: str) -> str:
    root = conf_dir()
    try:
        return "trainc/conf/" + Path(pfile).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return pfile


def _at(d: Diagnostic, file: str, line: int | None) -> Diagnostic:
    return dataclasses.replace(d, locations=(Location(key=d.key, file=file, line=line),))


def _locate_one(d: Diagnostic, where: dict[str, Location]) -> Diagnostic:
    if d.locations:
        return d
    return dataclasses.replace(d, locations=(where.get(d.key, Location(key=d.key)),))


def _flatten(value: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for k, v in value.items():
        key = prefix + str(k)
        out.append(key)
        if isinstance(v, dict) and key not in MAP_KEYS:
            out.extend(_flatten(v, key + "."))
    return out


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

    try:
        before, choices_b = _compose_presets(str(spec_dir), tuple(entries[:self_at]))
        after, choices_a = _compose_presets(str(spec_dir), tuple(entries[self_at + 1:]))
        body = construct(node) or {}
        body.pop("defaults", None)
        merged = _merge(_merge(before, body), after)
        if "${" in repr(merged):  # interpolations: let OmegaConf resolve them
            from omegaconf import OmegaConf

            merged = OmegaConf.to_container(OmegaConf.create(merged), resolve=True)
        container = merged
    except Exception as e:  # noqa: BLE001 - classified below; anything else is re-raised
        return _compose_failure(e, shown)
    if not isinstance(container, dict):
        return {}, {}, [_at(diag(R.SPEC_UNREADABLE, f"{shown} must be a mapping", "<file>"),
                            shown, None)]
    presets = {}
    for group, opt in {**choices_b, **choices_a}.items():
        for base in (spec_dir, conf_dir()):
            f = base / group / f"{opt}.yaml"
            if f.exists():
                presets[group] = str(f)
                break
    return container, presets, []


def _compose_failure(e: Exception, shown: str) -> tuple[dict, dict, list[Diagnostic]]:
    """Turn a Hydra / OmegaConf / YAML failure into a diagnostic; re-raise anything else."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    def fail(rule: R.Rule, msg: str, key: str, fix: str | None) -> tuple[dict, dict, list]:
        return {}, {}, [_at(diag(rule, msg, key, fix=fix), shown, None)]

    if isinstance(e, MissingConfigException):
        group = next((g for g in GROUPS if e.missing_cfg_file and
                      e.missing_cfg_file.startswith(g + "/")), None)
        options = list(e.options or []) or (preset_names(group) if group else [])
        if group:
            opt = e.missing_cfg_file.split("/", 1)[1]
            msg = f"{group} preset '{opt}' does not exist{did_you_mean(opt, options)}"
            return fail(R.UNKNOWN_CHOICE, msg, group,
                        f"use one of: {', '.join(options)}" if options else None)
        return fail(R.UNKNOWN_CHOICE, str(e).splitlines()[0], "defaults",
                    f"available: {', '.join(options)}" if options else None)
    if isinstance(e, (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError,
                      TypeError, KeyError, RecursionError)):
        first = (str(e).splitlines() or [type(e).__name__])[0]
        return fail(R.SPEC_UNREADABLE, f"cannot compose {shown}: {first}", "defaults",
                    "check the defaults: list (e.g. '- model: llama2-70b') and the YAML structure")
    raise e


_PRESET_CACHE: dict[tuple[str, tuple[tuple[str, str | None], ...]], tuple[Any, dict[str, str]]] = {}  # noqa: E501


def _compose_presets(spec_dir: str, entries: tuple[tuple[str, str | None], ...]
                     ) -> tuple[Any, dict[str, str]]:
    """Hydra-compose a defaults list of presets (no ``_self_`` body).

    Cached in memory per process, and on disk (``$XDG_CACHE_HOME/trainc``, off with
    ``TRAINC_NO_CACHE=1``) keyed by the content of every file Hydra could pick, so a warm
    ``trainc compile`` never imports Hydra (~0.35 s). Presets with their own ``defaults:`` list
    are never disk-cached. Returns the composed container (a copy) and the option per group.
    """
    entries = tuple((g, o) for g, o in entries if o is not None)
    if not entries:
        return {}, {}
    key = (spec_dir, entries)
    if key not in _PRESET_CACHE:
        disk = _disk_cache_path(spec_dir, entries)
        hit = _read_disk_cache(disk) if disk else None
        _PRESET_CACHE[key] = hit or _hydra_compose(spec_dir, entries)
        if disk and not hit:
            _write_disk_cache(disk, _PRESET_CACHE[key])
    cfg, choices = _PRESET_CACHE[key]
    return copy.deepcopy(cfg), dict(choices)


def _hydra_compose(spec_dir: str, entries: tuple[tuple[str, str | None], ...]
                   ) -> tuple[dict[str, Any], dict[str, str]]:
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    name = "_trainc_presets_" + hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    ConfigStore.instance().store(
        name=name, node={"defaults": [{g: o} for g, o in entries] + ["_self_"]})
    search = f"hydra.searchpath=[file://{spec_dir},file://{conf_dir()}]"
    GlobalHydra.instance().clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=spec_dir, version_base="1.3"):
                composed = compose(config_name=name, overrides=[search], return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    runtime = composed.hydra.runtime.choices
    choices = {g: str(runtime[g]) for g, _ in entries if runtime.get(g) is not None}
    raw = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    return raw, choices


def _disk_cache_path(spec_dir: str, entries: tuple[tuple[str, str | None], ...]) -> Path | None:
    if os.environ.get("TRAINC_NO_CACHE"):
        return None
    h = hashlib.sha256(f"{__version__}|{spec_dir}|{conf_dir()}".encode())
    for group, opt in entries:
        found = False
        for base in (Path(spec_dir), conf_dir()):
            f = base / group / f"{opt}.yaml"
            if f.is_file():
                data = f.read_bytes()
                if re.search(rb"(?m)^defaults\s*:", data):
                    return None
                h.update(f"|{f}|".encode() + hashlib.sha256(data).digest())
                found = True
            else:
                h.update(f"|{f}|-".encode())
        if not found:
            return None  # let Hydra report the missing preset
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainc"
    return root / f"presets-{h.hexdigest()[:32]}.json"


def _read_disk_cache(path: Path) -> tuple[dict[str, Any], dict[str, str]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["config"], data["choices"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_disk_cache(path: Path, value: tuple[dict[str, Any], dict[str, str]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"config": value[0], "choices": value[1]}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is only slower


def _merge(base: Any, over: Any) -> Any:
    """OmegaConf.merge semantics on plain containers: mappings merge key by key, recursively;
    anything else (scalars, lists, null) replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over
