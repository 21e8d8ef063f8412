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
import enum
import functools
import os
import re
import shutil
import tempfile
import types
import typing
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Location, diag, did_you_mean
from trainc.schemas import TrainSpec

#: Hydra config groups shipped in ``trainc/conf``.
GROUPS = ("model", "cluster")
#: Keys whose value is a free-form mapping (not descended into by the schema check).
MAP_KEYS = frozenset({"launch.env"})
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
# schema introspection
# ---------------------------------------------------------------------------------------------


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def schema_keys(cls: type = TrainSpec, prefix: str = "") -> dict[str, Any]:
    """Every dotted leaf key of the schema mapped to its type (sections are descended into)."""
    out: dict[str, Any] = {}
    for name, tp in _field_types(cls).items():
        key = prefix + name
        if dataclasses.is_dataclass(tp):
            out.update(schema_keys(tp, key + "."))
        else:
            out[key] = tp
    return out


def _is_section(key: str) -> type | None:
    cls: Any = TrainSpec
    for part in key.split("."):
        hints = _field_types(cls)
        if part not in hints:
            return None
        cls = hints[part]
    return cls if dataclasses.is_dataclass(cls) else None


def _enum_of(tp: Any) -> type[enum.Enum] | None:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        for a in typing.get_args(tp):
            if isinstance(a, type) and issubclass(a, enum.Enum):
                return a
    return None


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return "one of " + ", ".join(m.name for m in tp)
        return tp.__name__
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1:
        return _type_name(args[0]) + " or null"
    return str(tp).replace("typing.", "")


# ---------------------------------------------------------------------------------------------
# YAML reading (libyaml when present; scalars resolved as OmegaConf does)
# ---------------------------------------------------------------------------------------------

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SpecLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader with OmegaConf's scalar rules: ``1e3`` is a float, no timestamps, and a
    duplicate key is an error (omegaconf._utils.get_yaml_loader)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value}", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))
_SpecLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in _SpecLoader.yaml_implicit_resolvers.items()}


def _load_data(path: Path) -> Any:
    """The plain data of a YAML file (raises yaml.YAMLError / OSError / UnicodeError)."""
    return _load_cached(str(path.resolve()), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, _mtime_ns: int) -> Any:
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_SpecLoader)  # noqa: S506


# ---------------------------------------------------------------------------------------------
# YAML source map
# ---------------------------------------------------------------------------------------------


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
        node = yaml.compose(text, Loader=_BaseLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        return bad(f"{shown} is not valid YAML: {problem}", line)
    except RecursionError:
        return bad(f"{shown} is nested too deeply")
    if node is not None and not isinstance(node, yaml.MappingNode):
        return bad(f"{shown} must be a YAML mapping of sections (model:, cluster:, ...)", 1)
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

    # --- parse overrides (Hydra's grammar) ------------------------------------------------
    from hydra.errors import HydraException

    group_overrides: list[str] = []
    key_overrides: list[tuple[str, Any, int]] = []
    parser = _override_parser() if overrides else None
    for i, text in enumerate(overrides):
        try:
            assert parser is not None
            ov = parser.parse_overrides([text])[0]
            value = ov.value()
        except HydraException as e:
            msg = str(e).splitlines()[0]
            diags.append(_at(diag(R.BAD_OVERRIDE, f"cannot parse override '{text}': {msg}",
                                  "<command line>", fix="write overrides as KEY=VALUE, e.g. "
                                  "parallel.tp=4 or model=llama3-8b"), COMMAND_LINE, i + 1))
            continue
        key = ov.key_or_group
        if ov.is_delete() or ov.package:
            diags.append(_at(diag(R.BAD_OVERRIDE, f"override '{text}' is not supported",
                                  key, fix="use plain KEY=VALUE overrides"), COMMAND_LINE, i + 1))
        elif key in GROUPS and isinstance(value, str):
            # A group the spec's defaults list does not name is appended (Hydra's '+group='),
            # after _self_: the chosen preset then replaces the spec's own section values.
            listed = {g for g, _ in _defaults_list(node)}
            group_overrides.append(f"{key}={value}" if key in listed else f"+{key}={value}")
        else:
            key_overrides.append((key, value, i + 1))
    if diags:
        return Loaded(shown, None, diags)

    # --- compose with Hydra ---------------------------------------------------------------
    cfg, presets, comp_diags = _compose(spec_path, shown, node, group_overrides)
    if comp_diags:
        from_cli = {o.lstrip("+").split("=", 1)[0]: i for i, o in enumerate(group_overrides)}
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
            pfile = presets[group]
            where.update(_preset_lines(pfile, group, Path(pfile).stat().st_mtime_ns))
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

    spec, schema_diags = to_spec(cfg, where)
    located = [_locate_one(d, where) for d in schema_diags]
    return Loaded(shown, spec, located, where, frozenset(explicit),
                  {g: _shown_preset(p) for g, p in presets.items()})


@functools.lru_cache(maxsize=256)
def _preset_lines(pfile: str, group: str, _mtime_ns: int) -> dict[str, Location]:
    pnode, _ = _read_yaml(Path(pfile), pfile)
    plines: dict[str, Location] = {}
    _node_lines(pnode, group + ".", _shown_preset(pfile), plines)
    return plines


@functools.cache
def _override_parser() -> Any:
    """Hydra's override grammar parser (building it takes a while, so once per process)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


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


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """OmegaConf's merge on plain containers: mappings merge key by key, anything else replaces."""
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def _has_interpolation(obj: Any) -> bool:
    if isinstance(obj, str):
        return "${" in obj
    if isinstance(obj, dict):
        return any(_has_interpolation(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_interpolation(v) for v in obj)
    return False


def _fast_compose(
    spec_path: Path, shown: str, node: yaml.Node | None, group_overrides: list[str]
) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]] | None:
    """Hydra's composition for the common case, without Hydra's own config tree (~20x faster).

    Applies when the spec's defaults list holds only ``_self_`` and ``group: option`` entries of
    the model/cluster groups, no preset has a defaults list of its own, and the spec sets no
    ``hydra:`` key. The result equals Hydra's: the defaults list in order (``_self_`` last unless
    placed), group overrides replacing an entry or appending it (``+group=``). Otherwise returns
    None and :func:`_compose` runs Hydra itself.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(node, yaml.MappingNode):
        return None
    raw_defaults = None
    for k, v in node.value:
        key = getattr(k, "value", None)
        if key == "hydra":
            return None
        if key == "defaults":
            raw_defaults = v
    if raw_defaults is not None:
        if not isinstance(raw_defaults, yaml.SequenceNode):
            return None
        for item in raw_defaults.value:
            simple = isinstance(item, yaml.ScalarNode) and item.value == "_self_"
            pair = (isinstance(item, yaml.MappingNode) and len(item.value) == 1
                    and isinstance(item.value[0][1], yaml.ScalarNode)
                    and str(item.value[0][0].value) in GROUPS)
            if not (simple or pair):
                return None
    order = [[g, o] for g, o in _defaults_list(node)]
    for ov in group_overrides:
        g, _, opt = ov.partition("=")
        hit = [e for e in order if e[0] == g.lstrip("+")]
        if hit:
            hit[0][1] = opt
        else:
            order.append([g.lstrip("+"), opt])
    spec_dir = spec_path.resolve().parent
    try:
        own = copy.deepcopy(_load_data(spec_path))
    except (yaml.YAMLError, ValueError, TypeError, OSError):
        return None  # let Hydra report it
    if not isinstance(own, dict):
        return None
    own.pop("defaults", None)
    merged: dict[str, Any] = {}
    presets: dict[str, str] = {}
    for group, opt in order:
        if group == "_self_":
            _merge(merged, own)
            continue
        if opt is None or str(opt) in ("null", "None"):
            continue
        found = next((b / group / f"{opt}.yaml" for b in (spec_dir, conf_dir())
                      if (b / group / f"{opt}.yaml").is_file()), None)
        if found is None:
            options = sorted({p.stem for b in (spec_dir, conf_dir())
                              for p in (b / group).glob("*.yaml")})
            msg = f"{group} preset '{opt}' does not exist{did_you_mean(str(opt), options)}"
            d = diag(R.UNKNOWN_CHOICE, msg, group, fix=f"use one of: {', '.join(options)}")
            return {}, {}, [_at(d, shown, None)]
        try:
            data = _load_data(found)
        except (yaml.YAMLError, ValueError, TypeError, OSError):
            return None
        if not isinstance(data, dict) or "defaults" in data:
            return None
        presets[group] = str(found)
        _merge(merged, {group: data})
    if not _has_interpolation(merged):
        return merged, presets, []
    try:
        container = OmegaConf.to_container(OmegaConf.create(merged), resolve=True)
    except (OmegaConfBaseException, ValueError, TypeError, RecursionError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        d = diag(R.SPEC_UNREADABLE, f"cannot compose {shown}: {first}", "defaults",
                 fix="check the ${...} interpolations and the YAML structure")
        return {}, {}, [_at(d, shown, None)]
    assert isinstance(container, dict)
    return container, presets, []


def _compose(
    spec_path: Path, shown: str, node: yaml.Node | None, group_overrides: list[str]
) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
    """Compose the spec: the fast path when it applies, else Hydra's compose API. Returns the
    plain container, the preset file per group, and diagnostics."""
    fast = _fast_compose(spec_path, shown, node, group_overrides)
    if fast is not None:
        return fast
    return _hydra_compose(spec_path, shown, node, group_overrides)


def _hydra_compose(
    spec_path: Path, shown: str, node: yaml.Node | None, group_overrides: list[str]
) -> tuple[dict[str, Any], dict[str, str], list[Diagnostic]]:
    """Run Hydra's compose API; returns the plain container, the preset file per group, diagnostics."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    spec_dir = spec_path.resolve().parent
    tmp = None
    cfg_dir, name = spec_dir, spec_path.stem
    if spec_path.suffix != ".yaml":
        # Hydra only finds NAME.yaml: present the file under that name, keep its folder searchable.
        tmp = tempfile.mkdtemp(prefix="trainc-")
        shutil.copyfile(spec_path, Path(tmp) / "spec.yaml")
        cfg_dir, name = Path(tmp), "spec"
    search = [f"file://{spec_dir}"] if tmp else []
    search.append(f"file://{conf_dir()}")
    hydra_overrides = [*group_overrides, "hydra.searchpath=[" + ",".join(search) + "]"]

    def fail(rule: R.Rule, msg: str, key: str, fix: str | None) -> tuple[dict, dict, list]:
        return {}, {}, [_at(diag(rule, msg, key, fix=fix), shown, None)]

    try:
        GlobalHydra.instance().clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=str(cfg_dir), version_base="1.3"):
                composed = compose(config_name=name, overrides=hydra_overrides,
                                   return_hydra_config=True)
            runtime = composed.hydra.runtime.choices
            choices = {g: runtime.get(g) for g in GROUPS if g in runtime}
            raw = OmegaConf.to_container(composed, resolve=False)
            assert isinstance(raw, dict)
            raw.pop("hydra", None)
            container = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    except MissingConfigException as e:
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
    except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError,
            KeyError, RecursionError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        return fail(R.SPEC_UNREADABLE, f"cannot compose {shown}: {first}", "defaults",
                    "check the defaults: list (e.g. '- model: llama2-70b') and the YAML structure")
    finally:
        GlobalHydra.instance().clear()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if not isinstance(container, dict):
        return fail(R.SPEC_UNREADABLE, f"{shown} must be a mapping", "<file>", None)
    presets = {}
    for group, opt in choices.items():
        if opt is None:
            continue
        for base in (spec_dir, conf_dir()):
            f = base / group / f"{opt}.yaml"
            if f.exists():
                presets[group] = str(f)
                break
    return container, presets, []


def to_spec(cfg: dict[str, Any], where: dict[str, Location]) -> tuple[TrainSpec | None,
                                                                      list[Diagnostic]]:
    """Check a composed container against the schema and build the :class:`TrainSpec`.

    Every unknown key (TRC002, with did-you-mean), wrong type (TRC001), bad enum value (TRC004) and
    missing required key (TRC003) is reported; the spec is None if any was found. Conversions
    follow OmegaConf's for structured configs (int -> float, number -> str, enum by name), minus
    its lenient ones that hide mistakes (bool, float or quoted string for an int).
    """
    known = schema_keys()
    diags: list[Diagnostic] = []
    values: dict[str, Any] = {}
    sections = _sections()

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            key = prefix + str(k)
            if key in known:
                set_leaf(key, v)
            elif key in sections:
                if isinstance(v, dict):
                    walk(v, key + ".")
                elif v is not None:
                    diags.append(diag(R.TYPE_MISMATCH, f"{key} must be a mapping of keys, got "
                                      f"{_show(v)}", key, fix=f"write {key}: as a section"))
            else:
                cands = list(known) + sorted(sections)
                short = [c for c in cands if c.startswith(prefix)] if prefix else cands
                hint = did_you_mean(key, cands) or did_you_mean(str(k), [
                    c.rsplit(".", 1)[-1] for c in short])
                diags.append(diag(R.UNKNOWN_KEY, f"{key} is not a spec key{hint}", key,
                                  fix=f"remove {key} or correct its spelling"))

    def set_leaf(key: str, value: Any) -> None:
        tp = known[key]
        e_type = _enum_of(tp)
        if e_type is not None and isinstance(value, str) and value not in e_type.__members__:
            choices = list(e_type.__members__)
            diags.append(diag(R.UNKNOWN_CHOICE, f"{key} = '{value}' is not one of "
                              f"{', '.join(choices)}{did_you_mean(value, choices)}", key,
                              fix=f"set {key} to one of {', '.join(choices)}"))
            return
        if _rejects_bool(tp, value) or _rejects_float(tp, value):
            diags.append(_type_diag(key, tp, value))
            return
        ok, conv = _convert(tp, value)
        if ok:
            values[key] = conv
        else:
            diags.append(_type_diag(key, tp, value))

    walk(cfg, "")
    spec = _build(TrainSpec, "", values, diags)
    if diags:
        return None, diags
    assert isinstance(spec, TrainSpec)
    return spec, []


@functools.cache
def _sections() -> frozenset[str]:
    keys = schema_keys()
    out = set()
    for k in keys:
        parts = k.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(out)


_MISSING = object()


def _build(cls: type, prefix: str, values: dict[str, Any], diags: list[Diagnostic]) -> Any:
    """Instantiate a schema dataclass from converted leaf values; report required keys left unset."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        tp = _field_types(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = _build(tp, key + ".", values, diags)  # type: ignore[arg-type]
        elif key in values:
            kwargs[f.name] = values[key]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            diags.append(diag(R.MISSING_VALUE, f"{key} is required and has no value", key,
                              fix=f"set {key} in the spec, a preset, or as {key}=VALUE"))
            kwargs[f.name] = _MISSING
    if any(v is _MISSING for v in kwargs.values()):
        return None
    return cls(**kwargs)


def _convert(tp: Any, value: Any) -> tuple[bool, Any]:
    """(ok, value converted to the field type ``tp``)."""
    args = typing.get_args(tp)
    if value is None:
        return (type(None) in args), None
    if args and type(None) in args and len(args) == 2:
        tp = next(a for a in args if a is not type(None))
        args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return True, value
        return (True, tp[value]) if isinstance(value, str) and value in tp.__members__ \
            else (False, None)
    if tp is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return True, value.lower() == "true"
        return False, None
    if tp is int:
        return (True, value) if isinstance(value, int) and not isinstance(value, bool) \
            else (False, None)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str):
            try:
                return True, float(value)
            except ValueError:
                return False, None
        return False, None
    if tp is str:
        if isinstance(value, str):
            return True, value
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return (True, str(value)) if ok else (False, None)
    if origin is list and isinstance(value, list):
        conv = [_convert(args[0], v) for v in value]
        return (all(ok for ok, _ in conv), [v for _, v in conv])
    if origin is dict and isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, bool):
                v = str(v).lower()
            ok, cv = _convert(args[1], v)
            if not ok:
                return False, None
            out[str(k)] = cv
        return True, out
    return False, None


def _rejects_bool(tp: Any, value: Any) -> bool:
    # OmegaConf accepts True for int/float fields; a bool where a number is meant is a mistake.
    base = {a for a in typing.get_args(tp)} or {tp}
    return isinstance(value, bool) and bool(base & {int, float}) and bool not in base


def _rejects_float(tp: Any, value: Any) -> bool:
    # OmegaConf converts 8.0 to 8 and "8" to 8 for int fields; a float or a quoted string is never
    # a valid count (a quoted number usually means a template left a value unresolved).
    base = {a for a in typing.get_args(tp)} or {tp}
    return isinstance(value, (float, str)) and int in base and not base & {float, str}


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_diag(key: str, tp: Any, value: Any) -> Diagnostic:
    return diag(R.TYPE_MISMATCH, f"{key} must be {_type_name(tp)}, got {_show(value)} "
                f"({type(value).__name__})", key, fix=f"set {key} to a value of type "
                f"{_type_name(tp)}", expected=_type_name(tp), got=_show(value))
