"""TRC006: sizes that must be positive (or in a range) before any arithmetic makes sense."""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.normalize import spec_value
from trainc.schemas import TrainSpec

_POSITIVE = (
    "model.num_layers",
    "model.hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.ffn_hidden_size",
    "model.kv_channels",
    "model.vocab_size",
    "model.make_vocab_size_divisible_by",
    "model.seq_length",
    "model.max_position_embeddings",
    "model.num_experts",
    "model.moe_router_topk",
    "model.moe_ffn_hidden_size",
    "model.moe_shared_expert_intermediate_size",
    "model.moe_layer_freq",
    "model.mtp_num_layers",
    "model.moe_router_num_groups",
    "model.moe_router_group_topk",
    "model.q_lora_rank",
    "model.kv_lora_rank",
    "model.qk_head_dim",
    "model.qk_pos_emb_head_dim",
    "model.v_head_dim",
    "cluster.num_nodes",
    "cluster.gpus_per_node",
    "cluster.gpu_memory_gib",
    "cluster.peak_tflops",
    "cluster.nvlink_domain_size",
    "cluster.intra_node_bandwidth_gbps",
    "cluster.inter_node_bandwidth_gbps",
    "cluster.host_memory_gib",
    "parallel.tp",
    "parallel.pp",
    "parallel.vpp",
    "parallel.cp",
    "parallel.ep",
    "parallel.etp",
    "parallel.dp",
    "training.micro_batch_size",
    "training.global_batch_size",
    "training.train_iters",
    "training.recompute_num_layers",
    "launch.save_interval",
    "launch.log_interval",
    "training.lr_decay_iters",
    "training.lr_wsd_decay_iters",
    "training.adam_eps",
    "model.norm_epsilon",
    "model.init_method_std",
    "model.rope_scaling_factor",
    "model.moe_router_topk_scaling_factor",
    "model.moe_expert_capacity_factor",
    "fsdp.dp_replicate",
    "fsdp.dp_shard",
    "data.num_samples",
    "data.num_tokens",
    "data.tokenizer_vocab_size",
    "data.pad_to_multiple_of",
    *(
        f"resume.saved.{k}"
        for k in (
            "tp",
            "pp",
            "vpp",
            "cp",
            "ep",
            "etp",
            "dp",
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_query_groups",
            "ffn_hidden_size",
            "num_experts",
            "max_position_embeddings",
            "padded_vocab_size",
            "global_batch_size",
            "train_iters",
        )
    ),
)
_FRACTION = (
    "cluster.compute_efficiency",
    "cluster.comm_efficiency",
    "model.rotary_percent",
    "cluster.gemm_efficiency",
    "cluster.fp8_gemm_efficiency",
    "cluster.attention_efficiency",
)
#: In [0, 1): momentum terms and dropout probabilities.
_HALF_OPEN = (
    "training.adam_beta1",
    "training.adam_beta2",
    "training.sgd_momentum",
    "model.hidden_dropout",
    "model.attention_dropout",
)
_UNIT = ("cluster.comm_overlap",)
_NON_NEGATIVE = (
    "cluster.memory_reserve_gib",
    "cluster.gemm_half_efficiency_tokens",
    "cluster.layer_overhead_us",
    "training.lr",
    "training.min_lr",
    "training.weight_decay",
    "training.grad_clip",
    "training.lr_warmup_iters",
    "training.seed",
    "model.moe_aux_loss_coeff",
    "model.moe_z_loss_coeff",
    "model.moe_first_k_dense_layers",
    "launch.slurm_segment",
    "cluster.moe_layer_overhead_us",
)
#: Largest value accepted for any count; beyond it arithmetic is meaningless (and slow).
MAX_COUNT = 10**12
#: Tighter caps for counts that later passes iterate over (per layer, per rank): beyond them a
#: spec is a typo, and iterating would exhaust memory or time (the fuzz test found
#: num_layers=1e12 raising MemoryError in the estimates).
MAX_LAYERS = 100_000
#: Per-key caps above :data:`MAX_COUNT`: training-token budgets are counted in trillions
#: (Llama 3 was pretrained on over 15T tokens, arXiv:2407.21783), so data.num_tokens accepts up
#: to 1e15; nothing iterates over it (it only divides into samples).
MAX_BY_KEY = {"data.num_tokens": 10**15}
MAX_WORLD = 1_000_000


def _band(spec: TrainSpec) -> Iterator[Diagnostic]:
    """The calibrated step-time band (``trainc calibrate`` writes both ends): each end a
    positive ratio of measured / estimated step time, and p10 <= p90. One end without the other
    is TRC329 (:func:`trainc.compiler.validate.compatibility.compatibility`)."""
    c = spec.cluster
    lo, hi = c.step_time_p10_ratio, c.step_time_p90_ratio
    ok = True
    for key, v, eg in (
        ("cluster.step_time_p10_ratio", lo, 0.95),
        ("cluster.step_time_p90_ratio", hi, 1.05),
    ):
        if isinstance(v, (int, float)) and not v > 0:
            ok = False
            yield diag(
                R.VALUE_RANGE,
                f"{key} must be positive (a ratio of measured / estimated step time), got ({v})",
                key,
                fix=f"set {key} to the ratio `trainc calibrate` wrote (e.g. {eg}), or remove it",
                value=v,
            )
    if ok and isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
        yield diag(
            R.VALUE_RANGE,
            f"step_time_p10_ratio={lo:g} is above step_time_p90_ratio="
            f"{hi:g}; the band is p10 <= p90",
            "cluster.step_time_p10_ratio",
            related=("cluster.step_time_p90_ratio",),
            fix=f"swap them (cluster.step_time_p10_ratio={hi:g}, "
            f"cluster.step_time_p90_ratio={lo:g}) or re-run `trainc calibrate`",
            edits={"cluster.step_time_p10_ratio": hi, "cluster.step_time_p90_ratio": lo},
            p10=lo,
            p90=hi,
        )


def ranges(spec: TrainSpec) -> Iterator[Diagnostic]:
    """Positive counts, fractions in (0, 1], the calibrated step-time band, ZeRO stage in 0-3,
    port in 1-65535."""
    for key in _POSITIVE:
        v = spec_value(spec, key)
        cap = MAX_BY_KEY.get(key, MAX_COUNT)
        if isinstance(v, (int, float)) and not 0 < v <= cap:
            yield diag(
                R.VALUE_RANGE,
                f"{key} must be a positive number up to {cap:.0e}, got ({v})",
                key,
                fix=f"set {key} to a positive value"
                if v <= 0
                else f"set {key} to the intended value (at most {cap:.0e})",
                value=v,
            )
    m, c = spec.model, spec.cluster
    if isinstance(m.num_layers, int) and MAX_LAYERS < m.num_layers <= MAX_COUNT:
        yield diag(
            R.VALUE_RANGE,
            f"model.num_layers must be at most {MAX_LAYERS:,}, got ({m.num_layers})",
            "model.num_layers",
            fix="set model.num_layers to the model's transformer layer count",
            value=m.num_layers,
        )
    world = c.num_nodes * c.gpus_per_node
    if 0 < c.num_nodes <= MAX_COUNT and 0 < c.gpus_per_node <= MAX_COUNT and world > MAX_WORLD:
        yield diag(
            R.VALUE_RANGE,
            f"the cluster must have at most {MAX_WORLD:,} GPUs, got "
            f"({world} = {c.num_nodes} x {c.gpus_per_node})",
            "cluster.num_nodes",
            related=("cluster.gpus_per_node",),
            fix="set cluster.num_nodes and cluster.gpus_per_node to the real cluster",
            value=world,
        )
    for key in _FRACTION:
        v = spec_value(spec, key)
        if isinstance(v, (int, float)) and not 0 < v <= 1:
            yield diag(
                R.VALUE_RANGE,
                f"{key} must be in (0, 1], got ({v})",
                key,
                fix=f"set {key} to a fraction such as 0.5",
                value=v,
            )
    for key in _HALF_OPEN:
        v = spec_value(spec, key)
        if isinstance(v, (int, float)) and not 0 <= v < 1:
            yield diag(
                R.VALUE_RANGE,
                f"{key} must be in [0, 1), got ({v})",
                key,
                fix=f"set {key} to at least 0 and below 1 (e.g. 0.95 for adam_beta2, "
                "0.0 for dropout)",
                value=v,
            )
    for key in _UNIT:
        v = spec_value(spec, key)
        if isinstance(v, (int, float)) and not 0 <= v <= 1:
            yield diag(
                R.VALUE_RANGE,
                f"{key} must be in [0, 1], got ({v})",
                key,
                fix=f"set {key} between 0 and 1",
                value=v,
            )
    for key in _NON_NEGATIVE:
        v = spec_value(spec, key)
        if isinstance(v, (int, float)) and (v < 0 or v > MAX_COUNT):
            yield diag(
                R.VALUE_RANGE,
                f"{key} must not be negative, got ({v})",
                key,
                fix=f"set {key} to 0 or more",
                value=v,
            )
    yield from _band(spec)
    z = spec.parallel.zero_stage
    if z not in (0, 1, 2, 3):
        yield diag(
            R.VALUE_RANGE,
            f"parallel.zero_stage must be 0, 1, 2 or 3, got ({z})",
            "parallel.zero_stage",
            fix="set parallel.zero_stage to 0, 1, 2 or 3",
            value=z,
        )
    port = spec.launch.master_port
    if not 1 <= port <= 65535:
        yield diag(
            R.VALUE_RANGE,
            f"launch.master_port must be in 1-65535, got ({port})",
            "launch.master_port",
            fix="set launch.master_port to e.g. 29500",
            value=port,
        )
