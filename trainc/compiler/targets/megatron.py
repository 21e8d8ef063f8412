"""Megatron settings of a validated spec, built once: Megatron-Core keyword arguments and the
Megatron-LM ``pretrain_gpt.py`` flags derived from them.

:func:`megatron_core_kwargs` is the one place that decides every Megatron setting.
:func:`megatron_lm_flags` does not decide anything: it spells the same values as Megatron-LM
flags through :data:`CORE_FLAGS` (flag -> Megatron-Core group and key), plus the flags of the
training loop that have no Megatron-Core object (tokenizer, data, checkpoints). ``plan.json``
stores both under ``engines``; ``megatron_core.yaml``, ``megatron_args.txt`` and the worker read
them from there.

Names are those of megatron-core 0.16.1 (``initialize_model_parallel``, ``TransformerConfig``,
``GPTModel``, ``DistributedDataParallelConfig``, ``OptimizerConfig``,
``OptimizerParamScheduler``, the ``forward_backward_func`` schedules) and of Megatron-LM
``core_v0.19.0`` (``megatron/training/arguments.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainc.compiler.decide import grad_reduce_in_fp32, interleaved, zero_layout
from trainc.compiler.derive import Derived, moe_layer_pattern
from trainc.compiler.targets.settings import layers_per_virtual_stage
from trainc.schemas import (
    Activation,
    Device,
    Fp4Format,
    Fp8Format,
    MoeDispatcher,
    Normalization,
    Optimizer,
    PositionEmbedding,
    Precision,
    Recompute,
    StateDtype,
    TrainSpec,
)

#: trainc -> Megatron spellings.
NORMALIZATION = {Normalization.rmsnorm: "RMSNorm", Normalization.layernorm: "LayerNorm"}
POSITION_EMBEDDING = {PositionEmbedding.rope: "rope", PositionEmbedding.learned: "learned_absolute"}
TORCH_DTYPE = {Precision.bf16: "bfloat16", Precision.fp16: "float16", Precision.fp32: "float32"}
#: (gated_linear_unit, activation_func as the dotted path the worker imports) per activation.
ACTIVATION = {
    Activation.swiglu: (True, "torch.nn.functional.silu"),
    Activation.gelu: (False, "torch.nn.functional.gelu"),
}
#: Megatron-LM's default rank order (``initialize_model_parallel(order=...)``).
RANK_ORDER = "tp-cp-ep-dp-pp"


def megatron_core_kwargs(spec: TrainSpec, d: Derived) -> dict[str, dict[str, Any]]:
    """Every Megatron-Core setting of a normalized, validated spec, grouped by the callable or
    dataclass that takes it (keyword names of megatron-core 0.16.1).

    Dtypes are strings (``getattr(torch, name)``); the activation callable is a dotted path under
    ``callables.TransformerConfig``. ``None`` means "leave the library default" only where the
    library's default is ``None`` too (e.g. ``virtual_pipeline_model_parallel_size``).

    Raises AssertionError if ``d`` does not describe a valid layout (the validators guarantee it).
    """
    assert d.dp is not None and d.num_microbatches is not None
    return {
        "initialize_model_parallel": model_parallel_kwargs(spec, d),
        "TransformerConfig": transformer_config_kwargs(spec, d),
        "GPTModel": gpt_model_kwargs(spec, d),
        "DistributedDataParallelConfig": ddp_config_kwargs(spec),
        "OptimizerConfig": optimizer_config_kwargs(spec),
        "OptimizerParamScheduler": scheduler_kwargs(spec),
        "forward_backward_func": schedule_kwargs(spec, d),
        "callables": {
            "TransformerConfig": {"activation_func": ACTIVATION[spec.model.activation][1]}
        },
    }


def model_parallel_kwargs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``initialize_model_parallel``: the parallel degrees and Megatron-Core's rank order."""
    p = spec.parallel
    vpp = p.vpp if p.vpp > 1 else None
    return {
        "tensor_model_parallel_size": p.tp,
        "pipeline_model_parallel_size": p.pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": p.cp,
        "expert_model_parallel_size": p.ep,
        "expert_tensor_parallel_size": d.etp,
        "order": RANK_ORDER,
    }


def transformer_config_kwargs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``TransformerConfig``: shape, parallelism, schedule, precision, recompute, overlaps, MLA,
    sliding-window attention (``window_size = [w, 0]``, a list as JSON stores
    it), experts and Megatron-FSDP's gradient-accumulation fusion (off)."""
    m, p, t, lc = spec.model, spec.parallel, spec.training, spec.launch
    dtype = TORCH_DTYPE[t.precision]
    glu, _ = ACTIVATION[m.activation]
    full = t.recompute is Recompute.full
    vpp = p.vpp if p.vpp > 1 else None
    cpu = lc.device is Device.cpu
    inter = interleaved(spec)
    tc: dict[str, Any] = {
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups,
        "ffn_hidden_size": m.ffn_hidden_size,
        "kv_channels": m.kv_channels,
        "gated_linear_unit": glu,
        "normalization": NORMALIZATION[m.normalization],
        "layernorm_epsilon": float(m.norm_epsilon),
        "add_bias_linear": bool(m.add_bias_linear),
        "add_qkv_bias": m.add_qkv_bias,
        "init_method_std": float(m.init_method_std),
        "hidden_dropout": float(m.hidden_dropout),
        "attention_dropout": float(m.attention_dropout),
        "tensor_model_parallel_size": p.tp,
        "pipeline_model_parallel_size": p.pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": p.cp,
        "cp_comm_type": p.cp_comm_type.value,
        "expert_model_parallel_size": p.ep,
        "expert_tensor_parallel_size": d.etp,
        "sequence_parallel": bool(p.sequence_parallel),
        "num_layers_in_first_pipeline_stage": p.pipeline_first_stage_layers,
        "num_layers_in_last_pipeline_stage": p.pipeline_last_stage_layers,
        "account_for_embedding_in_pipeline_split": p.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": p.account_for_loss_in_pipeline_split,
        # Megatron-LM's CLI default: overlapped, unbatched p2p with interleaving. PP=2 + VPP with
        # batched p2p silently corrupts training (docs/divergences.md).
        "overlap_p2p_comm": inter,
        "batch_p2p_comm": not inter,
        "variable_seq_lengths": False,
        "params_dtype": dtype,
        "pipeline_dtype": dtype,
        "bf16": t.precision is Precision.bf16,
        "fp16": t.precision is Precision.fp16,
        "recompute_granularity": t.recompute.value if t.recompute is not Recompute.none else None,
        "recompute_method": t.recompute_method.value if full and t.recompute_method else None,
        "recompute_num_layers": t.recompute_num_layers if full else None,
        # Megatron-Core's local layers on CPU (Transformer Engine needs CUDA).
        "transformer_impl": "local" if cpu else "transformer_engine",
        "use_cpu_initialization": cpu,
    }
    tc.update(low_precision_kwargs(spec))
    tc.update(comm_overlap_kwargs(spec))
    tc.update(mla_kwargs(spec))
    if m.qk_layernorm:  # query / key head norms (Qwen3); MLA sets it itself
        tc["qk_layernorm"] = True
    if m.window_size is not None:  # sliding window: w keys left of each query, none right
        tc["window_size"] = [m.window_size, 0]
        if m.window_attn_skip_freq is not None:  # layers N, 2N, ... (1-based) attend fully
            tc["window_attn_skip_freq"] = m.window_attn_skip_freq
    if m.num_experts is not None:
        tc.update(moe_kwargs(spec))
        tc.update(moe_dispatch_kwargs(spec))
        tc.update(moe_router_kwargs(spec))
    if m.mtp_num_layers:
        tc["mtp_num_layers"] = m.mtp_num_layers
    if zero_layout(spec).megatron_fsdp:
        # the Megatron-FSDP user guide's required --no-gradient-accumulation-fusion
        tc["gradient_accumulation_fusion"] = False
    return tc


def moe_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """``TransformerConfig``'s expert keys of an MoE model (dispatcher and router extras:
    :func:`moe_dispatch_kwargs`, :func:`moe_router_kwargs`)."""
    m = spec.model
    cpu = spec.launch.device is Device.cpu
    return {
        "num_moe_experts": m.num_experts,
        "moe_router_topk": m.moe_router_topk,
        "moe_ffn_hidden_size": m.moe_ffn_hidden_size,
        "moe_layer_freq": moe_layer_freq(spec),
        "moe_token_dispatcher_type": m.moe_token_dispatcher_type.value,
        "moe_router_pre_softmax": bool(m.moe_router_pre_softmax),
        "moe_shared_expert_intermediate_size": m.moe_shared_expert_intermediate_size,
        "moe_router_load_balancing_type": m.moe_router_load_balancing_type.value,
        "moe_aux_loss_coeff": float(m.moe_aux_loss_coeff),
        "moe_z_loss_coeff": _float(m.moe_z_loss_coeff),
        "moe_router_score_function": m.moe_router_score_function.value,
        "moe_router_topk_scaling_factor": _float(m.moe_router_topk_scaling_factor),
        "moe_expert_capacity_factor": _float(m.moe_expert_capacity_factor),
        # Transformer Engine's grouped GEMM over the local experts (TEGroupedMLP), which the
        # kernel model times; the local layers on CPU have none (SequentialMLP)
        "moe_grouped_gemm": not cpu,
    }


def gpt_model_kwargs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``GPTModel``: padded vocabulary, positions (RoPE and its scaling), tied embeddings."""
    m = spec.model
    return {
        "vocab_size": d.padded_vocab_size,
        "max_sequence_length": m.max_position_embeddings,
        "position_embedding_type": POSITION_EMBEDDING[m.position_embedding],
        "rotary_base": m.rotary_base,
        "rotary_percent": float(m.rotary_percent),
        "rope_scaling": m.rope_scaling_factor is not None,
        "rope_scaling_factor": float(m.rope_scaling_factor or 8.0),
        "share_embeddings_and_output_weights": not m.untie_embeddings_and_output_weights,
    }


def ddp_config_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """``DistributedDataParallelConfig``: the decided ZeRO layout
    (:func:`trainc.compiler.decide.zero_layout`), fp32 gradient reduction, the overlaps."""
    t = spec.training
    zero = zero_layout(spec)
    distopt, mfsdp = zero.distributed_optimizer, zero.megatron_fsdp
    return {
        "use_distributed_optimizer": distopt,
        **(
            {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
            if mfsdp
            else {}
        ),
        "grad_reduce_in_fp32": grad_reduce_in_fp32(spec),
        "overlap_grad_reduce": bool(t.overlap_grad_reduce),
        "overlap_param_gather": bool(t.overlap_param_gather),
        **({"fp8_param_gather": True} if t.fp8_param_gather else {}),
    }


def optimizer_config_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """``OptimizerConfig``: the optimizer, its hyperparameters, dtypes and the distributed
    optimizer switch."""
    t = spec.training
    dtype = TORCH_DTYPE[t.precision]
    distopt = zero_layout(spec).distributed_optimizer
    return {
        "optimizer": t.optimizer.value,
        "lr": float(t.lr),
        "min_lr": float(t.min_lr),
        "weight_decay": float(t.weight_decay),
        "clip_grad": float(t.grad_clip),
        "adam_beta1": float(t.adam_beta1),
        "adam_beta2": float(t.adam_beta2),
        "adam_eps": float(t.adam_eps),
        "sgd_momentum": float(t.sgd_momentum),
        "bf16": t.precision is Precision.bf16,
        "fp16": t.precision is Precision.fp16,
        "params_dtype": dtype,
        "use_distributed_optimizer": distopt,
        **optimizer_state_kwargs(spec),
    }


def scheduler_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """``OptimizerParamScheduler``: learning-rate warm-up and decay, constant weight decay."""
    t = spec.training
    return {
        "init_lr": 0.0,
        "max_lr": float(t.lr),
        "min_lr": float(t.min_lr),
        "lr_warmup_steps": t.lr_warmup_iters,
        "lr_decay_steps": t.lr_decay_iters,
        "lr_decay_style": t.lr_decay_style.value,
        "start_wd": float(t.weight_decay),
        "end_wd": float(t.weight_decay),
        "wd_incr_steps": t.train_iters,
        "wd_incr_style": "constant",
        "wsd_decay_steps": t.lr_wsd_decay_iters,
        "lr_wsd_decay_style": t.lr_wsd_decay_style.value,
    }


def schedule_kwargs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``forward_backward_func``: micro-batches per step, sequence length, micro-batch size."""
    m, t = spec.model, spec.training
    return {
        "num_microbatches": d.num_microbatches,
        "seq_length": m.seq_length,
        "micro_batch_size": t.micro_batch_size,
        "decoder_seq_length": m.seq_length,
    }


#: StateDtype -> the torch dtype name OptimizerConfig takes (Megatron-LM ``arguments.py`` maps
#: ``fp8`` to ``torch.uint8``, the storage of Transformer Engine's FP8 moments).
STATE_DTYPE = {
    StateDtype.fp32: "float32",
    StateDtype.bf16: "bfloat16",
    StateDtype.fp16: "float16",
    StateDtype.fp8: "uint8",
}


def mla_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """Multi-head latent attention's ``MLATransformerConfig`` fields (megatron-core 0.16.1), or
    nothing. The rotary embedding is plain RoPE (``rope_type: rope``, MLATransformerConfig's
    default is YaRN) over ``qk_pos_emb_head_dim`` channels with the model's base and percent, and
    without the fused RoPE kernel, which MLATransformerConfig allows with YaRN only.
    ``qk_layernorm`` is on: in MLA it builds the RMSNorms of the query and KV latents
    (DeepSeek-V2/V3's ``q_a_layernorm`` / ``kv_a_layernorm``), which megatron-core 0.16.1's
    ``get_gpt_layer_local_spec`` / ``get_gpt_layer_with_transformer_engine_spec`` leave out (an
    ``IdentityOp``) unless ``qk_layernorm`` is set, as Megatron-LM's DeepSeek-V3 recipes do."""
    m = spec.model
    if not m.multi_latent_attention:
        return {}
    return {
        "multi_latent_attention": True,
        "q_lora_rank": m.q_lora_rank,
        "kv_lora_rank": m.kv_lora_rank,
        "qk_head_dim": m.qk_head_dim,
        "qk_pos_emb_head_dim": m.qk_pos_emb_head_dim,
        "v_head_dim": m.v_head_dim,
        "rope_type": "rope",
        "rotary_base": m.rotary_base,
        "rotary_percent": float(m.rotary_percent),
        "apply_rope_fusion": False,
        "qk_layernorm": True,
    }


def low_precision_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """TransformerConfig's FP8 / FP4 keys of megatron-core 0.16.1 (``fp8``, ``fp8_recipe``,
    ``fp8_param``, ``first_last_layers_bf16``, ``fp4``, ``fp4_recipe``), only those the spec
    turns on: an all-BF16 spec adds none (the library defaults, ``fp8=None``, apply).
    ``fp8_param`` follows ``fp8_param_gather`` as in Megatron-LM's
    ``core_transformer_config_from_args``."""
    t = spec.training
    out: dict[str, Any] = {}
    if t.fp8_format is not Fp8Format.none:
        out.update({"fp8": t.fp8_format.value, "fp8_recipe": t.fp8_recipe.value})
        if t.fp8_param_gather:
            out["fp8_param"] = True
    if t.fp4_format is not Fp4Format.none:
        out.update({"fp4": t.fp4_format.value, "fp4_recipe": t.fp4_recipe.value})
    if out and t.first_last_layers_bf16:
        out["first_last_layers_bf16"] = True
    return out


def comm_overlap_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """ModelParallelConfig's overlap switches of megatron-core 0.16.1 that the spec turns on:
    ``tp_comm_overlap`` (TP all-gather / reduce-scatter inside Transformer Engine's GEMMs) and
    ``overlap_moe_expert_parallel_comm`` (the 1F1B expert-parallel A2A overlap); none when off
    (the library defaults, both false, apply)."""
    t = spec.training
    out: dict[str, Any] = {}
    if t.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    if t.overlap_moe_expert_parallel_comm:
        out["overlap_moe_expert_parallel_comm"] = True
    return out


def moe_dispatch_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """TransformerConfig's MoE dispatch keys of megatron-core 0.16.1 that trainc sets only when
    the spec moves them off the library default: ``moe_flex_dispatcher_backend`` (with the
    flex dispatcher), ``moe_pad_expert_input_to_capacity`` and
    ``moe_router_padding_for_quantization``."""
    m = spec.model
    out: dict[str, Any] = {}
    if m.moe_token_dispatcher_type is MoeDispatcher.flex:
        out["moe_flex_dispatcher_backend"] = m.moe_flex_dispatcher_backend.value
    if m.moe_pad_expert_input_to_capacity:
        out["moe_pad_expert_input_to_capacity"] = True
    if m.moe_router_padding_for_quantization:
        out["moe_router_padding_for_quantization"] = True
    return out


def moe_layer_freq(spec: TrainSpec) -> int | list[int]:
    """TransformerConfig's ``moe_layer_freq`` (megatron-core 0.16.1: ``Union[int, List[int]]``):
    the spec's int when no layer is dense by ``moe_first_k_dense_layers``, else the per-layer
    list of :func:`trainc.compiler.derive.moe_layer_pattern` (1 = MoE), which Megatron-Core's
    ``get_gpt_decoder_block_spec`` reads as the pattern itself."""
    if not spec.model.moe_first_k_dense_layers:
        return spec.model.moe_layer_freq
    return list(moe_layer_pattern(spec))


def moe_router_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """TransformerConfig's router keys of megatron-core 0.16.1 that the spec sets:
    group-limited routing (``moe_router_num_groups``, ``moe_router_group_topk``) and the
    auxiliary-loss-free expert bias (``moe_router_enable_expert_bias``, with the library's
    ``moe_router_bias_update_rate`` 1e-3, DeepSeek-V3's gamma 0.001, arXiv:2412.19437 §4.2);
    none when unset (the library defaults: no groups, no bias)."""
    m = spec.model
    out: dict[str, Any] = {}
    if m.moe_router_num_groups is not None:
        out["moe_router_num_groups"] = m.moe_router_num_groups
    if m.moe_router_group_topk is not None:
        out["moe_router_group_topk"] = m.moe_router_group_topk
    if m.moe_router_enable_expert_bias:
        out["moe_router_enable_expert_bias"] = True
    return out


def layer_freq_flag(value: int | list[int] | None) -> int | str | None:
    """Megatron-LM's spelling of ``--moe-layer-freq``: the int, or a list as the run-length
    expression its ``moe_freq_type`` evaluates (``([0]*3+[1]*58)``, the form of Megatron-LM's
    DeepSeek-V3 examples; megatron/training/arguments.py core_r0.16.0)."""
    if not isinstance(value, list):
        return value
    runs: list[list[int]] = []
    for v in value:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return "(" + "+".join(f"[{v}]*{n}" for v, n in runs) + ")"


def optimizer_state_kwargs(spec: TrainSpec) -> dict[str, Any]:
    """OptimizerConfig's precision-aware keys (megatron-core 0.16.1): when any optimizer buffer
    is not fp32, ``use_precision_aware_optimizer`` and the four dtypes (torch dtype names);
    nothing for an all-fp32 optimizer (the library defaults)."""
    t = spec.training
    dtypes = {
        "main_grads_dtype": t.main_grads_dtype,
        "main_params_dtype": t.main_params_dtype,
        "exp_avg_dtype": t.exp_avg_dtype,
        "exp_avg_sq_dtype": t.exp_avg_sq_dtype,
    }
    if all(v is StateDtype.fp32 for v in dtypes.values()):
        return {}
    return {"use_precision_aware_optimizer": True, **{k: STATE_DTYPE[v] for k, v in dtypes.items()}}


def _float(x: float | None) -> float | None:
    return None if x is None else float(x)


# --- Megatron-LM flags -----------------------------------------------------------------------

#: One ``megatron_args.txt`` entry: (flag, value, the Megatron-Core (group, key) the value comes
#: from, or None for a flag of Megatron-LM's training loop only). ``True`` is a store_true flag;
#: ``None``/``False`` leave the flag out (Megatron-LM's default, equal to the Core value, applies).
FlagEntry = tuple[str, Any, tuple[str, str] | None]


def megatron_lm_entries(
    spec: TrainSpec, d: Derived, core: dict[str, dict[str, Any]]
) -> list[FlagEntry]:
    """The ``pretrain_gpt.py`` flags of Megatron-LM core_v0.19.0, in file order, with the
    Megatron-Core setting each one carries: the values are read from ``core``
    (:func:`megatron_core_kwargs`), never decided here.

    Follows ``megatron/training/arguments.py::validate_args``: ``--num-query-groups`` only with
    ``--group-query-attention``; VPP through ``--num-layers-per-virtual-pipeline-stage`` (even
    split) or ``--num-virtual-stages-per-pipeline-rank`` (uneven or account_for split); never
    ``--no-overlap-p2p-communication`` (its default keeps overlapped, unbatched p2p, the only safe
    mode for PP=2 with interleaving). ``--vocab-size`` is the model's vocabulary: since
    core_v0.18.0 the NullTokenizer has exactly that many tokens (it no longer appends one), and
    Megatron pads it to ``derived.padded_vocab_size``. ``--split`` is always written with a data
    path (Megatron-LM's own default ``969,30,1`` holds out 3 %). A ``data.paths`` blend is one
    ``--data-path`` entry with several values (``w1 p1 w2 p2``, the flattened pairs Megatron-Core
    ``get_blend_from_list`` reads). ``--ckpt-format`` is
    ``derived.checkpoint_format`` when that is a Megatron-LM format (not for the trainc worker's
    own files); ``--load`` is resume.load_dir, else launch.save_dir.
    """
    c = _core_reader(core)
    return [
        *_model_flags(spec, core),
        *_data_flags(spec),
        *_parallel_flags(spec, d, core),
        *(_moe_flags(core) if core["TransformerConfig"].get("num_moe_experts") is not None else []),
        c("--mtp-num-layers", "TransformerConfig", "mtp_num_layers"),
        *_batch_precision_flags(spec, core),
        *_optimizer_flags(core),
        *_run_flags(spec, d, core),
    ]


def _core_reader(core: dict[str, dict[str, Any]]) -> Callable[[str, str, str], FlagEntry]:
    """``c(flag, group, key)``: the entry whose value is Megatron-Core's ``core[group][key]``."""

    def c(flag: str, group: str, key: str) -> FlagEntry:
        return (flag, core[group].get(key), (group, key))

    return c


def _model_flags(spec: TrainSpec, core: dict[str, dict[str, Any]]) -> list[FlagEntry]:
    """The model's shape, attention, positions, norms, init, dropout and vocabulary."""
    m = spec.model
    tc, gpt = core["TransformerConfig"], core["GPTModel"]
    c = _core_reader(core)
    gqa = tc["num_query_groups"] < tc["num_attention_heads"]
    rope = m.position_embedding is PositionEmbedding.rope
    return [
        c("--num-layers", "TransformerConfig", "num_layers"),
        c("--hidden-size", "TransformerConfig", "hidden_size"),
        c("--num-attention-heads", "TransformerConfig", "num_attention_heads"),
        ("--group-query-attention", gqa, None),
        (
            "--num-query-groups",
            tc["num_query_groups"] if gqa else None,
            ("TransformerConfig", "num_query_groups"),
        ),
        c("--ffn-hidden-size", "TransformerConfig", "ffn_hidden_size"),
        c("--kv-channels", "TransformerConfig", "kv_channels"),
        c("--multi-latent-attention", "TransformerConfig", "multi_latent_attention"),
        c("--q-lora-rank", "TransformerConfig", "q_lora_rank"),
        c("--kv-lora-rank", "TransformerConfig", "kv_lora_rank"),
        c("--qk-head-dim", "TransformerConfig", "qk_head_dim"),
        c("--qk-pos-emb-head-dim", "TransformerConfig", "qk_pos_emb_head_dim"),
        c("--v-head-dim", "TransformerConfig", "v_head_dim"),
        c("--qk-layernorm", "TransformerConfig", "qk_layernorm"),
        (
            "--window-size",
            ",".join(str(x) for x in tc["window_size"]) if tc.get("window_size") else None,
            ("TransformerConfig", "window_size"),
        ),
        c("--window-attn-skip-freq", "TransformerConfig", "window_attn_skip_freq"),
        c("--rope-type", "TransformerConfig", "rope_type"),
        (
            "--no-rope-fusion",
            tc.get("apply_rope_fusion") is False,
            ("TransformerConfig", "apply_rope_fusion"),
        ),
        ("--seq-length", m.seq_length, ("forward_backward_func", "seq_length")),
        c("--max-position-embeddings", "GPTModel", "max_sequence_length"),
        c("--swiglu", "TransformerConfig", "gated_linear_unit"),
        c("--normalization", "TransformerConfig", "normalization"),
        c("--norm-epsilon", "TransformerConfig", "layernorm_epsilon"),
        c("--position-embedding-type", "GPTModel", "position_embedding_type"),
        ("--rotary-base", gpt["rotary_base"] if rope else None, ("GPTModel", "rotary_base")),
        (
            "--rotary-percent",
            gpt["rotary_percent"] if rope else None,
            ("GPTModel", "rotary_percent"),
        ),
        c("--use-rope-scaling", "GPTModel", "rope_scaling"),
        (
            "--rope-scaling-factor",
            gpt["rope_scaling_factor"] if gpt["rope_scaling"] else None,
            ("GPTModel", "rope_scaling_factor"),
        ),
        (
            "--untie-embeddings-and-output-weights",
            not gpt["share_embeddings_and_output_weights"],
            None,
        ),
        ("--disable-bias-linear", not tc["add_bias_linear"], None),
        c("--add-qkv-bias", "TransformerConfig", "add_qkv_bias"),
        c("--init-method-std", "TransformerConfig", "init_method_std"),
        c("--hidden-dropout", "TransformerConfig", "hidden_dropout"),
        c("--attention-dropout", "TransformerConfig", "attention_dropout"),
        ("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, None),
        ("--tokenizer-type", "NullTokenizer", None),
        ("--vocab-size", m.vocab_size, None),
    ]


def _data_flags(spec: TrainSpec) -> list[FlagEntry]:
    """Mock data or the data path / blend, its split and the document masks."""
    lc, data = spec.launch, spec.data
    return [
        ("--mock-data", lc.data_path is None and data.paths is None, None),
        (
            "--data-path",
            lc.data_path
            if data.paths is None
            else tuple(x for entry in data.paths for x in entry.split()),
            None,
        ),
        (
            "--split",
            lc.data_split if lc.data_path is not None or data.paths is not None else None,
            None,
        ),
        ("--reset-position-ids", data.reset_position_ids, None),
        ("--reset-attention-mask", data.reset_attention_mask, None),
        ("--eod-mask-loss", data.eod_mask_loss, None),
    ]


def _parallel_flags(
    spec: TrainSpec, d: Derived, core: dict[str, dict[str, Any]]
) -> list[FlagEntry]:
    """TP, PP (virtual stages, uneven splits), CP, EP, SP, overlaps and the DDP layout."""
    p = spec.parallel
    tc, ddp = core["TransformerConfig"], core["DistributedDataParallelConfig"]
    c = _core_reader(core)
    lpvs = layers_per_virtual_stage(spec, d)
    return [
        c("--tensor-model-parallel-size", "TransformerConfig", "tensor_model_parallel_size"),
        c("--pipeline-model-parallel-size", "TransformerConfig", "pipeline_model_parallel_size"),
        ("--num-layers-per-virtual-pipeline-stage", lpvs, None),
        (
            "--num-virtual-stages-per-pipeline-rank",
            p.vpp if p.vpp > 1 and lpvs is None else None,
            ("TransformerConfig", "virtual_pipeline_model_parallel_size"),
        ),
        c(
            "--decoder-first-pipeline-num-layers",
            "TransformerConfig",
            "num_layers_in_first_pipeline_stage",
        ),
        c(
            "--decoder-last-pipeline-num-layers",
            "TransformerConfig",
            "num_layers_in_last_pipeline_stage",
        ),
        c(
            "--account-for-embedding-in-pipeline-split",
            "TransformerConfig",
            "account_for_embedding_in_pipeline_split",
        ),
        c(
            "--account-for-loss-in-pipeline-split",
            "TransformerConfig",
            "account_for_loss_in_pipeline_split",
        ),
        c("--context-parallel-size", "TransformerConfig", "context_parallel_size"),
        (
            "--cp-comm-type",
            tc["cp_comm_type"] if p.cp > 1 else None,
            ("TransformerConfig", "cp_comm_type"),
        ),
        c("--expert-model-parallel-size", "TransformerConfig", "expert_model_parallel_size"),
        c("--expert-tensor-parallel-size", "TransformerConfig", "expert_tensor_parallel_size"),
        c("--sequence-parallel", "TransformerConfig", "sequence_parallel"),
        c("--tp-comm-overlap", "TransformerConfig", "tp_comm_overlap"),
        c(
            "--overlap-moe-expert-parallel-comm",
            "TransformerConfig",
            "overlap_moe_expert_parallel_comm",
        ),
        c(
            "--use-distributed-optimizer",
            "DistributedDataParallelConfig",
            "use_distributed_optimizer",
        ),
        c("--use-megatron-fsdp", "DistributedDataParallelConfig", "use_megatron_fsdp"),
        c(
            "--data-parallel-sharding-strategy",
            "DistributedDataParallelConfig",
            "data_parallel_sharding_strategy",
        ),
        (
            "--no-gradient-accumulation-fusion",
            tc.get("gradient_accumulation_fusion") is False,
            ("TransformerConfig", "gradient_accumulation_fusion"),
        ),
        (
            "--overlap-grad-reduce",
            ddp["overlap_grad_reduce"],
            ("DistributedDataParallelConfig", "overlap_grad_reduce"),
        ),
        (
            "--overlap-param-gather",
            ddp["overlap_param_gather"],
            ("DistributedDataParallelConfig", "overlap_param_gather"),
        ),
    ]


def _moe_flags(core: dict[str, dict[str, Any]]) -> list[FlagEntry]:
    """The experts, their router and dispatcher (an MoE model only)."""
    tc = core["TransformerConfig"]
    c = _core_reader(core)
    return [
        c("--num-experts", "TransformerConfig", "num_moe_experts"),
        c("--moe-router-topk", "TransformerConfig", "moe_router_topk"),
        c("--moe-ffn-hidden-size", "TransformerConfig", "moe_ffn_hidden_size"),
        (
            "--moe-layer-freq",
            layer_freq_flag(tc.get("moe_layer_freq")),
            ("TransformerConfig", "moe_layer_freq"),
        ),
        c("--moe-token-dispatcher-type", "TransformerConfig", "moe_token_dispatcher_type"),
        c("--moe-router-pre-softmax", "TransformerConfig", "moe_router_pre_softmax"),
        c(
            "--moe-shared-expert-intermediate-size",
            "TransformerConfig",
            "moe_shared_expert_intermediate_size",
        ),
        c(
            "--moe-router-load-balancing-type",
            "TransformerConfig",
            "moe_router_load_balancing_type",
        ),
        c("--moe-aux-loss-coeff", "TransformerConfig", "moe_aux_loss_coeff"),
        c("--moe-z-loss-coeff", "TransformerConfig", "moe_z_loss_coeff"),
        c("--moe-router-score-function", "TransformerConfig", "moe_router_score_function"),
        c(
            "--moe-router-topk-scaling-factor",
            "TransformerConfig",
            "moe_router_topk_scaling_factor",
        ),
        c("--moe-expert-capacity-factor", "TransformerConfig", "moe_expert_capacity_factor"),
        c("--moe-grouped-gemm", "TransformerConfig", "moe_grouped_gemm"),
        c("--moe-flex-dispatcher-backend", "TransformerConfig", "moe_flex_dispatcher_backend"),
        c(
            "--moe-pad-expert-input-to-capacity",
            "TransformerConfig",
            "moe_pad_expert_input_to_capacity",
        ),
        c(
            "--moe-router-padding-for-quantization",
            "TransformerConfig",
            "moe_router_padding_for_quantization",
        ),
        c("--moe-router-num-groups", "TransformerConfig", "moe_router_num_groups"),
        c("--moe-router-group-topk", "TransformerConfig", "moe_router_group_topk"),
        c(
            "--moe-router-enable-expert-bias",
            "TransformerConfig",
            "moe_router_enable_expert_bias",
        ),
    ]


def _batch_precision_flags(spec: TrainSpec, core: dict[str, dict[str, Any]]) -> list[FlagEntry]:
    """Batch sizes, BF16 / FP16 / FP8 / FP4, optimizer state dtypes and recompute."""
    t = spec.training
    opt, ddp = core["OptimizerConfig"], core["DistributedDataParallelConfig"]
    c = _core_reader(core)
    return [
        c("--micro-batch-size", "forward_backward_func", "micro_batch_size"),
        ("--global-batch-size", t.global_batch_size, None),
        c("--bf16", "TransformerConfig", "bf16"),
        c("--fp16", "TransformerConfig", "fp16"),
        c("--fp8-format", "TransformerConfig", "fp8"),
        c("--fp8-recipe", "TransformerConfig", "fp8_recipe"),
        (
            "--fp8-param-gather",
            ddp.get("fp8_param_gather"),
            ("DistributedDataParallelConfig", "fp8_param_gather"),
        ),
        c("--fp4-format", "TransformerConfig", "fp4"),
        c("--fp4-recipe", "TransformerConfig", "fp4_recipe"),
        c("--first-last-layers-bf16", "TransformerConfig", "first_last_layers_bf16"),
        c("--use-precision-aware-optimizer", "OptimizerConfig", "use_precision_aware_optimizer"),
        *[
            (f"--{k.replace('_', '-')}", _state_flag(opt.get(k)), ("OptimizerConfig", k))
            for k in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        ],
        c("--recompute-granularity", "TransformerConfig", "recompute_granularity"),
        c("--recompute-method", "TransformerConfig", "recompute_method"),
        c("--recompute-num-layers", "TransformerConfig", "recompute_num_layers"),
    ]


def _optimizer_flags(core: dict[str, dict[str, Any]]) -> list[FlagEntry]:
    """The optimizer, its learning-rate schedule and hyperparameters, gradient clipping."""
    opt, sched = core["OptimizerConfig"], core["OptimizerParamScheduler"]
    c = _core_reader(core)
    adam = opt["optimizer"] == Optimizer.adam.value
    wsd = sched["lr_decay_style"] == "WSD"
    return [
        c("--optimizer", "OptimizerConfig", "optimizer"),
        c("--lr", "OptimizerConfig", "lr"),
        c("--min-lr", "OptimizerConfig", "min_lr"),
        c("--lr-decay-style", "OptimizerParamScheduler", "lr_decay_style"),
        c("--lr-warmup-init", "OptimizerParamScheduler", "init_lr"),
        c("--lr-warmup-iters", "OptimizerParamScheduler", "lr_warmup_steps"),
        c("--lr-decay-iters", "OptimizerParamScheduler", "lr_decay_steps"),
        (
            "--lr-wsd-decay-iters",
            sched["wsd_decay_steps"] if wsd else None,
            ("OptimizerParamScheduler", "wsd_decay_steps"),
        ),
        (
            "--lr-wsd-decay-style",
            sched["lr_wsd_decay_style"] if wsd else None,
            ("OptimizerParamScheduler", "lr_wsd_decay_style"),
        ),
        c("--weight-decay", "OptimizerConfig", "weight_decay"),
        ("--adam-beta1", opt["adam_beta1"] if adam else None, ("OptimizerConfig", "adam_beta1")),
        ("--adam-beta2", opt["adam_beta2"] if adam else None, ("OptimizerConfig", "adam_beta2")),
        ("--adam-eps", opt["adam_eps"] if adam else None, ("OptimizerConfig", "adam_eps")),
        (
            "--sgd-momentum",
            None if adam else opt["sgd_momentum"],
            ("OptimizerConfig", "sgd_momentum"),
        ),
        c("--clip-grad", "OptimizerConfig", "clip_grad"),
    ]


def _run_flags(spec: TrainSpec, d: Derived, core: dict[str, dict[str, Any]]) -> list[FlagEntry]:
    """Iterations, seed, checkpoints, logging, backend and the transformer implementation."""
    t, lc = spec.training, spec.launch
    c = _core_reader(core)
    return [
        ("--train-iters", t.train_iters, None),
        ("--seed", t.seed, None),
        ("--save", lc.save_dir, None),
        ("--load", spec.resume.load_dir or lc.save_dir, None),
        (
            "--ckpt-format",
            d.checkpoint_format
            if d.checkpoint_format in ("torch_dist", "torch", "fsdp_dtensor")
            else None,
            None,
        ),
        ("--finetune", spec.resume.finetune, None),
        ("--dist-ckpt-optim-fully-reshardable", spec.resume.optim_fully_reshardable, None),
        ("--save-interval", lc.save_interval, None),
        ("--log-interval", lc.log_interval, None),
        ("--distributed-backend", "gloo" if lc.device is Device.cpu else "nccl", None),
        c("--transformer-impl", "TransformerConfig", "transformer_impl"),
        c("--use-cpu-initialization", "TransformerConfig", "use_cpu_initialization"),
    ]


def _state_flag(torch_name: str | None) -> str | None:
    """Megatron-LM's spelling (``--exp-avg-dtype bf16``) of an OptimizerConfig dtype name."""
    if torch_name is None:
        return None
    return next(k.value for k, v in STATE_DTYPE.items() if v == torch_name)


def megatron_lm_flags(entries: list[FlagEntry]) -> list[list[str]]:
    """The entries that are written, as ``[flag]`` (store_true), ``[flag, value]`` or
    ``[flag, value, ...]`` (a flag with several values: a data blend)."""
    out: list[list[str]] = []
    for flag, value, _ in entries:
        if value is None or value is False:
            continue
        if isinstance(value, tuple):
            out.append([flag, *(_fmt(v) for v in value)])
        else:
            out.append([flag] if value is True else [flag, _fmt(value)])
    return out


def _fmt(value: Any) -> str:
    """A flag value as argparse reads it back (``repr`` of floats is exact and deterministic)."""
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    assert "\n" not in text and "\r" not in text, f"a flag value with a line break: {text!r}"
    return text
