"""TRC50x-TRC52x, launch: job name, Slurm settings, Kubernetes and the launch environment."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

JOB_NAME = Rule(
    id="TRC501",
    name="job-name-safe",
    summary="name must be letters, digits, '.', '_' or '-', and not only dots",
    source="Slurm job names",
)

TIME_LIMIT = Rule(
    id="TRC502",
    name="time-limit-format",
    summary="time_limit must be a Slurm time ([D-]HH:MM:SS)",
    source="Slurm --time",
)

MEGATRON_LM_PATH = Rule(
    id="TRC503",
    name="megatron-lm-path",
    summary="entrypoint megatron-lm needs launch.megatron_lm_path",
    source="Megatron-LM pretrain_gpt.py",
)

ENV_NAME = Rule(
    id="TRC504",
    name="env-name-valid",
    summary="launch.env keys must be valid shell variable names",
    source="POSIX environment names",
)

ENV_MAX_CONNECTIONS = Rule(
    id="TRC505",
    name="cuda-device-max-connections",
    summary=(
        "tp > 1 or cp > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron validate_args); a value of "
        "1 with engine=fsdp, or with tp = cp = 1 on Megatron, serializes the data-parallel "
        "communication with compute (a warning)"
    ),
    engines={Engine.fsdp: Severity.warning},
    source=(
        "validate_args (CUDA_DEVICE_MAX_CONNECTIONS); the warnings: "
        "github.com/verl-project/verl/pull/6976 (FSDP2), github.com/NVIDIA/Megatron-LM/issues/1468 "
        "(tp = cp = 1)"
    ),
)

CPU_FULL_SIZE = Rule(
    id="TRC506",
    name="cpu-needs-shrink",
    summary="device=cpu with a full-size model will not fit in host memory; use launch.shrink",
    severity=Severity.warning,
    source="CPU (gloo) execution",
)

VISIBLE_DEVICES = Rule(
    id="TRC507",
    name="visible-devices-match-gpus-per-node",
    summary=(
        "launch.env CUDA_VISIBLE_DEVICES must list exactly gpus_per_node devices (one rank per GPU)"
    ),
    source="torchrun --nproc_per_node (BC-063)",
)

SOCKET_IFNAME = Rule(
    id="TRC508",
    name="socket-ifname-multinode",
    summary=(
        "NCCL/GLOO socket interface must not be loopback or a container bridge on a multi-node job"
    ),
    source="NCCL_SOCKET_IFNAME (BC-067, BC-069)",
)

LAUNCHER_ENV = Rule(
    id="TRC509",
    name="launcher-owned-env",
    summary=(
        "launch.env must not set the rendezvous variables (MASTER_ADDR, MASTER_PORT, RANK, ...) "
        "that the generated scripts derive from the allocation"
    ),
    source="torchrun / Slurm rendezvous; DeepSpeed comm/comm.py init_distributed (BC-057, BC-059)",
)

SECRET_IN_SPEC = Rule(
    id="TRC510",
    name="secret-in-spec",
    summary=(
        "a launch.env value whose name looks like a credential (token, secret, password, api key, "
        "...) is not written to the artifacts; the scripts read it from the submitting environment"
    ),
    severity=Severity.warning,
    source="trainc: credentials in launch.env are not written to the artifacts",
)

LAUNCH_VALUE = Rule(
    id="TRC511",
    name="launch-value-printable",
    summary=(
        "paths, Slurm names and container settings must not contain control characters (a newline "
        "would end an #SBATCH line); env values must not contain NUL"
    ),
    source="generated shell scripts and #SBATCH lines (one value per line)",
)

DATA_SPLIT = Rule(
    id="TRC512",
    name="data-split-format",
    summary=(
        "launch.data_split is three non-negative numbers, comma-separated, not all zero (Megatron "
        "--split)"
    ),
    source=(
        "megatron/training/arguments.py --split; megatron/core/datasets utils "
        "parse_and_normalize_split (core_v0.19.0)"
    ),
)

NCCL_IB_DISABLED = Rule(
    id="TRC513",
    name="nccl-ib-disabled-multinode",
    summary=(
        "NCCL_IB_DISABLE=1 on a multi-node job turns off InfiniBand and RoCE: NCCL falls back to "
        "TCP sockets across nodes (several times slower collectives)"
    ),
    severity=Severity.warning,
    source=(
        "NCCL environment variables (docs.nvidia.com/deeplearning/nccl, NCCL_IB_DISABLE); "
        "github.com/scottclowe/pytorch-experiment-template/issues/11 (RoCE off, +56 % step)"
    ),
)

PARTITION_MAX_TIME = Rule(
    id="TRC514",
    name="time-limit-within-partition-max",
    summary=(
        "launch.time_limit must not exceed cluster.max_time_limit (the Slurm partition's "
        "MaxTime): sbatch refuses the job, or it pends indefinitely"
    ),
    source=(
        "sbatch --time (slurm.schedmd.com/sbatch.html: a limit over the partition's leaves the job "
        "PENDING, possibly indefinitely; EnforcePartLimits refuses it at submission, 'Requested "
        "time limit is invalid (missing or exceeds some limit)'); slurm.schedmd.com/"
        "resource_limits.html (MaxTime is bounded by the partition's); "
        "github.com/NVIDIA-NeMo/RL/pull/3052"
    ),
)

SLURM_SEGMENT = Rule(
    id="TRC520",
    name="slurm-segment-whole-groups",
    summary=(
        "the #SBATCH --segment size must divide num_nodes, fit one NVLink domain and hold whole TP "
        "x CP and ETP x EP groups (GB200 NVL72 block topology)"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source=(
        "Slurm topology/block plugin and sbatch --segment (slurm.schedmd.com/topology.html, Slurm "
        "24.05+); Megatron-Core RankGenerator order tp-cp-ep-dp-pp"
    ),
)

K8S_RUNTIME = Rule(
    id="TRC521",
    name="k8s-runtime-name",
    summary=(
        "launch.k8s_runtime must be a Kubernetes object name (RFC 1123 subdomain: lower-case "
        "letters, digits, '-' and '.', at most 253)"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "Kubernetes object names (RFC 1123 subdomain); Kubeflow Trainer v2.3.0 "
        "TrainJob.spec.runtimeRef.name"
    ),
)

K8S_SAVE_DIR = Rule(
    id="TRC522",
    name="k8s-save-dir-absolute",
    summary=(
        "launch.save_dir must be an absolute path for trainjob.yaml / pytorchjob.yaml, which mount "
        "the checkpoint volume there (a container mountPath is absolute)"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source=(
        "Kubernetes core/v1 VolumeMount.mountPath (a path inside the container, where the runtime "
        "mounts the volume; runc refuses a relative destination)"
    ),
)

#: the family: its id ranges and, explicitly, its rules
LAUNCH = Family(
    name="launch",
    ids=(range(500, 530),),
    about="job name, Slurm settings and the launch environment",
    rules=(
        JOB_NAME,
        TIME_LIMIT,
        MEGATRON_LM_PATH,
        ENV_NAME,
        ENV_MAX_CONNECTIONS,
        CPU_FULL_SIZE,
        VISIBLE_DEVICES,
        SOCKET_IFNAME,
        LAUNCHER_ENV,
        SECRET_IN_SPEC,
        LAUNCH_VALUE,
        DATA_SPLIT,
        NCCL_IB_DISABLED,
        PARTITION_MAX_TIME,
        SLURM_SEGMENT,
        K8S_RUNTIME,
        K8S_SAVE_DIR,
    ),
)
