"""TRC210-TRC216: pipeline layer splits and batch / micro-batch counts.

Sources (Megatron-LM core_v0.16.1, ``megatron/core/...``):
transformer_block.get_num_layers_to_build
and TransformerConfig.__post_init__ (even split, uneven first/last split, layers % (pp*vpp) with
interleaving), parallel_state (vpp needs pp > 1), ConstantNumMicroBatchesCalculator
(gbs % (mbs*dp)), schedules.forward_backward_pipelining_with_interleaving (microbatches % pp).
Megatron-Core silently floors layers per stage (bug cases BC-001, BC-003, BC-005): never round down.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.derive import Derived, layers_per_stage
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.validate.util import (
    capacity,
    divisors,
    fitting,
    nearest,
    nearest_multiple,
    or_list,
    show,
)
from trainc.schemas import PipelineSchedule, TrainSpec

#: How many first/last sizes below the even share the uneven-split fix tries.
_UNEVEN_WINDOW = 64


def layers_and_batch(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC210-TRC216."""
    yield from _layers(spec, d)
    yield from _batch(spec, d)


def _uneven_consequence(spec: TrainSpec, layers: int, pp: int) -> str:
    """What the engine makes of ``layers`` (Megatron's L') that ``pp`` does not divide:
    Megatron-Core (engine=megatron, and engine=deepspeed's model chunk) builds ``L' // pp``
    per stage and drops the rest (``get_num_layers_to_build``, core_v0.16.1); torchtitan
    (engine=fsdp) drops none, but trainc writes its stage split explicitly
    (:func:`trainc.compiler.targets.fsdp.torchtitan_stage_split`), so the split must exist."""
    if traits(spec).fsdp2:
        return (
            f"there is no even split over {pp} stages, and trainc writes torchtitan's stage "
            "split explicitly (pipeline_parallel_layers_per_stage and "
            "first/last_stage_less_layers, from parallel.pipeline_first/last_stage_layers or "
            "the account_for_* flags)"
        )
    return (
        f"Megatron-Core would build {layers // pp} layers per stage and silently drop {layers % pp}"
    )


def _layers(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    L, pp, vpp = m.num_layers, p.pp, p.vpp
    first, last = p.pipeline_first_stage_layers, p.pipeline_last_stage_layers
    if vpp > 1 and pp == 1:
        yield diag(
            R.VPP_NEEDS_PP,
            f"vpp ({vpp}) needs pp > 1: the interleaved schedule "
            f"interleaves pipeline stages (Megatron raises 'pipeline-model-parallel size "
            f"should be greater than 1 with interleaved schedule')",
            "parallel.vpp",
            related=("parallel.pp",),
            fix="set parallel.vpp=1, or parallel.pp > 1",
            edits={"parallel.vpp": 1},
            vpp=vpp,
            pp=pp,
        )
    acc = [
        name
        for name, on in (
            ("embedding", p.account_for_embedding_in_pipeline_split),
            ("loss", p.account_for_loss_in_pipeline_split),
        )
        if on
    ]
    if acc and (first is not None or last is not None):
        keys = [f"parallel.account_for_{a}_in_pipeline_split" for a in acc]
        yield diag(
            R.UNEVEN_PP,
            f"{' and '.join(keys)} cannot be combined with "
            f"pipeline_first/last_stage_layers (Megatron-Core raises "
            f"'num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage "
            f"cannot be set at the same time with account_for_embedding_in_pipeline_split "
            f"and account_for_loss_in_pipeline_split')",
            keys[0],
            related=("parallel.pipeline_first_stage_layers", "parallel.pipeline_last_stage_layers"),
            fix=f"use one of the two: remove {' and '.join(keys)}, or remove "
            f"parallel.pipeline_first_stage_layers and "
            f"parallel.pipeline_last_stage_layers",
            edits={k: False for k in keys},
            num_layers=L,
            pp=pp,
            pipeline_first_stage_layers=first,
            pipeline_last_stage_layers=last,
        )
        return
    if first is not None or last is not None:
        stages = layers_per_stage(L, pp, first, last)
        if stages is None or any(n % vpp for n in stages):
            yield diag(
                R.UNEVEN_PP,
                _uneven_message(L, pp, vpp, first, last),
                "parallel.pipeline_first_stage_layers"
                if first is not None
                else "parallel.pipeline_last_stage_layers",
                related=("parallel.pp", "model.num_layers", "parallel.vpp"),
                fix=_uneven_fix(L, pp, vpp),
                num_layers=L,
                pp=pp,
                pipeline_first_stage_layers=first,
                pipeline_last_stage_layers=last,
            )
        return
    Lp = L + len(acc)  # Megatron's L' (TransformerConfig.__post_init__, account_for_*)
    what = f"num_layers ({L})" + "".join(f" + {a}" for a in acc) + (f" = {Lp}" if acc else "")
    if Lp % pp:
        room = capacity(d.world_size, p.tp, p.cp)
        # with vpp > 1 the pp must also leave stages that split into vpp chunks (and be > 1)
        pps = [
            x for x in fitting(divisors(Lp), room) if vpp == 1 or (x > 1 and (Lp // x) % vpp == 0)
        ]
        of = f"divisors of {Lp} that fit the GPUs" + (
            f" and leave stages of a multiple of vpp={vpp} layers" if vpp > 1 else ""
        )
        yield diag(
            R.LAYERS_PP,
            f"{what} is not divisible by pp ({pp}); {_uneven_consequence(spec, Lp, pp)}",
            "parallel.pp",
            related=("model.num_layers",),
            fix=", or ".join(
                ([f"set parallel.pp to one of {show(pps)} ({of})"] if pps else [])
                + ([] if acc else [_uneven_fix(L, pp, vpp)])
                + (
                    [f"remove the account_for_* flags ({L} layers split over pp={pp} x vpp={vpp})"]
                    if acc and L % (pp * vpp) == 0
                    else []
                )
                + [f for f in ([] if acc else [_account_fix(L, pp, vpp)]) if f.startswith("set")]
            )
            or f"choose pp and vpp that split {Lp}",
            edits=_pp_edits(L, pp, vpp, pps, bool(acc)),
            num_layers=L,
            pp=pp,
        )
    elif vpp > 1 and Lp % (pp * vpp):
        per = Lp // pp
        ok = [v for v in divisors(per)]
        other = _account_fix(L, pp, vpp) if not acc else ""
        split = _uneven_fix(L, pp, vpp) if not acc else ""
        yield diag(
            R.LAYERS_VPP,
            f"{what} is not divisible by pp*vpp ({pp}*{vpp} = {pp * vpp}): each "
            f"of the {pp} stages holds {per} layers, which cannot form {vpp} equal virtual "
            f"stages (older Megatron silently built {per // vpp * vpp})",
            "parallel.vpp",
            related=("parallel.pp", "model.num_layers"),
            fix=f"set parallel.vpp to one of {show(ok)} (layers per virtual stage: "
            f"{show(sorted(per // v for v in ok))})"
            + (f", or {split}" if split.startswith("set") else "")
            + (f", or {other}" if other.startswith("set") else ""),
            edits={"parallel.vpp": nearest(ok, vpp)},
            num_layers=L,
            pp=pp,
            vpp=vpp,
        )


def _account_fix(L: int, pp: int, vpp: int) -> str:
    """Counting the embedding and/or the loss as a layer when that makes L' split into pp*vpp
    (Megatron account_for_*_in_pipeline_split; Llama 3 405B's 126 layers on pp=16 x vpp=8)."""
    for v in (vpp, 1) if vpp > 1 else (1,):  # with vpp: keep it, else one chunk per stage
        for acc in (("embedding", "loss"), ("loss",), ("embedding",)):
            if (L + len(acc)) % (pp * v) == 0 and L + len(acc) >= pp * v:
                keys = " and ".join(f"parallel.account_for_{a}_in_pipeline_split=true" for a in acc)
                drop = "parallel.vpp=1 and " if v != vpp else ""
                return f"set {drop}{keys} (each stage then counts {(L + len(acc)) // pp} layers)"
    return "choose a pp that divides num_layers" if pp > 1 else ""


def _uneven_message(L: int, pp: int, vpp: int, first: int | None, last: int | None) -> str:
    given = " and ".join(
        f"{n} ({v})" for n, v in (("first", first), ("last", last)) if v is not None
    )
    if pp == 1:
        return (
            f"pipeline stage layers ({given}) need pp > 1: with pp (1) all {L} layers are on "
            f"one stage, and Megatron builds only the override's layers"
        )
    if any(v is not None and v < 1 for v in (first, last)):
        return (
            f"pipeline stage layers ({given}) must be at least 1 (Megatron-Core raises "
            f"'num_layers_in_first/last_pipeline_stage must be larger than 0'); leave a key "
            f"out (null) for an even share"
        )
    tail = f" and every stage's layers a multiple of vpp ({vpp})" if vpp > 1 else ""
    return (
        f"uneven pipeline split ({given}) of num_layers ({L}) over pp ({pp}) does not leave "
        f"a middle that divides evenly over the middle stages{tail}"
    )


def _pp_edits(L: int, pp: int, vpp: int, pps: list[int], acc: bool) -> dict[str, int]:
    """TRC210's machine edit (``lint --format json`` ``edits``, ``trainc lint --fix``): the
    nearest pp that divides the layers when it is within a factor of 2 of the written one, else
    the uneven first/last split that keeps pp (61 layers over pp=16: first 4 and last 1 rather
    than pp=1 for a 671B model), else that nearest pp."""
    near = nearest(pps, pp) if pps else None
    split = None if acc or pp <= 2 else uneven_split(L, pp, vpp)
    if split is not None and (near is None or not pp / 2 <= near <= 2 * pp):
        return {
            "parallel.pipeline_first_stage_layers": split[0],
            "parallel.pipeline_last_stage_layers": split[1],
        }
    return {"parallel.pp": near} if near is not None else {}


def _uneven_fix(L: int, pp: int, vpp: int) -> str:
    """:func:`uneven_split` as a fix text, or the fallback when there is none."""
    if pp <= 1:
        return (
            "remove parallel.pipeline_first_stage_layers and "
            "parallel.pipeline_last_stage_layers (or set pp > 1)"
        )
    split = uneven_split(L, pp, vpp)
    drop = ""
    if split is None and vpp > 1:  # every stage a multiple of vpp cannot sum to L: one chunk
        split, drop = uneven_split(L, pp, 1), "parallel.vpp=1, "
    if split is None:
        return f"choose a pp that divides {L}"
    f, la, mid = split
    shown = (
        ", ".join(map(str, [f, *([mid] * (pp - 2)), la]))
        if pp <= 16
        else f"{f}, {mid} x {pp - 2}, {la}"
    )
    return (
        f"set {drop}parallel.pipeline_first_stage_layers={f} and "
        f"parallel.pipeline_last_stage_layers={la} (first and last searched together; "
        f"stages: {shown}, largest {max(f, la, mid)})"
    )


def uneven_split(L: int, pp: int, vpp: int) -> tuple[int, int, int] | None:
    """``(first, last, middle)`` stage layer counts of the best first/last split for ``L``
    layers over ``pp > 1`` stages, or None. First and last are searched together within
    :data:`_UNEVEN_WINDOW` of the even share, each pair checked in O(1) (the middle
    ``L - first - last`` must split evenly over the ``pp - 2`` middle stages, every stage a
    multiple of vpp). The pipeline runs at the pace of its largest stage, so the pair with the
    smallest largest stage wins, then the most even first/last, then the lighter first stage
    (it holds the embedding and the most in-flight activations in 1F1B). Falls back to a pp
    that divides L (None here)."""
    best: tuple[tuple[int, int, int], int, int, int] | None = None
    top = max(1, L // pp)
    lo, hi = max(1, top - _UNEVEN_WINDOW), top + _UNEVEN_WINDOW
    for f in range(lo, hi + 1):
        if f % vpp or f >= L:
            continue
        for la in range(lo, hi + 1):
            mid_total = L - f - la
            if la % vpp or mid_total < 0:
                continue
            if pp == 2:
                if mid_total:
                    continue
                mid = 0
            else:
                if mid_total % (pp - 2) or mid_total // (pp - 2) < 1:
                    continue
                mid = mid_total // (pp - 2)
                if mid % vpp:
                    continue
            score = (max(f, la, mid), abs(f - la), f)
            if best is None or score < best[0]:
                best = (score, f, la, mid)
    return None if best is None else best[1:]


def _batch(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    t, p = spec.training, spec.parallel
    if d.dp is None:
        return
    unit = t.micro_batch_size * d.dp
    gbs = t.global_batch_size
    if gbs % unit:
        near = nearest_multiple(gbs, unit)
        mbs_ok = [b for b in divisors(gbs) if (gbs // b) % d.dp == 0]
        typo = f"; it is not even divisible by dp ({d.dp}), likely a typo" if gbs % d.dp else ""
        floor = (
            f" (floor division would silently train with {gbs // unit * unit})"
            if gbs >= unit
            else ""
        )
        yield diag(
            R.GLOBAL_BATCH,
            f"global_batch_size ({gbs}) is not divisible by micro_batch_size*dp "
            f"({t.micro_batch_size}*{d.dp} = {unit}){floor}{typo}",
            "training.global_batch_size",
            related=("training.micro_batch_size", "parallel.dp"),
            fix=f"set training.global_batch_size to {or_list(near)}"
            + (f", or training.micro_batch_size to one of {show(mbs_ok)}" if mbs_ok else ""),
            edits={"training.global_batch_size": near[0]},
            global_batch_size=gbs,
            micro_batch_size=t.micro_batch_size,
            dp=d.dp,
        )
        return
    nmb = d.num_microbatches or 0
    if p.pp > 1 and nmb < p.pp:
        # torch 2.13 torch/distributed/pipelining/schedules.py Schedule1F1B.__init__ raises
        # "Number of microbatches (n) must be greater than or equal to the number of stages"
        # (pytorch/pytorch PR 144702; before it the single-stage 1F1B hung: pytorch/torchtitan
        # #775); engine=fsdp runs that schedule at vpp 1 (torchtitan, the trainc worker).
        one_f1b = traits(spec).fsdp2 and spec.fsdp.pp_schedule is PipelineSchedule.one_f1b
        sev = None if p.vpp == 1 and not one_f1b else Severity.error
        why = (
            "; the interleaved schedule rejects it"
            if p.vpp > 1
            else "; torch.distributed.pipelining's Schedule1F1B rejects it (older releases hung)"
            if one_f1b
            else f": at most {nmb} of {p.pp} stages work at once"
        )
        yield diag(
            R.MICROBATCHES_PP,
            f"num_microbatches ({nmb} = {gbs}/({t.micro_batch_size}*{d.dp})) is below pp "
            f"({p.pp})" + why,
            "training.global_batch_size",
            related=("training.micro_batch_size", "parallel.pp"),
            fix=f"set training.global_batch_size to a multiple of {unit} of at least "
            f"{unit * p.pp}, or reduce pp",
            severity=sev,
            edits={"training.global_batch_size": unit * p.pp},
            num_microbatches=nmb,
            pp=p.pp,
        )
    elif p.vpp > 1 and nmb % p.pp:
        near = nearest_multiple(gbs, unit * p.pp)
        yield diag(
            R.MICROBATCHES_VPP,
            f"num_microbatches ({nmb}) is not a multiple of pp ({p.pp}), which the "
            f"interleaved schedule (vpp = {p.vpp}) requires",
            "training.global_batch_size",
            related=("parallel.vpp", "parallel.pp"),
            fix=f"set training.global_batch_size to {or_list(near)}, or parallel.vpp=1",
            edits={"training.global_batch_size": near[0]},
            num_microbatches=nmb,
            pp=p.pp,
        )
