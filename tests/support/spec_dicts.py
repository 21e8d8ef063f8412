"""Hypothesis strategies for the differential tests: explicit spec dicts (no presets, no Hydra).

A spec is drawn in two steps: a coherent layout (every divisibility rule holds by construction),
then zero to three mutations, each of which sets one field to a value from a small menu around the
rules (off by one, a non-divisor, a feature switch). About half the specs stay valid, and both
sides of each rule come up often; a uniform draw would almost never produce a valid layout.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def coherent_specs(draw: st.DrawFn, *, engine: str | None = None) -> dict[str, Any]:
    """A spec every oracle should accept (up to the rules trainc adds)."""
    eng = engine or draw(st.sampled_from(["megatron", "megatron", "megatron", "deepspeed"]))
    tp = draw(st.sampled_from([1, 1, 2, 2, 4, 8]))
    cp = 1 if eng == "deepspeed" else draw(st.sampled_from([1, 1, 1, 2, 4]))
    pp = draw(st.sampled_from([1, 1, 2, 2, 3, 4]))
    vpp = 1 if pp == 1 else draw(st.sampled_from([1, 1, 2, 3]))
    dp = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    world = tp * pp * cp * dp
    gpn = draw(st.sampled_from([d for d in _divisors(world) if d <= 8]))
    groups_mult = draw(st.sampled_from([1, 1, 2, 4]))
    groups = tp * groups_mult if draw(st.integers(0, 4)) else max(1, tp // 2)
    heads = groups * draw(st.sampled_from([1, 1, 2, 4]))
    head_dim = draw(st.sampled_from([32, 64, 128]))
    hidden = heads * head_dim
    layers = pp * vpp * draw(st.sampled_from([1, 1, 2, 3]))
    sp = tp > 1 and draw(st.booleans())
    seq = cp * math.lcm(2, tp) * draw(st.sampled_from([16, 32, 64, 256]))
    mbs = draw(st.sampled_from([1, 1, 2, 4]))
    nmb = pp * draw(st.sampled_from([1, 2, 4])) if vpp > 1 else draw(st.sampled_from([1, 2, 4, 8]))
    model: dict[str, Any] = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": groups if groups != heads or draw(st.booleans()) else None,
        "ffn_hidden_size": draw(st.sampled_from([None, 4 * hidden, 8 * hidden])),
        "vocab_size": draw(st.sampled_from([1000, 32000, 50257, 128])),
        "seq_length": seq,
        "max_position_embeddings": draw(st.sampled_from([None, seq, 2 * seq])),
        "activation": draw(st.sampled_from(["swiglu", "gelu"])),
        "normalization": draw(st.sampled_from(["rmsnorm", "layernorm"])),
        "position_embedding": draw(st.sampled_from(["rope", "learned"])),
    }
    ep, etp = 1, None
    if eng == "megatron" and draw(st.integers(0, 2)) == 0:
        etp = draw(st.sampled_from([None, 1]))
        edp_room = world // ((etp or tp) * pp)
        ep = draw(st.sampled_from([e for e in _divisors(edp_room) if e <= 8]))
        experts = ep * draw(st.sampled_from([1, 2, 4]))
        model["num_experts"] = experts
        model["moe_router_topk"] = draw(st.sampled_from([k for k in (1, 2, 4) if k <= experts]))
        model["moe_ffn_hidden_size"] = draw(st.sampled_from([None, 2 * hidden]))
        model["moe_layer_freq"] = draw(st.sampled_from([1, 1, 2]))
        sp = sp or (tp > 1 and ep > 1)
    parallel: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "cp": cp,
        "ep": ep,
        "etp": etp,
        "sequence_parallel": sp if draw(st.booleans()) else (None if sp == (tp > 1) else sp),
        "cp_comm_type": draw(st.sampled_from(["p2p", "p2p", "all_gather"])),
        "zero_stage": (
            draw(st.sampled_from([0, 1, 2, 3]))
            if eng == "deepspeed" and pp == 1
            else draw(st.sampled_from([0, 1]))
        ),
    }
    if draw(st.integers(0, 4)) == 0:
        parallel["dp"] = dp
    training: dict[str, Any] = {
        "micro_batch_size": mbs,
        "global_batch_size": mbs * dp * nmb,
        "precision": draw(st.sampled_from(["bf16", "bf16", "fp16", "fp32"])),
        "recompute": draw(st.sampled_from(["none", "selective", "selective", "full"])),
    }
    if training["recompute"] == "full":
        training["recompute_method"] = draw(st.sampled_from([None, "uniform", "block"]))
        training["recompute_num_layers"] = draw(st.sampled_from([None, 1]))
    if eng == "deepspeed" and parallel["zero_stage"] >= 1:
        training["offload_optimizer"] = draw(st.sampled_from(["none", "none", "cpu"]))
        if parallel["zero_stage"] == 3:
            training["offload_param"] = draw(st.sampled_from(["none", "cpu"]))
    return {
        "name": "diff",
        "engine": eng,
        "model": model,
        "cluster": {"num_nodes": world // gpn, "gpus_per_node": gpn, "gpu": "h100-80g"},
        "parallel": parallel,
        "training": training,
        "launch": {},
    }


def _mutations(cfg: dict[str, Any]) -> dict[str, list[Any]]:
    """Per dotted key, the values a mutation may set (around the rules)."""
    m, p, t, c = cfg["model"], cfg["parallel"], cfg["training"], cfg["cluster"]
    L, h, a = m["num_layers"], m["hidden_size"], m["num_attention_heads"]
    s = m["seq_length"]
    return {
        "parallel.tp": [1, 2, 3, 4, 8, 16],
        "parallel.pp": [1, 2, 3, 4, 5],
        "parallel.vpp": [1, 2, 3, 4],
        "parallel.cp": [1, 2, 3, 4],
        "parallel.ep": [1, 2, 3, 4, 8],
        "parallel.etp": [None, 1, 2, 3, 4],
        "parallel.dp": [None, 1, 2, 3, 8, 16],
        "parallel.sequence_parallel": [None, True, False],
        "parallel.cp_comm_type": ["p2p", "all_gather", "a2a"],
        "parallel.zero_stage": [0, 1, 2, 3],
        "parallel.pipeline_first_stage_layers": [
            None,
            1,
            max(1, L // max(p["pp"], 1) - 1),
            L // max(p["pp"], 1) + 1,
            L,
        ],
        "parallel.pipeline_last_stage_layers": [None, 1, max(1, L // max(p["pp"], 1) - 1), 2],
        "parallel.account_for_embedding_in_pipeline_split": [False, True],
        "parallel.account_for_loss_in_pipeline_split": [False, True],
        "model.num_layers": [L + 1, L - 1 or 1, 2 * L, 7, 9],
        "model.num_attention_heads": [a + 1, 2 * a, 6, 12, max(1, a // 2)],
        "model.num_query_groups": [None, 1, 2, 3, 4, 8, a],
        "model.hidden_size": [h + 8, h + 1, 2 * h, 96 * 5],
        "model.ffn_hidden_size": [None, 4 * h + 4, 3 * h + 2, 2 * h + 6, 1000],
        "model.kv_channels": [None, 48, 40],
        "model.seq_length": [s + 2, s + 1, s // 2 or 2, 100, 6],
        "model.max_position_embeddings": [None, s, s // 2 or 1, 2 * s],
        "model.num_experts": [None, 2, 3, 6, 8, 16],
        "model.moe_router_topk": [1, 2, 3, 9],
        "model.moe_ffn_hidden_size": [None, 2 * h + 6, 1002, h],
        "model.moe_layer_freq": [1, 2, L + 1],
        "cluster.num_nodes": [1, 2, 3, 5, c["num_nodes"] + 1],
        "cluster.gpus_per_node": [1, 2, 4, 6, 8],
        "training.micro_batch_size": [1, 2, 3, 4, 8],
        "training.global_batch_size": [
            t["global_batch_size"] + 1,
            1,
            2 * t["global_batch_size"],
            3 * t["global_batch_size"],
            100,
        ],
        "training.recompute": ["none", "selective", "full"],
        "training.recompute_method": [None, "uniform", "block"],
        "training.recompute_num_layers": [None, 1, 2, L, L + 1],
        "training.offload_optimizer": ["none", "cpu", "nvme"],
        "training.offload_param": ["none", "cpu", "nvme"],
        "training.nvme_path": [None, "/local_nvme"],
        "training.min_lr": [3.0e-5, 1.0e-3],
        "engine": ["megatron", "deepspeed"],
    }


@st.composite
def spec_dicts(draw: st.DrawFn, *, engine: str | None = None) -> dict[str, Any]:
    """A coherent spec with 0-3 one-field mutations (valid about half the time)."""
    cfg = draw(coherent_specs(engine=engine))
    n = draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))
    for _ in range(n):
        menu = _mutations(cfg)
        key = draw(st.sampled_from(sorted(menu)))
        value = draw(st.sampled_from(menu[key]))
        section, _, leaf = key.rpartition(".")
        target = cfg[section] if section else cfg
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return cfg
