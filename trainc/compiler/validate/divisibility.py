"""TRC2xx: shapes, layers, batches and sequences that must divide evenly over the parallel degrees.

This module holds the tensor shapes (heads, query groups, FFN, experts, vocab); pipeline layers and
batches live in :mod:`.layers`, sequence rules in :mod:`.sequence`.

Sources (Megatron-LM core_v0.16.1): ``megatron/core/transformer/transformer_config.py``
TransformerConfig.__post_init__ (heads % tp, query groups a multiple or divisor of tp),
``megatron/training/arguments.py::validate_args`` (h % a without kv_channels, experts % ep),
``megatron/core/tensor_parallel/layers.py`` RowParallelLinear ``divide()`` (ffn % tp, moe_ffn %
etp), ``megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived, domain_group_nodes, slurm_segment
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.validate.layers import layers_and_batch
from trainc.compiler.validate.sequence import sequence
from trainc.compiler.validate.util import capacity, divisors, fitting, nearest, show
from trainc.compiler.validate.versions import before, release
from trainc.schemas import Engine, TrainSpec

#: The first Megatron-Core release whose TransformerConfig accepts tp above num_query_groups
#: (``tp % num_query_groups == 0``: each KV head replicated on tp / groups ranks); core_v0.15.3
#: still requires ``num_query_groups % tp == 0``.
KV_REPLICATION_SINCE = "0.16.0"


def divisibility(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """All TRC2xx rules."""
    yield from _heads(spec, d)
    yield from _moe(spec, d)
    yield from layers_and_batch(spec, d)
    yield from sequence(spec, d)


def _tp_fix(
    spec: TrainSpec, d: Derived, ok: Callable[[int], bool], what: str
) -> tuple[str, dict[str, int]]:
    """(``set parallel.tp to one of X``, edit to the nearest X) where X satisfies ``ok`` and fits
    the GPUs left by pp*cp."""
    p = spec.parallel
    m = spec.model
    cands = [t for t in divisors(m.num_attention_heads) if ok(t)]
    room = capacity(d.world_size, p.pp, p.cp)
    where = f"{room} GPUs per pp*cp group"
    if room is None:  # pp (or cp) does not divide the world either: at least fit the cp group
        room = capacity(d.world_size, p.cp) or d.world_size
        where = f"{room} GPUs per cp group" if p.cp > 1 else f"the job's {room} GPUs"
    fit = fitting(cands, room)
    best = nearest(fit, p.tp)
    edits = {"parallel.tp": best} if best is not None else {}
    if room is not None and fit != cands:
        return (
            f"set parallel.tp to one of {show(fit)} (tp values {what}: {show(cands)}; "
            f"those that fit {where}: {show(fit)})"
        ), edits
    return f"set parallel.tp to one of {show(cands)} ({what})", edits


def _groups_ok(g: int) -> Callable[[int], bool]:
    return lambda t: g % t == 0 or t % g == 0


def _shape(spec: TrainSpec) -> tuple[int, int, int]:
    """(num_attention_heads, num_query_groups (the heads when unset), tp)."""
    m = spec.model
    return m.num_attention_heads, m.num_query_groups or m.num_attention_heads, spec.parallel.tp


def _heads(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """The attention and MLP shapes over tp, in order: heads over tp, query groups over tp
    (the checks of :data:`QUERY_GROUP_CHECKS` for ``spec.engine``), heads over query groups,
    the FFN over tp, the hidden size over the heads, the vocabulary's padding."""
    yield from _heads_tp(spec, d)
    yield from _query_groups(spec, d)
    yield from _heads_groups(spec, d)
    yield from _ffn_tp(spec, d)
    yield from _hidden_heads(spec, d)
    yield from _vocab_padding(spec, d)


def _heads_tp(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC201: the attention heads split over tp."""
    a, _, tp = _shape(spec)
    if a % tp:
        fix, edits = _tp_fix(spec, d, lambda t: True, f"dividing {a} heads")
        yield diag(
            R.HEADS_TP,
            f"num_attention_heads ({a}) cannot be split over tp ({tp}): heads must be a "
            f"multiple of tp",
            "parallel.tp",
            related=("model.num_attention_heads",),
            fix=fix,
            edits=edits,
            num_attention_heads=a,
            tp=tp,
        )


def _query_groups(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC202, TRC221, TRC222: the query groups over tp; the first of the engine's
    :data:`QUERY_GROUP_CHECKS` that finds a problem reports it."""
    for check in QUERY_GROUP_CHECKS[spec.engine]:
        found = list(check(spec, d))
        if found:
            yield from found
            return


def _groups_neither(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC202: query groups neither a multiple nor a divisor of tp."""
    _, g, tp = _shape(spec)
    if g % tp and tp % g:
        fix, edits = _tp_fix(
            spec, d, _groups_ok(g), f"that divide or are multiples of {g} query groups"
        )
        yield diag(
            R.GROUPS_TP,
            f"num_query_groups ({g}) is neither a multiple nor a divisor of tp ({tp}); "
            f"the Megatron-Core >= 0.16 rule applies (trainc targets 0.16+: groups % tp "
            f"== 0 or tp % groups == 0; <= 0.15 needed groups % tp == 0)",
            "parallel.tp",
            related=("model.num_query_groups",),
            fix=fix,
            edits=edits,
            num_query_groups=g,
            tp=tp,
        )


def _whole_kv_heads(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC202 for engine=fsdp: tp above the query groups splits a KV head."""
    _, g, tp = _shape(spec)
    if g % tp:
        # engine=fsdp (torchtitan, the trainc FSDP2 worker) shards the separate K and V
        # projections column-wise by whole heads and replicates none: with tp > groups each rank
        # gets a fraction of a head and the head reshape fails in the first forward
        # (https://github.com/pytorch/torchtitan/issues/932: Llama-3-8B, 8 KV heads, tp 16).
        fix, edits = _tp_fix(spec, d, lambda t: g % t == 0, f"dividing {g} query groups")
        yield diag(
            R.GROUPS_TP,
            f"tp ({tp}) exceeds num_query_groups ({g}): engine=fsdp (torchtitan's and "
            f"trainc's FSDP2 tensor parallelism) splits the K/V projections by whole KV "
            f"heads and replicates none, so each rank would hold {g}/{tp} of a head and "
            f"the first forward fails reshaping it",
            "parallel.tp",
            related=("model.num_query_groups",),
            fix=fix,
            edits=edits,
            num_query_groups=g,
            tp=tp,
        )


def _qkv_width(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC222: with KV replication, tp must still divide the fused QKV width."""
    m = spec.model
    a, g, tp = _shape(spec)
    if a % tp == 0 and (kv := m.kv_channels or 0) * (a + 2 * g) % tp:
        # KV replication (tp > groups): Megatron-Core 0.16 still splits the fused QKV projection,
        # kv_channels*(heads + 2*groups) wide, over tp (ColumnParallelLinear's divide() in
        # SelfAttention.__init__), which fails unless tp divides it (found by the differential
        # test against megatron-core 0.16.1: tp=3, heads=6, groups=1, kv_channels=32 -> 256).
        width = kv * (a + 2 * g)
        qfix, qedits = _tp_fix(
            spec,
            d,
            lambda t: (g % t == 0 or t % g == 0) and width % t == 0,
            f"that divide the QKV width {width}",
        )
        yield diag(
            R.QKV_WIDTH_TP,
            f"tp ({tp}) above num_query_groups ({g}) replicates the KV heads, but "
            f"Megatron-Core still splits the fused QKV projection (kv_channels*(heads + "
            f"2*groups) = {kv}*({a} + 2*{g}) = {width}) over tp, and {tp} does not divide "
            f"it",
            "parallel.tp",
            related=("model.num_query_groups", "model.kv_channels"),
            fix=qfix,
            edits=qedits,
            num_query_groups=g,
            tp=tp,
            qkv_width=width,
        )


def _kv_replication_before_016(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC221 (error): Megatron-Core before 0.16 replicates no KV heads."""
    a, g, tp = _shape(spec)
    if tp > g and a % tp == 0 and before(spec, "megatron_core", KV_REPLICATION_SINCE):
        # Megatron-Core <= 0.15 TransformerConfig.__post_init__ raises ValueError
        # "num_query_groups (g) must be a multiple of tensor_model_parallel_size (tp)"
        # (core_v0.15.3 megatron/core/transformer/transformer_config.py); core_v0.16.0 accepts
        # tp % groups == 0 as well (KV replication).
        mc = ".".join(map(str, release(spec, "megatron_core") or ()))
        yield diag(
            R.KV_REPLICATED,
            f"tp ({tp}) exceeds num_query_groups ({g}) on Megatron-Core {mc}: releases "
            f"before {KV_REPLICATION_SINCE} replicate no KV heads and TransformerConfig "
            f"raises 'num_query_groups ({g}) must be a multiple of "
            f"tensor_model_parallel_size ({tp})'",
            "parallel.tp",
            related=("model.num_query_groups", "launch.versions.megatron_core"),
            fix=f"set parallel.tp to a divisor of {g} (tp={g} at most), or use "
            f"Megatron-Core {KV_REPLICATION_SINCE} or later "
            f"(launch.versions.megatron_core), which replicates the KV heads",
            edits={"parallel.tp": g},
            severity=Severity.error,
            num_query_groups=g,
            tp=tp,
            megatron_core=mc,
        )


def _kv_replicated(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC221: tp above the query groups replicates each KV head."""
    a, g, tp = _shape(spec)
    if tp > g and a % tp == 0:
        yield diag(
            R.KV_REPLICATED,
            f"tp ({tp}) exceeds num_query_groups ({g}): Megatron-Core >= 0.16 replicates "
            f"each KV head on {tp // g} TP ranks (<= 0.15, and backends without KV "
            f"replication such as Hugging Face native TP, reject this layout)",
            "parallel.tp",
            related=("model.num_query_groups",),
            fix=f"set parallel.tp to at most {g} (tp={g} is the largest without KV "
            f"replication), or accept the replicated KV projections",
            num_query_groups=g,
            tp=tp,
        )


#: The query-group checks of each engine, in order (the first that finds a problem reports
#: it): engine=fsdp (torchtitan, the trainc FSDP2 worker) replicates no KV heads; Megatron-Core
#: (engine=megatron, and engine=deepspeed's model) replicates them from 0.16 on.
QUERY_GROUP_CHECKS: dict[
    Engine, tuple[Callable[[TrainSpec, Derived], Iterator[Diagnostic]], ...]
] = {
    Engine.megatron: (_groups_neither, _qkv_width, _kv_replication_before_016, _kv_replicated),
    Engine.deepspeed: (_groups_neither, _qkv_width, _kv_replication_before_016, _kv_replicated),
    Engine.fsdp: (_groups_neither, _whole_kv_heads, _qkv_width, _kv_replicated),
}


def _heads_groups(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC207: the attention heads split over the query groups."""
    a, g, _ = _shape(spec)
    if a % g:
        yield diag(
            R.HEADS_GROUPS,
            f"num_attention_heads ({a}) is not divisible by num_query_groups ({g})",
            "model.num_query_groups",
            related=("model.num_attention_heads",),
            fix=f"set model.num_query_groups to one of {show(divisors(a))}",
            num_attention_heads=a,
            num_query_groups=g,
        )


def _ffn_tp(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC203: the dense MLP's ffn_hidden_size split over tp."""
    m = spec.model
    tp = spec.parallel.tp
    f = m.ffn_hidden_size or 0
    # With every layer an MoE layer no dense MLP is built: ffn_hidden_size is then unused by
    # Megatron-Core (only its default for moe_ffn_hidden_size, checked by TRC204).
    if f % tp and d.num_moe_layers < m.num_layers:
        fix, edits = _tp_fix(spec, d, lambda t: f % t == 0, f"dividing ffn_hidden_size {f}")
        yield diag(
            R.FFN_TP,
            f"ffn_hidden_size ({f}) is not divisible by tp ({tp})",
            "parallel.tp",
            related=("model.ffn_hidden_size",),
            fix=fix,
            edits=edits,
            ffn_hidden_size=f,
            tp=tp,
        )


def _hidden_heads(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC208: hidden_size over the heads when kv_channels is not given."""
    m = spec.model
    a, _, _ = _shape(spec)
    h = m.hidden_size
    if h % a and m.kv_channels == h // a:
        yield diag(
            R.HIDDEN_HEADS,
            f"hidden_size ({h}) is not divisible by num_attention_heads ({a}) and "
            f"kv_channels is not given",
            "model.hidden_size",
            related=("model.num_attention_heads", "model.kv_channels"),
            fix=_hidden_heads_fix(h, a, m.num_query_groups or a),  # MHA: groups = heads
            hidden_size=h,
            num_attention_heads=a,
        )


def _vocab_padding(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC209: the vocabulary padded to a multiple of make_vocab_size_divisible_by x tp."""
    m = spec.model
    tp = spec.parallel.tp
    if d.padded_vocab_size != m.vocab_size:
        unit = m.make_vocab_size_divisible_by * tp
        yield diag(
            R.VOCAB_PADDING,
            f"vocab_size ({m.vocab_size}) is padded to {d.padded_vocab_size} (a multiple of "
            f"make_vocab_size_divisible_by*tp = {m.make_vocab_size_divisible_by}*{tp} = "
            f"{unit}); checkpoints move between TP sizes only with re-padding",
            "model.vocab_size",
            related=("parallel.tp", "model.make_vocab_size_divisible_by"),
            vocab_size=m.vocab_size,
            padded_vocab_size=d.padded_vocab_size,
        )


def _hidden_heads_fix(h: int, a: int, g: int) -> str:
    """The nearest hidden_size that heads divide (likely a typo), heads that divide h and are
    multiples of the query groups, or kv_channels."""
    near = sorted({a * (h // a), a * (h // a + 1)} - {0}, key=lambda x: (abs(x - h), x))
    mha = g == a  # groups follow the heads
    heads = [x for x in divisors(h) if (mha or x % g == 0) and x != a]
    out = [f"set model.hidden_size={near[0]} (a multiple of {a} heads)"]
    if heads:
        out.append(
            f"num_attention_heads to one of {show(heads)} (divide {h}"
            + ("" if mha else f", multiples of num_query_groups={g}")
            + ")"
        )
    out.append(
        f"model.kv_channels explicitly (head dim; Megatron then uses "
        f"{a} x kv_channels for attention)"
    )
    return ", or ".join(out)


def _in_one_domain(spec: TrainSpec, etp: int, ep: int) -> bool:
    """Every ETP x EP group of ``etp * ep`` consecutive ranks (aligned to its size) stays inside
    one NVLink domain: the size divides ``cluster.nvlink_domain_size``, or the domain spans
    several nodes and the ``#SBATCH --segment`` of that layout (``launch.slurm_segment``, else
    :func:`trainc.compiler.derive.slurm_segment` for its widest group) fits one domain and holds
    whole groups: the same placement TRC107 checks
    (``trainc.compiler.validate.topology._Placement``)."""
    c, p = spec.cluster, spec.parallel
    dom, gpus, size = c.nvlink_domain_size or c.gpus_per_node, c.gpus_per_node, etp * ep
    if size <= 1 or dom % size == 0:
        return True
    per_domain = dom // max(gpus, 1)
    if size > dom or per_domain <= 1:
        return False
    seg = slurm_segment(
        c.num_nodes,
        gpus,
        dom,
        spec.launch.slurm_segment,
        domain_group_nodes(p.tp, p.cp, etp, ep, gpus),
    )
    return 0 < seg <= per_domain and (seg * gpus) % size == 0


def _ep_with_smaller_etp(
    spec: TrainSpec, d: Derived, cands: list[int], fit: list[int]
) -> list[tuple[int, list[int], int]]:
    """EP sizes a smaller expert-tensor-parallel size opens: ``[(etp, [ep, ...], domain)]``
    for each etp below the current one (a divisor of it), with the ep values not already in
    ``fit`` that divide the experts (``cands``), make Megatron-Core's expert grid
    (``world % (etp * ep * pp) == 0``, ``parallel_state.initialize_model_parallel`` at 0.16.1)
    and keep the ETP x EP group of consecutive ranks inside one NVLink domain (the group size
    divides ``cluster.nvlink_domain_size``, default the node; the rank order ``tp-ep-dp-pp`` of
    the expert grid) or, where the domain spans several nodes, inside one of the ``#SBATCH
    --segment`` blocks sbatch.sh would ask for with that layout (:func:`_in_one_domain`). On an
    NVL72-style domain of 4-GPU trays, etp = tp = 4 leaves ep in {1, 2, 4} for 144 GPUs, while
    etp = 1 allows ep = 8 inside the 72-GPU domain; on an NVL36 domain (9 trays) ep = 8 x etp = 1
    does not divide 36 GPUs, but segments of 6 trays (24 GPUs) hold whole groups of 8."""
    dom = spec.cluster.nvlink_domain_size or spec.cluster.gpus_per_node
    out: list[tuple[int, list[int], int]] = []
    seen = set(fit)
    for etp in sorted((x for x in divisors(d.etp) if x < d.etp), reverse=True):
        room = capacity(d.world_size, etp, spec.parallel.pp)
        eps = [
            ep for ep in fitting(cands, room) if ep not in seen and _in_one_domain(spec, etp, ep)
        ]
        if room and eps:
            out.append((etp, eps, dom))
            seen |= set(eps)
    return out


def _moe(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    m, p = spec.model, spec.parallel
    if not m.num_experts:
        return
    e = m.num_experts
    if e % p.ep:
        room = capacity(d.world_size, d.etp, p.pp)
        cands = divisors(e)
        fit = fitting(cands, room)
        wider = _ep_with_smaller_etp(spec, d, cands, fit)
        yield diag(
            R.EXPERTS_EP,
            f"num_experts ({e}) is not divisible by ep ({p.ep})",
            "parallel.ep",
            related=("model.num_experts",),
            fix=f"set parallel.ep to one of {show(fit)} (divisors of {e} experts"
            + (f" that fit the expert grid of {d.world_size} GPUs)" if room else ")")
            + "".join(
                f", or set parallel.etp={etp} and parallel.ep"
                + (f"={eps[0]}" if len(eps) == 1 else f" to one of {show(eps)}")
                + f" (ETP x EP within one NVLink domain of {dom} GPUs)"
                for etp, eps, dom in wider
            ),
            edits={"parallel.ep": nearest(fit, p.ep)} if fit else {},
            num_experts=e,
            ep=p.ep,
        )
    if not 1 <= m.moe_router_topk <= e:
        yield diag(
            R.TOPK_EXPERTS,
            f"moe_router_topk ({m.moe_router_topk}) must be between 1 and num_experts ({e})",
            "model.moe_router_topk",
            related=("model.num_experts",),
            fix=f"set model.moe_router_topk to a value in 1..{e}",
            edits={"model.moe_router_topk": min(max(m.moe_router_topk, 1), e)},
            moe_router_topk=m.moe_router_topk,
            num_experts=e,
        )
    fe = m.moe_ffn_hidden_size or 0
    if fe % d.etp:
        room = capacity(d.world_size, p.ep, p.pp)
        fit = fitting(divisors(fe), room)
        yield diag(
            R.MOE_FFN_ETP,
            f"moe_ffn_hidden_size ({fe}) is not divisible by etp ({d.etp})",
            "parallel.etp",
            related=("model.moe_ffn_hidden_size", "parallel.tp"),
            fix=f"set parallel.etp to one of {show(fit)} (the nearest is "
            f"{nearest(fit, d.etp)}; etp=1 is the usual choice with ep"
            + (
                f"; etp defaults to tp ({p.tp}), which the dense layers keep"
                if d.etp == p.tp
                else ""
            )
            + ")",
            edits={"parallel.etp": nearest(fit, d.etp)} if fit else {},
            moe_ffn_hidden_size=fe,
            etp=d.etp,
        )
