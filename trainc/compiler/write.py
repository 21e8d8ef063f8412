"""write: put the artifacts on disk atomically, with ``manifest.json``.

Everything is written into a temporary sibling folder and renamed into place, so an error or a
kill never leaves a half-written OUTDIR. Scripts (``*.sh``) are made executable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trainc.compiler.plan import canonical_json
from trainc.errors import LaunchError


class OutdirNotEmpty(LaunchError):
    """OUTDIR exists, is not empty, and ``force`` was not given."""


def manifest(files: dict[str, str], plan: dict[str, Any]) -> str:
    """``manifest.json``: sha256 and size of each file, the spec hash and the versions."""
    entries = {
        name: {"sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text.encode())}
        for name, text in sorted(files.items())
    }
    return canonical_json({
        "files": entries,
        "spec_hash": plan["spec_hash"],
        "trainc_version": plan["trainc_version"],
        "target_versions": plan["target_versions"],
    })


def write_artifacts(files: dict[str, str], plan: dict[str, Any], outdir: str | os.PathLike[str],
                    *, force: bool = False) -> list[str]:
    """Write ``files`` plus ``manifest.json`` into ``outdir`` atomically; returns the file names.

    Raises :class:`OutdirNotEmpty` if ``outdir`` has content and ``force`` is false, and
    :class:`LaunchError` if the file system refuses.
    """
    out = Path(outdir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutdirNotEmpty(f"{out} exists and is not empty; pass --force to replace it")
    all_files = dict(files)
    all_files["manifest.json"] = manifest(files, plan)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            for name, text in sorted(all_files.items()):
                path = tmp / name
                path.write_text(text, encoding="utf-8")
                os.chmod(path, 0o755 if name.endswith(".sh") else 0o644)
            os.chmod(tmp, 0o755)
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
                os.rename(out, old / "x")
                os.rename(tmp, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as e:
        raise LaunchError(f"cannot write {out}: {e.strerror or e}") from e
    return sorted(all_files)
