"""write: put the artifacts on disk atomically, with ``manifest.json``.

Everything is written into a temporary sibling folder and renamed into place, so an error or a
kill never leaves a half-written OUTDIR. Scripts (``*.sh``) are made executable.

What ``--force`` replaces (:func:`check_outdir`): only a folder that a previous ``trainc compile``
wrote, i.e. one whose ``manifest.json`` lists every other entry of the folder, each a plain file
with the content the manifest records. A folder holding anything else (a user's file, a file
edited after compile, the ``checkpoints/`` a training run saved there, Slurm's ``*.out`` logs) is
refused, so are, with or without ``--force``: a non-directory (file, FIFO, device node), a
symbolic link, a path whose last component is ``.`` or ``..``, the working folder and its
ancestors, and the spec file and its ancestors.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainc.compiler.spec_json import canonical_json
from trainc.errors import InternalError, LaunchError


class OutdirRefused(LaunchError):
    """OUTDIR is not a place trainc may write or replace (exit 2: the user chose it)."""

    exit_code = 2


class OutdirNotEmpty(OutdirRefused):
    """OUTDIR exists, is not empty, and ``force`` was not given (or it was, and OUTDIR is not a
    previous trainc output)."""


#: What ``--force`` may replace, said in every refusal.
FORCE_REPLACES = (
    "--force replaces only a folder written by trainc compile, whose manifest.json "
    "lists everything in it"
)


def _listed_problem(out: Path) -> str | None:
    """Why ``out`` (an existing, non-empty folder) is not a previous trainc output, or None."""
    mpath = out / "manifest.json"
    if mpath.is_symlink() or not mpath.is_file():
        return "has no manifest.json written by trainc compile"
    try:
        data = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return "has a manifest.json that trainc did not write (not readable as its JSON)"
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not {"spec_hash", "trainc_version"} <= set(data):
        return "has a manifest.json that trainc did not write (no files/spec_hash/trainc_version)"
    unlisted, changed = [], []
    for entry in sorted(out.iterdir(), key=lambda e: e.name):
        if entry.name == "manifest.json":
            continue
        rec = files.get(entry.name)
        if rec is None or entry.is_symlink() or not entry.is_file():
            unlisted.append(entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else ""))
            continue
        want = rec.get("sha256") if isinstance(rec, dict) else None
        if hashlib.sha256(entry.read_bytes()).hexdigest() != want:
            changed.append(entry.name)
    if unlisted:
        more = f" and {len(unlisted) - 5} more" if len(unlisted) > 5 else ""
        ckpt = (
            " (checkpoints/ of a training run are never replaced)"
            if "checkpoints/" in unlisted
            else ""
        )
        return f"holds {', '.join(unlisted[:5])}{more}, which its manifest.json does not list{ckpt}"
    if changed:
        return f"holds {', '.join(changed[:5])}, changed after trainc wrote it"
    return None


def check_outdir(
    outdir: str | os.PathLike[str],
    *,
    force: bool = False,
    keep: tuple[str | os.PathLike[str], ...] = (),
) -> Path:
    """Refuse an OUTDIR that trainc must not write or replace; returns it as a :class:`Path`.

    Always refused (:class:`OutdirRefused`): a last path component ``.``, ``..`` or empty, a
    symbolic link, an existing non-directory, the working folder or an ancestor of it, and any
    path in ``keep`` (the spec file) or an ancestor of one. A non-empty folder is refused
    (:class:`OutdirNotEmpty`) without ``force``, and with ``force`` unless it is a previous
    trainc output (see the module docstring). Reads the folder; writes nothing.
    """
    text = os.fspath(outdir)
    leaf = os.path.basename(text.rstrip("/" + os.sep))
    if leaf in ("", ".", ".."):
        raise OutdirRefused(
            f"OUTDIR {text!r} names a folder by '.' or '..' (or is the root); "
            "give it a name of its own, e.g. -o out/NAME"
        )
    out = Path(text)
    if out.is_symlink():
        raise OutdirRefused(
            f"{out} is a symbolic link; trainc does not replace links (give "
            "the folder it points to, or another -o)"
        )
    if out.exists() and not out.is_dir():
        raise OutdirRefused(
            f"{out} exists and is not a folder (a file, FIFO or device); trainc "
            f"never replaces it ({FORCE_REPLACES})"
        )
    real = out.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        what = "is the working folder" if real == cwd else "holds the working folder"
        raise OutdirRefused(
            f"{out} {what}; trainc never replaces it ({FORCE_REPLACES}); "
            "choose another -o, e.g. out/NAME"
        )
    for k in keep:
        kr = Path(k).resolve()
        if real == kr or real in kr.parents:
            raise OutdirRefused(
                f"{out} {'is' if real == kr else 'holds'} the spec {k}; trainc "
                f"never replaces it ({FORCE_REPLACES})"
            )
    if not out.exists() or not any(out.iterdir()):
        return out
    if not force:
        raise OutdirNotEmpty(
            f"{out} exists and is not empty; pass --force to replace it ({FORCE_REPLACES})"
        )
    problem = _listed_problem(out)
    if problem:
        raise OutdirNotEmpty(
            f"--force refused: {out} {problem}; {FORCE_REPLACES}. Move those "
            "files away or choose another -o"
        )
    return out


def manifest(files: dict[str, str], plan: dict[str, Any]) -> str:
    """``manifest.json``: sha256 and size of each file, the spec hash and the versions."""
    entries = {
        name: {"sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text.encode())}
        for name, text in sorted(files.items())
    }
    return canonical_json(
        {
            "files": entries,
            "spec_hash": plan["spec_hash"],
            "trainc_version": plan["trainc_version"],
            "target_versions": plan["target_versions"],
        }
    )


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


def _strict_json(name: str, text: str) -> None:
    """Raise :class:`InternalError` if a JSON artifact holds NaN or Infinity (Python's json
    writes them; RFC 8259 and every other reader refuse them). The schema check refuses
    non-finite inputs (TRC008), so one here comes from a computation: a bug."""

    def refuse(constant: str) -> None:
        raise InternalError(
            f"{name} would hold {constant}, which is not JSON (a bug in trainc: "
            "a computed value is not finite)"
        )

    json.loads(text, parse_constant=refuse)


def _swap(tmp: Path, out: Path, old: Path) -> None:
    """Rename ``tmp`` to ``out`` through ``old`` (an empty folder), leaving ``old`` removed on
    every path; if the new folder cannot take its place, the previous OUTDIR is put back (and
    should even that fail, it is left in ``old``, named in the error, not deleted)."""
    moved = False
    try:
        os.rename(out, old / "x")
        moved = True
        os.rename(tmp, out)
    except BaseException:
        if moved:
            try:
                os.rename(old / "x", out)  # put the previous OUTDIR back
            except OSError as e:
                raise LaunchError(
                    f"cannot write {out}, nor put the previous one back: it is in "
                    f"{old / 'x'} ({e.strerror or e})"
                ) from e
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_artifacts(
    files: dict[str, str],
    plan: dict[str, Any],
    outdir: str | os.PathLike[str],
    *,
    force: bool = False,
    keep: tuple[str | os.PathLike[str], ...] = (),
) -> list[str]:
    """Write ``files`` plus ``manifest.json`` into ``outdir`` atomically; returns the file names.

    Everything goes into ``.<name>.tmp-<pid>-*`` next to OUTDIR, which is renamed into place;
    an error, SIGTERM or SIGHUP removes it (and leaves OUTDIR as it was), and temporary folders
    of killed runs are swept first. Raises :class:`OutdirRefused` / :class:`OutdirNotEmpty` for
    an OUTDIR that :func:`check_outdir` refuses (``keep``: paths, such as the spec, that must
    survive), and :class:`LaunchError` if the file system refuses.
    """
    try:
        out = check_outdir(outdir, force=force, keep=keep)
    except OSError as e:  # a folder that cannot be listed or a manifest that cannot be read
        raise LaunchError(f"cannot inspect {os.fspath(outdir)}: {e.strerror or e}") from e
    all_files = dict(files)
    all_files["manifest.json"] = manifest(files, plan)
    for name, text in sorted(all_files.items()):
        if name.endswith(".json"):
            _strict_json(name, text)
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
                    _swap(tmp, out, old)
                else:
                    os.rename(tmp, out)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except _Terminated as e:
        raise LaunchError(
            f"interrupted by signal {e.args[0]} while writing {out}; nothing was written"
        ) from e
    except OSError as e:
        raise LaunchError(f"cannot write {out}: {e.strerror or e}") from e
    return sorted(all_files)
