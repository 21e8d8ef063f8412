"""``launch:`` section: how the generated scripts start the job."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainc.schemas.enums import Device, Entrypoint


@dataclass(kw_only=True)
class LaunchSpec:
    """Slurm, container and runtime settings; every value is shell-quoted in generated scripts."""

    partition: str | None = None
    """Slurm partition (#SBATCH --partition); null = cluster default."""
    account: str | None = None
    """Slurm account (#SBATCH --account); null = user default."""
    time_limit: str = "04:00:00"
    """Slurm wall-clock limit, [D-]HH:MM:SS or minutes, quoted in YAML ("04:00:00", "240"). TRC502,
    TRC007."""
    container_image: str | None = None
    """Container image for pyxis/enroot (srun --container-image); null = no container. A tag of
    trainc/conf/container_versions.yaml (NGC PyTorch, NeMo) also gives trainc lint the releases
    it ships for the components launch.versions leaves out (TRC530, TRC539)."""
    container_mounts: list[str] | None = None
    """pyxis mounts SRC:DST (srun --container-mounts)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables exported to every rank. TRC504, TRC505."""
    master_port: int = 29500
    """Rendezvous TCP port on the first node."""
    device: Device = Device.cuda
    """cuda or cpu: cpu runs the worker with gloo on CPUs (try a layout without GPUs). TRC004."""
    shrink: bool = False
    """True: the worker builds the same layout with tiny dimensions (smoke tests)."""
    entrypoint: Entrypoint = Entrypoint.trainc
    """trainc (our worker), megatron-lm (pretrain_gpt.py + megatron_args.txt; engine=megatron,
    CUDA only) or torchtitan (torchtitan.train + torchtitan_args.txt; engine=fsdp, CUDA only).
    TRC004, TRC503, TRC325."""
    megatron_lm_path: str | None = None
    """entrypoint=megatron-lm: path to a Megatron-LM checkout holding pretrain_gpt.py. TRC503."""
    data_path: str | None = None
    """Megatron indexed dataset prefix; null = Megatron-Core's mock dataset."""
    data_split: str = "100,0,0"
    """Train/validation/test split of data_path in parts (Megatron --split, always written: its
    own default 969,30,1 holds out 3 % of the data; the trainc worker trains on the train part
    only). Three non-negative numbers, comma-separated, not all zero. TRC512."""
    save_dir: str | None = None
    """Checkpoint directory; null = <OUTDIR>/checkpoints at run time."""
    requeue: bool = False
    """Slurm: ``#SBATCH --requeue``; a job stopped by the time-limit signal (after its checkpoint)
    or by preemption / node failure is queued again and resumes from the latest checkpoint in the
    checkpoint directory (``--load auto``)."""
    slurm_segment: int | None = None
    """Slurm: nodes per ``#SBATCH --segment`` (topology/block plugin, Slurm 24.05+): the
    allocation is made of segments of this many nodes, each inside one block (an NVLink domain
    on GB200 NVL72). null = derived: with an NVLink domain wider than a node
    (cluster.nvlink_domain_size > gpus_per_node), the largest divisor of num_nodes that fits
    one domain, preferring a multiple of the nodes a TP x CP or ETP x EP group spans; otherwise
    no --segment. 0 = no --segment line (older Slurm or no block topology). TRC520."""
    k8s_runtime: str = "torch-distributed"
    """Kubernetes: the Kubeflow Trainer ClusterTrainingRuntime that ``trainjob.yaml`` references
    (runtimeRef.name); torch-distributed is the one Trainer v2 installs. TRC521."""
    versions: dict[str, str] = field(default_factory=dict)
    """Versions of the software the job runs with (component -> version), checked against the
    known-bad combinations of trainc/conf/known_bad_versions.yaml: torch, cuda, nccl,
    transformer_engine, megatron_core, deepspeed, flash_attn. An entry wins over the release a
    known container_image ships (a different one is TRC539). Empty (and no known image) =
    unchecked at compile time; ``trainc run`` checks the installed packages. TRC530-TRC532."""
    save_interval: int = 1000
    """Steps between checkpoints."""
    log_interval: int = 1
    """Steps between log lines."""
