"""Pipeline bubble (seed 002 §2.3.2), FLOPs (Megatron-LM's num_floating_point_operations,
megatron/training/training.py, core_v0.16.1), step time,
tokens/s and MFU."""

from __future__ import annotations

import math

import pytest

from tests.support.estimate import make_spec, run
from trainc.compiler.estimate.bubble import bubble_fraction
from trainc.compiler.estimate.flops import megatron_flops


def test_bubble_seed_values():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)  # seed 002 §2.3.2: 27.3 %
    assert bubble_fraction(4, 16) == pytest.approx(3 / 19)
    assert bubble_fraction(4, 8, vpp=2) == pytest.approx(3 / 19)  # (p-1)/(v*m+p-1)
    assert bubble_fraction(1, 1) == 0.0


def test_bubble_decreases_with_microbatches_and_vpp():
    vals = [bubble_fraction(8, m) for m in (1, 2, 8, 64)]
    assert vals == sorted(vals, reverse=True) and all(0 <= v < 1 for v in vals)
    assert bubble_fraction(8, 16, 4) < bubble_fraction(8, 16, 2) < bubble_fraction(8, 16, 1)


GOLDEN_FLOPS = [  # Megatron-LM num_floating_point_operations, global batch 128
    (dict(seq=8192, h=4096, a=32, g=8, d=128, f=14336, V=128256, L=32, swiglu=True), 5.3971e16),
    (dict(seq=2048, h=12288, a=96, g=96, d=128, f=49152, V=51200, L=96, swiglu=False), 2.7838e17),
    (
        dict(
            seq=4096,
            h=4096,
            a=32,
            g=8,
            d=128,
            f=14336,
            V=32000,
            L=32,
            swiglu=True,
            num_moe_layers=32,
            f_e=14336,
            topk=2,
        ),
        4.1789e16,
    ),
    (dict(seq=8192, h=8192, a=64, g=8, d=128, f=28672, V=128256, L=80, swiglu=True), 4.7104e17),
    (dict(seq=4096, h=4096, a=32, g=32, d=128, f=16384, V=50304, L=32, swiglu=False), 2.2603e16),
]


@pytest.mark.parametrize(("cfg", "flops"), GOLDEN_FLOPS)
def test_megatron_flops_golden(cfg, flops):
    assert float(f"{megatron_flops(batch=128, **cfg):.4e}") == flops


def test_dense_mha_sanity_formula():
    # Narayanan et al. 2021, arXiv 2104.04473, eq. 3: F = 72 B s L h^2 (1 + s/(12h) + V/(12 h L))
    # for MHA, f = 4h, GELU
    Bt, s, L, h, V = 8, 2048, 24, 2048, 51200
    f = megatron_flops(batch=Bt, seq=s, h=h, a=16, g=16, d=128, f=4 * h, V=V, L=L, swiglu=False)
    assert f == pytest.approx(72 * Bt * s * L * h * h * (1 + s / (12 * h) + V / (12 * h * L)))


def test_plan_flops_and_time_are_consistent():
    plan = run(make_spec(nodes=2))
    e, d = plan["estimates"], plan["derived"]
    assert e["flops_per_step"] == pytest.approx(
        megatron_flops(
            batch=16,
            seq=8192,
            h=4096,
            a=32,
            g=8,
            d=128,
            f=14336,
            V=d["padded_vocab_size"],
            L=32,
            swiglu=True,
        ),
        rel=1e-5,
    )
    assert e["hardware_flops_per_step"] > e["flops_per_step"]  # selective recompute
    peak = 312e12
    mfu = e["flops_per_step"] / (e["step_time_seconds"] * d["world_size"] * peak)
    assert e["mfu"] == pytest.approx(mfu, rel=1e-4)
    assert 0 < e["mfu"] <= 0.5  # bounded by compute_efficiency
    assert e["tokens_per_second"] == pytest.approx(16 * 8192 / e["step_time_seconds"], rel=1e-4)
    assert e["step_time_seconds"] >= e["compute_seconds"]
    assert math.isclose(
        e["pipeline_bubble_fraction"], 1 / (d["num_microbatches"] + 1), rel_tol=1e-5
    )


def test_overlap_and_efficiency_move_step_time():
    """The seed model's knobs (time_model=seed): comm_overlap and compute_efficiency."""
    from trainc.schemas import TimeModel

    seed = make_spec(nodes=2)
    seed.cluster.time_model = TimeModel.seed
    base = run(seed)["estimates"]["step_time_seconds"]
    s = make_spec(nodes=2)
    s.cluster.time_model = TimeModel.seed
    s.cluster.comm_overlap = 1.0
    hidden = run(s)["estimates"]
    assert hidden["step_time_seconds"] < base
    s.cluster.compute_efficiency = 1.0
    assert run(s)["estimates"]["step_time_seconds"] < hidden["step_time_seconds"]


# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM" (arXiv 2104.04473), Table 1: GPT models on A100-80GB (DGX A100, 8 x HDR per node),
# TP 8, full activation recomputation, TFLOP/s per GPU counted with their formula
# 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (executed FLOPs, recompute included), s = 2048, V = 51200.
# (Until session 5 the first row was a 96-layer "175B" at 1536 GPUs and 163 TFLOP/s, which is not
# a row of Table 1; the 1536-GPU row is 145.6B, 80 layers, pp 8, batch 2304, 148 TFLOP/s.)
PUBLISHED = [  # (layers, hidden, heads, pp, gpus, batch, TFLOP/s per GPU)
    (80, 12288, 96, 8, 1536, 2304, 148),
    (128, 25600, 160, 64, 3072, 3072, 163),
]


@pytest.mark.parametrize(("L", "h", "a", "pp", "gpus", "batch", "tflops"), PUBLISHED)
def test_published_megatron_throughput_is_predicted(L, h, a, pp, gpus, batch, tflops):
    from trainc.schemas import Activation, Normalization, Recompute

    s, V = 2048, 51200
    flops = 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    published_step_seconds = flops / (tflops * 1e12 * gpus)
    spec = make_spec(
        nodes=gpus // 8,
        model__num_layers=L,
        model__hidden_size=h,
        model__num_attention_heads=a,
        model__num_query_groups=a,
        model__ffn_hidden_size=4 * h,
        model__vocab_size=V,
        model__seq_length=s,
        model__activation=Activation.gelu,
        model__normalization=Normalization.layernorm,
        model__untie_embeddings_and_output_weights=False,
        parallel__tp=8,
        parallel__pp=pp,
        parallel__sequence_parallel=False,
        parallel__zero_stage=0,
        training__global_batch_size=batch,
        training__recompute=Recompute.full,
    )
    # Stated error, kernel model (default; GEMM shapes on the A100 profile, not fitted to this
    # paper): within 8 % of the measured step (0.98 and 1.00 of it, session 5).
    ratio = run(spec)["estimates"]["step_time_seconds"] / published_step_seconds
    assert abs(ratio - 1) <= 0.08
    # Seed model: with the default efficiency assumptions (compute_efficiency 0.7, scaled by
    # n/(n + gemm_half_efficiency_tokens) for n = 2048 tokens per micro batch, plus the per-layer
    # launch overhead) the prediction is within 10 % of the measured step; with a pessimistic
    # compute_efficiency of 0.5 it is 20-60 % slower.
    from trainc.schemas import TimeModel

    spec.cluster.time_model = TimeModel.seed
    ratio = run(spec)["estimates"]["step_time_seconds"] / published_step_seconds
    assert abs(ratio - 1) <= 0.10
    spec.cluster.compute_efficiency = 0.5
    ratio = run(spec)["estimates"]["step_time_seconds"] / published_step_seconds
    assert 1.20 <= ratio <= 1.60


def test_block_recompute_pays_only_for_the_layers_it_reruns():
    """recompute=full, method=block, num_layers=n re-runs the first n layers of each chunk
    (Megatron-Core TransformerBlock._checkpointed_forward): the recompute FLOPs, and so the step
    time, grow with n and reach uniform's at n = layers per stage."""
    from trainc.schemas import Recompute, RecomputeMethod

    def estimate(method, n):
        s = make_spec(
            nodes=2,
            parallel__tp=4,
            parallel__pp=4,
            training__recompute=Recompute.full,
            training__recompute_method=method,
            training__recompute_num_layers=n,
        )
        return run(s)["estimates"]

    model = estimate(RecomputeMethod.uniform, 1)["flops_per_step"]
    full = estimate(RecomputeMethod.uniform, 1)["hardware_flops_per_step"] - model
    blocks = [estimate(RecomputeMethod.block, n) for n in (1, 4, 8)]  # 32 layers / pp 4 = 8
    extras = [e["hardware_flops_per_step"] - model for e in blocks]
    assert extras == pytest.approx([full / 8, full / 2, full], rel=1e-4)  # estimates keep 6 digits
    times = [e["step_time_seconds"] for e in blocks]
    assert times[0] < times[1] < times[2]
    assert times[2] == pytest.approx(estimate(RecomputeMethod.uniform, 1)["step_time_seconds"])
