"""Whole-process wall time of `trainc compile` on the 405B preset and `trainc lint` over 100 specs.

Goals: compile <= 0.3 s, lint of 100 specs <= 2 s on a 2-core machine. Prints figures;
asserts nothing (machines are noisy). Run: .venv/bin/python bench/compile_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC_405B = """\
defaults:
  - model: llama3.1-405b
  - cluster: dgx-h100
  - _self_
name: llama31-405b
cluster: {num_nodes: 2048}
parallel: {tp: 8, pp: 16, vpp: 2, cp: 1}
training: {micro_batch_size: 1, global_batch_size: 16384}
"""


def wall(cmd: list[str], repeat: int = 5) -> list[float]:
    """Wall-clock seconds of ``repeat`` runs of ``cmd`` (each a fresh process)."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=False, capture_output=True)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    trainc = [sys.executable, "-m", "trainc"]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "llama405b.yaml"
        spec.write_text(SPEC_405B)
        times = wall([*trainc, "compile", str(spec), "-o", f"{tmp}/out", "--force"])
        print(
            f"compile 405B preset: median {statistics.median(times):.3f} s, "
            f"min {min(times):.3f} s over {len(times)} runs (goal <= 0.3 s)"
        )
        specs = []
        for i in range(100):
            p = Path(tmp) / f"s{i:03d}.yaml"
            p.write_text(SPEC_405B.replace("tp: 8", f"tp: {(1, 2, 4, 8)[i % 4]}"))
            specs.append(str(p))
        times = wall([*trainc, "lint", *specs], repeat=3)
        print(
            f"lint 100 specs: median {statistics.median(times):.3f} s, "
            f"min {min(times):.3f} s over {len(times)} runs (goal <= 2 s)"
        )
        times = wall([sys.executable, "-c", "pass"])
        print(f"(python startup alone: {statistics.median(times):.3f} s)")


if __name__ == "__main__":
    main()
