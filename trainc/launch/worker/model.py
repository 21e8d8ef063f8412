"""Build the Megatron-Core GPTModel chunks a rank holds, from plan.json's spec and derived values.

Weights are initialised independently of the layout: every matrix is drawn in full from a
generator seeded by its *global* name (global layer number, global expert id; a tied output layer
maps to the input embedding) and then sliced the way Megatron shards it. Any layout therefore
starts from the same model as a one-process run. Vectors keep Megatron's init (zeros/ones), which
is layout-independent already.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from typing import Any

import torch

from trainc.launch.shrink import Dims


def have_te() -> bool:
    """True when Transformer Engine imports (then the TE layer spec is used on CUDA)."""
    try:
        import transformer_engine  # noqa: F401
    except Exception:  # ImportError, or a broken TE build
        return False
    return True


#: TransformerConfig fields the worker sets itself: kernel fusions, which change speed, not the
#: model (several have no CPU kernel); announced once in the log.
WORKER_FUSIONS: dict[str, Any] = {
    "gradient_accumulation_fusion": False,
    "apply_rope_fusion": False,
    "persist_layer_norm": False,
    "bias_activation_fusion": False,
}


def _dotted(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def transformer_config_kwargs(
    plan: dict[str, Any], dims: Dims, layout: dict[str, Any], *, cpu: bool, precision: str
) -> tuple[dict[str, Any], list[str]]:
    """The TransformerConfig keyword arguments the worker passes: ``plan.json``'s
    ``engines.megatron_core.TransformerConfig`` (what megatron_core.yaml shows), with only
    (a) the dimensions of ``dims`` when the worker shrinks the model, (b) the parallel sizes of
    ``layout`` (different only for the one-process reference), (c) the CPU substitutions
    (local layers, CPU initialisation, fp16 -> bf16, the TP / EP communication overlaps off:
    schedules, not math) and (d) :data:`WORKER_FUSIONS`. Returns
    (kwargs with strings, a list of the changes as ``key: plan value -> worker value``)."""
    kw = dict(plan["engines"]["megatron_core"]["TransformerConfig"])
    want: dict[str, Any] = {
        "num_layers": dims.num_layers,
        "hidden_size": dims.hidden_size,
        "num_attention_heads": dims.num_attention_heads,
        "num_query_groups": dims.num_query_groups,
        "kv_channels": dims.kv_channels,
        "ffn_hidden_size": dims.ffn_hidden_size,
        "num_layers_in_first_pipeline_stage": dims.first_stage_layers,
        "num_layers_in_last_pipeline_stage": dims.last_stage_layers,
        "tensor_model_parallel_size": layout["tp"],
        "pipeline_model_parallel_size": layout["pp"],
        "virtual_pipeline_model_parallel_size": layout["vpp"] if layout["vpp"] > 1 else None,
        "context_parallel_size": layout["cp"],
        "expert_model_parallel_size": layout["ep"],
        "expert_tensor_parallel_size": layout["etp"],
        "sequence_parallel": bool(layout["sp"]),
    }
    if layout["pp"] == 1:  # the one-process reference builds every layer on its one stage
        want.update(
            account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False
        )
    if layout["vpp"] == 1:
        want.update(overlap_p2p_comm=False, batch_p2p_comm=True)
    if dims.mla:
        want.update(
            zip(
                ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"),
                dims.mla,
                strict=True,
            )
        )
    if dims.num_experts:
        want.update(
            num_moe_experts=dims.num_experts,
            moe_router_topk=dims.moe_router_topk,
            moe_ffn_hidden_size=dims.moe_ffn_hidden_size,
            moe_layer_freq=dims.moe_layer_freq,
            moe_shared_expert_intermediate_size=dims.moe_shared_expert_intermediate_size,
        )
    if cpu:
        want.update(transformer_impl="local", use_cpu_initialization=True)
        # the same math scheduled otherwise: TE userbuffers and the combined 1F1B A2A overlap
        # need CUDA, as does TE's GroupedLinear for the experts (then one GEMM per expert)
        want.update(
            {
                k: False
                for k in ("tp_comm_overlap", "overlap_moe_expert_parallel_comm", "moe_grouped_gemm")
                if kw.get(k)
            }
        )
    if precision != ("bf16" if kw["bf16"] else "fp16" if kw["fp16"] else "fp32"):
        dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")
        want.update(
            bf16=precision == "bf16",
            fp16=precision == "fp16",
            params_dtype=dtype,
            pipeline_dtype=dtype,
        )
    changes = [f"{k}: {kw.get(k)!r} -> {v!r}" for k, v in want.items() if kw.get(k) != v]
    kw.update(want)
    kw.update(WORKER_FUSIONS)
    if cpu:
        kw["masked_softmax_fusion"] = False  # a CUDA kernel
    return kw, changes


def transformer_config(
    plan: dict[str, Any], dims: Dims, layout: dict[str, Any], *, cpu: bool, precision: str
) -> tuple[Any, dict[str, Any], list[str]]:
    """Megatron-Core TransformerConfig built from :func:`transformer_config_kwargs` (dtypes and
    the activation callable resolved); returns (config, the kwargs, the changes)."""
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    kw, changes = transformer_config_kwargs(plan, dims, layout, cpu=cpu, precision=precision)
    args = dict(kw)
    for key in ("params_dtype", "pipeline_dtype"):
        args[key] = getattr(torch, args[key])
    if args.get("window_size") is not None:  # JSON's list -> the Tuple[int, int] it declares
        args["window_size"] = tuple(args["window_size"])
    for key, path in plan["engines"]["megatron_core"]["callables"]["TransformerConfig"].items():
        args[key] = _dotted(path)
    cls = MLATransformerConfig if kw.get("multi_latent_attention") else TransformerConfig
    return cls(**args), kw, changes


def layer_spec(config: Any, dims: Dims, *, use_te: bool, cp: int, vp_stage: int | None) -> Any:
    """The decoder spec: TE spec when available (CUDA), local spec otherwise; the core-attention
    stand-in (:mod:`trainc.launch.worker.cp_attention`) on CPU for CP and for MLA."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    if dims.num_experts and dims.moe_layer_freq != 1:
        spec = specs.get_gpt_decoder_block_spec(
            config, use_transformer_engine=use_te, vp_stage=vp_stage
        )
        layers = spec.layer_specs
    elif use_te:
        spec = specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=dims.num_experts,
            moe_grouped_gemm=bool(config.moe_grouped_gemm),
            qk_layernorm=config.qk_layernorm,
            multi_latent_attention=dims.mla is not None,
        )
        layers = [spec]
    else:
        spec = specs.get_gpt_layer_local_spec(
            num_experts=dims.num_experts,
            moe_grouped_gemm=False,
            qk_layernorm=config.qk_layernorm,
            multi_latent_attention=dims.mla is not None,
        )
        layers = [spec]
    # on CPU the core attention of MLA (keys and values of their own widths, which Megatron-Core's
    # local DotProductAttention does not take) and of CP is trainc's torch stand-in
    if (cp > 1 or dims.mla is not None) and not use_te:
        from trainc.launch.worker.cp_attention import AllGatherCPDotProductAttention

        for ls in layers:
            ls.submodules.self_attention.submodules.core_attention = AllGatherCPDotProductAttention
    return spec


def build_chunks(
    plan: dict[str, Any], dims: Dims, config: Any, *, use_te: bool, cp: int
) -> list[Any]:
    """One GPTModel per virtual pipeline stage held by this rank, with ``plan.json``'s
    ``engines.megatron_core.GPTModel`` keyword arguments (vocabulary and positions from ``dims``
    when shrunk)."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    gpt = dict(plan["engines"]["megatron_core"]["GPTModel"])
    gpt.update(vocab_size=dims.vocab_size, max_sequence_length=dims.max_position_embeddings)
    vpp = config.virtual_pipeline_model_parallel_size or 1
    chunks = []
    for i in range(vpp):
        vp = i if vpp > 1 else None
        chunks.append(
            GPTModel(
                config=config,
                transformer_layer_spec=layer_spec(config, dims, use_te=use_te, cp=cp, vp_stage=vp),
                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
                vp_stage=vp,
                **gpt,
            )
        )
    return chunks


_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")


def global_name(model: Any, name: str, shared_embedding: bool) -> str:
    """The layout-independent name of a chunk-local parameter name."""
    from megatron.core import parallel_state as ps

    if shared_embedding and name == "output_layer.weight":
        return "embedding.word_embeddings.weight"
    mt = _LAYER.match(name)
    if mt:
        layer = model.decoder.layers[int(mt.group(1))]
        name = f"decoder.layers.{layer.layer_number - 1}." + name[mt.end() :]
    me = _EXPERT.search(name)
    if me:
        n_local = model.config.num_moe_experts // ps.get_expert_model_parallel_world_size()
        gid = ps.get_expert_model_parallel_rank() * n_local + int(me.group(1))
        name = name[: me.start()] + f".local_experts.{gid}." + name[me.end() :]
    return name


def _seed(seed: int, name: str) -> int:
    return int(hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:15], 16)


@torch.no_grad()
def deterministic_init(chunks: list[Any], seed: int, std: float = 0.02) -> int:
    """Re-initialise every matrix from its global name; returns how many were set."""
    from megatron.core import parallel_state as ps

    count = 0
    for model in chunks:
        shared = bool(getattr(model, "share_embeddings_and_output_weights", False))
        gated = bool(model.config.gated_linear_unit)
        for name, p in model.named_parameters():
            if p.dim() < 2:
                continue
            gname = global_name(model, name, shared)
            full_shape = list(p.shape)
            split, rank, dim = 1, 0, 0
            if getattr(p, "tensor_model_parallel", False):
                dim = p.partition_dim
                if not getattr(p, "allreduce", True):  # expert parameter: expert-TP group
                    split = ps.get_expert_tensor_parallel_world_size()
                    rank = ps.get_expert_tensor_parallel_rank()
                else:
                    split = ps.get_tensor_model_parallel_world_size()
                    rank = ps.get_tensor_model_parallel_rank()
                full_shape[dim] *= split
            gen = torch.Generator(device="cpu").manual_seed(_seed(seed, gname))
            full = torch.randn(full_shape, generator=gen, dtype=torch.float32) * std
            # gated fc1 holds [gate; up] per TP rank: shard each half (Megatron's stride 2)
            stride = 2 if gated and "linear_fc1.weight" in name and split > 1 else 1
            parts = full.chunk(stride, dim=dim)
            shard = torch.cat([q.chunk(split, dim=dim)[rank] for q in parts], dim=dim)
            p.copy_(shard.to(device=p.device, dtype=p.dtype))
            count += 1
    return count
