"""Bad input through the command line: exit code 2, a diagnostic naming the key or the file, no
traceback, nothing written (issue 7). One subprocess per command (a representative set); the
hypothesis fuzz of the same front end runs in-process (test_fuzz.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.fuzzing import VALID

GOOD = yaml.safe_dump(VALID, sort_keys=False)


def _with(**sections: object) -> str:
    cfg = {**VALID}
    for key, value in sections.items():
        section, _, leaf = key.partition("__")
        if leaf:
            cfg[section] = {**cfg.get(section, {}), leaf: value}
        else:
            cfg[section] = value
    return yaml.safe_dump(cfg, sort_keys=False)


# name -> (spec bytes or None for a directory, overrides, text the diagnostic must contain)
CASES: dict[str, tuple[bytes | None, list[str], str]] = {
    "malformed-yaml": (b"model: [\n  tp: 2\n", [], "spec.yaml"),
    "empty-file": (b"", [], "is empty: a spec names at least the model"),
    "top-level-list": (b"- model\n- cluster\n", [], "spec.yaml"),
    "top-level-scalar": (b"42\n", [], "spec.yaml"),
    "binary-junk": (bytes(range(256)) * 4, [], "spec.yaml"),
    "non-utf8": (GOOD.encode() + b"name: \xff\xfe\n", [], "UTF-8"),
    "deep-nesting": (b"a: " + b"[" * 20000 + b"]" * 20000 + b"\n", [], "nested too deeply"),
    "self-anchor": (b"a: &a [*a]\n", [], "spec.yaml"),
    "wrong-type": (_with(parallel__tp="two").encode(), [], "parallel.tp"),
    "float-for-int": (_with(parallel__tp=2.0).encode(), [], "parallel.tp"),
    "zero": (_with(parallel__pp=0).encode(), [], "parallel.pp"),
    "negative": (_with(training__global_batch_size=-8).encode(), [], "training.global_batch_size"),
    "huge-number": (_with(model__num_layers=10**30).encode(), [], "model.num_layers"),
    "nan": (
        GOOD.replace("global_batch_size: 32", "global_batch_size: .nan").encode(),
        [],
        "training.global_batch_size",
    ),
    "unknown-section": (_with(optimiser={"lr": 1}).encode(), [], "optimiser"),
    "unknown-key": (_with(parallel__tpp=2).encode(), [], "parallel.tpp"),
    "unknown-preset": (GOOD.replace("llama3-8b", "llama9-1t").encode(), [], "llama9-1t"),
    "section-as-scalar": (_with(launch=5).encode(), [], "launch"),
    "long-string": (_with(name="x" * 200_000).encode(), [], "name"),
    "partition-newline": (
        _with(launch={"partition": "gpu\ntouch /tmp/x"}).encode(),
        [],
        "launch.partition",
    ),
    "broken-override": (GOOD.encode(), ["parallel.tp=[1"], "parallel.tp=[1"),
    "override-no-key": (GOOD.encode(), ["=4"], "no key"),
    "override-unknown-key": (GOOD.encode(), ["parallel.tpp=4"], "parallel.tpp"),
    "override-unknown-preset": (GOOD.encode(), ["model=nope"], "nope"),
    "override-huge-int": (GOOD.encode(), ["parallel.tp=" + "9" * 5000], "parallel.tp"),
    "override-deep": (GOOD.encode(), ["name=" + "[" * 3000 + "]" * 3000], "override"),
    "directory": (None, [], "directory"),
}


@pytest.mark.parametrize("command", ["lint", "compile"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_exits_2_with_a_diagnostic(tmp_path: Path, name: str, command: str) -> None:
    data, overrides, needle = CASES[name]
    spec = tmp_path / "spec.yaml"
    if data is None:
        spec.mkdir()
    else:
        spec.write_bytes(data)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "trainc", command, str(spec), *overrides]
    if command == "compile":
        args += ["-o", str(out)]
    env = dict(os.environ, TRAINC_NO_CACHE="1")
    r = subprocess.run(args, capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert needle in r.stderr + r.stdout, r.stderr[-3000:]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod 000 does not stop reading")
def test_unreadable_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD)
    spec.chmod(0)
    r = subprocess.run(
        [sys.executable, "-m", "trainc", "compile", str(spec), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "spec.yaml" in r.stderr
    assert not (tmp_path / "out").exists()


def test_closed_stdout_is_not_an_internal_error(tmp_path: Path) -> None:
    """`trainc lint --format json ... | head`: the reader goes away; no traceback, no exit 3."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "trainc", "lint", str(spec), "--format", "json"],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(w)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr
