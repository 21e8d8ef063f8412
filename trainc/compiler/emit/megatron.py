"""Megatron-LM ``pretrain_gpt.py`` flags (``megatron_args.txt``), built from ``plan.json`` only,
and the trainc -> Megatron spelling tables shared with :mod:`megatron_core`.

Library spellings live here and in :mod:`trainc.compiler.emit.megatron_core` only:
:data:`ARG_NAMES` maps plan keys to the ``pretrain_gpt.py`` flags of Megatron-LM ``core_v0.19.0``
(``megatron/training/arguments.py``).
"""

from __future__ import annotations

from typing import Any


from trainc.compiler.emit.render import header
from trainc.errors import InternalError

#: plan key -> Megatron-LM ``pretrain_gpt.py`` flag (store_true flags map bools).
ARG_NAMES: dict[str, str] = {
    "num_layers": "--num-layers",
    "hidden_size": "--hidden-size",
    "num_attention_heads": "--num-attention-heads",
    "group_query_attention": "--group-query-attention",
    "num_query_groups": "--num-query-groups",
    "ffn_hidden_size": "--ffn-hidden-size",
    "kv_channels": "--kv-channels",
    "seq_length": "--seq-length",
    "max_position_embeddings": "--max-position-embeddings",
    "swiglu": "--swiglu",
    "normalization": "--normalization",
    "position_embedding": "--position-embedding-type",
    "rotary_base": "--rotary-base",
    "untie_embeddings_and_output_weights": "--untie-embeddings-and-output-weights",
    "disable_bias_linear": "--disable-bias-linear",
    "make_vocab_size_divisible_by": "--make-vocab-size-divisible-by",
    "tokenizer_type": "--tokenizer-type",
    "vocab_size": "--vocab-size",
    "mock_data": "--mock-data",
    "data_path": "--data-path",
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "layers_per_virtual_stage": "--num-layers-per-virtual-pipeline-stage",
    "vpp": "--num-virtual-stages-per-pipeline-rank",
    "pipeline_first_stage_layers": "--decoder-first-pipeline-num-layers",
    "pipeline_last_stage_layers": "--decoder-last-pipeline-num-layers",
    "account_for_embedding_in_pipeline_split": "--account-for-embedding-in-pipeline-split",
    "account_for_loss_in_pipeline_split": "--account-for-loss-in-pipeline-split",
    "cp": "--context-parallel-size",
    "cp_comm_type": "--cp-comm-type",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "sequence_parallel": "--sequence-parallel",
    "distributed_optimizer": "--use-distributed-optimizer",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "overlap_param_gather": "--overlap-param-gather",
    "num_experts": "--num-experts",
    "moe_router_topk": "--moe-router-topk",
    "moe_ffn_hidden_size": "--moe-ffn-hidden-size",
    "moe_layer_freq": "--moe-layer-freq",
    "moe_token_dispatcher_type": "--moe-token-dispatcher-type",
    "moe_router_pre_softmax": "--moe-router-pre-softmax",
    "moe_shared_expert_intermediate_size": "--moe-shared-expert-intermediate-size",
    "micro_batch_size": "--micro-batch-size",
    "global_batch_size": "--global-batch-size",
    "bf16": "--bf16",
    "fp16": "--fp16",
    "recompute_granularity": "--recompute-granularity",
    "recompute_method": "--recompute-method",
    "recompute_num_layers": "--recompute-num-layers",
    "optimizer": "--optimizer",
    "lr": "--lr",
    "min_lr": "--min-lr",
    "lr_decay_style": "--lr-decay-style",
    "lr_warmup_iters": "--lr-warmup-iters",
    "lr_decay_iters": "--lr-decay-iters",
    "weight_decay": "--weight-decay",
    "adam_beta1": "--adam-beta1",
    "adam_beta2": "--adam-beta2",
    "adam_eps": "--adam-eps",
    "grad_clip": "--clip-grad",
    "train_iters": "--train-iters",
    "seed": "--seed",
    "save": "--save",
    "load": "--load",
    "save_interval": "--save-interval",
    "log_interval": "--log-interval",
    "distributed_backend": "--distributed-backend",
    "transformer_impl": "--transformer-impl",
    "use_cpu_initialization": "--use-cpu-initialization",
}

#: trainc enum names -> Megatron spellings.
NORMALIZATION = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
POSITION_EMBEDDING = {"rope": "rope", "learned": "learned_absolute"}
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: gated_linear_unit + activation_func (dotted path the worker imports) per trainc activation.
ACTIVATION = {"swiglu": (True, "torch.nn.functional.silu"),
              "gelu": (False, "torch.nn.functional.gelu")}
#: Megatron-LM's default rank order (``initialize_model_parallel(order=...)``).
RANK_ORDER = "tp-cp-ep-dp-pp"


def _fmt(value: Any) -> str:
    """A flag value as argparse reads it back (``repr`` of floats is exact and deterministic)."""
    if isinstance(value, bool) or value is None:
        raise InternalError(f"not a flag value: {value!r}")
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if "\n" in text or "\r" in text:
        raise InternalError(f"a flag value cannot contain a line break: {text!r}")
    return text


def is_moe(plan: dict[str, Any]) -> bool:
    """True for a mixture-of-experts model (``model.num_experts`` set)."""
    return plan["spec"]["model"]["num_experts"] is not None


def megatron_values(plan: dict[str, Any]) -> dict[str, Any]:
    """The values of :data:`ARG_NAMES` keys for ``pretrain_gpt.py``, in emission order; ``True``
    is a store_true flag, ``None``/``False`` leave the flag out (Megatron-LM's default applies).

    Mirrors what ``megatron/training/arguments.py::validate_args`` and
    ``core_transformer_config_from_args`` expect: ``--num-query-groups`` only with
    ``--group-query-attention``; VPP only through ``--num-layers-per-virtual-pipeline-stage`` (even
    split) or ``--num-virtual-stages-per-pipeline-rank`` (uneven), never
    ``--no-overlap-p2p-communication`` (the CLI default keeps overlapped, unbatched p2p, the only
    safe mode for PP=2 with interleaving).
    """
    s, d = plan["spec"], plan["derived"]
    m, p, t, lc = s["model"], s["parallel"], s["training"], s["launch"]
    moe, gqa = is_moe(plan), m["num_query_groups"] < m["num_attention_heads"]
    save = lc["save_dir"]
    v: dict[str, Any] = {
        "num_layers": m["num_layers"],
        "hidden_size": m["hidden_size"],
        "num_attention_heads": m["num_attention_heads"],
        "group_query_attention": gqa,
        "num_query_groups": m["num_query_groups"] if gqa else None,
        "ffn_hidden_size": m["ffn_hidden_size"],
        "kv_channels": m["kv_channels"],
        "seq_length": m["seq_length"],
        "max_position_embeddings": m["max_position_embeddings"],
        "swiglu": m["activation"] == "swiglu",
        "normalization": NORMALIZATION[m["normalization"]],
        "position_embedding": POSITION_EMBEDDING[m["position_embedding"]],
        "rotary_base": m["rotary_base"] if m["position_embedding"] == "rope" else None,
        "untie_embeddings_and_output_weights": m["untie_embeddings_and_output_weights"],
        "disable_bias_linear": not d["add_bias_linear"],
        "make_vocab_size_divisible_by": m["make_vocab_size_divisible_by"],
        "tokenizer_type": "NullTokenizer",
        # NullTokenizer(n) has n + 1 tokens (it appends an end-of-document id) and Megatron pads
        # that count: n = vocab_size - 1 gives exactly vocab_size, padded like plan.json says.
        "vocab_size": m["vocab_size"] - 1,
        "mock_data": lc["data_path"] is None,
        "data_path": lc["data_path"],
        "tp": d["tp"],
        "pp": d["pp"],
        "layers_per_virtual_stage": d["layers_per_virtual_stage"],
        "vpp": d["vpp"] if d["vpp"] > 1 and d["layers_per_virtual_stage"] is None else None,
        "pipeline_first_stage_layers": p["pipeline_first_stage_layers"],
        "pipeline_last_stage_layers": p["pipeline_last_stage_layers"],
        "account_for_embedding_in_pipeline_split": p["account_for_embedding_in_pipeline_split"],
        "account_for_loss_in_pipeline_split": p["account_for_loss_in_pipeline_split"],
        "cp": d["cp"],
        "cp_comm_type": p["cp_comm_type"] if d["cp"] > 1 else None,
        "ep": d["ep"],
        "etp": d["etp"],
        "sequence_parallel": d["sequence_parallel"],
        "distributed_optimizer": d["distributed_optimizer"],
        "overlap_grad_reduce": d["dp"] * d["cp"] > 1,
        "overlap_param_gather": d["distributed_optimizer"] and d["dp"] * d["cp"] > 1,
        "num_experts": m["num_experts"] if moe else None,
        "moe_router_topk": m["moe_router_topk"] if moe else None,
        "moe_ffn_hidden_size": m["moe_ffn_hidden_size"] if moe else None,
        "moe_layer_freq": m["moe_layer_freq"] if moe else None,
        "moe_token_dispatcher_type": m["moe_token_dispatcher_type"] if moe else None,
        "moe_router_pre_softmax": moe and m["moe_router_topk"] == 1,
        "moe_shared_expert_intermediate_size":
            m["moe_shared_expert_intermediate_size"] if moe else None,
        "micro_batch_size": t["micro_batch_size"],
        "global_batch_size": t["global_batch_size"],
        "bf16": t["precision"] == "bf16",
        "fp16": t["precision"] == "fp16",
        "recompute_granularity": t["recompute"] if t["recompute"] != "none" else None,
        "recompute_method": t["recompute_method"] if t["recompute"] == "full" else None,
        "recompute_num_layers": t["recompute_num_layers"] if t["recompute"] == "full" else None,
        "optimizer": t["optimizer"],
        "lr": float(t["lr"]),
        "min_lr": float(t["min_lr"]),
        "lr_decay_style": "cosine",
        "lr_warmup_iters": t["lr_warmup_iters"],
        "lr_decay_iters": t["train_iters"],
        "weight_decay": float(t["weight_decay"]),
        "adam_beta1": d["adam_beta1"],
        "adam_beta2": d["adam_beta2"],
        "adam_eps": d["adam_eps"],
        "grad_clip": float(t["grad_clip"]),
        "train_iters": t["train_iters"],
        "seed": t["seed"],
        "save": save,
        "load": save,
        "save_interval": lc["save_interval"],
        "log_interval": lc["log_interval"],
        "distributed_backend": d["distributed_backend"],
        "transformer_impl": d["transformer_impl"],
        "use_cpu_initialization": lc["device"] == "cpu",
    }
    assert set(v) <= set(ARG_NAMES), set(v) - set(ARG_NAMES)
    return v


def megatron_flags(plan: dict[str, Any]) -> list[list[str]]:
    """``pretrain_gpt.py`` arguments as ``[flag]`` or ``[flag, value]`` items."""
    out: list[list[str]] = []
    for key, value in megatron_values(plan).items():
        if value is None or value is False:
            continue
        out.append([ARG_NAMES[key]] if value is True else [ARG_NAMES[key], _fmt(value)])
    return out


def megatron_args(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_args.txt``: Megatron-LM ``pretrain_gpt.py`` flags, one per line (``--flag`` or
    ``--flag value``; the value is the rest of the line). Lines starting with ``#`` are comments.

    ``--save``/``--load`` appear only when ``launch.save_dir`` is set; otherwise ``torchrun.sh``
    adds ``<OUTDIR>/checkpoints`` at run time. Not written for engine=deepspeed (unless the
    entrypoint is megatron-lm).
    """
    s = plan["spec"]
    if s["engine"] != "megatron" and s["launch"]["entrypoint"] != "megatron-lm":
        return {}
    lines = [" ".join(item) for item in megatron_flags(plan)]
    note = ("# --vocab-size is model.vocab_size - 1: Megatron's NullTokenizer adds one "
            "end-of-document token\n")
    return {"megatron_args.txt": header(plan) + note + "\n".join(lines) + "\n"}
