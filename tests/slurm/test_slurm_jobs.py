"""The generated scripts on a real Slurm controller (the local test cluster: several slurmd on one
host emulate the nodes). Jobs are pinned to the responding nodes and run one at a time."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.slurm import ROOT, SPECS, free_port, trainc

pytestmark = pytest.mark.slurm

STUB = Path(__file__).resolve().parent / "stub"
TINY = SPECS / "tiny-2node-cpu.yaml"


@pytest.fixture(autouse=True)
def _queue_empty(slurm_cluster: list[str]) -> None:
    """Jobs run one at a time: wait (up to 120 s) until the previous test's job has left the
    queue (a finished or cancelled job stays COMPLETING a while on a loaded host), so that a
    test's --wait timeout covers its own job, not the pending time behind another."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        q = subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False, timeout=60
        )
        if q.returncode == 0 and not q.stdout.strip():
            return
        time.sleep(2)


def _compile(tmp_path: Path, *overrides: str, spec: Path = TINY) -> Path:
    out = tmp_path / "out"
    proc = trainc("compile", str(spec), *overrides, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What the submitting shell exports (sbatch and srun pass it on): this interpreter, a free
    rendezvous port, a private TMPDIR (torchelastic leaves folders there)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        MASTER_PORT=str(free_port()),
        TMPDIR=str(tmp),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    env.update(extra)
    return env


def _submit_wait(out: Path, nodes: list[str], env: dict[str, str], timeout: float = 240):
    """``trainc submit OUT --wait`` pinned to the first two responding nodes; returns the process
    and the job's output text."""
    proc = trainc(
        "submit",
        str(out),
        "--wait",
        f"--sbatch-option=--nodelist={','.join(nodes[:2])}",
        "--timeout",
        str(timeout),
        env=env,
        timeout=timeout + 60,
    )
    job_id = proc.stdout.strip()
    assert job_id.isdigit(), proc.stderr
    logs = list(out.glob(f"*-{job_id}.out"))
    assert len(logs) == 1, (proc.stderr, sorted(p.name for p in out.iterdir()))
    return proc, logs[0].read_text()


def test_environment_node_rank_and_rendezvous_host_reach_every_task(slurm_cluster, tmp_path):
    """One srun task per node; each sees its own SLURM_NODEID as node rank, the first node of
    the allocation (never localhost) as rendezvous host, the spec's launch.env and the
    submitter's environment."""
    out = _compile(tmp_path, "launch.env={TRAINC_SPEC_MARK:from-spec}")
    env = _job_env(tmp_path, TORCHRUN=str(STUB / "print_env.sh"), TRAINC_SUBMIT_MARK="from-shell")
    proc, log = _submit_wait(out, slurm_cluster, env)
    assert proc.returncode == 0, proc.stderr + log
    lines = [
        dict(kv.split("=", 1) for kv in ln.split()[1:] if "=" in kv)
        for ln in log.splitlines()
        if ln.startswith("env-probe:")
    ]
    assert len(lines) == 2, log  # one task per node, not one per GPU
    assert sorted(ln["slurm_nodeid"] for ln in lines) == ["0", "1"]
    assert all(ln["node_rank"] == ln["slurm_nodeid"] for ln in lines), lines
    assert len({ln["node"] for ln in lines}) == 2, lines
    assert {ln["master_addr"] for ln in lines} == {slurm_cluster[0]}, lines
    assert {ln["master_port"] for ln in lines} == {env["MASTER_PORT"]}
    assert {ln["rdzv"] for ln in lines} == {"c10d"}
    assert {ln["spec_env"] for ln in lines} == {"from-spec"}
    assert {ln["submit_env"] for ln in lines} == {"from-shell"}
    raw = [ln for ln in log.splitlines() if ln.startswith("env-probe:")]
    assert all(" args=--nnodes=2 --nproc_per_node=2 " in ln for ln in raw), raw


def _worker_runnable() -> bool:
    try:
        return all(
            importlib.util.find_spec(m) is not None
            for m in ("trainc.launch.worker", "torch", "megatron.core")
        )
    except ModuleNotFoundError:
        return False


def test_two_node_job_runs_to_completion(slurm_cluster, tmp_path):
    """The compiled 2-node spec (2 x 2 CPU ranks, gloo) through sbatch.sh -> srun -> torchrun.sh
    -> torchrun: completes, with distinct node ranks and the planned world size. Runs trainc's
    worker when it can run here, else probe.py in its place (real torchrun and a gloo all_reduce
    over the whole world when torch is installed)."""
    out = _compile(tmp_path)
    world = json.loads((out / "plan.json").read_text())["derived"]["world_size"]
    assert world == 4
    real = _worker_runnable()
    extra = {} if real else {"TORCHRUN": f"{sys.executable} {STUB / 'fake_torchrun.py'}"}
    proc, log = _submit_wait(out, slurm_cluster, _job_env(tmp_path, **extra))
    assert proc.returncode == 0, proc.stderr + log[-3000:]
    assert "COMPLETED" in proc.stderr
    # a clean finish leaves a clean log (sbatch.sh hosts the rendezvous store: test_rdzv_store.py)
    assert "no rendezvous store" not in log  # PYTHON has torch: sbatch.sh hosted the store
    for noise in ("DistNetworkError", "TCPStore.cpp", "failed to shutdown the rendezvous"):
        assert noise not in log, log[-3000:]
    if real:
        steps = [ln for ln in log.splitlines() if ln.startswith("step=")]
        assert len(steps) == 2, log[-3000:]
        ranks = {int(m) for m in re.findall(r"trainc-worker: groups rank=(\d+)", log)}
        assert ranks == set(range(world)), log[-3000:]
        assert re.search(rf"trainc-worker: distributed backend=gloo world_size={world} ", log)
        return
    probes = [
        dict(kv.split("=", 1) for kv in ln.split()[1:])
        for ln in log.splitlines()
        if ln.startswith("probe:")
    ]
    assert sorted(int(p["rank"]) for p in probes) == list(range(world)), log
    assert {p["world"] for p in probes} == {str(world)}
    assert sorted(p["group_rank"] for p in probes) == ["0", "0", "1", "1"]
    for group in ("0", "1"):  # a node's ranks share its node rank and its slurmd
        assert len({p["node"] for p in probes if p["group_rank"] == group}) == 1
    assert all(p["plan_ok"] == "True" for p in probes)
    assert all(
        p["program"] == f"-m+trainc.launch.worker+--plan+{out / 'plan.json'}" for p in probes
    )
    if "allreduce" in probes[0]:
        assert {p["allreduce"] for p in probes} == {str(float(world * (world + 1) // 2))}


def test_submit_wait_returns_the_job_exit_code(slurm_cluster, tmp_path):
    """Every task runs ``false``. srun returns the highest task exit code, and a task that
    --kill-on-bad-exit terminated before its own ``false`` ran counts as 128 + SIGTERM = 143
    (srun(1), RETURN VALUE): which one a run sees is a race, so both are the job's exit code;
    143 comes with the hint that names the cause."""
    out = _compile(tmp_path)
    proc, log = _submit_wait(out, slurm_cluster, _job_env(tmp_path, TORCHRUN="false"))
    assert proc.returncode in (1, 143), proc.stderr + log
    assert "FAILED" in proc.stderr
    assert f"-> {proc.returncode}" in proc.stderr
    assert ("--kill-on-bad-exit" in proc.stderr) == (proc.returncode == 143), proc.stderr


def test_a_failed_node_ends_the_job_at_once(slurm_cluster, tmp_path):
    """Node 1 fails at once while node 0 blocks (as ranks waiting for a dead peer do): srun's
    --kill-on-bad-exit ends the job within seconds instead of after the hang."""
    out = _compile(tmp_path)
    env = _job_env(tmp_path, TORCHRUN=str(STUB / "fail_one_node.sh"), TRAINC_STUB_HANG_S="150")
    t0 = time.monotonic()
    proc, log = _submit_wait(out, slurm_cluster, env)
    assert proc.returncode != 0, proc.stderr + log
    assert time.monotonic() - t0 < 60, log


def test_submit_without_wait_prints_the_job_id(slurm_cluster, tmp_path):
    out = _compile(tmp_path)
    proc = trainc(
        "submit",
        str(out),
        f"--sbatch-option=--nodelist={','.join(slurm_cluster[:2])}",
        "--sbatch-option=--hold",
        env=_job_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    assert job_id.isdigit()
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        ).stdout
        assert "JobState=PENDING" in shown and f"WorkDir={out}" in shown
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=60)


def test_lint_slurm_accepts_every_preset_example(slurm_cluster):
    specs = sorted(str(p) for p in [*ROOT.glob("examples/*.yaml"), *SPECS.glob("*.yaml")])
    proc = trainc("lint", "--slurm", "--format", "json", *specs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads(proc.stdout)["specs"]
    assert len(records) == len(specs)
    bad = {r["path"]: r["slurm"] for r in records if r["slurm"]["ok"] is not True}
    assert not bad


def test_lint_slurm_reports_what_the_cluster_refuses(slurm_cluster):
    proc = trainc("lint", "--slurm", str(TINY), "launch.partition=no-such-partition")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rejected" in proc.stderr and "partition" in proc.stderr.lower()
    proc = trainc(
        "lint",
        "--slurm",
        "--format",
        "json",
        str(TINY),
        "cluster.num_nodes=512",
        "training.global_batch_size=512",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    rec = json.loads(proc.stdout)["specs"][0]
    assert rec["ok"] is False and rec["slurm"]["ok"] is False, rec
    assert "node configuration is not available" in rec["slurm"]["message"]


def test_signal_before_the_time_limit_reaches_every_rank(slurm_cluster, tmp_path):
    """sbatch.sh's --signal=USR1@N goes to the job step: through torchrun.sh (which ignores USR1
    in bash and torchrun) to the rank processes, which handle it (the worker saves a checkpoint).
    The limit is shortened here to 3 min with the signal 60 s before it, instead of waiting for
    the spec's limit. Slurm may send the signal up to 60 s early (sbatch(1), --signal), and a
    signal sent before the step has started reaches no rank: so the warning time leaves at
    least 60 s for srun and the stubs to start on a loaded host (2 min with USR1@100 could fire
    at the job's start, the flake of CI stop 19)."""
    out = _compile(tmp_path)
    assert "#SBATCH --signal=USR1@" in (out / "sbatch.sh").read_text()
    env = _job_env(
        tmp_path, TORCHRUN=f"{sys.executable} {STUB / 'wait_usr1.py'}", TRAINC_STUB_WAIT_S="175"
    )
    proc = trainc(
        "submit",
        str(out),
        "--wait",
        "--timeout",
        "360",
        f"--sbatch-option=--nodelist={','.join(slurm_cluster[:2])}",
        "--sbatch-option=--time=3",
        "--sbatch-option=--signal=USR1@60",
        env=env,
        timeout=420,
    )
    job_id = proc.stdout.strip()
    log = next(out.glob(f"*-{job_id}.out")).read_text()
    assert proc.returncode == 0, proc.stderr + log
    got = re.findall(r"usr1: node=(\d) after_s=\d+", log)
    assert sorted(got) == ["0", "1"], log


def _scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout


def _requeue_and_release(job_id: str, timeout: float = 120) -> None:
    """`scontrol requeue` a running job (as preemption would), then :func:`_release`."""
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=60)
    _release(job_id, timeout)


def _release(job_id: str, timeout: float = 120, alive: Any = None) -> None:
    """Wait until a requeued job is pending again and its nodes have finished the previous run,
    then lift Slurm's ~2 min hold on requeued jobs (StartTime=now). Started too early, slurmd
    refuses it ("Job credential revoked") and the job fails. ``alive()`` false ends the wait."""
    deadline = time.monotonic() + timeout
    while True:
        shown = _scontrol_job(job_id)
        nodes = re.search(r" ReqNodeList=(\S+)", shown)
        states = (
            subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%T", "-n", nodes[1]],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            ).stdout.split()
            if nodes
            else ["?"]
        )
        if (
            "Restarts=1" in shown
            and "JobState=PENDING" in shown
            and states
            and all(st == "idle" for st in states)
        ):
            break
        assert time.monotonic() < deadline and (alive is None or alive()), (shown, states)
        time.sleep(0.5)
    # slurmd compares the new credential's time with the revocation's in whole seconds: a start
    # within the second of the requeue is refused as revoked (Slurm's own hold avoids this)
    time.sleep(2)
    subprocess.run(
        ["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True, timeout=60
    )


def test_wait_follows_a_requeued_job_to_its_end(slurm_cluster, tmp_path):
    """A job requeued while running (node failure, preemption, `scontrol requeue`) runs again;
    `trainc submit --wait` follows it through the restart instead of stopping at the kill.
    (Slurm holds a requeued job back ~2 min; the test lifts that with StartTime=now.)"""
    out = _compile(tmp_path)
    env = _job_env(tmp_path, TORCHRUN=str(STUB / "sleep_run.sh"))
    cmd = [
        sys.executable,
        "-m",
        "trainc",
        "submit",
        str(out),
        "--wait",
        "--timeout",
        "150",
        f"--sbatch-option=--nodelist={','.join(slurm_cluster[:2])}",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    job_id = ""
    try:
        assert proc.stdout is not None
        job_id = proc.stdout.readline().strip()
        assert job_id.isdigit()
        deadline = time.monotonic() + 60
        while "JobState=RUNNING" not in _scontrol_job(job_id):
            assert time.monotonic() < deadline, _scontrol_job(job_id)
            time.sleep(0.5)
        time.sleep(1)
        _requeue_and_release(job_id)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit() and "JobState=COMPLETED" not in _scontrol_job(job_id):
            subprocess.run(["scancel", job_id], check=False, timeout=60)
    assert proc.returncode == 0, err
    assert "(restart 1)" in err and "COMPLETED (restart 1)" in err, err
    log = next(out.glob(f"*-{job_id}.out")).read_text()
    assert sorted(re.findall(r"run: node=(\d) restart=1", log)) == ["0", "1"], log


@pytest.mark.skipif(not _worker_runnable(), reason="needs the [worker] extra (real checkpoints)")
def test_a_killed_job_is_requeued_and_resumes_from_its_checkpoint(slurm_cluster, tmp_path):
    """launch.requeue: the job is killed mid-run (as preemption or a node failure would, here
    with `scontrol requeue`), Slurm queues it again, and the new start resumes from the latest
    checkpoint (sbatch.sh passes --load auto) instead of step 0, then trains to the end."""
    out = _compile(
        tmp_path, "launch.requeue=true", "training.train_iters=120", "launch.save_interval=5"
    )
    script = (out / "sbatch.sh").read_text()
    assert "#SBATCH --requeue" in script and "--load auto" in script
    cmd = [
        sys.executable,
        "-m",
        "trainc",
        "submit",
        str(out),
        "--wait",
        "--timeout",
        "600",
        f"--sbatch-option=--nodelist={','.join(slurm_cluster[:2])}",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_job_env(tmp_path),
        cwd=ROOT,
    )
    job_id = ""
    latest = out / "checkpoints" / "latest"
    try:
        assert proc.stdout is not None
        job_id = proc.stdout.readline().strip()
        assert job_id.isdigit()
        deadline = time.monotonic() + 300
        while not latest.exists():  # the first run has saved a checkpoint
            assert time.monotonic() < deadline and proc.poll() is None, _scontrol_job(job_id)
            time.sleep(0.5)
        _requeue_and_release(job_id)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit() and "JobState=COMPLETED" not in _scontrol_job(job_id):
            subprocess.run(["scancel", job_id], check=False, timeout=60)
    log = next(out.glob(f"*-{job_id}.out")).read_text()  # --open-mode=append: both runs
    assert proc.returncode == 0, err + log[-3000:]
    resumed = list(re.finditer(r"resumed from \S+ at step (\d+)\n", log))
    assert len(resumed) == 1 and int(resumed[0][1]) >= 5, log[-3000:]
    at = int(resumed[0][1])
    first_run, second_run = log[: resumed[0].start()], log[resumed[0].end() :]
    before = [int(n) for n in re.findall(r"^step=(\d+) ", first_run, flags=re.M)]
    after = [int(n) for n in re.findall(r"^step=(\d+) ", second_run, flags=re.M)]
    # The first run trained up to (at least) its checkpoint; the kill may land right after the
    # save, before the next step is logged, so the two runs may also meet without overlap.
    assert before and before[0] == 1 and before[-1] >= at, log[-3000:]
    # The second run started where the checkpoint left off, not at step 1, and ran to the end.
    assert after[0] == at + 1 and after[-1] == 120, log[-3000:]
    assert after == sorted(after) and before == sorted(before), log[-3000:]


@pytest.mark.skipif(not _worker_runnable(), reason="needs the [worker] extra (real checkpoints)")
def test_sigusr1_checkpoints_requeues_and_the_job_resumes(slurm_cluster, tmp_path):
    """The time-limit path end to end with the real worker: SIGUSR1 to the job's steps (what
    --signal=USR1@N does; sent here with `scancel --signal`), every rank saves and stops at the
    same step, sbatch.sh finds the marker and requeues the job (launch.requeue), and the second
    start resumes from that step and trains to the end."""
    out = _compile(
        tmp_path, "launch.requeue=true", "training.train_iters=40", "launch.save_interval=1000"
    )
    cmd = [
        sys.executable,
        "-m",
        "trainc",
        "submit",
        str(out),
        "--wait",
        "--timeout",
        "600",
        f"--sbatch-option=--nodelist={','.join(slurm_cluster[:2])}",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_job_env(tmp_path),
        cwd=ROOT,
    )
    job_id = ""
    try:
        assert proc.stdout is not None
        job_id = proc.stdout.readline().strip()
        assert job_id.isdigit()
        deadline = time.monotonic() + 300
        while not any(
            re.search(r"^step=3 ", p.read_text(), flags=re.M) for p in out.glob(f"*-{job_id}.out")
        ):
            assert time.monotonic() < deadline and proc.poll() is None, _scontrol_job(job_id)
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR1", job_id], check=True, timeout=60)
        _release(job_id, 180, alive=lambda: proc.poll() is None)  # sbatch.sh requeues it
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit() and "JobState=COMPLETED" not in _scontrol_job(job_id):
            subprocess.run(["scancel", job_id], check=False, timeout=60)
    log = next(out.glob(f"*-{job_id}.out")).read_text()  # --open-mode=append: both runs
    assert proc.returncode == 0, err + log[-3000:]
    stopped = re.findall(r"SIGUSR1: stopping after step (\d+)", log)
    assert len(stopped) == 1, log[-3000:]
    n = int(stopped[0])
    assert re.search(rf"resumed from \S+ at step {n}\n", log), log[-3000:]
    first_run, _, second_run = log.partition("SIGUSR1: stopping after step")
    assert max(int(x) for x in re.findall(r"^step=(\d+) ", first_run, flags=re.M)) == n
    after = [int(x) for x in re.findall(r"^step=(\d+) ", second_run, flags=re.M)]
    assert after[0] == n + 1 and after[-1] == 40, log[-3000:]
