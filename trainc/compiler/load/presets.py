"""Preset composition: Hydra composes the presets of a spec's defaults list (the package's
``conf/`` and ``model/``/``cluster/`` folders next to the spec), cached in memory and on disk so
that a warm ``trainc compile`` never imports Hydra; plus OmegaConf's merge rule on plain
containers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from trainc import __version__
from trainc.compiler.support.treecopy import copy_tree


@cache
def conf_dir() -> Path:
    """The package's Hydra config tree (``trainc/conf``); looked up once per process (the
    loader asks for it several times per spec)."""
    return Path(str(resources.files("trainc") / "conf"))


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
