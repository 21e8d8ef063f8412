"""Megatron-Core keyword arguments (``megatron_core.yaml``), built from ``plan.json`` only.

Groups use the names of megatron-core 0.16.1: ``initialize_model_parallel`` parameters,
``TransformerConfig`` fields (with those inherited from ``ModelParallelConfig``), ``GPTModel``
constructor parameters, ``DistributedDataParallelConfig`` and ``OptimizerConfig`` fields, and the
keyword arguments of the ``forward_backward_func`` schedules. This is what the trainc worker
builds its Megatron-Core objects from.
"""

from __future__ import annotations

from typing import Any

import yaml

from trainc.compiler.emit.megatron import (
    ACTIVATION,
    NORMALIZATION,
    POSITION_EMBEDDING,
    RANK_ORDER,
    TORCH_DTYPE,
    is_moe,
)
from trainc.compiler.emit.render import header


def megatron_core_kwargs(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Megatron-Core 0.16.1 keyword arguments, grouped by the callable or dataclass that takes
    them (``initialize_model_parallel``, ``TransformerConfig``, ``GPTModel``,
    ``DistributedDataParallelConfig``, ``OptimizerConfig``, ``forward_backward_func``).

    Dtypes are strings (``bfloat16``, ``float16``, ``float32``: ``getattr(torch, name)``); the
    activation callable is a dotted path under ``callables.TransformerConfig``. The DDP overlap
    switches are off: overlapping needs the training loop's ``no_sync``/``param_sync`` hooks
    (Megatron-LM's ``training.py`` wires them; ``megatron_args.txt`` turns them on there).
    """
    s, d = plan["spec"], plan["derived"]
    m, p, t, lc = s["model"], s["parallel"], s["training"], s["launch"]
    moe = is_moe(plan)
    dtype = TORCH_DTYPE[d["params_dtype"]]
    glu, act = ACTIVATION[m["activation"]]
    full = t["recompute"] == "full"
    vpp = d["vpp"] if d["vpp"] > 1 else None
    tc: dict[str, Any] = {
        "num_layers": m["num_layers"],
        "hidden_size": m["hidden_size"],
        "num_attention_heads": m["num_attention_heads"],
        "num_query_groups": m["num_query_groups"],
        "ffn_hidden_size": m["ffn_hidden_size"],
        "kv_channels": m["kv_channels"],
        "gated_linear_unit": glu,
        "normalization": NORMALIZATION[m["normalization"]],
        "add_bias_linear": d["add_bias_linear"],
        "tensor_model_parallel_size": d["tp"],
        "pipeline_model_parallel_size": d["pp"],
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": d["cp"],
        "cp_comm_type": p["cp_comm_type"],
        "expert_model_parallel_size": d["ep"],
        "expert_tensor_parallel_size": d["etp"],
        "sequence_parallel": d["sequence_parallel"],
        "num_layers_in_first_pipeline_stage": p["pipeline_first_stage_layers"],
        "num_layers_in_last_pipeline_stage": p["pipeline_last_stage_layers"],
        "account_for_embedding_in_pipeline_split": p["account_for_embedding_in_pipeline_split"],
        "account_for_loss_in_pipeline_split": p["account_for_loss_in_pipeline_split"],
        "overlap_p2p_comm": d["overlap_p2p_comm"],
        "batch_p2p_comm": d["batch_p2p_comm"],
        "variable_seq_lengths": False,
        "params_dtype": dtype,
        "pipeline_dtype": dtype,
        "bf16": t["precision"] == "bf16",
        "fp16": t["precision"] == "fp16",
        "recompute_granularity": t["recompute"] if t["recompute"] != "none" else None,
        "recompute_method": t["recompute_method"] if full else None,
        "recompute_num_layers": t["recompute_num_layers"] if full else None,
        "transformer_impl": d["transformer_impl"],
        "use_cpu_initialization": lc["device"] == "cpu",
    }
    if moe:
        tc.update({
            "num_moe_experts": m["num_experts"],
            "moe_router_topk": m["moe_router_topk"],
            "moe_ffn_hidden_size": m["moe_ffn_hidden_size"],
            "moe_layer_freq": m["moe_layer_freq"],
            "moe_token_dispatcher_type": m["moe_token_dispatcher_type"],
            "moe_router_pre_softmax": m["moe_router_topk"] == 1,
            "moe_shared_expert_intermediate_size": m["moe_shared_expert_intermediate_size"],
        })
    distopt = d["distributed_optimizer"]
    return {
        "initialize_model_parallel": {
            "tensor_model_parallel_size": d["tp"],
            "pipeline_model_parallel_size": d["pp"],
            "virtual_pipeline_model_parallel_size": vpp,
            "context_parallel_size": d["cp"],
            "expert_model_parallel_size": d["ep"],
            "expert_tensor_parallel_size": d["etp"],
            "order": RANK_ORDER,
        },
        "TransformerConfig": tc,
        "GPTModel": {
            "vocab_size": d["padded_vocab_size"],
            "max_sequence_length": m["max_position_embeddings"],
            "position_embedding_type": POSITION_EMBEDDING[m["position_embedding"]],
            "rotary_base": m["rotary_base"],
            "share_embeddings_and_output_weights": not m["untie_embeddings_and_output_weights"],
        },
        "DistributedDataParallelConfig": {
            "use_distributed_optimizer": distopt,
            "grad_reduce_in_fp32": t["precision"] == "bf16",
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
        },
        "OptimizerConfig": {
            "optimizer": t["optimizer"],
            "lr": float(t["lr"]),
            "min_lr": float(t["min_lr"]),
            "weight_decay": float(t["weight_decay"]),
            "clip_grad": float(t["grad_clip"]),
            "adam_beta1": d["adam_beta1"],
            "adam_beta2": d["adam_beta2"],
            "adam_eps": d["adam_eps"],
            "bf16": t["precision"] == "bf16",
            "fp16": t["precision"] == "fp16",
            "params_dtype": dtype,
            "use_distributed_optimizer": distopt,
        },
        "forward_backward_func": {
            "num_microbatches": d["num_microbatches"],
            "seq_length": m["seq_length"],
            "micro_batch_size": t["micro_batch_size"],
            "decoder_seq_length": m["seq_length"],
        },
        "callables": {"TransformerConfig": {"activation_func": act}},
    }


def megatron_core(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_core.yaml``: :func:`megatron_core_kwargs` as YAML (``yaml.safe_dump``, sorted)."""
    body = yaml.safe_dump(megatron_core_kwargs(plan), sort_keys=True, default_flow_style=False)
    return {"megatron_core.yaml": header(plan) + body}
