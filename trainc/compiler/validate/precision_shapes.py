"""TRC370-TRC372: which GPU runs each FP8 / FP4 recipe, the local GEMM shapes the recipe can
quantize, and the layers kept in BF16.

Sources:

* Transformer Engine ``transformer_engine/pytorch/quantization.py`` (TE 2.x): ``check_recipe_
  support`` picks the check per recipe. Delayed and current (tensorwise) scaling need compute
  capability 8.9 or newer (``_compute_fp8_support``; A100 is 8.0); MXFP8 and NVFP4 need 10.0
  (``_compute_mxfp8_support``, ``_compute_nvfp4_support``: Blackwell); FP8 block scaling needs
  9.0 and CUDA 12.9 (``_compute_fp8_block_scaling_support``; the TE 2.x releases before it
  accepted Blackwell refused anything but Hopper, so blockwise on Blackwell is a warning).
* Shapes: ``transformer_engine/pytorch/utils.py::assert_dim_for_fp8_exec`` (a tensor-scaled FP8
  GEMM input must be 2-D with height % 8 == 0 and width % 16 == 0); ``MXFP8Quantizer.
  is_quantizable`` (both the last dim and the product of the leading dims % 32) and
  ``NVFP4Quantizer`` (16-element blocks). The backward GEMMs take the output gradient as input,
  so the output width of a layer is a GEMM width too. Megatron-Core 0.16.1
  ``fp8_utils.get_fp8_align_size`` gives the same 16 / 32.
* Layers in low precision: the Transformer Engine linear layers of each transformer layer
  (``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``, the grouped expert MLPs and
  the shared experts). The embedding, the output (logits) layer and the router are Megatron-Core
  ``ColumnParallelLinear`` / plain linears and stay in BF16, so the vocabulary never needs FP8
  alignment. The expert GEMMs get a variable token count per expert, which Megatron-Core pads
  itself (``TEGroupedMLP`` ``Fp8Padding``, or the router with
  ``moe_router_padding_for_quantization``), so only their widths are checked.
* ``first_last_layers_bf16`` with delayed scaling: megatron-core 0.16.1
  ``TransformerConfig.__post_init__`` raises "Delayed scaling does not support first / last
  layer in BF16".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.support.hardware import GPU_ARCH
from trainc.compiler.validate.util import divisors, nearest_multiple, or_list
from trainc.compiler.validate.versions import before
from trainc.schemas import (
    Activation,
    Fp4Format,
    Fp8Format,
    Fp8Recipe,
    TrainSpec,
)


def recipe_name(spec: TrainSpec) -> str | None:
    """The low-precision recipe the spec trains with (``delayed``, ``tensorwise``, ``blockwise``,
    ``mxfp8`` or ``nvfp4``), or None for BF16/FP16/FP32 GEMMs."""
    t = spec.training
    if t.fp4_format is not Fp4Format.none:
        return t.fp4_recipe.value
    if t.fp8_format is not Fp8Format.none:
        return t.fp8_recipe.value
    return None


#: recipe -> (tokens alignment, width alignment) of one GEMM input (see the module docstring)
ALIGN: dict[str, tuple[int, int]] = {
    "delayed": (8, 16),
    "tensorwise": (8, 16),
    "blockwise": (8, 16),
    "mxfp8": (32, 32),
    "rowwise": (8, 16),
    "rowwise_with_gw_hp": (8, 16),
    "nvfp4": (16, 16),
}


#: Recipes whose sequence-parallel shard is quantized on each rank before the all-gather, so
#: the tokens of one rank (``micro_batch x seq_length / (cp x tp)``) must fill whole blocks:
#: Transformer Engine's MXFP8 path (``distributed.py::_all_gather_mxfp8`` gathers MXFP8 data
#: and 1x32 scales; the fused norm of ``LayerNormLinear`` writes the shard already quantized;
#: ``MXFP8Quantizer.is_quantizable`` needs both dims % 32), v2.x.
SP_SHARD_QUANTIZED = frozenset({"mxfp8"})


def sp_shard(spec: TrainSpec, recipe: str | None) -> int:
    """The sequence-parallel split the recipe's token alignment applies to: tp when
    sequence parallelism is on (tp > 1) and the recipe quantizes the shard
    (:data:`SP_SHARD_QUANTIZED`), else 1."""
    p = spec.parallel
    return p.tp if recipe in SP_SHARD_QUANTIZED and p.sequence_parallel and p.tp > 1 else 1


def token_seq_unit(spec: TrainSpec) -> tuple[int, str | None]:
    """(the multiple of seq_length that keeps every low-precision GEMM's tokens ``micro_batch
    x seq_length / cp`` aligned whatever the micro batch: the recipe's token alignment x cp
    (x tp for a recipe that quantizes the sequence-parallel shard, :func:`sp_shard`), the
    recipe) -- (1, None) without an FP8 / FP4 recipe. TRC217 / TRC218 fold it into their
    seq_length fix, so following one fix does not break TRC371."""
    recipe = recipe_name(spec)
    if recipe is None:
        return 1, None
    return ALIGN[recipe][0] * max(spec.parallel.cp, 1) * sp_shard(spec, recipe), recipe


@dataclass(frozen=True, slots=True)
class Gemm:
    """One low-precision GEMM of a rank: Megatron-Core layer name, the spec key its width comes
    from, input width K and output width N (elements, after the TP / ETP split)."""

    layer: str
    key: str
    k: int
    n: int


def local_gemms(spec: TrainSpec, tp: int, etp: int) -> list[Gemm]:
    """The Transformer Engine GEMMs of one transformer layer on one rank at ``tp`` / ``etp``.

    ``linear_qkv`` (column parallel): h -> (a + 2 g) d / tp, with KV heads replicated when
    tp > g (one KV head per rank, Megatron-Core >= 0.16); ``linear_proj`` (row): a d / tp -> h;
    ``linear_fc1``: h -> ffn (x2 for swiglu) / tp; ``linear_fc2``: ffn / tp -> h; experts the same
    with moe_ffn / etp; shared experts with their width / tp. Widths that do not divide are
    floored (the divisibility rules TRC201-TRC204 report those)."""
    m = spec.model
    h, a = m.hidden_size, m.num_attention_heads
    g = m.num_query_groups or a
    d = m.kv_channels or h // max(a, 1)
    glu = 2 if m.activation is Activation.swiglu else 1
    kv = 2 * max(g // tp, 1) * d
    out = [
        Gemm("linear_qkv", "model.num_attention_heads", h, a // tp * d + kv),
        Gemm("linear_proj", "model.num_attention_heads", a // tp * d, h),
    ]
    dense_layers = m.num_experts is None or m.moe_layer_freq > 1
    ffn = m.ffn_hidden_size or 4 * h
    if dense_layers:
        out += [
            Gemm("linear_fc1", "model.ffn_hidden_size", h, glu * ffn // tp),
            Gemm("linear_fc2", "model.ffn_hidden_size", ffn // tp, h),
        ]
    if m.num_experts is not None:
        e = m.moe_ffn_hidden_size or ffn
        out += [
            Gemm("experts.linear_fc1", "model.moe_ffn_hidden_size", h, glu * e // etp),
            Gemm("experts.linear_fc2", "model.moe_ffn_hidden_size", e // etp, h),
        ]
        shared = m.moe_shared_expert_intermediate_size
        if shared:
            out += [
                Gemm(
                    "shared_experts.linear_fc1",
                    "model.moe_shared_expert_intermediate_size",
                    h,
                    glu * shared // tp,
                ),
                Gemm(
                    "shared_experts.linear_fc2",
                    "model.moe_shared_expert_intermediate_size",
                    shared // tp,
                    h,
                ),
            ]
    return out


def misaligned(spec: TrainSpec, tp: int, etp: int, unit: int) -> list[Gemm]:
    """The GEMMs of :func:`local_gemms` with an input or output width not a multiple of
    ``unit``."""
    return [g for g in local_gemms(spec, tp, etp) if g.k % unit or g.n % unit]


def precision_shapes(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC370 (recipe vs GPU and, for blockwise, vs launch.versions.cuda), TRC371 (local GEMM
    shapes), TRC372 (BF16 first/last layers)."""
    t = spec.training
    recipe = recipe_name(spec)
    if (
        t.first_last_layers_bf16
        and t.fp8_format is not Fp8Format.none
        and t.fp4_format is Fp4Format.none
        and t.fp8_recipe is Fp8Recipe.delayed
    ):
        yield diag(
            R.FP8_BF16_LAYERS,
            "first_last_layers_bf16 with fp8_recipe delayed: "
            "Megatron-Core raises 'Delayed scaling does not support first / last layer "
            "in BF16' when it builds the config",
            "training.first_last_layers_bf16",
            related=("training.fp8_recipe",),
            fix="set training.fp8_recipe=tensorwise (current scaling keeps BF16 first "
            "and last layers), or training.first_last_layers_bf16=false",
            edits={"training.fp8_recipe": "tensorwise"},
            fp8_recipe="delayed",
        )
    if recipe is None:
        return
    if recipe == "mxfp8" and t.fp8_format is Fp8Format.hybrid:
        yield diag(
            R.MXFP8_FORMAT,
            "fp8_recipe mxfp8 with fp8_format hybrid quantizes "
            "gradients to E5M2; with 32-element E8M0 block scales the MXFP8 recipe is "
            "meant to run E4M3 in both passes, and hybrid diverged in Megatron-Bridge's "
            "runs (PR #638)",
            "training.fp8_format",
            related=("training.fp8_recipe",),
            fix="set training.fp8_format=e4m3",
            edits={"training.fp8_format": "e4m3"},
            fp8_format="hybrid",
            recipe="mxfp8",
        )
    if recipe == "mxfp8" and not t.fp8_param_gather:
        yield diag(
            R.MXFP8_PARAM_GATHER,
            "fp8_recipe mxfp8 without fp8_param_gather: every "
            "parameter is kept in BF16 and quantized to MXFP8 on each step, which "
            "Megatron-Core warns 'will use significant amount additional GPU memory'",
            "training.fp8_param_gather",
            related=("training.fp8_recipe",),
            fix="set training.fp8_param_gather=true (needs the distributed optimizer, "
            "parallel.zero_stage=1)",
            edits={"training.fp8_param_gather": True},
            recipe="mxfp8",
            fp8_param_gather=False,
        )
    yield from _gpu(spec, recipe)
    yield from _cuda(spec, recipe)
    yield from _shapes(spec, d, recipe)


#: The CUDA release Transformer Engine's FP8 block scaling needs (``check_fp8_block_scaling_
#: support``: ``float(torch.version.cuda) >= 12.9``, every TE release with the recipe, v2.3 ..
#: v2.18).
BLOCKWISE_CUDA = "12.9"


def _cuda(spec: TrainSpec, recipe: str) -> Iterator[Diagnostic]:
    """TRC370 on ``launch.versions.cuda``: the blockwise recipe with a CUDA (the CUDA that
    PyTorch was built with, ``torch.version.cuda``) older than :data:`BLOCKWISE_CUDA`;
    Transformer Engine raises 'FP8 block scaled GEMM requires ... CUDA >= 12.9' at the first
    ``fp8_autocast`` (NVIDIA-NeMo/RL#971). No finding when the CUDA release is not given."""
    if recipe != "blockwise" or not before(spec, "cuda", BLOCKWISE_CUDA):
        return
    cuda = (spec.launch.versions or {})["cuda"]
    yield diag(
        R.LOW_PRECISION_GPU,
        f"the blockwise recipe with CUDA {cuda}: Transformer "
        f"Engine's FP8 block-scaled GEMM needs CUDA {BLOCKWISE_CUDA} or later and "
        "raises 'FP8 block scaled GEMM requires ... CUDA >= 12.9' at the first FP8 "
        "autocast",
        "launch.versions.cuda",
        related=("training.fp8_recipe",),
        fix=f"use a PyTorch build (or an NGC PyTorch container) with CUDA "
        f"{BLOCKWISE_CUDA} or later (launch.versions.cuda), or set "
        "training.fp8_recipe=tensorwise (or delayed), which CUDA "
        f"{cuda} runs",
        edits={"launch.versions.cuda": BLOCKWISE_CUDA},
        recipe=recipe,
        cuda=cuda,
        needs=BLOCKWISE_CUDA,
    )


def _gpu(spec: TrainSpec, recipe: str) -> Iterator[Diagnostic]:
    gpu = spec.cluster.gpu
    if gpu not in GPU_ARCH:
        return  # custom: the architecture is not known
    arch, cc = GPU_ARCH[gpu]
    key = (
        "training.fp4_recipe"
        if recipe == "nvfp4"
        else ("training.fp8_format" if cc < (8, 9) else "training.fp8_recipe")
    )
    need = {"mxfp8": (10, 0), "nvfp4": (10, 0)}.get(recipe, (8, 9))
    if recipe == "blockwise":
        need = (9, 0)
    if cc < need:
        runs = [
            r
            for r in ("tensorwise", "delayed", "blockwise", "mxfp8")
            if cc >= {"mxfp8": (10, 0), "blockwise": (9, 0)}.get(r, (8, 9))
        ]
        if runs:
            fix = (
                f"set training.fp8_recipe to {' or '.join(runs)} (what {arch} runs), or "
                "cluster.gpu to b200 / gb200"
            )
            edits: dict[str, object] = {"training.fp8_recipe": runs[0]}
            if recipe == "nvfp4":
                fix = (
                    f"set training.fp4_format=none and training.fp8_format=hybrid with "
                    f"fp8_recipe {runs[0]} ({arch} has no FP4 tensor cores), or cluster.gpu "
                    "to b200 / gb200"
                )
                edits = {
                    "training.fp4_format": "none",
                    "training.fp8_format": "hybrid",
                    "training.fp8_recipe": runs[0],
                }
        else:
            fix = (
                f"train in training.precision without FP8 ({gpu.value} has no FP8 tensor "
                "cores): set training.fp8_format=none and training.fp4_format=none, or "
                "cluster.gpu to an h100-80g / h200 / b200"
            )
            edits = {"training.fp8_format": "none", "training.fp4_format": "none"}
        yield diag(
            R.LOW_PRECISION_GPU,
            f"the {recipe} recipe needs compute capability "
            f"{need[0]}.{need[1]}+, but cluster.gpu {gpu.value} is {arch} "
            f"({cc[0]}.{cc[1]}); Transformer Engine raises at the first FP8 autocast",
            key,
            related=("cluster.gpu",),
            fix=fix,
            edits=edits,
            recipe=recipe,
            gpu=gpu.value,
            compute_capability=f"{cc[0]}.{cc[1]}",
            needs=f"{need[0]}.{need[1]}",
        )
    elif recipe == "blockwise" and cc >= (10, 0):
        yield diag(
            R.LOW_PRECISION_GPU,
            f"the blockwise recipe on {arch} ({gpu.value}): "
            "Transformer Engine 2.x releases before Blackwell support refuse it ('FP8 "
            "block scaled GEMM requires Hopper'); MXFP8 is the block-scaled recipe "
            "Blackwell runs natively",
            "training.fp8_recipe",
            related=("cluster.gpu",),
            fix="set training.fp8_recipe=mxfp8, or pin a Transformer Engine that "
            "accepts blockwise on compute capability 10.0",
            edits={"training.fp8_recipe": "mxfp8"},
            severity=Severity.warning,
            recipe=recipe,
            gpu=gpu.value,
        )


def _shapes(spec: TrainSpec, d: Derived, recipe: str) -> Iterator[Diagnostic]:
    m, p, t = spec.model, spec.parallel, spec.training
    m_unit, unit = ALIGN[recipe]
    etp = d.etp
    bad = misaligned(spec, p.tp, etp, unit)
    if bad:
        names = ", ".join(f"{g.layer} ({g.k} -> {g.n})" for g in bad)
        dense_bad = [g for g in bad if not g.layer.startswith("experts.")]
        expert_bad = [g for g in bad if g.layer.startswith("experts.")]
        fixes = []
        edits: dict[str, object] = {}
        room = d.world_size // max(p.pp * p.cp, 1)
        if dense_bad:
            tps = [
                x
                for x in divisors(room)
                if m.num_attention_heads % x == 0
                and not [
                    g for g in misaligned(spec, x, etp, unit) if not g.layer.startswith("experts.")
                ]
            ]
            best = min(tps, key=lambda x: (abs(x - p.tp), x)) if tps else None
            if best is not None:
                fixes.append(
                    f"parallel.tp={best} (the nearest tp whose local widths are "
                    f"multiples of {unit})"
                )
                edits["parallel.tp"] = best
            key0 = dense_bad[0].key
            width = {
                "model.ffn_hidden_size": m.ffn_hidden_size,
                "model.moe_shared_expert_intermediate_size": m.moe_shared_expert_intermediate_size,
            }.get(key0)
            if width:
                step = unit * p.tp
                pad = -(-width // step) * step
                fixes.append(f"{key0}={pad} (padded to a multiple of {unit} x tp = {step})")
        if expert_bad:
            e = m.moe_ffn_hidden_size or m.ffn_hidden_size or 4 * m.hidden_size
            room_e = d.world_size // max(p.pp * p.ep, 1)
            etps = [x for x in divisors(room_e) if e % (x * unit) == 0]
            best_e = min(etps, key=lambda x: (abs(x - etp), x)) if etps else None
            if best_e is not None:
                fixes.append(
                    f"parallel.etp={best_e} (moe_ffn_hidden_size {e} / etp is a multiple of {unit})"
                )
                edits.setdefault("parallel.etp", best_e)
            step = unit * etp
            fixes.append(f"model.moe_ffn_hidden_size={-(-e // step) * step}")
        fixes.append(
            "training.fp8_recipe=tensorwise (16-element alignment)"
            if unit > 16
            else "training.fp8_format=none and training.fp4_format=none"
        )
        key = "parallel.tp" if dense_bad else "parallel.etp"
        at = f"tp={p.tp}" + (f", etp={etp}" if m.num_experts is not None else "")
        recipe_key = "training.fp4_recipe" if recipe == "nvfp4" else "training.fp8_recipe"
        yield diag(
            R.LOW_PRECISION_SHAPES,
            f"with the {recipe} recipe every GEMM width must be "
            f"a multiple of {unit}, but at {at} these local layers are "
            f"not: {names}",
            key,
            related=tuple(
                dict.fromkeys(
                    k
                    for k in ("parallel.tp", "parallel.etp", bad[0].key, recipe_key)
                    if k != key and (k != "parallel.etp" or m.num_experts is not None)
                )
            ),
            fix="set " + "; or ".join(fixes),
            edits=edits,
            recipe=recipe,
            unit=unit,
            layers=[g.layer for g in bad],
            tp=p.tp,
            etp=etp,
        )
    shard = sp_shard(spec, recipe)
    tokens = t.micro_batch_size * m.seq_length // (max(p.cp, 1) * shard)
    if tokens % m_unit:
        # seq must keep tokens % m_unit == 0 and the CP (2 cp) and SP (tp) splits whole
        seq_step = _lcm(m_unit * max(p.cp, 1) * shard, 2 * p.cp if p.cp > 1 else 1)
        seq_step = _lcm(seq_step, max(p.cp, 1) * (p.tp if p.sequence_parallel else 1))
        seqs = nearest_multiple(m.seq_length, seq_step)
        seq_fix = seqs[-1]
        what = (
            "micro_batch_size x seq_length / (cp x tp), the sequence-parallel shard each "
            "rank quantizes before the all-gather"
            if shard > 1
            else "micro_batch_size x seq_length / cp"
        )
        yield diag(
            R.LOW_PRECISION_SHAPES,
            f"with the {recipe} recipe the tokens of one GEMM "
            f"({what} = {tokens}) must be a multiple of {m_unit}",
            "model.seq_length",
            related=("training.micro_batch_size", "parallel.cp")
            + (("parallel.tp", "parallel.sequence_parallel") if shard > 1 else ()),
            fix=f"set model.seq_length to {or_list(seqs)} (a multiple of {seq_step}: "
            f"{m_unit} tokens per GEMM x cp {p.cp}"
            + (f", split by tp {p.tp} for sequence parallelism" if p.sequence_parallel else "")
            + "), or pad every sample to it; or "
            f"training.micro_batch_size to a "
            f"multiple of {m_unit // _gcd(m_unit, tokens)}",
            edits={"model.seq_length": seq_fix},
            recipe=recipe,
            tokens=tokens,
            unit=m_unit,
        )


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _lcm(a: int, b: int) -> int:
    return a * b // _gcd(a, b)
