"""``trainc import-hf``: a Hugging Face ``config.json`` -> a trainc model preset (``model/*.yaml``).

Supported ``model_type`` values (see :data:`SUPPORTED`): Llama 2/3 (``llama``), Mistral, Mixtral,
Qwen2 (incl. Qwen2-MoE), Qwen3 (incl. Qwen3-MoE), DeepSeek-V3 and Kimi K2. All of them are pre-norm
decoders with RMSNorm, SwiGLU MLPs (``hidden_act: silu`` with a gate) and rotary positions.

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
  ``rope_scaling.original_max_position_embeddings`` when the config has one (the length before
  RoPE scaling extended the context: Llama 3.1's 8192, DeepSeek-V3's 4096; plain RoPE, the only
  RoPE a dropped or dynamic scaling leaves, is right only up to it) and
  ``max_position_embeddings`` otherwise: 8192 tokens is the pre-training length of Llama 3 and a
  sensible default; long-context stages override it (``--seq-length`` or
  ``model.seq_length=...``). The choice is stated as a note.
* ``rope_scaling``: Llama 3.1's (``rope_type: llama3``) -> ``rope_scaling_factor`` only when its
  ``low_freq_factor``, ``high_freq_factor`` and ``original_max_position_embeddings`` are 1, 4 and
  8192, the values Megatron-Core hard-codes (:data:`MCORE_LLAMA3_SCALING`); other values, and
  ``linear``, ``yarn``, ``longrope`` or unknown scalings, which the schema cannot express, are an
  :class:`HFImportError` (the preset would train a different RoPE from the checkpoint's) unless
  ``drop_rope_scaling`` (``--drop-rope-scaling``) imports plain RoPE and notes it. ``dynamic`` NTK
  scaling is a note (plain RoPE up to its original length; an error if seq_length exceeds it).
* MoE: ``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` -> ``num_experts``;
  ``num_experts_per_tok`` -> ``moe_router_topk``; ``moe_intermediate_size`` (Mixtral: the
  ``intermediate_size``) -> ``moe_ffn_hidden_size``; shared experts -> ``moe_shared_expert_
  intermediate_size``; ``decoder_sparse_step`` / ``moe_layer_freq`` -> ``moe_layer_freq``.

* ``rms_norm_eps`` -> ``norm_epsilon``; ``attention_dropout``; ``hidden_dropout`` 0 (these
  decoders have none); QKV bias (Qwen2, ``attention_bias``) -> ``add_qkv_bias``;
  ``router_aux_loss_coef`` -> ``moe_aux_loss_coeff`` with aux_loss balancing;
  ``initializer_range`` -> ``init_method_std`` when it differs from 0.02 (the default).
* DeepSeek-V3's router: ``scoring_func`` -> ``moe_router_score_function``,
  ``routed_scaling_factor`` -> ``moe_router_topk_scaling_factor``, ``seq_aux`` (default true) ->
  ``moe_router_load_balancing_type: seq_aux_loss``, ``topk_method: noaux_tc`` ->
  ``moe_router_enable_expert_bias``, group-limited routing ``n_group`` / ``topk_group`` ->
  ``moe_router_num_groups`` / ``moe_router_group_topk``, ``first_k_dense_replace`` ->
  ``moe_first_k_dense_layers``, ``num_nextn_predict_layers`` -> ``mtp_num_layers``. The
  balance-loss weight is left to the user and noted (``aux_loss_alpha`` set or not: the config's
  value is not the technical report's 1e-4). Kimi K2 (``model_type: kimi_k2``) is DeepSeek-V3's
  architecture and maps the same way.
* Architectures whose config.json the model schema cannot reproduce (Llama 4, gpt-oss,
  Gemma 3: see :data:`UNSUPPORTED`) are an :class:`HFImportError` that names every difference
  with its config.json key and value (:attr:`HFImportError.differences`).

* ``sliding_window`` S -> ``window_size`` S - 1 (Hugging Face's window counts the query itself,
  Megatron-Core's the keys to its left) and a periodic ``layer_types`` (or Gemma 3's
  ``sliding_window_pattern``) -> ``window_attn_skip_freq`` (:func:`window_keys`); a window that
  covers the whole sequence is a note, a non-periodic pattern an :class:`HFImportError`,
  ``--drop-sliding-window`` imports full causal attention with a note.

Qwen3's ``q_norm`` / ``k_norm`` -> ``qk_layernorm``. Every config.json field that is not
modelled (the router settings above) or is mapped with a caveat, and every
training setting it leaves unset, is listed as a ``# Note:`` line in the preset's header comment
(and ``trainc import-hf`` prints each on stderr as a ``note:`` line).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from trainc import __version__
from trainc.schemas.model import ModelSpec

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
    "kimi_k2": "DeepseekV3ForCausalLM (Kimi K2: DeepSeek-V3's architecture)",
}

#: model_type values whose architecture is DeepSeek-V3's (MLA, DeepSeekMoE router).
DEEPSEEK_LIKE = ("deepseek_v3", "kimi_k2")

#: The config.json keys :func:`convert` requires, and the model_type values that need each
#: (what ``import-hf`` names when one is missing).
REQUIRED_BY: dict[str, tuple[str, ...]] = {
    **{
        k: tuple(SUPPORTED)
        for k in (
            "num_attention_heads",
            "hidden_size",
            "max_position_embeddings",
            "num_hidden_layers",
            "intermediate_size",
            "vocab_size",
        )
    },
    "num_local_experts": ("mixtral",),
    "num_experts": ("qwen2_moe", "qwen3_moe"),
    "moe_intermediate_size": ("qwen2_moe", "qwen3_moe", *DEEPSEEK_LIKE),
    "n_routed_experts": DEEPSEEK_LIKE,
    "num_experts_per_tok": ("mixtral", "qwen2_moe", "qwen3_moe", *DEEPSEEK_LIKE),
    **{
        k: DEEPSEEK_LIKE
        for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    },
}

#: Key order of the written preset (the order of ModelSpec's fields).
KEY_ORDER = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "ffn_hidden_size",
    "vocab_size",
    "seq_length",
    "max_position_embeddings",
    "activation",
    "normalization",
    "position_embedding",
    "rotary_base",
    "rope_scaling_factor",
    "untie_embeddings_and_output_weights",
    "add_qkv_bias",
    "add_bias_linear",
    "norm_epsilon",
    "init_method_std",
    "hidden_dropout",
    "attention_dropout",
    "multi_latent_attention",
    "qk_layernorm",
    "window_size",
    "window_attn_skip_freq",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_router_score_function",
    "moe_router_pre_softmax",
    "moe_router_topk_scaling_factor",
    "moe_router_load_balancing_type",
    "moe_aux_loss_coeff",
    "moe_first_k_dense_layers",
    "mtp_num_layers",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_enable_expert_bias",
)


class HFImportError(ValueError):
    """The config.json cannot be turned into a trainc model preset (a user error, exit 2).

    ``differences``: for an architecture the model schema cannot reproduce (:data:`UNSUPPORTED`),
    each way the preset would differ from the checkpoint, one sentence each (empty otherwise)."""

    def __init__(self, message: str, differences: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.differences = differences


def _req(cfg: dict[str, Any], key: str) -> Any:
    """``cfg[key]``; a missing or null key raises :class:`HFImportError` naming the key, the
    config's model_type and every model_type that needs the key (:data:`REQUIRED_BY`)."""
    if key not in cfg or cfg[key] is None:
        mt = cfg.get("model_type")
        kinds = REQUIRED_BY.get(key, (str(mt),))
        every = len(kinds) == len(SUPPORTED)
        who = (
            "every supported model_type needs it"
            if every
            else "the model_type values that need it: " + ", ".join(kinds)
        )
        raise HFImportError(
            f"config.json has no '{key}', which model_type {mt!r} needs ({who}); "
            "add it from the checkpoint's own config.json"
        )
    return cfg[key]


def _int(value: Any, key: str, minimum: int = 1) -> int:
    """An integer of at least ``minimum`` (sizes and counts are positive unless said)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise HFImportError(f"config.json '{key}' must be an integer, got {value!r}")
    if value < minimum:
        raise HFImportError(f"config.json '{key}' must be at least {minimum}, got {value!r}")
    return int(value)


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise HFImportError(f"config.json '{key}' must be true or false, got {value!r}")
    return value


def _float(value: Any, key: str) -> float:
    """A positive finite number (``initializer_range``, ``routed_scaling_factor``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e300:
        raise HFImportError(f"config.json '{key}' must be a positive number, got {value!r}")
    return float(value)


#: DeepSeek-V3's pre-training hyper-parameters that its config.json does not state (DeepSeek-AI
#: 2024, 'DeepSeek-V3 Technical Report', arXiv 2412.19437, section 4.2).
DEEPSEEK_V3_PAPER = "DeepSeek-V3's technical report (arXiv 2412.19437, section 4.2)"
DEEPSEEK_V3_INIT_STD = 0.006


def _deepseek_router(cfg: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """DeepSeek-V3's (and Kimi K2's) router: ``scoring_func`` -> ``moe_router_score_function``,
    ``routed_scaling_factor`` -> ``moe_router_topk_scaling_factor``, ``topk_method: noaux_tc``
    -> ``moe_router_enable_expert_bias`` (auxiliary-loss-free balancing, arXiv:2408.15664),
    ``n_group`` / ``topk_group`` -> ``moe_router_num_groups`` / ``moe_router_group_topk``
    (group-limited routing; left out when every token may pick any group, e.g. Kimi K2's
    n_group 1), ``seq_aux`` -> ``moe_router_load_balancing_type``; what else differs is noted
    by name and value."""
    score = cfg.get("scoring_func")
    if score in ("softmax", "sigmoid"):
        out["moe_router_score_function"] = score
    elif score is None:
        notes.append(
            "scoring_func is unset in config.json: trainc uses moe_router_score_function "
            f"{ModelSpec.moe_router_score_function.value} (DeepSeek-V3 scores with "
            "sigmoid)"
        )
    else:
        notes.append(
            f"scoring_func {score!r} is not modelled (trainc's moe_router_score_function "
            "is softmax or sigmoid); the preset keeps "
            f"{ModelSpec.moe_router_score_function.value}"
        )
    if cfg.get("routed_scaling_factor") is not None:
        factor = _float(cfg["routed_scaling_factor"], "routed_scaling_factor")
        if factor != 1.0:  # 1.0 scales nothing: trainc's null
            out["moe_router_topk_scaling_factor"] = factor
    if cfg.get("norm_topk_prob") is False:
        notes.append(
            "norm_topk_prob false (top-k routing weights left unnormalized) is not "
            "modelled: Megatron-Core normalizes the top-k weights"
        )
    method = cfg.get("topk_method")
    if method == "noaux_tc":
        # auxiliary-loss-free balancing: a per-expert bias (e_score_correction_bias) added to the
        # scores for the top-k choice only, moved by each expert's load after every step
        out["moe_router_enable_expert_bias"] = True
    elif method not in (None, "greedy", "group_limited_greedy"):
        notes.append(
            f"topk_method {method!r} is not modelled: trainc routes each token to its "
            "top-k experts (greedy)"
        )
    groups = _int(cfg.get("n_group") or 1, "n_group")
    group_topk = _int(cfg.get("topk_group") or groups, "topk_group")
    if method != "greedy" and groups > 1 and group_topk < groups:
        # group-limited routing: each token picks its experts from its best topk_group groups
        out["moe_router_num_groups"] = groups
        out["moe_router_group_topk"] = group_topk
    out["moe_router_load_balancing_type"] = (
        "seq_aux_loss" if cfg.get("seq_aux", True) else "aux_loss"
    )
    default = ModelSpec.moe_aux_loss_coeff
    paper = (
        f"{DEEPSEEK_V3_PAPER} balances experts auxiliary-loss-free and adds only a tiny "
        "sequence-wise balance loss, alpha = 1e-4: set model.moe_aux_loss_coeff=1e-4 to "
        "follow it"
    )
    if cfg["model_type"] != "deepseek_v3":  # Kimi K2 states no pre-training alpha of its own
        paper = (
            "the expert bias balances the experts; set model.moe_aux_loss_coeff for a "
            "sequence-wise balance loss as well (DeepSeek-V3 used 1e-4, "
            f"{DEEPSEEK_V3_PAPER})"
        )
    uses = f"trainc uses moe_aux_loss_coeff {default}, the default of trainc and Megatron-Core" + (
        ", which turns the balance loss off" if default == 0 else ""
    )
    alpha = cfg.get("aux_loss_alpha")
    if alpha is None:
        notes.append(
            "the balance-loss coefficient is unset in config.json (no aux_loss_alpha): "
            f"{uses}; {paper}"
        )
    else:
        # the config's alpha (0.001 in deepseek-ai/DeepSeek-V3) is not the paper's 1e-4, the
        # weight V3 was pre-trained with, so it is not copied
        notes.append(f"aux_loss_alpha {alpha} in config.json is not copied: {uses}; {paper}")


def _moe_keys(cfg: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    mt = cfg["model_type"]
    out: dict[str, Any] = {}
    if mt == "mixtral":
        out["num_experts"] = _int(_req(cfg, "num_local_experts"), "num_local_experts")
        out["moe_ffn_hidden_size"] = _int(_req(cfg, "intermediate_size"), "intermediate_size")
    elif mt in ("qwen2_moe", "qwen3_moe"):
        out["num_experts"] = _int(_req(cfg, "num_experts"), "num_experts")
        out["moe_ffn_hidden_size"] = _int(
            _req(cfg, "moe_intermediate_size"), "moe_intermediate_size"
        )
        shared = cfg.get("shared_expert_intermediate_size")
        if shared:
            out["moe_shared_expert_intermediate_size"] = _int(
                shared, "shared_expert_intermediate_size"
            )
            notes.append("the shared expert's sigmoid gate is not modelled")
        step = _int(cfg.get("decoder_sparse_step", 1) or 1, "decoder_sparse_step")
        out["moe_layer_freq"] = step
        if step != 1:
            notes.append(
                f"decoder_sparse_step={step} makes layers i with (i+1) % {step} == 0 "
                f"sparse; trainc's moe_layer_freq counts i % {step} == 0"
            )
        if cfg.get("mlp_only_layers"):
            notes.append(f"the dense mlp_only_layers {cfg['mlp_only_layers']} are not modelled")
        # Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax over every expert, top-k, and
        # renormalize the k weights only with norm_topk_prob (false by default in both configs).
        # Megatron-Core's pre-softmax router (topk_routing_with_score_function, use_pre_softmax)
        # is the unnormalized form; its default softmax over the k logits is the normalized one.
        if not _bool(cfg.get("norm_topk_prob", False), "norm_topk_prob"):
            out["moe_router_pre_softmax"] = True
    elif mt in DEEPSEEK_LIKE:
        out["num_experts"] = _int(_req(cfg, "n_routed_experts"), "n_routed_experts")
        moe_ffn = _int(_req(cfg, "moe_intermediate_size"), "moe_intermediate_size")
        out["moe_ffn_hidden_size"] = moe_ffn
        shared = _int(cfg.get("n_shared_experts") or 0, "n_shared_experts", minimum=0)
        if shared:
            out["moe_shared_expert_intermediate_size"] = shared * moe_ffn
        out["moe_layer_freq"] = _int(cfg.get("moe_layer_freq", 1) or 1, "moe_layer_freq")
        dense = _int(cfg.get("first_k_dense_replace") or 0, "first_k_dense_replace", minimum=0)
        if dense:
            out["moe_first_k_dense_layers"] = dense
        mtp = _int(cfg.get("num_nextn_predict_layers") or 0, "num_nextn_predict_layers", minimum=0)
        if mtp:
            out["mtp_num_layers"] = mtp
            notes.append(
                f"num_nextn_predict_layers {mtp} is imported as mtp_num_layers {mtp}: "
                "multi-token prediction is built by Megatron-LM's pretrain_gpt.py only, "
                "so a spec with this preset needs engine=megatron and "
                "launch.entrypoint=megatron-lm (TRC386)"
            )
    else:
        return out
    out["moe_router_topk"] = _int(_req(cfg, "num_experts_per_tok"), "num_experts_per_tok")
    out.setdefault("moe_layer_freq", 1)
    if mt in DEEPSEEK_LIKE:
        _deepseek_router(cfg, out, notes)
    elif cfg.get("router_aux_loss_coef") is not None:
        out["moe_router_load_balancing_type"] = "aux_loss"
        out["moe_aux_loss_coeff"] = float(cfg["router_aux_loss_coef"])
    return out


def _layer_types(cfg: dict[str, Any]) -> list[str]:
    """config.json's per-layer attention kinds: ``layer_types`` when given (gpt-oss, Gemma 3 in
    recent transformers), else ``sliding_window_pattern`` P (Gemma 3's older form, default 6:
    every P-th layer full), else every layer ``sliding_attention``."""
    n = _int(cfg.get("num_hidden_layers", 0), "num_hidden_layers")
    types = cfg.get("layer_types")
    if types:
        if not isinstance(types, list) or len(types) != n:
            raise HFImportError(
                f"config.json 'layer_types' must list one kind per layer ({n}), got {types!r}"
            )
        return [str(x) for x in types]
    if "sliding_window_pattern" in cfg or cfg.get("model_type") in ("gemma3", "gemma3_text"):
        p = _int(cfg.get("sliding_window_pattern", 6), "sliding_window_pattern")
        return ["full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(n)]
    return ["sliding_attention"] * n


def window_keys(cfg: dict[str, Any], seq_length: int) -> tuple[dict[str, Any], str | None]:
    """config.json's sliding window as trainc keys: ``({"window_size": W, ...}, None)``, or
    ``({}, note)`` when the window covers the whole ``seq_length``-token sequence or no layer is
    windowed. Raises :class:`HFImportError` for a per-layer pattern Megatron-Core's int
    ``window_attn_skip_freq`` cannot state.

    * ``W = sliding_window - 1``: Hugging Face's window counts the query itself (transformers
      ``src/transformers/masking_utils.py::sliding_window_overlay``, ``kv_idx > q_idx -
      sliding_window`` on top of the causal mask: keys ``q - S + 1 .. q``), Megatron-Core's
      ``window_size = (W, 0)`` the keys to the left (0.16.1
      ``transformer/utils.py::get_sliding_window_causal_mask``: keys ``q - W .. q``).
    * ``layer_types`` (:func:`_layer_types`) -> ``window_attn_skip_freq`` N when layer i
      (0-based) is ``full_attention`` exactly when ``(i + 1) % N == 0`` (megatron-core 0.16.1
      ``is_layer_window_attention``: windowed iff ``layer_number % N != 0``, 1-based): Gemma 3's
      five sliding then one full is 6, gpt-oss's alternation 2; none full is no key."""
    w = _int(cfg["sliding_window"], "sliding_window")
    types = _layer_types(cfg)
    kinds = set(types) - {"sliding_attention", "full_attention"}
    if kinds:
        raise HFImportError(
            f"layer_types holds {sorted(kinds)}: trainc's layers are sliding_attention or "
            "full_attention only"
        )
    if "sliding_attention" not in types:
        return {}, "layer_types: every layer is full_attention, so sliding_window is unused"
    if w >= seq_length:
        return {}, (
            f"sliding-window attention ({w} tokens, the query included) covers the whole "
            f"{seq_length}-token sequence: full causal attention is the same attention"
        )
    out: dict[str, Any] = {"window_size": w - 1}
    if "full_attention" in types:
        n = types.index("full_attention") + 1
        want = [
            "full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(len(types))
        ]
        bad = next((i for i, (x, y) in enumerate(zip(types, want, strict=True)) if x != y), None)
        if bad is not None:
            raise HFImportError(
                f"layer_types is not periodic: its first full_attention layer is {n - 1} "
                f"(0-based), so window_attn_skip_freq {n} makes layer {bad} {want[bad]}, but "
                f"config.json has {types[bad]}; Megatron-Core's int window_attn_skip_freq "
                "(full attention on layers N, 2N, ...) cannot state this pattern. Fix: none in "
                "import-hf (--drop-sliding-window imports full attention on every layer)"
            )
        out["window_attn_skip_freq"] = n
    return out, None


def _sliding_window(
    cfg: dict[str, Any], seq_length: int, drop: bool, out: dict[str, Any], notes: list[str]
) -> None:
    """config.json's ``sliding_window`` (Mistral 7B v0.1: 4096) -> ``window_size`` (and
    ``window_attn_skip_freq``) in ``out``, by :func:`window_keys`; ``drop``
    (``--drop-sliding-window``) imports full causal attention instead, with a note. Nothing
    without a window or with ``use_sliding_window: false`` (Qwen2)."""
    window = cfg.get("sliding_window")
    if not window or not cfg.get("use_sliding_window", True):
        return
    if drop:
        w = _int(window, "sliding_window")
        notes.append(
            f"sliding-window attention ({w} tokens) is dropped "
            "(--drop-sliding-window): the preset attends over all "
            f"{seq_length} tokens, a different model from this checkpoint"
        )
        return
    keys, note = window_keys(cfg, seq_length)
    out.update(keys)
    if note:
        notes.append(note)


def _biases(cfg: dict[str, Any], mt: str, out: dict[str, Any], notes: list[str]) -> None:
    """HF biases -> Megatron's two switches: ``add_qkv_bias`` (the QKV projection only: Qwen2,
    whose decoder hard-codes q/k/v biases) and ``add_bias_linear`` (every linear layer: QKV,
    output projection, both MLP matrices). HF Llama's ``attention_bias`` covers q, k, v *and*
    o_proj, ``mlp_bias`` gate/up/down: both on is ``add_bias_linear``; one without the other has
    no Megatron equivalent, so the nearest is used and the difference is a note."""
    attn, mlp = bool(cfg.get("attention_bias")), bool(cfg.get("mlp_bias"))
    if attn and mlp:
        out.update(add_qkv_bias=True, add_bias_linear=True)
    elif attn:
        out["add_qkv_bias"] = True
        notes.append(
            "attention_bias true (biases on q, k, v and o_proj) is imported as "
            "add_qkv_bias (q, k, v only): Megatron has no bias switch for the output "
            "projection alone (add_bias_linear would add MLP biases too); o_proj's bias "
            "is not modelled"
        )
    elif mlp:
        notes.append(
            "mlp_bias true (biases on gate/up/down) is not imported: Megatron's only "
            "MLP bias switch, add_bias_linear, also biases every attention projection; "
            "set model.add_bias_linear=true to have them all"
        )
    elif mt.startswith("qwen2"):
        out["add_qkv_bias"] = True


def _init_std(cfg: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """``initializer_range`` -> ``init_method_std`` when it differs from the default (0.02,
    Megatron's), so that presets of models initialized with 0.02 stay free of the key."""
    if cfg.get("initializer_range") is None:
        return
    std = _float(cfg["initializer_range"], "initializer_range")
    default = ModelSpec.init_method_std
    if std != default:
        out["init_method_std"] = std
        notes.append(
            f"initializer_range {cfg['initializer_range']} is mapped to init_method_std "
            f"{std} (trainc's and Megatron's default is {default})"
        )
    if cfg["model_type"] == "deepseek_v3" and std != DEEPSEEK_V3_INIT_STD:
        notes.append(
            f"initializer_range {cfg['initializer_range']} in config.json is not the "
            f"init std DeepSeek-V3 was pre-trained with: {DEEPSEEK_V3_PAPER} gives "
            f"{DEEPSEEK_V3_INIT_STD}; set model.init_method_std={DEEPSEEK_V3_INIT_STD} "
            "to follow it"
        )


#: The Llama 3 RoPE-scaling constants that Megatron-Core 0.16.1 hard-codes: ``RotaryEmbedding``
#: (megatron/core/models/common/embeddings/rotary_pos_embedding.py) calls ``_apply_scaling(inv_freq,
#: factor=rope_scaling_factor)``, so only the factor is configurable (trainc's
#: ``rope_scaling_factor``; Megatron-LM ``--rope-scaling-factor``) and these keep their defaults.
MCORE_LLAMA3_SCALING: dict[str, float] = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

#: The ``--drop-rope-scaling`` fix, as the errors below state it.
DROP_FIX = (
    "pass --drop-rope-scaling to import plain RoPE instead (no rope_scaling_factor), "
    "which is right only for training the architecture from scratch, not for continuing "
    "this checkpoint"
)


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _describe(scaling: dict[str, Any], kind: Any) -> str:
    """``rope_scaling (rope_type yarn: factor 40, ...)``: the type and every other field."""
    fields = ", ".join(
        f"{k} {_fmt(v)}" for k, v in scaling.items() if k not in ("rope_type", "type")
    )
    return f"rope_scaling (rope_type {kind}" + (f": {fields})" if fields else ")")


def _rope_scaling(
    scaling: dict[str, Any], trained: int, seq_length: int, drop: bool, notes: list[str]
) -> float | None:
    """The preset's ``rope_scaling_factor`` for a config.json ``rope_scaling`` (None: plain RoPE).

    trainc's model schema expresses one RoPE scaling, Llama 3.1's (``rope_type: llama3``) with
    Megatron-Core's fixed :data:`MCORE_LLAMA3_SCALING`. Everything else would train a different
    RoPE from the checkpoint's and raises :class:`HFImportError` naming the fields, their values,
    what Megatron-Core uses and the fix: a ``llama3`` scaling with other constants, ``linear``
    (positions divided by the factor), ``yarn``, ``longrope`` and unknown types. ``dynamic`` (NTK)
    scaling changes nothing up to its original length, so it is a note unless ``seq_length``
    exceeds that length. ``default`` is plain RoPE. With ``drop`` every scaling is dropped
    (plain RoPE) and noted.
    """
    kind = scaling.get("rope_type") or scaling.get("type")
    if not scaling or kind == "default":
        return None
    desc = _describe(scaling, kind)
    if drop:
        notes.append(
            f"{desc} is dropped (--drop-rope-scaling): the preset trains plain RoPE, "
            "a different model from this checkpoint"
        )
        return None
    if kind == "llama3":
        if scaling.get("factor") is None:
            raise HFImportError(
                f"{desc} has no factor; Llama 3 scaling needs one (8.0 for "
                "Llama 3.1); add it to config.json or " + DROP_FIX
            )
        factor = _float(scaling["factor"], "rope_scaling.factor")
        missing = [k for k in MCORE_LLAMA3_SCALING if scaling.get(k) is None]
        differ = [
            k for k, v in MCORE_LLAMA3_SCALING.items() if k not in missing and scaling[k] != v
        ]
        if missing or differ:
            mcore = ", ".join(f"{k} {_fmt(v)}" for k, v in MCORE_LLAMA3_SCALING.items())
            what = "; ".join(
                (
                    [f"it has {', '.join(f'{k} {_fmt(scaling[k])}' for k in differ)}"]
                    if differ
                    else []
                )
                + ([f"it lacks {', '.join(missing)}"] if missing else [])
            )
            raise HFImportError(
                f"{desc} cannot be reproduced: {what}, but Megatron-Core applies Llama 3 RoPE "
                f"scaling with {mcore} fixed (RotaryEmbedding._apply_scaling; trainc's "
                "rope_scaling_factor sets only the factor), so a preset would train a different "
                "RoPE from this checkpoint's. Fix: if the checkpoint really uses Megatron-Core's "
                "values, correct config.json; otherwise " + DROP_FIX
            )
        return factor
    if kind == "dynamic":
        if seq_length > trained:
            raise HFImportError(
                f"{desc}: dynamic NTK scaling equals plain RoPE only up to {trained} tokens and "
                f"seq_length {seq_length} exceeds that; trainc's model schema has no dynamic "
                "scaling (its rope_scaling_factor is Llama 3.1's). Fix: --seq-length "
                f"{trained} or less, or " + DROP_FIX
            )
        notes.append(
            f"{desc} is not modelled: dynamic NTK scaling changes RoPE only beyond "
            f"{trained} tokens, so training at seq_length {seq_length} is unaffected; "
            "inference past that length will differ"
        )
        return None
    what = {
        "linear": "linear position interpolation (positions divided by the factor)",
        "yarn": "YaRN (rescaled frequencies and attention temperature)",
        "longrope": "LongRoPE (per-channel rescaled frequencies)",
    }.get(str(kind), "a RoPE scaling trainc does not know")
    raise HFImportError(
        f"{desc} cannot be expressed: it is {what}, and trainc's model schema has only "
        "rope_scaling_factor, Llama 3.1's scaling (rope_type llama3; Megatron-Core "
        "--use-rope-scaling). Without it the preset would train plain RoPE, a different model "
        "from this checkpoint. Fix: " + DROP_FIX
    )


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json (``text_config`` of a multimodal wrapper)."""
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else cfg


def _llama4(cfg: dict[str, Any]) -> list[str]:
    """Llama 4 (HF ``Llama4TextConfig`` / ``Llama4TextDecoderLayer``, transformers 4.51): what
    trainc's model schema cannot state, with the config's values (HF defaults when absent)."""
    t = _text(cfg)
    layers = t.get("num_hidden_layers", 48)
    out = [
        f"attention_chunk_size {t.get('attention_chunk_size', 8192)}: the RoPE layers attend "
        "within fixed chunks of that many tokens (chunked local attention); trainc's "
        "attention is full causal on every layer"
    ]
    nope = t.get("no_rope_layers") or []
    interval = t.get("no_rope_layer_interval", 4)
    no_rope = (
        [i for i, rope in enumerate(nope) if not rope]
        if nope
        else [i for i in range(layers) if (i + 1) % interval == 0]
    )
    if no_rope:
        out.append(
            f"no_rope_layers {nope} (no_rope_layer_interval {interval}): layers "
            f"{', '.join(map(str, no_rope[:3]))}, ..., {no_rope[-1]} ({len(no_rope)} of "
            f"{layers}) use no rotary embedding and full attention; trainc rotates every "
            "layer"
        )
        if t.get("attn_temperature_tuning", True):
            out.append(
                f"attn_temperature_tuning (floor_scale {t.get('floor_scale', 8192)}, "
                f"attn_scale {t.get('attn_scale', 0.1)}): the no-RoPE layers scale their "
                "queries by a function of the position; trainc has no such scaling"
            )
    if t.get("use_qk_norm", True):
        out.append(
            "use_qk_norm true: a parameter-free L2 norm of queries and keys after RoPE on "
            "the RoPE layers; trainc's qk_layernorm is a learned RMSNorm before RoPE"
        )
    out.append(
        f"num_local_experts {t.get('num_local_experts', 16)}, num_experts_per_tok "
        f"{t.get('num_experts_per_tok', 1)}: the router scales each token's input to its "
        "expert by the sigmoid of its score (Llama4TextMoe), where Megatron-Core weights "
        "the expert's output; a shared expert of intermediate_size "
        f"{t.get('intermediate_size', 8192)} runs beside it"
    )
    step = t.get("interleave_moe_layer_step", 1)
    if step != 1:
        out.append(
            f"interleave_moe_layer_step {step}: layers {step - 1}, {2 * step - 1}, ... are "
            f"MoE (i % {step} == {step - 1}) and the rest dense MLPs of "
            f"intermediate_size_mlp {t.get('intermediate_size_mlp', 16384)}; trainc's "
            f"moe_layer_freq makes layers i % {step} == 0 MoE and its dense layers have "
            "ffn_hidden_size"
        )
    scaling = t.get("rope_scaling") or {}
    if scaling:
        kind = scaling.get("rope_type") or scaling.get("type")
        fixed = ", ".join(f"{k} {_fmt(v)}" for k, v in MCORE_LLAMA3_SCALING.items())
        out.append(
            f"{_describe(scaling, kind)}: Megatron-Core applies Llama 3 scaling with {fixed} fixed"
        )
    return out


def _gpt_oss(cfg: dict[str, Any]) -> list[str]:
    """gpt-oss (HF ``GptOssConfig`` / ``modeling_gpt_oss``, transformers 4.55)."""
    out = [
        "attention sinks: every head has a learned sink logit (GptOssAttention.sinks) that "
        "joins the softmax; trainc's attention has none",
        *_window_difference(cfg),
    ]
    scaling = cfg.get("rope_scaling") or {}
    if scaling:
        out.append(
            f"{_describe(scaling, scaling.get('rope_type') or scaling.get('type'))}: "
            "trainc's model schema has no YaRN"
        )
    out += [
        f"swiglu_limit {_fmt(cfg.get('swiglu_limit', 7.0))}: the experts clamp the gate "
        "(at most the limit) and the up projection (within plus or minus the limit) and "
        "compute (up + 1) * gate * sigmoid(1.702 * gate); trainc's swiglu is "
        "silu(gate) * up",
        f"attention_bias {str(cfg.get('attention_bias')).lower()}: q, k, v and o_proj have "
        "biases; Megatron has no switch for the o_proj bias without MLP biases",
        "the experts' projections and the router carry biases (gate_up_proj_bias, "
        "down_proj_bias, router.bias); Megatron-Core's router has none",
    ]
    return out


def _window_difference(cfg: dict[str, Any]) -> list[str]:
    """The sliding window of a refused architecture as a difference only when
    :func:`window_keys` cannot state it (a pattern that is not periodic); a window it maps
    (gpt-oss's alternation, Gemma 3's five sliding then one full layer) is none."""
    if not cfg.get("sliding_window"):
        return []
    try:
        window_keys(cfg, 1 << 62)  # any window is shorter than this sequence
    except HFImportError as e:
        return [str(e)]
    return []


def _gemma3(cfg: dict[str, Any]) -> list[str]:
    """Gemma 3 (HF ``Gemma3TextConfig`` defaults for what its sparse ``text_config`` leaves out,
    ``modeling_gemma3``, transformers 4.50)."""
    t = _text(cfg)
    h, d = t.get("hidden_size", 2304), t.get("head_dim", 256)
    scaling = t.get("rope_scaling") or {}
    out = [
        f"hidden_activation {t.get('hidden_activation', 'gelu_pytorch_tanh')}: a gated MLP "
        "with the tanh GELU (GeGLU); trainc's gated MLP is SwiGLU and its gelu is ungated",
        *_window_difference(
            {"sliding_window": 4096, "num_hidden_layers": 26, "model_type": "gemma3_text", **t}
        ),
        f"rope_theta {_fmt(t.get('rope_theta', 1_000_000.0))} on the global layers and "
        f"rope_local_base_freq {_fmt(t.get('rope_local_base_freq', 10_000.0))} on the "
        "sliding-window layers: trainc has one rotary_base",
    ]
    if scaling:
        out.append(
            f"{_describe(scaling, scaling.get('rope_type') or scaling.get('type'))} on "
            "the global layers only: trainc's model schema has no linear RoPE scaling"
        )
    out += [
        f"query_pre_attn_scalar {t.get('query_pre_attn_scalar', 256)}: attention scores are "
        f"scaled by {t.get('query_pre_attn_scalar', 256)}^-0.5, not head_dim {d}^-0.5",
        f"the embedding output is multiplied by sqrt(hidden_size) = sqrt({h}) "
        "(Gemma3TextScaledWordEmbedding); trainc's is not",
        "four RMSNorms per layer (input, post-attention, pre-feedforward, post-feedforward); "
        "trainc's pre-norm layer has two",
    ]
    return out


#: HF ``model_type`` values import-hf recognises but refuses: what a preset cannot reproduce of
#: each, listed by :class:`HFImportError` (``differences``).
UNSUPPORTED: dict[str, Any] = {
    "llama4": _llama4,
    "llama4_text": _llama4,
    "gpt_oss": _gpt_oss,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
}


def convert(
    cfg: dict[str, Any],
    *,
    seq_length: int | None = None,
    drop_rope_scaling: bool = False,
    drop_sliding_window: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Map a parsed HF config.json to trainc model keys; returns ``(keys, notes)``.

    ``notes`` lists, one statement each, what the preset does not model, what it maps with a
    caveat and which training settings the config leaves unset (and the value trainc uses).
    Raises :class:`HFImportError` for an unsupported ``model_type`` (the message lists the
    supported ones), a missing or malformed key, or a ``rope_scaling`` that the preset would not
    reproduce (see :func:`_rope_scaling`; ``drop_rope_scaling`` imports plain RoPE instead),
    or a per-layer sliding-window pattern that is not periodic (:func:`window_keys`;
    ``drop_sliding_window`` imports full attention instead).
    """
    if not isinstance(cfg, dict):
        raise HFImportError("config.json must hold a JSON object")
    if seq_length is not None and seq_length < 1:
        raise HFImportError(f"seq_length must be a positive number of tokens, got {seq_length}")
    mt = cfg.get("model_type")
    if mt in UNSUPPORTED:
        arch = ", ".join(cfg.get("architectures") or []) or str(mt)
        diffs = tuple(UNSUPPORTED[mt](cfg))
        raise HFImportError(
            f"model_type {mt!r} ({arch}) cannot be imported: a preset would train a different "
            "model from this checkpoint. What trainc's model schema cannot state: "
            + "; ".join(f"({i}) {x}" for i, x in enumerate(diffs, 1))
            + ". Fix: none in import-hf; a hand-written preset trains trainc's architecture, "
            "not this one",
            diffs,
        )
    if mt not in SUPPORTED:
        arch = ", ".join(cfg.get("architectures") or []) or "none given"
        raise HFImportError(
            f"unsupported model_type {mt!r} (architectures: {arch}); supported model_type values: "
            + "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        )
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise HFImportError(
            f"hidden_act {act!r} is not supported for {mt} (expected 'silu', i.e. a SwiGLU MLP)"
        )
    heads = _int(_req(cfg, "num_attention_heads"), "num_attention_heads")
    hidden = _int(_req(cfg, "hidden_size"), "hidden_size")
    max_pos = _int(_req(cfg, "max_position_embeddings"), "max_position_embeddings")
    scaling = cfg.get("rope_scaling") or {}
    if not isinstance(scaling, dict):
        raise HFImportError(
            f"config.json 'rope_scaling' must be an object or null, got {scaling!r}"
        )
    trained = _int(
        scaling.get("original_max_position_embeddings") or max_pos,
        "original_max_position_embeddings",
    )
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
    if mt in DEEPSEEK_LIKE:  # multi-head latent attention: no key/value heads of its own
        del out["num_query_groups"]
        q_lora = cfg.get("q_lora_rank")
        out.update(
            multi_latent_attention=True,
            q_lora_rank=_int(q_lora, "q_lora_rank") if q_lora else None,
            kv_lora_rank=_int(_req(cfg, "kv_lora_rank"), "kv_lora_rank"),
            qk_head_dim=_int(_req(cfg, "qk_nope_head_dim"), "qk_nope_head_dim"),
            qk_pos_emb_head_dim=_int(_req(cfg, "qk_rope_head_dim"), "qk_rope_head_dim"),
            v_head_dim=_int(_req(cfg, "v_head_dim"), "v_head_dim"),
        )
    elif (head_dim := cfg.get("head_dim")) is not None and _int(
        head_dim, "head_dim"
    ) * heads != hidden:
        out["kv_channels"] = _int(head_dim, "head_dim")
    if str(mt).startswith("qwen3"):  # q_norm / k_norm: RMSNorm over head_dim, before RoPE
        out["qk_layernorm"] = True
    notes: list[str] = []
    _biases(cfg, str(mt), out, notes)
    _init_std(cfg, out, notes)
    out.update(_moe_keys(cfg, notes))
    if seq_length is None:
        source = (
            "rope_scaling.original_max_position_embeddings"
            if scaling.get("original_max_position_embeddings")
            else "max_position_embeddings"
        )
        notes.append(
            f"seq_length (the training sequence length) is not in config.json: trainc "
            f"uses {out['seq_length']} = min({source} {trained}, {SEQ_LENGTH_CAP}); set "
            "--seq-length N or model.seq_length=N for another"
        )
    if out["seq_length"] > max_pos:
        raise HFImportError(
            f"seq_length {out['seq_length']} exceeds the config's max_position_embeddings "
            f"{max_pos}, the longest sequence the checkpoint's positions cover (Megatron-LM "
            f"refuses it, TRC219): pass --seq-length {max_pos} or less"
        )
    _sliding_window(cfg, out["seq_length"], drop_sliding_window, out, notes)
    factor = _rope_scaling(scaling, trained, out["seq_length"], drop_rope_scaling, notes)
    if factor is not None:
        out["rope_scaling_factor"] = factor  # Megatron's --use-rope-scaling --rope-scaling-factor
    return {k: out[k] for k in KEY_ORDER if k in out}, notes


def render(keys: dict[str, Any], notes: list[str], source: str, cfg: dict[str, Any]) -> str:
    """The preset YAML text: a source comment, the notes (one ``# Note:`` comment each, wrapped;
    the choice of ``seq_length`` is one when it was not given), then one ``key: value`` line per
    key."""
    arch = ", ".join(cfg.get("architectures") or []) or cfg["model_type"]
    name = cfg.get("_name_or_path")
    lines = [
        f"# Imported by trainc {__version__} import-hf from {source}"
        + (f" ({name})" if name else "")
        + f": model_type {cfg['model_type']}, {arch}."
    ]
    for note in notes:
        lines.extend(
            textwrap.wrap(
                f"Note: {note}.",
                width=97,
                initial_indent="# ",
                subsequent_indent="#   ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    for k, v in keys.items():
        lines.append(yaml.safe_dump({k: v}, default_flow_style=False).strip())
    return "\n".join(lines) + "\n"


def import_hf(
    path: str | Path,
    *,
    seq_length: int | None = None,
    drop_rope_scaling: bool = False,
    drop_sliding_window: bool = False,
) -> str:
    """Read a HF ``config.json`` (file path) and return the preset YAML text."""
    return import_hf_with_notes(
        path,
        seq_length=seq_length,
        drop_rope_scaling=drop_rope_scaling,
        drop_sliding_window=drop_sliding_window,
    )[0]


def import_hf_with_notes(
    path: str | Path,
    *,
    seq_length: int | None = None,
    drop_rope_scaling: bool = False,
    drop_sliding_window: bool = False,
) -> tuple[str, list[str]]:
    """Read a HF ``config.json`` (file path); return the preset YAML text and its notes (the
    ``# Note:`` comments of its header, unwrapped; the CLI also prints them on stderr)."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise HFImportError(f"cannot read {p}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HFImportError(f"{p} is not valid JSON: {e}") from None
    keys, notes = convert(
        cfg,
        seq_length=seq_length,
        drop_rope_scaling=drop_rope_scaling,
        drop_sliding_window=drop_sliding_window,
    )
    return render(keys, notes, p.name, cfg), notes
