"""``trainc run`` end to end, as a user runs a job: train with saves, Ctrl-C (SIGINT) mid-run,
resume with ``--load auto``, SIGTERM (what Slurm sends before the time limit) mid-run, resume
again and finish. For every engine the CPU worker runs (megatron, deepspeed, fsdp; entrypoint
trainc): each interrupt is one ``trainc run`` line naming the saved step (the last one the run
logged), no traceback, exit 130 / 143; the resumed runs' losses are the uninterrupted run's.

Everything goes through ``python -m trainc run OUTDIR -- ...`` (no hand-made torchrun command),
on two gloo ranks with a tiny model and 8 steps.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.e2e import (
    LAUNCH_TIMEOUT_S,
    TIMINGS,
    base_spec,
    close,
    compile_case,
    merge,
    steps,
)

pytestmark = pytest.mark.slow

ITERS = 8
ENGINES = {
    "megatron": {"parallel": {"tp": 2}},
    "deepspeed": {"engine": "deepspeed", "parallel": {"zero_stage": 1}},
    "fsdp": {"engine": "fsdp", "parallel": {"zero_stage": 1}},
}
INTERRUPTED = re.compile(
    r"^trainc run: interrupted \((SIG[A-Z]+)\) at step (\d+): saved "
    r"checkpoint to (\S+); resume with trainc run (\S+) -- --load auto$"
)


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TORCHRUN", "TRAINC_WORKER_ARGS", "NODE_RANK")
    }
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _trainc_run(
    out: Path, *worker: str, signal_at: int | None = None, sig: int = signal.SIGINT, label: str = ""
) -> tuple[int, str]:
    """``python -m trainc run OUT -- WORKER...``; with ``signal_at``, ``sig`` goes to trainc's
    process group (a terminal's Ctrl-C, or Slurm's SIGTERM) once ``step=signal_at`` is logged.
    Returns (exit code, stdout and stderr together)."""
    cmd = [sys.executable, "-m", "trainc", "run", str(out), *(["--", *worker] if worker else [])]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        if signal_at is not None:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(f"step={signal_at} "):
                    os.killpg(proc.pid, sig)
                    break
        rest, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    TIMINGS[label or out.name] = time.perf_counter() - t0
    return proc.returncode, "".join(lines) + (rest or "")


def _interrupted(text: str, out: Path, sig: int, rc: int) -> int:
    """Check an interrupted run's output; returns the step it saved."""
    assert rc == 128 + sig, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    said = [ln for ln in text.splitlines() if ln.startswith("trainc run: interrupted")]
    assert len(said) == 1, text[-4000:]
    m = INTERRUPTED.match(said[0])
    assert m, said[0]
    name, step, where, outdir = m.groups()
    assert name == signal.Signals(sig).name and outdir == str(out)
    n = int(step)
    assert where == str(out / "checkpoints" / f"iter_{n:07d}") and Path(where).is_dir()
    # the last completed step was saved: the run logged no step after it
    assert max(steps(text)) == n, text[-4000:]
    assert not (out / "checkpoints" / ".stopped-by-signal").exists()
    return n


@pytest.mark.parametrize("engine", list(ENGINES))
def test_interrupt_and_resume_through_trainc_run(tmp_path, engine):
    spec = merge(
        base_spec(f"run_{engine}", 2),
        merge(
            ENGINES[engine],
            {
                "model": {"num_layers": 2},
                "training": {"train_iters": ITERS},
                "launch": {"save_interval": 3},
            },
        ),
    )
    whole = compile_case(tmp_path, f"whole_{engine}", spec)
    rc, text = _trainc_run(whole, label=f"{engine} uninterrupted")
    assert rc == 0, text[-4000:]
    want = steps(text)
    assert sorted(want) == list(range(1, ITERS + 1)), text[-4000:]

    out = compile_case(tmp_path, f"cut_{engine}", spec)
    got: dict[int, dict[str, float]] = {}
    rc, text = _trainc_run(out, signal_at=2, sig=signal.SIGINT, label=f"{engine} SIGINT")
    first = _interrupted(text, out, signal.SIGINT, rc)
    assert 2 <= first < ITERS - 2, text[-4000:]
    got.update(steps(text))
    # resume (the same layout's checkpoint: --load auto), then SIGTERM two steps on
    rc, text = _trainc_run(
        out,
        "--load",
        "auto",
        signal_at=first + 1,
        sig=signal.SIGTERM,
        label=f"{engine} resume, SIGTERM",
    )
    second = _interrupted(text, out, signal.SIGTERM, rc)
    assert min(steps(text)) == first + 1 and first < second < ITERS, text[-4000:]
    got.update(steps(text))
    rc, text = _trainc_run(out, "--load", "auto", label=f"{engine} resume to the end")
    assert rc == 0, text[-4000:]
    assert sorted(steps(text)) == list(range(second + 1, ITERS + 1)), text[-4000:]
    got.update(steps(text))
    assert sorted(got) == sorted(want)
    for n in want:
        assert close(got[n]["loss"], want[n]["loss"], 1e-6), (
            f"{engine} step {n}: resumed loss {got[n]['loss']} vs uninterrupted {want[n]['loss']}"
        )
