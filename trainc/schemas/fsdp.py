"""``fsdp:`` section: settings of ``engine: fsdp`` (PyTorch FSDP2, ``fully_shard`` on a
DeviceMesh). Parallel degrees stay in ``parallel:`` (tp, pp, vpp, cp, dp, sequence_parallel,
with Megatron's names); this section splits dp into a replicate and a shard dimension (HSDP) and
holds what ``fully_shard`` and the pipeline schedule take. Read only with engine=fsdp (TRC329
reports ``fsdp.*`` keys set with another engine).

Sources: torch 2.13 ``torch/distributed/fsdp/_fully_shard/_fully_shard.py`` (``fully_shard``
arguments ``mesh``, ``reshard_after_forward``, ``mp_policy``, ``offload_policy``),
``torch/distributed/fsdp/_fully_shard/_fsdp_api.py`` (``MixedPrecisionPolicy``,
``CPUOffloadPolicy``), ``torch/distributed/pipelining/schedules.py`` (schedule classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import FsdpDtype, PipelineSchedule


@dataclass(kw_only=True)
class FsdpSpec:
    """FSDP2 settings. dp = dp_replicate x dp_shard (HSDP when both exceed 1); the mesh is
    ``(pp, dp_replicate, dp_shard, cp, tp)`` as torchtitan builds it, tp innermost."""

    dp_replicate: int = 1
    """Replicas of the sharded model (HSDP's replicate dimension: gradients are all-reduced over
    it). 1 = plain FSDP (every dp rank holds a shard). TRC340."""
    dp_shard: int | None = None
    """Ranks one model copy is sharded over (HSDP's shard dimension). Default: dp /
    dp_replicate; if given, dp_replicate x dp_shard must equal dp. TRC340, TRC341."""
    reshard_after_forward: bool = True
    """Free the unsharded parameters after each block's forward and all-gather them again in
    backward (``fully_shard(reshard_after_forward=True)``: ZeRO-3 memory); false keeps them
    until backward (ZeRO-2-like: no second all-gather, one unsharded model held)."""
    param_dtype: FsdpDtype | None = None
    """Dtype FSDP all-gathers parameters in and computes with (``MixedPrecisionPolicy
    .param_dtype``); the sharded fp32 masters stay fp32. Default: training.precision."""
    reduce_dtype: FsdpDtype = FsdpDtype.fp32
    """Dtype gradients are reduce-scattered / all-reduced in (``MixedPrecisionPolicy
    .reduce_dtype``); fp32 as Megatron-Core reduces bf16 gradients. TRC342."""
    cpu_offload: bool = False
    """Keep sharded parameters, gradients and optimizer states in host memory and step the
    optimizer on the CPU (``CPUOffloadPolicy``; torchtitan ``training.enable_cpu_offload``,
    which runs with pipeline parallelism too: pytorch/torchtitan PR 624). Host memory per node
    and the offload time are estimated (TRC420 / TRC421)."""
    compile: bool = False
    """``torch.compile`` each transformer block before sharding (torchtitan ``compile.enable``).
    The trainc worker runs it eagerly on CPU (announced); TRC344."""
    pp_schedule: PipelineSchedule | None = None
    """Pipeline schedule for pp > 1 (``torch.distributed.pipelining``): 1F1B, Interleaved1F1B
    (vpp > 1) or ZBVZeroBubble (exactly 2 stages per rank, vpp = 2). Default: 1F1B, or
    Interleaved1F1B when vpp > 1. TRC343."""
    selective_ac_option: str | None = None
    """With ``training.recompute: selective``: how torchtitan selects. ``op`` = per-op
    selective activation checkpointing (torchtitan's ``SelectiveAC``: the outputs of matmuls,
    all but every second one per block, of SDPA and of reduce-scatters are saved, the rest
    recomputed); a positive integer N = every N-th block fully checkpointed, the others kept
    whole (torchtitan before 0.3.0 only: set ``launch.versions.torchtitan``), written as a
    string as torchtitan's own option is (``selective_ac_option: "2"``; an unquoted 2 is
    TRC007). Default: op. TRC344. See :mod:`trainc.compiler.targets.torchtitan_ac`."""
    memory_budget: float | None = None
    """With ``training.recompute: selective`` and ``fsdp.compile``: let the compiler's
    partitioner choose what to recompute within this budget, in [0, 1] (0 = the memory of full
    checkpointing, 1 = the compiler's default; torchtitan ``MemoryBudgetAC``,
    ``torch._functorch.config.activation_memory_budget``; torchtitan 0.2.0 or later). Not
    with ``selective_ac_option``. TRC344."""
