"""Derived sizes shared by the validators and the planner. Total functions: a quantity that does
not divide evenly is None (a validator reports why), never an exception.

Formulas mirror Megatron-Core 0.16: ``parallel_state.initialize_model_parallel`` (dp, expert dp),
``num_microbatches_calculator`` (microbatches), ``transformer_block.get_num_layers_to_build``
(layers per stage), ``vocab_size_with_padding`` (padded vocab).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainc.compiler.decide import ENGINE_TRAITS, traits
from trainc.compiler.decide import megatron_fsdp as megatron_fsdp
from trainc.schemas import TrainSpec


@dataclass(frozen=True, slots=True)
class Derived:
    """Grid and batch quantities of a normalized spec (counts; None = does not divide)."""

    world_size: int
    """num_nodes x gpus_per_node (GPUs in the job)."""
    model_parallel: int
    """tp x pp x cp: GPUs holding one replica of the dense grid."""
    dp: int | None
    """world / (tp*pp*cp) (Megatron's data_parallel_size; excludes cp)."""
    etp: int
    """Expert tensor-parallel degree."""
    expert_dp: int | None
    """world / (etp*ep*pp) (expert data-parallel size; tp and cp fold into it)."""
    num_microbatches: int | None
    """global_batch_size / (micro_batch_size * dp)."""
    layers_per_stage: tuple[int, ...] | None
    """Transformer layers on each PP stage (sums to num_layers)."""
    padded_vocab_size: int
    """vocab padded to a multiple of make_vocab_size_divisible_by * tp."""
    num_moe_layers: int
    """Layers that are MoE layers (0 for dense models)."""
    samples_per_step: int
    """Sequences per optimizer step, whole job (= global_batch_size; cp, tp and pp split each
    sequence or the model, never the count)."""
    tokens_per_step: int
    """samples_per_step x seq_length (tokens per optimizer step, whole job; the same for every
    cp: a context-parallel rank holds seq_length/cp tokens of the same sequences)."""
    dataset_samples: int | None
    """Sequences in the training data: data.num_samples, or floor(data.num_tokens /
    seq_length); None when neither is given."""
    steps_per_epoch: int | None
    """ceil(dataset_samples / samples_per_step): optimizer steps for one pass over the data."""
    epochs: float | None
    """train_iters x samples_per_step / dataset_samples (passes over the data; Megatron-Core's
    GPTDataset repeats the documents beyond 1)."""
    checkpoint_format: str
    """The checkpoint format this job writes (:func:`checkpoint_format`)."""


def _div(a: int, b: int) -> int | None:
    return a // b if b > 0 and a % b == 0 and a // b >= 1 else None


def padded_vocab(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: ``ceil(V / (d*tp)) * d*tp``.

    >>> padded_vocab(32000, 128, 8)
    32768
    >>> padded_vocab(128256, 128, 4)
    128512
    """
    unit = max(divisible_by, 1) * max(tp, 1)
    return math.ceil(vocab_size / unit) * unit


def layers_per_stage(
    num_layers: int,
    pp: int,
    first: int | None,
    last: int | None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> tuple[int, ...] | None:
    """Transformer layers on each pipeline stage, or None if the split is invalid.

    Even split: ``L/pp`` each. Uneven (Megatron ``num_layers_in_first/last_pipeline_stage``):
    the given ends, and the rest spread evenly over the middle stages. ``account_for_*``
    (Megatron ``account_for_embedding/loss_in_pipeline_split``, ``get_num_layers_to_build``):
    ``L' = L + [embedding] + [loss]`` is split evenly and the first (last) stage builds one layer
    fewer; it cannot be combined with first/last counts (Megatron-LM core_v0.16.1
    ``megatron/core/transformer/transformer_config.py::TransformerConfig.__post_init__``).

    >>> layers_per_stage(30, 4, 8, 8)
    (8, 7, 7, 8)
    >>> layers_per_stage(30, 4, None, None) is None
    True
    >>> layers_per_stage(126, 16, None, None, True, True)[:3]
    (7, 8, 8)
    """
    if pp < 1 or num_layers < 1:
        return None
    extra = int(account_for_embedding) + int(account_for_loss)
    if extra and (first is not None or last is not None):
        return None
    if first is None and last is None:
        per = _div(num_layers + extra, pp)
        if not per:
            return None
        out = [per] * pp
        out[0] -= int(account_for_embedding)
        out[-1] -= int(account_for_loss)
        return tuple(out) if min(out) >= 0 and sum(out) == num_layers else None
    if pp == 1:
        return None
    f = first if first is not None else None
    la = last if last is not None else None
    n_given = (f is not None) + (la is not None)
    mid_stages = pp - n_given
    mid_layers = num_layers - (f or 0) - (la or 0)
    if (f is not None and f < 1) or (la is not None and la < 1) or mid_layers < 0:
        return None
    if mid_stages == 0:
        if mid_layers != 0:
            return None
        mid: tuple[int, ...] = ()
    else:
        per = _div(mid_layers, mid_stages)
        if per is None:
            return None
        mid = (per,) * mid_stages
    return ((f,) if f is not None else ()) + mid + ((la,) if la is not None else ())


def moe_layer_pattern(spec: TrainSpec) -> tuple[int, ...]:
    """Per decoder layer (0-based), 1 for an MoE layer and 0 for a dense one: layer i is MoE iff
    ``i >= moe_first_k_dense_layers`` and ``i % moe_layer_freq == 0`` (HF
    ``DeepseekV3DecoderLayer``'s rule; Megatron-Core's int ``moe_layer_freq`` is the k = 0 case).
    This is the list Megatron-Core receives as ``moe_layer_freq`` when k > 0 (megatron-core
    0.16.1 ``gpt_layer_specs.get_gpt_decoder_block_spec`` reads a list as the pattern itself).
    A dense model (num_experts null) is all zeros."""
    m = spec.model
    k, freq = m.moe_first_k_dense_layers, m.moe_layer_freq
    if not m.num_experts or freq < 1:
        return (0,) * m.num_layers
    return tuple(int(i >= k and i % freq == 0) for i in range(m.num_layers))


def num_moe_layers(spec: TrainSpec) -> int:
    """MoE layers of :func:`moe_layer_pattern` (its count of 1s)."""
    return sum(moe_layer_pattern(spec))


def default_etp(spec: TrainSpec) -> int:
    """The expert tensor-parallel degree when ``parallel.etp`` is unset: tp (Megatron-Core's
    ``expert_tensor_parallel_size`` default), except engine=fsdp with ep > 1, where it is 1:
    torchtitan 0.3.0 has no expert tensor-parallel degree, its expert parallelism borrows the
    tp ranks (sparse mesh ``pp, dp_replicate, efsdp, ep``, ``ParallelDims.build_mesh`` in
    ``torchtitan/distributed/parallel_dims.py``) and shards the experts over tp only without
    EP (``expert_param_placement_dense``, ``torchtitan/models/common/moe_sharding.py``)."""
    p = spec.parallel
    return 1 if traits(spec).experts_borrow_tp and p.ep > 1 else p.tp


def derive(spec: TrainSpec) -> Derived:
    """Derived quantities of a *normalized* spec (see :func:`trainc.compiler.normalize.normalize`)."""
    c, p, t, m = spec.cluster, spec.parallel, spec.training, spec.model
    world = c.num_nodes * c.gpus_per_node
    mp = p.tp * p.pp * p.cp
    dp = _div(world, mp)
    etp = p.etp if p.etp is not None else default_etp(spec)
    edp = _div(world, etp * p.ep * p.pp)
    nmb = _div(t.global_batch_size, t.micro_batch_size * dp) if dp else None
    samples, steps, epochs = epoch_counts(spec)
    return Derived(
        world_size=world,
        model_parallel=mp,
        dp=dp,
        etp=etp,
        expert_dp=edp,
        num_microbatches=nmb,
        layers_per_stage=layers_per_stage(
            m.num_layers,
            p.pp,
            p.pipeline_first_stage_layers,
            p.pipeline_last_stage_layers,
            p.account_for_embedding_in_pipeline_split,
            p.account_for_loss_in_pipeline_split,
        ),
        padded_vocab_size=padded_vocab(m.vocab_size, m.make_vocab_size_divisible_by, p.tp),
        num_moe_layers=num_moe_layers(spec),
        samples_per_step=t.global_batch_size,
        tokens_per_step=t.global_batch_size * m.seq_length,
        dataset_samples=samples,
        steps_per_epoch=steps,
        epochs=epochs,
        checkpoint_format=checkpoint_format(spec),
    )


def megatron_fsdp_runs(spec: TrainSpec) -> bool:
    """Whether Megatron-FSDP can run this spec's job as written: Megatron-LM's pretrain_gpt.py on
    CUDA (the trainc worker refuses it on CUDA and runs the distributed optimizer on CPU: TRC383).
    The planner and TRC401's fix list offer zero_stage 3 only then
    (:func:`trainc.compiler.candidates.zero_stages`)."""
    return (
        ENGINE_TRAITS[spec.engine].zero(3).megatron_fsdp
        and spec.launch.entrypoint.value == "megatron-lm"
        and spec.launch.device.value == "cuda"
    )


def checkpoint_format(spec: TrainSpec) -> str:
    """The format a job writes: resume.checkpoint_format, else ``torch_dist`` for
    entrypoint=megatron-lm (Megatron-LM's --ckpt-format default, core_v0.16.x; ``fsdp_dtensor``
    with Megatron-FSDP), ``trainc`` (the
    trainc worker's per-rank, layout-bound files, trainc/launch/worker/checkpoint.py) for the worker with
    engine=megatron, ``deepspeed`` (ZeRO shards, one per data-parallel rank) for
    engine=deepspeed, ``dcp`` (torch.distributed.checkpoint of DTensor state dicts, resharded on
    load) for engine=fsdp (the trainc worker and torchtitan)."""
    if spec.resume.checkpoint_format is not None:
        return spec.resume.checkpoint_format.value
    if spec.launch.entrypoint.value == "megatron-lm":
        # Megatron-FSDP saves fsdp_dtensor only (TRC383)
        return "fsdp_dtensor" if megatron_fsdp(spec) else "torch_dist"
    return traits(spec).worker_checkpoint_format


def epoch_counts(spec: TrainSpec) -> tuple[int | None, int | None, float | None]:
    """``(dataset_samples, steps_per_epoch, epochs)`` of a spec: the one place trainc counts
    epochs (the report, ``trainc explain`` and plan.json ``derived`` print these).

    Samples are sequences of ``seq_length`` tokens (Megatron-Core GPTDataset concatenates the
    documents and cuts them into samples of seq_length + 1 tokens; the +1 label token overlaps
    the next sample, megatron/core/datasets/gpt_dataset.py, 0.16.1). A step consumes
    global_batch_size samples whatever the layout: context parallelism splits each sequence
    over cp ranks and does not change the count (a loader that counted per-rank sequence
    chunks would report cp times the epochs).

    >>> epoch_counts(_demo())
    (10000, 157, 1.28)
    """
    m, t, data = spec.model, spec.training, spec.data
    samples = data.num_samples
    if samples is None and data.num_tokens is not None and m.seq_length > 0:
        samples = data.num_tokens // m.seq_length
    if not samples or t.global_batch_size < 1:
        return samples, None, None
    steps = -(-samples // t.global_batch_size)
    return samples, steps, round(t.train_iters * t.global_batch_size / samples, 6)


def _demo() -> TrainSpec:
    """A small spec for the doctests (200 steps of 64 samples over 10 000 samples)."""
    from trainc.schemas import ClusterSpec, DataSpec, ModelSpec, TrainingSpec

    return TrainSpec(
        model=ModelSpec(
            num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=128
        ),
        cluster=ClusterSpec(num_nodes=1, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=64, train_iters=200),
        data=DataSpec(num_samples=10000),
    )


def stage_chunk_sizes(
    num_layers_per_stage: list[int],
    vpp: int,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> list[list[int]]:
    """Transformer layers in each model chunk of each PP rank (``[rank][chunk]``).

    Mirrors Megatron-Core ``get_num_layers_to_build``: every rank's (padded) layers form ``vpp``
    equal chunks; with ``account_for_embedding`` the first chunk of the first rank builds one layer
    fewer, with ``account_for_loss`` the last chunk of the last rank (megatron-core 0.16.1
    ``transformer_block.py::get_num_layers_to_build``).
    Splits that do not divide into ``vpp`` chunks are shown as one chunk per rank.

    >>> stage_chunk_sizes([7, 8, 8, 7], 2, True, True)
    [[3, 4], [4, 4], [4, 4], [4, 3]]
    """
    p = len(num_layers_per_stage)
    padded = [
        n + (account_for_embedding and r == 0) + (account_for_loss and r == p - 1)
        for r, n in enumerate(num_layers_per_stage)
    ]
    if vpp <= 1 or any(n % vpp for n in padded):
        return [[n] for n in num_layers_per_stage]
    out = [[n // vpp] * vpp for n in padded]
    if account_for_embedding:
        out[0][0] -= 1
    if account_for_loss:
        out[-1][-1] -= 1
    return out


def stage_layer_indices(
    num_layers_per_stage: list[int],
    vpp: int,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> list[list[int]]:
    """Global (0-based) layer indices of each PP rank, chunk by chunk.

    Without interleaving stage r holds a contiguous block. With ``vpp = v`` chunk j of rank r
    (sizes from :func:`stage_chunk_sizes`) sits at virtual position ``j*p + r``
    (megatron-core 0.16.1 ``transformer_block.py::get_num_layers_to_build``).

    >>> stage_layer_indices([2, 2], 2)
    [[0, 2], [1, 3]]
    >>> stage_layer_indices([1, 2], 2, True, False)
    [[1], [0, 2]]
    """
    sizes = stage_chunk_sizes(num_layers_per_stage, vpp, account_for_embedding, account_for_loss)
    p, v = len(sizes), max((len(c) for c in sizes), default=1)
    out: list[list[int]] = [[] for _ in range(p)]
    pos = 0
    for j in range(v):  # virtual stage q = j*p + r, in order of q
        for r in range(p):
            n = sizes[r][j] if j < len(sizes[r]) else 0
            out[r].extend(range(pos, pos + n))
            pos += n
    return out


def full_recompute_mask(
    chunks: list[int], recompute_method: str | None, recompute_num_layers: int | None
) -> list[bool]:
    """Which of a stage's layers full recompute re-runs, in :func:`stage_layer_indices` order;
    ``chunks`` are the stage's chunk sizes (:func:`stage_chunk_sizes`).

    Mirrors Megatron-Core ``TransformerBlock._checkpointed_forward``: ``uniform`` checkpoints every
    layer in groups of ``recompute_num_layers``; ``block`` checkpoints the first
    ``recompute_num_layers`` layers of each model chunk and runs the rest with full stored
    activations.

    >>> full_recompute_mask([2, 2], "block", 1)
    [True, False, True, False]
    >>> full_recompute_mask([3], "uniform", 2)
    [True, True, True]
    """
    if recompute_method != "block":
        return [True] * sum(chunks)
    n = max(recompute_num_layers or 1, 1)
    return [k < n for c in chunks for k in range(c)]


def tp_in_nvlink_domain(
    tp: int, nvlink_domain_size: int | None, gpus_per_node: int, world: int | None = None
) -> bool:
    """Whether a TP group (``tp`` consecutive ranks, Megatron-Core's order ``tp-cp-ep-dp-pp``)
    lies inside one NVLink domain (``nvlink_domain_size`` GPUs, default the node): the groups
    tile the domain (``domain % tp == 0``), or the whole job (``world`` GPUs) fits in one
    domain. Transformer Engine's userbuffers, which ``tp_comm_overlap`` runs in, exchange over
    NVLink peer memory.

    >>> tp_in_nvlink_domain(8, 8, 8), tp_in_nvlink_domain(16, 8, 8), tp_in_nvlink_domain(8, 72, 4)
    (True, False, True)
    >>> tp_in_nvlink_domain(16, 72, 4), tp_in_nvlink_domain(16, 72, 4, world=64)
    (False, True)
    """
    dom = nvlink_domain_size or gpus_per_node
    if tp <= 0 or tp > dom:
        return False
    return dom % tp == 0 or (world is not None and world <= dom)


def domain_group_nodes(tp: int, cp: int, etp: int, ep: int, gpus_per_node: int) -> int:
    """Nodes spanned by the widest group that should stay inside one NVLink domain: the TP x CP
    group of the dense grid or the ETP x EP group of the expert grid (count, at least 1).

    Megatron-Core's rank order ``tp-cp-ep-dp-pp`` (``parallel_state.RankGenerator``, 0.16.1)
    makes both groups runs of consecutive ranks, aligned to their size, and torchrun numbers
    ranks node by node, so a group of ``g`` GPUs covers ``ceil(g / gpus_per_node)`` consecutive
    node ranks.

    >>> domain_group_nodes(4, 1, 1, 16, 4), domain_group_nodes(2, 1, 1, 1, 4)
    (4, 1)
    """
    widest = max(tp * cp, etp * ep, 1)
    return max(1, -(-widest // max(gpus_per_node, 1)))


def slurm_segment(
    num_nodes: int,
    gpus_per_node: int,
    nvlink_domain_size: int,
    requested: int | None,
    group_nodes: int = 1,
) -> int:
    """Nodes per ``#SBATCH --segment`` (0: no such line) for a job of ``num_nodes`` nodes.

    ``requested`` (``launch.slurm_segment``) is taken as written (0 turns the line off). Left
    null, a segment is asked for only when the NVLink domain spans more than one node (GB200
    NVL72: 72 GPUs = 18 trays of 4): the largest divisor of ``num_nodes`` that fits one domain
    (``nvlink_domain_size // gpus_per_node`` nodes), preferring one that is a multiple of
    ``group_nodes`` (:func:`domain_group_nodes`) so that no TP/CP or EP group straddles two
    segments (a job that fits one domain is one segment); 0 when that divisor is 1 (a one-node
    segment asks for nothing). The segment
    divides ``num_nodes`` because the allocation is made of whole segments (Slurm's
    topology/block plugin, https://slurm.schedmd.com/topology.html, sbatch ``--segment``).

    >>> slurm_segment(36, 4, 72, None), slurm_segment(20, 4, 72, None), slurm_segment(8, 8, 8, None)
    (18, 10, 0)
    >>> slurm_segment(32, 4, 72, None, group_nodes=16), slurm_segment(4, 4, 72, 0)
    (16, 0)
    """
    if requested is not None:
        return requested
    per_domain = nvlink_domain_size // max(gpus_per_node, 1)
    if per_domain <= 1 or num_nodes <= 1:
        return 0
    if num_nodes <= per_domain:
        return num_nodes  # the whole job in one domain: no group can be cut
    fits = [s for s in range(per_domain, 0, -1) if num_nodes % s == 0]
    whole = [s for s in fits if s % group_nodes == 0]
    best = (whole or fits)[0]
    return best if best > 1 else 0
