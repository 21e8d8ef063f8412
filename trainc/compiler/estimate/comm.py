"""Communication per GPU per optimizer step, by parallel axis and collective.

Volumes (bytes one GPU *sends*; for the symmetric collectives it receives the same amount), for a
tensor of ``D`` bytes over ``n`` ranks with the ring / pairwise algorithms NCCL uses (NCCL 2.x
docs, "Collective Operations" and nccl-tests doc/PERFORMANCE.md "bus bandwidth"; worked examples A
and C, docs/references.md):

* all-reduce ``2(n-1)/n * D``; all-gather and reduce-scatter ``(n-1)/n * D`` (D = the full tensor);
* all-to-all ``(n-1)/n * D`` (D = this rank's local tensor); p2p: the tensor itself.

The plan reports ``sent + received`` (the contract's ``comm_bytes_per_step``); time uses the larger
direction over the link's one-direction bandwidth. Corrections to worked example B
(docs/references.md; the right value is tested):

* the example counts an SP all-gather as "send ``D/N`` (64 MiB) + receive ``(N-1)D/N`` (192 MiB)
  = 256 MiB"; every rank's shard must reach ``N - 1`` peers, so a rank also *sends* ``(N-1)D/N``:
  sent + received is 384 MiB, 1536 MiB per layer forward (the example: 1 GiB);
* it gives CP all-gather 512 MiB forward: it counts the full gathered K, V including the
  rank's own shard; the received volume is ``(c-1)/c`` of it: 256 MiB forward, 512 MiB in total at
  CP = 2, the same as the ring (an all-gather *is* ``c - 1`` ring steps);
* it computes one Ulysses all-to-all as ``(1/2)*2*4096*64*128*2 = 33,554,432`` B
  (32 MiB); the product is 67,108,864 B (64 MiB), so a2a moves 256 MiB forward and 512 MiB in
  total at CP = 2 (not 128 / 256): at CP = 2 all three variants move the same bytes, and a2a's
  ``(c-1)/c`` beats the ring's ``c-1`` from CP = 3 on;
* it has ZeRO-1 "All-Reduce the updated parameters (4Psi)"; updated shards are
  all-gathered (``(n-1)/n x 2Psi``), the same total as its own ZeRO traffic table (RS + AG = one
  all-reduce);
* Megatron-FSDP (engine=megatron, zero_stage 3) moves what FSDP does: per micro-batch a
  parameter all-gather for forward and one for backward, and a gradient reduce-scatter (in fp32
  with ``grad_reduce_in_fp32``), dense parameters over dp x cp and experts over expert_dp;
* it says ZeRO-3 moves ``8Psi`` bytes; its own ZeRO table (and the ZeRO paper, arXiv:1910.02054
  §7.2.2: 1.5x DP)
  gives ``6Psi`` (two parameter all-gathers + one gradient reduce-scatter of ``2Psi`` bytes each).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from trainc.compiler.decide import zero_layout
from trainc.compiler.derive import tp_in_nvlink_domain
from trainc.compiler.estimate.kernels import activation_bytes
from trainc.compiler.estimate.memory import megatron_bytes_per_param
from trainc.compiler.estimate.params import (
    StageParams,
    head_dims,
    is_moe_layer,
    plan_rerun_masks,
    plan_stage_layers,
)
from trainc.compiler.ir import Plan, filled
from trainc.schemas import (
    CpCommType,
    Fp8Format,
    MoeDispatcher,
    Precision,
    StateDtype,
    TrainSpec,
)

AXES = ("tp", "cp", "ep", "pp", "dp")


def all_reduce_bytes(n: int, full: float) -> float:
    """Ring all-reduce, bytes each rank sends: ``2(n-1)/n * D``."""
    return 2 * (n - 1) / n * full if n > 1 else 0.0


def all_gather_bytes(n: int, full: float) -> float:
    """All-gather (or reduce-scatter) of a ``full``-byte result, bytes each rank sends.

    >>> all_gather_bytes(4, 2 * 8192 * 8192 * 2) / 2**20  # worked example B: received 192 MiB
    192.0
    """
    return (n - 1) / n * full if n > 1 else 0.0


def all_to_all_bytes(n: int, local: float) -> float:
    """All-to-all of a ``local``-byte tensor, bytes each rank sends.

    >>> all_to_all_bytes(8, 2 * 8192 * 2 * 8192 * 2) / 2**20  # worked example B: EP dispatch
    448.0
    """
    return (n - 1) / n * local if n > 1 else 0.0


@dataclass(frozen=True)
class EpDispatch:
    """One MoE token dispatch (or combine) of one rank: ``token_bytes`` = tokens x hidden x
    element bytes of its micro-batch (after the sequence-parallel split), routed to ``topk`` of
    ``experts`` experts spread evenly over ``ep`` ranks, by ``dispatcher`` (Megatron-Core
    ``moe_token_dispatcher_type``)."""

    dispatcher: MoeDispatcher
    topk: int
    experts: int
    ep: int
    token_bytes: float


def _p_hit(experts: int, held: int, topk: int) -> float:
    """Probability that a token's ``topk`` distinct experts (uniform routing) include one of
    ``held`` given experts: ``1 - C(E - held, k) / C(E, k)``."""
    if held <= 0:
        return 0.0
    return 1.0 - math.comb(experts - held, topk) / math.comb(experts, topk)


def ep_link_bytes(d: EpDispatch, g: int) -> tuple[float, float]:
    """(NIC bytes, NVLink bytes) one rank sends for one dispatch ``d`` when ``g`` of the ``ep``
    ranks share its NVLink domain (``g >= ep``: all of them). Uniform routing, as Megatron's
    force-balanced benchmarks.

    * ``alltoall`` (Megatron-Core ``MoEAlltoAllTokenDispatcher``): each token goes once per
      chosen expert: ``topk`` copies, ``(ep - g) / ep`` of them to ranks in other domains
      (through the NIC), ``(g - 1) / ep`` to the other ranks of its own domain.
    * ``flex`` (DeepEP / HybridEP fused kernels, ``moe_token_dispatcher_type: flex``): a token
      crosses the scale-out fabric once per other domain that holds one of its experts and
      reaches each other rank holding one of them once over NVLink (DeepEP's internode kernel
      sends one RDMA copy per node and forwards it over NVLink; DeepSeek-V3, arXiv 2412.19437
      §3.2.2; deepseek-ai/DeepEP README): NIC ``(N - 1) P_hit(domain)``, NVLink
      ``(ep - 1) P_hit(rank)`` token copies, with ``N = ep / g`` domains.
    * ``allgather`` (``MoEAllGatherTokenDispatcher``): every rank gathers all ``ep`` ranks'
      tokens (a ring over the group), the combine reduce-scatters them: ``ep - 1`` copies; a
      ring that leaves the domain runs ``g`` NIC channels in parallel (see
      :func:`time_collectives`), here counted as NIC bytes ``(ep - 1)`` spread over ``g``.

    >>> d = EpDispatch(MoeDispatcher.alltoall, 8, 128, 16, 1.0)  # Qwen3-30B, ep 16 on 2 nodes
    >>> [round(x, 3) for x in ep_link_bytes(d, 8)]  # topk x 8/16 remote, x 7/16 local
    [4.0, 3.5]
    >>> [round(x, 3) for x in ep_link_bytes(EpDispatch(MoeDispatcher.flex, 8, 128, 16, 1.0), 8)]
    [0.997, 6.184]
    """
    n, k, e = d.ep, d.topk, d.experts
    if n <= 1:
        return 0.0, 0.0
    g = max(min(g, n), 1)
    if d.dispatcher is MoeDispatcher.flex:
        domains = max(n // g, 1)
        nic = (domains - 1) * _p_hit(e, e * g // n, k)
        nvl = (n - 1) * _p_hit(e, e // n, k)
        return nic * d.token_bytes, nvl * d.token_bytes
    if d.dispatcher is MoeDispatcher.allgather:
        copies = float(n - 1)
        return (
            (copies if g < n else 0.0) * d.token_bytes,
            (0.0 if g < n else copies) * d.token_bytes,
        )
    return k * (n - g) / n * d.token_bytes, k * (g - 1) / n * d.token_bytes


def ep_sent_bytes(d: EpDispatch) -> float:
    """Bytes one rank sends to the other ranks for one dispatch ``d`` (the token copies other
    ranks receive, whatever the links; :func:`ep_link_bytes` splits them by link): alltoall
    ``topk (ep - 1) / ep`` copies of each token, flex one per other rank holding one of its
    experts, allgather ``ep - 1``.

    >>> round(ep_sent_bytes(EpDispatch(MoeDispatcher.flex, 8, 128, 16, 1.0)), 3)
    6.184
    """
    n = d.ep
    if n <= 1:
        return 0.0
    if d.dispatcher is MoeDispatcher.flex:
        return (n - 1) * _p_hit(d.experts, d.experts // n, d.topk) * d.token_bytes
    if d.dispatcher is MoeDispatcher.allgather:
        return (n - 1) * d.token_bytes
    return d.topk * (n - 1) / n * d.token_bytes


def ep_dispatch_seconds(d: EpDispatch, g: int, intra: float, inter: float) -> float:
    """Seconds of one dispatch ``d`` with ``g`` EP ranks per NVLink domain, NVLink and NIC at
    ``intra`` / ``inter`` bytes per second (efficiency applied): the slower of the two links
    (:func:`ep_link_bytes`); the allgather dispatcher's ring runs ``g`` NIC channels."""
    nic, nvl = ep_link_bytes(d, g)
    nic_bw = min(intra, inter * g) if d.dispatcher is MoeDispatcher.allgather else inter
    return max(nic / nic_bw if nic else 0.0, nvl / intra if nvl else 0.0)


@dataclass
class Collective:
    """One kind of collective on one GPU, summed over the step."""

    axis: str
    name: str
    group_size: int
    sent_bytes: float = 0.0
    received_bytes: float = 0.0
    count: int = 0
    crosses_nodes: bool = False
    bandwidth_gbps: float = 0.0
    seconds: float = 0.0
    group: str = ""
    """Rank-map group kind whose span decides the bandwidth ("": the axis' own group)."""
    exposed_seconds: float = 0.0
    ep: EpDispatch | None = None
    """The MoE token dispatch this record counts (EP axis): its NVLink and NIC bytes depend on
    how many EP ranks share an NVLink domain, known when it is timed (:func:`ep_link_bytes`)."""

    def add(self, sent: float, received: float | None = None, times: int = 1) -> None:
        """Add ``times`` operations of ``sent`` bytes (received defaults to sent)."""
        self.sent_bytes += sent * times
        self.received_bytes += (sent if received is None else received) * times
        self.count += times


@dataclass
class StageComm:
    """All collectives of one pipeline stage's GPU."""

    collectives: dict[str, Collective] = field(default_factory=dict)

    def get(self, axis: str, name: str, n: int) -> Collective:
        """The record for (axis, name), created on first use."""
        key = f"{axis}:{name}"
        if key not in self.collectives:
            self.collectives[key] = Collective(axis, name, n)
        return self.collectives[key]

    def bytes_by_axis(self) -> dict[str, float]:
        """sent + received bytes per axis."""
        out = dict.fromkeys(AXES, 0.0)
        for c in self.collectives.values():
            out[c.axis] += c.sent_bytes + c.received_bytes
        return out

    def seconds_by_axis(self) -> dict[str, float]:
        """Seconds per axis (sum of its collectives)."""
        out = dict.fromkeys(AXES, 0.0)
        for c in self.collectives.values():
            out[c.axis] += c.seconds
        return out


def attention_tp_ratio(spec: TrainSpec) -> float:
    """The attention block's TP traffic relative to a dense block's (an all-gather and a
    reduce-scatter, or an all-reduce, of ``h`` per token): 1, or for multi-head latent
    attention ``(h + q_lora + kv_lora + pos) / 2h``: its column-parallel up projections take the
    latents (gathered with sequence parallelism, their gradients all-reduced without), the
    down projections run on every rank (Megatron-Core ``MLASelfAttention``).

    >>> from trainc.schemas import ClusterSpec, ModelSpec, TrainingSpec, TrainSpec
    >>> m = ModelSpec(num_layers=1, hidden_size=7168, num_attention_heads=128, vocab_size=8,
    ...               seq_length=8, multi_latent_attention=True, q_lora_rank=1536)
    >>> s = TrainSpec(model=m, cluster=ClusterSpec(num_nodes=1), training=TrainingSpec(
    ...     micro_batch_size=1, global_batch_size=8))
    >>> round(attention_tp_ratio(s), 4)  # (7168 + 1536 + 512 + 64) / 14336
    0.6473
    """
    m = spec.model
    if not m.multi_latent_attention:
        return 1.0
    q_in = m.q_lora_rank or m.hidden_size  # without a query latent: the hidden state itself
    return (m.hidden_size + q_in + m.kv_lora_rank + m.qk_pos_emb_head_dim) / (2 * m.hidden_size)


def cp_layer_bytes(kind: CpCommType, c: int, q_bytes: float, kv_bytes: float) -> float:
    """CP bytes one rank sends per layer per micro-batch, forward + backward (worked example B).

    ``q_bytes``: this rank's Q (= O) slice; ``kv_bytes``: its K and V slices together.
    Ring (p2p): ``c-1`` K/V blocks forward and as many dK/dV backward. all_gather: the same volume
    (all-gather forward, reduce-scatter backward). a2a: Q, K, V, O each ``(c-1)/c`` both ways.

    >>> kv = 2 * 2 * 4096 * 8192 * 2; q = kv / 2  # B=2, S_local=4096, H=8192 (MHA)
    >>> [cp_layer_bytes(k, 2, q, kv) / 2**20 for k in CpCommType]  # p2p, all_gather, a2a
    [512.0, 512.0, 512.0]
    """
    if c <= 1:
        return 0.0
    if kind is CpCommType.a2a:
        return 2 * all_to_all_bytes(c, 2 * q_bytes + kv_bytes)
    return 2 * (c - 1) * kv_bytes


def stage_comm(
    spec: TrainSpec,
    plan: Plan,
    stages: list[StageParams],
    dp_comm: Callable[[TrainSpec, Plan, StageComm, StageParams], None],
) -> list[StageComm]:
    """Collectives per GPU of every PP stage for one optimizer step (bytes; seconds filled by
    :func:`time_collectives`); ``dp_comm`` adds the engine's data-parallel ones last
    (:attr:`trainc.compiler.estimate.engines.EngineEstimate.dp_comm`)."""
    m, d, tr = spec.model, plan.derived, spec.training
    t, c, p, v, e, etp = d.tp, d.cp, d.pp, d.vpp, d.ep, d.etp
    M = d.num_microbatches
    sp = bool(d.sequence_parallel)
    eb = activation_bytes(spec)
    s, b, h = m.seq_length / c, tr.micro_batch_size, m.hidden_size
    a = m.num_attention_heads
    act = b * s * h * eb  # the tensor TP collectives act on (per CP rank)
    out = []
    for r, (idx, rerun) in enumerate(
        zip(plan_stage_layers(plan), plan_rerun_masks(plan), strict=True)
    ):
        moe = [is_moe_layer(spec, i) for i in idx]
        # per layer: fwd + bwd, plus the recomputed forward of the layers full recompute re-runs
        passes = [2 + int(x) for x in rerun]
        sc = StageComm()
        n_moe = sum(moe)
        if t > 1:  # TP: one all-reduce-equivalent (SP: all-gather + reduce-scatter) per block
            # attention and dense MLP blocks (Transformer Engine linears: tp_comm_overlap can
            # hide them), then the routed experts' ETP block of MoE layers (grouped GEMMs)
            # an MLA attention block gathers its latents (and the rotary key), not h
            mlp_blocks = sum(n for mo, n in zip(moe, passes, strict=False) if not mo)
            unit = all_reduce_bytes(t, act)
            unit_attn = unit * attention_tp_ratio(spec)
            expert_blocks = (
                sum(n for mo, n in zip(moe, passes, strict=False) if mo) if etp > 1 else 0
            )
            name = "all_gather+reduce_scatter" if sp else "all_reduce"
            col = sc.get("tp", name, t)
            col.add(unit_attn, times=sum(passes) * M)
            if mlp_blocks:
                col.add(unit, times=mlp_blocks * M)
            if expert_blocks:
                sc.get("tp", "expert " + name, t).add(unit, times=expert_blocks * M)
            ends = (r == 0) + (r == p - 1)
            if ends:
                sc.get("tp", "embedding/output " + name, t).add(unit, times=ends * M)
        if c > 1:
            _, g_kv, d_qk, d_v = head_dims(spec)
            q_b = b * s * (a / t) * d_qk * eb
            kv_b = b * s * max(g_kv / t, 1) * (d_qk + d_v) * eb
            per = cp_layer_bytes(spec.parallel.cp_comm_type, c, q_b, kv_b)
            per *= sum(passes) / (2 * max(len(idx), 1))
            sc.get("cp", spec.parallel.cp_comm_type.value, c).add(per, times=len(idx) * M)
        if e > 1 and n_moe:
            tokens = b * s / (t if sp else 1)
            disp = EpDispatch(
                m.moe_token_dispatcher_type,
                m.moe_router_topk,
                filled(m.num_experts, "model.num_experts"),
                e,
                tokens * h * eb,
            )
            col = sc.get("ep", "dispatch+combine " + EP_COLLECTIVE[disp.dispatcher], e)
            col.ep = disp
            col.add(
                ep_sent_bytes(disp),
                times=2 * M * sum(n for mo, n in zip(moe, passes, strict=False) if mo),
            )
        if p > 1:
            pb = b * s * h * eb / (t if sp else 1)
            sent = recv = 0
            for j in range(v):
                q = j * p + r
                first, last = q == 0, q == v * p - 1
                sent += (not last) + (not first)  # activation forward, gradient backward
                recv += (not first) + (not last)
            col = sc.get("pp", "p2p", 2)
            col.add(pb * sent * M, pb * recv * M)
            col.count = (sent + recv) * M
        dp_comm(spec, plan, sc, stages[r])
        out.append(sc)
    return out


def zero_dp_bytes(
    num_params: float, n: int, stage: int, num_microbatches: int = 1, elem_bytes: int = 2
) -> float:
    """DeepSpeed data-parallel bytes one rank sends per step (ZeRO paper, arXiv:1910.02054
    §7; worked example B's table).

    ZeRO-0: gradient all-reduce; 1: reduce-scatter + parameter all-gather (same volume);
    2: gradient reduce-scatter every micro-batch + one all-gather; 3: forward and backward
    parameter all-gathers and a gradient reduce-scatter every micro-batch.

    >>> P = 175e9; [round(zero_dp_bytes(P, 10**6, s) / (2 * P), 3) for s in range(4)]  # x 2Psi
    [2.0, 2.0, 2.0, 3.0]
    """
    grad = all_gather_bytes(n, num_params * elem_bytes)
    if stage == 0:
        return 2 * grad
    if stage in (1, 2):
        return grad * (num_microbatches if stage == 2 else 1) + grad
    return 3 * grad * num_microbatches


def deepspeed_dp_comm(spec: TrainSpec, plan: Plan, sc: StageComm, sp_: StageParams) -> None:
    """DeepSpeed's data-parallel collectives of one stage (:func:`zero_dp_bytes` at the decided
    ZeRO stage, :func:`trainc.compiler.decide.zero_layout`), over dp x cp."""
    d = plan.derived
    n = d.dp * d.cp
    if n > 1:
        stage = zero_layout(spec).zero_stage
        eb = 4 if spec.training.precision is Precision.fp32 else 2
        sent = zero_dp_bytes(sp_.total, n, stage, d.num_microbatches, eb)
        sc.get("dp", f"zero{stage} reduce/gather", n).add(sent)


def megatron_dp_comm(spec: TrainSpec, plan: Plan, sc: StageComm, sp_: StageParams) -> None:
    """Megatron-Core's data-parallel collectives of one stage: dense parameters over dp x cp,
    experts over expert_dp; a gradient all-reduce (DDP), reduce-scatter + all-gather (the
    distributed optimizer) or, with Megatron-FSDP, per-micro-batch gathers and reduce-scatters
    (module docstring)."""
    d = plan.derived
    n, n_e = d.dp * d.cp, d.expert_dp
    pb, gb, _ = megatron_bytes_per_param(spec.training.precision)
    tr = spec.training
    if tr.fp8_param_gather and (tr.fp8_format is not Fp8Format.none):
        pb = 1  # FP8 parameters are all-gathered in FP8 (DDP fp8_param_gather)
    if tr.main_grads_dtype is StateDtype.bf16:
        gb = 2  # precision-aware optimizer: bf16 main grads, reduced in bf16
    for group, params, kind in ((n, sp_.dense, "dense"), (n_e, sp_.expert, "expert")):
        if group <= 1 or params <= 0:
            continue
        if d.megatron_fsdp:  # every micro-batch: gather for forward and backward, reduce-scatter
            M = d.num_microbatches
            sc.get("dp", f"{kind} fsdp param all_gather (fwd+bwd)", group).add(
                all_gather_bytes(group, params * pb), times=2 * M
            )
            sc.get("dp", f"{kind} fsdp grad reduce_scatter", group).add(
                all_gather_bytes(group, params * gb), times=M
            )
            continue
        if d.distributed_optimizer:
            sc.get("dp", f"{kind} grad reduce_scatter", group).add(
                all_gather_bytes(group, params * gb)
            )
            sc.get("dp", f"{kind} param all_gather", group).add(
                all_gather_bytes(group, params * pb)
            )
        else:
            sc.get("dp", f"{kind} grad all_reduce", group).add(all_reduce_bytes(group, params * gb))


#: the EP record's name per dispatcher (``dispatch+combine NAME``)
EP_COLLECTIVE = {
    MoeDispatcher.alltoall: "all_to_all",
    MoeDispatcher.flex: "flex all_to_all",
    MoeDispatcher.allgather: "all_gather+reduce_scatter",
}

#: collective axis -> rank-map group kind whose span decides the bandwidth
#: TP records Transformer Engine's userbuffers carry under tp_comm_overlap (time._TE_TP_COLLECTIVES)
_UB_TP = ("all_gather+reduce_scatter",)
_GROUP_OF_AXIS = {"tp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp_cp"}


#: NCCL's latency model for the ring algorithm (NVIDIA/nccl ``src/graph/tuning.cc`` at v2.23,
#: ``baseLat`` and ``hwLat``, microseconds), per protocol (LL, LL128, Simple): the fixed cost of
#: one collective, the cost of each ring step inside an NVLink domain and across the network,
#: and the fraction of the link bandwidth the protocol carries (LL sends 8-byte flags with every
#: 8 bytes of data, LL128 120 of every 128 bytes; the ``busBw`` refinements of the same file).
#: NCCL picks, per call, the protocol of least latency + bytes / bandwidth.
NCCL_RING_PROTOCOLS = (  # (base us, NVLink step us, network step us, bandwidth fraction)
    (6.6, 0.6, 2.7, 0.5),
    (14.0, 1.9, 4.0, 0.92),
    (8.4, 3.4, 14.0, 1.0),
)


def ring_steps(name: str, n: int) -> tuple[int, int]:
    """(ring steps, kernel launches) of one operation of the collective record ``name`` over
    ``n`` ranks (``tuning.cc`` ``nsteps``): an all-reduce ``2 (n - 1)`` steps; an all-gather or a
    reduce-scatter ``n - 1``; sequence parallelism's all-gather + reduce-scatter pair both, in two
    launches; context parallelism's p2p ring ``n - 1`` exchanges, each its own send/recv launch;
    pipeline p2p and all-to-all one step."""
    if n <= 1:
        return 0, 0
    if "all_gather+reduce_scatter" in name:
        return 2 * (n - 1), 2
    if "all_reduce" in name:
        return 2 * (n - 1), 1
    if name in ("p2p", "a2a+p2p"):  # CP ring (pipeline p2p is named "p2p" on axis pp)
        return n - 1, n - 1
    if "reduce_scatter" in name or "all_gather" in name or "reduce/gather" in name:
        return n - 1, 1
    return 1, 1


def collective_seconds(
    vol: float,
    count: int,
    steps: int,
    launches: int,
    inter_steps: int,
    bw_bytes_per_s: float,
    sharp: bool = False,
) -> float:
    """Seconds of ``count`` operations moving ``vol`` bytes in all (the larger direction) at
    ``bw_bytes_per_s``, each ``steps`` ring steps of which ``inter_steps`` cross the network, in
    ``launches`` kernel launches: the alpha-beta model of :data:`NCCL_RING_PROTOCOLS`, the best
    protocol for the operation's size. ``sharp``: the reduction runs in the switch (CollNet /
    SHARP), one network hop instead of the ring's network steps. ``count`` 0 (a record timed by
    bytes alone) has no latency.

    >>> round(collective_seconds(0, 1, 14, 1, 0, 1e11) * 1e6, 1)  # 8-rank all-reduce, no bytes
    15.0
    """
    if bw_bytes_per_s <= 0:
        return 0.0
    if count <= 0 or steps <= 0:
        return vol / bw_bytes_per_s
    if sharp:
        inter_steps = min(inter_steps, 1)
    best = math.inf
    for base, hop, net, frac in NCCL_RING_PROTOCOLS:
        lat = launches * base + (steps - inter_steps) * hop + inter_steps * net
        best = min(best, count * lat * 1e-6 + vol / (bw_bytes_per_s * frac))
    return best


def time_collectives(
    spec: TrainSpec,
    comms: list[StageComm],
    crosses: dict[str, bool],
    members: dict[str, int] | None = None,
) -> None:
    """Fill ``seconds``: larger direction / (bandwidth x comm_efficiency); the bandwidth is the
    inter-node one when the axis' group leaves an NVLink domain (from the rank map).

    ``members`` (group kind -> members per NVLink domain, :func:`.rankmap.members_per_domain`):
    a crossing group with ``g`` members per domain gets ``min(NVLink, g x NIC)``, the
    rail-optimised fabric's parallel NICs (time_model=kernels; the seed model uses one NIC).
    With ``cluster.collective_latency`` (off by default) time_model=kernels also pays each NCCL
    operation's latency (:func:`collective_seconds`, NCCL's ring alpha-beta model; not the TP
    collectives Transformer Engine's userbuffers run under ``training.tp_comm_overlap``) and,
    with ``cluster.sharp``, halves the bytes a data-parallel
    all-reduce or reduce-scatter sends across the fabric (NCCL CollNet / SHARP: the switch
    reduces, so each byte goes up once and comes down once instead of the ring's two passes;
    NCCL user guide, environment variable NCCL_COLLNET_ENABLE,
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)."""
    cl = spec.cluster
    eff = cl.comm_efficiency if cl.comm_efficiency and cl.comm_efficiency > 0 else 1.0
    intra = filled(cl.intra_node_bandwidth_gbps, "cluster.intra_node_bandwidth_gbps")
    inter = filled(cl.inter_node_bandwidth_gbps, "cluster.inter_node_bandwidth_gbps")
    ub = bool(spec.training.tp_comm_overlap) and tp_in_nvlink_domain(
        spec.parallel.tp, cl.nvlink_domain_size, cl.gpus_per_node, cl.num_nodes * cl.gpus_per_node
    )
    for sc in comms:
        for col in sc.collectives.values():
            kind = col.group or _GROUP_OF_AXIS[col.axis]
            if col.axis == "dp" and col.name.startswith("expert"):
                kind = "expert_dp"
            col.crosses_nodes = bool(crosses.get(kind, True))
            bw = inter if col.crosses_nodes else intra
            vol = max(col.sent_bytes, col.received_bytes)
            if col.ep is not None and members is not None:
                g = max(members.get(kind, 1), 1) if col.crosses_nodes else col.group_size
                col.seconds = col.count * ep_dispatch_seconds(
                    col.ep, g, intra * 1e9 * eff, inter * 1e9 * eff
                )
                col.bandwidth_gbps = vol / col.seconds / 1e9 / eff if col.seconds else bw
                continue
            if col.crosses_nodes and members is not None and col.group_size > 1:
                g = max(members.get(kind, 1), 1)
                if "all_to_all" in col.name:
                    # every GPU sends its remote share through its own NIC, the rest on NVLink
                    remote = (col.group_size - min(g, col.group_size)) / (col.group_size - 1)
                    t_r = vol * remote / (inter * 1e9 * eff) if inter > 0 else 0.0
                    t_l = vol * (1 - remote) / (intra * 1e9 * eff) if intra > 0 else 0.0
                    col.seconds = max(t_r, t_l)
                    col.bandwidth_gbps = vol / col.seconds / 1e9 / eff if col.seconds else bw
                    continue
                if col.axis in ("tp", "dp"):  # rings: one channel per NIC of the domain
                    bw = min(intra, inter * g)
            reduce = "reduce" in col.name and col.axis == "dp"
            sharp = bool(cl.sharp) and reduce and col.crosses_nodes
            if sharp:  # in-network reduction: each byte crosses the fabric once, not twice
                vol /= 2
            col.bandwidth_gbps = bw
            # the seed model, or latency off: bytes over bandwidth. Transformer Engine's
            # userbuffers run the overlapped TP collectives with their own p2p kernels, not NCCL
            # (TE initialize_ub), so NCCL's latency model does not apply to them
            if (
                members is None
                or not cl.collective_latency
                or (ub and col.axis == "tp" and col.name in _UB_TP)
            ):
                col.seconds = vol / (bw * 1e9 * eff) if bw > 0 else 0.0
                continue
            steps, launches = ring_steps(col.name, col.group_size)
            per_dom = max(members.get(kind, 1), 1) if col.crosses_nodes else col.group_size
            domains = -(-col.group_size // min(per_dom, col.group_size))
            inter_steps = (
                0
                if domains <= 1
                else min(steps, (2 if steps >= 2 * (col.group_size - 1) else 1) * (domains - 1))
            )
            col.seconds = collective_seconds(
                vol, col.count, steps, launches, inter_steps, bw * 1e9 * eff, sharp
            )
