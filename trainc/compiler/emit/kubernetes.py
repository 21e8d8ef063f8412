"""Kubernetes artifacts: ``trainjob.yaml``, a Kubeflow Trainer v2 TrainJob
(``trainer.kubeflow.org/v1alpha1``, :func:`trainjob_dict`), and ``pytorchjob.yaml``, the same job
as a training-operator v1 PyTorchJob (``kubeflow.org/v1``) for clusters without Trainer v2.

Both run the same pods and take the same guarantees from one place: values quoted as the CRDs
type them, secret ``launch.env`` entries from the Secret ``<job>-secrets``
(:func:`container_env`), one pod per node with gpus_per_node processes, the container image,
the time limit as ``activeDeadlineSeconds``. What follows describes the PyTorchJob.

One pod per node (``Master`` replica 1 + ``Worker`` replicas num_nodes - 1), ``nprocPerNode`` =
gpus_per_node, ``nvidia.com/gpu`` requests and limits when ``launch.device`` is cuda, ``plan.json``
mounted at ``/trainc/plan.json`` from the ConfigMap ``<job>-plan``, ``launch.env`` as
environment, ``/dev/shm`` as a memory-backed volume (NCCL and data loaders need more than the
container runtime's 64 MiB default), and ``activeDeadlineSeconds`` from ``launch.time_limit``.

The plan travels in a ConfigMap made from the ``plan.json`` next to this file (the header says
how), not inside it: the job then depends on the spec only, and plan.json stays the single copy
of the plan (estimates and diagnostics change without touching this file).

Every pod runs the same worker as ``torchrun.sh``: ``torchrun -m trainc.launch.worker --plan
/trainc/plan.json --save DIR`` (and ``--load auto`` with ``launch.requeue``,
:func:`checkpoint_args`), DIR = ``launch.save_dir`` or else ``/checkpoints``; an emptyDir is
mounted at DIR (:data:`CHECKPOINT_VOLUME`; lost with the pod: swap it for a PVC to keep them). The
training operator sets ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` in each pod, which torchrun reads as the defaults of
its rendezvous flags.

The image is ``launch.container_image``, an image with trainc and its ``[worker]`` extra; a pod
needs one, so without it neither file is written (a job naming no pullable image would sit in
ImagePullBackOff) and ``report.md`` and ``trainc compile`` say how to get them
(:func:`not_written`). Both artifacts are written only for ``launch.entrypoint: trainc``: the
pods run the trainc worker, and ``megatron-lm`` / ``torchtitan`` need a checkout or runner the
image does not promise (run those through ``sbatch.sh`` / ``torchrun.sh``).
Built as a dict and dumped by a ``yaml.SafeDumper`` (sort_keys=True, no aliases): byte-for-byte
deterministic.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from trainc.compiler.emit.render import header as render_header
from trainc.compiler.support.slurm_time import time_limit_seconds

#: The Kubernetes artifacts, written for ``launch.entrypoint: trainc`` with a container image.
K8S_FILES = ("pytorchjob.yaml", "trainjob.yaml")
PLAN_MOUNT = "/trainc"
#: Checkpoint directory when ``launch.save_dir`` is null: an emptyDir, lost with the pod.
CHECKPOINT_MOUNT = "/checkpoints"
WORKER_COMMAND = ("torchrun", "-m", "trainc.launch.worker", "--plan", f"{PLAN_MOUNT}/plan.json")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class _Dumper(yaml.SafeDumper):
    """yaml.safe_dump without anchors and aliases (the Master and Worker templates are equal)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_name(name: str, max_len: int = 48) -> str:
    """A job name usable as a Kubernetes DNS-1035 label prefix (the operator appends
    ``-master-0`` / ``-worker-N`` to it for pods and services).

    >>> k8s_name("Llama2_70B.pretrain")
    'llama2-70b-pretrain'
    """
    text = _NOT_DNS.sub("-", name.lower()).strip("-")
    if not text or not text[0].isalpha():
        text = "trainc-" + text
    return text[:max_len].rstrip("-")


def secret_env_refs(
    plan: dict[str, Any], env: list[dict[str, Any]], job: str
) -> list[dict[str, Any]]:
    """Secret ``launch.env`` entries (``derived.secret_env``; plan.json shows ``***``) read from
    the Kubernetes Secret ``<job>-secrets`` instead of a literal value."""
    secret = set(plan["derived"].get("secret_env", []))
    return [
        {
            "name": e["name"],
            "valueFrom": {"secretKeyRef": {"name": f"{job}-secrets", "key": e["name"]}},
        }
        if e["name"] in secret
        else e
        for e in env
    ]


def k8s_literal(text: str) -> str:
    """``text`` as a container ``env`` value or ``command`` word that Kubernetes passes on
    verbatim: the kubelet expands ``$(VAR)`` there and reduces ``$$`` to ``$`` (core/v1
    EnvVar.value, Container.command), so every ``$`` is doubled.

    >>> k8s_literal("$(HOME)/x and $$")
    '$$(HOME)/x and $$$$'
    """
    return text.replace("$", "$$")


def container_env(plan: dict[str, Any], job: str) -> list[dict[str, Any]]:
    """The container environment of every pod: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` where
    ``torchrun.sh`` exports it (Megatron-Core with tp > 1 or cp > 1 on CUDA; launch.env cannot
    set it otherwise, TRC505), then ``launch.env`` by name (values kept literal,
    :func:`k8s_literal`), secrets as Secret references."""
    launch = plan["spec"]["launch"]
    env = [{"name": k, "value": k8s_literal(str(v))} for k, v in sorted(launch["env"].items())]
    if plan["derived"].get("cuda_device_max_connections_1") and launch["device"] == "cuda":
        env = [
            {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"},
            *(e for e in env if e["name"] != "CUDA_DEVICE_MAX_CONNECTIONS"),
        ]
    return secret_env_refs(plan, env, job)


#: The checkpoint volume of every pod, mounted at the checkpoint directory
#: (:func:`checkpoint_mount`): an emptyDir, which lives as long as the pod (it survives a
#: container restart in place, not a new pod). For checkpoints that outlive the pod, replace it
#: in the generated file by a ``persistentVolumeClaim`` (ReadWriteMany, shared by all nodes).
CHECKPOINT_VOLUME: dict[str, Any] = {"name": "checkpoints", "emptyDir": {}}


def checkpoint_dir(launch: dict[str, Any]) -> str:
    """The worker's checkpoint directory in the pods: ``launch.save_dir``, else
    :data:`CHECKPOINT_MOUNT`."""
    return str(launch["save_dir"] or CHECKPOINT_MOUNT)


def checkpoint_mount(launch: dict[str, Any]) -> dict[str, Any]:
    """The ``volumeMounts`` entry that puts :data:`CHECKPOINT_VOLUME` at :func:`checkpoint_dir`,
    so that ``--save`` never writes into the container's writable layer (lost with the
    container, and counted against the node's ephemeral storage). A mountPath is taken
    literally (no ``$(VAR)`` expansion: only command, args and env values are expanded)."""
    return {"name": CHECKPOINT_VOLUME["name"], "mountPath": checkpoint_dir(launch)}


def checkpoint_args(launch: dict[str, Any]) -> list[str]:
    """The worker's checkpoint flags: ``--save DIR`` (:func:`checkpoint_dir`), and with
    ``launch.requeue`` also ``--load auto``, as ``sbatch.sh`` passes it: every start of the
    worker (the first and each restart of the container or pod) resumes from the latest
    checkpoint in DIR when there is one (``trainc.launch.worker.runtime.Setup``: ``auto`` = the
    ``--save`` directory; the engines log "no checkpoint" and start at step 0 otherwise).
    Without launch.requeue a restarted pod starts at step 0, as a rerun of sbatch.sh does.

    >>> checkpoint_args({"save_dir": "/mnt/ckpt", "requeue": True})
    ['--save', '/mnt/ckpt', '--load', 'auto']
    """
    args = ["--save", k8s_literal(checkpoint_dir(launch))]
    return [*args, "--load", "auto"] if launch.get("requeue") else args


def _pod_template(plan: dict[str, Any], job: str) -> dict[str, Any]:
    spec = plan["spec"]
    launch, cluster = spec["launch"], spec["cluster"]
    env = container_env(plan, job)
    container: dict[str, Any] = {
        "name": "pytorch",  # the container name the training operator looks for
        "image": launch["container_image"],
        "imagePullPolicy": "IfNotPresent",
        "command": [*WORKER_COMMAND, *checkpoint_args(launch)],
        "ports": [{"name": "pytorchjob-port", "containerPort": int(launch["master_port"])}],
        "volumeMounts": [
            {"name": "plan", "mountPath": PLAN_MOUNT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    volumes: list[dict[str, Any]] = [
        {"name": "plan", "configMap": {"name": f"{job}-plan"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    container["volumeMounts"].append(checkpoint_mount(launch))
    volumes.append(dict(CHECKPOINT_VOLUME))
    if env:
        container["env"] = env
    if launch["device"] == "cuda":
        gpus = str(cluster["gpus_per_node"])
        container["resources"] = {
            "limits": {"nvidia.com/gpu": gpus},
            "requests": {"nvidia.com/gpu": gpus},
        }
    return {
        "metadata": {
            "labels": {"app.kubernetes.io/name": "trainc", "app.kubernetes.io/instance": job}
        },
        "spec": {
            "containers": [container],
            "volumes": volumes,
        },
    }


def pytorchjob_dict(plan: dict[str, Any], *, elastic: bool = False) -> dict[str, Any]:
    """The PyTorchJob object. ``elastic``: torchrun's c10d rendezvous with an ``elasticPolicy``
    (min = max = num_nodes: the layout fixes the world size; failed pods restart up to 3 times),
    all pods as ``Worker`` replicas, as the operator's elastic examples do."""
    spec = plan["spec"]
    job = k8s_name(spec["name"])
    nodes = int(spec["cluster"]["num_nodes"])
    template = _pod_template(plan, job)
    replicas: dict[str, Any] = {}
    if elastic:
        replicas["Worker"] = {"replicas": nodes, "restartPolicy": "OnFailure", "template": template}
    else:
        replicas["Master"] = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
        if nodes > 1:
            replicas["Worker"] = {
                "replicas": nodes - 1,
                "restartPolicy": "OnFailure",
                "template": template,
            }
    run_policy: dict[str, Any] = {"cleanPodPolicy": "None", "backoffLimit": 3}
    deadline = time_limit_seconds(str(spec["launch"]["time_limit"]))
    if deadline:
        run_policy["activeDeadlineSeconds"] = deadline
    job_spec: dict[str, Any] = {
        "nprocPerNode": str(spec["cluster"]["gpus_per_node"]),
        "pytorchReplicaSpecs": replicas,
        "runPolicy": run_policy,
    }
    if elastic:
        job_spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "minReplicas": nodes,
            "maxReplicas": nodes,
            "maxRestarts": 3,
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": job,
            "labels": {
                "app.kubernetes.io/name": "trainc",
                "trainc/spec-hash": plan["spec_hash"][:16],
            },
        },
        "spec": job_spec,
    }


def _run_steps(plan: dict[str, Any], job: str, manifest: str) -> str:
    """The header's commands (the plan ConfigMap, the Secret of the secret ``launch.env``
    entries the pods read, the apply) and what the manifest leaves out: the Slurm / Pyxis
    ``launch.container_mounts``, which a pod gets only from volumes the cluster defines."""
    secrets = sorted(plan["derived"].get("secret_env", []))
    text = (
        f"#   kubectl create configmap {job}-plan --from-file=plan.json --dry-run=client "
        "-o yaml | kubectl apply -f -\n"
    )
    if secrets:
        text += (
            f"#   kubectl create secret generic {job}-secrets "
            + " ".join(f'--from-literal={k}="${k}"' for k in secrets)
            + "\n"
        )
    text += f"#   kubectl apply -f {manifest}\n"
    mounts = plan["spec"]["launch"].get("container_mounts") or []
    if mounts:
        text += (
            "# Not in this manifest: launch.container_mounts ("
            + ", ".join(mounts)
            + ") are sbatch.sh's container mounts; give the pods volumes for them "
            "(e.g. PersistentVolumeClaims) before applying.\n"
        )
    return text


def _writes(launch: dict[str, Any]) -> bool:
    return launch.get("entrypoint", "trainc") == "trainc" and bool(launch.get("container_image"))


def not_written(plan: dict[str, Any]) -> str | None:
    """Why ``trainjob.yaml`` and ``pytorchjob.yaml`` are missing and how to get them, for a
    ``launch.entrypoint: trainc`` plan without ``launch.container_image``; None otherwise (they
    are written, or the entrypoint writes no Kubernetes artifact).

    >>> not_written({"spec": {"launch": {"entrypoint": "trainc", "container_image": None}}})[:46]
    'trainjob.yaml and pytorchjob.yaml not written:'
    """
    launch = plan["spec"]["launch"]
    if launch.get("entrypoint", "trainc") != "trainc" or launch.get("container_image"):
        return None
    return (
        "trainjob.yaml and pytorchjob.yaml not written: launch.container_image is not set "
        "and a pod needs an image (fix: set launch.container_image=REGISTRY/IMAGE:TAG, an "
        "image with trainc and its [worker] extra installed, and compile again)"
    )


def pytorchjob(plan: dict[str, Any], *, elastic: bool = False) -> dict[str, str]:
    """``{"pytorchjob.yaml": text}``; empty unless ``launch.entrypoint`` is ``trainc`` (megatron-lm
    and torchtitan write no Kubernetes artifact) and ``launch.container_image`` is set
    (:func:`not_written`)."""
    if not _writes(plan["spec"]["launch"]):
        return {}
    job = k8s_name(plan["spec"]["name"])
    header = (
        render_header(plan)
        + "# Run from this folder on a cluster with the Kubeflow training operator:\n"
        + _run_steps(plan, job, "pytorchjob.yaml")
    )
    body = yaml.dump(
        pytorchjob_dict(plan, elastic=elastic),
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        width=100,
    )
    return {"pytorchjob.yaml": header + body}


#: Kubeflow Trainer v2 release whose CRDs trainjob.yaml is written for (and validated against in
#: tests/data/trainjob_crd_schema.json).
TRAINER_RELEASE = "v2.3.0"
#: The replicated job and container names Trainer's torch runtimes use for the training nodes
#: (v2.3.0 pkg/constants ``Node``; manifests/base/runtimes/torch_distributed.yaml).
TRAINER_NODE = "node"
#: runtimePatches entry owner (the TrainJob's patch list is keyed by manager). Trainer's webhook
#: wants a domain-prefixed path (v2.3.0 plugins/jobset/jobset.go: IsDomainPrefixedPath), like
#: Kueue's "kueue.x-k8s.io/manager".
PATCH_MANAGER = "trainc.dev/compiler"


def trainjob_dict(plan: dict[str, Any]) -> dict[str, Any]:
    """The Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, release
    :data:`TRAINER_RELEASE`) referencing the ClusterTrainingRuntime ``launch.k8s_runtime``.

    ``trainer``: ``numNodes`` = num_nodes, ``numProcPerNode`` = gpus_per_node, the image, the
    worker command (``torchrun --master-port=<launch.master_port> -m trainc.launch.worker``:
    the Torch plugin sets ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the Job
    completion index), ``PET_MASTER_ADDR`` (``<job>-node-0-0.<job>``) and ``PET_MASTER_PORT``
    (29500) in the ``node`` container, which torchrun reads as its flag defaults; the explicit
    port keeps ``launch.master_port``), the environment (:func:`container_env`) and
    ``resourcesPerNode`` (``nvidia.com/gpu`` with launch.device cuda). ``activeDeadlineSeconds``
    from ``launch.time_limit`` (a TrainJob field since Trainer v2.2). The plan ConfigMap,
    ``/dev/shm`` and the checkpoint emptyDir (mounted at the checkpoint directory,
    :func:`checkpoint_mount`) reach the pods through ``runtimePatches`` (pod
    volumes and the ``node`` container's mounts), which TrainJob has since v2.2.

    Source: kubeflow/trainer v2.3.0, manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml
    and pkg/runtime/framework/plugins/torch/torch.go (``EnforceMLPolicy``).
    """
    spec = plan["spec"]
    launch, cluster = spec["launch"], spec["cluster"]
    job = k8s_name(spec["name"])
    torchrun, *module = WORKER_COMMAND
    trainer: dict[str, Any] = {
        "numNodes": int(cluster["num_nodes"]),
        "numProcPerNode": int(cluster["gpus_per_node"]),
        "image": launch["container_image"],
        "command": [
            torchrun,
            f"--master-port={int(launch['master_port'])}",
            *module,
            *checkpoint_args(launch),
        ],
    }
    env = container_env(plan, job)
    if env:
        trainer["env"] = env
    if launch["device"] == "cuda":
        gpus = str(cluster["gpus_per_node"])
        trainer["resourcesPerNode"] = {
            "limits": {"nvidia.com/gpu": gpus},
            "requests": {"nvidia.com/gpu": gpus},
        }
    mounts: list[dict[str, Any]] = [
        {"name": "plan", "mountPath": PLAN_MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "plan", "configMap": {"name": f"{job}-plan"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts.append(checkpoint_mount(launch))
    volumes.append(dict(CHECKPOINT_VOLUME))
    pod = {
        "metadata": {
            "labels": {"app.kubernetes.io/name": "trainc", "app.kubernetes.io/instance": job}
        },
        "spec": {
            "containers": [{"name": TRAINER_NODE, "volumeMounts": mounts}],
            "volumes": volumes,
        },
    }
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": TRAINER_NODE, "template": {"spec": {"template": pod}}}
                    ]
                }
            }
        },
    }
    job_spec: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
            "name": launch.get("k8s_runtime") or "torch-distributed",
        },
        "trainer": trainer,
        "runtimePatches": [patch],
    }
    deadline = time_limit_seconds(str(launch["time_limit"]))
    if deadline:
        job_spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": job,
            "labels": {
                "app.kubernetes.io/name": "trainc",
                "trainc/spec-hash": plan["spec_hash"][:16],
            },
        },
        "spec": job_spec,
    }


def trainjob(plan: dict[str, Any]) -> dict[str, str]:
    """``{"trainjob.yaml": text}`` (empty unless ``launch.entrypoint`` is ``trainc`` and
    ``launch.container_image`` is set, :func:`not_written`), with a header that says how to
    create the plan ConfigMap (and the Secret) and apply the job."""
    launch = plan["spec"]["launch"]
    if not _writes(launch):
        return {}
    job = k8s_name(plan["spec"]["name"])
    runtime = launch.get("k8s_runtime") or "torch-distributed"
    header = (
        render_header(plan)
        + f"# Run from this folder on a cluster with Kubeflow Trainer {TRAINER_RELEASE} (or "
        f"later v2) and its\n# ClusterTrainingRuntime {runtime} "
        f"(kubectl get clustertrainingruntimes {runtime}):\n"
        + _run_steps(plan, job, "trainjob.yaml")
    )
    body = yaml.dump(
        trainjob_dict(plan), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=100
    )
    return {"trainjob.yaml": header + body}
