"""Helpers of the end-to-end worker tests: compile tiny specs, launch them, parse the worker log.

A case is compiled with trainc's own pipeline into ``OUT/`` and launched with the generated
``OUT/torchrun.sh`` (torchrun taken from this venv through the script's ``TORCHRUN`` hook). Until
the emitter writes ``torchrun.sh``, the same worker command is run with torchrun directly.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
LAUNCH_TIMEOUT_S = 420
TIMINGS: dict[str, float] = {}

STEP = re.compile(r"^(resume-check )?step=(\d+) (.*)$")
GROUPS = re.compile(r"^trainc-worker: groups rank=(\d+) (.*)$")


def base_spec(name: str, world: int) -> dict[str, Any]:
    """A tiny fp32 spec on ``world`` CPU 'GPUs' (explicit dims; shrink off unless a case sets
    it)."""
    return {
        "name": name,
        "engine": "megatron",
        "model": {
            "num_layers": 4,
            "hidden_size": 32,
            "num_attention_heads": 4,
            "ffn_hidden_size": 64,
            "vocab_size": 128,
            "make_vocab_size_divisible_by": 32,
            "seq_length": 32,
            # no dropout: every layout must reproduce the one-process reference exactly
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        },
        "cluster": {
            "num_nodes": 1,
            "gpus_per_node": world,
            "gpu": "custom",
            "gpu_memory_gib": 80,
            "peak_tflops": 100,
            "nvlink_domain_size": 8,
            "intra_node_bandwidth_gbps": 300,
            "inter_node_bandwidth_gbps": 25,
        },
        "parallel": {"tp": 1, "sequence_parallel": False, "zero_stage": 0},
        "training": {
            "micro_batch_size": 1,
            "global_batch_size": 4,
            "precision": "fp32",
            "recompute": "none",
            "train_iters": 24,
            "lr": 0.01,
            "min_lr": 0.001,
            "weight_decay": 0.0,
        },
        "launch": {
            "device": "cpu",
            "shrink": False,
            "save_interval": 8,
            "master_port": 29500 + zlib.crc32(name.encode()) % 2000,
        },
    }


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge (``over`` wins)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def compile_case(tmp: Path, name: str, spec: dict[str, Any]) -> Path:
    """Write ``spec`` as YAML and compile it with trainc into ``tmp/name``; returns OUTDIR."""
    from trainc.compiler.pipeline import compile_spec
    from trainc.compiler.support.write import write_artifacts

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = compile_spec(str(path))
    errors = [d.to_json() for d in result.diagnostics if d.is_error]
    assert result.ok, f"{name}: trainc compile failed: {errors}"
    out = tmp / name
    write_artifacts(result.files, result.plan, out, force=True)
    return out


def plan_of(out: Path) -> dict[str, Any]:
    """The compiled plan.json."""
    return json.loads((out / "plan.json").read_text())


def _command(out: Path) -> list[str]:
    script = out / "torchrun.sh"
    if script.exists() and "trainc.launch.worker" in script.read_text():
        return ["bash", str(script)]
    # Fallback while torchrun.sh is not emitted yet: the worker command the script will run.
    plan = plan_of(out)
    return [
        str(VENV_BIN / "torchrun"),
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(plan["spec"]["cluster"]["gpus_per_node"]),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(plan["spec"]["launch"]["master_port"]),
        "-m",
        "trainc.launch.worker",
        "--plan",
        str(out / "plan.json"),
    ]


def _launch_env(extra: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a test launch runs in: this venv's torchrun first on PATH, one thread
    per rank, unbuffered output, the worker flags in TRAINC_WORKER_ARGS."""
    e = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TORCHRUN": str(VENV_BIN / "torchrun"),
        "PYTHONUNBUFFERED": "1",
        "TRAINC_WORKER_ARGS": shlex.join(list(extra)),
        **(env or {}),
    }
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def launch(
    out: Path,
    extra: list[str] = (),
    env: dict[str, str] | None = None,  # type: ignore
    label: str | None = None,
) -> str:
    """Run the compiled job on this machine with the generated ``torchrun.sh``; the test's extra
    worker flags travel in ``TRAINC_WORKER_ARGS`` (the worker reads it), so the script runs
    exactly as generated. Returns the combined log (asserts exit code 0)."""
    cmd = _command(out)
    e = _launch_env(extra, env)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=out, env=e, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    TIMINGS[label or out.name] = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    (out / "launch.log").write_text(text)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{text[-6000:]}"
    return text


def launch_and_signal(out: Path, extra: list[str], at_step: int, label: str) -> tuple[int, str]:
    """Like :func:`launch`, but sends SIGUSR1 to the launch's process group (as Slurm signals a
    job step) once ``step=at_step`` is logged; returns (exit code, combined log)."""
    import signal

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        _command(out),
        cwd=out,
        env=_launch_env(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(f"step={at_step} "):
                os.killpg(proc.pid, signal.SIGUSR1)
                break
        rest, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    TIMINGS[label] = time.perf_counter() - t0
    text = "".join(lines) + (rest or "")
    (out / "launch-signal.log").write_text(text)
    return proc.returncode, text


def steps(text: str, resume: bool = False) -> dict[int, dict[str, float]]:
    """Per-step records of the log (``resume``: the resume-check replay instead)."""
    out: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        m = STEP.match(line.strip())
        if m and bool(m.group(1)) == resume:
            rec = dict(kv.split("=", 1) for kv in m.group(3).split())
            out[int(m.group(2))] = {k: float(v) for k, v in rec.items()}
    return out


def groups(text: str) -> dict[int, dict[str, list[int]]]:
    """rank -> {axis: ranks of its group} as the worker's parallel_state formed them."""
    out = {}
    for line in text.splitlines():
        m = GROUPS.match(line.strip())
        if m:
            out[int(m.group(1))] = {
                k: json.loads(v) for k, v in (kv.split("=", 1) for kv in m.group(2).split())
            }
    return out


def expected_groups(plan: dict[str, Any]) -> dict[int, dict[str, list[int]]]:
    """The rank map of the plan in Megatron's order tp-cp-ep-dp-pp, written out independently:
    dense grid rank = tp + TP*(cp + CP*(dp + DP*pp)); expert grid rank = etp + ETP*(ep + EP*(edp +
    EDP*pp)). A group is every rank that differs from this one only along its axes."""
    d = plan["derived"]
    tp, cp, dp = d["tp"], d["cp"], d["dp"]
    etp, ep, edp = d["etp"], d["ep"], d["expert_dp"]
    world = d["world_size"]
    dense = {
        r: (r % tp, r // tp % cp, r // (tp * cp) % dp, r // (tp * cp * dp)) for r in range(world)
    }
    expert = {
        r: (r % etp, r // etp % ep, r // (etp * ep) % edp, r // (etp * ep * edp))
        for r in range(world)
    }

    def group(coords: dict[int, tuple[int, ...]], r: int, axes: tuple[int, ...]) -> list[int]:
        me = coords[r]
        return sorted(
            q for q, c in coords.items() if all(c[i] == me[i] for i in range(4) if i not in axes)
        )

    return {
        r: {
            "tp": group(dense, r, (0,)),
            "cp": group(dense, r, (1,)),
            "dp": group(dense, r, (2,)),
            "pp": group(dense, r, (3,)),
            "dp_cp": group(dense, r, (1, 2)),
            "etp": group(expert, r, (0,)),
            "ep": group(expert, r, (1,)),
            "edp": group(expert, r, (2,)),
        }
        for r in range(world)
    }


def trainc_rank_map(plan: dict[str, Any]) -> dict[int, dict[str, list[int]]]:
    """The rank -> groups map of trainc's compiler (``trainc explain``'s), in the worker's names."""
    from trainc.compiler.estimate.rankmap import GROUP_KINDS, grids

    g = grids(plan["derived"])
    names = {"expert_dp": "edp"}
    return {
        r: {
            names.get(kind, kind): sorted(g[grid].group_of(r, axes))
            for kind, (grid, axes) in GROUP_KINDS.items()
        }
        for r in range(plan["derived"]["world_size"])
    }


def references(outs: list[Path], env: dict[str, str] | None = None) -> dict[str, str]:
    """One-process reference runs (``--reference``) of several plans in ONE python process
    (imports paid once); returns plan folder name -> that run's log."""
    marker = "=== trainc-e2e reference "
    code = (
        "import sys\nfrom trainc.launch.worker.main import main\n"
        "for p in sys.argv[1:]:\n"
        f"    print({marker!r} + p, flush=True)\n"
        "    main(['--plan', p, '--reference'])\n"
    )
    e = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *[str(o / "plan.json") for o in outs]],
        env=e,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    TIMINGS["references(" + ",".join(o.name for o in outs) + ")"] = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"reference runs failed:\n{text[-6000:]}"
    logs: dict[str, str] = {}
    cur = None
    for line in proc.stdout.splitlines():
        if line.startswith(marker):
            cur = Path(line[len(marker) :]).parent.name
            logs[cur] = ""
        elif cur is not None:
            logs[cur] += line + "\n"
    return logs


def close(a: float, b: float, rtol: float) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-2)


def check_case(name: str, out: Path, log: str, ref_log: str) -> None:
    got, ref = steps(log), steps(ref_log)
    assert sorted(got) == list(range(1, 25)), f"{name}: steps logged {sorted(got)}"
    assert sorted(ref) == list(range(1, 25)), f"{name}: reference steps {sorted(ref)}"
    # (a) layout equivalence with the one-process reference
    for n in range(1, 25):
        rl, rg = (2e-4, 2e-3) if n <= 6 else (2e-3, 2e-2)
        assert close(got[n]["loss"], ref[n]["loss"], rl), (
            f"{name} step {n}: loss {got[n]['loss']} vs reference {ref[n]['loss']}"
        )
        assert close(got[n]["grad_norm"], ref[n]["grad_norm"], rg), (
            f"{name} step {n}: grad_norm {got[n]['grad_norm']} vs reference {ref[n]['grad_norm']}"
        )
    # (b) the loss falls
    first, last = got[1]["loss"], sum(got[n]["loss"] for n in range(21, 25)) / 4
    assert last < 0.9 * first, f"{name}: loss did not fall ({first} -> {last})"
    # contract fields
    assert all(k in got[1] for k in ("loss", "grad_norm", "step_time_s", "tokens_per_s"))
    # (c) resume from the step-12 checkpoint replays the same losses
    again = steps(log, resume=True)
    assert sorted(again) == list(range(17, 25)), f"{name}: resume-check steps {sorted(again)}"
    for n in again:
        assert close(again[n]["loss"], got[n]["loss"], 1e-6), (
            f"{name} step {n}: resumed loss {again[n]['loss']} vs {got[n]['loss']}"
        )
    # (d) the groups parallel_state formed are the rank map trainc computed (and an independent
    # formula of Megatron's order)
    formed = groups(log)
    assert formed == expected_groups(plan_of(out)), f"{name}: parallel groups differ"
    assert formed == trainc_rank_map(plan_of(out)), f"{name}: groups differ from trainc's map"
