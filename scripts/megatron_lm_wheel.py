"""The megatron-core wheel of trainc's target Megatron-LM version, unpacked for the oracle tests.

    .venv/bin/python scripts/megatron_lm_wheel.py [--version 0.19.0] [--cache DIR]

Prints the folder that goes on ``PYTHONPATH`` (it holds ``megatron/core`` and, since 0.17,
``megatron/training``). The version defaults to ``trainc.compiler.plan.MEGATRON_LM_VERSION``
(``core_v0.19.0`` -> ``0.19.0``); the cache to ``.venv/trainc-oracles/`` of this checkout
(ignored by git, kept between runs). The wheel needs Python >= 3.12 and is never installed:
``pip download --no-deps --only-binary=:all: --python-version 3.12`` fetches it from the
configured index, it is unzipped into ``<cache>/megatron-core-<version>/`` and reused on later
runs (a ``.complete`` file marks a finished unpack; a half-finished one is never used).
Exits 1 with the reason when it cannot be downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO / ".venv" / "trainc-oracles"
MARKER = ".complete"


class WheelUnavailable(RuntimeError):
    """The wheel could not be downloaded or unpacked (the message says why)."""


def target_version() -> str:
    """megatron-core version of ``MEGATRON_LM_VERSION`` (``core_v0.19.0`` -> ``0.19.0``)."""
    sys.path.insert(0, str(REPO))
    from trainc.compiler.plan import MEGATRON_LM_VERSION

    return MEGATRON_LM_VERSION.removeprefix("core_v")


def ensure_wheel(
    version: str | None = None, cache: Path = DEFAULT_CACHE, *, timeout: float = 300.0
) -> Path:
    """The unpacked wheel folder for ``version`` (downloaded and unzipped on first use).

    Raises :class:`WheelUnavailable` when pip cannot fetch it (offline, no such version) or the
    wheel lacks ``megatron/training/arguments.py``.
    """
    version = version or target_version()
    dest = cache / f"megatron-core-{version}"
    if (dest / MARKER).is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".megatron-core-{version}-") as tmp:
        dl, tree = Path(tmp) / "download", Path(tmp) / "tree"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"megatron-core=={version}",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(dl),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise WheelUnavailable(f"pip download megatron-core=={version}: {e}") from e
        wheels = sorted(dl.glob("megatron_core-*.whl")) if dl.is_dir() else []
        if proc.returncode != 0 or not wheels:
            tail = [
                ln[:300]
                for ln in (proc.stderr or proc.stdout).splitlines()
                if ln.strip() and "is ignored" not in ln
            ][-3:]
            raise WheelUnavailable(
                f"pip download megatron-core=={version} failed "
                f"(exit {proc.returncode}): {' | '.join(tail)}"
            )
        wheel = wheels[0]
        try:
            with zipfile.ZipFile(wheel) as z:
                z.extractall(tree)
        except (OSError, zipfile.BadZipFile) as e:
            raise WheelUnavailable(f"cannot unpack {wheel.name}: {e}") from e
        if not (tree / "megatron" / "training" / "arguments.py").is_file():
            raise WheelUnavailable(
                f"{wheel.name} has no megatron/training/arguments.py "
                "(megatron-core ships megatron.training since 0.17)"
            )
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (tree / MARKER).write_text(f"{wheel.name} sha256={digest}\n", encoding="utf-8")
        if dest.exists():  # an unfinished earlier unpack (no marker), or a concurrent one
            if (dest / MARKER).is_file():
                return dest
            shutil.rmtree(dest)
        try:
            os.replace(tree, dest)
        except OSError:
            if not (dest / MARKER).is_file():
                raise
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", help="megatron-core version (default: trainc's target)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    opts = ap.parse_args(argv)
    try:
        print(ensure_wheel(opts.version, opts.cache))
    except WheelUnavailable as e:
        print(f"megatron_lm_wheel: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
