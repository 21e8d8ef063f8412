"""Preset composition: Hydra composes the presets of a spec's defaults list (the package's
``conf/`` and ``model/``/``cluster/`` folders next to the spec), cached in memory and on disk so
that a warm ``trainc compile`` never imports Hydra; OmegaConf's merge rule on plain containers;
and the spec's composition (:func:`_compose`: the presets, the spec's own body at its
``_self_`` position, the group overrides), with Hydra's and OmegaConf's failures as
diagnostics."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import yaml

from trainc import __version__
from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag, did_you_mean
from trainc.compiler.load.paths import GROUPS, _shown_preset, conf_dir
from trainc.compiler.load.yaml_source import _defaults_list, _read_yaml, construct
from trainc.compiler.load.yaml_source import located_at as _at
from trainc.compiler.support.treecopy import copy_tree


def preset_names(group: str) -> list[str]:
    """Preset names of a config group, sorted."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


_PRESET_CACHE: dict[tuple[str, tuple[tuple[str, str | None], ...]], tuple[Any, dict[str, str]]] = {}


def _compose_presets(
    spec_dir: str, entries: tuple[tuple[str, str | None], ...]
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
    return copy_tree(cfg), dict(choices)


def _hydra_compose(
    spec_dir: str, entries: tuple[tuple[str, str | None], ...]
) -> tuple[dict[str, Any], dict[str, str]]:
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    name = "_trainc_presets_" + hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    ConfigStore.instance().store(
        name=name, node={"defaults": [{g: o} for g, o in entries] + ["_self_"]}
    )
    # quoted, so that a folder name holding ', ], =, spaces or non-ASCII is not Hydra grammar
    search = (
        f"hydra.searchpath=[{_hydra_quoted('file://' + spec_dir)},"
        f"{_hydra_quoted('file://' + str(conf_dir()))}]"
    )
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
    return {str(k): v for k, v in raw.items()}, choices


def _hydra_quoted(text: str) -> str:
    """``text`` as a single-quoted string of Hydra's override grammar (``\\'`` escapes a quote;
    backslashes before a quote or at the end are doubled, as the grammar requires)."""
    out = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + out.replace("'", "\\'") + "'"


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
