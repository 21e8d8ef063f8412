"""TRC5xx: launch settings (job name, Slurm time, entry point, environment).

Sources: Slurm job-name and --time syntax; Megatron-LM core_v0.16.1 validate_args
(CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1); torchrun / DeepSpeed v0.19.8 rendezvous
variables (``deepspeed/comm/comm.py::init_distributed``); bug cases BC-057, BC-059 (rendezvous
pinned to localhost or the login node), BC-063 (CUDA_VISIBLE_DEVICES vs processes per node),
BC-067/BC-069 (NCCL socket interface).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived, domain_group_nodes, slurm_segment
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.support.secrets import is_secret, redact
from trainc.compiler.support.slurm_time import UNLIMITED_TIMES, time_limit_seconds
from trainc.compiler.validate.util import show
from trainc.schemas import Device, Engine, Entrypoint, Gpu, TrainSpec

_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
# Slurm --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Megatron --split: three non-negative decimal numbers (Megatron also takes '/' separators).
_SPLIT = re.compile(r"\d+(\.\d+)?,\d+(\.\d+)?,\d+(\.\d+)?")
#: Set by torchrun / the generated sbatch from the allocation (DeepSpeed v0.19.8
#: ``deepspeed/comm/comm.py::init_distributed`` reads them; bug cases BC-057, BC-059): a spec
#: must not pin them.
LAUNCHER_OWNED = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    # torchrun's flag defaults; Kubeflow Trainer v2 sets them in every pod and
    # its webhook refuses a TrainJob whose trainer.env names them (v2.3.0
    # pkg/constants TorchRunReservedEnvNames)
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
#: Kubernetes object names (RFC 1123 subdomain), e.g. a ClusterTrainingRuntime's metadata.name.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: Interface names that never carry inter-node traffic (loopback, container bridges).
_LOCAL_IF = re.compile(r"(lo|docker\d*|veth\w*|br-\w*|virbr\d*|cni\d*|flannel\S*)")
#: Parameters beyond which a CPU run without shrink cannot hold the model (about 8 GiB of fp32).
CPU_MAX_PARAMS = 2 * 10**9


def launcher(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """All TRC5xx rules (unknown device / entrypoint / GPU names are TRC004 at load time: the
    schema's enums), in this order: the job name, the Slurm time, the Megatron-LM checkout, a
    custom GPU's figures, the data split, the environment (names, CUDA_DEVICE_MAX_CONNECTIONS,
    variables that contradict the layout), control characters, the Slurm segment, the
    Kubernetes runtime and save folder, a full-size CPU model."""
    yield from _job_name(spec)
    yield from _time_limit(spec)
    yield from _megatron_lm_path(spec)
    yield from _custom_gpu(spec)
    yield from _data_split(spec)
    yield from _env_names(spec)
    yield from _max_connections(spec, d)
    yield from _env(spec)
    yield from _printable(spec)
    yield from _segment(spec, d)
    yield from _kubernetes(spec)
    yield from _cpu_full_size(spec)


def _job_name(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC501: the job name names the Slurm job and the output folder."""
    if not _NAME.fullmatch(spec.name) or spec.name.startswith("-") or not spec.name.strip("."):
        # only dots ('.', '..', '...'): out/<name> would be out/ itself or its parent
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.name).strip("-")[:128]
        safe = safe if safe.strip(".") else "trainc-job"
        yield diag(
            R.JOB_NAME,
            f"name ({spec.name!r}) must be 1-128 letters, digits, '.', '_' or "
            "'-', not only dots (it names the Slurm job and the output folder)",
            "name",
            fix=f"set name to {safe!r}",
            edits={"name": safe},
            name=spec.name,
        )


def _is_slurm_time(value: str) -> bool:
    """Slurm's ``--time`` syntax, or one of its spellings of "no limit"."""
    return bool(_TIME.fullmatch(value)) or value.strip().lower() in UNLIMITED_TIMES


def _time_limit(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC502: ``launch.time_limit`` and ``cluster.max_time_limit`` in Slurm's ``--time``
    syntax; TRC514: the job's limit within the partition's MaxTime."""
    lc, most = spec.launch, spec.cluster.max_time_limit
    bad = False
    for key, value, example in (
        ("launch.time_limit", lc.time_limit, 'time_limit: "04:00:00"'),
        ("cluster.max_time_limit", most, 'max_time_limit: "2-00:00:00"'),
    ):
        if value is not None and not _is_slurm_time(value):
            bad = True
            yield diag(
                R.TIME_LIMIT,
                f"{key.split('.')[1]} ({value!r}) is not a Slurm time "
                "([D-]HH:MM:SS, minutes, or UNLIMITED)",
                key,
                fix=f"quote it in YAML, e.g. {example}",
                time_limit=value,
            )
    if most is not None and not bad:
        yield from _partition_max_time(lc.time_limit, most, lc.requeue)


def _partition_max_time(time_limit: str, most: str, requeue: bool) -> Iterator[Diagnostic]:
    """TRC514: ``launch.time_limit`` (``#SBATCH --time``) above ``cluster.max_time_limit``, the
    partition's MaxTime (no limit, ``UNLIMITED`` or 0, is above any finite MaxTime). sbatch's
    --time (Slurm sbatch(1)): a job whose limit exceeds the partition's is left pending, possibly
    indefinitely; with ``EnforcePartLimits`` sbatch refuses it ("Requested time limit is invalid
    (missing or exceeds some limit)", github.com/NVIDIA-NeMo/RL/pull/3052)."""
    asked, cap = time_limit_seconds(time_limit), time_limit_seconds(most)
    if cap is None or (asked is not None and asked <= cap):
        return
    shown = "no limit" if asked is None else f"{asked:,} s"
    split = (
        "the job already requeues: each segment resumes from the checkpoint saved at the "
        "time-limit signal"
        if requeue
        else "with launch.requeue: true a longer run continues in requeued segments of at most "
        "that, each resuming from the checkpoint saved at the time-limit signal"
    )
    yield diag(
        R.PARTITION_MAX_TIME,
        f"launch.time_limit ({time_limit} = {shown}) exceeds the partition's MaxTime "
        f"(cluster.max_time_limit {most} = {cap:,} s): sbatch refuses the job (EnforcePartLimits) "
        "or leaves it pending indefinitely",
        "launch.time_limit",
        related=("cluster.max_time_limit",),
        fix=f"set launch.time_limit to at most {most!r}; {split}",
        edits={"launch.time_limit": most}
        if requeue
        else {"launch.time_limit": most, "launch.requeue": True},
        time_limit_seconds=asked,
        max_time_limit_seconds=cap,
    )


def _megatron_lm_path(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC503: entrypoint megatron-lm runs a Megatron-LM checkout."""
    lc = spec.launch
    if lc.entrypoint is Entrypoint.megatron_lm and not lc.megatron_lm_path:
        yield diag(
            R.MEGATRON_LM_PATH,
            "entrypoint megatron-lm runs pretrain_gpt.py from a "
            "Megatron-LM checkout, but launch.megatron_lm_path is not set",
            "launch.megatron_lm_path",
            related=("launch.entrypoint",),
            fix="set launch.megatron_lm_path to the checkout's directory",
            entrypoint=lc.entrypoint.value,
        )


def _custom_gpu(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC003: ``gpu: custom`` has no profile, so the cluster gives its figures."""
    c = spec.cluster
    if c.gpu is Gpu.custom:
        for key in (
            "gpu_memory_gib",
            "peak_tflops",
            "intra_node_bandwidth_gbps",
            "inter_node_bandwidth_gbps",
        ):
            if getattr(c, key) is None:
                yield diag(
                    R.MISSING_VALUE,
                    f"cluster.{key} is required with gpu: custom",
                    f"cluster.{key}",
                    related=("cluster.gpu",),
                    fix=f"set cluster.{key}, or name a GPU preset in cluster.gpu",
                    gpu=c.gpu.value,
                )


def _data_split(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC512: Megatron's ``--split``, three numbers with a positive sum."""
    lc = spec.launch
    if not _SPLIT.fullmatch(lc.data_split) or not any(
        float(x) > 0 for x in lc.data_split.split(",")
    ):
        yield diag(
            R.DATA_SPLIT,
            f"launch.data_split ({lc.data_split!r}) is not three "
            "non-negative numbers separated by commas with a positive sum (train, "
            "validation, test parts, e.g. 100,0,0 or 98,1,1)",
            "launch.data_split",
            fix='set launch.data_split to e.g. "100,0,0"',
            edits={"launch.data_split": "100,0,0"},
            data_split=lc.data_split,
        )


def _env_names(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC504: ``launch.env`` keys are environment variable names."""
    lc = spec.launch
    for k in sorted(lc.env):
        if not _ENV.fullmatch(k):
            yield diag(
                R.ENV_NAME,
                f"launch.env key ({k!r}) is not a valid environment variable name",
                f"launch.env.{k}",
                fix="use letters, digits and '_' only",
                name=k,
            )


def _max_connections(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC505: ``CUDA_DEVICE_MAX_CONNECTIONS`` against what the engine's communication needs
    (the checks of :data:`MAX_CONNECTIONS_CHECKS` for ``spec.engine``)."""
    mdc = spec.launch.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if mdc is None:
        return
    for check in MAX_CONNECTIONS_CHECKS[spec.engine]:
        yield from check(spec, d, mdc)


def _one_queue_fsdp(spec: TrainSpec, d: Derived, mdc: str) -> Iterator[Diagnostic]:
    """engine=fsdp: one work queue serializes FSDP2's communication with its compute."""
    if str(mdc).strip() == "1":
        # One hardware work queue runs kernels in launch order: FSDP2's all-gather prefetch
        # and reduce-scatter on their own streams then wait for compute instead of overlapping
        # it (https://github.com/verl-project/verl/pull/6976 profiled the lost overlap on an
        # FSDP2 backend; Megatron-LM's Megatron-FSDP guide also tells users to unset it).
        yield diag(
            R.ENV_MAX_CONNECTIONS,
            "launch.env sets CUDA_DEVICE_MAX_CONNECTIONS=1 with "
            "engine=fsdp: one CUDA work queue serializes FSDP2's all-gather prefetch and "
            "gradient reduce-scatter with the compute they should overlap (a Megatron "
            "tensor-parallel setting; FSDP2 needs none)",
            "launch.env.CUDA_DEVICE_MAX_CONNECTIONS",
            fix="remove launch.env.CUDA_DEVICE_MAX_CONNECTIONS (the CUDA default, 8 "
            "queues, lets FSDP2 overlap communication)",
            severity=Severity.warning,
            value=str(mdc),
        )


def _one_queue_dp_only(spec: TrainSpec, d: Derived, mdc: str) -> Iterator[Diagnostic]:
    """engine=megatron with tp = cp = 1: one work queue serializes the data-parallel
    communication with compute."""
    p = spec.parallel
    if (
        p.tp == 1
        and p.cp == 1
        and (d.dp or 1) > 1
        and p.zero_stage != 3
        and str(mdc).strip() == "1"
    ):
        # Megatron needs the single queue for TP/CP only; with tp = cp = 1 it serializes the
        # bucketed DP reduce-scatter / all-gather behind the backward and forward compute:
        # https://github.com/NVIDIA/Megatron-LM/issues/1468 (TP 1, DP 64: no overlap in the
        # trace until CUDA_DEVICE_MAX_CONNECTIONS was unset). Megatron-FSDP is TRC383's.
        yield diag(
            R.ENV_MAX_CONNECTIONS,
            "launch.env sets CUDA_DEVICE_MAX_CONNECTIONS=1 with tp "
            f"= cp = 1 (dp {d.dp}): Megatron needs one CUDA work queue only to order its "
            "TP/CP communication, and here it serializes the data-parallel gradient "
            "reduce-scatter and parameter all-gather behind compute (no overlap)",
            "launch.env.CUDA_DEVICE_MAX_CONNECTIONS",
            fix="remove launch.env.CUDA_DEVICE_MAX_CONNECTIONS (trainc exports it only "
            "with tp or cp > 1)",
            severity=Severity.warning,
            value=str(mdc),
            tp=p.tp,
            cp=p.cp,
            dp=d.dp,
        )


def _one_queue_for_tp_cp(spec: TrainSpec, d: Derived, mdc: str) -> Iterator[Diagnostic]:
    """engine=megatron and engine=deepspeed with tp or cp > 1: Megatron orders its TP/CP
    communication kernels through one hardware queue, so the variable must be 1 (trainc
    exports it so)."""
    p = spec.parallel
    if (p.tp > 1 or p.cp > 1) and str(mdc) != "1":
        yield diag(
            R.ENV_MAX_CONNECTIONS,
            f"launch.env sets CUDA_DEVICE_MAX_CONNECTIONS={mdc} but "
            f"tp ({p.tp}) or cp ({p.cp}) > 1 needs 1 (Megatron orders its comm kernels "
            "through one hardware queue)",
            "launch.env.CUDA_DEVICE_MAX_CONNECTIONS",
            fix="remove it; trainc exports CUDA_DEVICE_MAX_CONNECTIONS=1",
            value=str(mdc),
            tp=p.tp,
            cp=p.cp,
        )


_MaxConnectionsCheck = Callable[[TrainSpec, Derived, str], Iterator[Diagnostic]]
#: The TRC505 checks of each engine, in order (Megatron-LM core_v0.16.1 validate_args asks for
#: CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1; engine=fsdp needs no single queue).
MAX_CONNECTIONS_CHECKS: dict[Engine, tuple[_MaxConnectionsCheck, ...]] = {
    Engine.megatron: (_one_queue_dp_only, _one_queue_for_tp_cp),
    Engine.deepspeed: (_one_queue_for_tp_cp,),
    Engine.fsdp: (_one_queue_fsdp,),
}


def _kubernetes(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC521, TRC522: the ClusterTrainingRuntime trainjob.yaml names, and the checkpoint
    folder the Kubernetes manifests mount."""
    lc = spec.launch
    if not _DNS_SUBDOMAIN.fullmatch(lc.k8s_runtime) or len(lc.k8s_runtime) > 253:
        yield diag(
            R.K8S_RUNTIME,
            f"launch.k8s_runtime ({lc.k8s_runtime!r}) is not a "
            "Kubernetes object name, so trainjob.yaml's runtimeRef cannot name a "
            "ClusterTrainingRuntime",
            "launch.k8s_runtime",
            fix="set launch.k8s_runtime to the runtime's metadata.name, e.g. "
            "torch-distributed (kubectl get clustertrainingruntimes)",
            edits={"launch.k8s_runtime": "torch-distributed"},
            value=lc.k8s_runtime,
        )
    if lc.save_dir and not lc.save_dir.startswith("/") and lc.entrypoint is Entrypoint.trainc:
        yield diag(
            R.K8S_SAVE_DIR,
            f"launch.save_dir ({lc.save_dir!r}) is a relative path: "
            "trainjob.yaml and pytorchjob.yaml mount the checkpoint volume at it, and a "
            "container mount path must be absolute, so their pods would not start "
            "(sbatch.sh and torchrun.sh resolve it against the directory they run in)",
            "launch.save_dir",
            fix=f"set launch.save_dir to an absolute path, e.g. /{lc.save_dir.lstrip('./')}",
            edits={"launch.save_dir": "/" + lc.save_dir.lstrip("./")},
            value=lc.save_dir,
        )


def _cpu_full_size(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC506: a CPU run without shrink builds the full model (about 12 L h^2 + 2 V h
    parameters)."""
    lc = spec.launch
    if lc.device is Device.cpu and not lc.shrink:
        m = spec.model
        approx = 12 * m.num_layers * m.hidden_size**2 + 2 * m.vocab_size * m.hidden_size
        if approx > CPU_MAX_PARAMS:
            yield diag(
                R.CPU_FULL_SIZE,
                f"launch.device=cpu without shrink builds the full model "
                f"(~{approx / 1e9:.1f}B parameters) on CPU",
                "launch.shrink",
                related=("launch.device",),
                fix="set launch.shrink=true",
                edits={"launch.shrink": True},
                approx_params_billion=f"{approx / 1e9:.1f}",
            )


def _env(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC507-TRC510, TRC513: environment variables that contradict the layout or the rendezvous,
    secrets, and NCCL_IB_DISABLE on a multi-node job."""
    env, c = spec.launch.env, spec.cluster
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and spec.launch.device is Device.cuda:
        devs = [x for x in str(cvd).split(",") if x.strip()]
        if len(devs) != c.gpus_per_node:
            yield diag(
                R.VISIBLE_DEVICES,
                f"launch.env CUDA_VISIBLE_DEVICES ({cvd!r}) exposes "
                f"{len(devs)} GPUs but gpus_per_node ({c.gpus_per_node}) ranks start on "
                "each node; the extra ranks fail with 'invalid device ordinal'",
                "launch.env.CUDA_VISIBLE_DEVICES",
                related=("cluster.gpus_per_node",),
                fix=f"set cluster.gpus_per_node={len(devs)} (and re-check the layout), "
                "or remove CUDA_VISIBLE_DEVICES and let Slurm assign the GPUs",
                visible=len(devs),
                gpus_per_node=c.gpus_per_node,
            )
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        val = env.get(var)
        if val is None:
            continue
        names = [n.strip().lstrip("=") for n in str(val).split(",")]
        exclude = str(val).startswith("^")
        local = [n for n in names if _LOCAL_IF.fullmatch(n)]
        if not exclude and (
            not str(val).strip() or (c.num_nodes > 1 and local and len(local) == len(names))
        ):
            yield diag(
                R.SOCKET_IFNAME,
                f"launch.env {var} ({val!r}) selects only loopback or "
                f"container-bridge interfaces, which cannot reach the other "
                f"{c.num_nodes - 1} node(s)",
                f"launch.env.{var}",
                related=("cluster.num_nodes",),
                fix=f"set {var} to the fabric interface (e.g. ib0 or bond0), or an "
                "exclusion such as ^lo,docker,veth",
                value=str(val),
            )
    ib_off = env.get("NCCL_IB_DISABLE")
    if c.num_nodes > 1 and ib_off is not None and str(ib_off).strip().lower() in ("1", "true"):
        # NCCL_IB_DISABLE=1 disables the IB verbs transport, RoCE included: inter-node traffic
        # goes over TCP sockets (NCCL environment-variable docs). A RoCE cluster measured
        # +56 % step time with it (pytorch-experiment-template issue 11).
        yield diag(
            R.NCCL_IB_DISABLED,
            f"launch.env NCCL_IB_DISABLE={ib_off} on {c.num_nodes} "
            "nodes: NCCL then uses TCP sockets instead of InfiniBand / RoCE between nodes, "
            "so every cross-node collective runs several times slower",
            "launch.env.NCCL_IB_DISABLE",
            related=("cluster.num_nodes",),
            fix="remove NCCL_IB_DISABLE (set NCCL_IB_HCA / NCCL_SOCKET_IFNAME instead if "
            "NCCL picks the wrong devices); keep it only on a cluster without IB or "
            "RoCE",
            value=str(ib_off),
            num_nodes=c.num_nodes,
        )
    for var in sorted(k for k in env if is_secret(k, env[k])):
        why = "looks like a secret" if is_secret(var) else "holds a URL with a password"
        yield diag(
            R.SECRET_IN_SPEC,
            f"launch.env {var} {why}: trainc does not "
            "write its value (plan.json shows ***); the generated scripts read "
            f"{var} from the environment at submit time",
            f"launch.env.{var}",
            fix=f"remove {var} from the spec and export it where sbatch/torchrun run "
            "(pytorchjob.yaml reads it from the Kubernetes Secret <job>-secrets)",
            variable=var,
        )  # the name only: the value must not reach any output
    for var in LAUNCHER_OWNED:
        if var in env:
            yield diag(
                R.LAUNCHER_ENV,
                f"launch.env sets {var} ({env[var]!r}), which the generated "
                "torchrun/sbatch scripts derive per job (first host of the allocation, one "
                "port for all nodes); a fixed or launch-node value hangs the rendezvous",
                f"launch.env.{var}",
                related=("launch.master_port",),
                fix=f"remove {var} from launch.env"
                + (" and set launch.master_port" if var == "MASTER_PORT" else ""),
                variable=var,
                value=str(env[var]),
            )


def _segment(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC520: the ``#SBATCH --segment`` that sbatch.sh asks for (:func:`slurm_segment`) against
    the node count, the NVLink domain and the TP x CP / ETP x EP groups.

    Slurm's topology/block plugin builds the allocation from segments of ``--segment`` nodes,
    each inside one block (https://slurm.schedmd.com/topology.html); a group of consecutive
    node ranks stays on NVLink only if no segment boundary cuts it, i.e. when the segment is a
    multiple of the nodes the group spans (:func:`domain_group_nodes`).
    """
    c, p, lc = spec.cluster, spec.parallel, spec.launch
    dom = c.nvlink_domain_size or c.gpus_per_node
    per_domain = max(dom // c.gpus_per_node, 1)
    span = domain_group_nodes(
        p.tp, p.cp, d.etp, p.ep if spec.model.num_experts else 1, c.gpus_per_node
    )
    seg = slurm_segment(c.num_nodes, c.gpus_per_node, dom, lc.slurm_segment, span)
    facts: dict[str, Any] = {
        "segment": seg,
        "num_nodes": c.num_nodes,
        "nodes_per_domain": per_domain,
        "group_nodes": span,
    }
    cap = per_domain if per_domain > 1 else c.num_nodes  # no domain wider than a node
    fits = span if span <= per_domain else 1  # a group wider than a domain is TRC105/TRC107
    good = [
        s
        for s in range(min(cap, c.num_nodes), 1, -1)
        if c.num_nodes % s == 0 and (s % fits == 0 or s == c.num_nodes)
    ]
    # the fewest nodes, at least num_nodes, whose derived segment holds whole groups
    step = math.lcm(per_domain if per_domain > 1 else max(seg, 2), fits)
    nodes = next(
        (
            n
            for n in range(c.num_nodes, c.num_nodes + step + 1)
            if (s := slurm_segment(n, c.gpus_per_node, max(dom, c.gpus_per_node * cap), None, fits))
            > 1
            and s % fits == 0
        ),
        -(-c.num_nodes // step) * step,
    )
    if seg == 0:
        if lc.slurm_segment is None and per_domain > 1 and c.num_nodes > per_domain:
            yield diag(
                R.SLURM_SEGMENT,
                f"no segment size above 1 divides cluster.num_nodes "
                f"({c.num_nodes}) and fits the NVLink domain ({per_domain} nodes of "
                f"{c.gpus_per_node} GPUs; TP x CP / ETP x EP groups span {span} nodes), so "
                "sbatch.sh asks for no --segment (segment 0) and Slurm may scatter the job over "
                "partial domains",
                "cluster.num_nodes",
                related=("launch.slurm_segment", "cluster.nvlink_domain_size"),
                fix=f"set cluster.num_nodes={nodes} (segments of "
                f"{slurm_segment(nodes, c.gpus_per_node, dom, None, span)} nodes)",
                edits={"cluster.num_nodes": nodes},
                **facts,
            )
        return
    why = []
    if c.num_nodes % seg:
        why.append(
            f"it does not divide cluster.num_nodes ({c.num_nodes}): the allocation is "
            "made of whole segments"
        )
    if per_domain > 1 and seg > per_domain:
        why.append(
            f"it is wider than one NVLink domain ({per_domain} nodes = "
            f"{dom} GPUs / {c.gpus_per_node}), so no block can hold a segment"
        )
    elif per_domain == 1 and seg > 1:
        why.append(
            f"it is wider than one NVLink domain (1 node: cluster.nvlink_domain_size "
            f"{dom} = gpus_per_node), so a segment of {seg} nodes keeps no group on "
            "NVLink that one node does not and only narrows where Slurm may place the "
            "job"
        )
    if seg % fits and c.num_nodes > seg:  # one segment: no boundary to cut a group
        why.append(
            f"TP x CP / ETP x EP groups span {span} nodes (tp*cp = {p.tp * p.cp}, "
            f"etp*ep = {d.etp * p.ep} GPUs) and a segment of {seg} cuts some of them "
            "across two segments, which Slurm may place in two NVLink domains"
        )
    if not why:
        return
    if per_domain == 1:  # derived: no --segment where the NVLink domain is one node
        fix = "remove launch.slurm_segment (derived: no --segment line)"
        edits: dict[str, Any] = {"launch.slurm_segment": None}
    elif good:
        fix = f"set launch.slurm_segment to one of {{{show(good)}}}"
        edits = {"launch.slurm_segment": good[0]}
    else:
        fix = f"set cluster.num_nodes={nodes}"
        edits = {"cluster.num_nodes": nodes}
        if lc.slurm_segment is not None:
            fix += " and remove launch.slurm_segment (derived then)"
            edits["launch.slurm_segment"] = None
    yield diag(
        R.SLURM_SEGMENT,
        f"sbatch.sh's #SBATCH --segment={seg}: " + "; ".join(why),
        "launch.slurm_segment",
        related=("cluster.num_nodes", "cluster.nvlink_domain_size", "parallel.tp", "parallel.ep"),
        fix=fix + ", or launch.slurm_segment=0 to ask for no segment",
        edits=edits,
        **facts,
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STRING_KEYS = (
    "launch.partition",
    "launch.account",
    "launch.time_limit",
    "launch.container_image",
    "launch.megatron_lm_path",
    "launch.data_path",
    "launch.save_dir",
    "training.nvme_path",
    "launch.data_split",
)


def _printable(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC511: control characters in strings that reach scripts or #SBATCH lines."""
    values: list[tuple[str, str]] = []
    for key in _STRING_KEYS:
        section, name = key.split(".")
        v = getattr(getattr(spec, section), name)
        if isinstance(v, str):
            values.append((key, v))
    for i, mount in enumerate(spec.launch.container_mounts or []):
        values.append((f"launch.container_mounts[{i}]", mount))
    for k, v in sorted(spec.launch.env.items()):
        if "\x00" in v:  # other characters are quoted safely in the scripts' export lines
            values.append((f"launch.env.{k}", v))
    for key, v in values:
        if _CONTROL.search(v):
            shown = redact(key, repr(v))  # a secret's value never reaches a diagnostic
            yield diag(
                R.LAUNCH_VALUE,
                f"{key} ({shown}) contains a control character",
                key.split("[")[0],
                fix=f"remove newlines and control characters from {key}",
                value=shown,
            )
