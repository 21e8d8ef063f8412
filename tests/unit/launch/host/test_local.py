"""``trainc run``: the interpreter it starts torchrun with, and the plans it refuses here (a
multi-node plan without a node rank, a CUDA plan without a GPU) with one line and exit 4.

The launches use a fake ``torch`` package (``torch/distributed/run.py`` prints its interpreter
and arguments), so no rank starts; PATH holds no venv, as for ``.venv/bin/trainc run`` from a
shell without an activated venv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainc.launch.host import local

ROOT = Path(__file__).resolve().parents[4]
BARE_PATH = "/usr/bin:/bin"


def _spec(nodes: int = 1, device: str = "cpu") -> dict:
    return {
        "name": "runme",
        "engine": "megatron",
        "model": {
            "num_layers": 4,
            "hidden_size": 32,
            "num_attention_heads": 4,
            "ffn_hidden_size": 64,
            "vocab_size": 128,
            "make_vocab_size_divisible_by": 32,
            "seq_length": 32,
        },
        "cluster": {
            "num_nodes": nodes,
            "gpus_per_node": 2,
            "gpu": "custom",
            "gpu_memory_gib": 80,
            "peak_tflops": 100,
            "nvlink_domain_size": 8,
            "intra_node_bandwidth_gbps": 300,
            "inter_node_bandwidth_gbps": 25,
        },
        "parallel": {"tp": 2, "sequence_parallel": False, "zero_stage": 0},
        "training": {
            "micro_batch_size": 1,
            "global_batch_size": 4 * nodes,
            "precision": "fp32",
            "recompute": "none",
            "train_iters": 2,
        },
        "launch": {"device": device, "master_port": 29911},
    }


def _compile(tmp: Path, nodes: int = 1, device: str = "cpu") -> Path:
    spec = tmp / f"s{nodes}{device}.yaml"
    spec.write_text(yaml.safe_dump(_spec(nodes, device)))
    out = tmp / f"out{nodes}{device}"
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "compile", str(spec), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    """A ``torch`` whose ``torch.distributed.run`` prints sys.executable and its arguments."""
    pkg = tmp_path / "fake" / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text(
        "import os, sys\nprint('FAKE-RUN', sys.executable)\n"
        "print('ARGS', ' '.join(sys.argv[1:]))\n"
        "print('NODE', os.environ.get('NODE_RANK'), "
        "os.environ.get('MASTER_ADDR'))\n"
    )
    return tmp_path / "fake"


def _trainc_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``<venv>/bin/python -m trainc run ...`` with the bare PATH (the venv is not on it)."""
    return subprocess.run(
        [sys.executable, "-m", "trainc", "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _bare_env(fake: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "TORCHRUN",
            "PYTHON",
            "NODE_RANK",
            "MASTER_ADDR",
            "VIRTUAL_ENV",
            "TRAINC_RDZV_BACKEND",
        )
    }
    env.update(PATH=BARE_PATH, PYTHONPATH=f"{fake}{os.pathsep}{ROOT}", **extra)
    return env


@pytest.mark.parametrize("inherited", [None, "/usr/bin/python3-other"])
def test_run_uses_its_own_interpreter_without_the_venv_on_path(tmp_path, fake_torch, inherited):
    out = _compile(tmp_path)
    env = _bare_env(fake_torch, **({"PYTHON": inherited} if inherited else {}))
    proc = _trainc_run(str(out), "--", "--train-iters", "1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"FAKE-RUN {sys.executable}" in proc.stdout
    assert "--nnodes=1 --nproc_per_node=2" in proc.stdout
    assert f"-m trainc.launch.worker --plan {out}/plan.json" in proc.stdout
    assert "torchrun: not found" not in proc.stderr


def test_an_explicit_torchrun_is_kept(tmp_path):
    out = _compile(tmp_path)
    stub = tmp_path / "my-torchrun"
    stub.write_text('#!/bin/sh\necho "MINE $*"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": BARE_PATH, "PYTHONPATH": str(ROOT), "TORCHRUN": str(stub)}
    proc = _trainc_run(str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("MINE --nnodes=1")


def test_run_without_torch_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(local.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(local.RunRefused, match=r"torch is not installed for /x/python: .*worker"):
        local.launch_env("OUT", None, {"PATH": BARE_PATH}, python="/x/python")


@pytest.mark.parametrize("nodes", [2, 4])
def test_multi_node_plan_is_refused_with_what_to_do(tmp_path, fake_torch, nodes):
    out = _compile(tmp_path, nodes)
    proc = _trainc_run(str(out), env=_bare_env(fake_torch))
    assert proc.returncode == 4
    assert "FAKE-RUN" not in proc.stdout
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"is a {nodes}-node plan ({nodes} x 2 ranks)" in err
    assert f"wait for the other {nodes - 1} node(s) at MASTER_ADDR:29911" in err
    assert f"trainc submit {out}" in err and "cluster.num_nodes=1" in err
    assert f"I = 0..{nodes - 1}" in err


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        (["--node-rank", "0"], {}, "NODE 0 127.0.0.1"),
        (["--node-rank", "1", "--master-addr", "n0"], {}, "NODE 1 n0"),
        ([], {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1"}, "NODE 1 10.0.0.1"),
    ],
)
def test_multi_node_plan_runs_with_a_node_rank(tmp_path, fake_torch, args, env, shown):
    out = _compile(tmp_path, 2)
    proc = _trainc_run(*args, str(out), env=_bare_env(fake_torch, **env))
    assert proc.returncode == 0, proc.stderr
    assert shown in proc.stdout and "--nnodes=2" in proc.stdout


@pytest.mark.parametrize(
    ("rank", "addr", "match"),
    [
        ("2", "n0", r"node rank 2 is not one of the plan's nodes 0\.\.1"),
        ("x", "n0", r"node rank x is not one of"),
        ("1", None, r"node 1 needs the address of node 0: add --master-addr"),
    ],
)
def test_bad_node_rank_is_refused(rank, addr, match):
    shape = local.PlanShape("s", 2, 2, "cpu", 29500)
    base = {"NODE_RANK": rank, **({"MASTER_ADDR": addr} if addr else {}), "TORCHRUN": "t"}
    with pytest.raises(local.RunRefused, match=match):
        local.launch_env("OUT", shape, base)


def test_c10d_under_slurm_is_not_refused():
    shape = local.PlanShape("s", 4, 2, "cpu", 29500)
    env = local.launch_env("OUT", shape, {"TRAINC_RDZV_BACKEND": "c10d", "TORCHRUN": "t"})
    assert env["TRAINC_RDZV_BACKEND"] == "c10d" and "NODE_RANK" not in env


def test_cuda_plan_without_gpu_is_one_line_naming_device_cpu(tmp_path, fake_torch, monkeypatch):
    out = _compile(tmp_path, 1, "cuda")
    if local.gpu_present():
        pytest.skip("this machine has a GPU device node")
    proc = _trainc_run(str(out), env=_bare_env(fake_torch))
    assert proc.returncode == 4
    err = proc.stderr.strip()
    assert "\n" not in err and "_cuda_setDevice" not in err and "FAKE-RUN" not in proc.stdout
    assert "is a CUDA plan (launch.device=cuda) and this machine has no GPU" in err
    assert "launch.device=cpu" in err


@pytest.mark.parametrize(
    ("device", "gpu", "refused"),
    [
        ("cuda", False, True),
        ("cuda", True, False),
        ("cpu", False, False),
    ],
)
def test_device_check(device, gpu, refused):
    shape = local.PlanShape("s", 1, 8, device, 29500)
    if refused:
        with pytest.raises(local.RunRefused, match=r"launch\.device=cpu"):
            local.launch_env("OUT", shape, {"TORCHRUN": "t"}, gpu=gpu)
    else:
        assert local.launch_env("OUT", shape, {"TORCHRUN": "t"}, gpu=gpu)["TORCHRUN"] == "t"


def test_gpu_present_looks_for_device_nodes(tmp_path):
    assert local.gpu_present([str(tmp_path / "nvidia[0-9]*")]) is False
    (tmp_path / "nvidia0").write_text("")
    assert local.gpu_present([str(tmp_path / "nvidia[0-9]*")]) is True


def test_worker_args_are_appended_to_the_environment():
    env = local.launch_env(
        "OUT",
        None,
        {"TORCHRUN": "t", "TRAINC_WORKER_ARGS": "--a 1"},
        ["--", "--train-iters", "3", "--load", "my dir"],
    )
    assert env["TRAINC_WORKER_ARGS"] == "--a 1 --train-iters 3 --load 'my dir'"


@pytest.mark.parametrize(
    ("worker_args", "rest", "rank", "addr"),
    [
        (["--node-rank", "1", "--master-addr", "h0"], [], 1, "h0"),
        (["--node-rank=2", "--", "--node-rank", "5"], ["--", "--node-rank", "5"], 2, None),
        (["--", "--train-iters", "3"], ["--", "--train-iters", "3"], None, None),
        (["--train-iters", "3", "--master-addr=h1"], ["--train-iters", "3"], None, "h1"),
    ],
)
def test_run_options_after_outdir_are_trainc_runs_own(worker_args, rest, rank, addr) -> None:
    """`trainc run OUT --node-rank 1` means trainc run's option, not a worker flag (argparse's
    REMAINDER gave it to the worker, which refused it after torchrun had started); after `--`
    everything is the worker's."""
    import argparse

    from trainc.cli.run import own_options

    args = argparse.Namespace(worker_args=worker_args, node_rank=None, master_addr=None)
    assert own_options(args) == rest
    assert (args.node_rank, args.master_addr) == (rank, addr)


def test_a_second_run_does_not_save_over_the_first_runs_checkpoints(tmp_path, fake_torch):
    """`trainc run OUTDIR` twice: the second started at step 1 and saved its checkpoints over
    the first run's without a word. Now it is refused (exit 4, nothing started) with the two
    ways on; --load auto (resume) and --save elsewhere start."""
    out = _compile(tmp_path)
    env = _bare_env(fake_torch)
    assert _trainc_run(str(out), env=env).returncode == 0  # no checkpoint yet
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "latest").write_text("5\n")
    r = _trainc_run(str(out), env=env)
    assert r.returncode == 4 and "FAKE-RUN" not in r.stdout, r.stdout + r.stderr
    assert r.stderr.strip() == (
        f"trainc run: {out}/checkpoints holds the checkpoints of an earlier run (latest: step 5);"
        f" this run would start at step 1 and save over them. Resume it: trainc run {out} -- "
        f"--load auto; or keep it and start afresh elsewhere: trainc run {out} -- --save NEW_DIR"
        " (or move the folder away)"
    )
    for extra in (
        ["--", "--load", "auto"],
        ["--", f"--save={tmp_path / 'new'}"],
        ["--", "--load", str(out / "checkpoints")],
    ):
        r = _trainc_run(str(out), *extra, env=env)
        assert r.returncode == 0 and "FAKE-RUN" in r.stdout, (extra, r.stderr)


def test_ctrl_c_waits_for_the_job_and_exits_130(tmp_path, fake_torch):
    """Ctrl-C (SIGINT to the terminal's process group): torchrun.sh died at once, trainc
    returned -2 (exit 254) while torchrun and its ranks were still stopping. Now the job runs in
    a process group of its own, trainc passes the signal on (as SIGUSR1, the trainc worker's
    save-and-stop), waits until torchrun has stopped, says so and exits 130; a job that saved
    nothing gets the plain line."""
    (fake_torch / "torch" / "distributed" / "run.py").write_text(
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(1.5)  # torchrun stopping its workers\n"
        f"    open({str(tmp_path / 'stopped')!r}, 'w').write('yes')\n"
        "    sys.exit(1)\n"
        "signal.signal(signal.SIGUSR1, stop)\n"
        "print('FAKE-RUN', flush=True)\n"
        "time.sleep(60)\n"
    )
    out = _compile(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainc", "run", str(out)],
        env=_bare_env(fake_torch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert "FAKE-RUN" in proc.stdout.readline()
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: trainc's whole group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert (tmp_path / "stopped").exists()  # trainc returned after the job had stopped
    assert "trainc run: interrupted (SIGINT); the job's processes have ended" in err


@pytest.mark.parametrize(("sig", "rc"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_saves_the_step_and_says_how_to_resume_in_one_line(
    tmp_path, fake_torch, sig, rc
):
    """SIGINT went to every rank and torchrun: about 240 lines of tracebacks, and the steps
    since the last save were lost. Now SIGINT / SIGTERM reach the job as SIGUSR1 (the worker
    saves the step it is on, leaves the stop marker and exits 0); trainc prints one line with
    the step, the folder and the resume command, removes the marker (this is no time-limit
    stop for sbatch.sh to requeue) and exits 128 + the signal."""
    out = _compile(tmp_path)
    ckpt = out / "checkpoints"
    (fake_torch / "torch" / "distributed" / "run.py").write_text(
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        f"    d = {str(ckpt)!r}\n"
        "    os.makedirs(os.path.join(d, 'iter_0000007'))\n"
        "    open(os.path.join(d, 'latest'), 'w').write('7\\n')\n"
        "    open(os.path.join(d, '.stopped-by-signal'), 'w').write('x')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, stop)\n"
        "print('FAKE-RUN', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainc", "run", str(out)],
        env=_bare_env(fake_torch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert "FAKE-RUN" in proc.stdout.readline()
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == rc, err
    assert err.strip() == (
        f"trainc run: interrupted ({signal.Signals(sig).name}) at step 7: saved checkpoint to "
        f"{ckpt}/iter_0000007; resume with trainc run {out} -- --load auto"
    )
    assert not (ckpt / ".stopped-by-signal").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        (["--train-iters", "abc"], "argument --train-iters: invalid int value: 'abc'"),
    ],
)
def test_bad_worker_flags_are_one_line_before_any_rank_starts(tmp_path, fake_torch, flags, said):
    """Every rank printed argparse's usage, then torchrun its traceback: 54 lines, exit 1
    (trial 13). The worker's own parser checks them first: one line, exit 2, nothing started."""
    out = _compile(tmp_path)
    r = _trainc_run(str(out), "--", *flags, env=_bare_env(fake_torch))
    assert r.returncode == 2 and "FAKE-RUN" not in r.stdout
    assert r.stderr.strip() == f"trainc run: the worker flags (after --) are not valid: {said}"


def test_resuming_another_layouts_checkpoint_is_refused_before_any_rank_starts(
    tmp_path, fake_torch
):
    """The worker refused it from every rank with a traceback, then torchrun its own, exit 1
    (trial 13). The checkpoint's layout.json against the plan: one line, exit 4; the same
    layout, or a checkpoint without the record, starts."""
    out = _compile(tmp_path)  # tp 2, dp 1
    ckpt = tmp_path / "ck"
    (ckpt / "iter_0000004").mkdir(parents=True)
    (ckpt / "latest").write_text("4\n")
    env = _bare_env(fake_torch)
    r = _trainc_run(str(out), "--", "--load", str(ckpt), env=env)
    assert r.returncode == 0 and "FAKE-RUN" in r.stdout  # no layout.json: the worker checks
    plan = json.loads((out / "plan.json").read_text())["derived"]
    same = {k: plan[k] for k in ("tp", "pp", "vpp", "cp", "ep", "dp", "etp")}
    same["sp"] = plan["sequence_parallel"]
    (ckpt / "iter_0000004" / "layout.json").write_text(json.dumps({**same, "tp": 1, "dp": 2}))
    r = _trainc_run(str(out), "--", "--load", str(ckpt), env=env)
    assert r.returncode == 4 and "FAKE-RUN" not in r.stdout
    assert r.stderr.startswith(
        f"trainc run: {ckpt} (step 4) was written by another layout (tp 1 -> 2, dp 2 -> 1)"
    )
    (ckpt / "iter_0000004" / "layout.json").write_text(json.dumps(same))
    assert _trainc_run(str(out), "--", "--load", str(ckpt), env=env).returncode == 0


def test_the_workers_own_layout_record_resumes_and_a_changed_field_is_named(tmp_path, fake_torch):
    """The worker's layout.json also holds the model dims and the distributed optimizer; the
    check compared the whole record with the parallel sizes alone, so --load auto of the same
    layout's checkpoint was refused ("written by another layout ()", exit 4). The record the
    worker writes now resumes; a changed dims or distopt is refused with that field named."""
    from trainc.launch.host.local import expected_layout

    out = _compile(tmp_path)
    plan = json.loads((out / "plan.json").read_text())
    ckpt = out / "checkpoints"
    (ckpt / "iter_0000004").mkdir(parents=True)
    (ckpt / "latest").write_text("4\n")
    record = expected_layout(plan)
    d = plan["derived"]
    assert set(record) == {"tp", "pp", "vpp", "cp", "ep", "dp", "etp", "sp", "dims", "distopt"}
    assert (record["tp"], record["dp"], record["distopt"]) == (
        d["tp"],
        d["dp"],
        d["distributed_optimizer"],
    )
    assert record["dims"].startswith("num_layers=")
    env = _bare_env(fake_torch)
    (ckpt / "iter_0000004" / "layout.json").write_text(json.dumps(record, sort_keys=True))
    r = _trainc_run(str(out), "--", "--load", "auto", env=env)
    assert r.returncode == 0 and "FAKE-RUN" in r.stdout, r.stderr
    changed = {**record, "distopt": not record["distopt"], "dims": "num_layers=2"}
    (ckpt / "iter_0000004" / "layout.json").write_text(json.dumps(changed))
    r = _trainc_run(str(out), "--", "--load", "auto", env=env)
    assert r.returncode == 4 and "FAKE-RUN" not in r.stdout
    assert r.stderr.startswith(
        f"trainc run: {ckpt} (step 4) was written by another layout (dims 'num_layers=2' -> "
        f"{record['dims']!r}, distopt {not record['distopt']} -> {record['distopt']}): "
    )
