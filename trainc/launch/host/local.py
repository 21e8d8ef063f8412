"""``trainc run OUTDIR``: start OUTDIR/torchrun.sh on this machine, after the checks that turn a
launch that cannot work here into one line and exit 4 instead of a hang or a wall of tracebacks.

* **Interpreter.** torchrun.sh runs ``$TORCHRUN`` if set, else ``"$PYTHON" -m
  torch.distributed.run`` if ``PYTHON`` is set, else ``torchrun`` from PATH. ``trainc run`` sets
  ``PYTHON`` to the interpreter it runs on (:data:`sys.executable`), so ``.venv/bin/trainc run``
  uses that venv's torch without an activated venv and never another ``torchrun`` on PATH; an
  explicit ``TORCHRUN`` is kept (the way to choose another launcher). Before starting, the
  interpreter must have torch (:func:`importlib.util.find_spec`, which imports nothing).
* **Nodes.** A plan of ``N > 1`` nodes started here runs one node's share and waits at
  MASTER_ADDR:MASTER_PORT for the other ``N - 1``. Unless this node's rank is given (``--node-rank``
  or ``NODE_RANK``; under sbatch.sh's c10d rendezvous the rank comes from Slurm), it is refused
  with what to do instead.
* **Versions.** The installed torch, NCCL, Transformer Engine, megatron-core, DeepSpeed and
  flash-attn (``importlib.metadata``, nothing imported) are checked against the known-bad table
  (``trainc/conf/known_bad_versions.yaml``, the one ``trainc lint`` checks ``launch.versions``
  against, TRC530) for the plan's features: an ``error`` entry refuses the run (unless its
  workaround is in the plan's ``launch.env`` or this environment), a ``warning`` entry is printed.
* **Device.** A ``launch.device: cuda`` plan on a machine with no GPU device node
  (``/dev/nvidia[0-9]*``, ``/dev/kfd`` for ROCm, ``/dev/dxg`` for WSL) is refused: every rank
  would fail in ``torch.cuda.set_device``.

Extra worker flags travel through the environment (``TRAINC_WORKER_ARGS``, which the worker
reads), so the generated script runs unchanged. This module reads ``plan.json`` only (no compiler
import).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainc.launch import CHECKPOINT_LAYOUT_FILE, STOPPED_MARKER, worker_engine

#: Device nodes whose presence means torch may find a CUDA (or ROCm/HIP, or WSL) GPU.
GPU_DEVICE_GLOBS = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


class RunRefused(Exception):
    """``trainc run`` cannot work here; the message says why and what to do (exit 4)."""


@dataclass(frozen=True, slots=True)
class PlanShape:
    """What ``trainc run`` needs from ``plan.json``."""

    name: str
    num_nodes: int
    procs_per_node: int
    device: str
    master_port: int


def read_shape(outdir: str) -> PlanShape | None:
    """The nodes, ranks per node and device of ``OUTDIR/plan.json``; None when it is missing or
    not a trainc plan (the script then runs unchecked, as a hand-made torchrun.sh would)."""
    try:
        with open(os.path.join(outdir, "plan.json"), encoding="utf-8") as f:
            spec = json.load(f)["spec"]
        return PlanShape(
            str(spec["name"]),
            int(spec["cluster"]["num_nodes"]),
            int(spec["cluster"]["gpus_per_node"]),
            str(spec["launch"]["device"]),
            int(spec["launch"]["master_port"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def gpu_present(globs: Sequence[str] = GPU_DEVICE_GLOBS) -> bool:
    """True when a GPU device node exists (a few ``stat`` calls; torch is not imported)."""
    return any(glob.glob(g) for g in globs)


def launch_env(
    outdir: str,
    shape: PlanShape | None,
    base: Mapping[str, str],
    worker_args: Sequence[str] = (),
    *,
    node_rank: int | None = None,
    master_addr: str | None = None,
    python: str = sys.executable,
    gpu: bool | None = None,
) -> dict[str, str]:
    """The environment torchrun.sh is started with; raises :class:`RunRefused` (with the fix)
    when the plan cannot run here. ``gpu`` None means :func:`gpu_present`."""
    env = dict(base)
    extra = [a for a in worker_args if a != "--"]
    if extra:
        env["TRAINC_WORKER_ARGS"] = " ".join(
            x for x in (env.get("TRAINC_WORKER_ARGS", ""), shlex.join(extra)) if x
        )
    if node_rank is not None:
        env["NODE_RANK"] = str(node_rank)
    if master_addr is not None:
        env["MASTER_ADDR"] = master_addr
    if not env.get("TORCHRUN"):
        env["PYTHON"] = python
        if importlib.util.find_spec("torch") is None:
            raise RunRefused(
                f"torch is not installed for {python}: install trainc with its "
                "worker extra (pip install 'trainc[worker]'), or set TORCHRUN to "
                "the torchrun to use"
            )
    if shape is None:
        return env
    if shape.device == "cuda" and not (gpu_present() if gpu is None else gpu):
        raise RunRefused(
            f"{outdir} is a CUDA plan (launch.device=cuda) and this machine has no "
            "GPU (no /dev/nvidia*); compile it with launch.device=cpu to run here "
            "on CPU processes, or run it where the GPUs are"
        )
    rank = env.get("NODE_RANK")
    if rank is not None and env.get("TRAINC_RDZV_BACKEND") != "c10d":
        if not rank.isdigit() or int(rank) >= shape.num_nodes:
            raise RunRefused(
                f"node rank {rank} is not one of the plan's nodes 0..{shape.num_nodes - 1}"
            )
        if int(rank) > 0 and not env.get("MASTER_ADDR"):
            raise RunRefused(f"node {rank} needs the address of node 0: add --master-addr HOST")
    if shape.num_nodes > 1 and rank is None and env.get("TRAINC_RDZV_BACKEND") != "c10d":
        others = shape.num_nodes - 1
        raise RunRefused(
            f"{outdir} is a {shape.num_nodes}-node plan ({shape.num_nodes} x "
            f"{shape.procs_per_node} ranks): here trainc run would start node 0's "
            f"{shape.procs_per_node} rank(s) and wait for the other {others} node(s) at "
            f"MASTER_ADDR:{shape.master_port}. Submit it to Slurm (trainc submit {outdir}), "
            f"or start it on every node (trainc run --node-rank I --master-addr NODE0 {outdir}, "
            f"I = 0..{others}), or compile a one-node plan (cluster.num_nodes=1; with "
            "launch.device=cpu for CPU processes)"
        )
    return env


def version_problems(
    outdir: str, env: Mapping[str, str], installed: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """``(errors, warnings)``: the known-bad entries the installed packages (or ``installed``)
    match for OUTDIR/plan.json's job; empty when there is no readable trainc plan. A plan.json
    that lacks a key ``trainc compile`` always writes (a hand-edited one) is not checked: one
    warning names the key."""
    from trainc import known_versions as KV

    try:
        with open(os.path.join(outdir, "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
        feats = _job_features(plan)
        job_env = {**plan["spec"]["launch"]["env"], **env}
    except KeyError as missing:
        if not (isinstance(plan, dict) and isinstance(plan.get("spec"), dict)):
            return [], []  # not a trainc plan: run unchecked
        return [], [
            f"{outdir}/plan.json has no key {missing} (trainc compile writes it): the installed "
            "versions are not checked against the known-bad table; compile the spec again"
        ]
    except (OSError, ValueError, TypeError):
        return [], []
    have = dict(KV.installed_versions() if installed is None else installed)
    errors: list[str] = []
    warnings: list[str] = []
    for e in KV.matches(have, feats, job_env):
        fix = ", ".join(f"{c} >= {v}" for c, v in e.fixed_in.items())
        work = (
            " or set " + " ".join(f"{k}={v}" for k, v in e.unless_env.items())
            if e.unless_env
            else ""
        )
        text = (
            f"installed {KV.describe(e, have)} is known-bad for this job ({e.id}): "
            f"{e.symptom}; use {fix}{work} ({e.link})"
        )
        (errors if e.severity == "error" else warnings).append(text)
    return errors, warnings


def _job_features(plan: Mapping[str, Any]) -> frozenset[str]:
    """The job's features the known-bad table matches on
    (:func:`trainc.known_versions.job_features`), from plan.json as ``trainc compile`` writes
    it: every key is read as written (the compiler fills each one). Raises KeyError for a
    missing key, TypeError / ValueError for a value of the wrong kind."""
    from trainc import known_versions as KV

    spec, d = plan["spec"], plan["derived"]
    m, p, t, lc = spec["model"], spec["parallel"], spec["training"], spec["launch"]
    c = spec["cluster"]
    pp, experts = int(p["pp"]), m["num_experts"]
    return KV.job_features(
        engine=str(spec["engine"]),
        entrypoint=str(lc["entrypoint"]),
        device=str(lc["device"]),
        ep=int(p["ep"]),
        num_experts=experts,
        dispatcher=str(m["moe_token_dispatcher_type"]),
        cp=int(p["cp"]),
        fp8=t["fp8_format"] != "none",
        zero_stage=int(p["zero_stage"]),
        tp_comm_overlap=bool(t["tp_comm_overlap"]),
        gpu=str(c["gpu"]),
        num_nodes=int(c["num_nodes"]),
        gpus_per_node=int(c["gpus_per_node"]),
        precision=str(t["precision"]),
        tp=int(p["tp"]),
        pp=pp,
        moe_dense_stage=bool(experts)
        and KV.moe_stage_without_experts(
            int(m["num_layers"]),
            pp,
            int(p["vpp"]),
            int(m["moe_layer_freq"]),
            int(m["moe_first_k_dense_layers"]),
            d["layers_per_stage"],
        ),
        moe_aux_bias=KV.moe_aux_bias_used(
            num_experts=experts,
            aux_loss_coeff=float(m["moe_aux_loss_coeff"]),
            load_balancing=str(m["moe_router_load_balancing_type"]),
            expert_bias=bool(m["moe_router_enable_expert_bias"]),
            num_groups=m["moe_router_num_groups"],
        ),
        mtp=bool(m["mtp_num_layers"]),
        fp8_recipe=str(t["fp8_recipe"]),
        fp4=t["fp4_format"] != "none",
        cp_comm_type=str(p["cp_comm_type"]),
        offload_optimizer=t["offload_optimizer"] != "none",
        num_microbatches=int(d["num_microbatches"]),
        recompute=str(t["recompute"]),
        sequence_parallel=bool(p["sequence_parallel"]),
        etp=int(d["etp"]),
    )


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` / ``--name=VALUE`` among the worker flags (the last one)."""
    got = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            got = args[i + 1]
        elif a.startswith(name + "="):
            got = a.split("=", 1)[1]
    return got


def _checkpoint_dirs(
    outdir: str, worker_args: Sequence[str]
) -> tuple[dict[str, Any], str, str | None] | None:
    """(plan.json, the folder the run saves to, the folder it resumes from or None) for the
    worker flags: ``--save``, else the plan's ``launch.save_dir``, else ``OUTDIR/checkpoints``;
    ``--load`` (``auto``: the save folder), else the plan's ``resume.load_dir``. None when
    plan.json cannot be read (the worker reports that)."""
    try:
        with open(os.path.join(outdir, "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
        spec = plan["spec"]
        save = (
            _flag(worker_args, "--save")
            or spec["launch"].get("save_dir")
            or os.path.join(outdir, "checkpoints")
        )
        load = _flag(worker_args, "--load") or (spec.get("resume") or {}).get("load_dir")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return plan, save, (save if load == "auto" else load)


def refuse_overwrite(outdir: str, worker_args: Sequence[str] = ()) -> None:
    """Raise :class:`RunRefused` when the run would start from step 1 over an earlier run's
    checkpoints: the checkpoint folder (``--save``, else the plan's ``launch.save_dir``, else
    ``OUTDIR/checkpoints``) holds a ``latest`` marker, and neither ``--load`` nor the plan's
    ``resume.load_dir`` nor requeue (``--load auto``) resumes it. The worker would otherwise
    save its step-N checkpoints over the earlier ones without a word."""
    dirs = _checkpoint_dirs(outdir, worker_args)
    if dirs is None or dirs[2]:
        return
    save = dirs[1]
    try:
        with open(os.path.join(save, "latest"), encoding="utf-8") as f:
            step = f.read().strip()
    except OSError:
        return
    raise RunRefused(
        f"{save} holds the checkpoints of an earlier run (latest: step {step or '?'}); this run "
        f"would start at step 1 and save over them. Resume it: trainc run {outdir} -- --load "
        f"auto; or keep it and start afresh elsewhere: trainc run {outdir} -- --save NEW_DIR "
        "(or move the folder away)"
    )


def expected_layout(plan: dict[str, Any], worker_args: Sequence[str] = ()) -> dict[str, Any]:
    """The record the Megatron-Core worker writes beside its checkpoint shards for this plan and
    these worker flags (``trainc.launch.worker.engines.megatron._ckpt_layout``): the parallel sizes
    tp / pp / vpp / cp / ep / dp / etp / sp, ``dims`` (the model dimensions the worker builds,
    shrunk under ``--shrink`` or ``launch.shrink``, :meth:`trainc.launch.shrink.Dims.describe`)
    and ``distopt`` (the distributed optimizer's sharded state). Raises KeyError / TypeError /
    ValueError for a plan.json that is not a trainc plan."""
    from trainc.launch.shrink import full_dims, shrink

    d = plan["derived"]
    want: dict[str, Any] = {k: int(d[k]) for k in ("tp", "pp", "vpp", "cp", "ep", "dp", "etp")}
    want["sp"] = bool(d["sequence_parallel"])
    small = "--shrink" in worker_args or bool(plan["spec"]["launch"].get("shrink"))
    want["dims"] = (shrink(plan) if small else full_dims(plan)).describe()
    want["distopt"] = bool(d["distributed_optimizer"])
    return want


def refuse_layout_change(outdir: str, worker_args: Sequence[str] = ()) -> None:
    """Raise :class:`RunRefused` when the run would resume (``--load DIR``, ``--load auto``:
    the save folder, or the plan's ``resume.load_dir``) a trainc worker checkpoint written by
    another layout: its ``layout.json`` (:data:`trainc.launch.CHECKPOINT_LAYOUT_FILE`) against
    :func:`expected_layout` (the parallel sizes, the model dims, the distributed optimizer),
    each differing field named. Only the fields the record holds are compared (an older record
    has the parallel sizes alone). The worker refuses it too, but only once every rank has
    started (a traceback per rank, then torchrun's). Checkpoints without the record, engines whose
    checkpoints carry none (:attr:`trainc.launch.WorkerEngine.layout_record`) and
    ``--reference`` runs are left to the worker."""
    dirs = _checkpoint_dirs(outdir, worker_args)
    if "--reference" in worker_args or dirs is None:
        return
    plan, _, where = dirs
    if not where:
        return
    try:
        spec = plan["spec"]
        if (
            not worker_engine(spec["engine"]).layout_record
            or spec["launch"].get("entrypoint", "trainc") != "trainc"
        ):
            return
        want = expected_layout(plan, worker_args)
        with open(os.path.join(where, "latest"), encoding="utf-8") as f:
            step = int(f.read().strip())
        with open(
            os.path.join(where, f"iter_{step:07d}", CHECKPOINT_LAYOUT_FILE), encoding="utf-8"
        ) as f:
            saved = json.load(f)
        if not isinstance(saved, dict):
            return
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    differ = [k for k in want if k in saved and saved[k] != want[k]]
    if not differ:
        return
    moved = ", ".join(
        f"{k} {saved[k]} -> {want[k]}" if k != "dims" else f"dims {saved[k]!r} -> {want[k]!r}"
        for k in differ
    )
    raise RunRefused(
        f"{where} (step {step}) was written by another layout ({moved}): the trainc worker's "
        "checkpoints load only into the layout that wrote them (TRC534). Compile the saving "
        f"layout to resume it, or start afresh: trainc run {outdir} -- --save NEW_DIR "
        "(without --load)"
    )


def run(
    outdir: str,
    worker_args: Sequence[str] = (),
    *,
    node_rank: int | None = None,
    master_addr: str | None = None,
) -> int:
    """Start ``OUTDIR/torchrun.sh`` here; its output streams through; return its exit code
    (4 when it is missing, cannot be started or is refused by :func:`launch_env`)."""
    script = os.path.join(outdir, "torchrun.sh")
    if not os.path.isfile(script):
        print(
            f"trainc run: {script}: not found (run `trainc compile SPEC -o {outdir}` first)",
            file=sys.stderr,
        )
        return 4
    try:
        env = launch_env(
            outdir,
            read_shape(outdir),
            os.environ,
            worker_args,
            node_rank=node_rank,
            master_addr=master_addr,
        )
    except RunRefused as e:
        print(f"trainc run: {e}", file=sys.stderr)
        return 4
    bad_flags = worker_flag_error(script, env)
    if bad_flags:
        print(
            f"trainc run: the worker flags (after --) are not valid: {bad_flags}", file=sys.stderr
        )
        return 2
    try:
        refuse_overwrite(outdir, worker_args)
        refuse_layout_change(outdir, worker_args)
    except RunRefused as e:
        print(f"trainc run: {e}", file=sys.stderr)
        return 4
    bad, warn = version_problems(outdir, os.environ)
    for text in warn:
        print(f"trainc run: warning: {text}", file=sys.stderr)
    if bad:
        for text in bad:
            print(f"trainc run: {text}", file=sys.stderr)
        return 4
    if node_rank is not None or "NODE_RANK" in os.environ:
        print(
            f"trainc run: node {env['NODE_RANK']}, master {env.get('MASTER_ADDR', '127.0.0.1')}",
            file=sys.stderr,
            flush=True,
        )
    try:
        # a process group of its own: a signal to trainc reaches torchrun.sh, torchrun and its
        # children through _supervise, which waits for them all
        proc = subprocess.Popen(["bash", script], env=env, start_new_session=True)
    except OSError as e:
        print(f"trainc run: cannot start {script}: {e}", file=sys.stderr)
        return 4
    with open(script, encoding="utf-8") as f:
        saves = "trainc.launch.worker" in f.read()
    return _supervise(proc, outdir, worker_args, saves)


def worker_flag_error(script: str, env: Mapping[str, str]) -> str | None:
    """argparse's complaint about the worker flags in ``TRAINC_WORKER_ARGS`` (what follows
    ``--``), checked here with the worker's own parser before any rank starts (each rank would
    print it, then torchrun its traceback), or None when they parse or the script does not
    start the trainc worker."""
    with open(script, encoding="utf-8") as f:
        if "trainc.launch.worker" not in f.read():
            return None
    from trainc.launch.worker_args import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_args([*shlex.split(env.get("TRAINC_WORKER_ARGS", "")), "--plan", "plan.json"])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return lines[-1].split("error: ", 1)[-1] if lines else "argparse refused them"
    return None


#: Signals ``trainc run`` passes on to the job's process group. SIGUSR1 (Slurm's ``--signal``
#: before the time limit) makes the workers save and stop, as under sbatch; the others stop it.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
#: Signals that stop a trainc worker job by saving first: the job gets SIGUSR1 instead (the
#: worker saves the step it is on and stops,
#: :func:`trainc.launch.worker.runtime.checkpoint_or_stop`),
#: as Megatron-LM's ``--exit-signal-handler`` saves on SIGTERM (megatron/training/training.py,
#: ``train`` checks ``get_signal_handler().signals_received()`` after each iteration, core_v0.16.x).
SAVE_AND_STOP = (signal.SIGINT, signal.SIGTERM)
#: Seconds the job's processes get to stop after SIGINT / SIGTERM / SIGHUP (torchrun gives its
#: workers 30 s) before the group is killed.
STOP_GRACE_S = 60.0


def _supervise(
    proc: subprocess.Popen[bytes],
    outdir: str | None = None,
    worker_args: Sequence[str] = (),
    saves: bool = False,
) -> int:
    """Wait for the job started as ``proc`` (the leader of its own process group) and return
    its exit code. A forwarded signal (:data:`FORWARDED`) goes to the whole group; with
    ``saves`` (the script runs the trainc worker) the first SIGINT (Ctrl-C) or SIGTERM (Slurm's
    before the time limit, ``scancel``) goes as SIGUSR1: every rank finishes its step, saves it
    and stops, and trainc says in one line which step was saved where and how to resume it. A
    second Ctrl-C kills the group. After SIGINT, SIGTERM or SIGHUP trainc waits until every
    process of the group has ended (torchrun.sh ends at once, torchrun after stopping its
    workers; a second Ctrl-C or :data:`STOP_GRACE_S` kills them) and returns 128 + the signal
    (130 for Ctrl-C, 143 for SIGTERM), the shell's convention."""
    pgid = proc.pid
    got: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        stopping = any(s != signal.SIGUSR1 for s in got)
        again = sig == signal.SIGINT and signal.SIGINT in got
        got.append(sig)
        send = sig
        if again:
            send = signal.SIGKILL
        elif saves and sig in SAVE_AND_STOP:
            if stopping:
                return  # the save is under way; a second Ctrl-C kills
            send = signal.SIGUSR1
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, send)

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        rc = proc.wait()
        stops = [s for s in got if s != signal.SIGUSR1]
        if not stops:
            return rc
        start, killed = time.monotonic(), False
        # (a zombie no init reaps keeps the group "alive": give up 5 s after SIGKILL)
        while _group_alive(pgid) and time.monotonic() - start < STOP_GRACE_S + 5:
            if not killed and time.monotonic() - start > STOP_GRACE_S:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                killed = True
            time.sleep(0.1)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    first = stops[0]
    name = signal.Signals(first).name
    # (the marker says the workers saved; torchrun.sh's own exit code may be USR1's 138)
    saved = (
        _saved_step(outdir, worker_args)
        if saves and outdir and first in SAVE_AND_STOP and signal.SIGINT not in stops[1:]
        else None
    )
    if saved is None:
        print(f"trainc run: interrupted ({name}); the job's processes have ended", file=sys.stderr)
    else:
        step, where, save_flag = saved
        print(
            f"trainc run: interrupted ({name}) at step {step}: saved checkpoint to {where}; "
            f"resume with trainc run {outdir} --{save_flag} --load auto",
            file=sys.stderr,
        )
    return 128 + int(first)


def _saved_step(outdir: str, worker_args: Sequence[str]) -> tuple[int, str, str] | None:
    """(step, checkpoint folder, `` --save DIR`` when the run saved elsewhere than the plan
    says) of the checkpoint the workers wrote when they stopped on SIGUSR1, or None when
    there is none. The stop marker (:data:`trainc.launch.STOPPED_MARKER`, which asks
    sbatch.sh to requeue a time-limited job) is removed: this stop was asked for here."""
    dirs = _checkpoint_dirs(outdir, worker_args)
    if dirs is None:
        return None
    save = dirs[1]
    marker = os.path.join(save, STOPPED_MARKER)
    if not os.path.exists(marker):
        return None
    with contextlib.suppress(OSError):
        os.remove(marker)
    try:
        with open(os.path.join(save, "latest"), encoding="utf-8") as f:
            text = f.read().strip()
        step = int(text.removeprefix("iter_"))  # DeepSpeed's "latest" holds its tag
    except (OSError, ValueError):
        return None
    flag = _flag(worker_args, "--save")
    return (
        step,
        os.path.join(save, f"iter_{step:07d}"),
        f" --save {shlex.quote(flag)}" if flag else "",
    )


def _group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still running."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
