"""Shared helpers of the emit tests: compile golden cases or ad-hoc specs, stub launchers."""

from __future__ import annotations

import functools
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler.pipeline import compile_spec

REPO = Path(__file__).resolve().parents[2]
CASES_DIR = REPO / "tests" / "golden" / "cases"
CASE_NAMES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "spec.yaml").is_file())


@functools.cache
def compile_case(
    name: str, overrides: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, str]]:
    """(plan, files) of a golden case, with optional extra Hydra overrides."""
    # A path relative to the repository, so diagnostics in plan.json do not depend on where the
    # checkout lives.
    spec = (CASES_DIR / name / "spec.yaml").relative_to(REPO)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = compile_spec(spec, list(overrides))
    finally:
        os.chdir(cwd)
    assert result.ok, [d.to_json() for d in result.diagnostics]
    assert result.plan is not None
    return result.plan, dict(result.files)


def compile_ir(name: str, overrides: tuple[str, ...] = ()) -> Any:
    """The typed plan (:class:`trainc.compiler.ir.Plan`) of a golden case."""
    spec = (CASES_DIR / name / "spec.yaml").relative_to(REPO)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = compile_spec(spec, list(overrides))
    finally:
        os.chdir(cwd)
    assert result.ok and result.ir is not None
    return result.ir


def compile_dict(tmp: Path, spec: dict[str, Any], overrides: tuple[str, ...] = ()):
    """Compile a spec given as a dict (written to ``tmp/spec.yaml``); returns the CompileResult."""
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return compile_spec(path, list(overrides))


def write_files(outdir: Path, files: dict[str, str]) -> Path:
    """Write artifacts like trainc compile does (scripts executable)."""
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (outdir / name).write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            (outdir / name).chmod(0o755)
    return outdir


# Stubs record their argv (NUL-separated) and environment (NUL-separated) under $STUB_LOG.
_TORCHRUN = r"""#!/usr/bin/env bash
tag="${SLURM_NODEID:-${NODE_RANK:-x}}"
printf '%s\0' "$@" > "$STUB_LOG/torchrun.$tag.args"
env -0 > "$STUB_LOG/torchrun.$tag.env"
"""
_SRUN = r"""#!/usr/bin/env bash
# Emulates srun: one task per node, sequentially, each with its own SLURM_NODEID.
printf '%s\0' "$@" > "$STUB_LOG/srun.args"
nodes=1
while [[ $# -gt 0 && "$1" == --* ]]; do
  case "$1" in --nodes=*) nodes="${1#--nodes=}" ;; esac
  shift
done
for ((i = 0; i < nodes; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i "$@" || exit $?
done
"""
_SCONTROL = r"""#!/usr/bin/env bash
printf '%s\0' "$@" > "$STUB_LOG/scontrol.args"
if [[ "$1 $2" == "show hostnames" ]]; then printf 'gpu-node-017\ngpu-node-018\n'; fi
"""


def make_stubs(tmp: Path) -> tuple[Path, Path]:
    """A bin folder with stub ``torchrun``, ``srun`` and ``scontrol``; and the log folder."""
    bindir, log = tmp / "stubbin", tmp / "stublog"
    bindir.mkdir(exist_ok=True)
    log.mkdir(exist_ok=True)
    for name, text in (("torchrun", _TORCHRUN), ("srun", _SRUN), ("scontrol", _SCONTROL)):
        p = bindir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bindir, log


def run_script(
    script: Path, bindir: Path, log: Path, cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a generated script under bash with the stubs first on PATH and a clean environment."""
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(cwd), "STUB_LOG": str(log), "LANG": "C"}
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def read_nul(path: Path) -> list[str]:
    """A NUL-separated record written by a stub."""
    return path.read_text().split("\0")[:-1]


def read_env(path: Path) -> dict[str, str]:
    """The environment a stub saw."""
    return dict(item.split("=", 1) for item in read_nul(path))


def shellcheck() -> str | None:
    """Path of shellcheck, if installed."""
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        p = Path(d) / "shellcheck"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def parse_args_file(text: str) -> list[list[str]]:
    """megatron_args.txt as [flag] / [flag, value] items (what torchrun.sh does)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        flag, _, value = line.partition(" ")
        out.append([flag, value] if value else [flag])
    return out
