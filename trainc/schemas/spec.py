"""Root of the spec: what a ``trainc`` YAML file describes once composed."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainc.schemas.cluster import ClusterSpec
from trainc.schemas.data import DataSpec
from trainc.schemas.enums import Engine
from trainc.schemas.fsdp import FsdpSpec
from trainc.schemas.launch import LaunchSpec
from trainc.schemas.model import ModelSpec
from trainc.schemas.parallel import ParallelSpec
from trainc.schemas.resume import ResumeSpec
from trainc.schemas.training import TrainingSpec


@dataclass(kw_only=True)
class TrainSpec:
    """A whole training job: model, cluster, parallel layout, training and launch settings."""

    name: str = "trainc-job"
    """Job name: letters, digits, '.', '_' and '-' (Slurm job name, output folder). TRC501."""
    engine: Engine = Engine.megatron
    """megatron (Megatron-Core), deepspeed (DeepSpeed ZeRO engine) or fsdp (PyTorch FSDP2;
    docs/engines.md says when to pick which)."""
    model: ModelSpec
    """The transformer (see ModelSpec)."""
    cluster: ClusterSpec
    """The machines (see ClusterSpec)."""
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    """Parallel layout (see ParallelSpec)."""
    training: TrainingSpec
    """Batch, precision, recompute, optimizer (see TrainingSpec)."""
    launch: LaunchSpec = field(default_factory=LaunchSpec)
    """Launch settings (see LaunchSpec)."""
    data: DataSpec = field(default_factory=DataSpec)
    """Training data: blend, sizes, packing and masking (see DataSpec)."""
    resume: ResumeSpec = field(default_factory=ResumeSpec)
    """The checkpoint to load and the layout it was saved with (see ResumeSpec)."""
    fsdp: FsdpSpec = field(default_factory=FsdpSpec)
    """engine=fsdp settings: HSDP split of dp, resharding, mixed precision, offload, compile,
    pipeline schedule (see FsdpSpec)."""
