"""``trainc calibrate``: the fit recovers factors the model itself was run with, Megatron-LM and
trainc worker logs are read, the preset it writes compiles and carries a band, bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainc.compiler.estimate.kernels import MOE_LAYER_OVERHEAD_US, kernel_factor
from trainc.compiler.hardware import GPUS
from trainc.compiler.pipeline import compile_spec
from trainc.planner.calibrate import (
    BAND_FLOOR,
    FACTORS,
    CalibrateError,
    Run,
    _spec_from_dict,
    band_note,
    fit,
    nelder_mead,
    parse_megatron_args,
    parse_megatron_log,
    parse_worker_log,
    percentile,
    prepare,
    residual_band,
    step_estimate,
)
from trainc.schemas import Gpu, TimeModel

DATA = Path(__file__).resolve().parents[1] / "data" / "calibrate"
#: The factors the synthetic runs are made with, per time model (every factor of the model
#: the dense bf16 runs exercise: calibrate.default_factors).
TRUE = {
    "seed": {"compute_efficiency": 0.55, "gemm_half_efficiency_tokens": 512.0,
             "layer_overhead_us": 25.0, "comm_overlap": 0.3},
    "kernels": {"gemm_efficiency": 0.6, "attention_efficiency": 0.4, "layer_overhead_us": 25.0,
                "comm_efficiency": 0.6, "comm_overlap": 0.3},
}
#: The model's start values: the cluster defaults and the h100-80g profile (trainc/conf/gpu).
BEFORE = {
    "seed": {"compute_efficiency": 0.7, "gemm_half_efficiency_tokens": 128.0,
             "layer_overhead_us": 40.0, "comm_overlap": 0.0},
    "kernels": {"gemm_efficiency": 0.0, "attention_efficiency": 0.0, "layer_overhead_us": 40.0,
                "comm_efficiency": 0.8, "comm_overlap": 0.0},
}


def _spec_dict(seq: int, mbs: int, tp: int, nodes: int, gbs: int,
               time_model: str = "kernels") -> dict:
    return {"defaults": [{"cluster": "dgx-h100"}, "_self_"], "name": "syn",
            "model": {"num_layers": 4, "hidden_size": 2048, "num_attention_heads": 16,
                      "vocab_size": 32000, "seq_length": seq, "max_position_embeddings": seq,
                      "activation": "swiglu", "normalization": "rmsnorm",
                      "position_embedding": "rope"},
            "cluster": {"num_nodes": nodes, "time_model": time_model}, "parallel": {"tp": tp},
            "training": {"global_batch_size": gbs, "micro_batch_size": mbs}}


#: (seq, micro batch, tp, nodes, global batch): micro batches of 1K-32K tokens (GEMM
#: efficiency, attention's share grows with the sequence), 1-32 micro batches (overhead per
#: layer and micro batch), TP inside and across nodes and DP across nodes (the overlap and the
#: efficiency of communication).
GRID = [(1024, 1, 1, 1, 64), (4096, 4, 1, 1, 64), (2048, 2, 2, 1, 32), (1024, 1, 8, 2, 16),
        (4096, 1, 2, 2, 256), (2048, 8, 4, 1, 64), (8192, 1, 8, 2, 16)]


def _runs(model: str) -> list[Run]:
    runs = []
    for i, g in enumerate(GRID):
        spec, why = _spec_from_dict(_spec_dict(*g, time_model=model))
        assert spec is not None, why
        runs.append(Run(f"r{i}", spec, 1.0))
    runs, notes = prepare(runs)
    assert not notes and len(runs) == len(GRID)
    for r in runs:  # "measured" = the model's own estimate with the true factors
        assert r.plan is not None
        r.measured_step_seconds = step_estimate(r.plan, TRUE[model])
    return runs


@pytest.fixture(scope="module", params=["seed", "kernels"])
def model(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def synthetic(model) -> list[Run]:
    return _runs(model)


def test_default_factors_are_the_ones_the_time_model_reads():
    assert list(FACTORS[TimeModel.seed]) == ["compute_efficiency", "gemm_half_efficiency_tokens",
                                             "layer_overhead_us", "comm_overlap"]
    assert list(FACTORS[TimeModel.kernels]) == [
        "gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency",
        "moe_layer_overhead_us", "layer_overhead_us", "comm_efficiency", "comm_overlap"]


def test_a_kernel_factor_lands_where_the_model_reads_it():
    spec, why = _spec_from_dict(_spec_dict(2048, 2, 2, 1, 32))
    assert spec is not None, why
    runs, _ = prepare([Run("a", spec, 1.0)])
    plan = runs[0].plan
    # null cluster keys resolve to the h100-80g profile (trainc/conf/gpu/h100-80g.yaml)
    prof = GPUS[Gpu.h100_80g]
    assert kernel_factor(plan.spec, "gemm_efficiency") == prof.gemm_efficiency["bf16"]
    assert kernel_factor(plan.spec, "fp8_gemm_efficiency") == prof.gemm_efficiency["fp8"]
    assert kernel_factor(plan.spec, "attention_efficiency") == prof.attention_efficiency
    assert kernel_factor(plan.spec, "moe_layer_overhead_us") == MOE_LAYER_OVERHEAD_US
    base = step_estimate(plan, {})
    # the GEMM ceiling halved: the GEMMs take twice as long, so the step is slower
    assert step_estimate(plan, {"gemm_efficiency": prof.gemm_efficiency["bf16"] / 2}) > \
        1.3 * base
    assert step_estimate(plan, {"gemm_efficiency": prof.gemm_efficiency["bf16"]}) == base
    # the seed model's factor is not read by the kernel model
    assert step_estimate(plan, {"compute_efficiency": 0.2}) == base


def test_fit_recovers_the_factors_the_runs_were_made_with(synthetic, model):
    res = fit(synthetic)
    want_before = dict(BEFORE[model])
    if model == "kernels":
        prof = GPUS[Gpu.h100_80g]
        want_before["gemm_efficiency"] = prof.gemm_efficiency["bf16"]
        want_before["attention_efficiency"] = prof.attention_efficiency
    assert res.before == want_before
    assert res.rms_log_before > 0.1  # the defaults are off by > 10 % on these runs
    assert res.rms_log_after < 1e-4
    for name, want in TRUE[model].items():
        assert res.after[name] == pytest.approx(want, rel=0.01), name
    assert res.fitted_p10_ratio == pytest.approx(1.0, abs=1e-3)
    assert res.fitted_p90_ratio == pytest.approx(1.0, abs=1e-3)
    # an exact fit: the band written is the floor
    assert (res.p10_ratio, res.p90_ratio) == (0.95, 1.05)


def test_fit_of_a_subset_keeps_the_others(synthetic, model):
    first = next(iter(TRUE[model]))
    res = fit(synthetic, [first])
    assert list(res.after) == [first]
    # one factor cannot absorb them all: the fit improves on the default but not to zero
    assert 1e-3 < res.rms_log_after < res.rms_log_before


def test_a_seed_factor_is_unknown_to_the_kernel_model():
    runs = _runs("kernels")[:2]
    with pytest.raises(CalibrateError, match=r"unknown factor.*time_model kernels"):
        fit(runs, ["compute_efficiency"])


def test_nelder_mead_minimises_a_quadratic():
    x, fx, n = nelder_mead(lambda v: (v[0] - 3) ** 2 + 10 * (v[1] + 1) ** 2, [0.0, 0.0])
    assert x[0] == pytest.approx(3, abs=1e-3) and x[1] == pytest.approx(-1, abs=1e-3)
    assert fx < 1e-6 and n <= 600


def test_percentile_interpolates_as_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.1) == pytest.approx(1.3)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    assert percentile([2.0], 0.9) == 2.0


FLOOR = ("the floor (p10 at most 0.95 x, p90 at least 1.05 x the median ratio: run-to-run "
         "variability of large jobs is about 5-9 %)")


def test_the_band_is_widened_to_the_floor():
    """p10 = min(fitted p10, 0.95 m), p90 = max(fitted p90, 1.05 m) around the runs' median m;
    an end beyond it is kept."""
    assert BAND_FLOOR == (0.95, 1.05)
    assert residual_band([0.99, 1.01]) == (0.95, 1.05)  # two runs fitted almost exactly
    assert residual_band([0.9, 0.9, 1.2, 1.2]) == (0.9, 1.2)
    assert residual_band([0.9, 1.0, 1.0, 1.01]) == (0.93, 1.05)
    # the floor is around the runs' median: every run 20 % slower than the model (factors held
    # fixed) keeps a band around 1.2, not one reaching down to 0.95
    assert residual_band([1.19, 1.2, 1.21]) == (0.95 * 1.2, 1.05 * 1.2)
    lo, hi = residual_band([0.98, 1.0, 1.0, 1.3])
    assert lo == 0.95 and hi == pytest.approx(1.21)
    assert residual_band([1.1, 1.1, 1.2, 1.2]) == pytest.approx((0.95 * 1.15, 1.05 * 1.15))
    assert residual_band([0.7, 0.7, 0.8, 0.8]) == pytest.approx((0.7, 0.8))  # wider than +-5 %


def test_the_band_note_says_how_many_runs_and_what_was_widened():
    assert band_note(3, (0.99, 1.01), (0.95, 1.05)) == (
        "the step-time band rests on 3 run(s) (measured / estimated p10 0.990, p90 1.010); "
        f"widened to {FLOOR} where it did not reach it: p10 0.990 -> 0.950, p90 1.010 -> 1.050")
    assert band_note(9, (0.9, 1.01), (0.9, 1.05)) == (
        "the step-time band rests on 9 run(s) (measured / estimated p10 0.900, p90 1.010); "
        f"widened to {FLOOR} where it did not reach it: p90 1.010 -> 1.050")
    assert band_note(2, (0.9, 1.2), (0.9, 1.2)) == (
        "the step-time band rests on 2 run(s) (measured / estimated p10 0.900, p90 1.200); "
        f"kept: it reaches beyond {FLOOR}")
    # 10 runs and more: a note only where the floor widened the band
    assert band_note(10, (0.99, 1.01), (0.95, 1.05)) == (
        f"the fitted step-time band (p10 0.990, p90 1.010) widened to {FLOOR} where it did not "
        "reach it: p10 0.990 -> 0.950, p90 1.010 -> 1.050")
    assert band_note(10, (0.9, 1.2), (0.9, 1.2)) is None


def test_a_fit_to_three_runs_writes_the_floor_and_says_so():
    runs = _runs("kernels")[:3]
    res = fit(runs, start=TRUE["kernels"])
    assert res.fitted_p10_ratio == pytest.approx(1.0, abs=1e-3)
    assert res.fitted_p90_ratio == pytest.approx(1.0, abs=1e-3)
    assert (res.p10_ratio, res.p90_ratio) == (0.95, 1.05)
    f10, f90 = f"{res.fitted_p10_ratio:.3f}", f"{res.fitted_p90_ratio:.3f}"
    assert res.notes[-1] == (
        f"the step-time band rests on 3 run(s) (measured / estimated p10 {f10}, p90 {f90}); "
        f"widened to {FLOOR} where it did not reach it: p10 {f10} -> 0.950, p90 {f90} -> 1.050")


def test_calibrate_docstring_examples():
    import doctest

    import trainc.planner.calibrate as mod

    result = doctest.testmod(mod)
    assert result.attempted >= 3 and result.failed == 0


def test_megatron_arguments_block_and_iteration_times():
    text = (DATA / "megatron_train.log").read_text()
    args = parse_megatron_args(text)
    assert args["tensor_model_parallel_size"] == "2"
    assert args["pipeline_model_parallel_size"] == "2"
    assert args["virtual_pipeline_model_parallel_size"] == "None"
    assert args["world_size"] == "8"
    run = parse_megatron_log(DATA / "megatron_train.log", "dgx-h100", None)
    # iterations 402.1 398.7 401.5 399.9 405.0 ms after the first (2512.3, warm-up): median
    assert run.measured_step_seconds == pytest.approx(0.4015)
    s = run.spec
    assert (s.parallel.tp, s.parallel.pp, s.parallel.vpp, s.parallel.cp, s.parallel.ep) == \
        (2, 2, 1, 1, 1)
    assert s.parallel.sequence_parallel is True and s.parallel.zero_stage == 1
    assert (s.model.num_layers, s.model.hidden_size, s.model.num_query_groups,
            s.model.ffn_hidden_size, s.model.vocab_size) == (8, 2048, 4, 5632, 32000)
    assert (s.training.micro_batch_size, s.training.global_batch_size) == (1, 32)
    assert s.training.recompute.name == "selective" and s.training.precision.name == "bf16"
    assert (s.cluster.num_nodes, s.cluster.gpus_per_node) == (1, 8)


def test_megatron_log_with_a_launcher_prefix(tmp_path):
    log = tmp_path / "ranked.log"
    log.write_text("".join(f"[rank0]: {line}\n"
                           for line in (DATA / "megatron_train.log").read_text().splitlines()))
    run = parse_megatron_log(log, "dgx-h100", None)
    assert run.spec.parallel.tp == 2 and run.measured_step_seconds == pytest.approx(0.4015)


def test_worker_log_reads_its_plan(tmp_path):
    spec = tmp_path / "w.yaml"
    spec.write_text(yaml.safe_dump(_spec_dict(1024, 1, 2, 1, 16)))
    res = compile_spec(spec, emit_files=False)
    assert res.ok and res.plan is not None
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(res.plan))
    log = tmp_path / "worker.log"
    log.write_text(f"trainc-worker: plan={plan} engine=megatron device=cpu\n"
                   "step=1 loss=10.5 grad_norm=3.1 step_time_s=9.0000 tokens_per_s=10.0 lr=0 "
                   "skipped=0\n"
                   "step=2 loss=10.1 grad_norm=3.0 step_time_s=0.5000 tokens_per_s=20.0 lr=0 "
                   "skipped=0\n"
                   "step=3 loss=9.9 grad_norm=2.9 step_time_s=0.7000 tokens_per_s=20.0 lr=0 "
                   "skipped=0\n")
    run = parse_worker_log(log)
    assert run.measured_step_seconds == pytest.approx(0.6)  # median of steps 2 and 3
    assert run.spec.parallel.tp == 2 and run.spec.cluster.num_nodes == 1


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainc", "calibrate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_cli_writes_a_preset_that_compile_accepts(tmp_path, synthetic, model):
    rows = ["spec,step_time_s"]
    for i, (g, r) in enumerate(zip(GRID, synthetic, strict=True)):
        (tmp_path / f"run{i}.yaml").write_text(yaml.safe_dump(_spec_dict(*g, time_model=model)))
        rows.append(f"run{i}.yaml,{r.measured_step_seconds!r}")
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "cluster" / "calibrated.yaml"
    proc = _cli("runs.csv", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "after/meas" in proc.stdout and "RMS log error" in proc.stdout
    preset = yaml.safe_load(out.read_text())
    for name, want in TRUE[model].items():
        assert preset[name] == pytest.approx(want, rel=0.01), name
    assert preset.get("time_model", "kernels") == model
    assert preset["gpu"] == "h100-80g" and "num_nodes" not in preset
    # the runs are fitted exactly: the band written is the floor, and a note says it rests on
    # 7 runs
    assert (preset["step_time_p10_ratio"], preset["step_time_p90_ratio"]) == (0.95, 1.05)
    assert "note: the step-time band rests on 7 run(s)" in proc.stderr
    assert ("preset band (p10 at most 0.95 x, p90 at least 1.05 x the median): p10 0.950, p90 "
            "1.050") in " ".join(proc.stdout.split())  # Rich wraps at the terminal's width
    spec = tmp_path / "use.yaml"
    use = _spec_dict(2048, 2, 2, 1, 32)
    del use["cluster"]["time_model"]  # the preset's
    spec.write_text(yaml.safe_dump({**use, "defaults": [{"cluster": "calibrated"}, "_self_"]}))
    res = compile_spec(spec, emit_files=False)
    assert res.ok, [d.message for d in res.diagnostics if d.is_error]
    est = res.plan["estimates"]
    assert est["step_time_p10_seconds"] <= est["step_time_seconds"] <= \
        est["step_time_p90_seconds"] * (1 + 1e-6)
    assert est["step_time_p10_seconds"] == pytest.approx(0.95 * est["step_time_seconds"])
    assert est["step_time_p90_seconds"] == pytest.approx(1.05 * est["step_time_seconds"])
    # again without --force: refused, the preset untouched
    before = out.read_text()
    proc = _cli("runs.csv", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert out.read_text() == before


@pytest.mark.parametrize(("args", "message"), [
    (["missing.csv"], "cannot read"),
    (["megatron_train.log"], "--cluster"),
    (["megatron_train.log", "--cluster", "dgx-h100", "--factors", "warp_speed"],
     "unknown factor"),
    (["empty.csv"], "no usable run"),
    (["notes.txt"], "not a CSV"),
])
def test_cli_bad_input_exits_2(tmp_path, args, message):
    (tmp_path / "megatron_train.log").write_text((DATA / "megatron_train.log").read_text())
    (tmp_path / "empty.csv").write_text("spec,step_time_s\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
