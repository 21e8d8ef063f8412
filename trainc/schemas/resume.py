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
    """The format the checkpoint was written in (torch_dist or torch)."""
    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    dp: int | None = None
    zero_stage: int | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    num_experts: int | None = None
    max_position_embeddings: int | None = None
    """Learned position embeddings: rows of the position table (tokens)."""
    padded_vocab_size: int | None = None
    """Rows of the embedding / output layer (derived.padded_vocab_size of the saving run)."""
    untie_embeddings_and_output_weights: bool | None = None
    global_batch_size: int | None = None
    optimizer: Optimizer | None = None
    lr_decay_style: LrDecayStyle | None = None
    train_iters: int | None = None


@dataclass(kw_only=True)
class ResumeSpec:
    """Loading a checkpoint (Megatron-LM ``--load``, ``--finetune``, ``--ckpt-format``).
    Rules: TRC533-TRC538."""

    load_dir: str | None = None
    """Checkpoint directory to load at start (Megatron-LM --load); null = launch.save_dir (a
    requeued job resumes its own checkpoints)."""
    checkpoint_format: CkptFormat | None = None
    """Format this job writes and reads (Megatron-LM --ckpt-format). null = derived:
    torch_dist for entrypoint=megatron-lm; the trainc worker writes its own per-rank files
    (layout-bound, as torch) and takes no other value (TRC533)."""
    finetune: bool = False
    """Load the weights only: iteration 0, a fresh optimizer and schedule (Megatron-LM
    --finetune). Batch, schedule and optimizer may then differ from the saved run."""
    saved: SavedLayout = field(default_factory=SavedLayout)
    """The layout load_dir was written with (see SavedLayout)."""
