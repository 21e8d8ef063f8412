"""User-facing spec schema (layer 0): dataclasses usable as Hydra structured configs.

Standard library only. Field docstrings give meaning, unit and default semantics.
"""

from trainc.schemas.cluster import ClusterSpec
from trainc.schemas.data import DataSpec
from trainc.schemas.enums import (
    Activation,
    CkptFormat,
    CpCommType,
    Device,
    Engine,
    Entrypoint,
    Fp4Format,
    Fp4Recipe,
    Fp8Format,
    Fp8Recipe,
    FsdpDtype,
    Gpu,
    LrDecayStyle,
    MoeDispatcher,
    MoeFlexBackend,
    MoeLoadBalancing,
    MoeScoreFunction,
    Normalization,
    Offload,
    Optimizer,
    PipelineSchedule,
    PositionEmbedding,
    Precision,
    Recompute,
    RecomputeMethod,
    StateDtype,
    TimeModel,
    WsdDecayStyle,
)
from trainc.schemas.fsdp import FsdpSpec
from trainc.schemas.launch import LaunchSpec
from trainc.schemas.model import ModelSpec
from trainc.schemas.parallel import ParallelSpec
from trainc.schemas.resume import ResumeSpec, SavedLayout
from trainc.schemas.spec import TrainSpec
from trainc.schemas.training import TrainingSpec

__all__ = [
    "Activation",
    "CkptFormat",
    "ClusterSpec",
    "CpCommType",
    "DataSpec",
    "Device",
    "Engine",
    "Entrypoint",
    "Fp4Format",
    "Fp4Recipe",
    "Fp8Format",
    "Fp8Recipe",
    "FsdpDtype",
    "FsdpSpec",
    "Gpu",
    "LaunchSpec",
    "LrDecayStyle",
    "ModelSpec",
    "MoeDispatcher",
    "MoeFlexBackend",
    "MoeLoadBalancing",
    "MoeScoreFunction",
    "Normalization",
    "Offload",
    "Optimizer",
    "ParallelSpec",
    "PipelineSchedule",
    "PositionEmbedding",
    "Precision",
    "Recompute",
    "RecomputeMethod",
    "ResumeSpec",
    "SavedLayout",
    "StateDtype",
    "TimeModel",
    "TrainSpec",
    "TrainingSpec",
    "WsdDecayStyle",
]
