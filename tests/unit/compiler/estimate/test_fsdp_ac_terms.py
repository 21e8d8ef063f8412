"""Memory and time terms of torchtitan's activation-checkpoint modes (engine=fsdp), with the
numbers worked out in each docstring."""

from __future__ import annotations

import pytest

from tests.support.kit import make
from trainc.compiler.estimate.activations import fsdp_checkpointed_bytes
from trainc.compiler.estimate.flops import flops_per_step, hardware_flops_per_step, spec_flop_terms
from trainc.compiler.estimate.fsdp_ac import (
    recompute_parts,
    sac_gemm_recompute_share,
    sac_layer_bytes,
)
from trainc.compiler.pipeline import plan_and_estimate

#: Llama 3 8B's block: h 4096, 32 heads x 128, 8 query groups, SwiGLU f 14336.
L8B = {
    "engine": "fsdp",
    "parallel.pp": 1,
    "parallel.tp": 1,
    "model.hidden_size": 4096,
    "model.num_attention_heads": 32,
    "model.num_query_groups": 8,
    "model.kv_channels": 128,
    "model.ffn_hidden_size": 14336,
    "model.activation": "swiglu",
    "model.seq_length": 8192,
    "model.num_layers": 4,
}


def test_sac_recomputes_the_even_gemms() -> None:
    """0.3.0 (fused wqkv; mm order wqkv, wo, w1, w3, w2): wo + w3 = 4096 (4096 + 14336) of
    4096 (6144 + 4096 + 3 x 14336): 18432 / 53248. 0.2.2 (wq, wk, wv, wo, w1, w3, w2): wk + wo
    + w3 = 4096 (1024 + 4096 + 14336): 19456 / 53248. torchao float8: the same (the SAC mode
    sees aten.mm on the float8 subclass)."""
    assert sac_gemm_recompute_share(make(**L8B)) == pytest.approx(18432 / 53248, rel=1e-15)
    old = make(**{**L8B, "launch.versions": {"torchtitan": "0.2.2"}})
    assert sac_gemm_recompute_share(old) == pytest.approx(19456 / 53248, rel=1e-15)
    fp8 = make(**{**L8B, "training.fp8_format": "hybrid", "training.fp8_recipe": "rowwise"})
    assert sac_gemm_recompute_share(fp8) == pytest.approx(18432 / 53248, rel=1e-15)


def test_sac_layer_bytes_llama3_8b() -> None:
    """s 8192, b 1, no TP, flash: T (2h + 2 x 6144 + 2 x 4096 + 4 x 32 + 2 x 14336 + 2h)
    = 65664 T = 537,919,488 bytes. TP 2 with SP: input 2Th/2 = 4096 T, wqkv 2T (2048 + 2 x
    512) = 6144 T, SDPA 2T x 2048 + lse 4 x 16 T = 4160 T, w1 2T x 7168 = 14336 T, w2's partial
    sum 2Th = 8192 T, two reduce-scatter outputs 2 x 2Th/2 = 8192 T: 45120 T."""
    spec = make(**L8B)
    assert sac_layer_bytes(spec, s=8192, b=1, t=1, sp=False, flash=True) == 65664 * 8192
    assert sac_layer_bytes(spec, s=8192, b=1, t=2, sp=True, flash=True) == 45120 * 8192
    fp8 = make(**{**L8B, "training.fp8_format": "hybrid", "training.fp8_recipe": "rowwise"})
    assert sac_layer_bytes(fp8, s=8192, b=1, t=1, sp=False, flash=True) == 65664 * 8192


def test_every_n_and_memory_budget_bytes() -> None:
    """4 layers of whole activations 100 (2-byte units), block input 2 s b h = 2 x 1 x 1 x 8 =
    16, 2 micro-batches in flight, working set 100: every 2nd block checkpointed: (100 + 16 +
    100 + 16) x 2 + 100 = 564; memory budget 0.25: 4 x (16 + 0.25 x 84) x 2 + 100 = 396."""
    spec = make(**{**L8B, "model.hidden_size": 8, "fsdp.selective_ac_option": "2"})
    kw = {"s": 1, "b": 1, "t": 1, "sp": False, "flash": True, "inflight": 2}
    whole, moe = [100.0] * 4, [0.0] * 4
    assert fsdp_checkpointed_bytes(spec, "selective_layer", whole, moe, **kw) == 564
    spec = make(**{**L8B, "model.hidden_size": 8, "fsdp.memory_budget": 0.25, "fsdp.compile": True})
    assert fsdp_checkpointed_bytes(spec, "memory_budget", whole, moe, **kw) == 396


def test_recompute_parts_per_mode() -> None:
    assert recompute_parts(make(**{**L8B, "engine": "megatron"}), 4) is None
    assert recompute_parts(make(**{**L8B, "training.recompute": "none"}), 2) == [(0, 0, 0)] * 2
    assert recompute_parts(make(**{**L8B, "training.recompute": "full"}), 2) == [(1, 1, 1)] * 2
    assert recompute_parts(make(**{**L8B, "fsdp.selective_ac_option": "3"}), 4) == [
        (0, 0, 0),
        (0, 0, 0),
        (1, 1, 1),
        (0, 0, 0),
    ]
    assert recompute_parts(make(**{**L8B, "fsdp.memory_budget": 0.25}), 1) == [(0.75, 0.75, 0.75)]
    share = 18432 / 53248
    assert recompute_parts(make(**L8B), 1) == [(share, 0.0, 1.0)]


@pytest.mark.parametrize(
    ("changes", "g", "core"),
    [
        ({}, 18432 / 53248, 0.0),  # per-op SAC: the even GEMMs
        ({"training.recompute": "full"}, 1.0, 1.0),  # the whole forward
        (
            {"fsdp.selective_ac_option": "2", "launch.versions": {"torchtitan": "0.2.2"}},
            0.5,
            0.5,
        ),  # 2 of the 4 blocks
        ({"training.recompute": "none"}, 0.0, 0.0),
    ],
)
def test_hardware_flops_add_the_recomputed_forward(changes, g, core) -> None:
    """Executed - model FLOPs per step = (b s per_token_layers g + b s^2 core_per_s2 a) / 3."""
    spec = make(**{**L8B, **changes})
    _, diags, plan = plan_and_estimate(spec)
    assert plan is not None, [d.message for d in diags if d.is_error]
    t = spec_flop_terms(plan.spec, plan)
    b, s = 16, 8192
    want = (b * s * t.per_token_layers * g + b * s * s * t.core_per_s2 * core) / 3
    got = hardware_flops_per_step(plan.spec, plan) - flops_per_step(plan.spec, plan)
    assert got == pytest.approx(want, rel=1e-12, abs=1.0)


def test_modes_order_memory_and_step_time() -> None:
    """On one plan: activations none > every-2 > per-op SAC > full, and the step time the
    other way round (more recompute, longer step)."""
    out = {}
    for name, ch in (
        ("none", {"training.recompute": "none"}),
        ("layer2", {"fsdp.selective_ac_option": "2", "launch.versions": {"torchtitan": "0.2.2"}}),
        ("op", {}),
        ("full", {"training.recompute": "full"}),
    ):
        _, _diags, plan = plan_and_estimate(make(**{**L8B, **ch}))
        assert plan is not None and plan.estimates is not None
        e = plan.estimates
        out[name] = (e.memory_bytes.activations, e.step_time_seconds)
    assert out["none"][0] > out["layer2"][0] > out["op"][0] > out["full"][0]
    assert out["none"][1] < out["op"][1] < out["full"][1]
    assert out["none"][1] < out["layer2"][1] < out["full"][1]
