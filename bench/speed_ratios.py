"""The speed table as ratios against the bare import of trainc's own dependencies, in one run.

Each job runs as a fresh process, ``--repeat`` times (default 5); the figure is the median of the
child's CPU time (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas), which a
shared machine disturbs less than wall time; the median wall time is printed next to it. The
reference is ``python -c 'import hydra, omegaconf, jinja2, yaml'`` measured in the same run, so
the ratios compare across machines and loads.

Jobs and goals:

* ``compile`` of the bundled example (``examples/llama2-70b-dgx-a100.yaml``): goal <= 1.15x bare.
* ``lint`` of 1,000 small generated specs in one call: goal <= 2 s.
* ``plan`` of Llama 3.1 405B on 2,048 x 8 H100 (dgx-h100): goal <= 1 s, >= 10^5 candidates.
* ``plan`` of the DeepSeek-V3-like preset on 256 x 8 H800 (hgx-h800): goal <= 1.5 s.
* ``plan`` of the first 15 rows of ``bench/published_runs.csv`` that have a published global
  batch and convert to a spec (:func:`planner_fidelity.planning_spec`: the layout keys left to
  the planner), one process each, run once: goal median <= 0.5 s (``published``).

Prints figures; asserts nothing (machines are noisy).

Run: .venv/bin/python bench/speed_ratios.py [--repeat N] [--only compile,lint,plan,published]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama2-70b-dgx-a100.yaml"

SMALL_SPEC = """\
defaults: [{{model: llama3-8b}}, {{cluster: dgx-h100}}, _self_]
name: lint-{i:04d}
cluster: {{num_nodes: {nodes}}}
parallel: {{tp: {tp}, pp: 1}}
training: {{micro_batch_size: 1, global_batch_size: {gbs}}}
"""

PLAN_SPECS = {
    "plan 405B on 2048x8 H100": """\
defaults: [{model: llama3.1-405b}, {cluster: dgx-h100}, _self_]
name: plan-405b
cluster: {num_nodes: 2048}
training: {global_batch_size: 2048}
""",
    "plan DeepSeek-V3-like on 256x8 H800": """\
defaults: [{model: deepseek-v3-like}, {cluster: hgx-h800}, _self_]
name: plan-dsv3
cluster: {num_nodes: 256}
training: {global_batch_size: 15360}
""",
}


def run_once(cmd: list[str]) -> tuple[float, float, str]:
    """(child CPU seconds, wall seconds, stdout) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout


def measure(cmd: list[str], repeat: int) -> tuple[float, float, str]:
    """Median CPU seconds, median wall seconds and the last stdout of ``repeat`` runs."""
    runs = [run_once(cmd) for _ in range(repeat)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        runs[-1][2],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="compile,lint,plan,published")
    args = ap.parse_args()
    only = set(args.only.split(","))
    env_py = sys.executable
    trainc = [env_py, "-m", "trainc"]
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    bare_cpu, bare_wall, _ = measure(
        [env_py, "-c", "import hydra, omegaconf, jinja2, yaml"], args.repeat
    )
    print(f"bare import: {bare_cpu:.3f} s CPU ({bare_wall:.3f} s wall), median of {args.repeat}")

    def line(title: str, cpu: float, wall: float, goal: str, extra: str = "") -> None:
        print(
            f"{title}: {cpu:.3f} s CPU = {cpu / bare_cpu:.2f}x bare "
            f"({wall:.3f} s wall = {wall / bare_wall:.2f}x); goal {goal}{extra}"
        )

    with tempfile.TemporaryDirectory() as tmp:
        if "compile" in only:
            cpu, wall, _ = measure(
                [*trainc, "compile", str(EXAMPLE), "-o", f"{tmp}/out", "--force"], args.repeat
            )
            line("compile example", cpu, wall, "<= 1.15x bare")
        if "lint" in only:
            specs = []
            for i in range(1000):
                p = Path(tmp) / f"s{i:04d}.yaml"
                tp = (1, 2, 4, 8)[i % 4]
                nodes = 1 + i % 4
                p.write_text(SMALL_SPEC.format(i=i, tp=tp, nodes=nodes, gbs=64 * nodes))
                specs.append(str(p))
            cpu, wall, _ = measure([*trainc, "lint", *specs], max(1, min(args.repeat, 3)))
            line(
                "lint 1000 specs",
                cpu,
                wall,
                "<= 2 s",
                f"; {(cpu - bare_cpu) / 1000 * 1e3:.2f} ms CPU per spec after start-up",
            )
        if "plan" in only:
            for title, text in PLAN_SPECS.items():
                spec = Path(tmp) / "plan.yaml"
                spec.write_text(text)
                cpu, wall, out = measure(
                    [*trainc, "plan", str(spec), "--format", "json"], max(1, min(args.repeat, 3))
                )
                try:
                    n = json.loads(out)["num_candidates_evaluated"]
                except (ValueError, KeyError):
                    n = -1
                line(
                    title,
                    cpu,
                    wall,
                    "<= 1 s" if "405B" in title else "<= 1.5 s",
                    f"; {n:,} candidates",
                )
        if "published" in only:
            cpus, walls = published_plans(trainc, Path(tmp))
            line(
                f"plan {len(cpus)} published jobs (median)",
                statistics.median(cpus),
                statistics.median(walls),
                "median <= 0.5 s",
                f"; max {max(cpus):.3f} s CPU",
            )


def published_plans(trainc: list[str], tmp: Path, n: int = 15) -> tuple[list[float], list[float]]:
    """CPU and wall seconds of one ``trainc plan`` process per published job (the first ``n``
    rows of ``bench/published_runs.csv`` :func:`planner_fidelity.planning_spec` converts)."""
    import yaml

    sys.path.insert(0, str(ROOT / "bench"))
    from planner_fidelity import DEFAULT_CSV, planning_spec

    from trainc.calibrate.published import load_rows

    cpus, walls = [], []
    for i, row in enumerate(load_rows(str(DEFAULT_CSV))):
        spec = planning_spec(row)
        if spec is None:
            continue
        path = tmp / f"published{i}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        cpu, wall, _ = run_once([*trainc, "plan", str(path), "--format", "json"])
        cpus.append(cpu)
        walls.append(wall)
        if len(cpus) == n:
            break
    return cpus, walls


if __name__ == "__main__":
    main()
