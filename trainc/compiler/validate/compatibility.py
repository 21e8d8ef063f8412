"""TRC3xx: feature combinations the engines reject, or accept and then misbehave.

Sources: Megatron-Core ModelParallelConfig / TransformerConfig ``__post_init__`` (SP needs TP,
recompute arguments, MoE+TP wants SP), Megatron-LM validate_args (overlap p2p with interleaving),
DeepSpeed PipelineEngine (ZeRO-2/3 + PP assertion; gradients summed over micro-batches, bug case
BC-025) and DeepSpeedZeroConfig / engine (offload_param at stage 3, offload_optimizer needs a
ZeRO stage, nvme needs a path). Versions: Megatron-LM core_v0.16.1
(``megatron/training/arguments.py::validate_args``, ``megatron/core/model_parallel_config.py``,
``megatron/core/transformer/transformer_config.py``); DeepSpeed v0.19.8
(``deepspeed/runtime/zero/config.py::DeepSpeedZeroConfig``, ``deepspeed/runtime/pipe/engine.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from trainc.capabilities import capability, unsupported_axes
from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.derive import Derived, stage_chunk_sizes
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.comm_overlap import comm_overlap
from trainc.compiler.validate.fsdp import fsdp_rules, inert_fsdp
from trainc.compiler.validate.fsdp_ac import fsdp_ac_rules
from trainc.compiler.validate.megatron_fsdp import megatron_fsdp
from trainc.compiler.validate.moe_dispatch import moe_dispatch
from trainc.compiler.validate.moe_router import megatron_only_keys, moe_router
from trainc.compiler.validate.precision import precision
from trainc.compiler.validate.precision_shapes import precision_shapes
from trainc.compiler.validate.recipe import recipe
from trainc.compiler.validate.util import divisors, show
from trainc.compiler.validate.versions import before, release
from trainc.schemas import (
    Device,
    Engine,
    Entrypoint,
    Fp4Format,
    Fp8Format,
    LaunchSpec,
    LrDecayStyle,
    ModelSpec,
    MoeLoadBalancing,
    MoeScoreFunction,
    Offload,
    Optimizer,
    PositionEmbedding,
    Precision,
    Recompute,
    RecomputeMethod,
    TimeModel,
    TrainingSpec,
    TrainSpec,
)


def compatibility(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """All TRC3xx rules."""
    m, p, t = spec.model, spec.parallel, spec.training
    if p.sequence_parallel and p.tp == 1:
        yield diag(
            R.SP_NEEDS_TP,
            "sequence_parallel is set but tp is 1 (Megatron-Core raises "
            "'Cannot use sequence parallelism without tensor parallelism'; Megatron-LM's "
            "CLI silently drops it)",
            "parallel.sequence_parallel",
            related=("parallel.tp",),
            fix="set parallel.sequence_parallel=false, or tp > 1",
            edits={"parallel.sequence_parallel": False},
            tp=p.tp,
        )
    if m.num_experts and p.tp > 1 and not p.sequence_parallel:
        yield diag(
            R.MOE_TP_SP,
            f"sequence_parallel is off for an MoE model with tp ({p.tp}) > 1; "
            "Megatron-Core 0.16.1 MoELayer.forward raises ValueError in training "
            "('performance may degrade if MoE and tensor parallelism are enabled without "
            "also enabling sequence parallelism')",
            "parallel.sequence_parallel",
            related=("parallel.tp", "model.num_experts"),
            fix="set parallel.sequence_parallel=true",
            edits={"parallel.sequence_parallel": True},
            tp=p.tp,
        )
    if not m.num_experts and (p.ep > 1 or (p.etp is not None and p.etp != p.tp)):
        yield diag(
            R.EP_NEEDS_MOE,
            f"ep ({p.ep}) / etp ({p.etp}) are set but the model has no "
            "experts (num_experts is null)",
            "parallel.ep",
            related=("model.num_experts",),
            fix="set parallel.ep=1 and leave parallel.etp null, or set model.num_experts",
            edits={"parallel.ep": 1},
            ep=p.ep,
        )
    if p.pp == 2 and p.vpp > 1:
        yield diag(
            R.VPP_PP2_P2P,
            f"pp=2 with vpp ({p.vpp}): trainc emits overlap_p2p_comm=true "
            "and batch_p2p_comm=false, because Megatron-Core's batched default silently "
            "corrupts gradients on this layout",
            "parallel.vpp",
            related=("parallel.pp",),
            pp=p.pp,
            vpp=p.vpp,
        )
    if m.moe_layer_freq > m.num_layers and m.num_experts:
        yield diag(
            R.MOE_LAYER_FREQ,
            f"moe_layer_freq ({m.moe_layer_freq}) exceeds num_layers ({m.num_layers})",
            "model.moe_layer_freq",
            related=("model.num_layers",),
            fix=f"set model.moe_layer_freq between 1 and {m.num_layers}",
            edits={"model.moe_layer_freq": 1},
            moe_layer_freq=m.moe_layer_freq,
            num_layers=m.num_layers,
        )
    yield from _mla(spec)
    yield from window_attention(spec)
    yield from _engine(spec, d)
    yield from _runner(spec, d)
    yield from precision(spec, d)
    yield from precision_shapes(spec, d)
    yield from moe_dispatch(spec, d)
    yield from moe_router(spec)
    yield from megatron_only_keys(spec)
    yield from comm_overlap(spec, d)
    yield from megatron_fsdp(spec, d)
    yield from _schedule(spec)
    yield from _moe(spec)
    for key, why in _inert(spec):
        yield diag(
            R.SETTING_WITHOUT_EFFECT,
            f"{key} is set but has no effect: {why}",
            key,
            fix=f"remove {key}, or change what makes it inert",
            setting=key,
            why=why,
        )
    yield from _half_band(spec)
    yield from _recompute(spec, d)
    yield from recipe(spec)
    if t.min_lr > t.lr:
        yield diag(
            R.LR_RANGE,
            f"min_lr ({t.min_lr:g}) exceeds lr ({t.lr:g})",
            "training.min_lr",
            related=("training.lr",),
            fix=f"set training.min_lr to at most {t.lr:g}",
            edits={"training.min_lr": t.lr},
            min_lr=t.min_lr,
            lr=t.lr,
        )
    if spec.launch.device is Device.cpu and t.precision is Precision.fp16:
        yield diag(
            R.FP16_CPU,
            "precision (fp16) does not run on launch.device (cpu): "
            "gloo and the CPU kernels have no fp16 path",
            "training.precision",
            related=("launch.device",),
            fix="set training.precision to bf16 or fp32 for launch.device=cpu",
            edits={"training.precision": "bf16"},
            precision="fp16",
            device="cpu",
        )


def _engine(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """The engine's own checks, looked up by ``spec.engine`` in :data:`_ENGINE_CHECKS`."""
    yield from _ENGINE_CHECKS[spec.engine](spec, d)


def _fsdp_engine(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC34x: engine=fsdp's rules (mesh, precision, schedule, activation checkpointing)."""
    yield from fsdp_rules(spec, d)
    yield from fsdp_ac_rules(spec)


def _megatron_engine(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC307 / TRC306: ZeRO stage 2 and ZeRO offload with engine=megatron."""
    p, t = spec.parallel, spec.training
    offload = t.offload_optimizer is not Offload.none or t.offload_param is not Offload.none
    if p.zero_stage == 2:
        yield diag(
            R.MEGATRON_ZERO,
            "engine=megatron has no ZeRO stage 2 in trainc; it offers zero_stage 0 "
            "(DDP), 1 (distributed optimizer: optimizer state and fp32 master weights "
            "sharded over dp*cp, ZeRO-1 equivalent) and 3 (Megatron-FSDP: weights, "
            "gradients and optimizer state sharded)",
            "parallel.zero_stage",
            related=("engine",),
            fix="set parallel.zero_stage=1 (or 3 to shard the "
            "weights too), or engine=deepspeed for ZeRO-2",
            edits={"parallel.zero_stage": 1},
            zero_stage=p.zero_stage,
        )
    if offload:
        key = (
            "training.offload_optimizer"
            if t.offload_optimizer is not Offload.none
            else "training.offload_param"
        )
        yield diag(
            R.OFFLOAD_ENGINE,
            f"{key} needs engine=deepspeed, not "
            f"({spec.engine.value}); trainc does not emit Megatron's CPU optimizer "
            "offload",
            key,
            related=("engine",),
            fix=f"set engine=deepspeed, or {key}=none",
            engine=spec.engine.value,
        )


def _deepspeed_engine(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC304 / TRC305 / TRC320 / TRC321: DeepSpeed's ZeRO stages and offload."""
    p, t = spec.parallel, spec.training
    if p.zero_stage >= 2 and p.pp > 1:
        yield diag(
            R.DS_ZERO_PP,
            f"zero_stage ({p.zero_stage}) is incompatible with DeepSpeed "
            f"pipeline parallelism (pp = {p.pp}); DeepSpeed's PipelineEngine asserts "
            "stage < 2",
            "parallel.zero_stage",
            related=("parallel.pp", "engine"),
            fix="set parallel.zero_stage=1, or parallel.pp=1",
            edits={"parallel.zero_stage": 1},
            zero_stage=p.zero_stage,
            pp=p.pp,
        )
    if t.offload_param is not Offload.none and p.zero_stage != 3:
        yield diag(
            R.OFFLOAD_PARAM_STAGE,
            f"offload_param ({t.offload_param.value}) works only "
            f"with ZeRO stage 3 (zero_stage is {p.zero_stage}); DeepSpeed silently ignores "
            "it otherwise",
            "training.offload_param",
            related=("parallel.zero_stage",),
            fix="set parallel.zero_stage=3, or training.offload_param=none",
            edits={"training.offload_param": "none"},
            zero_stage=p.zero_stage,
        )
    if t.offload_optimizer is not Offload.none and p.zero_stage == 0:
        yield diag(
            R.OFFLOAD_OPTIMIZER_STAGE,
            f"offload_optimizer ({t.offload_optimizer.value}) "
            "needs ZeRO stage 1-3 (zero_stage is 0); DeepSpeed would still pick its CPU "
            "Adam without partitioning",
            "training.offload_optimizer",
            related=("parallel.zero_stage",),
            fix="set parallel.zero_stage to 1, 2 or 3, or training.offload_optimizer=none",
            edits={"parallel.zero_stage": 1},
            zero_stage=0,
        )
    nvme = Offload.nvme in (t.offload_optimizer, t.offload_param)
    if nvme and not t.nvme_path:
        yield diag(
            R.NVME_PATH,
            f"offload_optimizer ({t.offload_optimizer.value}) / offload_param "
            f"({t.offload_param.value}) select nvme but training.nvme_path is not set",
            "training.nvme_path",
            related=("training.offload_optimizer", "training.offload_param"),
            fix="set training.nvme_path to a local NVMe directory on every node",
            offload_optimizer=t.offload_optimizer.value,
            offload_param=t.offload_param.value,
        )


#: Each engine's own checks (a new engine is a row here and in ``decide.ENGINE_TRAITS``).
_ENGINE_CHECKS: Mapping[Engine, Callable[[TrainSpec, Derived], Iterator[Diagnostic]]] = {
    Engine.megatron: _megatron_engine,
    Engine.deepspeed: _deepspeed_engine,
    Engine.fsdp: _fsdp_engine,
}


def _runner(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC313 / TRC325: what the spec's runner (engine x entrypoint, :mod:`trainc.capabilities`)
    cannot run is an error here, not a refusal of the worker at start."""
    p, lc = spec.parallel, spec.launch
    cap = capability(spec.engine, lc.entrypoint)
    if cap is None:
        what, own = (
            ("torchtitan's torchtitan.train", "fsdp")
            if lc.entrypoint is Entrypoint.torchtitan
            else ("Megatron-LM's pretrain_gpt.py", "megatron")
        )
        yield diag(
            R.ENTRYPOINT_RUNS,
            f"launch.entrypoint ({lc.entrypoint.value}) starts "
            f"{what}, which cannot run engine={spec.engine.value}",
            "launch.entrypoint",
            related=("engine",),
            fix=f"set launch.entrypoint=trainc (the trainc worker runs every engine), or "
            f"engine={own}",
            edits={"launch.entrypoint": "trainc"},
            entrypoint=lc.entrypoint.value,
            engine=spec.engine.value,
        )
        return
    if lc.device not in cap.devices:
        yield diag(
            R.ENTRYPOINT_RUNS,
            f"launch.device ({lc.device.value}) is not a device "
            f"{cap.runner} runs on (it needs "
            f"{', '.join(sorted(x.value for x in cap.devices))})",
            "launch.device",
            related=("launch.entrypoint",),
            fix="set launch.entrypoint=trainc to try the layout on CPU with the trainc "
            "worker, or launch.device=cuda",
            edits={"launch.entrypoint": "trainc"},
            device=lc.device.value,
            entrypoint=lc.entrypoint.value,
        )
    degrees = {"tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "ep": p.ep, "dp": d.dp or 1}
    for axis in unsupported_axes(cap, degrees):
        yield diag(
            R.DS_UNSUPPORTED_AXIS,
            f"{axis} = {degrees[axis]}, but {cap.runner} cannot split {axis}: {cap.why}",
            f"parallel.{axis}",
            related=("engine",),
            fix=f"set parallel.{axis}=1 (and raise tp or dp instead), or "
            + (traits(spec).axes_elsewhere),
            edits={f"parallel.{axis}": 1},
            axis=axis,
            degree=degrees[axis],
        )


def _deepspeed_shift(spec: TrainSpec) -> str | None:
    """How DeepSpeed 0.19.8's scheduler (ds_config.json, the trainc worker's DeepSpeed engine)
    departs from Megatron-Core's OptimizerParamScheduler for the spec's schedule, or None
    (engine is not DeepSpeed, or constant without a warm-up: the same at every step). DeepSpeed
    sets the rate of iteration -1 when it builds the scheduler, so the first step trains at lr
    0 and a warm-up reaches each value one step late; WarmupCosineLR's decay counts
    ``it - warmup + 1`` and is not delayed, so after a warm-up the peak is never used, and
    without one (warmup_num_steps = max(2, n)) the cosine runs over lr_decay_iters - 2 steps.
    The cases no DeepSpeed scheduler expresses at all are TRC323's. Measured step for step in
    tests/unit/compiler/targets/test_engine_agreement.py (strict xfails)."""
    t = spec.training
    if not traits(spec).deepspeed_scheduler or t.lr_warmup_iters == 1:
        return None  # a 1-step warm-up is TRC323's
    style, w = t.lr_decay_style, t.lr_warmup_iters
    if style is LrDecayStyle.cosine:
        return (
            f"the warm-up runs one step late and the cosine does not, so the peak lr "
            f"({t.lr:g}) is never used"
            if w
            else "the first step trains at lr 0 and the cosine runs 2 steps short of lr_decay_iters"
        )
    if w and style in (LrDecayStyle.linear, LrDecayStyle.constant):
        return "every step trains at the rate Megatron-Core uses one step earlier"
    return None


def _schedule(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC323 / TRC324: the learning-rate schedule and the DDP overlap switches, per engine."""
    yield from _lr_schedule(spec)
    yield from _ddp_overlap(spec)


def _lr_schedule(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC323 / TRC317: the learning-rate schedule the engine runs, and DeepSpeed's shift of it."""
    t = spec.training
    cap = capability(spec.engine, spec.launch.entrypoint)
    style = t.lr_decay_style
    refused = cap is not None and style not in cap.lr_decay_styles
    if refused:
        assert cap is not None
        ok = ", ".join(sorted(s.value for s in cap.lr_decay_styles))
        yield diag(
            R.LR_SCHEDULE_ENGINE,
            f"lr_decay_style ({style.value}) has no equivalent in "
            f"engine={spec.engine.value} ({cap.runner} honours {ok})",
            "training.lr_decay_style",
            related=("engine",),
            fix=f"set training.lr_decay_style to one of {ok}, or engine=megatron",
            edits={"training.lr_decay_style": "cosine"},
            style=style.value,
        )
    if traits(spec).deepspeed_scheduler and style is LrDecayStyle.linear and t.min_lr > 0:
        yield diag(
            R.LR_SCHEDULE_ENGINE,
            f"lr_decay_style linear with min_lr ({t.min_lr:g}) > 0: "
            "DeepSpeed's WarmupDecayLR warms up from the value it decays to, so it "
            "cannot both start at 0 (or at the peak) and end at min_lr",
            "training.min_lr",
            related=("training.lr_decay_style", "training.lr_warmup_iters", "engine"),
            fix="set training.min_lr=0, or lr_decay_style=cosine",
            edits={"training.min_lr": 0.0},
            min_lr=t.min_lr,
            warmup=t.lr_warmup_iters,
        )
    if traits(spec).deepspeed_scheduler and t.lr_warmup_iters == 1:
        yield diag(
            R.LR_SCHEDULE_ENGINE,
            "lr_warmup_iters (1): DeepSpeed 0.19.8's schedulers warm "
            "up over at least 2 steps (warmup_num_steps = max(2, n))",
            "training.lr_warmup_iters",
            related=("engine",),
            fix="set training.lr_warmup_iters to 0 or at least 2",
            edits={"training.lr_warmup_iters": 2},
            warmup=1,
        )
    decay = t.lr_decay_iters or t.train_iters
    shifted = _deepspeed_shift(spec) if not refused else None
    if shifted:
        yield diag(
            R.DS_LR_SHIFTED,
            f"engine=deepspeed runs the {style.value} schedule (warm-up "
            f"{t.lr_warmup_iters} steps) shifted against Megatron-Core's: {shifted} "
            "(DeepSpeed 0.19.8's scheduler; "
            "docs/divergences.md)",
            "training.lr_decay_style",
            related=("training.lr_warmup_iters", "engine"),
            fix="accept DeepSpeed's schedule, or set engine=megatron (or fsdp) for the "
            "spec's schedule step for step",
            style=style.value,
            warmup=t.lr_warmup_iters,
        )
    if t.lr_warmup_iters >= decay:
        yield diag(
            R.LR_SCHEDULE_ENGINE,
            f"lr_warmup_iters ({t.lr_warmup_iters}) must be below "
            f"lr_decay_iters ({decay}): Megatron-Core's OptimizerParamScheduler asserts "
            "lr_warmup_steps < lr_decay_steps",
            "training.lr_warmup_iters",
            related=("training.lr_decay_iters", "training.train_iters"),
            fix=f"set training.lr_warmup_iters below {decay}",
            edits={"training.lr_warmup_iters": max(decay - 1, 0)},
            warmup=t.lr_warmup_iters,
            decay=decay,
        )
    if (
        style is LrDecayStyle.WSD
        and not refused
        and (t.lr_wsd_decay_iters is None or t.lr_wsd_decay_iters > decay)
    ):
        have = (
            "is not set"
            if t.lr_wsd_decay_iters is None
            else f"({t.lr_wsd_decay_iters}) exceeds lr_decay_iters ({decay})"
        )
        yield diag(
            R.LR_SCHEDULE_ENGINE,
            f"lr_decay_style WSD needs lr_wsd_decay_iters (the "
            f"final decay phase) at most lr_decay_iters; it {have}",
            "training.lr_wsd_decay_iters",
            related=("training.lr_decay_style",),
            fix=f"set training.lr_wsd_decay_iters, e.g. {max(decay // 10, 1)} (10 %)",
            edits={"training.lr_wsd_decay_iters": max(decay // 10, 1)},
            decay=decay,
        )


def _ddp_overlap(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC324: Megatron DDP's overlap switches (another engine overlaps its own way)."""
    t = spec.training
    own = traits(spec).own_overlap
    if own is not None:
        for key in ("overlap_grad_reduce", "overlap_param_gather"):
            if getattr(t, key):
                yield diag(
                    R.DDP_OVERLAP,
                    f"training.{key} is a Megatron-Core DDP setting; "
                    f"engine={spec.engine.value} overlaps with its own {own}",
                    f"training.{key}",
                    related=("engine",),
                    fix=f"remove training.{key}",
                    edits={f"training.{key}": None},
                    engine=spec.engine.value,
                )
        return
    # Megatron-FSDP (zero_stage 3) forces both overlaps on: TRC383 says so
    if spec.parallel.zero_stage == 3:
        return
    if t.overlap_param_gather and not (spec.parallel.zero_stage == 1 and t.overlap_grad_reduce):
        missing = (
            "the distributed optimizer (zero_stage 1)"
            if spec.parallel.zero_stage != 1
            else "overlap_grad_reduce"
        )
        yield diag(
            R.DDP_OVERLAP,
            f"overlap_param_gather needs {missing} (Megatron-LM "
            "validate_args refuses it otherwise)",
            "training.overlap_param_gather",
            related=("training.overlap_grad_reduce", "parallel.zero_stage"),
            fix="set training.overlap_param_gather=false",
            edits={"training.overlap_param_gather": False},
            missing=missing,
        )


def window_attention(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC310: ``model.window_size`` (keys left of each query, Megatron-Core
    ``TransformerConfig.window_size = (w, 0)``) in ``[1, seq_length - 2]`` (from
    ``seq_length - 1`` on every query sees all its causal keys) and
    ``model.window_attn_skip_freq`` >= 1 and only with a window (megatron-core 0.16.1
    ``transformer/utils.py::is_layer_window_attention`` reads it only when ``window_size`` is
    set: ``layer_number % N != 0`` is windowed)."""
    m = spec.model
    w, n, s = m.window_size, m.window_attn_skip_freq, m.seq_length
    if w is not None and w < 1:
        yield diag(
            R.WINDOW_ATTENTION,
            f"model.window_size ({w}) is below 1: each query must see at least one key to "
            "its left (Megatron-Core reads -1 as an unbounded window)",
            "model.window_size",
            fix="set model.window_size to the keys left of each query (Hugging Face "
            "sliding_window - 1), or remove it for full causal attention",
            edits={"model.window_size": None, "model.window_attn_skip_freq": None},
            window_size=w,
        )
    elif w is not None and w >= s - 1:
        yield diag(
            R.WINDOW_ATTENTION,
            f"model.window_size ({w}) covers the whole {s}-token sequence (the last query "
            f"has {s - 1} keys to its left): the window is full causal attention",
            "model.window_size",
            related=("model.seq_length",),
            fix="remove model.window_size (and model.window_attn_skip_freq): full causal "
            "attention is the same model at this seq_length",
            edits={"model.window_size": None, "model.window_attn_skip_freq": None},
            window_size=w,
            seq_length=s,
        )
    if n is not None and n < 1:
        yield diag(
            R.WINDOW_ATTENTION,
            f"model.window_attn_skip_freq ({n}) is below 1: it is the period N of the "
            "full-attention layers (layers N, 2N, ... attend fully)",
            "model.window_attn_skip_freq",
            fix="set model.window_attn_skip_freq to N >= 1, or remove it to window every layer",
            edits={"model.window_attn_skip_freq": None},
            window_attn_skip_freq=n,
        )
    elif n is not None and w is None:
        yield diag(
            R.WINDOW_ATTENTION,
            f"model.window_attn_skip_freq ({n}) without model.window_size: there is no "
            "sliding window to skip (Megatron-Core ignores it)",
            "model.window_attn_skip_freq",
            related=("model.window_size",),
            fix="set model.window_size, or remove model.window_attn_skip_freq",
            edits={"model.window_attn_skip_freq": None},
            window_attn_skip_freq=n,
        )


def _mla(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC316: multi-head latent attention's own constraints (Megatron-Core
    ``MLATransformerConfig``); engine=fsdp refuses it (TRC344)."""
    m = spec.model
    if not m.multi_latent_attention:
        return
    a, g = m.num_attention_heads, m.num_query_groups
    if g is not None and g != a:
        yield diag(
            R.MLA_SETTINGS,
            f"model.num_query_groups ({g}) with multi_latent_attention: "
            "MLA has no grouped-query attention, its key/value up projection gives every "
            f"one of the {a} heads its own key and value (Megatron-LM asserts not "
            "--group-query-attention)",
            "model.num_query_groups",
            related=("model.multi_latent_attention",),
            fix="remove model.num_query_groups (the latent kv_lora_rank is MLA's KV compression)",
            edits={"model.num_query_groups": a},
            num_query_groups=g,
            num_attention_heads=a,
        )
    if m.position_embedding is not PositionEmbedding.rope:
        yield diag(
            R.MLA_SETTINGS,
            "multi_latent_attention with learned positions: MLA rotates "
            "its qk_pos_emb_head_dim channels with RoPE and has no absolute position "
            "embedding",
            "model.position_embedding",
            related=("model.multi_latent_attention",),
            fix="set model.position_embedding=rope",
            edits={"model.position_embedding": "rope"},
            setting="position_embedding",
        )
    if m.qk_pos_emb_head_dim % 2:
        yield diag(
            R.MLA_SETTINGS,
            f"model.qk_pos_emb_head_dim ({m.qk_pos_emb_head_dim}) is odd: "
            "RoPE rotates channel pairs",
            "model.qk_pos_emb_head_dim",
            related=("model.multi_latent_attention",),
            fix=f"set model.qk_pos_emb_head_dim={m.qk_pos_emb_head_dim + 1}",
            edits={"model.qk_pos_emb_head_dim": m.qk_pos_emb_head_dim + 1},
            qk_pos_emb_head_dim=m.qk_pos_emb_head_dim,
        )


def _inert(spec: TrainSpec) -> Iterator[tuple[str, str]]:
    """(key, why it has no effect) for keys set away from their default that nothing reads."""
    m, t, lc = spec.model, spec.training, spec.launch
    dm, dt, dl = (
        ModelSpec.__dataclass_fields__,
        TrainingSpec.__dataclass_fields__,
        LaunchSpec.__dataclass_fields__,
    )

    def moved(obj: object, fields: dict[str, Any], key: str) -> bool:
        return bool(getattr(obj, key) != fields[key].default)

    if t.optimizer is Optimizer.sgd:
        yield from (
            (f"training.{k}", "optimizer is sgd")
            for k in ("adam_beta1", "adam_beta2", "adam_eps")
            if moved(t, dt, k)
        )
    elif moved(t, dt, "sgd_momentum"):
        yield "training.sgd_momentum", f"optimizer is {t.optimizer.value}"
    if t.lr_decay_style is not LrDecayStyle.WSD:
        yield from (
            (f"training.{k}", f"lr_decay_style is {t.lr_decay_style.value}")
            for k in ("lr_wsd_decay_iters", "lr_wsd_decay_style")
            if moved(t, dt, k)
        )
    if m.position_embedding is not PositionEmbedding.rope:
        yield from (
            (f"model.{k}", "position_embedding is learned")
            for k in ("rope_scaling_factor", "rotary_percent")
            if moved(m, dm, k)
        )
    if not m.multi_latent_attention:
        yield from (
            (f"model.{k}", "multi_latent_attention is false")
            for k in (
                "q_lora_rank",
                "kv_lora_rank",
                "qk_head_dim",
                "qk_pos_emb_head_dim",
                "v_head_dim",
            )
            if moved(m, dm, k)
        )
    elif m.num_attention_heads and m.kv_channels not in (
        None,
        m.hidden_size // m.num_attention_heads,
    ):
        # normalize fills hidden_size // heads; another value was written, and MLASelfAttention
        # (megatron-core 0.16.1) sizes its heads from qk_head_dim / qk_pos_emb_head_dim /
        # v_head_dim only
        yield (
            "model.kv_channels",
            "multi_latent_attention is true (head widths are "
            "qk_head_dim + qk_pos_emb_head_dim and v_head_dim)",
        )
    if m.num_experts is None:
        dense = "the model has no experts (num_experts is null)"
        yield from (
            (f"model.{k}", dense)
            for k in (
                "moe_router_load_balancing_type",
                "moe_aux_loss_coeff",
                "moe_z_loss_coeff",
                "moe_router_score_function",
                "moe_router_topk_scaling_factor",
                "moe_expert_capacity_factor",
                "moe_router_topk",
                "moe_ffn_hidden_size",
                "moe_shared_expert_intermediate_size",
                "moe_layer_freq",
                "moe_token_dispatcher_type",
                "moe_flex_dispatcher_backend",
                "moe_pad_expert_input_to_capacity",
                "moe_router_padding_for_quantization",
                "moe_first_k_dense_layers",
                "moe_router_num_groups",
                "moe_router_group_topk",
                "moe_router_enable_expert_bias",
            )
            if moved(m, dm, k)
        )
        if m.moe_router_pre_softmax:  # normalize fills false on a dense model
            yield "model.moe_router_pre_softmax", dense
    if t.nvme_path is not None and Offload.nvme not in (t.offload_optimizer, t.offload_param):
        yield "training.nvme_path", "neither offload_optimizer nor offload_param is nvme"
    if lc.data_path is None and spec.data.paths is None and moved(lc, dl, "data_split"):
        yield "launch.data_split", "launch.data_path is not set (mock data)"
    if not spec.data.packed and spec.data.pad_to_multiple_of is not None:
        yield "data.pad_to_multiple_of", "data.packed is false (no packs to pad)"
    fp8, fp4 = t.fp8_format is not Fp8Format.none, t.fp4_format is not Fp4Format.none
    if not fp8 and moved(t, dt, "fp8_recipe"):
        yield "training.fp8_recipe", "fp8_format is none"
    if not (fp8 or fp4) and moved(t, dt, "first_last_layers_bf16"):
        yield "training.first_last_layers_bf16", "fp8_format and fp4_format are none"
    yield from inert_fsdp(spec)


def _half_band(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC329: one end of the calibrated step-time band without the other. The band needs both
    (:func:`trainc.compiler.estimate.band.step_time_band`, :func:`trainc.planner.error_band`),
    so the one set is ignored: the kernel model's estimates carry the published-runs band, the
    seed model's none, and the planner ties layouts within its default band."""
    c = spec.cluster
    ends = {
        "cluster.step_time_p10_ratio": c.step_time_p10_ratio,
        "cluster.step_time_p90_ratio": c.step_time_p90_ratio,
    }
    given = [k for k, v in ends.items() if v is not None]
    if len(given) != 1:
        return
    [key] = given
    [other] = [k for k in ends if k != key]
    instead = (
        "the estimates carry the published-runs band instead (trainc/conf/step_time_band.yaml)"
        if c.time_model is TimeModel.kernels
        else "the estimates carry no band instead (time_model seed has no published-runs band)"
    )
    why = (
        f"the calibrated step-time band needs both ends and {other} is not set, so "
        f"{instead} and the planner ties layouts within its default 10 % band"
    )
    yield diag(
        R.SETTING_WITHOUT_EFFECT,
        f"{key} is set but has no effect: {why}",
        key,
        related=(other,),
        fix=f"set {other} too (`trainc calibrate` writes both), or remove {key}",
        setting=key,
        why=why,
    )


def _moe(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC326 / TRC327: MoE settings Megatron-Core rejects when it builds the model."""
    m, p = spec.model, spec.parallel
    if m.num_experts is None:
        return
    lb = m.moe_router_load_balancing_type
    if m.moe_expert_capacity_factor is not None and lb is MoeLoadBalancing.sinkhorn:
        yield diag(
            R.MOE_CAPACITY_BALANCING,
            "moe_expert_capacity_factor "
            f"({m.moe_expert_capacity_factor:g}) works only with aux_loss, seq_aux_loss, "
            f"global_aux_loss or none load balancing, not {lb.value}",
            "model.moe_expert_capacity_factor",
            related=("model.moe_router_load_balancing_type",),
            fix="set model.moe_router_load_balancing_type=aux_loss, or "
            "model.moe_expert_capacity_factor=null (dropless)",
            edits={"model.moe_router_load_balancing_type": "aux_loss"},
            balancing=lb.value,
        )
    if (
        m.moe_router_topk == 1
        and m.moe_router_score_function is MoeScoreFunction.softmax
        and m.moe_router_pre_softmax is False
        and lb is not MoeLoadBalancing.sinkhorn
    ):
        yield diag(
            R.MOE_TOP1_PRE_SOFTMAX,
            "moe_router_topk 1 with a softmax router and "
            "moe_router_pre_softmax false: the softmax of one score is always 1, so the "
            "router gets no gradient (Megatron-Core refuses it when it builds the config)",
            "model.moe_router_pre_softmax",
            related=("model.moe_router_topk",),
            fix="remove model.moe_router_pre_softmax (trainc sets it for top-1), or set it true",
            edits={"model.moe_router_pre_softmax": True},
            topk=1,
        )
    shared = m.moe_shared_expert_intermediate_size
    if shared is not None and shared % p.tp:
        lower, upper = shared // p.tp * p.tp, -(-shared // p.tp) * p.tp
        options = [x for x in (lower, upper) if x > 0]
        yield diag(
            R.SHARED_EXPERT_TP,
            f"moe_shared_expert_intermediate_size ({shared}) is not a "
            f"multiple of tp ({p.tp}); Megatron-Core fails at model build "
            f"('{shared} is not divisible by {p.tp}')",
            "model.moe_shared_expert_intermediate_size",
            related=("parallel.tp",),
            fix=f"set model.moe_shared_expert_intermediate_size to "
            f"{' or '.join(map(str, options))}",
            edits={"model.moe_shared_expert_intermediate_size": options[-1]},
            shared=shared,
            tp=p.tp,
        )


def _recompute(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    t, p = spec.training, spec.parallel
    if t.recompute is not Recompute.full:
        for key, val in (
            ("training.recompute_method", t.recompute_method),
            ("training.recompute_num_layers", t.recompute_num_layers),
        ):
            if val is not None:
                shown = getattr(val, "value", val)
                yield diag(
                    R.RECOMPUTE_ARGS,
                    f"{key} ({shown}) applies to recompute=full only "
                    f"(recompute is {t.recompute.value})",
                    key,
                    related=("training.recompute",),
                    fix=f"remove {key}, or set training.recompute=full",
                    recompute=t.recompute.value,
                    value=shown,
                )
        return
    if d.layers_per_stage is None:
        return
    sizes = stage_chunk_sizes(
        list(d.layers_per_stage),
        p.vpp,
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
    )
    chunk = min((n for c in sizes for n in c if n > 0), default=0)
    n = t.recompute_num_layers or 1
    if chunk >= 1 and not 1 <= n <= chunk:
        yield diag(
            R.RECOMPUTE_LAYERS,
            f"recompute_num_layers ({n}) exceeds the layers per pipeline stage chunk ({chunk})",
            "training.recompute_num_layers",
            related=("parallel.pp", "parallel.vpp"),
            fix=f"set training.recompute_num_layers between 1 and {chunk}",
            edits={"training.recompute_num_layers": chunk},
            recompute_num_layers=n,
            layers_per_chunk=chunk,
        )
    elif t.recompute_method is RecomputeMethod.uniform and chunk >= 1:
        yield from _uniform_chunks(spec, sorted({c for r in sizes for c in r if c > 0}), n)


#: The first Megatron-Core release whose uniform recompute clamps its last chunk to the stage's
#: layers (NVIDIA/Megatron-LM PR #3562).
UNIFORM_RECOMPUTE_CLAMPED = "0.17.0"


def _uniform_chunks(spec: TrainSpec, chunks: list[int], n: int) -> Iterator[Diagnostic]:
    """TRC260: Megatron-Core's ``TransformerBlock._checkpointed_forward`` (uniform method,
    core_v0.16.1) checkpoints ``custom(i, i + recompute_num_layers)`` for ``i`` in steps of
    ``recompute_num_layers`` below the chunk's layer count, unclamped, so a chunk of ``c`` layers
    with ``c % n != 0`` indexes past its last layer (IndexError, NVIDIA/Megatron-LM#1807).
    ``chunks``: the distinct layer counts of the model chunks (per PP rank and virtual stage)."""
    bad = [c for c in chunks if c % n]
    if not bad or not before(spec, "megatron_core", UNIFORM_RECOMPUTE_CLAMPED):
        return
    common = divisors(math.gcd(*chunks))
    mc = ".".join(map(str, release(spec, "megatron_core") or ()))
    best = max((x for x in common if x <= n), default=1)
    yield diag(
        R.RECOMPUTE_UNIFORM_CHUNKS,
        f"recompute_method uniform with recompute_num_layers ({n}) that does not divide "
        f"the {show(bad)} layers of a pipeline stage chunk: Megatron-Core {mc} "
        f"checkpoints layers in runs of {n} without clamping the last run to the chunk "
        f"and fails with 'list index out of range'",
        "training.recompute_num_layers",
        related=(
            "training.recompute_method",
            "parallel.pp",
            "parallel.vpp",
            "launch.versions.megatron_core",
        ),
        fix=f"set training.recompute_num_layers to one of {show(common)} (dividing every "
        f"chunk's layers), or training.recompute_method=block, or use Megatron-Core "
        f"{UNIFORM_RECOMPUTE_CLAMPED} or later (launch.versions.megatron_core), which "
        f"clamps the last run (Megatron-LM PR #3562)",
        edits={"training.recompute_num_layers": best},
        recompute_num_layers=n,
        layers_per_chunk=bad,
        megatron_core=mc,
    )
