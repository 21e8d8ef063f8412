"""Hypothesis strategies: valid specs built from divisors, and arbitrary (mostly invalid) specs."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from tests.support.kit import BASE, apply, make
from trainc.compiler.validate.util import divisors


@st.composite
def valid_cfg(draw: st.DrawFn) -> dict[str, Any]:
    """A spec dict that satisfies every error rule by construction."""
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 8))
    world = gpn * nodes
    tp = draw(st.sampled_from(divisors(gpn)))
    pp = draw(st.sampled_from(divisors(world // tp)))
    cp = draw(st.sampled_from(divisors(world // (tp * pp))))
    dp = world // (tp * pp * cp)
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    heads = tp * draw(st.integers(1, 4))
    groups = draw(st.sampled_from([g for g in divisors(heads) if g % tp == 0 or tp % g == 0]))
    layers = pp * vpp * draw(st.integers(1, 3))
    sp = draw(st.sampled_from([None, tp > 1]))
    unit = cp * math.lcm(2, tp) if (cp > 1 and tp > 1) else (2 * cp if cp > 1 else tp)
    seq = unit * draw(st.integers(1, 64))
    mbs = draw(st.integers(1, 4))
    nmb = pp * draw(st.integers(1, 4))
    cfg = apply(
        BASE,
        {
            "cluster.num_nodes": nodes,
            "cluster.gpus_per_node": gpn,
            "model.num_layers": layers,
            "model.num_attention_heads": heads,
            "model.num_query_groups": groups,
            "model.hidden_size": heads * 64,
            "model.ffn_hidden_size": tp * 64 * draw(st.integers(1, 8)),
            "model.vocab_size": draw(st.integers(1, 70000)),
            "model.seq_length": seq,
            "parallel.tp": tp,
            "parallel.pp": pp,
            "parallel.cp": cp,
            "parallel.vpp": vpp,
            "parallel.sequence_parallel": sp,
            "parallel.dp": draw(st.sampled_from([None, dp])),
            "training.micro_batch_size": mbs,
            "training.global_batch_size": mbs * dp * nmb,
        },
    )
    if draw(st.booleans()):  # MoE: ep divides world / (etp*pp), experts a multiple of ep
        ep = draw(st.sampled_from(divisors(world // (tp * pp))))
        experts = ep * draw(st.integers(1, 4))
        cfg = apply(
            cfg,
            {
                "model.num_experts": experts,
                "parallel.ep": ep,
                "model.moe_router_topk": draw(st.integers(1, experts)),
                "model.moe_ffn_hidden_size": tp * 64 * draw(st.integers(1, 4)),
                "parallel.sequence_parallel": tp > 1,
            },
        )
    return cfg


small = st.integers(1, 9)


@st.composite
def any_cfg(draw: st.DrawFn) -> dict[str, Any]:
    """A spec dict with every field drawn independently (positive sizes; mostly invalid)."""
    opt = lambda s: st.one_of(st.none(), s)  # noqa: E731
    return apply(
        BASE,
        {
            "engine": draw(st.sampled_from(["megatron", "deepspeed"])),
            "name": draw(st.sampled_from(["ok-name", "bad name", "-x", "a" * 130])),
            "cluster.num_nodes": draw(small),
            "cluster.gpus_per_node": draw(st.sampled_from([1, 2, 3, 4, 8])),
            "cluster.gpu": draw(st.sampled_from(["a100-80g", "gb200", "custom"])),
            "cluster.nvlink_domain_size": draw(opt(st.integers(1, 72))),
            "model.num_layers": draw(st.integers(1, 40)),
            "model.hidden_size": draw(st.integers(1, 4096)),
            "model.num_attention_heads": draw(st.integers(1, 64)),
            "model.num_query_groups": draw(opt(st.integers(1, 64))),
            "model.ffn_hidden_size": draw(opt(st.integers(1, 20000))),
            "model.kv_channels": draw(opt(st.integers(1, 256))),
            "model.vocab_size": draw(st.integers(1, 200000)),
            "model.seq_length": draw(st.integers(1, 10000)),
            "model.max_position_embeddings": draw(opt(st.integers(1, 10000))),
            "model.num_experts": draw(opt(st.integers(0, 64))),
            "model.moe_router_topk": draw(st.integers(1, 10)),
            "model.moe_ffn_hidden_size": draw(opt(st.integers(1, 5000))),
            "model.moe_layer_freq": draw(st.integers(1, 50)),
            "parallel.tp": draw(small),
            "parallel.pp": draw(small),
            "parallel.vpp": draw(st.integers(1, 4)),
            "parallel.cp": draw(st.integers(1, 4)),
            "parallel.ep": draw(st.integers(1, 8)),
            "parallel.etp": draw(opt(st.integers(1, 8))),
            "parallel.dp": draw(opt(st.integers(1, 64))),
            "parallel.cp_comm_type": draw(st.sampled_from(["p2p", "all_gather", "a2a"])),
            "parallel.sequence_parallel": draw(opt(st.booleans())),
            "parallel.zero_stage": draw(st.integers(0, 3)),
            "parallel.pipeline_first_stage_layers": draw(opt(st.integers(1, 20))),
            "parallel.pipeline_last_stage_layers": draw(opt(st.integers(1, 20))),
            "training.micro_batch_size": draw(st.integers(1, 8)),
            "training.global_batch_size": draw(st.integers(1, 2048)),
            "training.precision": draw(st.sampled_from(["bf16", "fp16", "fp32"])),
            "training.recompute": draw(st.sampled_from(["none", "selective", "full"])),
            "training.recompute_method": draw(opt(st.sampled_from(["uniform", "block"]))),
            "training.recompute_num_layers": draw(opt(st.integers(1, 10))),
            "training.offload_optimizer": draw(st.sampled_from(["none", "cpu", "nvme"])),
            "training.offload_param": draw(st.sampled_from(["none", "cpu", "nvme"])),
            "launch.device": draw(st.sampled_from(["cuda", "cpu"])),
            "launch.env": draw(
                st.dictionaries(
                    st.sampled_from(
                        [
                            "NCCL_DEBUG",
                            "CUDA_VISIBLE_DEVICES",
                            "MASTER_ADDR",
                            "BAD-KEY",
                            "NCCL_SOCKET_IFNAME",
                            "CUDA_DEVICE_MAX_CONNECTIONS",
                        ]
                    ),
                    st.sampled_from(["1", "0,1", "lo", "^lo", "", "ib0"]),
                    max_size=3,
                )
            ),
        },
    )


def spec_of(cfg: dict[str, Any]):
    """The normalized TrainSpec of a spec dict."""
    return make(cfg)
