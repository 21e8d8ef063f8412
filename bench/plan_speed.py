"""Planner speed and scale: a full search for the 405B preset on 2,048 nodes x 8 H100
and for the DeepSeek-V3-like MoE on 256 nodes x 8 H800. Goals: <= 2 s wall each (whole
process), >= 10^5 candidates evaluated, peak memory <= 200 MB. Prints figures; asserts nothing.

Run: .venv/bin/python bench/plan_speed.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPECS = {
    "llama3.1-405b on 2048 x dgx-h100": """\
defaults: [{model: llama3.1-405b}, {cluster: dgx-h100}, _self_]
name: plan-405b
cluster: {num_nodes: 2048}
training: {global_batch_size: 2048}
""",
    "deepseek-v3-like on 256 x hgx-h800": """\
defaults: [{model: deepseek-v3-like}, {cluster: hgx-h800}, _self_]
name: plan-dsv3
cluster: {num_nodes: 256}
training: {global_batch_size: 15360}
""",
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for title, text in SPECS.items():
            spec = Path(tmp) / "spec.yaml"
            spec.write_text(text)
            cmd = [sys.executable, "-m", "trainc", "plan", str(spec), "--format", "json"]
            subprocess.run(cmd, check=True, capture_output=True)  # warm the preset cache
            t = time.perf_counter()
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - t
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            out = json.loads(proc.stdout)
            best = out["candidates"][0]["parallel"]
            print(
                f"{title}: {out['num_candidates_evaluated']:,} candidates evaluated in "
                f"{wall:.2f} s (goal <= 2 s, >= 100,000); peak RSS so far {peak_mb:.0f} MB "
                f"(goal <= 200 MB); best tp={best['tp']} pp={best['pp']} cp={best['cp']} "
                f"ep={best['ep']} dp={best['dp']}"
            )


if __name__ == "__main__":
    main()
