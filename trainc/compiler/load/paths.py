"""Where presets live and how a file is named: the package's config tree (``trainc/conf``), its
groups, and a preset's or a diagnostic's path as diagnostics show it and as ``plan.json``
records it (relative to the spec's folder, so the artifacts do not depend on the checkout)."""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path

#: Hydra config groups shipped in ``trainc/conf``.
GROUPS = ("model", "cluster")


@cache
def conf_dir() -> Path:
    """The package's Hydra config tree (``trainc/conf``); looked up once per process (the
    loader asks for it several times per spec)."""
    return Path(str(resources.files("trainc") / "conf"))


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
