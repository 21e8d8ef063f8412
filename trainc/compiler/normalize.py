"""normalize: fill every documented default so later passes see concrete values. Never fails.

Defaults follow Megatron-LM's CLI (``megatron/training/arguments.py::validate_args``), since the
generated ``megatron_args.txt`` relies on them, and Megatron-Core where the CLI has none.
"""

from __future__ import annotations

from trainc.compiler.decide import traits, zero_layout
from trainc.compiler.derive import default_etp, tp_in_nvlink_domain
from trainc.compiler.support.hardware import GPUS
from trainc.compiler.support.treecopy import copy_tree
from trainc.schemas import (
    Activation,
    Device,
    FsdpDtype,
    Normalization,
    PipelineSchedule,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainSpec,
)


def default_ffn_hidden_size(hidden_size: int, activation: Activation) -> int:
    """Megatron-LM's CLI default MLP width (elements).

    swiglu: ``int(4h * 2/3 / 64) * 64`` (h=4096 -> 10880, not Llama's 11008); otherwise ``4h``.

    >>> default_ffn_hidden_size(4096, Activation.swiglu)
    10880
    """
    if activation is Activation.swiglu:
        return int((4 * hidden_size * 2 / 3) / 64) * 64
    return 4 * hidden_size


_HW = ("cluster.gpu",)
#: Each key :func:`normalize` fills when it is null -> the keys its value is computed from (in
#: fill order). A filled key whose input is invalid is invalid too (:func:`tainted`).
FILLED_FROM: dict[str, tuple[str, ...]] = {
    "cluster.gpu_memory_gib": _HW,
    "cluster.peak_tflops": _HW,
    "cluster.intra_node_bandwidth_gbps": _HW,
    "cluster.inter_node_bandwidth_gbps": _HW,
    "cluster.nvlink_domain_size": ("cluster.gpu", "cluster.gpus_per_node"),
    "model.num_query_groups": ("model.num_attention_heads",),
    "model.ffn_hidden_size": ("model.hidden_size", "model.activation"),
    "model.kv_channels": ("model.hidden_size", "model.num_attention_heads"),
    "model.max_position_embeddings": ("model.seq_length",),
    "model.moe_ffn_hidden_size": ("model.ffn_hidden_size", "model.num_experts"),
    "parallel.etp": ("parallel.tp", "parallel.ep", "engine"),
    "parallel.sequence_parallel": ("parallel.tp",),
    "training.lr_decay_iters": ("training.train_iters",),
    "training.recompute_method": ("training.recompute",),
    "training.recompute_num_layers": ("training.recompute",),
    "fsdp.dp_shard": (
        "cluster.num_nodes",
        "cluster.gpus_per_node",
        "parallel.tp",
        "parallel.pp",
        "parallel.cp",
        "fsdp.dp_replicate",
    ),
    "fsdp.param_dtype": ("training.precision",),
    "fsdp.pp_schedule": ("parallel.vpp",),
}


def spec_value(spec: TrainSpec, key: str) -> object:
    """The value at a dotted spec key (``parallel.tp``)."""
    obj: object = spec
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def tainted(before: TrainSpec, broken: frozenset[str]) -> dict[str, frozenset[str]]:
    """The keys :func:`normalize` fills (null in ``before``) from a broken key, each mapped to
    the broken keys of ``broken`` it comes from (transitively: moe_ffn from ffn from hidden)."""
    out: dict[str, frozenset[str]] = {}
    for key, inputs in FILLED_FROM.items():
        if key in broken or spec_value(before, key) is not None:
            continue
        roots: set[str] = set()
        for i in inputs:
            roots |= {b for b in broken if i == b or i.startswith(b + ".")}
            roots |= out.get(i, frozenset())
        if roots:
            out[key] = frozenset(roots)
    return out


def default_tp_comm_overlap(spec: TrainSpec, tp: int, sequence_parallel: bool) -> bool:
    """trainc's default for ``training.tp_comm_overlap`` of a layout with ``tp`` and
    ``sequence_parallel`` (Megatron-LM's default is false): on where NVIDIA's performance
    recipes turn it on and Megatron-LM accepts it: engine=megatron on CUDA, tp > 1 with
    sequence parallelism, the TP group inside the NVLink domain (TRC380, TRC382), a Hopper or
    newer GPU (a profile with an FP8 peak: NeMo / Megatron-Bridge ship userbuffer overlap
    configs for H100, B200 and GB200 only). Off everywhere else (A100, custom GPUs, CPU)."""
    c = spec.cluster
    prof = GPUS.get(c.gpu)
    return (
        traits(spec).tp_comm_overlap_default
        and spec.launch.device is Device.cuda
        and tp > 1
        and sequence_parallel
        and prof is not None
        and "fp8" in prof.peaks
        and tp_in_nvlink_domain(
            tp, c.nvlink_domain_size, c.gpus_per_node, c.num_nodes * c.gpus_per_node
        )
    )


def normalize(spec: TrainSpec) -> TrainSpec:
    """Return a copy of ``spec`` with every derivable null filled.

    Fills: cluster hardware from the ``gpu`` preset (unknown names leave nulls, reported by the
    validators), ``nvlink_domain_size`` (GPU preset or gpus_per_node), ``num_query_groups``
    (= heads), ``ffn_hidden_size`` (CLI rule), ``kv_channels`` (= h // heads), ``max_position_
    embeddings`` (= seq), ``moe_ffn_hidden_size`` (= ffn), ``etp`` (= tp; 1 for engine=fsdp
    with ep > 1, :func:`~trainc.compiler.derive.default_etp`), ``sequence_parallel``
    (= tp > 1), ``add_bias_linear`` (Llama-style: false), ``moe_router_pre_softmax`` (top-1),
    ``lr_decay_iters`` (= train_iters), the DDP overlap switches (on when dp x cp > 1 for
    engine=megatron; param gather only with the distributed optimizer), and for full recompute
    ``recompute_method`` (uniform) and ``recompute_num_layers`` (1).
    """
    s = copy_tree(spec)
    c, m, p, t = s.cluster, s.model, s.parallel, s.training
    gpu = GPUS.get(c.gpu)
    if gpu is not None:
        if c.gpu_memory_gib is None:
            c.gpu_memory_gib = float(gpu.memory_gib)
        if c.peak_tflops is None:
            c.peak_tflops = float(gpu.peak_tflops)
        if c.intra_node_bandwidth_gbps is None:
            c.intra_node_bandwidth_gbps = float(gpu.intra_node_bandwidth_gbps)
        if c.inter_node_bandwidth_gbps is None:
            c.inter_node_bandwidth_gbps = float(gpu.inter_node_bandwidth_gbps)
        if c.nvlink_domain_size is None and gpu.nvlink_domain_size is not None:
            c.nvlink_domain_size = gpu.nvlink_domain_size
    if c.nvlink_domain_size is None:
        c.nvlink_domain_size = c.gpus_per_node
    if m.num_query_groups is None:
        m.num_query_groups = m.num_attention_heads
    if m.ffn_hidden_size is None:
        m.ffn_hidden_size = default_ffn_hidden_size(m.hidden_size, m.activation)
    if m.kv_channels is None:
        m.kv_channels = m.hidden_size // m.num_attention_heads if m.num_attention_heads > 0 else 0
    if m.max_position_embeddings is None:
        m.max_position_embeddings = m.seq_length
    if m.num_experts == 0:
        m.num_experts = None  # Megatron turns 0 into None
    if m.num_experts is not None and m.moe_ffn_hidden_size is None:
        m.moe_ffn_hidden_size = m.ffn_hidden_size
    if p.etp is None:
        p.etp = default_etp(s)
    if p.sequence_parallel is None:
        p.sequence_parallel = p.tp > 1
    if m.add_bias_linear is None:
        # Llama-style models (SwiGLU or RMSNorm) have no linear biases; Megatron-Core MoE with
        # ETP > 1 rejects biases ("Bias in Moe is only supported when ETP==1").
        m.add_bias_linear = not (
            m.activation is Activation.swiglu
            or m.normalization is Normalization.rmsnorm
            or (m.num_experts is not None and p.etp > 1)
        )
    # Megatron-LM validate_args keeps them in sync: biases in every linear layer include QKV
    m.add_qkv_bias = m.add_qkv_bias or bool(m.add_bias_linear)
    if m.moe_router_pre_softmax is None:
        m.moe_router_pre_softmax = m.num_experts is not None and m.moe_router_topk == 1
    if t.lr_decay_iters is None:
        t.lr_decay_iters = t.train_iters
    model_parallel = p.tp * p.pp * p.cp
    world = c.num_nodes * c.gpus_per_node
    dp_cp = (
        world // model_parallel * p.cp if model_parallel > 0 and world % model_parallel == 0 else 1
    )
    ddp = traits(s).ddp_overlap_defaults
    zero = zero_layout(s)
    mfsdp = zero.megatron_fsdp  # MegatronFSDP.__init__ forces both overlaps on
    distopt_only = zero.distributed_optimizer and not mfsdp  # Megatron's zero_stage 1
    if t.overlap_grad_reduce is None:
        t.overlap_grad_reduce = ddp and (dp_cp > 1 or mfsdp)
    if t.overlap_param_gather is None:
        t.overlap_param_gather = mfsdp or (
            ddp and distopt_only and dp_cp > 1 and t.overlap_grad_reduce
        )
    if t.tp_comm_overlap is None:
        t.tp_comm_overlap = default_tp_comm_overlap(s, p.tp, bool(p.sequence_parallel))
    if traits(s).fsdp_keys:
        _fsdp(
            s,
            world // model_parallel if model_parallel > 0 and world % model_parallel == 0 else None,
        )
    if t.recompute is Recompute.full:
        if t.recompute_method is None:
            t.recompute_method = RecomputeMethod.uniform
        if t.recompute_num_layers is None:
            t.recompute_num_layers = 1
    return s


def _fsdp(s: TrainSpec, dp: int | None) -> None:
    """engine=fsdp: ``fsdp.dp_shard`` = dp / dp_replicate (when it divides; TRC340 reports it
    otherwise), ``fsdp.param_dtype`` = the training precision (bf16 or fp32; fp16 stays null and
    TRC342 reports it), ``fsdp.pp_schedule`` = 1F1B, or Interleaved1F1B with vpp > 1 (with
    pp > 1 only)."""
    f, p = s.fsdp, s.parallel
    if f.dp_shard is None and dp is not None and f.dp_replicate > 0 and dp % f.dp_replicate == 0:
        f.dp_shard = dp // f.dp_replicate
    if f.param_dtype is None and s.training.precision is not Precision.fp16:
        f.param_dtype = FsdpDtype(s.training.precision.value)
    if f.pp_schedule is None and p.pp > 1:  # with pp 1 a written schedule is inert (TRC329)
        f.pp_schedule = PipelineSchedule.interleaved_1f1b if p.vpp > 1 else PipelineSchedule.one_f1b
