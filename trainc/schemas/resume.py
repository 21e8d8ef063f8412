"""``resume:`` section: the checkpoint a job loads and the layout it was written with."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainc.schemas.enums import CkptFormat, Engine, LrDecayStyle, Optimizer


@dataclass(kw_only=True)
class SavedLayout:
    """What the run that wrote ``resume.load_dir`` used (its plan.json ``spec`` and ``derived``
    values; ``trainc diff A B`` compares two plans the same way). null = not known (unchecked)."""

    engine: Engine | None = None
    """megatron or deepspeed."""
    checkpoint_format: CkptFormat | None = None
    """The format the checkpoint was written in (torch_dist, torch or fsdp_dtensor)."""
    tp: int | None = None
    """Tensor-parallel size of the saving run."""
    pp: int | None = None
    """Pipeline-parallel size."""
    vpp: int | None = None
    """Virtual pipeline chunks per stage."""
    cp: int | None = None
    """Context-parallel size."""
    ep: int | None = None
    """Expert-parallel size."""
    etp: int | None = None
    """Expert tensor-parallel size."""
    dp: int | None = None
    """Data-parallel size (derived.dp of the saving run)."""
    zero_stage: int | None = None
    """engine=deepspeed: the ZeRO stage."""
    distributed_optimizer: bool | None = None
    """engine=megatron: the saving run used the distributed optimizer (zero_stage 1,
    --use-distributed-optimizer). null = as this job."""
    optim_fully_reshardable: bool | None = None
    """The distributed optimizer's state was saved fully reshardable (Megatron-LM
    --dist-ckpt-optim-fully-reshardable); without it a torch_dist checkpoint's optimizer state
    reshards only in dp (megatron-core 0.16.1 DistributedOptimizer.sharded_state_dict)."""
    num_layers: int | None = None
    """Transformer layers."""
    hidden_size: int | None = None
    """Model width."""
    num_attention_heads: int | None = None
    """Query heads."""
    num_query_groups: int | None = None
    """KV heads."""
    ffn_hidden_size: int | None = None
    """MLP inner width."""
    num_experts: int | None = None
    """MoE experts (null: dense)."""
    max_position_embeddings: int | None = None
    """Learned position embeddings: rows of the position table (tokens)."""
    padded_vocab_size: int | None = None
    """Rows of the embedding / output layer (derived.padded_vocab_size of the saving run)."""
    untie_embeddings_and_output_weights: bool | None = None
    """Separate output layer (false: tied to the embedding)."""
    global_batch_size: int | None = None
    """Samples per optimizer step."""
    optimizer: Optimizer | None = None
    """adam or sgd."""
    lr_decay_style: LrDecayStyle | None = None
    """The learning-rate decay."""
    train_iters: int | None = None
    """Optimizer steps planned."""


@dataclass(kw_only=True)
class ResumeSpec:
    """Loading a checkpoint (Megatron-LM ``--load``, ``--finetune``, ``--ckpt-format``).
    Rules: TRC533-TRC538."""

    load_dir: str | None = None
    """Checkpoint directory to load at start (Megatron-LM --load); null = launch.save_dir (a
    requeued job resumes its own checkpoints)."""
    checkpoint_format: CkptFormat | None = None
    """Format this job writes and reads (Megatron-LM --ckpt-format). null = derived:
    torch_dist for entrypoint=megatron-lm, fsdp_dtensor with Megatron-FSDP (zero_stage 3, the
    only format it accepts: TRC383); the trainc worker writes its own per-rank files
    (layout-bound, as torch) and takes no other value (TRC533)."""
    finetune: bool = False
    """Load the weights only: iteration 0, a fresh optimizer and schedule (Megatron-LM
    --finetune). Batch, schedule and optimizer may then differ from the saved run."""
    optim_fully_reshardable: bool = False
    """Save the distributed optimizer's state fully reshardable, so that a later job may load it
    with another tp/pp/ep (Megatron-LM --dist-ckpt-optim-fully-reshardable; the default,
    dp_reshardable, reshards only in dp). entrypoint=megatron-lm only."""
    saved: SavedLayout = field(default_factory=SavedLayout)
    """The layout load_dir was written with (see SavedLayout)."""
