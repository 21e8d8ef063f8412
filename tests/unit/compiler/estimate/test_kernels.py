"""The kernel time model (time_model=kernels), per-axis overlap, the rail-optimised fabric, the
memory model's precision keys and the fit rule's margin (TRC401 / TRC403)."""

from __future__ import annotations

import math

import pytest

from tests.support.estimate import make_spec, run, run_ir
from trainc.compiler.estimate.activations import stage_activation_bytes
from trainc.compiler.estimate.kernels import (
    GEMM_K_OVERHEAD,
    Hw,
    gemm_seconds,
    hardware,
    logits_time,
)
from trainc.compiler.estimate.memory import megatron_state_bytes
from trainc.compiler.estimate.rankmap import members_per_domain
from trainc.compiler.estimate.time import BUCKET_MIN_PARAMS
from trainc.compiler.fit import OOM_MARGIN, TIGHT_MARGIN, check_fit
from trainc.compiler.support.hardware import GPUS
from trainc.schemas import Fp8Format, Gpu, Recompute, StateDtype, TimeModel

HW = Hw({"bf16": 1e15, "fp8": 2e15}, {"bf16": 1.0, "fp8": 1.0}, 0.5, 1e12, 100)


def test_gemm_wave_and_tile_quantization():
    # 100 x 100 tiles of 128 x 256 on 100 SMs: 100 full waves, compute bound
    full = gemm_seconds(HW, 12800, 25600, 8192)
    # each tile's fixed cost: K / (K + GEMM_K_OVERHEAD) of the rate
    assert full == pytest.approx(2 * 12800 * 25600 * 8192 / 1e15 * (8192 + GEMM_K_OVERHEAD) / 8192)
    # one more tile column (101 x 100 tiles = 101 waves, the last 1/100 full): the 101st wave
    # costs a whole wave although its tiles are 1 % of the work
    more = gemm_seconds(HW, 12800, 25600 + 256, 8192)
    assert more == pytest.approx(full * 101 / 100 * (25856 / 25856), rel=1e-9)
    # a 1-row edge tile wastes its 127 rows: M = 12801 costs as M = 12928 (101 tile rows)
    assert gemm_seconds(HW, 12801, 25600, 8192) == pytest.approx(
        gemm_seconds(HW, 12928, 25600, 8192)
    )


def test_short_k_gemms_pay_the_tile_overhead():
    # the same FLOPs with a 4x shorter reduction: (K + K0) / K of the compute time
    long_k = gemm_seconds(HW, 12800, 25600, 8192)
    short_k = gemm_seconds(HW, 12800, 25600 * 4, 2048)
    k0 = GEMM_K_OVERHEAD
    assert short_k / long_k == pytest.approx(((2048 + k0) / 2048) / ((8192 + k0) / 8192))


def test_small_gemm_is_memory_bound():
    # M = 1 token: 2 N K FLOPs against a whole weight read, 2 bytes per element at 1 TB/s
    t = gemm_seconds(HW, 1, 4096, 4096)
    assert t == pytest.approx((1 * 4096 + 4096 * 4096) * 2 / 1e12 + 2 * 4096 / 1e12)


def test_fp8_gemms_run_at_the_fp8_peak_and_the_output_layer_stays_bf16():
    h100 = hardware(run_ir(_h100()).spec)
    big = (8192, 28672, 8192)
    ratio = gemm_seconds(h100, *big, "bf16") / gemm_seconds(h100, *big, "fp8")
    p = GPUS[Gpu.h100_80g]
    assert ratio == pytest.approx(
        p.peaks["fp8"] * p.gemm_efficiency["fp8"] / (p.peaks["bf16"] * p.gemm_efficiency["bf16"])
    )
    # an A100 has no FP8 tensor cores: an FP8 GEMM is timed at the BF16 peak
    a100 = hardware(run_ir(make_spec()).spec)
    assert gemm_seconds(a100, *big, "fp8") == pytest.approx(
        gemm_seconds(a100, *big, "bf16"), rel=0.01
    )
    bf = _h100()
    f8 = _h100(training__fp8_format=Fp8Format.hybrid)
    plan_bf, plan_f8 = run_ir(bf), run_ir(f8)
    assert logits_time(plan_bf.spec, plan_bf, hardware(plan_bf.spec)) == logits_time(
        plan_f8.spec, plan_f8, hardware(plan_f8.spec)
    )
    e_bf, e_f8 = plan_bf.estimates, plan_f8.estimates
    assert e_f8.compute_seconds_by_kind["gemm"] < 0.75 * e_bf.compute_seconds_by_kind["gemm"]
    assert e_f8.tokens_per_second > e_bf.tokens_per_second


def _h100(**kw):
    s = make_spec(nodes=2, **kw)
    s.cluster.gpu = Gpu.h100_80g
    s.cluster.peak_tflops = None
    s.cluster.gpu_memory_gib = None
    s.cluster.intra_node_bandwidth_gbps = None
    s.cluster.inter_node_bandwidth_gbps = None
    return s


def test_dp_grad_reduce_overlap_exposes_the_last_bucket():
    # tp 1 pp 1 dp 16 (2 nodes): the gradient reduce-scatter runs behind the last backward
    spec = _h100(parallel__tp=1, parallel__pp=1, training__global_batch_size=16)
    e = run(spec)["estimates"]
    [rs] = [c for c in e["comm_collectives"] if c["name"] == "dense grad reduce_scatter"]
    params = run_ir(spec).estimates.params_per_gpu
    nb = math.ceil(params / max(BUCKET_MIN_PARAMS, 1_000_000 * 16))
    assert rs["exposed_seconds"] >= rs["seconds"] / nb * (1 - 1e-5)
    assert rs["exposed_seconds"] < rs["seconds"]
    off = _h100(parallel__tp=1, parallel__pp=1, training__global_batch_size=16)
    off.training.overlap_grad_reduce = False
    off.training.overlap_param_gather = False
    e_off = run(off)["estimates"]
    assert all(
        c["exposed_seconds"] == c["seconds"] for c in e_off["comm_collectives"] if c["axis"] == "dp"
    )
    assert e_off["step_time_seconds"] > e["step_time_seconds"]


def test_rail_optimised_fabric_and_all_to_all():
    d = {"tp": 1, "cp": 1, "dp": 16, "pp": 1, "etp": 1, "ep": 16, "expert_dp": 1}
    assert members_per_domain(d, 8)["dp_cp"] == 8  # 8 ranks of the DP group per node
    d8 = {"tp": 8, "cp": 1, "dp": 2, "pp": 1, "etp": 1, "ep": 1, "expert_dp": 16}
    assert members_per_domain(d8, 8)["dp_cp"] == 1  # tp 8: one DP member per node
    # a ring over 2 nodes with 8 members each gets 8 NICs: min(NVLink 450, 8 x 50) = 400 GB/s
    e = run(_h100(parallel__tp=1, parallel__pp=1, training__global_batch_size=16))["estimates"]
    [rs] = [c for c in e["comm_collectives"] if c["name"] == "dense grad reduce_scatter"]
    assert rs["crosses_nodes"] and rs["bandwidth_gbps"] == 400
    seed = _h100(parallel__tp=1, parallel__pp=1, training__global_batch_size=16)
    seed.cluster.time_model = TimeModel.seed
    [rs0] = [
        c
        for c in run(seed)["estimates"]["comm_collectives"]
        if c["name"] == "dense grad reduce_scatter"
    ]
    assert rs0["bandwidth_gbps"] == 50  # the seed model: one NIC


def test_fp8_param_gather_halves_the_parameter_all_gather():
    base = _h100(parallel__tp=1, parallel__pp=1, training__fp8_format=Fp8Format.hybrid)
    gather = _h100(
        parallel__tp=1,
        parallel__pp=1,
        training__fp8_format=Fp8Format.hybrid,
        training__fp8_param_gather=True,
    )

    def ag(s):
        [c] = [
            c
            for c in run(s)["estimates"]["comm_collectives"]
            if c["name"] == "dense param all_gather"
        ]
        return c["sent_bytes"]

    assert ag(gather) * 2 == pytest.approx(ag(base), rel=1e-6)


def test_optimizer_state_dtypes_change_memory():
    spec = make_spec(
        training__exp_avg_dtype=StateDtype.bf16,
        training__exp_avg_sq_dtype=StateDtype.bf16,
        training__main_grads_dtype=StateDtype.bf16,
    )
    assert megatron_state_bytes(spec.training) == (2, 2, 8)
    base, low = run(make_spec())["estimates"], run(spec)["estimates"]
    assert low["memory_bytes"]["optimizer"] == pytest.approx(
        base["memory_bytes"]["optimizer"] * 8 / 12, rel=1e-6
    )
    assert low["memory_bytes"]["grads"] == pytest.approx(
        base["memory_bytes"]["grads"] / 2, rel=1e-6
    )


def test_fp32_logits_of_long_sequences_and_large_vocabularies():
    # last stage: 6 bytes per logit (bf16 GEMM output + the cross entropy's fp32 softmax)
    small = make_spec(parallel__pp=1, model__vocab_size=32000)
    large = make_spec(parallel__pp=1, model__vocab_size=256000)
    ps, pl = run_ir(small), run_ir(large)
    diff = stage_activation_bytes(pl.spec, pl)[0] - stage_activation_bytes(ps.spec, ps)[0]
    s, t = 8192, 2
    v_s, v_l = ps.derived.padded_vocab_size, pl.derived.padded_vocab_size
    assert diff == pytest.approx(6 * s * (v_l - v_s) / t)


def _fit_ids(spec):
    plan = run_ir(spec)
    return {d.rule.id for d in check_fit(plan)}, plan.estimates


def test_fit_rule_margin_tight_is_a_warning_sure_oom_an_error():
    base = make_spec(parallel__tp=1, parallel__pp=1, training__recompute=Recompute.none)
    est = run_ir(base).estimates.memory_bytes.total / 2**30
    reserve = base.cluster.memory_reserve_gib

    def with_budget(budget_gib):
        s = make_spec(
            parallel__tp=1,
            parallel__pp=1,
            training__recompute=Recompute.none,
            mem=budget_gib + reserve,
        )
        return _fit_ids(s)

    ids, e = with_budget(est / (1 + OOM_MARGIN) * 1.01)  # 9 % over: may fit -> warning
    assert "TRC403" in ids and "TRC401" not in ids and e.memory_margin < 0
    ids, _ = with_budget(est / (1 + OOM_MARGIN) * 0.99)  # 11 % over: sure OOM -> error
    assert "TRC401" in ids and "TRC403" not in ids
    ids, e = with_budget(est / (1 - TIGHT_MARGIN) * 1.01)  # 6 % under: sure fit
    assert not ids & {"TRC401", "TRC403"} and e.memory_margin > TIGHT_MARGIN
    ids, _ = with_budget(est * 1.02)  # 2 % under: tight
    assert "TRC403" in ids


def test_fit_rule_catches_a_long_sequence_large_vocabulary_oom():
    # 8B-like, 32k tokens, 256k vocab, tp 1 on 80 GiB: 6 x 32768 x 256000 B = 47 GiB of logits
    spec = make_spec(
        parallel__tp=1,
        parallel__pp=1,
        model__seq_length=32768,
        model__max_position_embeddings=32768,
        model__vocab_size=256000,
        training__recompute=Recompute.full,
    )
    ids, e = _fit_ids(spec)
    assert "TRC401" in ids
    assert e.memory_bytes.activations > 6 * 32768 * 256000


def test_every_named_gpu_has_a_profile_with_its_data_sheet_peaks():
    assert set(GPUS) == {g for g in Gpu if g is not Gpu.custom}
    assert GPUS[Gpu.h100_80g].peaks == {"bf16": 989, "fp8": 1979}
    assert GPUS[Gpu.b200].peaks == {"bf16": 2250, "fp8": 4500, "fp4": 9000}
    assert GPUS[Gpu.gb200].peaks == {"bf16": 2500, "fp8": 5000, "fp4": 10000}
    assert "fp8" not in GPUS[Gpu.a100_80g].peaks
    assert GPUS[Gpu.gb200].nvlink_domain_size == 72
    assert GPUS[Gpu.h100_80g].nvlink_domain_size is None


def test_engine_fsdp_runs_sdpa_flash_attention_and_eager_elementwise_kernels():
    # the same layer on H100 under Megatron-Core (Transformer Engine's cuDNN attention, fused
    # element-wise kernels) and under engine=fsdp (PyTorch SDPA's FlashAttention-2, eager ops)
    from trainc.compiler.estimate.kernels import eager_extra_elements, layer_time_of
    from trainc.schemas import Engine

    def layer(engine, compile_=False):
        s = _h100(parallel__tp=1, parallel__pp=1)
        s.engine = engine
        spec = run_ir(s).spec
        if compile_:
            spec.fsdp.compile = True
        return spec, layer_time_of(spec, hardware(spec), False, "bf16", 1, 1, 1, 1, False, 1)

    mg_spec, mg = layer(Engine.megatron)
    fs_spec, fs = layer(Engine.fsdp)
    p = GPUS[Gpu.h100_80g]
    assert hardware(mg_spec).attention_eff == p.attention_efficiency == 0.55
    assert hardware(fs_spec).attention_eff == p.sdpa_attention_efficiency == 0.35
    assert fs.attn_f / mg.attn_f == pytest.approx(0.55 / 0.35)
    assert fs.gemm_f == mg.gemm_f and fs.gemm_b == mg.gemm_b
    # eager: rope (8 per q/k element), GQA repeat (2 per q/k element), the output transpose
    # (2 per q element), silu then * (2 per element of f); 2 bytes each, 8192 tokens, read once
    # forward and twice backward at 80 % of 3.35 TB/s
    extra = eager_extra_elements(4096, 1024, 14336, True, True, True)
    assert extra == 8 * 5120 + 2 * 5120 + 2 * 4096 + 2 * 14336
    hbm = 3350e9 * 0.8
    assert fs.elem_f - mg.elem_f == pytest.approx(2 * extra * 8192 / hbm)
    assert fs.elem_b - mg.elem_b == pytest.approx(2 * 2 * extra * 8192 / hbm)
    # torch.compile fuses them: the element-wise bytes are Megatron's again
    _, fc = layer(Engine.fsdp, compile_=True)
    assert fc.elem_f == mg.elem_f and fc.elem_b == mg.elem_b
    # an A100 runs FlashAttention-2 under both engines: no separate SDPA figure
    assert GPUS[Gpu.a100_80g].sdpa_attention_efficiency is None


def test_step_time_carries_the_published_runs_band_unless_calibrated():
    from trainc.compiler.estimate.band import published_bands

    dense = run(_h100())["estimates"]
    lo, hi = published_bands()["dense"]
    assert dense["step_time_band"] == "published runs (dense)"
    assert dense["step_time_p10_seconds"] == pytest.approx(
        dense["step_time_seconds"] * lo, rel=1e-5
    )
    assert dense["step_time_p90_seconds"] == pytest.approx(
        dense["step_time_seconds"] * hi, rel=1e-5
    )
    moe = run(_h100(model__num_experts=8, model__moe_ffn_hidden_size=14336, parallel__ep=2))[
        "estimates"
    ]
    lo, hi = published_bands()["moe"]
    assert moe["step_time_band"] == "published runs (moe)"
    assert moe["step_time_p90_seconds"] == pytest.approx(moe["step_time_seconds"] * hi, rel=1e-5)
    from trainc.schemas import Engine

    fs = _h100(parallel__tp=1, parallel__pp=1)
    fs.engine = Engine.fsdp
    e = run(fs)["estimates"]
    lo, hi = published_bands()["fsdp"]
    assert e["step_time_band"] == "published runs (fsdp)"
    assert e["step_time_p90_seconds"] == pytest.approx(e["step_time_seconds"] * hi, rel=1e-5)
    cal = _h100()
    cal.cluster.step_time_p10_ratio, cal.cluster.step_time_p90_ratio = 0.95, 1.08
    e = run(cal)["estimates"]
    assert e["step_time_band"] == "calibrated"
    assert e["step_time_p90_seconds"] == pytest.approx(e["step_time_seconds"] * 1.08, rel=1e-5)
    seed = _h100()
    seed.cluster.time_model = TimeModel.seed
    e = run(seed)["estimates"]
    assert e["step_time_p10_seconds"] is None and e["step_time_band"] is None


def test_unfused_attention_is_priced_when_flash_attention_is_off():
    # cluster.flash_attention: false (attention that materialises the scores) changes the time
    # model as it changes activation memory: the score GEMMs and the s x s softmax / dropout
    from trainc.compiler.estimate.kernels import layer_time_of, unfused_attention_seconds

    spec = run_ir(make_spec()).spec
    hw = hardware(spec)
    flash = layer_time_of(spec, hw, False, "bf16", 2, 1, 1, 1, True, 1)
    spec.cluster.flash_attention = False
    unfused = layer_time_of(spec, hw, False, "bf16", 2, 1, 1, 1, True, 1)
    f, b = unfused_attention_seconds(hw, 1, 8192, 8192, 32 / 2, 128, True)  # attention dropout
    assert (unfused.attn_f, unfused.attn_b) == (f, b)
    assert unfused.attn_f > 2 * flash.attn_f
    assert unfused.gemm_f == flash.gemm_f and unfused.elem_f == flash.elem_f
    # without attention dropout its mask and its kernels are gone
    f0, b0 = unfused_attention_seconds(hw, 1, 8192, 8192, 16, 128, False)
    assert f - f0 == pytest.approx(16 * 8192 * 8192 * 5 / hw.hbm)
    assert b - b0 == pytest.approx(16 * 8192 * 8192 * 5 / hw.hbm)


def test_multi_latent_attention_parameters_flops_and_kernels():
    # DeepSeek-V3's attention (arXiv 2412.19437; config.json): 128 heads, query latent 1536,
    # key/value latent 512, 128 + 64 query/key channels per head, 128 value channels
    from trainc.compiler.estimate.flops import flop_terms
    from trainc.compiler.estimate.kernels import layer_time_of
    from trainc.compiler.estimate.params import layer_params

    mla = (1536, 512, 128, 64, 128)
    # Megatron-LM num_floating_point_operations (MLA branch), one layer, per token:
    # 6 [q_lora (h + a (qk + pos) + 1) + kv_lora (h + a (qk + v) + 1) + h pos + a v h]
    t = flop_terms(h=7168, a=128, g=128, d=128, f=18432, V=1, L=1, swiglu=True, mla=mla)
    attn = t.per_token_layers - 6 * 7168 * 18432 * 3
    assert attn == 1122643968
    assert t.core_per_s2 == 3 * 128 * (192 + 128)  # causal: half of 6 a (qk + pos + v)

    def spec(multi_latent: bool):
        s = _h100(
            model__num_layers=4,
            model__hidden_size=7168,
            model__num_attention_heads=128,
            model__num_query_groups=128,
            model__kv_channels=128,
            model__ffn_hidden_size=18432,
            model__seq_length=4096,
            parallel__tp=8,
            parallel__pp=1,
        )
        if multi_latent:
            s.model.multi_latent_attention = True
            (
                s.model.q_lora_rank,
                s.model.kv_lora_rank,
                s.model.qk_head_dim,
                s.model.qk_pos_emb_head_dim,
                s.model.v_head_dim,
            ) = mla
        return run_ir(s).spec

    m_spec, g_spec = spec(True), spec(False)
    # the down projections and latent norms are on every tp rank, the rest split by tp
    lp = layer_params(m_spec, False)
    assert lp.replicated - 2 * 7168 == 7168 * 1536 + 1536 + 7168 * (512 + 64) + 512
    assert lp.tp_sharded - 3 * 7168 * 18432 == 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    # the attention core: Q K^T over 192 channels, P V over 128 (MHA with d = 128: 128 + 128)
    args = (False, "bf16", 8, 1, 1, 1, True, 1)
    lm = layer_time_of(m_spec, hardware(m_spec), *args)
    lg = layer_time_of(g_spec, hardware(g_spec), *args)
    assert lm.attn_f / lg.attn_f == pytest.approx((192 + 128) / (128 + 128))
    # fewer attention weights than the 128-head MHA (4 x 7168 x 16384): cheaper GEMMs
    assert lm.gemm_f < lg.gemm_f
    # the TP collectives of the attention block carry the latents, not h
    e = run(m_spec)["estimates"]
    tp = next(c for c in e["comm_collectives"] if c["name"] == "all_gather+reduce_scatter")
    g = run(g_spec)["estimates"]
    tp_g = next(c for c in g["comm_collectives"] if c["name"] == "all_gather+reduce_scatter")
    ratio = (7168 + 1536 + 512 + 64) / (2 * 7168)  # attention block; the MLP block unchanged
    assert tp["sent_bytes"] / tp_g["sent_bytes"] == pytest.approx((ratio + 1) / 2, rel=1e-6)


def test_cp_ring_calls_the_attention_kernel_on_key_blocks_of_s_over_cp():
    """Under CP the ring (p2p) runs the fused attention kernel once per step against one rank's
    ``s / cp`` keys, so its efficiency is ``k / (k + 512)`` with ``k = s / cp``; all_gather and
    a2a call it on the whole sequence (Transformer Engine's CP attention functions)."""
    from trainc.compiler.estimate.kernels import attention_kv_length, layer_time_of
    from trainc.schemas import CpCommType, Engine

    s = run_ir(_h100(parallel__tp=1, parallel__pp=1)).spec
    seq = s.model.seq_length
    assert attention_kv_length(s, 1, CpCommType.p2p) == seq
    assert attention_kv_length(s, 4, CpCommType.p2p) == seq / 4
    assert attention_kv_length(s, 4, CpCommType.a2a) == seq
    assert attention_kv_length(s, 4, CpCommType.all_gather) == seq
    s.engine = Engine.fsdp  # torch context_parallel: one SDPA call per rotated K/V shard
    assert attention_kv_length(s, 4, CpCommType.a2a) == seq / 4
    s.engine = Engine.megatron
    hw = hardware(s)
    whole = layer_time_of(s, hw, False, "bf16", 1, 4, 1, 1, False, 1, seq)
    ring = layer_time_of(s, hw, False, "bf16", 1, 4, 1, 1, False, 1, seq / 4)
    k = seq / 4
    assert ring.attn_f / whole.attn_f == pytest.approx((seq / (seq + 512)) / (k / (k + 512)))
    assert ring.gemm_f == whole.gemm_f and ring.elem_f == whole.elem_f


def test_fp32_compute_runs_tf32_gemms_and_unfused_attention():
    """training.precision fp32: GEMMs at the TF32 peak (half of BF16 dense), 4-byte activations,
    and attention without the fused kernel (FlashAttention / cuDNN take 16-bit inputs only), so
    the score matrix is priced in time and kept in memory (a helper's fp32 spec estimated as
    fast as bf16)."""
    from trainc.compiler.estimate.kernels import (
        computes_in_fp32,
        fused_attention,
        layer_precision,
        layer_time_of,
    )
    from trainc.schemas import Precision

    bf = run_ir(_h100(parallel__tp=1, parallel__pp=1)).spec
    f32 = run_ir(_h100(parallel__tp=1, parallel__pp=1, training__precision=Precision.fp32)).spec
    assert not computes_in_fp32(bf) and computes_in_fp32(f32)
    assert fused_attention(bf) and not fused_attention(f32)
    assert layer_precision(f32, 1) == "fp32" and layer_precision(bf, 1) == "bf16"
    hw = hardware(f32)
    assert hw.peaks["fp32"] == hw.peaks["bf16"] / 2
    lb = layer_time_of(bf, hardware(bf), False, "bf16", 1, 1, 1, 1, False, 1)
    lf = layer_time_of(f32, hw, False, "fp32", 1, 1, 1, 1, False, 1)
    assert lf.gemm_f > 1.9 * lb.gemm_f
    assert lf.elem_f == pytest.approx(2 * lb.elem_f)
    assert lf.attn_f > 2 * lb.attn_f
    e_bf = run_ir(_h100(parallel__tp=1, parallel__pp=1)).estimates
    e_f32 = run_ir(
        _h100(parallel__tp=1, parallel__pp=1, training__precision=Precision.fp32)
    ).estimates
    assert e_f32.step_time_seconds > 1.9 * e_bf.step_time_seconds
