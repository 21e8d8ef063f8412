"""``torchtitan_args.txt`` (engine=fsdp): the torchtitan 0.3.0 ``torchtitan.train`` overrides of
``plan.json``'s ``engines.fsdp.torchtitan`` (built by :mod:`trainc.compiler.targets.fsdp` from
the same values the trainc FSDP2 worker reads).

torchtitan 0.3.0 has no TOML job file: a job is a Python ``config_registry`` function chosen
with ``--module``/``--config`` (``torchtitan/config/manager.py`` ``ConfigManager``), whose fields
tyro lets the command line override as ``--section.field value``. The model's shape, tokenizer,
data set and optimizer are set by that function only (``Trainer.Config.model_spec`` is
suppressed on the command line; ``optimizer.param_groups`` is a list of ``ParamGroupConfig``
with a free ``optimizer_kwargs`` dict, which tyro offers no flag for), so the file names the
shape and layer flavour (:func:`flavour`) the registry entry must have and, on a ``#registry``
line, the optimizer values as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from trainc.compiler.emit.render import header

#: The ``Trainer.Config`` field the registry function must set (``OptimizersContainer.Config``).
REGISTRY_FIELD = "optimizer.param_groups"
#: The registry function's model field that takes the FP8 converters (torchtitan 0.3.0
#: ``components/quantization`` ``QuantizationConverter`` configs; ``model_spec`` is suppressed on
#: the command line).
CONVERTERS_FIELD = "model.converters"
#: The registry function's MoE layer settings (torchtitan 0.3.0 ``make_moe_config`` /
#: ``make_router_config`` / ``make_routed_experts_config``; no flag reaches them).
MOE_FIELD = "model.moe"
#: torchtitan 0.3.0 ``OptimizersContainer._resolve_optimizer_factory`` names.
TORCHTITAN_OPTIMIZERS = frozenset({"Adam", "AdamW", "DistMuon"})


def flavour(plan: dict[str, Any]) -> str:
    """The layer flavour the registry function's model must have, as ``engines.megatron_core``
    (the trainc FSDP2 worker reads the same values, ``trainc.launch.worker.torch_gpt.options``):
    norm and its epsilon, gated MLP, linear and q/k/v biases, positions (RoPE base, fraction and
    scaling), tied embeddings, dropouts. No torchtitan flag reaches them either."""
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    gpt = plan["engines"]["megatron_core"]["GPTModel"]
    rope = gpt["position_embedding_type"] == "rope"
    pos = (
        f"rope theta={gpt['rotary_base']} rotary_percent={gpt['rotary_percent']} "
        f"scaling={gpt['rope_scaling_factor'] if gpt['rope_scaling'] else 'none'}"
        if rope
        else "learned positions"
    )
    return (
        f"norm={tc['normalization']} eps={tc['layernorm_epsilon']} "
        f"gated_mlp={str(bool(tc['gated_linear_unit'])).lower()} "
        f"bias={str(bool(tc['add_bias_linear'])).lower()} "
        f"qkv_bias={str(bool(tc['add_qkv_bias'])).lower()} {pos} "
        f"tied={str(bool(gpt['share_embeddings_and_output_weights'])).lower()} "
        f"dropout={tc['hidden_dropout']}/{tc['attention_dropout']} "
        f"init_std={tc['init_method_std']}"
    )


def torchtitan_args(plan: dict[str, Any]) -> dict[str, str]:
    """``torchtitan_args.txt``: one override per line (``--flag`` or ``--flag value``; ``#``
    lines are comments), after a comment block naming the model shape and the command. Nothing
    unless engine=fsdp."""
    cfg = plan["engines"].get("fsdp")
    if cfg is None:
        return {}
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    tt = cfg["torchtitan"]
    param_groups = tt["registry"]["optimizer"]["param_groups"]
    comment = (
        f"# torchtitan {tt['version']} overrides (tyro --section.field): run with\n"
        "#   torchrun --nnodes=N --nproc_per_node=G -m torchtitan.train --module llama3 \\\n"
        "#     --config <registry function> $(grep -v '^#' torchtitan_args.txt)\n"
        "# The registry function sets the model (torchtitan's command line cannot): it must have\n"
        f"#   layers={tc['num_layers']} dim={tc['hidden_size']} "
        f"heads={tc['num_attention_heads']} kv_heads={tc['num_query_groups']} "
        f"head_dim={tc['kv_channels']} "
        f"ffn={tc['ffn_hidden_size']} vocab={plan['derived']['padded_vocab_size']}\n"
        f"#   {flavour(plan)}\n"
        f"# activation checkpointing {cfg['activation_checkpoint']['torchtitan_mode']}: the last "
        "flags (a tyro subcommand ends the line),\n# and the optimizer (no flag reaches it) as "
        "this JSON line says (OptimizersContainer.Config):\n"
        f"#registry {REGISTRY_FIELD} {json.dumps(param_groups, sort_keys=True)}\n"
    )
    conv = tt["registry"].get("model", {}).get("converters")
    if conv:
        comment += (
            "# FP8 linears: torchao converters on the registry function's model (0.3.0\n"
            "# components/quantization Float8LinearConverter / MXFP8LinearConverter configs;\n"
            "# before 0.3.0: --model.converters float8|mx with --float8.recipe_name):\n"
            f"#registry {CONVERTERS_FIELD} {json.dumps(conv, sort_keys=True)}\n"
        )
    comment += moe_comment(cfg)
    if param_groups[0]["optimizer_name"] not in TORCHTITAN_OPTIMIZERS:
        comment += (
            f"# torchtitan {tt['version']} builds "
            f"{', '.join(sorted(TORCHTITAN_OPTIMIZERS))} only: "
            f"{param_groups[0]['optimizer_name']} needs a custom optimizer factory.\n"
        )
    lines = [" ".join(item) for item in tt["args"]]
    return {"torchtitan_args.txt": header(plan) + comment + "\n".join(lines) + "\n"}


def moe_comment(cfg: dict[str, Any]) -> str:
    """The comment lines of an MoE model (nothing for a dense one): the module whose decoder has
    grouped experts (torchtitan 0.3.0 ``--module qwen3``: GQA attention, ``MoE`` layers with
    the all-to-all, DeepEP or HybridEP dispatcher), the expert mesh, and the MoE settings the
    registry function must set, as a ``#registry`` JSON line."""
    moe = cfg["torchtitan"]["registry"].get("moe")
    if moe is None:
        return ""
    ep = cfg["expert_parallel"]
    return (
        "# MoE: --module qwen3 (torchtitan's GQA decoder with grouped experts) instead of llama3;\n"
        f"# expert mesh (pp, dp_replicate, efsdp, ep) = {tuple(ep['sparse_mesh']['shape'])}, "
        f"{ep['local_experts']} experts per EP rank, experts FSDP-sharded over "
        f"{'/'.join(ep['expert_mesh_dims'])} ({ep['expert_shard_placement']});\n"
        "# the MoE layers (make_moe_config / make_router_config / make_routed_experts_config):\n"
        f"#registry {MOE_FIELD} {json.dumps(moe, sort_keys=True)}\n"
    )
