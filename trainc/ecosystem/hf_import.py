"""``trainc import-hf``: a Hugging Face ``config.json`` -> a trainc model preset (``model/*.yaml``).

Supported ``model_type`` values (see :data:`SUPPORTED`): Llama 2/3 (``llama``), Mistral, Mixtral,
Qwen2 (incl. Qwen2-MoE), Qwen3 (incl. Qwen3-MoE) and DeepSeek-V3. All of them are pre-norm decoders
with RMSNorm, SwiGLU MLPs (``hidden_act: silu`` with a gate) and rotary positions.

Key mapping (HF -> trainc):

* ``num_hidden_layers`` -> ``num_layers``; ``hidden_size``; ``num_attention_heads``;
  ``num_key_value_heads`` -> ``num_query_groups`` (absent = MHA); ``intermediate_size`` ->
  ``ffn_hidden_size``; ``head_dim`` -> ``kv_channels`` only when it differs from
  ``hidden_size / num_attention_heads``; DeepSeek-V3's multi-head latent attention:
  ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim`` -> ``qk_head_dim``,
  ``qk_rope_head_dim`` -> ``qk_pos_emb_head_dim``, ``v_head_dim`` (``multi_latent_attention``);
  ``vocab_size``; ``rope_theta`` ->
  ``rotary_base`` (default 10000); ``tie_word_embeddings`` -> ``not
  untie_embeddings_and_output_weights`` (absent = untied, the default of these architectures).
* ``max_position_embeddings`` is copied; ``seq_length`` (the *training* sequence length, which a
  config.json does not state) is chosen as ``min(P, 8192)`` where P is
  ``rope_scaling.original_max_position_embeddings`` when the config extends its context with RoPE
  scaling (DeepSeek-V3's YaRN, Llama 3.1) and ``max_position_embeddings`` otherwise: 8192 tokens is
  the pre-training length of Llama 3 and a sensible default; long-context stages override it
  (``--seq-length`` or ``model.seq_length=...``).
* MoE: ``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` -> ``num_experts``;
  ``num_experts_per_tok`` -> ``moe_router_topk``; ``moe_intermediate_size`` (Mixtral: the
  ``intermediate_size``) -> ``moe_ffn_hidden_size``; shared experts -> ``moe_shared_expert_
  intermediate_size``; ``decoder_sparse_step`` / ``moe_layer_freq`` -> ``moe_layer_freq``.

* ``rms_norm_eps`` -> ``norm_epsilon``; ``attention_dropout``; ``hidden_dropout`` 0 (these
  decoders have none); QKV bias (Qwen2, ``attention_bias``) -> ``add_qkv_bias``; Llama 3.1's
  ``rope_scaling`` (``rope_type: llama3``) -> ``rope_scaling_factor``; ``router_aux_loss_coef``
  -> ``moe_aux_loss_coeff`` with aux_loss balancing; DeepSeek-V3's ``scoring_func``,
  ``routed_scaling_factor`` and sequence-wise balancing (its weight is left to the user).

What trainc does not model (QK-norm, dense first layers, multi-token prediction, sliding
windows) is listed in the preset's header comment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from trainc import __version__

#: Default cap on the imported training sequence length (tokens).
SEQ_LENGTH_CAP = 8192

#: Supported HF ``model_type`` -> its architecture class (for the error message).
SUPPORTED: dict[str, str] = {
    "llama": "LlamaForCausalLM (Llama 2, Llama 3)",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}

#: Key order of the written preset (the order of ModelSpec's fields).
KEY_ORDER = (
    "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "ffn_hidden_size", "vocab_size", "seq_length", "max_position_embeddings", "activation",
    "normalization", "position_embedding", "rotary_base", "rope_scaling_factor",
    "untie_embeddings_and_output_weights", "add_qkv_bias", "norm_epsilon", "hidden_dropout",
    "attention_dropout", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
    "qk_pos_emb_head_dim", "v_head_dim", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_router_score_function",
    "moe_router_topk_scaling_factor", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
)


class HFImportError(ValueError):
    """The config.json cannot be turned into a trainc model preset (a user error, exit 2)."""


def _req(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise HFImportError(f"config.json has no '{key}' (model_type {cfg.get('model_type')!r})")
    return cfg[key]


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise HFImportError(f"config.json '{key}' must be an integer, got {value!r}")
    return int(value)


def _moe_keys(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    mt = cfg["model_type"]
    out: dict[str, Any] = {}
    if mt == "mixtral":
        out["num_experts"] = _int(_req(cfg, "num_local_experts"), "num_local_experts")
        out["moe_ffn_hidden_size"] = _int(_req(cfg, "intermediate_size"), "intermediate_size")
    elif mt in ("qwen2_moe", "qwen3_moe"):
        out["num_experts"] = _int(_req(cfg, "num_experts"), "num_experts")
        out["moe_ffn_hidden_size"] = _int(_req(cfg, "moe_intermediate_size"),
                                          "moe_intermediate_size")
        shared = cfg.get("shared_expert_intermediate_size")
        if shared:
            out["moe_shared_expert_intermediate_size"] = _int(
                shared, "shared_expert_intermediate_size")
            notes.append("the shared expert's sigmoid gate")
        step = _int(cfg.get("decoder_sparse_step", 1) or 1, "decoder_sparse_step")
        out["moe_layer_freq"] = step
        if step != 1:
            notes.append(f"decoder_sparse_step={step} makes layers i with (i+1) % {step} == 0 "
                         f"sparse; trainc's moe_layer_freq counts i % {step} == 0")
        if cfg.get("mlp_only_layers"):
            notes.append(f"dense mlp_only_layers {cfg['mlp_only_layers']}")
    elif mt == "deepseek_v3":
        out["num_experts"] = _int(_req(cfg, "n_routed_experts"), "n_routed_experts")
        moe_ffn = _int(_req(cfg, "moe_intermediate_size"), "moe_intermediate_size")
        out["moe_ffn_hidden_size"] = moe_ffn
        shared = _int(cfg.get("n_shared_experts") or 0, "n_shared_experts")
        if shared:
            out["moe_shared_expert_intermediate_size"] = shared * moe_ffn
        out["moe_layer_freq"] = _int(cfg.get("moe_layer_freq", 1) or 1, "moe_layer_freq")
        if cfg.get("first_k_dense_replace"):
            notes.append(f"the first {cfg['first_k_dense_replace']} dense layers "
                         "(first_k_dense_replace; every layer is MoE here)")
        if cfg.get("num_nextn_predict_layers"):
            notes.append("multi-token prediction (num_nextn_predict_layers)")
    else:
        return out
    out["moe_router_topk"] = _int(_req(cfg, "num_experts_per_tok"), "num_experts_per_tok")
    out.setdefault("moe_layer_freq", 1)
    if mt == "deepseek_v3":
        if cfg.get("scoring_func") == "sigmoid":
            out["moe_router_score_function"] = "sigmoid"
        if cfg.get("routed_scaling_factor") not in (None, 1, 1.0):
            out["moe_router_topk_scaling_factor"] = float(cfg["routed_scaling_factor"])
        out["moe_router_load_balancing_type"] = "seq_aux_loss"
        if cfg.get("aux_loss_alpha") is not None:
            # the paper's alpha is 1e-4 (arXiv 2412.19437 section 4.2); the config's value is
            # not what V3 was trained with, so it is not copied
            notes.append(f"the balance loss weight (aux_loss_alpha {cfg['aux_loss_alpha']} in "
                         "config.json; set model.moe_aux_loss_coeff)")
    elif cfg.get("router_aux_loss_coef") is not None:
        out["moe_router_load_balancing_type"] = "aux_loss"
        out["moe_aux_loss_coeff"] = float(cfg["router_aux_loss_coef"])
    return out


def _notes(cfg: dict[str, Any]) -> list[str]:
    notes = []
    if cfg["model_type"].startswith("qwen3"):
        notes.append("QK-norm")
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", True):
        notes.append(f"sliding-window attention ({cfg['sliding_window']} tokens)")
    return notes


def convert(cfg: dict[str, Any], *,
            seq_length: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """Map a parsed HF config.json to trainc model keys; returns ``(keys, notes)``.

    ``notes`` lists what the preset does not model. Raises :class:`HFImportError` for an
    unsupported ``model_type`` (the message lists the supported ones) or a missing key.
    """
    if not isinstance(cfg, dict):
        raise HFImportError("config.json must hold a JSON object")
    if seq_length is not None and seq_length < 1:
        raise HFImportError(f"seq_length must be a positive number of tokens, got {seq_length}")
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        arch = ", ".join(cfg.get("architectures") or []) or "none given"
        raise HFImportError(
            f"unsupported model_type {mt!r} (architectures: {arch}); supported model_type values: "
            + "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items()))
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise HFImportError(f"hidden_act {act!r} is not supported for {mt} (expected 'silu', "
                            "i.e. a SwiGLU MLP)")
    heads = _int(_req(cfg, "num_attention_heads"), "num_attention_heads")
    hidden = _int(_req(cfg, "hidden_size"), "hidden_size")
    max_pos = _int(_req(cfg, "max_position_embeddings"), "max_position_embeddings")
    scaling = cfg.get("rope_scaling") or {}
    trained = _int(scaling.get("original_max_position_embeddings") or max_pos,
                   "original_max_position_embeddings")
    out: dict[str, Any] = {
        "num_layers": _int(_req(cfg, "num_hidden_layers"), "num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": _int(cfg.get("num_key_value_heads") or heads, "num_key_value_heads"),
        "ffn_hidden_size": _int(_req(cfg, "intermediate_size"), "intermediate_size"),
        "vocab_size": _int(_req(cfg, "vocab_size"), "vocab_size"),
        "seq_length": seq_length if seq_length is not None else min(trained, SEQ_LENGTH_CAP),
        "max_position_embeddings": max_pos,
        "activation": "swiglu",
        "normalization": "rmsnorm",
        "position_embedding": "rope",
        "rotary_base": _int(cfg.get("rope_theta", 10000), "rope_theta"),
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "norm_epsilon": float(cfg.get("rms_norm_eps", 1e-6)),
        # HF decoders of these families have no residual dropout; attention_dropout is stated
        "hidden_dropout": 0.0,
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
    }
    if mt.startswith("qwen2") or cfg.get("attention_bias"):
        out["add_qkv_bias"] = True
    if mt == "deepseek_v3":  # multi-head latent attention: no key/value heads of its own
        del out["num_query_groups"]
        q_lora = cfg.get("q_lora_rank")
        out.update(multi_latent_attention=True,
                   q_lora_rank=_int(q_lora, "q_lora_rank") if q_lora else None,
                   kv_lora_rank=_int(_req(cfg, "kv_lora_rank"), "kv_lora_rank"),
                   qk_head_dim=_int(_req(cfg, "qk_nope_head_dim"), "qk_nope_head_dim"),
                   qk_pos_emb_head_dim=_int(_req(cfg, "qk_rope_head_dim"), "qk_rope_head_dim"),
                   v_head_dim=_int(_req(cfg, "v_head_dim"), "v_head_dim"))
    elif (head_dim := cfg.get("head_dim")) is not None and _int(head_dim, "head_dim") * heads \
            != hidden:
        out["kv_channels"] = _int(head_dim, "head_dim")
    notes = _notes(cfg)
    out.update(_moe_keys(cfg, notes))
    if scaling:
        kind = scaling.get("rope_type") or scaling.get("type")
        if kind == "llama3" and scaling.get("factor"):
            out["rope_scaling_factor"] = float(scaling["factor"])  # Megatron's --use-rope-scaling
        else:
            notes.append(f"rope_scaling ({kind}, factor {scaling.get('factor')})")
    return {k: out[k] for k in KEY_ORDER if k in out}, notes


def render(keys: dict[str, Any], notes: list[str], source: str, cfg: dict[str, Any]) -> str:
    """The preset YAML text: a source comment, then one ``key: value`` line per key."""
    arch = ", ".join(cfg.get("architectures") or []) or cfg["model_type"]
    name = cfg.get("_name_or_path")
    lines = [f"# Imported by trainc {__version__} import-hf from {source}"
             + (f" ({name})" if name else "") + f": model_type {cfg['model_type']}, {arch}.",
             f"# seq_length = min(pre-training positions, {SEQ_LENGTH_CAP}) unless given; "
             "override with model.seq_length=N."]
    if notes:
        lines.append("# Not modelled: " + "; ".join(notes) + ".")
    for k, v in keys.items():
        lines.append(yaml.safe_dump({k: v}, default_flow_style=False).strip())
    return "\n".join(lines) + "\n"


def import_hf(path: str | Path, *, seq_length: int | None = None) -> str:
    """Read a HF ``config.json`` (file path) and return the preset YAML text."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise HFImportError(f"cannot read {p}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HFImportError(f"{p} is not valid JSON: {e}") from None
    keys, notes = convert(cfg, seq_length=seq_length)
    return render(keys, notes, p.name, cfg)

