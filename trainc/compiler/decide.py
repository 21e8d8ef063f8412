"""What each engine makes of the spec's engine-dependent keys, decided here once.

Two kinds of decision, both looked up by :class:`~trainc.schemas.Engine` (the normalizer,
:mod:`trainc.compiler.derive`, the engine-config builders and the estimator read them here
instead of comparing engine names):

* :data:`ENGINE_TRAITS`: what an engine is, whatever the spec (one :class:`EngineTraits` row per
  engine): which defaults the normalizer fills, which checkpoint format its worker writes, which
  kernels and recompute modes the estimator models, and what ``parallel.zero_stage`` means for
  it (:attr:`EngineTraits.zero`).
* :func:`zero_layout`: the spec's ``parallel.zero_stage`` read through its engine's row, a
  :class:`ZeroLayout` (Megatron-Core's distributed optimizer or Megatron-FSDP; DeepSpeed's ZeRO
  stage; FSDP2's sharded parameters), which the engine-config builders
  (:mod:`trainc.compiler.targets`), the estimator (:mod:`trainc.compiler.estimate`) and
  ``plan.json``'s ``derived`` (``distributed_optimizer``, ``megatron_fsdp``: the worker's
  reading) all take from here.

The engine-independent Megatron switches several artifacts share (:func:`interleaved`,
:func:`grad_reduce_in_fp32`) are decided here too. Imports only :mod:`trainc.schemas`, so that
:mod:`trainc.compiler.derive` and :mod:`trainc.compiler.normalize` can read it.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainc.schemas import Engine, Entrypoint, Precision, StateDtype, TrainSpec


class Sharding(enum.Enum):
    """Over which ranks the optimizer states (master weights, Adam moments) are sharded."""

    replicated = "replicated"
    """Every data-parallel rank holds and steps every parameter (plain DDP, ZeRO-0)."""
    dp_cp = "dp_cp"
    """Dense and expert parameters alike over the dp x cp group (DeepSpeed ZeRO >= 1)."""
    dp_cp_expert_dp = "dp_cp_expert_dp"
    """Dense parameters over dp x cp, routed experts over the expert data-parallel group
    (Megatron-Core's distributed optimizer and Megatron-FSDP; FSDP2's meshes)."""


class DpSync(enum.Enum):
    """How the data-parallel collectives are scheduled against compute (the time model's
    exposure rule, :func:`trainc.compiler.estimate.time.step_time`)."""

    ddp_buckets = "ddp_buckets"
    """Megatron-Core DDP: bucketed gradient reduce (and parameter gather) overlapped with the
    backward (and the next forward)."""
    zero = "zero"
    """DeepSpeed ZeRO: reduce-scatter / all-gather per ZeRO stage (arXiv:1910.02054 §7)."""
    fsdp_units = "fsdp_units"
    """Per-layer all-gather before each unit's forward and backward, reduce-scatter after its
    backward, prefetched one unit ahead (FSDP2 ``fully_shard``; Megatron-FSDP
    ``optim_grads_params``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ZeroLayout:
    """What a spec's ``parallel.zero_stage`` means on its engine (see :func:`zero_layout`)."""

    distributed_optimizer: bool
    """Megatron-Core's distributed optimizer (``--use-distributed-optimizer``): engine=megatron
    with zero_stage 1, and with zero_stage 3, which NVIDIA's Megatron-FSDP user guide runs with
    it."""
    megatron_fsdp: bool
    """Megatron-FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy
    optim_grads_params``): engine=megatron with zero_stage 3 (Megatron-LM core_v0.16.1
    ``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``)."""
    zero_stage: int
    """The ZeRO stage DeepSpeed runs (``zero_optimization.stage``); 0 on engines without ZeRO
    stages of their own."""
    optimizer_sharding: Sharding
    """Over which ranks the optimizer states are sharded."""
    dp_sync: DpSync
    """How the data-parallel collectives are scheduled."""


@functools.cache
def _megatron_zero(stage: int) -> ZeroLayout:
    """Megatron-Core: 1 = distributed optimizer (ZeRO-1), 3 = Megatron-FSDP with the
    distributed optimizer, anything else = DDP with a replicated optimizer."""
    distopt = stage in (1, 3)
    return ZeroLayout(
        distributed_optimizer=distopt,
        megatron_fsdp=stage == 3,
        zero_stage=0,
        optimizer_sharding=Sharding.dp_cp_expert_dp if distopt else Sharding.replicated,
        dp_sync=DpSync.fsdp_units if stage == 3 else DpSync.ddp_buckets,
    )


@functools.cache
def _deepspeed_zero(stage: int) -> ZeroLayout:
    """DeepSpeed: the ZeRO stage itself (Rajbhandari et al. 2020, arXiv:1910.02054)."""
    return ZeroLayout(
        distributed_optimizer=False,
        megatron_fsdp=False,
        zero_stage=stage,
        optimizer_sharding=Sharding.dp_cp if stage >= 1 else Sharding.replicated,
        dp_sync=DpSync.zero,
    )


@functools.cache
def _fsdp_zero(stage: int) -> ZeroLayout:
    """FSDP2 (torchtitan): ``fully_shard`` shards parameters, gradients and optimizer states
    whatever zero_stage says (``fsdp.dp_shard`` / ``fsdp.dp_replicate`` choose the mesh)."""
    return ZeroLayout(
        distributed_optimizer=False,
        megatron_fsdp=False,
        zero_stage=0,
        optimizer_sharding=Sharding.dp_cp_expert_dp,
        dp_sync=DpSync.fsdp_units,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineTraits:
    """What one engine is, whatever the spec: a row of :data:`ENGINE_TRAITS`."""

    zero: Callable[[int], ZeroLayout]
    """What ``parallel.zero_stage`` means on this engine."""
    worker_checkpoint_format: str
    """The checkpoint format the trainc worker writes for this engine (without
    ``resume.checkpoint_format`` and outside entrypoint=megatron-lm;
    :func:`trainc.compiler.derive.checkpoint_format`)."""
    ddp_overlap_defaults: bool = False
    """The normalizer turns Megatron-Core DDP's ``overlap_grad_reduce`` / ``overlap_param_gather``
    on by default (dp x cp > 1)."""
    tp_comm_overlap_default: bool = False
    """The normalizer may turn ``training.tp_comm_overlap`` (Transformer Engine userbuffers) on
    by default (:func:`trainc.compiler.normalize.default_tp_comm_overlap`)."""
    experts_borrow_tp: bool = False
    """Expert parallelism borrows the tp ranks, so ``parallel.etp`` defaults to 1 with ep > 1
    (torchtitan 0.3.0 ``ParallelDims.build_mesh``; :func:`trainc.compiler.derive.default_etp`)."""
    fsdp_keys: bool = False
    """The engine reads the spec's ``fsdp:`` section: the normalizer fills it, the layers
    compute in ``fsdp.param_dtype`` and run eager element-wise kernels unless
    ``fsdp.compile``."""
    torchtitan_ac: bool = False
    """Activation checkpointing follows torchtitan's modes
    (:func:`trainc.compiler.targets.torchtitan_ac.ac_setting`) instead of Megatron's
    ``training.recompute``."""
    sdpa_attention: bool = False
    """Attention runs torch SDPA (the profile's ``sdpa_attention_efficiency``)."""
    cp_ring_attention: bool = False
    """Context parallelism always rotates K/V shards, whatever ``parallel.cp_comm_type``
    (torch ``context_parallel``)."""
    zero_offload: bool = False
    """``training.offload_optimizer`` / ``offload_param`` run (DeepSpeed ZeRO-Offload)."""
    published_band: str = "dense"
    """The dense runs' row of ``published_bands.yaml`` whose p10-p90 band the step time takes
    (:func:`trainc.compiler.estimate.band.step_time_band`)."""
    megatron_core: bool = False
    """It trains with Megatron-Core's own stack (``megatron/core``, Megatron-LM ``pretrain_gpt``):
    Transformer Engine's FP8/FP4 GEMMs, the TP communication/GEMM overlap (userbuffers), the
    expert-parallel A2A overlap, Megatron DDP's ``overlap_grad_reduce`` / ``overlap_param_gather``,
    ``zero_stage`` choosing the distributed optimizer, and the Megatron-only model keys (dense
    first MoE layers, MTP, group-limited routing)."""

    fsdp2: bool = False
    """It runs PyTorch FSDP2 (``fully_shard`` on a DeviceMesh): it reads the ``fsdp:`` section and
    its rules (TRC34x), its FP8 is torchao's float8 through torchtitan, its pipeline schedules are
    ``torch.distributed.pipelining``'s, and under ``launch.entrypoint=torchtitan`` its MoE is
    torchtitan's."""

    deepspeed_scheduler: bool = False
    """Its learning-rate schedule is DeepSpeed's (``deepspeed/runtime/lr_schedules.py``
    WarmupLR / WarmupDecayLR / WarmupCosineLR): a warm-up of at least 2 steps, one step late."""

    own_overlap: str | None = None
    """What overlaps its gradient reduce and parameter gather instead of Megatron DDP's switches;
    None where it reads them (Megatron-Core ``DistributedDataParallelConfig``)."""

    axes_elsewhere: str = "engine=megatron"
    """Where a spec goes for a parallel axis its runner cannot split (TRC313's fix)."""


#: One row per engine: adding an engine is one row here (and its target, estimator row and
#: worker: docs/engines.md "Adding an engine").
ENGINE_TRAITS: Mapping[Engine, EngineTraits] = MappingProxyType(
    {
        Engine.megatron: EngineTraits(
            zero=_megatron_zero,
            worker_checkpoint_format="trainc",
            ddp_overlap_defaults=True,
            tp_comm_overlap_default=True,
            megatron_core=True,
        ),
        Engine.deepspeed: EngineTraits(
            zero=_deepspeed_zero,
            worker_checkpoint_format="deepspeed",
            zero_offload=True,
            deepspeed_scheduler=True,
            own_overlap="zero_optimization.overlap_comm",
        ),
        Engine.fsdp: EngineTraits(
            zero=_fsdp_zero,
            worker_checkpoint_format="dcp",
            experts_borrow_tp=True,
            fsdp_keys=True,
            torchtitan_ac=True,
            sdpa_attention=True,
            cp_ring_attention=True,
            published_band="fsdp",
            fsdp2=True,
            own_overlap="FSDP2's prefetch of the next block's all-gather",
            axes_elsewhere="launch.entrypoint=torchtitan (runs pp, vpp, cp and ep on CUDA)",
        ),
    }
)


#: :data:`ENGINE_TRAITS` by member name: the estimator asks per layer, and an Enum key hashes in
#: Python (``Enum.__hash__``), a str in C.
_BY_NAME: Mapping[str, EngineTraits] = {e._name_: t for e, t in ENGINE_TRAITS.items()}


def traits(spec: TrainSpec) -> EngineTraits:
    """The :data:`ENGINE_TRAITS` row of ``spec.engine`` (KeyError for an engine without one)."""
    return _BY_NAME[spec.engine._name_]


def zero_layout(spec: TrainSpec) -> ZeroLayout:
    """What ``spec.parallel.zero_stage`` means on ``spec.engine`` (:attr:`EngineTraits.zero`;
    one shared frozen value per engine and stage)."""
    return _BY_NAME[spec.engine._name_].zero(spec.parallel.zero_stage)


def distributed_optimizer(spec: TrainSpec) -> bool:
    """engine=megatron with zero_stage 1 (Megatron-Core's distributed optimizer, ZeRO-1) or 3
    (Megatron-FSDP, which NVIDIA's Megatron-FSDP user guide runs with
    ``--use-distributed-optimizer``)."""
    return zero_layout(spec).distributed_optimizer


def megatron_fsdp(spec: TrainSpec) -> bool:
    """engine=megatron with zero_stage 3: Megatron-FSDP (``--use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params``): bf16 weights, fp32 main weights,
    gradients and optimizer state sharded over dp x cp (experts over the expert data-parallel
    group), each TransformerLayer all-gathered for its forward and backward
    (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py, Megatron-LM core_v0.16.1)."""
    return zero_layout(spec).megatron_fsdp


def interleaved(spec: TrainSpec) -> bool:
    """True for the interleaved 1F1B schedule (vpp > 1)."""
    return spec.parallel.vpp > 1


def grad_reduce_in_fp32(spec: TrainSpec) -> bool:
    """Gradients accumulated and reduced in fp32: Megatron-LM sets it for bf16 unless the main
    gradients are bf16 (core_v0.16.1 ``megatron/training/arguments.py`` ``validate_args``:
    ``accumulate_allreduce_grads_in_fp32 = True`` with ``--bf16`` only while
    ``main_grads_dtype`` is fp32). It sets the DDP gradient buffer's dtype (megatron-core 0.16.1
    ``distributed/distributed_data_parallel.py`` ``DistributedDataParallel.__init__``: fp32 with
    it, the parameter's dtype without), which the memory estimate counts
    (:func:`trainc.compiler.estimate.memory.megatron_state_bytes`: 4 or 2 B per parameter)."""
    t = spec.training
    return t.precision is Precision.bf16 and t.main_grads_dtype is StateDtype.fp32


def torchtitan_moe(spec: TrainSpec) -> bool:
    """Whether the MoE layers are torchtitan 0.3.0's (``torchtitan/models/common/moe.py``): an
    FSDP2 engine under ``launch.entrypoint=torchtitan``."""
    return traits(spec).fsdp2 and spec.launch.entrypoint is Entrypoint.torchtitan
