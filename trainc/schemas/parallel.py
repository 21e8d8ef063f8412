"""``parallel:`` section: the parallel layout."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import CpCommType


@dataclass(kw_only=True)
class ParallelSpec:
    """Parallel degrees in Megatron-Core's sense; dense grid world = tp*pp*cp*dp, expert grid
    world = etp*ep*pp*expert_dp (EP does not multiply the world)."""

    tp: int = 1
    """Tensor-parallel degree (tensor_model_parallel_size). Rules: TRC101, TRC105, TRC201-TRC203."""
    pp: int = 1
    """Pipeline-parallel degree (pipeline_model_parallel_size). Rules: TRC101, TRC210-TRC216."""
    vpp: int = 1
    """Virtual pipeline stages per PP rank; > 1 selects the interleaved 1F1B schedule. TRC211,
    TRC213."""
    cp: int = 1
    """Context-parallel degree (context_parallel_size); splits the sequence. TRC217, TRC218."""
    cp_comm_type: CpCommType = CpCommType.p2p
    """CP attention communication: p2p (ring), all_gather or a2a (Ulysses-style). TRC220."""
    ep: int = 1
    """Expert-parallel degree (expert_model_parallel_size); MoE only. TRC104, TRC205; with
    engine=fsdp torchtitan's ``expert_parallel_degree``, which must divide dp_shard x cp x tp
    (TRC348)."""
    etp: int | None = None
    """Expert tensor-parallel degree. Default: tp (Megatron's default); always emitted. TRC204.
    engine=fsdp (torchtitan, no such degree): tp without EP, 1 with ep > 1; another is TRC344."""
    dp: int | None = None
    """Data-parallel degree. Default: world / (tp*pp*cp); if given it must equal that. TRC102,
    TRC103."""
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism. Default: true when tp > 1. TRC218, TRC301, TRC302."""
    zero_stage: int = 1
    """ZeRO stage 0-3. engine=megatron: 0 = plain DDP, 1 = distributed optimizer (ZeRO-1
    equivalent). engine=deepspeed: DeepSpeed's stage. TRC304, TRC307."""
    pipeline_first_stage_layers: int | None = None
    """Uneven pipeline: layers on the first stage (Megatron --decoder-first-pipeline-num-layers).
    TRC212."""
    pipeline_last_stage_layers: int | None = None
    """Uneven pipeline: layers on the last stage (Megatron --decoder-last-pipeline-num-layers).
    TRC212."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the input embedding as one layer when splitting layers over PP stages: the first
    stage (its first virtual chunk with vpp) builds one transformer layer fewer (Megatron
    --account-for-embedding-in-pipeline-split). Lets e.g. 126 layers split over pp=16 x vpp=8.
    Not with pipeline_first/last_stage_layers. TRC212."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the output layer and loss as one layer when splitting: the last stage (its last
    virtual chunk) builds one transformer layer fewer (Megatron
    --account-for-loss-in-pipeline-split). TRC212."""
