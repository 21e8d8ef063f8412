"""TRC2xx: shapes, layers and batches that must divide evenly over the parallel degrees.

Sources (Megatron-Core 0.16 / Megatron-LM, see shared reference megatron_rules.md §1.3-1.7):
TransformerConfig.__post_init__ (heads % tp, query groups vs tp, uneven PP), tensor_parallel
layers (ffn % tp), validate_args (seq % 2cp, max positions, experts % ep), mappings
(SP scatter needs (seq/cp) % tp), num_microbatches_calculator (gbs % (mbs*dp)) and the
interleaved schedule (microbatches a multiple of pp).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived, layers_per_stage
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.validate.util import divisors, nearest_multiple, show
from trainc.schemas import CpCommType, TrainSpec


def divisibility(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """All TRC2xx rules."""
    yield from _heads(spec, d)
    yield from _moe(spec, d)
    yield from _layers(spec, d)
    yield from _batch(spec, d)
    yield from _sequence(spec, d)


def _heads(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    a, g, tp = m.num_attention_heads, m.num_query_groups or m.num_attention_heads, p.tp
    if a % tp:
        yield diag(R.HEADS_TP, f"num_attention_heads ({a}) is not divisible by tp ({tp})",
                   "parallel.tp", related=("model.num_attention_heads",),
                   fix=f"set parallel.tp to one of {show(divisors(a))}",
                   num_attention_heads=a, tp=tp)
    if g % tp and tp % g:
        ok = sorted(set(divisors(g)) | {k * g for k in range(1, 64) if k * g <= max(tp, g) * 8})
        ok = [x for x in ok if a % x == 0]
        yield diag(R.GROUPS_TP,
                   f"num_query_groups ({g}) is neither a multiple nor a divisor of tp ({tp}); "
                   f"Megatron-Core >= 0.16 needs one of the two (<= 0.15 needed groups % tp == 0)",
                   "parallel.tp", related=("model.num_query_groups",),
                   fix=f"set parallel.tp to one of {show(ok)}", num_query_groups=g, tp=tp)
    if a % g:
        yield diag(R.HEADS_GROUPS,
                   f"num_attention_heads ({a}) is not divisible by num_query_groups ({g})",
                   "model.num_query_groups", related=("model.num_attention_heads",),
                   fix=f"set model.num_query_groups to one of {show(divisors(a))}",
                   num_attention_heads=a, num_query_groups=g)
    f = m.ffn_hidden_size or 0
    if f % tp:
        ok = [x for x in divisors(f) if a % x == 0]
        yield diag(R.FFN_TP, f"ffn_hidden_size ({f}) is not divisible by tp ({tp})",
                   "parallel.tp", related=("model.ffn_hidden_size",),
                   fix=f"set parallel.tp to one of {show(ok)}", ffn_hidden_size=f, tp=tp)
    h = m.hidden_size
    if h % a and m.kv_channels == h // a:
        yield diag(R.HIDDEN_HEADS,
                   f"hidden_size ({h}) is not divisible by num_attention_heads ({a})",
                   "model.hidden_size", related=("model.num_attention_heads",),
                   fix=f"set model.kv_channels explicitly or use num_attention_heads in "
                       f"{show(divisors(h))}", hidden_size=h, num_attention_heads=a)
    if d.padded_vocab_size != m.vocab_size:
        yield diag(R.VOCAB_PADDING,
                   f"vocab_size ({m.vocab_size}) is padded to {d.padded_vocab_size} (a multiple of "
                   f"make_vocab_size_divisible_by*tp = {m.make_vocab_size_divisible_by}*{tp}); "
                   f"checkpoints move between TP sizes only with re-padding",
                   "model.vocab_size", vocab_size=m.vocab_size,
                   padded_vocab_size=d.padded_vocab_size)


def _moe(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    if not m.num_experts:
        return
    e = m.num_experts
    if e % p.ep:
        yield diag(R.EXPERTS_EP, f"num_experts ({e}) is not divisible by ep ({p.ep})",
                   "parallel.ep", related=("model.num_experts",),
                   fix=f"set parallel.ep to one of {show(divisors(e))}", num_experts=e, ep=p.ep)
    if not 1 <= m.moe_router_topk <= e:
        yield diag(R.TOPK_EXPERTS,
                   f"moe_router_topk ({m.moe_router_topk}) must be between 1 and num_experts ({e})",
                   "model.moe_router_topk", related=("model.num_experts",),
                   fix=f"set model.moe_router_topk to at most {e}",
                   moe_router_topk=m.moe_router_topk, num_experts=e)
    fe = m.moe_ffn_hidden_size or 0
    if fe % d.etp:
        yield diag(R.MOE_FFN_ETP,
                   f"moe_ffn_hidden_size ({fe}) is not divisible by etp ({d.etp})", "parallel.etp",
                   related=("model.moe_ffn_hidden_size",),
                   fix=f"set parallel.etp to one of {show(divisors(fe))}",
                   moe_ffn_hidden_size=fe, etp=d.etp)


def _layers(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    L, pp, vpp = m.num_layers, p.pp, p.vpp
    first, last = p.pipeline_first_stage_layers, p.pipeline_last_stage_layers
    uneven = first is not None or last is not None
    if vpp > 1 and pp == 1:
        yield diag(R.VPP_NEEDS_PP, f"vpp ({vpp}) needs pp > 1 (the interleaved schedule "
                   f"interleaves pipeline stages)", "parallel.vpp", related=("parallel.pp",),
                   fix="set parallel.vpp to 1, or pp > 1", edits={"parallel.vpp": 1}, vpp=vpp)
    if uneven:
        stages = layers_per_stage(L, pp, first, last)
        bad_v = [n for n in (first, last) if n is not None and n % vpp]
        mid_ok = stages is not None and all(n % vpp == 0 for n in stages)
        if stages is None or bad_v or not mid_ok:
            yield diag(R.UNEVEN_PP, _uneven_message(L, pp, vpp, first, last),
                       "parallel.pipeline_first_stage_layers" if first is not None else
                       "parallel.pipeline_last_stage_layers",
                       related=("parallel.pp", "model.num_layers"),
                       fix=_uneven_fix(L, pp, vpp), num_layers=L, pp=pp)
        return
    if L % pp:
        yield diag(R.LAYERS_PP, f"num_layers ({L}) is not divisible by pp ({pp}); Megatron-Core "
                   f"would build {L // pp} layers per stage and silently drop {L % pp}",
                   "parallel.pp", related=("model.num_layers",),
                   fix=f"set parallel.pp to one of {show(divisors(L))}, or give "
                       f"{_uneven_fix(L, pp, 1, lead='')}", num_layers=L, pp=pp)
    elif vpp > 1 and L % (pp * vpp):
        per = L // pp
        yield diag(R.LAYERS_VPP,
                   f"num_layers ({L}) is not divisible by pp*vpp ({pp}*{vpp} = {pp * vpp}): each of "
                   f"the {pp} stages holds {per} layers, which cannot form {vpp} equal virtual "
                   f"stages", "parallel.vpp", related=("parallel.pp", "model.num_layers"),
                   fix=f"set parallel.vpp to one of {show(divisors(per))} (layers per virtual "
                       f"stage: {show(sorted(per // v for v in divisors(per)))})",
                   num_layers=L, pp=pp, vpp=vpp)


def _uneven_message(L: int, pp: int, vpp: int, first: int | None, last: int | None) -> str:
    given = ", ".join(f"{n} ({v})" for n, v in (("first", first), ("last", last)) if v is not None)
    if pp == 1:
        return f"pipeline stage layers ({given}) need pp > 1; with pp = 1 all {L} layers are " \
               f"on one stage"
    tail = f" and every stage's layers a multiple of vpp ({vpp})" if vpp > 1 else ""
    return (f"uneven pipeline split ({given}) of num_layers ({L}) over pp ({pp}) does not leave "
            f"a middle that divides evenly over the middle stages{tail}")


def _uneven_fix(L: int, pp: int, vpp: int, lead: str = "") -> str:
    if pp <= 1:
        return "remove pipeline_first_stage_layers/pipeline_last_stage_layers"
    for f in range(max(1, L // pp), 0, -1):
        for la in (f, f - 1, f + 1):
            st = layers_per_stage(L, pp, f, la) if la >= 1 else None
            if st and all(n % vpp == 0 for n in st):
                return (f"{lead}parallel.pipeline_first_stage_layers={f} and "
                        f"parallel.pipeline_last_stage_layers={la} (stages: "
                        f"{', '.join(map(str, st))})")
    return f"a pp that divides {L}"


def _batch(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    t, p = spec.training, spec.parallel
    if d.dp is None:
        return
    unit = t.micro_batch_size * d.dp
    gbs = t.global_batch_size
    if gbs % unit:
        near = nearest_multiple(gbs, unit)
        yield diag(R.GLOBAL_BATCH,
                   f"global_batch_size ({gbs}) is not divisible by micro_batch_size*dp "
                   f"({t.micro_batch_size}*{d.dp} = {unit})", "training.global_batch_size",
                   related=("training.micro_batch_size", "parallel.dp"),
                   fix=f"set training.global_batch_size to {' or '.join(map(str, near))}, or a "
                       f"micro_batch_size in {show([b for b in divisors(gbs) if (gbs // b) % d.dp == 0])}",
                   edits={"training.global_batch_size": near[0]},
                   global_batch_size=gbs, micro_batch_size=t.micro_batch_size, dp=d.dp)
        return
    nmb = d.num_microbatches or 0
    if p.pp > 1 and nmb < p.pp:
        sev = None if p.vpp == 1 else Severity.error
        yield diag(R.MICROBATCHES_PP,
                   f"num_microbatches ({nmb} = {gbs}/({t.micro_batch_size}*{d.dp})) is below pp "
                   f"({p.pp})" + ("; the interleaved schedule rejects it" if p.vpp > 1 else
                                  f": at most {nmb} of {p.pp} stages work at once"),
                   "training.global_batch_size",
                   related=("training.micro_batch_size", "parallel.pp"),
                   fix=f"set training.global_batch_size to at least {unit * p.pp} or reduce pp",
                   severity=sev, num_microbatches=nmb, pp=p.pp)
    elif p.vpp > 1 and nmb % p.pp:
        near = nearest_multiple(gbs, unit * p.pp)
        yield diag(R.MICROBATCHES_VPP,
                   f"num_microbatches ({nmb}) is not a multiple of pp ({p.pp}), which the "
                   f"interleaved schedule (vpp = {p.vpp}) requires", "training.global_batch_size",
                   related=("parallel.vpp", "parallel.pp"),
                   fix=f"set training.global_batch_size to {' or '.join(map(str, near))}",
                   num_microbatches=nmb, pp=p.pp)


def _sequence(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    s, cp, tp = m.seq_length, p.cp, p.tp
    if cp > 1 and s % (2 * cp):
        yield diag(R.CP_SEQ, f"seq_length ({s}) is not a multiple of 2*cp ({2 * cp}); each CP "
                   f"rank takes two mirrored chunks for causal load balance", "model.seq_length",
                   related=("parallel.cp",),
                   fix=f"set model.seq_length to {' or '.join(map(str, nearest_multiple(s, 2 * cp)))}",
                   seq_length=s, cp=cp)
    if p.sequence_parallel and tp > 1 and (s % cp or (s // cp) % tp):
        unit = cp * math.lcm(2, tp) if cp > 1 else tp
        yield diag(R.SP_SEQ,
                   f"seq_length ({s}) / cp ({cp}) is not a multiple of tp ({tp}), which sequence "
                   f"parallelism scatters the sequence over" +
                   (f" (with cp the sequence must be a multiple of cp*lcm(2, tp) = {unit})"
                    if cp > 1 else ""), "model.seq_length",
                   related=("parallel.tp", "parallel.cp", "parallel.sequence_parallel"),
                   fix=f"set model.seq_length to {' or '.join(map(str, nearest_multiple(s, unit)))}",
                   seq_length=s, tp=tp, cp=cp)
    mpe = m.max_position_embeddings or s
    if mpe < s:
        yield diag(R.MAX_POSITIONS,
                   f"max_position_embeddings ({mpe}) is below seq_length ({s})",
                   "model.max_position_embeddings", related=("model.seq_length",),
                   fix=f"set model.max_position_embeddings to at least {s}",
                   edits={"model.max_position_embeddings": s},
                   max_position_embeddings=mpe, seq_length=s)
    if cp > 1 and p.cp_comm_type is CpCommType.a2a:
        a, g = m.num_attention_heads, m.num_query_groups or m.num_attention_heads
        heads_rank, groups_rank = a // tp if a % tp == 0 else 0, max(g // tp, 1)
        if heads_rank % cp or groups_rank % cp:
            yield diag(R.CP_A2A_HEADS,
                       f"cp_comm_type a2a splits heads over cp: heads per TP rank ({heads_rank}) "
                       f"and query groups per TP rank ({groups_rank}) must be multiples of cp "
                       f"({cp})", "parallel.cp_comm_type", related=("parallel.cp", "parallel.tp"),
                       fix="use cp_comm_type p2p or all_gather, or a cp dividing both",
                       heads_per_rank=heads_rank, groups_per_rank=groups_rank, cp=cp)
