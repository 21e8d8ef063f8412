"""Communication volumes against the seeds' worked examples (seed 002 §1.6, §2.3.3, §3, §4.6, §5.4),
with the corrections documented in trainc.compiler.estimate.comm."""

from __future__ import annotations

import pytest

from tests.support.estimate import make_spec, run
from trainc.compiler.estimate.comm import (
    all_gather_bytes,
    all_reduce_bytes,
    all_to_all_bytes,
    cp_layer_bytes,
    zero_dp_bytes,
)
from trainc.schemas import CpCommType, Engine, Recompute
from trainc.schemas import CpCommType as Cp

MiB = 2**20
B, S, H = 2, 8192, 8192


def test_ring_factors_seed_000():
    D = 1000.0
    assert all_reduce_bytes(4, D) == 2 * 3 / 4 * D
    assert all_gather_bytes(4, D) == 3 / 4 * D
    assert all_reduce_bytes(1, D) == all_gather_bytes(1, D) == all_to_all_bytes(1, D) == 0


def test_tp_sp_all_gather_seed_002_1_6():
    D = B * S * H * 2  # 256 MiB, the gathered tensor
    recv = all_gather_bytes(4, D)
    assert recv / MiB == 192  # the seed's per-card receive
    # the seed's "send 64 MiB" undercounts: the shard reaches 3 peers -> sends 192 MiB as well
    assert 2 * recv / MiB == 384
    # per layer forward: 2 all-gathers + 2 reduce-scatters (seed says 1 GiB sent+received)
    assert 4 * 2 * recv / MiB == 1536


def test_cp_variants_at_cp2():
    kv = 2 * B * (S // 2) * H * 2  # K and V of the local 4096 tokens (MHA), 256 MiB
    q = kv / 2
    assert cp_layer_bytes(Cp.p2p, 2, q, kv) / MiB == 512  # seed: 512 MiB
    assert cp_layer_bytes(Cp.all_gather, 2, q, kv) / MiB == 512  # seed: 1024 (counts own shard)
    assert cp_layer_bytes(Cp.a2a, 2, q, kv) / MiB == 512  # seed: 256 (32 vs 64 MiB slip)
    # beyond CP=2 the ring grows with c-1, a2a stays below (c-1)/c
    assert cp_layer_bytes(Cp.p2p, 4, q / 2, kv / 2) > cp_layer_bytes(Cp.a2a, 4, q / 2, kv / 2)


def test_ep_dispatch_seed_002_4_6():
    assert all_to_all_bytes(8, B * S * 2 * H * 2) / MiB == 448  # k = 2 copies per token


def test_zero_dp_volumes_seed_002_5_4():
    P, n = 175e9, 10**9  # n large: (n-1)/n -> 1
    assert zero_dp_bytes(P, n, 0) == pytest.approx(4 * P)  # all-reduce of 2-byte grads: 4 Psi
    assert zero_dp_bytes(P, n, 1) == pytest.approx(4 * P)
    assert zero_dp_bytes(P, n, 2) == pytest.approx(4 * P)
    assert zero_dp_bytes(P, n, 3) == pytest.approx(6 * P)  # 1.5x DP (seed §5.4 table, not §6.8's 8)
    assert zero_dp_bytes(P, n, 3, num_microbatches=4) == pytest.approx(24 * P)


def test_plan_tp_bytes_formula():
    # Llama-3-8B-like, tp 2 pp 2, SP, selective: per layer 2 blocks x (fwd + bwd) x
    # all-reduce-equiv.
    plan = run(make_spec())
    e, d = plan["estimates"], plan["derived"]
    act = 1 * 8192 * 4096 * 2
    per = all_reduce_bytes(2, act) * 2  # sent + received
    M = d["num_microbatches"]
    expected = per * (2 * 2 * 16 + 1) * M  # 16 layers, 2 blocks, 2 passes, + embedding/output
    assert e["comm_bytes_per_step"]["tp"] == pytest.approx(expected, rel=1e-9)
    assert e["comm_bytes_per_step"]["cp"] == e["comm_bytes_per_step"]["ep"] == 0


def test_full_recompute_repeats_forward_comm():
    sel = run(make_spec())["estimates"]["comm_bytes_per_step"]["tp"]
    full = run(make_spec(training__recompute=Recompute.full))["estimates"]["comm_bytes_per_step"][
        "tp"
    ]
    assert full / sel == pytest.approx(1.5, rel=0.02)


def test_pp_p2p_per_stage():
    # pp 2: each stage sends M activations (or gradients) and receives M: seed 002 §2.3.3 with SP
    plan = run(make_spec())
    M = plan["derived"]["num_microbatches"]
    tensor = 1 * 8192 * 4096 * 2 / 2  # b * s/t * h * 2 bytes (SP shards the boundary tensor)
    assert plan["estimates"]["comm_bytes_per_step"]["pp"] == 2 * M * tensor


def test_pp_bandwidth_follows_rank_map():
    e = run(make_spec(nodes=2, gpn=4))["estimates"]  # world 8: tp2 pp2 dp2, 4 GPUs per node
    cols = {c["axis"]: c for c in e["comm_collectives"]}
    assert cols["tp"]["crosses_nodes"] is False and cols["tp"]["bandwidth_gbps"] == 300
    assert cols["pp"]["crosses_nodes"] is True and cols["pp"]["bandwidth_gbps"] == 25


def test_dp_megatron_distopt_reduce_scatter_fp32_grads_allgather_bf16_params():
    plan = run(make_spec(nodes=2))  # dp 4
    e = plan["estimates"]
    p = e["memory_per_stage"][e["critical_stage"]]["params"] / 2
    vol = all_gather_bytes(4, p * 4) + all_gather_bytes(4, p * 2)
    assert e["comm_bytes_per_step"]["dp"] == pytest.approx(2 * vol, rel=1e-6)


def test_ep_and_cp_appear_in_plan():
    moe = run(
        make_spec(nodes=2, parallel__ep=4, model__num_experts=8, model__moe_ffn_hidden_size=14336)
    )["estimates"]["comm_bytes_per_step"]
    assert moe["ep"] > 0
    for kind in CpCommType:
        cp = run(make_spec(nodes=2, parallel__cp=2, parallel__cp_comm_type=kind))
        assert cp["estimates"]["comm_bytes_per_step"]["cp"] > 0


def test_deepspeed_dp_comm():
    e = run(
        make_spec(engine=Engine.deepspeed, parallel__tp=1, parallel__pp=1, parallel__zero_stage=3)
    )["estimates"]
    assert e["comm_bytes_per_step"]["dp"] > 0 and e["comm_bytes_per_step"]["pp"] == 0


def test_ep_dispatch_bytes_per_dispatcher():
    """NIC and NVLink copies of one token per dispatch (uniform routing): Megatron's alltoall
    sends topk copies, the flex (DeepEP) kernels one per other domain / other rank hit, the
    allgather dispatcher every token to every rank."""
    import math

    from trainc.compiler.estimate.comm import EpDispatch, ep_link_bytes
    from trainc.schemas import MoeDispatcher as D

    # Qwen3-30B-A3B (128 experts, top-8) over ep 16 on two 8-GPU nodes
    a2a = ep_link_bytes(EpDispatch(D.alltoall, 8, 128, 16, 1.0), 8)
    assert a2a == pytest.approx((8 * 8 / 16, 8 * 7 / 16))
    flex = ep_link_bytes(EpDispatch(D.flex, 8, 128, 16, 1.0), 8)
    hit_node = 1 - math.comb(64, 8) / math.comb(128, 8)  # one of 64 experts on the other node
    hit_rank = 1 - math.comb(120, 8) / math.comb(128, 8)  # one of a rank's 8 experts
    assert flex == pytest.approx((1 * hit_node, 15 * hit_rank))
    assert flex[0] < a2a[0] / 4  # the fabric carries a quarter of alltoall's bytes
    assert ep_link_bytes(EpDispatch(D.allgather, 8, 128, 16, 1.0), 8) == (15.0, 0.0)
    # inside one NVLink domain nothing crosses the fabric
    assert ep_link_bytes(EpDispatch(D.flex, 8, 128, 8, 1.0), 8)[0] == 0.0
    assert ep_link_bytes(EpDispatch(D.alltoall, 8, 128, 8, 1.0), 8) == (0.0, 8 * 7 / 8)


def test_flex_dispatcher_cuts_cross_node_ep_time():
    # Mixtral-like model, ep 16 over two nodes: the same layout with the flex dispatcher spends
    # less time in the EP exchange than with alltoall, and the plan names the dispatcher
    from trainc.schemas import MoeDispatcher

    def ep_col(dispatcher):
        s = make_spec(
            nodes=2,
            model__num_experts=16,
            model__moe_router_topk=2,
            model__moe_ffn_hidden_size=14336,
            parallel__tp=1,
            parallel__pp=1,
            parallel__ep=16,
            training__recompute=Recompute.full,
        )
        s.model.moe_token_dispatcher_type = dispatcher
        if dispatcher is MoeDispatcher.flex:
            s.parallel.etp = 1
        cols = run(s)["estimates"]["comm_collectives"]
        return next(c for c in cols if c["axis"] == "ep")

    a2a, flex = ep_col(MoeDispatcher.alltoall), ep_col(MoeDispatcher.flex)
    assert a2a["name"] == "dispatch+combine all_to_all"
    assert flex["name"] == "dispatch+combine flex all_to_all"
    assert flex["seconds"] < a2a["seconds"]
    # the bytes are the token copies other ranks receive: one per rank holding an expert of the
    # token (flex), topk of them (alltoall); 16 experts top-2 over 16 ranks: 2 x 15/16 both
    from trainc.compiler.estimate.comm import EpDispatch, ep_sent_bytes
    from trainc.schemas import MoeDispatcher as D

    assert ep_sent_bytes(EpDispatch(D.flex, 2, 16, 16, 1.0)) == pytest.approx(
        ep_sent_bytes(EpDispatch(D.alltoall, 2, 16, 16, 1.0))
    )
    assert flex["sent_bytes"] == pytest.approx(a2a["sent_bytes"], rel=1e-6)
