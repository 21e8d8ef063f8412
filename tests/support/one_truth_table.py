"""The one mapping table of the cross-artifact test (issue 11, "one truth"): every semantic setting
of a plan, and how to read it from each artifact trainc writes.

Columns of one :class:`Setting`:

* ``spec``  - the normalized spec in ``plan.json`` (``spec``) or its ``derived`` values: what the
  user asked for;
* ``lm``    - ``megatron_args.txt`` (Megatron-LM ``pretrain_gpt.py`` flags, core_v0.19.0): the
  flag, its argparse type, and Megatron-LM's own default when the flag is absent (from
  ``megatron/training/arguments.py``; a few values are derived by ``validate_args``, written as a
  function of the other flags);
* ``core``  - ``megatron_core.yaml`` (Megatron-Core 0.16.1 keyword arguments, group/key);
* ``ds``    - ``ds_config.json`` (DeepSpeed 0.19.8), a dotted path.

A column may hold several readers (one setting that appears under several keys, e.g. the peak lr
in ``OptimizerConfig.lr`` and ``OptimizerParamScheduler.max_lr``): all must agree. ``when``
limits a row to the plans where the setting means something (Adam betas with optimizer=adam).
A reader returns :data:`NA` where the artifact has no such setting by construction (DeepSpeed's
constant schedule has no decay steps); that is stated in the reader, never inferred.

Every key an artifact writes is either read by a row here or listed in one of the ``*_ENGINE_ONLY``
sets with the reason; :func:`check` (run by tests/unit/compiler/targets/test_one_truth.py) fails
on a key in neither.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml


class _NA:
    def __repr__(self) -> str:
        return "NA"


#: "this artifact has no such setting by construction" (skipped in the comparison).
NA = _NA()


@dataclass(frozen=True)
class Reader:
    """Reads one value from one artifact; ``keys`` are the artifact keys it consumes."""

    keys: tuple[Any, ...]
    read: Callable[[Any], Any]
    lm_default: Any = NA
    """F/B readers: the Megatron-LM default assumed for an absent flag (NA: not one flag)."""


@dataclass(frozen=True)
class Setting:
    """One semantic setting and its readers per artifact."""

    name: str
    spec: tuple[Reader, ...] = ()
    lm: tuple[Reader, ...] = ()
    core: tuple[Reader, ...] = ()
    ds: tuple[Reader, ...] = ()
    fsdp: tuple[Reader, ...] = ()
    """plan.json ``engines.fsdp`` (what the FSDP2 worker builds), a dotted path."""
    tt: tuple[Reader, ...] = ()
    """``torchtitan_args.txt`` (torchtitan 0.3.0 overrides), a flag."""
    when: Callable[[dict[str, Any]], bool] = field(default=lambda plan: True)
    approx: bool = False  # compare floats with math.isclose (derived ratios only)


# --- artifacts parsed ------------------------------------------------------------------------


def parse_megatron_args(text: str) -> dict[str, Any]:
    """``megatron_args.txt`` -> {flag: value string, or True for a flag without value}. Comment
    lines start with ``#``; a flag appears once."""
    out: dict[str, Any] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("#registry "):  # what the registry function must set, as JSON
            _, field, value = line.split(" ", 2)
            for path, leaf in leaves(json.loads(value)).items():
                out[f"registry:{field}.{path}"] = leaf
            continue
        if not line.strip() or line.startswith("#"):
            continue
        if last is not None and not line.startswith("--") and " " not in line:
            out[last] = f"{out[last]} {line}"  # a further value of a multi-valued flag
            continue
        flag, _, value = line.partition(" ")
        last = flag
        assert flag.startswith("--"), line
        assert flag not in out, f"{flag} twice in megatron_args.txt"
        out[flag] = value if value else True
    return out


def leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a JSON value as {dotted.path: value} (list items by index)."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return {prefix: obj}
    out: dict[str, Any] = {}
    for k, v in items:
        out |= leaves(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def core_keys(core: dict[str, Any]) -> set[tuple[str, str]]:
    """(group, key) of every megatron_core.yaml entry (``callables`` nested one level more)."""
    out = set()
    for group, kw in core.items():
        for key, val in kw.items():
            if group == "callables":
                out |= {(f"callables.{key}", k) for k in val}
            else:
                out.add((group, key))
    return out


# --- reader constructors ---------------------------------------------------------------------


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def S(path: str, conv: Callable[[Any], Any] = lambda v: v) -> Reader:
    """plan.json ``spec.<path>`` (``derived.<key>`` when path starts with ``derived.``)."""
    return Reader(
        (), lambda plan: conv(_dig(plan, path if path.startswith("derived.") else f"spec.{path}"))
    )


def SF(fn: Callable[[dict[str, Any]], Any]) -> Reader:
    """A value computed from the whole plan.json (spec and derived)."""
    return Reader((), fn)


def F(flag: str, typ: Callable[[str], Any], default: Any) -> Reader:
    """A Megatron-LM flag with a value; ``default`` when absent (Megatron-LM's argparse default,
    or a function of the parsed flags for what validate_args derives)."""

    def read(a: dict[str, Any]) -> Any:
        if flag in a:
            assert a[flag] is not True, f"{flag} without a value"
            return typ(a[flag])
        return default(a) if callable(default) else default

    return Reader((flag,), read, default)


def B(flag: str, negate: bool = False) -> Reader:
    """A Megatron-LM store_true flag (``negate``: a store_false flag such as
    --disable-bias-linear); absent = Megatron-LM's default."""

    def read(a: dict[str, Any]) -> bool:
        if flag in a:
            assert a[flag] is True, f"{flag} takes no value, has {a[flag]!r}"
        return (flag in a) != negate

    return Reader((flag,), read, negate)


def LMC(value: Any) -> Reader:
    """A Megatron-LM setting without a flag: its fixed value in pretrain_gpt.py (no key)."""
    return Reader((), lambda a: value)


def C(group: str, key: str, conv: Callable[[Any], Any] = lambda v: v) -> Reader:
    """megatron_core.yaml ``group.key``."""
    return Reader(((group, key),), lambda c: conv(c[group][key]))


def CO(group: str, key: str, absent: Any, conv: Callable[[Any], Any] = lambda v: v) -> Reader:
    """An optional megatron_core.yaml ``group.key``: ``absent`` (the library default) when the
    builder leaves it out (the FP8/FP4 and precision-aware keys of an all-BF16 plan)."""
    return Reader(((group, key),), lambda c: conv(c[group].get(key, absent)))


def D(path: str, conv: Callable[[Any], Any] = lambda v: v, absent: Any = None) -> Reader:
    """ds_config.json leaf at ``path``; ``absent`` (a value, or NA) when the key is not there
    (None: the key must be there)."""

    def read(d: dict[str, Any]) -> Any:
        try:
            v = _dig(d, path)
        except (KeyError, IndexError):
            assert absent is not None, f"ds_config.json has no {path}"
            return absent
        return conv(v)

    return Reader((path,), read)


def DF(paths: tuple[str, ...], fn: Callable[[dict[str, Any]], Any]) -> Reader:
    """A ds_config.json value computed from several leaves (``paths`` it reads)."""
    return Reader(paths, fn)


def LF(flags: tuple[str, ...], fn: Callable[[dict[str, Any]], Any]) -> Reader:
    """A Megatron-LM value computed from several flags (what validate_args derives)."""
    return Reader(flags, fn)


def CF(keys: tuple[tuple[str, str], ...], fn: Callable[[dict[str, Any]], Any]) -> Reader:
    """A megatron_core.yaml value computed from several keys."""
    return Reader(keys, fn)


# --- conversions -----------------------------------------------------------------------------

NORM = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
POS = {"rope": "rope", "learned": "learned_absolute"}
DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DS_OPTIMIZER = {"AdamW": "adam", "SGD": "sgd"}
DS_SCHEDULER = {"WarmupLR": "constant", "WarmupCosineLR": "cosine", "WarmupDecayLR": "linear"}
ACT = {"torch.nn.functional.silu": "swiglu", "torch.nn.functional.gelu": "gelu"}


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def padded_vocab(vocab: int, divisor: int, tp: int) -> int:
    """Megatron-LM ``megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding``
    (core_v0.19.0): round up to a multiple of divisor x tp."""
    multiple = divisor * tp
    return -(-vocab // multiple) * multiple


def _lm_precision(a: dict[str, Any]) -> str:
    return "bf16" if "--bf16" in a else "fp16" if "--fp16" in a else "fp32"


def _core_precision(group: str) -> Reader:
    return CF(
        ((group, "bf16"), (group, "fp16")),
        lambda c: "bf16" if c[group]["bf16"] else "fp16" if c[group]["fp16"] else "fp32",
    )


def _ds_precision(d: dict[str, Any]) -> str:
    if d.get("bf16", {}).get("enabled"):
        assert not d.get("fp16", {}).get("enabled")
        return "bf16"
    return "fp16" if d.get("fp16", {}).get("enabled") else "fp32"


def _lm_activation(a: dict[str, Any]) -> str:
    # Megatron-LM: --swiglu = gated_linear_unit + silu; otherwise gelu (core_v0.19.0
    # core_transformer_config_from_args)
    return "swiglu" if "--swiglu" in a else "gelu"


def _core_activation(c: dict[str, Any]) -> str:
    act = ACT[c["callables"]["TransformerConfig"]["activation_func"]]
    glu = c["TransformerConfig"]["gated_linear_unit"]
    assert glu == (act == "swiglu"), (glu, act)
    return act


def _lm_vpp(a: dict[str, Any]) -> int | None:
    """Megatron-LM's virtual_pipeline_model_parallel_size (validate_args): from
    --num-layers-per-virtual-pipeline-stage (even split) or
    --num-virtual-stages-per-pipeline-rank."""
    if "--num-virtual-stages-per-pipeline-rank" in a:
        assert "--num-layers-per-virtual-pipeline-stage" not in a
        return int(a["--num-virtual-stages-per-pipeline-rank"])
    if "--num-layers-per-virtual-pipeline-stage" in a:
        pp = int(a.get("--pipeline-model-parallel-size", 1))
        per_stage = int(a["--num-layers"]) // pp
        lpvs = int(a["--num-layers-per-virtual-pipeline-stage"])
        assert per_stage % lpvs == 0
        return per_stage // lpvs
    return None


_VPP_FLAGS = ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage")


def _lm_overlap_p2p(a: dict[str, Any]) -> bool:
    """Megatron-LM: overlapped p2p unless --no-overlap-p2p-communication, and only with
    interleaving (validate_args sets overlap_p2p_comm False without a virtual pipeline)."""
    return "--no-overlap-p2p-communication" not in a and _lm_vpp(a) is not None


def _sched(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return d["scheduler"]["type"], d["scheduler"]["params"]


def _ds_warmup_iters(d: dict[str, Any]) -> int:
    """Warm-up steps the DeepSpeed scheduler runs: none when the warm-up starts at the peak,
    else ``max(2, warmup_num_steps)`` (deepspeed 0.19.8 ``runtime/lr_schedules.py``: WarmupLR,
    WarmupDecayLR and WarmupCosineLR all set ``self.warmup_num_steps = max(2, ...)``)."""
    kind, p = _sched(d)
    lr = d["optimizer"]["params"]["lr"]
    start = p["warmup_min_ratio"] * lr if kind == "WarmupCosineLR" else p["warmup_min_lr"]
    return 0 if start == lr else max(2, p["warmup_num_steps"])


def _ds_warmup_init(d: dict[str, Any]) -> float:
    kind, p = _sched(d)
    if kind == "WarmupCosineLR":
        return p["warmup_min_ratio"] * d["optimizer"]["params"]["lr"]
    return p["warmup_min_lr"]


def _ds_min_lr(d: dict[str, Any]) -> Any:
    kind, p = _sched(d)
    if kind == "WarmupCosineLR":
        return p["cos_min_ratio"] * d["optimizer"]["params"]["lr"]
    if kind == "WarmupDecayLR":
        return p["warmup_min_lr"]  # WarmupDecayLR decays to warmup_min_lr
    return NA  # WarmupLR: constant after the warm-up, no final lr


def _ds_decay_iters(d: dict[str, Any]) -> Any:
    kind, p = _sched(d)
    return NA if kind == "WarmupLR" else p["total_num_steps"]


def _ds_peak_in_scheduler(d: dict[str, Any]) -> Any:
    kind, p = _sched(d)
    return p["warmup_max_lr"] if "warmup_max_lr" in p else NA  # WarmupCosineLR: optimizer's lr


def _ds_offload(key: str) -> Reader:
    return DF(
        (f"zero_optimization.{key}.device",),
        lambda d: d["zero_optimization"].get(key, {}).get("device", "none"),
    )


_SCHED_P = "scheduler.params."
_ADAM = lambda plan: plan["spec"]["training"]["optimizer"] == "adam"  # noqa: E731
_SGD = lambda plan: plan["spec"]["training"]["optimizer"] == "sgd"  # noqa: E731
_MOE = lambda plan: plan["spec"]["model"]["num_experts"] is not None  # noqa: E731
_FLEX = lambda plan: (  # noqa: E731
    plan["spec"]["model"]["num_experts"] is not None
    and plan["spec"]["model"]["moe_token_dispatcher_type"] == "flex"
)
_ROPE = lambda plan: plan["spec"]["model"]["position_embedding"] == "rope"  # noqa: E731
_MLA = lambda plan: plan["spec"]["model"]["multi_latent_attention"]  # noqa: E731
_WSD = lambda plan: plan["spec"]["training"]["lr_decay_style"] == "WSD"  # noqa: E731
_WARMUP = lambda plan: plan["spec"]["training"]["lr_warmup_iters"] > 0  # noqa: E731
_FP8 = lambda plan: plan["spec"]["training"]["fp8_format"] != "none"  # noqa: E731
_FP4 = lambda plan: plan["spec"]["training"]["fp4_format"] != "none"  # noqa: E731
_STATES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
#: OptimizerConfig's torch dtype names -> the spec's (Megatron-LM's) spelling
_STATE_NAME = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "uint8": "fp8"}
_TC, _GPT, _OPT = "TransformerConfig", "GPTModel", "OptimizerConfig"
_SCH = "OptimizerParamScheduler"
_DDP, _IMP, _FB = (
    "DistributedDataParallelConfig",
    "initialize_model_parallel",
    "forward_backward_func",
)


def _pattern(freq: int | list[int], layers: int) -> list[int]:
    """Megatron-Core's moe_layer_freq (an int: i % freq == 0; a list: the pattern) as a list."""
    return list(freq) if isinstance(freq, list) else [int(i % freq == 0) for i in range(layers)]


def _spec_moe_pattern(plan: dict[str, Any]) -> list[int]:
    m = plan["spec"]["model"]
    k, freq = m["moe_first_k_dense_layers"], m["moe_layer_freq"]
    return [int(i >= k and i % freq == 0) for i in range(m["num_layers"])]


def _lm_moe_pattern(a: dict[str, Any]) -> list[int]:
    """--moe-layer-freq as Megatron-LM's moe_freq_type reads it: an int, or a list expression
    of ``[v]*n`` terms joined by ``+`` (parsed here, not evaluated)."""
    text, layers = a.get("--moe-layer-freq", "1"), int(a["--num-layers"])
    if not text.startswith("("):
        return _pattern(int(text), layers)
    out: list[int] = []
    for term in text.strip("()").split("+"):
        value, count = term.split("*")
        out += [int(value.strip("[]"))] * int(count)
    return out


def _core_moe_pattern(c: dict[str, Any]) -> list[int]:
    return _pattern(c[_TC]["moe_layer_freq"], c[_TC]["num_layers"])


def _moe_row(
    name: str,
    flag: str,
    typ: Callable[[str], Any],
    default: Any,
    conv: Callable[[Any], Any] = lambda v: v,
) -> Setting:
    return Setting(
        name,
        spec=(S(f"model.{name}", conv),),
        lm=(F(flag, typ, default),),
        core=(C(_TC, name, conv),),
        when=_MOE,
    )


def _parallel_row(
    name: str, flag: str, core_key: str, default: Any = 1, spec: Reader | None = None
) -> Setting:
    return Setting(
        name,
        spec=(spec or S(f"derived.{name}"),),
        lm=(F(flag, int, default),),
        core=(C(_TC, core_key), C(_IMP, core_key)),
    )


# --- the table -------------------------------------------------------------------------------

TABLE: tuple[Setting, ...] = (
    # model shape
    Setting(
        "num_layers",
        spec=(S("model.num_layers"),),
        lm=(F("--num-layers", int, None),),
        core=(C(_TC, "num_layers"),),
    ),
    Setting(
        "hidden_size",
        spec=(S("model.hidden_size"),),
        lm=(F("--hidden-size", int, None),),
        core=(C(_TC, "hidden_size"),),
    ),
    Setting(
        "num_attention_heads",
        spec=(S("model.num_attention_heads"),),
        lm=(F("--num-attention-heads", int, None),),
        core=(C(_TC, "num_attention_heads"),),
    ),
    # Megatron-LM: --num-query-groups counts only with --group-query-attention; MHA otherwise
    Setting(
        "num_query_groups",
        spec=(S("model.num_query_groups"),),
        lm=(
            LF(
                ("--group-query-attention", "--num-query-groups", "--num-attention-heads"),
                lambda a: (
                    int(a["--num-query-groups"])
                    if "--group-query-attention" in a
                    else int(a["--num-attention-heads"])
                ),
            ),
        ),
        core=(C(_TC, "num_query_groups"),),
    ),
    Setting(
        "ffn_hidden_size",
        spec=(S("model.ffn_hidden_size"),),
        lm=(F("--ffn-hidden-size", int, None),),
        core=(C(_TC, "ffn_hidden_size"),),
    ),
    Setting(
        "kv_channels",
        spec=(S("model.kv_channels"),),
        lm=(F("--kv-channels", int, None),),
        core=(C(_TC, "kv_channels"),),
    ),
    Setting(
        "seq_length",
        spec=(S("model.seq_length"),),
        lm=(F("--seq-length", int, None),),
        core=(C(_FB, "seq_length"), C(_FB, "decoder_seq_length")),
    ),
    Setting(
        "max_position_embeddings",
        spec=(S("model.max_position_embeddings"),),
        lm=(F("--max-position-embeddings", int, None),),
        core=(C(_GPT, "max_sequence_length"),),
    ),
    Setting(
        "activation",
        spec=(S("model.activation"),),
        lm=(LF(("--swiglu",), _lm_activation),),
        core=(
            CF(
                ((_TC, "gated_linear_unit"), ("callables.TransformerConfig", "activation_func")),
                _core_activation,
            ),
        ),
    ),
    Setting(
        "normalization",
        spec=(S("model.normalization", NORM.get),),
        lm=(F("--normalization", str, "LayerNorm"),),
        core=(C(_TC, "normalization"),),
    ),
    Setting(
        "norm_epsilon",
        spec=(S("model.norm_epsilon", float),),
        lm=(F("--norm-epsilon", float, 1e-5),),
        core=(C(_TC, "layernorm_epsilon"),),
    ),
    Setting(
        "add_bias_linear",
        spec=(S("model.add_bias_linear"),),
        lm=(B("--disable-bias-linear", negate=True),),
        core=(C(_TC, "add_bias_linear"),),
    ),
    Setting(
        "add_qkv_bias",
        spec=(S("model.add_qkv_bias"),),
        lm=(B("--add-qkv-bias"),),
        core=(C(_TC, "add_qkv_bias"),),
    ),
    Setting(
        "init_method_std",
        spec=(S("model.init_method_std", float),),
        lm=(F("--init-method-std", float, 0.02),),
        core=(C(_TC, "init_method_std"),),
    ),
    Setting(
        "hidden_dropout",
        spec=(S("model.hidden_dropout", float),),
        lm=(F("--hidden-dropout", float, 0.1),),
        core=(C(_TC, "hidden_dropout"),),
    ),
    Setting(
        "attention_dropout",
        spec=(S("model.attention_dropout", float),),
        lm=(F("--attention-dropout", float, 0.1),),
        core=(C(_TC, "attention_dropout"),),
    ),
    Setting(
        "untie_embeddings_and_output_weights",
        spec=(S("model.untie_embeddings_and_output_weights"),),
        lm=(B("--untie-embeddings-and-output-weights"),),
        core=(C(_GPT, "share_embeddings_and_output_weights", lambda v: not v),),
    ),
    # vocabulary: the tokenizer has vocab_size tokens (NullTokenizer >= core_v0.18.0), padded
    # by Megatron-LM to a multiple of make_vocab_size_divisible_by x tp
    Setting("vocab_size", spec=(S("model.vocab_size"),), lm=(F("--vocab-size", int, None),)),
    Setting(
        "tokenizer",
        lm=(F("--tokenizer-type", str, None),),
        core=(),
        spec=(SF(lambda plan: "NullTokenizer"),),
    ),
    Setting(
        "make_vocab_size_divisible_by",
        spec=(S("model.make_vocab_size_divisible_by"),),
        lm=(F("--make-vocab-size-divisible-by", int, 128),),
    ),
    Setting(
        "padded_vocab_size",
        spec=(S("derived.padded_vocab_size"),),
        lm=(
            LF(
                ("--vocab-size", "--make-vocab-size-divisible-by", "--tensor-model-parallel-size"),
                lambda a: padded_vocab(
                    int(a["--vocab-size"]),
                    int(a.get("--make-vocab-size-divisible-by", 128)),
                    int(a.get("--tensor-model-parallel-size", 1)),
                ),
            ),
        ),
        core=(C(_GPT, "vocab_size"),),
    ),
    # position embedding / RoPE
    Setting(
        "position_embedding",
        spec=(S("model.position_embedding", POS.get),),
        lm=(F("--position-embedding-type", str, "learned_absolute"),),
        core=(C(_GPT, "position_embedding_type"),),
    ),
    Setting(
        "rotary_base",
        spec=(S("model.rotary_base"),),
        lm=(F("--rotary-base", int, 10000),),
        core=(C(_GPT, "rotary_base"),),
        when=_ROPE,
    ),
    Setting(
        "rotary_percent",
        spec=(S("model.rotary_percent", float),),
        lm=(F("--rotary-percent", float, 1.0),),
        core=(C(_GPT, "rotary_percent"),),
        when=_ROPE,
    ),
    Setting(
        "rope_scaling",
        spec=(S("model.rope_scaling_factor", lambda v: v is not None),),
        lm=(B("--use-rope-scaling"),),
        core=(C(_GPT, "rope_scaling"),),
    ),
    Setting(
        "rope_scaling_factor",
        spec=(S("model.rope_scaling_factor", _opt_float),),
        lm=(F("--rope-scaling-factor", float, 8.0),),
        core=(C(_GPT, "rope_scaling_factor"),),
        when=lambda plan: plan["spec"]["model"]["rope_scaling_factor"] is not None,
    ),
    # multi-head latent attention (MLATransformerConfig; plain RoPE, no fused RoPE kernel)
    Setting(
        "multi_latent_attention",
        spec=(S("model.multi_latent_attention"),),
        lm=(B("--multi-latent-attention"),),
        core=(CO(_TC, "multi_latent_attention", False),),
    ),
    *(
        Setting(
            key,
            spec=(S(f"model.{key}"),),
            lm=(F(flag, int, default),),
            core=(C(_TC, key),),
            when=_MLA,
        )
        for key, flag, default in (
            ("q_lora_rank", "--q-lora-rank", None),
            ("kv_lora_rank", "--kv-lora-rank", 32),
            ("qk_head_dim", "--qk-head-dim", 128),
            ("qk_pos_emb_head_dim", "--qk-pos-emb-head-dim", 64),
            ("v_head_dim", "--v-head-dim", 128),
        )
    ),
    Setting(
        "mla_rope_type",
        spec=(SF(lambda plan: "rope"),),
        lm=(F("--rope-type", str, None),),
        core=(C(_TC, "rope_type"),),
        when=_MLA,
    ),
    Setting(
        "mla_rope_fusion",
        spec=(SF(lambda plan: False),),
        lm=(B("--no-rope-fusion", negate=True),),
        core=(C(_TC, "apply_rope_fusion"),),
        when=_MLA,
    ),
    # the query / KV latent RMSNorms (q_layernorm / kv_layernorm) exist only with qk_layernorm
    Setting(
        "mla_qk_layernorm",
        spec=(SF(lambda plan: True),),
        lm=(B("--qk-layernorm"),),
        core=(C(_TC, "qk_layernorm"),),
        when=_MLA,
    ),
    Setting(
        "mla_rotary_base",
        spec=(S("model.rotary_base"),),
        lm=(F("--rotary-base", int, 10000),),
        core=(C(_TC, "rotary_base"),),
        when=_MLA,
    ),
    Setting(
        "mla_rotary_percent",
        spec=(S("model.rotary_percent", float),),
        lm=(F("--rotary-percent", float, 1.0),),
        core=(C(_TC, "rotary_percent"),),
        when=_MLA,
    ),
    # MoE router and dispatcher
    Setting(
        "num_experts",
        spec=(S("model.num_experts"),),
        lm=(F("--num-experts", int, None),),
        core=(CF(((_TC, "num_moe_experts"),), lambda c: c[_TC].get("num_moe_experts")),),
    ),
    _moe_row("moe_router_topk", "--moe-router-topk", int, 2),
    Setting(
        "moe_ffn_hidden_size",
        spec=(S("model.moe_ffn_hidden_size"),),
        # Megatron-LM: None -> ffn_hidden_size (validate_args)
        lm=(F("--moe-ffn-hidden-size", int, lambda a: int(a["--ffn-hidden-size"])),),
        core=(C(_TC, "moe_ffn_hidden_size"),),
        when=_MOE,
    ),
    # the per-layer MoE pattern (1 = MoE): moe_layer_freq with moe_first_k_dense_layers, an
    # int or Megatron-LM's "([0]*k+[1]*n)" list expression
    Setting(
        "moe_layer_pattern",
        spec=(SF(_spec_moe_pattern),),
        lm=(LF(("--moe-layer-freq",), _lm_moe_pattern),),
        core=(CF(((_TC, "moe_layer_freq"),), _core_moe_pattern),),
        when=_MOE,
    ),
    # sliding-window attention: keys left of each query, Megatron-LM's tuple_type "w,0" and
    # Megatron-Core's (w, 0) (a list in JSON / YAML); None = full causal attention
    Setting(
        "window_size",
        spec=(S("model.window_size"),),
        lm=(F("--window-size", lambda v: int(v.split(",")[0]), None),),
        core=(CO(_TC, "window_size", None, lambda v: v if v is None else v[0]),),
    ),
    Setting(
        "window_size_right",
        spec=(SF(lambda plan: 0 if plan["spec"]["model"]["window_size"] is not None else None),),
        lm=(F("--window-size", lambda v: int(v.split(",")[1]), None),),
        core=(CO(_TC, "window_size", None, lambda v: v if v is None else v[1]),),
    ),
    Setting(
        "window_attn_skip_freq",
        spec=(S("model.window_attn_skip_freq"),),
        lm=(F("--window-attn-skip-freq", int, None),),
        core=(CO(_TC, "window_attn_skip_freq", None),),
    ),
    Setting(
        "mtp_num_layers",
        spec=(S("model.mtp_num_layers"),),
        lm=(F("--mtp-num-layers", int, None),),
        core=(CO(_TC, "mtp_num_layers", None),),
    ),
    Setting(
        "moe_router_num_groups",
        spec=(S("model.moe_router_num_groups"),),
        lm=(F("--moe-router-num-groups", int, None),),
        core=(CO(_TC, "moe_router_num_groups", None),),
        when=_MOE,
    ),
    Setting(
        "moe_router_group_topk",
        spec=(S("model.moe_router_group_topk"),),
        lm=(F("--moe-router-group-topk", int, None),),
        core=(CO(_TC, "moe_router_group_topk", None),),
        when=_MOE,
    ),
    Setting(
        "moe_router_enable_expert_bias",
        spec=(S("model.moe_router_enable_expert_bias", bool),),
        lm=(B("--moe-router-enable-expert-bias"),),
        core=(CO(_TC, "moe_router_enable_expert_bias", False),),
        when=_MOE,
    ),
    _moe_row("moe_token_dispatcher_type", "--moe-token-dispatcher-type", str, "allgather"),
    Setting(
        "moe_router_pre_softmax",
        spec=(S("model.moe_router_pre_softmax"),),
        lm=(B("--moe-router-pre-softmax"),),
        core=(C(_TC, "moe_router_pre_softmax"),),
        when=_MOE,
    ),
    _moe_row(
        "moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", int, None
    ),
    _moe_row("moe_router_load_balancing_type", "--moe-router-load-balancing-type", str, "aux_loss"),
    _moe_row("moe_aux_loss_coeff", "--moe-aux-loss-coeff", float, 0.0, float),
    _moe_row("moe_z_loss_coeff", "--moe-z-loss-coeff", float, None, _opt_float),
    _moe_row("moe_router_score_function", "--moe-router-score-function", str, "softmax"),
    _moe_row(
        "moe_router_topk_scaling_factor",
        "--moe-router-topk-scaling-factor",
        float,
        None,
        _opt_float,
    ),
    _moe_row("moe_expert_capacity_factor", "--moe-expert-capacity-factor", float, None, _opt_float),
    Setting(
        "moe_flex_dispatcher_backend",
        spec=(S("model.moe_flex_dispatcher_backend"),),
        lm=(F("--moe-flex-dispatcher-backend", str, "deepep"),),
        core=(CO(_TC, "moe_flex_dispatcher_backend", "deepep"),),
        when=_FLEX,
    ),
    Setting(
        "moe_pad_expert_input_to_capacity",
        spec=(S("model.moe_pad_expert_input_to_capacity", bool),),
        lm=(B("--moe-pad-expert-input-to-capacity"),),
        core=(CO(_TC, "moe_pad_expert_input_to_capacity", False),),
        when=_MOE,
    ),
    # Transformer Engine's grouped GEMM over the local experts on CUDA (what the kernel model
    # times); the local layers on CPU have none
    Setting(
        "moe_grouped_gemm",
        spec=(S("launch.device", lambda v: v != "cpu"),),
        lm=(B("--moe-grouped-gemm"),),
        core=(C(_TC, "moe_grouped_gemm"),),
        when=_MOE,
    ),
    Setting(
        "moe_router_padding_for_quantization",
        spec=(S("model.moe_router_padding_for_quantization", bool),),
        lm=(B("--moe-router-padding-for-quantization"),),
        core=(CO(_TC, "moe_router_padding_for_quantization", False),),
        when=_MOE,
    ),
    # parallel layout
    _parallel_row("tp", "--tensor-model-parallel-size", "tensor_model_parallel_size"),
    _parallel_row("pp", "--pipeline-model-parallel-size", "pipeline_model_parallel_size"),
    Setting(
        "vpp",
        spec=(S("derived.vpp", lambda v: v if v > 1 else None),),
        lm=(LF(_VPP_FLAGS, _lm_vpp),),
        core=(
            C(_TC, "virtual_pipeline_model_parallel_size"),
            C(_IMP, "virtual_pipeline_model_parallel_size"),
        ),
    ),
    _parallel_row("cp", "--context-parallel-size", "context_parallel_size"),
    _parallel_row("ep", "--expert-model-parallel-size", "expert_model_parallel_size"),
    # Megatron-LM: --expert-tensor-parallel-size None -> tp (validate_args)
    _parallel_row(
        "etp",
        "--expert-tensor-parallel-size",
        "expert_tensor_parallel_size",
        default=lambda a: int(a.get("--tensor-model-parallel-size", 1)),
    ),
    Setting(
        "rank_order",
        lm=(LMC("tp-cp-ep-dp-pp"),),
        core=(C(_IMP, "order"),),
        spec=(SF(lambda plan: "tp-cp-ep-dp-pp"),),
    ),
    Setting(
        "sequence_parallel",
        spec=(S("derived.sequence_parallel"),),
        lm=(B("--sequence-parallel"),),
        core=(C(_TC, "sequence_parallel"),),
    ),
    Setting(
        "cp_comm_type",
        spec=(S("parallel.cp_comm_type"),),
        lm=(F("--cp-comm-type", str, "p2p"),),
        core=(C(_TC, "cp_comm_type"),),
        when=lambda plan: plan["derived"]["cp"] > 1,
    ),
    Setting(
        "pipeline_first_stage_layers",
        spec=(S("parallel.pipeline_first_stage_layers"),),
        lm=(F("--decoder-first-pipeline-num-layers", int, None),),
        core=(C(_TC, "num_layers_in_first_pipeline_stage"),),
    ),
    Setting(
        "pipeline_last_stage_layers",
        spec=(S("parallel.pipeline_last_stage_layers"),),
        lm=(F("--decoder-last-pipeline-num-layers", int, None),),
        core=(C(_TC, "num_layers_in_last_pipeline_stage"),),
    ),
    Setting(
        "account_for_embedding_in_pipeline_split",
        spec=(S("parallel.account_for_embedding_in_pipeline_split"),),
        lm=(B("--account-for-embedding-in-pipeline-split"),),
        core=(C(_TC, "account_for_embedding_in_pipeline_split"),),
    ),
    Setting(
        "account_for_loss_in_pipeline_split",
        spec=(S("parallel.account_for_loss_in_pipeline_split"),),
        lm=(B("--account-for-loss-in-pipeline-split"),),
        core=(C(_TC, "account_for_loss_in_pipeline_split"),),
    ),
    # Megatron-LM: overlapped p2p unless --no-overlap-p2p-communication, switched off without
    # interleaving (validate_args); batch_p2p_comm = not overlap_p2p_comm
    # (core_transformer_config_from_args)
    Setting(
        "overlap_p2p_comm",
        spec=(S("derived.overlap_p2p_comm"),),
        lm=(LF(("--no-overlap-p2p-communication", *_VPP_FLAGS), _lm_overlap_p2p),),
        core=(C(_TC, "overlap_p2p_comm"),),
    ),
    Setting(
        "batch_p2p_comm",
        spec=(S("derived.batch_p2p_comm"),),
        lm=(LF(("--no-overlap-p2p-communication", *_VPP_FLAGS), lambda a: not _lm_overlap_p2p(a)),),
        core=(C(_TC, "batch_p2p_comm"),),
    ),
    Setting(
        "variable_seq_lengths",
        lm=(LMC(False),),
        core=(C(_TC, "variable_seq_lengths"),),
        spec=(SF(lambda plan: False),),
    ),
    Setting(
        "distributed_optimizer",
        spec=(S("derived.distributed_optimizer"),),
        lm=(B("--use-distributed-optimizer"),),
        core=(C(_DDP, "use_distributed_optimizer"), C(_OPT, "use_distributed_optimizer")),
    ),
    # Megatron-FSDP (engine=megatron, zero_stage 3): --use-megatron-fsdp with optim_grads_params
    # and the user guide's --no-gradient-accumulation-fusion
    Setting(
        "megatron_fsdp",
        spec=(S("derived.megatron_fsdp"),),
        lm=(B("--use-megatron-fsdp"),),
        core=(CO(_DDP, "use_megatron_fsdp", False),),
    ),
    # (core_v0.19.0's flag default is optim_grads_params; it means something with the flag on)
    Setting(
        "data_parallel_sharding_strategy",
        spec=(SF(lambda plan: "optim_grads_params"),),
        lm=(F("--data-parallel-sharding-strategy", str, "optim_grads_params"),),
        core=(C(_DDP, "data_parallel_sharding_strategy"),),
        when=lambda plan: plan["derived"]["megatron_fsdp"],
    ),
    Setting(
        "gradient_accumulation_fusion",
        spec=(SF(lambda plan: False),),
        lm=(B("--no-gradient-accumulation-fusion", negate=True),),
        core=(C(_TC, "gradient_accumulation_fusion"),),
        when=lambda plan: plan["derived"]["megatron_fsdp"],
    ),
    Setting(
        "overlap_grad_reduce",
        spec=(S("training.overlap_grad_reduce"),),
        lm=(B("--overlap-grad-reduce"),),
        core=(C(_DDP, "overlap_grad_reduce"),),
    ),
    Setting(
        "overlap_param_gather",
        spec=(S("training.overlap_param_gather"),),
        lm=(B("--overlap-param-gather"),),
        core=(C(_DDP, "overlap_param_gather"),),
    ),
    # DeepSpeed's ZeRO (engine=deepspeed; for engine=megatron zero_stage 1 is the distributed
    # optimizer above)
    Setting("zero_stage", spec=(S("parallel.zero_stage"),), ds=(D("zero_optimization.stage"),)),
    Setting(
        "offload_optimizer",
        spec=(S("training.offload_optimizer"),),
        ds=(_ds_offload("offload_optimizer"),),
    ),
    Setting(
        "offload_param", spec=(S("training.offload_param"),), ds=(_ds_offload("offload_param"),)
    ),
    Setting(
        "nvme_path",
        spec=(S("training.nvme_path"),),
        ds=(
            DF(
                (
                    "zero_optimization.offload_optimizer.nvme_path",
                    "zero_optimization.offload_param.nvme_path",
                ),
                lambda d: next(
                    (
                        d["zero_optimization"][k]["nvme_path"]
                        for k in ("offload_optimizer", "offload_param")
                        if "nvme_path" in d["zero_optimization"].get(k, {})
                    ),
                    None,
                ),
            ),
        ),
        when=lambda plan: (
            "nvme"
            in (
                plan["spec"]["training"]["offload_optimizer"],
                plan["spec"]["training"]["offload_param"],
            )
        ),
    ),
    # batch
    Setting(
        "micro_batch_size",
        spec=(S("training.micro_batch_size"),),
        lm=(F("--micro-batch-size", int, None),),
        core=(C(_FB, "micro_batch_size"),),
        ds=(D("train_micro_batch_size_per_gpu"),),
    ),
    Setting(
        "global_batch_size",
        spec=(S("training.global_batch_size"),),
        lm=(F("--global-batch-size", int, None),),
        ds=(D("train_batch_size"),),
    ),
    Setting(
        "num_microbatches",
        spec=(S("derived.num_microbatches"),),
        core=(C(_FB, "num_microbatches"),),
        ds=(D("gradient_accumulation_steps"),),
    ),
    # precision and reduce dtypes
    Setting(
        "precision",
        spec=(S("training.precision"),),
        lm=(LF(("--bf16", "--fp16"), _lm_precision),),
        core=(_core_precision(_TC), _core_precision(_OPT)),
        ds=(DF(("bf16.enabled", "fp16.enabled"), _ds_precision),),
    ),
    Setting(
        "params_dtype",
        spec=(S("training.precision", DTYPE.get),),
        lm=(LF(("--bf16", "--fp16"), lambda a: DTYPE[_lm_precision(a)]),),
        core=(C(_TC, "params_dtype"), C(_TC, "pipeline_dtype"), C(_OPT, "params_dtype")),
        ds=(DF(("bf16.enabled", "fp16.enabled"), lambda d: DTYPE[_ds_precision(d)]),),
    ),
    # Megatron-LM validate_args: --bf16 forces accumulate_allreduce_grads_in_fp32. No DeepSpeed
    # reader: ds_config.json sets no communication_data_type, so DeepSpeed reduces bf16 gradients
    # in bf16 (strict xfail in test_engine_agreement.py)
    Setting(
        "grad_reduce_in_fp32",
        spec=(S("training.precision", lambda v: v == "bf16"),),
        lm=(
            LF(
                ("--bf16", "--accumulate-allreduce-grads-in-fp32"),
                lambda a: "--bf16" in a or "--accumulate-allreduce-grads-in-fp32" in a,
            ),
        ),
        core=(C(_DDP, "grad_reduce_in_fp32"),),
    ),
    # recompute
    Setting(
        "recompute_granularity",
        spec=(S("training.recompute", lambda v: None if v == "none" else v),),
        lm=(F("--recompute-granularity", str, None),),
        core=(C(_TC, "recompute_granularity"),),
    ),
    Setting(
        "recompute_method",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["training"]["recompute_method"]
                    if plan["spec"]["training"]["recompute"] == "full"
                    else None
                )
            ),
        ),
        lm=(F("--recompute-method", str, None),),
        core=(C(_TC, "recompute_method"),),
    ),
    Setting(
        "recompute_num_layers",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["training"]["recompute_num_layers"]
                    if plan["spec"]["training"]["recompute"] == "full"
                    else None
                )
            ),
        ),
        lm=(F("--recompute-num-layers", int, None),),
        core=(C(_TC, "recompute_num_layers"),),
    ),
    # optimizer and its hyper-parameters
    Setting(
        "optimizer",
        spec=(S("training.optimizer"),),
        lm=(F("--optimizer", str, "adam"),),
        core=(C(_OPT, "optimizer"),),
        ds=(D("optimizer.type", DS_OPTIMIZER.get),),
    ),
    Setting(
        "lr",
        spec=(S("training.lr", float),),
        lm=(F("--lr", float, None),),
        core=(C(_OPT, "lr"), C(_SCH, "max_lr")),
        ds=(D("optimizer.params.lr"), DF((_SCHED_P + "warmup_max_lr",), _ds_peak_in_scheduler)),
    ),
    Setting(
        "min_lr",
        spec=(S("training.min_lr", float),),
        lm=(F("--min-lr", float, 0.0),),
        core=(C(_OPT, "min_lr"), C(_SCH, "min_lr")),
        ds=(DF((_SCHED_P + "cos_min_ratio", _SCHED_P + "warmup_min_lr"), _ds_min_lr),),
        approx=True,
    ),
    Setting(
        "weight_decay",
        spec=(S("training.weight_decay", float),),
        lm=(F("--weight-decay", float, 0.01),),
        core=(C(_OPT, "weight_decay"), C(_SCH, "start_wd"), C(_SCH, "end_wd")),
        ds=(D("optimizer.params.weight_decay"),),
    ),
    # start_wd == end_wd: constant weight decay (Megatron-LM: --weight-decay-incr-style constant)
    Setting(
        "weight_decay_incr_style",
        lm=(F("--weight-decay-incr-style", str, "constant"),),
        core=(C(_SCH, "wd_incr_style"),),
        spec=(SF(lambda plan: "constant"),),
    ),
    Setting(
        "adam_beta1",
        spec=(S("training.adam_beta1", float),),
        lm=(F("--adam-beta1", float, 0.9),),
        core=(C(_OPT, "adam_beta1"),),
        ds=(D("optimizer.params.betas.0"),),
        when=_ADAM,
    ),
    Setting(
        "adam_beta2",
        spec=(S("training.adam_beta2", float),),
        lm=(F("--adam-beta2", float, 0.999),),
        core=(C(_OPT, "adam_beta2"),),
        ds=(D("optimizer.params.betas.1"),),
        when=_ADAM,
    ),
    Setting(
        "adam_eps",
        spec=(S("training.adam_eps", float),),
        lm=(F("--adam-eps", float, 1e-8),),
        core=(C(_OPT, "adam_eps"),),
        ds=(D("optimizer.params.eps"),),
        when=_ADAM,
    ),
    Setting(
        "sgd_momentum",
        spec=(S("training.sgd_momentum", float),),
        lm=(F("--sgd-momentum", float, 0.9),),
        core=(C(_OPT, "sgd_momentum"),),
        ds=(D("optimizer.params.momentum"),),
        when=_SGD,
    ),
    # FP8 / FP4 (issue 13) and the precision-aware optimizer
    Setting(
        "fp8_format",
        spec=(S("training.fp8_format", lambda v: None if v == "none" else v),),
        lm=(F("--fp8-format", str, None),),
        core=(CO(_TC, "fp8", None),),
    ),
    Setting(
        "fp8_recipe",
        spec=(S("training.fp8_recipe"),),
        lm=(F("--fp8-recipe", str, "delayed"),),
        core=(CO(_TC, "fp8_recipe", "delayed"),),
        when=_FP8,
    ),
    Setting(
        "fp8_param_gather",
        spec=(S("training.fp8_param_gather", bool),),
        lm=(B("--fp8-param-gather"),),
        core=(CO(_DDP, "fp8_param_gather", False), CO(_TC, "fp8_param", False)),
    ),
    Setting(
        "tp_comm_overlap",
        spec=(S("training.tp_comm_overlap", bool),),
        lm=(B("--tp-comm-overlap"),),
        core=(CO(_TC, "tp_comm_overlap", False),),
    ),
    Setting(
        "overlap_moe_expert_parallel_comm",
        spec=(S("training.overlap_moe_expert_parallel_comm", bool),),
        lm=(B("--overlap-moe-expert-parallel-comm"),),
        core=(CO(_TC, "overlap_moe_expert_parallel_comm", False),),
    ),
    Setting(
        "fp4_format",
        spec=(S("training.fp4_format", lambda v: None if v == "none" else v),),
        lm=(F("--fp4-format", str, None),),
        core=(CO(_TC, "fp4", None),),
    ),
    Setting(
        "fp4_recipe",
        spec=(S("training.fp4_recipe"),),
        lm=(F("--fp4-recipe", str, "nvfp4"),),
        core=(CO(_TC, "fp4_recipe", "nvfp4"),),
        when=_FP4,
    ),
    Setting(
        "first_last_layers_bf16",
        spec=(S("training.first_last_layers_bf16", bool),),
        lm=(B("--first-last-layers-bf16"),),
        core=(CO(_TC, "first_last_layers_bf16", False),),
        when=lambda plan: _FP8(plan) or _FP4(plan),
    ),
    Setting(
        "use_precision_aware_optimizer",
        spec=(SF(lambda plan: any(plan["spec"]["training"][k] != "fp32" for k in _STATES)),),
        lm=(B("--use-precision-aware-optimizer"),),
        core=(CO(_OPT, "use_precision_aware_optimizer", False),),
    ),
    *[
        Setting(
            k,
            spec=(S(f"training.{k}"),),
            lm=(F(f"--{k.replace('_', '-')}", str, "fp32"),),
            core=(CO(_OPT, k, "float32", _STATE_NAME.get),),
        )
        for k in _STATES
    ],
    Setting(
        "grad_clip",
        spec=(S("training.grad_clip", float),),
        lm=(F("--clip-grad", float, 1.0),),
        core=(C(_OPT, "clip_grad"),),
        ds=(D("gradient_clipping"),),
    ),
    # learning-rate schedule (core steps are optimizer steps: the worker sets num_steps = step;
    # Megatron-LM counts the same schedule in samples internally)
    Setting(
        "lr_decay_style",
        spec=(S("training.lr_decay_style"),),
        lm=(F("--lr-decay-style", str, "linear"),),
        core=(C(_SCH, "lr_decay_style"),),
        ds=(D("scheduler.type", DS_SCHEDULER.get),),
    ),
    Setting(
        "lr_warmup_iters",
        spec=(S("training.lr_warmup_iters"),),
        lm=(F("--lr-warmup-iters", int, 0),),
        core=(C(_SCH, "lr_warmup_steps"),),
        ds=(
            DF(
                (
                    _SCHED_P + "warmup_num_steps",
                    _SCHED_P + "warmup_min_ratio",
                    _SCHED_P + "warmup_min_lr",
                ),
                _ds_warmup_iters,
            ),
        ),
    ),
    Setting(
        "lr_warmup_init",
        spec=(SF(lambda plan: 0.0),),
        lm=(F("--lr-warmup-init", float, 0.0),),
        core=(C(_SCH, "init_lr"),),
        ds=(DF((_SCHED_P + "warmup_min_ratio", _SCHED_P + "warmup_min_lr"), _ds_warmup_init),),
        when=_WARMUP,
    ),
    # Megatron warms up linearly; DeepSpeed's warmup_type must say so
    Setting(
        "lr_warmup_shape",
        spec=(SF(lambda plan: "linear"),),
        lm=(LMC("linear"),),
        ds=(D(_SCHED_P + "warmup_type"),),
    ),
    Setting(
        "lr_decay_iters",
        spec=(S("training.lr_decay_iters"),),
        lm=(F("--lr-decay-iters", int, lambda a: int(a["--train-iters"])),),
        core=(C(_SCH, "lr_decay_steps"),),
        ds=(DF((_SCHED_P + "total_num_steps",), _ds_decay_iters),),
    ),
    Setting(
        "lr_wsd_decay_iters",
        spec=(S("training.lr_wsd_decay_iters"),),
        lm=(F("--lr-wsd-decay-iters", int, None),),
        core=(C(_SCH, "wsd_decay_steps"),),
        when=_WSD,
    ),
    Setting(
        "lr_wsd_decay_style",
        spec=(S("training.lr_wsd_decay_style"),),
        lm=(F("--lr-wsd-decay-style", str, "exponential"),),
        core=(C(_SCH, "lr_wsd_decay_style"),),
        when=_WSD,
    ),
    # Megatron-LM: wd_incr_steps = train_iters (x global batch, in samples)
    Setting(
        "train_iters",
        spec=(S("training.train_iters"),),
        lm=(F("--train-iters", int, None),),
        core=(C(_SCH, "wd_incr_steps"),),
    ),
    Setting("seed", spec=(S("training.seed"),), lm=(F("--seed", int, 1234),)),
    # the worker's layers: Transformer Engine on CUDA, Megatron-Core's local layers on CPU
    Setting(
        "transformer_impl",
        spec=(S("launch.device", lambda v: "local" if v == "cpu" else "transformer_engine"),),
        lm=(F("--transformer-impl", str, "transformer_engine"),),
        core=(C(_TC, "transformer_impl"),),
    ),
    Setting(
        "use_cpu_initialization",
        spec=(S("launch.device", lambda v: v == "cpu"),),
        lm=(B("--use-cpu-initialization"),),
        core=(C(_TC, "use_cpu_initialization"),),
    ),
    # data, checkpoints and logging (Megatron-LM's training loop / DeepSpeed's logger)
    Setting(
        "mock_data",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["launch"]["data_path"] is None
                    and plan["spec"]["data"]["paths"] is None
                )
            ),
        ),
        lm=(B("--mock-data"),),
    ),
    # a data.paths blend is one --data-path line of WEIGHT PREFIX items (torchrun.sh splits it)
    Setting(
        "data_path",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["launch"]["data_path"]
                    if plan["spec"]["data"]["paths"] is None
                    else " ".join(x for e in plan["spec"]["data"]["paths"] for x in e.split())
                )
            ),
        ),
        lm=(F("--data-path", str, None),),
    ),
    Setting(
        "data_split",
        spec=(S("launch.data_split"),),
        lm=(F("--split", str, "969,30,1"),),
        when=lambda plan: (
            plan["spec"]["launch"]["data_path"] is not None
            or plan["spec"]["data"]["paths"] is not None
        ),
    ),
    Setting(
        "reset_position_ids", spec=(S("data.reset_position_ids"),), lm=(B("--reset-position-ids"),)
    ),
    Setting(
        "reset_attention_mask",
        spec=(S("data.reset_attention_mask"),),
        lm=(B("--reset-attention-mask"),),
    ),
    Setting("eod_mask_loss", spec=(S("data.eod_mask_loss"),), lm=(B("--eod-mask-loss"),)),
    Setting("save_dir", spec=(S("launch.save_dir"),), lm=(F("--save", str, None),)),
    # --load: resume.load_dir, else the job's own checkpoints (launch.save_dir)
    Setting(
        "load_dir",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["resume"]["load_dir"] or plan["spec"]["launch"]["save_dir"]
                )
            ),
        ),
        lm=(F("--load", str, None),),
    ),
    # (the trainc worker writes its own per-rank files: no Megatron-LM format to name)
    Setting(
        "checkpoint_format",
        spec=(S("derived.checkpoint_format"),),
        lm=(F("--ckpt-format", str, "torch_dist"),),
        when=lambda plan: (
            plan["derived"]["checkpoint_format"] in ("torch_dist", "torch", "fsdp_dtensor")
        ),
    ),
    Setting("finetune", spec=(S("resume.finetune"),), lm=(B("--finetune"),)),
    Setting(
        "save_interval", spec=(S("launch.save_interval"),), lm=(F("--save-interval", int, None),)
    ),
    Setting(
        "log_interval",
        spec=(S("launch.log_interval"),),
        lm=(F("--log-interval", int, 100),),
        ds=(D("steps_per_print"),),
    ),
    Setting(
        "distributed_backend",
        spec=(S("launch.device", lambda v: "gloo" if v == "cpu" else "nccl"),),
        lm=(F("--distributed-backend", str, "nccl"),),
    ),
)

#: megatron_args.txt flags that carry no setting of their own (their meaning is in a row above).
LM_ENGINE_ONLY: dict[str, str] = {
    "--group-query-attention": "switch that makes --num-query-groups count (row num_query_groups)",
    "--swiglu": "read by row activation",
}

#: megatron_core.yaml keys without a semantic row.
CORE_ENGINE_ONLY: dict[tuple[str, str], str] = {}

#: ds_config.json leaves that are DeepSpeed mechanics (no Megatron-LM / Megatron-Core
#: counterpart, no spec key): ZeRO's buckets and partitioning, offload buffers, fp16 loss
#: scaling, profiling.
DS_ENGINE_ONLY: dict[str, str] = {
    "wall_clock_breakdown": "DeepSpeed's timer profiling, off",
    "communication_data_type": "the gradient reduce dtype, compared with Megatron-Core's "
    "grad_reduce_in_fp32 by test_engine_agreement.py",
    "zero_allow_untested_optimizer": "lets ZeRO wrap torch.optim.SGD (not on DeepSpeed's tested "
    "list); no training setting",
    "zero_optimization.contiguous_gradients": "ZeRO memory layout (DeepSpeed default)",
    "zero_optimization.overlap_comm": "ZeRO's own overlap of reduce with backward (stage >= 2); "
    "Megatron DDP's overlap_* are not used by DeepSpeed",
    "zero_optimization.reduce_scatter": "ZeRO's reduce-scatter (DeepSpeed default)",
    "zero_optimization.reduce_bucket_size": "ZeRO bucket size (DeepSpeed default)",
    "zero_optimization.allgather_partitions": "ZeRO-1/2 all-gather (DeepSpeed default)",
    "zero_optimization.allgather_bucket_size": "ZeRO-1/2 bucket size (DeepSpeed default)",
    "zero_optimization.stage3_prefetch_bucket_size": "ZeRO-3 prefetch (DeepSpeed default)",
    "zero_optimization.stage3_param_persistence_threshold": "ZeRO-3 (DeepSpeed default)",
    "zero_optimization.stage3_max_live_parameters": "ZeRO-3 (DeepSpeed default)",
    "zero_optimization.stage3_max_reuse_distance": "ZeRO-3 (DeepSpeed default)",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "ZeRO-3 checkpoint format",
    "zero_optimization.offload_optimizer.pin_memory": "offload buffers (host pinning)",
    "zero_optimization.offload_optimizer.buffer_count": "offload buffers",
    "zero_optimization.offload_param.pin_memory": "offload buffers (host pinning)",
    "zero_optimization.offload_param.buffer_count": "offload buffers",
    "fp16.loss_scale": "dynamic loss scaling (0 = dynamic), Megatron-LM's default too",
    "fp16.initial_scale_power": "loss scaling: 2**16 initial, Megatron-LM's default too",
    "fp16.loss_scale_window": "loss scaling window, Megatron-LM's default too",
    "fp16.hysteresis": "loss scaling hysteresis, Megatron-LM's default too",
    "fp16.min_loss_scale": "loss scaling floor, Megatron-LM's default too",
}


# --- engine=fsdp: plan.json engines.fsdp and torchtitan_args.txt ------------------------------


def parse_torchtitan_args(text: str) -> dict[str, Any]:
    """``torchtitan_args.txt`` -> {flag: value string, or True for a bare flag}; a negated boolean
    ``--section.no-field`` becomes ``{"--section.field": False}``."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("#registry "):  # what the registry function must set, as JSON
            _, field, value = line.split(" ", 2)
            for path, leaf in leaves(json.loads(value)).items():
                out[f"registry:{field}.{path}"] = leaf
            continue
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith("--") and ":" in line:  # a tyro subcommand: field:choice
            field, _, choice = line.partition(":")
            assert field not in out, f"{field} twice in torchtitan_args.txt"
            out[field] = choice
            continue
        flag, _, value = line.partition(" ")
        section, _, name = flag[2:].partition(".")
        if name.startswith("no-"):
            flag, value_any = f"--{section}.{name[3:].replace('-', '_')}", False
        else:
            value_any = value if value else True
        assert flag not in out, f"{flag} twice in torchtitan_args.txt"
        out[flag] = value_any
    return out


def E(path: str, conv: Callable[[Any], Any] = lambda v: v) -> Reader:
    """plan.json ``engines.fsdp.<path>``."""
    return Reader((path,), lambda f: conv(_dig(f, path)))


def T(flag: str, conv: Callable[[Any], Any] = lambda v: v) -> Reader:
    """torchtitan_args.txt ``flag`` (must be there)."""

    def read(a: dict[str, Any]) -> Any:
        assert flag in a, f"torchtitan_args.txt has no {flag}"
        return conv(a[flag])

    return Reader((flag,), read)


def _fsdp(plan: dict[str, Any]) -> bool:
    return bool(plan["spec"]["engine"] == "fsdp")


#: torchtitan 0.3.0 ``activation-checkpoint:<choice>`` subcommand -> engine=fsdp AC mode
TT_AC_MODE = {
    "none": "none",
    "full": "full",
    "selective": "selective_op",
    "memory-budget": "memory_budget",
}


def _ac_mode(plan: dict[str, Any]) -> str:
    """The AC mode the spec asks for, read from plan.json's spec alone: training.recompute,
    then fsdp.memory_budget, then fsdp.selective_ac_option (an integer: every N layers)."""
    rec, f = plan["spec"]["training"]["recompute"], plan["spec"]["fsdp"]
    if rec != "selective":
        return str(rec)
    if f.get("memory_budget") is not None:
        return "memory_budget"
    return "selective_layer" if str(f.get("selective_ac_option")).isdigit() else "selective_op"


def _adam(plan: dict[str, Any]) -> bool:
    return _fsdp(plan) and plan["spec"]["training"]["optimizer"] == "adam"


def _sgd(plan: dict[str, Any]) -> bool:
    return _fsdp(plan) and plan["spec"]["training"]["optimizer"] == "sgd"


#: the optimizer the torchtitan registry function must set (torchtitan_args.txt #registry)
_OPT = "optimizer.param_groups.0"
#: engines.fsdp's copy of it
_REG = "torchtitan.registry." + _OPT


def _pp(plan: dict[str, Any]) -> bool:
    return _fsdp(plan) and plan["derived"]["pp"] > 1


def _virtual_layers(plan: dict[str, Any]) -> list[int]:
    """Transformer layers of each virtual pipeline stage (stage ``j*pp + r`` is chunk j of rank
    r), from plan.json's layers per rank as Megatron-Core chunks them (vpp equal chunks of the
    rank's layers plus the embedding's / loss's slot where account_for_* gives it one)."""
    d, par = plan["derived"], plan["spec"]["parallel"]
    pp, v, per = d["pp"], d["vpp"], d["layers_per_stage"]
    e, lo = (
        int(par["account_for_embedding_in_pipeline_split"]),
        int(par["account_for_loss_in_pipeline_split"]),
    )
    out = [0] * (pp * v)
    for r in range(pp):
        chunk = (per[r] + e * (r == 0) + lo * (r == pp - 1)) // v
        for j in range(v):
            out[j * pp + r] = chunk - e * (r == 0 and j == 0) - lo * (r == pp - 1 and j == v - 1)
    return out


def _middle(plan: dict[str, Any]) -> Any:
    """The layers of every middle virtual stage (one value, or the list when they differ)."""
    mid = set(_virtual_layers(plan)[1:-1])
    return mid.pop() if len(mid) == 1 else sorted(mid)


_TT_PER = "--parallelism.pipeline_parallel_layers_per_stage"
_TT_FIRST = "--parallelism.pipeline_parallel_first_stage_less_layers"
_TT_LAST = "--parallelism.pipeline_parallel_last_stage_less_layers"


def _stages(plan: dict[str, Any], least: int) -> bool:
    return _pp(plan) and plan["derived"]["pp"] * plan["derived"]["vpp"] >= least


TT_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}
TT_DECAY = {"cosine": "cosine", "linear": "linear", "constant": "linear"}

#: engine=fsdp settings: the spec, the FSDP2 worker's settings and torchtitan's overrides.
FSDP_TABLE: tuple[Setting, ...] = (
    Setting(
        "fsdp tp",
        spec=(S("parallel.tp"),),
        fsdp=(E("tensor_parallel.degree"), E("mesh.shape.4")),
        tt=(T("--parallelism.tensor_parallel_degree", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp sequence_parallel",
        spec=(S("derived.sequence_parallel"),),
        fsdp=(E("tensor_parallel.sequence_parallel"),),
        tt=(T("--parallelism.enable_sequence_parallel"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp pp",
        spec=(S("parallel.pp"),),
        fsdp=(E("pipeline.degree"), E("mesh.shape.0")),
        tt=(T("--parallelism.pipeline_parallel_degree", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp vpp", spec=(S("parallel.vpp"),), fsdp=(E("pipeline.stages_per_rank"),), when=_fsdp
    ),
    # the layer split (torchtitan: (layers + first + last) / layers_per_stage virtual stages,
    # the first and the last stage `*_less_layers` slots shorter)
    Setting(
        "fsdp first virtual stage layers",
        spec=(SF(lambda p: _virtual_layers(p)[0]),),
        fsdp=(
            Reader(
                ("pipeline.layers_per_stage", "pipeline.first_stage_less_layers"),
                lambda f: (
                    f["pipeline"]["layers_per_stage"] - f["pipeline"]["first_stage_less_layers"]
                ),
            ),
        ),
        tt=(Reader((_TT_PER, _TT_FIRST), lambda a: int(a[_TT_PER]) - int(a[_TT_FIRST])),),
        when=_pp,
    ),
    Setting(
        "fsdp last virtual stage layers",
        spec=(SF(lambda p: _virtual_layers(p)[-1]),),
        fsdp=(
            Reader(
                ("pipeline.layers_per_stage", "pipeline.last_stage_less_layers"),
                lambda f: (
                    f["pipeline"]["layers_per_stage"] - f["pipeline"]["last_stage_less_layers"]
                ),
            ),
        ),
        tt=(Reader((_TT_PER, _TT_LAST), lambda a: int(a[_TT_PER]) - int(a[_TT_LAST])),),
        when=_pp,
    ),
    Setting(
        "fsdp middle virtual stage layers",
        spec=(SF(_middle),),
        fsdp=(E("pipeline.layers_per_stage"),),
        tt=(T(_TT_PER, int),),
        when=lambda p: _stages(p, 3),
    ),
    Setting(
        "fsdp pp_schedule",
        spec=(S("fsdp.pp_schedule"),),
        tt=(T("--parallelism.pipeline_parallel_schedule"),),
        when=_pp,
    ),
    Setting(
        "fsdp cp",
        spec=(S("parallel.cp"),),
        fsdp=(E("context_parallel.degree"), E("mesh.shape.3")),
        tt=(T("--parallelism.context_parallel_degree", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp dp_replicate",
        spec=(S("fsdp.dp_replicate"),),
        fsdp=(E("mesh.shape.1"),),
        tt=(T("--parallelism.data_parallel_replicate_degree", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp dp_shard",
        spec=(S("fsdp.dp_shard"),),
        fsdp=(E("mesh.shape.2"),),
        tt=(T("--parallelism.data_parallel_shard_degree", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp reshard_after_forward",
        spec=(S("fsdp.reshard_after_forward"),),
        fsdp=(E("fully_shard.reshard_after_forward"),),
        tt=(T("--parallelism.fsdp_reshard_after_forward", lambda v: v == "always"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp param_dtype",
        spec=(S("fsdp.param_dtype", TT_DTYPE.get),),
        fsdp=(E("fully_shard.mp_policy.param_dtype"),),
        tt=(T("--training.mixed_precision_param"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp reduce_dtype",
        spec=(S("fsdp.reduce_dtype", TT_DTYPE.get),),
        fsdp=(E("fully_shard.mp_policy.reduce_dtype"),),
        tt=(T("--training.mixed_precision_reduce"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp cpu_offload",
        spec=(S("fsdp.cpu_offload"),),
        fsdp=(E("fully_shard.offload_policy.cpu"),),
        tt=(T("--training.enable_cpu_offload"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp compile",
        spec=(S("fsdp.compile"),),
        fsdp=(E("compile"),),
        tt=(T("--compile.enable"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp recompute",
        spec=(S("training.recompute"),),
        fsdp=(E("activation_checkpoint.mode"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp activation checkpoint mode",
        spec=(SF(_ac_mode),),
        fsdp=(E("activation_checkpoint.torchtitan_mode"),),
        tt=(Reader(("activation-checkpoint",), lambda a: TT_AC_MODE[a["activation-checkpoint"]]),),
        when=_fsdp,
    ),
    Setting(
        "fsdp every_n_layers",
        spec=(
            SF(
                lambda plan: (
                    int(plan["spec"]["fsdp"]["selective_ac_option"])
                    if _ac_mode(plan) == "selective_layer"
                    else None
                )
            ),
        ),
        fsdp=(E("activation_checkpoint.every_n_layers"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp memory_budget",
        spec=(
            SF(
                lambda plan: (
                    plan["spec"]["fsdp"]["memory_budget"]
                    if _ac_mode(plan) == "memory_budget"
                    else None
                )
            ),
        ),
        fsdp=(E("activation_checkpoint.memory_budget"),),
        tt=(
            Reader(
                ("--activation_checkpoint.memory_budget",),
                lambda a: (
                    float(a["--activation_checkpoint.memory_budget"])
                    if "--activation_checkpoint.memory_budget" in a
                    else None
                ),
            ),
        ),
        when=_fsdp,
    ),
    Setting(
        "fsdp micro_batch_size",
        spec=(S("training.micro_batch_size"),),
        fsdp=(E("batch.micro_batch_size"),),
        tt=(
            Reader(
                ("--training.local_batch_size", "--parallelism.pipeline_parallel_degree"),
                lambda a: (
                    int(a["--training.local_batch_size"])
                    if a["--parallelism.pipeline_parallel_degree"] == "1"
                    else int(a["--parallelism.pipeline_parallel_microbatch_size"])
                ),
            ),
        ),
        when=_fsdp,
    ),
    Setting(
        "fsdp global_batch_size",
        spec=(S("training.global_batch_size"),),
        fsdp=(E("batch.global_batch_size"),),
        tt=(T("--training.global_batch_size", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp num_microbatches",
        spec=(S("derived.num_microbatches"),),
        fsdp=(E("batch.gradient_accumulation_steps"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp seq_length",
        spec=(S("model.seq_length"),),
        tt=(T("--training.seq_len", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp train_iters",
        spec=(S("training.train_iters"),),
        tt=(T("--training.steps", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp grad_clip",
        spec=(S("training.grad_clip", float),),
        fsdp=(E("grad_clip"),),
        tt=(T("--training.max_norm", float),),
        when=_fsdp,
    ),
    Setting("fsdp seed", spec=(S("training.seed"),), tt=(T("--debug.seed", int),), when=_fsdp),
    Setting(
        "fsdp optimizer",
        spec=(S("training.optimizer"),),
        fsdp=(
            E("optimizer.class", {"AdamW": "adam", "SGD": "sgd"}.get),
            E(f"{_REG}.optimizer_name", {"AdamW": "adam", "SGD": "sgd"}.get),
        ),
        tt=(T(f"registry:{_OPT}.optimizer_name", {"AdamW": "adam", "SGD": "sgd"}.get),),
        when=_fsdp,
    ),
    Setting(
        "fsdp optimizer pattern",
        spec=(SF(lambda p: ".*"),),
        fsdp=(E(f"{_REG}.pattern"),),
        tt=(T(f"registry:{_OPT}.pattern"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp lr",
        spec=(S("training.lr", float),),
        fsdp=(E("optimizer.lr"), E("lr_schedule.lr"), E(f"{_REG}.optimizer_kwargs.lr")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.lr", float),),
        when=_fsdp,
    ),
    Setting(
        "fsdp adam_beta1",
        spec=(S("training.adam_beta1", float),),
        fsdp=(E("optimizer.betas.0"), E(f"{_REG}.optimizer_kwargs.betas.0")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.betas.0", float),),
        when=_adam,
    ),
    Setting(
        "fsdp adam_beta2",
        spec=(S("training.adam_beta2", float),),
        fsdp=(E("optimizer.betas.1"), E(f"{_REG}.optimizer_kwargs.betas.1")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.betas.1", float),),
        when=_adam,
    ),
    Setting(
        "fsdp adam_eps",
        spec=(S("training.adam_eps", float),),
        fsdp=(E("optimizer.eps"), E(f"{_REG}.optimizer_kwargs.eps")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.eps", float),),
        when=_adam,
    ),
    Setting(
        "fsdp sgd_momentum",
        spec=(S("training.sgd_momentum", float),),
        fsdp=(E("optimizer.momentum"), E(f"{_REG}.optimizer_kwargs.momentum")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.momentum", float),),
        when=_sgd,
    ),
    Setting(
        "fsdp min_lr",
        spec=(S("training.min_lr", float),),
        fsdp=(E("lr_schedule.min_lr"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp min_lr_factor",
        spec=(SF(lambda p: p["spec"]["training"]["min_lr"] / p["spec"]["training"]["lr"]),),
        tt=(T("--lr_scheduler.min_lr_factor", float),),
        when=_fsdp,
        approx=True,
    ),
    Setting(
        "fsdp weight_decay",
        spec=(S("training.weight_decay", float),),
        fsdp=(E("optimizer.weight_decay"), E(f"{_REG}.optimizer_kwargs.weight_decay")),
        tt=(T(f"registry:{_OPT}.optimizer_kwargs.weight_decay", float),),
        when=_fsdp,
    ),
    Setting(
        "fsdp lr_decay_style",
        spec=(S("training.lr_decay_style"),),
        fsdp=(E("lr_schedule.style"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp torchtitan decay_type",
        spec=(S("training.lr_decay_style", TT_DECAY.get),),
        tt=(T("--lr_scheduler.decay_type"),),
        when=_fsdp,
    ),
    Setting(
        "fsdp lr_warmup_iters",
        spec=(S("training.lr_warmup_iters"),),
        fsdp=(E("lr_schedule.warmup_iters"),),
        tt=(T("--lr_scheduler.warmup_steps", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp lr_decay_iters",
        spec=(S("training.lr_decay_iters"),),
        fsdp=(E("lr_schedule.decay_iters"),),
        tt=(T("--lr_scheduler.total_steps", int),),
        when=_fsdp,
    ),
    Setting(
        "fsdp save_interval",
        spec=(S("launch.save_interval"),),
        tt=(T("--checkpoint.interval", int),),
        when=_fsdp,
    ),
)

#: engines.fsdp leaves / torchtitan flags that are mechanics without a spec key.
FSDP_ENGINE_ONLY: dict[str, str] = {
    "mesh.device_type": "cuda or cpu from launch.device (the worker's mesh device)",
    "mesh.dim_names.0": "torchtitan's mesh order",
    "mesh.dim_names.1": "torchtitan's mesh order",
    "mesh.dim_names.2": "torchtitan's mesh order",
    "mesh.dim_names.3": "torchtitan's mesh order",
    "mesh.dim_names.4": "torchtitan's mesh order",
    "fully_shard.mesh_dims.0": "the shard dims follow dp_replicate / cp (test_fsdp.py)",
    "fully_shard.mesh_dims.1": "the shard dims follow dp_replicate / cp (test_fsdp.py)",
    "fully_shard.mesh_dims.2": "the shard dims follow dp_replicate / cp (test_fsdp.py)",
    "fully_shard.root_reshard_after_forward": "the root stays gathered for backward (torchtitan)",
    "fully_shard.offload_policy.pin_memory": "host pinning on CUDA",
    "pipeline.schedule": "the torch class of fsdp.pp_schedule (test_fsdp.py)",
    "activation_checkpoint.per_block": "a per-block wrapper: full, selective_op, selective_layer",
    "activation_checkpoint.save_policy": "per-op SAC's save policy as text (torchtitan_ac.py)",
    "torchtitan.version": "the torchtitan release the flags target",
}
TT_ENGINE_ONLY: dict[str, str] = {
    "--checkpoint.enable": "torchtitan checkpoints off by default; trainc always saves",
    "--parallelism.pipeline_parallel_microbatch_size": "read by row fsdp micro_batch_size",
    "--training.local_batch_size": "read by row fsdp micro_batch_size",
    "--lr_scheduler.decay_ratio": "0 for the constant schedule (stable after warm-up)",
}


def covered_fsdp() -> tuple[set[str], set[str]]:
    """(engines.fsdp leaf paths, torchtitan flags) the FSDP table reads or lists."""
    fsdp, tt = set(FSDP_ENGINE_ONLY), set(TT_ENGINE_ONLY)
    for row in FSDP_TABLE:
        for r in row.fsdp:
            fsdp |= set(r.keys)
        for r in row.tt:
            tt |= set(r.keys)
    return fsdp, tt


def covered_keys() -> tuple[set[str], set[tuple[str, str]], set[str]]:
    """(flags, core (group, key)s, ds leaf paths) that the table reads or lists as engine-only."""
    lm = set(LM_ENGINE_ONLY)
    core = set(CORE_ENGINE_ONLY)
    ds = set(DS_ENGINE_ONLY)
    for row in TABLE:
        for r in row.lm:
            lm |= set(r.keys)
        for r in row.core:
            core |= set(r.keys)
        for r in row.ds:
            ds |= set(r.keys)
    return lm, core, ds


def values(
    row: Setting,
    plan: dict[str, Any],
    lm: dict[str, Any] | None,
    core: dict[str, Any] | None,
    ds: dict[str, Any] | None,
    tt: dict[str, Any] | None = None,
) -> list[tuple[str, Any]]:
    """(where, value) of ``row`` in every artifact there is (NA readings left out); ``tt`` is
    torchtitan_args.txt, and plan.json's ``engines.fsdp`` is read from ``plan``."""
    out: list[tuple[str, Any]] = []
    for label, readers, art in (
        ("spec", row.spec, plan),
        ("megatron_args.txt", row.lm, lm),
        ("megatron_core.yaml", row.core, core),
        ("ds_config.json", row.ds, ds),
        ("engines.fsdp", row.fsdp, plan["engines"].get("fsdp")),
        ("torchtitan_args.txt", row.tt, tt),
    ):
        if art is None:
            continue
        for r in readers:
            v = r.read(art)
            if v is not NA:
                out.append((f"{label}[{','.join(map(str, r.keys)) or '-'}]", v))
    return out


def agree(row: Setting, vals: list[tuple[str, Any]]) -> bool:
    """All readings equal (type-strict for bools; isclose for ``approx`` rows)."""
    first = vals[0][1]
    for _, v in vals[1:]:
        if row.approx and isinstance(first, float) and isinstance(v, (int, float)):
            if not math.isclose(first, v, rel_tol=1e-12, abs_tol=1e-15):
                return False
        elif type(first) is bool or type(v) is bool:
            if type(first) is not type(v) or first != v:
                return False
        elif first != v:
            return False
    return True


# --- the checks -------------------------------------------------------------------------------


def artifacts(
    files: dict[str, str],
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any], dict[str, Any] | None]:
    """(plan.json, megatron_args.txt flags or None, megatron_core.yaml, ds_config.json or None)
    parsed from the emitted text."""
    plan = json.loads(files["plan.json"])
    lm = parse_megatron_args(files["megatron_args.txt"]) if "megatron_args.txt" in files else None
    core = yaml.safe_load(files["megatron_core.yaml"])
    ds = json.loads(files["ds_config.json"]) if "ds_config.json" in files else None
    return plan, lm, core, ds


def disagreements(files: dict[str, str]) -> list[str]:
    """Every row of the table whose readings differ, as readable lines."""
    plan, lm, core, ds = artifacts(files)
    tt = (
        parse_torchtitan_args(files["torchtitan_args.txt"])
        if "torchtitan_args.txt" in files
        else None
    )
    bad = []
    for row in (*TABLE, *FSDP_TABLE):
        if not row.when(plan):
            continue
        vals = values(row, plan, lm, core, ds, tt)
        if vals and not agree(row, vals):
            bad.append(f"{row.name}: " + ", ".join(f"{w}={v!r}" for w, v in vals))
    return bad


def uncovered(files: dict[str, str]) -> list[str]:
    """Keys the artifacts write that the table neither reads nor lists as engine-only."""
    _, lm, core, ds = artifacts(files)
    lm_cov, core_cov, ds_cov = covered_keys()
    out = [f"megatron_args.txt {f}" for f in sorted(set(lm or {}) - lm_cov)]
    out += [f"megatron_core.yaml {g}.{k}" for g, k in sorted(core_keys(core) - core_cov)]
    out += [f"ds_config.json {p}" for p in sorted(set(leaves(ds or {})) - ds_cov)]
    plan = json.loads(files["plan.json"])
    fsdp_cov, tt_cov = covered_fsdp()
    fsdp = plan["engines"].get("fsdp") or {}
    out += [
        f"engines.fsdp {p}"
        for p in sorted(set(leaves(fsdp)) - fsdp_cov)
        if not p.startswith("torchtitan.args.")
    ]
    if "torchtitan_args.txt" in files:
        tt = parse_torchtitan_args(files["torchtitan_args.txt"])
        out += [f"torchtitan_args.txt {f}" for f in sorted(set(tt) - tt_cov)]
    return out


def check(files: dict[str, str]) -> None:
    """Every key the artifacts write has a row, and every row's readings agree."""
    assert not uncovered(files), "emitted keys without a row in one_truth_table: " + "; ".join(
        uncovered(files)
    )
    assert not disagreements(files), "\n".join(disagreements(files))
