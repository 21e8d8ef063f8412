"""SIGUSR1 (Slurm's ``--signal`` before the time limit) reaches a running worker through the
generated torchrun.sh: every rank stops after the same step, saves a checkpoint, and leaves the
marker that makes sbatch.sh requeue the job (launch.requeue); the launch exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

from e2e_harness import LAUNCH_TIMEOUT_S, TIMINGS, VENV_BIN, _command, base_spec, compile_case, merge

from trainc.launch.signals import STOPPED_MARKER


def test_sigusr1_saves_and_stops_every_rank_at_the_same_step(tmp_path):
    spec = merge(base_spec("usr1", 2), {"parallel": {"pp": 2},
                                         "training": {"train_iters": 2000},
                                         "launch": {"save_interval": 1000}})
    out = compile_case(tmp_path, "usr1", spec)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHRUN": str(VENV_BIN / "torchrun"),
           "PYTHONUNBUFFERED": "1", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(_command(out), cwd=out, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step=3 "):
                # the whole job's process group, as Slurm signals a step: the generated script
                # and torchrun ignore USR1, the workers handle it
                os.killpg(proc.pid, signal.SIGUSR1)
                break
        rest, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    TIMINGS["usr1 (SIGUSR1 stop)"] = time.perf_counter() - t0
    log = "".join(lines) + rest
    assert proc.returncode == 0, log[-4000:]
    stopped = re.findall(r"SIGUSR1: stopping after step (\d+)", log)
    assert len(stopped) == 1, log[-4000:]  # logged once (rank 0), for the job
    n = int(stopped[0])
    assert 3 <= n < 2000
    last = max(int(x) for x in re.findall(r"^step=(\d+) ", log, flags=re.M))
    assert last == n, log[-4000:]  # no rank trained past the agreed step
    ckpt = out / "checkpoints"
    assert (ckpt / STOPPED_MARKER).exists()
    assert (ckpt / "latest").read_text().strip() == str(n)
    assert f"saved checkpoint step={n}" in log
