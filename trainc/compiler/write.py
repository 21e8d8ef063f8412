"""write: put the artifacts on disk atomically, with ``manifest.json``.

Everything is written into a temporary sibling folder and renamed into place, so an error or a
kill never leaves a half-written OUTDIR. Scripts (``*.sh``) are made executable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but not ours
        return True
    return True


def sweep_stale(out: Path) -> None:
    """Remove the temporary siblings (``.<name>.tmp-<pid>-*``, ``.<name>.old-<pid>-*``) that a
    killed ``trainc compile`` of the same OUTDIR left behind (their process is gone)."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(tmp|old)-(\d+)-")
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = pattern.match(entry.name)
        if m and int(m.group(2)) != os.getpid() and not _alive(int(m.group(2))):
            shutil.rmtree(entry, ignore_errors=True)


class _Terminated(BaseException):
    """SIGTERM/SIGHUP arrived while the artifacts were being written."""


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception while writing, so the temporary folder is
    removed (SIGKILL cannot be caught: :func:`sweep_stale` cleans up after it next time)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise _Terminated(signum)

    saved = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def write_artifacts(files: dict[str, str], plan: dict[str, Any], outdir: str | os.PathLike[str],
                    *, force: bool = False) -> list[str]:
    """Write ``files`` plus ``manifest.json`` into ``outdir`` atomically; returns the file names.

    Everything goes into ``.<name>.tmp-<pid>-*`` next to OUTDIR, which is renamed into place;
    an error, SIGTERM or SIGHUP removes it (and leaves OUTDIR as it was), and temporary folders
    of killed runs are swept first. Raises :class:`OutdirNotEmpty` if ``outdir`` has content and
    ``force`` is false, and :class:`LaunchError` if the file system refuses.
    """
    out = Path(outdir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutdirNotEmpty(f"{out} exists and is not empty; pass --force to replace it")
    all_files = dict(files)
    all_files["manifest.json"] = manifest(files, plan)
    pid = os.getpid()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(out)
        with _signals_raise():
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{pid}-", dir=out.parent))
            try:
                for name, text in sorted(all_files.items()):
                    path = tmp / name
                    path.write_text(text, encoding="utf-8")
                    os.chmod(path, 0o755 if name.endswith(".sh") else 0o644)
                os.chmod(tmp, 0o755)
                if out.exists():
                    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{pid}-", dir=out.parent))
                    os.rename(out, old / "x")
                    try:
                        os.rename(tmp, out)
                    except BaseException:
                        os.rename(old / "x", out)  # put the previous OUTDIR back
                        raise
                    finally:
                        shutil.rmtree(old, ignore_errors=True)
                else:
                    os.rename(tmp, out)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except _Terminated as e:
        raise LaunchError(f"interrupted by signal {e.args[0]} while writing {out}; nothing "
                          "was written") from e
    except OSError as e:
        raise LaunchError(f"cannot write {out}: {e.strerror or e}") from e
    return sorted(all_files)
