"""``trainc calibrate``: the fit recovers factors the model itself was run with, Megatron-LM and
trainc worker logs are read, the preset it writes compiles and carries a band, bad input exits 2."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainc.calibrate import (
    AGREEMENT,
    AT_BOUND_TOL,
    BAND_FLOOR,
    FACTORS,
    UNCONSTRAINED_RMS,
    CalibrateError,
    Run,
    _spec_from_dict,
    band_note,
    check_agreement,
    fit,
    measured_value,
    near_bound,
    nelder_mead,
    parse_megatron_args,
    parse_megatron_log,
    parse_worker_log,
    percentile,
    prepare,
    read_runs,
    residual_band,
    runs_from_csv,
    step_estimate,
)
from trainc.compiler.estimate.kernels import MOE_LAYER_OVERHEAD_US, kernel_factor
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.support.hardware import GPUS
from trainc.schemas import Gpu, TimeModel

DATA = Path(__file__).resolve().parents[2] / "data" / "calibrate"
#: The factors the synthetic runs are made with, per time model (every factor of the model
#: the dense bf16 runs exercise: calibrate.default_factors).
TRUE = {
    "seed": {
        "compute_efficiency": 0.55,
        "gemm_half_efficiency_tokens": 512.0,
        "layer_overhead_us": 25.0,
        "comm_overlap": 0.3,
    },
    "kernels": {
        "gemm_efficiency": 0.6,
        "attention_efficiency": 0.4,
        "layer_overhead_us": 25.0,
        "comm_efficiency": 0.6,
        "comm_overlap": 0.3,
    },
}
#: The model's start values: the cluster defaults and the h100-80g profile (trainc/conf/gpu).
BEFORE = {
    "seed": {
        "compute_efficiency": 0.7,
        "gemm_half_efficiency_tokens": 128.0,
        "layer_overhead_us": 40.0,
        "comm_overlap": 0.0,
    },
    "kernels": {
        "gemm_efficiency": 0.0,
        "attention_efficiency": 0.0,
        "layer_overhead_us": 40.0,
        "comm_efficiency": 0.8,
        "comm_overlap": 0.0,
    },
}


def _spec_dict(
    seq: int, mbs: int, tp: int, nodes: int, gbs: int, time_model: str = "kernels"
) -> dict:
    return {
        "defaults": [{"cluster": "dgx-h100"}, "_self_"],
        "name": "syn",
        "model": {
            "num_layers": 4,
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "vocab_size": 32000,
            "seq_length": seq,
            "max_position_embeddings": seq,
            "activation": "swiglu",
            "normalization": "rmsnorm",
            "position_embedding": "rope",
        },
        "cluster": {"num_nodes": nodes, "time_model": time_model},
        "parallel": {"tp": tp},
        "training": {"global_batch_size": gbs, "micro_batch_size": mbs},
    }


#: (seq, micro batch, tp, nodes, global batch): micro batches of 1K-32K tokens (GEMM
#: efficiency, attention's share grows with the sequence), 1-32 micro batches (overhead per
#: layer and micro batch), TP inside and across nodes and DP across nodes (the overlap and the
#: efficiency of communication).
GRID = [
    (1024, 1, 1, 1, 64),
    (4096, 4, 1, 1, 64),
    (2048, 2, 2, 1, 32),
    (1024, 1, 8, 2, 16),
    (4096, 1, 2, 2, 256),
    (2048, 8, 4, 1, 64),
    (8192, 1, 8, 2, 16),
]


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
    assert list(FACTORS[TimeModel.seed]) == [
        "compute_efficiency",
        "gemm_half_efficiency_tokens",
        "layer_overhead_us",
        "comm_overlap",
    ]
    assert list(FACTORS[TimeModel.kernels]) == [
        "gemm_efficiency",
        "fp8_gemm_efficiency",
        "attention_efficiency",
        "moe_layer_overhead_us",
        "layer_overhead_us",
        "comm_efficiency",
        "comm_overlap",
    ]


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
    assert step_estimate(plan, {"gemm_efficiency": prof.gemm_efficiency["bf16"] / 2}) > 1.3 * base
    assert step_estimate(plan, {"gemm_efficiency": prof.gemm_efficiency["bf16"]}) == base
    # the seed model's factor is not read by the kernel model
    assert step_estimate(plan, {"compute_efficiency": 0.2}) == base


def test_fit_recovers_the_factors_the_runs_were_made_with(synthetic, model):
    res = fit(synthetic, list(TRUE[model]))
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


def test_default_fit_frees_only_the_factors_the_runs_constrain():
    """The kernel model's synthetic runs: comm_efficiency 0.6 with comm_overlap 0.3 nearly
    cancel, and 4-layer models barely feel layer_overhead_us: freeing any of those lowers the
    RMS log error by less than 0.005, so the default fit keeps them at the start values and says
    so; the GEMM and attention factors it recovers."""
    runs = _runs("kernels")
    res = fit(runs)
    assert res.after["gemm_efficiency"] == pytest.approx(0.6, rel=0.01)
    # within 2 %: the kept factors' small residual (comm_efficiency, comm_overlap at their
    # start values) lands on the attention factor, the smaller of the two compute terms
    assert res.after["attention_efficiency"] == pytest.approx(0.4, rel=0.02)
    kept = ("layer_overhead_us", "comm_efficiency", "comm_overlap")
    assert all(res.after[n] == res.before[n] for n in kept)
    assert res.rms_log_after < UNCONSTRAINED_RMS
    assert any(
        n.startswith(
            "the runs do not constrain layer_overhead_us, comm_efficiency, "
            "comm_overlap: kept at the start value(s)"
        )
        for n in res.notes
    )


def test_a_uniform_slowdown_moves_the_gemm_factor_alone():
    """A user's runs all 1.2x slower than the defaults estimate. The fit used to spread it over
    every factor along the directions the runs do not see and push comm_efficiency and
    comm_overlap to 1.0 (communication free), and the preset then planned TP across nodes:
    now every freed factor makes the runs slower, none ends at a bound, and the overlap the
    runs say nothing about stays at its start."""
    runs = _runs("kernels")
    for r in runs:
        assert r.plan is not None
        r.measured_step_seconds = 1.2 * step_estimate(r.plan, {})
    res = fit(runs)
    moved = [n for n in res.names if res.after[n] != res.before[n]]
    assert moved[0] == "gemm_efficiency", res.after
    for n in moved:
        lo, hi = FACTORS[TimeModel.kernels][n]
        assert near_bound(res.after[n], lo, hi) is None, (n, res.after[n])
        slower = res.after[n] > res.before[n] if n.endswith("_us") else res.after[n] < res.before[n]
        assert slower, (n, res.after[n])
    assert res.after["comm_overlap"] == 0.0


def test_explicit_factors_that_the_runs_hardly_constrain_are_named(synthetic, model):
    res = fit(synthetic, list(TRUE[model]))
    hardly = [n for n in res.notes if n.startswith("the runs hardly constrain")]
    if model == "kernels":
        assert [h.split()[4].rstrip(":") for h in hardly] == [
            "layer_overhead_us",
            "comm_efficiency",
            "comm_overlap",
        ]
    else:
        assert hardly == []


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


FLOOR = (
    "the floor (p10 at most 0.95 x, p90 at least 1.05 x the median ratio: run-to-run "
    "variability of large jobs is about 5-9 %)"
)


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
        f"widened to {FLOOR} where it did not reach it: p10 0.990 -> 0.950, p90 1.010 -> 1.050"
    )
    assert band_note(9, (0.9, 1.01), (0.9, 1.05)) == (
        "the step-time band rests on 9 run(s) (measured / estimated p10 0.900, p90 1.010); "
        f"widened to {FLOOR} where it did not reach it: p90 1.010 -> 1.050"
    )
    assert band_note(2, (0.9, 1.2), (0.9, 1.2)) == (
        "the step-time band rests on 2 run(s) (measured / estimated p10 0.900, p90 1.200); "
        f"kept: it reaches beyond {FLOOR}"
    )
    # 10 runs and more: a note only where the floor widened the band
    assert band_note(10, (0.99, 1.01), (0.95, 1.05)) == (
        f"the fitted step-time band (p10 0.990, p90 1.010) widened to {FLOOR} where it did not "
        "reach it: p10 0.990 -> 0.950, p90 1.010 -> 1.050"
    )
    assert band_note(10, (0.9, 1.2), (0.9, 1.2)) is None


def test_a_fit_to_three_runs_writes_the_floor_and_says_so():
    three = ["gemm_efficiency", "attention_efficiency", "layer_overhead_us"]
    runs = _runs("kernels")[:3]
    for r in runs:  # made with three factors changed, the others at the cluster's values
        assert r.plan is not None
        r.measured_step_seconds = step_estimate(r.plan, {n: TRUE["kernels"][n] for n in three})
    res = fit(runs, three, start=TRUE["kernels"])
    assert res.fitted_p10_ratio == pytest.approx(1.0, abs=1e-3)
    assert res.fitted_p90_ratio == pytest.approx(1.0, abs=1e-3)
    assert (res.p10_ratio, res.p90_ratio) == (0.95, 1.05)
    f10, f90 = f"{res.fitted_p10_ratio:.3f}", f"{res.fitted_p90_ratio:.3f}"
    assert res.notes[-1] == (
        f"the step-time band rests on 3 run(s) (measured / estimated p10 {f10}, p90 {f90}); "
        f"widened to {FLOOR} where it did not reach it: p10 {f10} -> 0.950, p90 {f90} -> 1.050"
    )


def test_calibrate_docstring_examples():
    import doctest

    import trainc.calibrate as mod

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
    assert (s.parallel.tp, s.parallel.pp, s.parallel.vpp, s.parallel.cp, s.parallel.ep) == (
        2,
        2,
        1,
        1,
        1,
    )
    assert s.parallel.sequence_parallel is True and s.parallel.zero_stage == 1
    assert (
        s.model.num_layers,
        s.model.hidden_size,
        s.model.num_query_groups,
        s.model.ffn_hidden_size,
        s.model.vocab_size,
    ) == (8, 2048, 4, 5632, 32000)
    assert (s.training.micro_batch_size, s.training.global_batch_size) == (1, 32)
    assert s.training.recompute.name == "selective" and s.training.precision.name == "bf16"
    assert (s.cluster.num_nodes, s.cluster.gpus_per_node) == (1, 8)


def test_megatron_log_with_a_launcher_prefix(tmp_path):
    log = tmp_path / "ranked.log"
    log.write_text(
        "".join(
            f"[rank0]: {line}\n" for line in (DATA / "megatron_train.log").read_text().splitlines()
        )
    )
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
    log.write_text(
        f"trainc-worker: plan={plan} engine=megatron device=cuda shrink=False "
        "reference=False train_iters=3\n"
        "step=1 loss=10.5 grad_norm=3.1 step_time_s=9.0000 tokens_per_s=10.0 lr=0 "
        "skipped=0\n"
        "step=2 loss=10.1 grad_norm=3.0 step_time_s=0.5000 tokens_per_s=20.0 lr=0 "
        "skipped=0\n"
        "step=3 loss=9.9 grad_norm=2.9 step_time_s=0.7000 tokens_per_s=20.0 lr=0 "
        "skipped=0\n"
    )
    run = parse_worker_log(log)
    assert run.measured_step_seconds == pytest.approx(0.6)  # median of steps 2 and 3
    assert run.spec.parallel.tp == 2 and run.spec.cluster.num_nodes == 1


@pytest.mark.parametrize(
    "head", ["device=cpu shrink=False", "device=cuda shrink=True", "device=cpu shrink=True"]
)
def test_worker_log_of_a_cpu_or_shrunk_run_is_refused(tmp_path, head):
    """A CPU or shrunk run of the worker times a toy model (trial 13: calibrate scored a 0.09 s
    CPU step against the full-size H100 estimate and blamed the measurement)."""
    log = tmp_path / "worker.log"
    log.write_text(
        f"trainc-worker: plan={tmp_path / 'plan.json'} engine=megatron {head} "
        "reference=False train_iters=3\nstep=1 loss=1 step_time_s=0.1\n"
    )
    with pytest.raises(CalibrateError, match="cannot calibrate it"):
        parse_worker_log(log)


def test_cluster_flags_without_a_megatron_log_are_refused(tmp_path):
    """--cluster / --gpus-per-node name a Megatron-LM log's cluster; with only CSV input they
    were silently ignored (trial 13, even --cluster nosuch)."""
    (tmp_path / "run0.yaml").write_text(yaml.safe_dump(_spec_dict(*GRID[0])))
    (tmp_path / "runs.csv").write_text("spec,step_time_s\nrun0.yaml,1.0\n")
    for flag in (dict(cluster="nosuch"), dict(gpus_per_node=4)):
        with pytest.raises(CalibrateError, match="no input is one"):
            read_runs([str(tmp_path / "runs.csv")], **flag)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainc", "calibrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_writes_a_preset_that_compile_accepts(tmp_path, synthetic, model):
    rows = ["spec,step_time_s"]
    for i, (g, r) in enumerate(zip(GRID, synthetic, strict=True)):
        (tmp_path / f"run{i}.yaml").write_text(yaml.safe_dump(_spec_dict(*g, time_model=model)))
        rows.append(f"run{i}.yaml,{r.measured_step_seconds!r}")
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "cluster" / "calibrated.yaml"
    proc = _cli("runs.csv", "-o", str(out), "--factors", ",".join(TRUE[model]), cwd=tmp_path)
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
    assert (
        "preset band (p10 at most 0.95 x, p90 at least 1.05 x the median): p10 0.950, p90 1.050"
    ) in " ".join(proc.stdout.split())  # Rich wraps at the terminal's width
    spec = tmp_path / "use.yaml"
    use = _spec_dict(2048, 2, 2, 1, 32)
    del use["cluster"]["time_model"]  # the preset's
    spec.write_text(yaml.safe_dump({**use, "defaults": [{"cluster": "calibrated"}, "_self_"]}))
    res = compile_spec(spec, emit_files=False)
    assert res.ok, [d.message for d in res.diagnostics if d.is_error]
    est = res.plan["estimates"]
    assert (
        est["step_time_p10_seconds"]
        <= est["step_time_seconds"]
        <= est["step_time_p90_seconds"] * (1 + 1e-6)
    )
    assert est["step_time_p10_seconds"] == pytest.approx(0.95 * est["step_time_seconds"])
    assert est["step_time_p90_seconds"] == pytest.approx(1.05 * est["step_time_seconds"])
    # again without --force: refused, the preset untouched
    before = out.read_text()
    proc = _cli("runs.csv", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert out.read_text() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.csv"], "cannot read"),
        (["megatron_train.log"], "--cluster"),
        (
            ["megatron_train.log", "--cluster", "dgx-h100", "--factors", "warp_speed"],
            "unknown factor",
        ),
        (["empty.csv"], "no run in empty.csv: a CSV needs a header and at least one data row"),
        (["void.csv"], "no run in void.csv"),
        (["notes.txt"], "not a CSV"),
        (
            ["other.csv"],
            "other.csv: columns not recognised (foo, bar): a CSV of your runs needs a spec column",
        ),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, args, message):
    (tmp_path / "megatron_train.log").write_text((DATA / "megatron_train.log").read_text())
    (tmp_path / "empty.csv").write_text("spec,step_time_s\n")
    (tmp_path / "void.csv").write_text("")
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "other.csv").write_text("foo,bar\n1,2\n")
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


# --- bad rows, under-determined fits, runs the model cannot describe, factors at a bound ---


def test_measured_value_says_what_is_wrong():
    assert measured_value("0.25") == (0.25, "")
    assert measured_value("1e9") == (1e9, "")
    assert measured_value("") == (None, "")
    assert measured_value(None) == (None, "")
    assert measured_value("-3") == (None, "is negative")
    assert measured_value("0") == (None, "is zero")
    assert measured_value("abc") == (None, "is not a number")
    assert measured_value("nan") == (None, "is not a finite number")
    assert measured_value("inf") == (None, "is not a finite number")


def _spec_csv(tmp_path: Path, cells: list[tuple[str, str]], *, extra: str = "") -> Path:
    """runs.csv with a spec column and step_time_s (``extra``: one more column, the third cell
    of each row)."""
    for i, g in enumerate(GRID[:4]):
        (tmp_path / f"run{i}.yaml").write_text(yaml.safe_dump(_spec_dict(*g)))
    head = "spec,step_time_s" + (f",{extra}" if extra else "")
    rows = [",".join(c) for c in cells]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([head, *rows]) + "\n")
    return path


def test_bad_rows_are_errors_naming_line_and_value(tmp_path):
    path = _spec_csv(
        tmp_path,
        [
            ("run0.yaml", "-3"),
            ("run1.yaml", "abc"),
            ("run2.yaml", ""),
            ("missing.yaml", "1.0"),
            ("run3.yaml", "0"),
            ("run3.yaml", "0.5"),
        ],
    )
    with pytest.raises(CalibrateError) as e:
        runs_from_csv(path)
    assert str(e.value) == (
        f"{path}: 5 bad row(s): line 2: step_time_s '-3' is negative; line 3: step_time_s "
        "'abc' is not a number; line 4: no measurement (step_time_s is empty); line 5: spec "
        f"file missing.yaml not found ({tmp_path / 'missing.yaml'}); line 6: step_time_s '0' "
        "is zero (a measurement must be a positive number and a spec file must load; fix or "
        "delete these rows)"
    )


def test_a_spec_that_does_not_load_is_an_error(tmp_path):
    path = _spec_csv(tmp_path, [("run0.yaml", "0.5"), ("broken.yaml", "0.5")])
    (tmp_path / "broken.yaml").write_text("model: [unclosed\n")
    with pytest.raises(
        CalibrateError,
        match=r"^.*runs\.csv: 1 bad row\(s\): line 3: spec file "
        r"broken\.yaml does not load \(.+\) \(a measurement must",
    ):
        runs_from_csv(path)


def test_rows_out_of_scope_stay_notes(tmp_path):
    # --where leaves a bad row out: no error
    path = _spec_csv(
        tmp_path,
        [("run0.yaml", "0.5", "a"), ("run1.yaml", "abc", "b"), ("missing.yaml", "", "b")],
        extra="tag",
    )
    runs, notes = runs_from_csv(path, where=["tag=a"])
    assert [r.name for r in runs] == ["runs.csv:2 run0.yaml"] and notes == []
    # a published-runs row the converter cannot build (no global batch) is a note
    pub = tmp_path / "pub.csv"
    pub.write_text(
        "model,gpus,gpu_type,global_batch,measured_tflops_per_gpu,notes\n"
        "LLAMA3_8B,8,DGX-H100,,400,\n"
    )
    assert runs_from_csv(pub) == ([], ["pub.csv:2: skipped (global_batch not published)"])
    # ... but a published row's bad measurement is an error
    pub.write_text(
        "model,gpus,gpu_type,global_batch,measured_tflops_per_gpu,notes\n"
        "LLAMA3_8B,8,DGX-H100,128,n/a,\n"
        "LLAMA3_8B,8,DGX-H100,128,400,tokens_per_s_per_gpu=-5\n"
    )
    with pytest.raises(CalibrateError) as e:
        runs_from_csv(pub)
    assert str(e.value) == (
        f"{pub}: 2 bad row(s): line 2: measured_tflops_per_gpu 'n/a' is not a number; line 3: "
        "tokens_per_s_per_gpu (notes) '-5' is negative (a measurement must be a positive "
        "number and a spec file must load; fix or delete these rows)"
    )


def test_fewer_runs_than_factors_is_refused():
    runs = _runs("kernels")[:3]
    with pytest.raises(CalibrateError) as e:
        fit(runs)
    assert str(e.value) == (
        "3 run(s) for 5 free factor(s): the fit is under-determined (many factor values match "
        "the runs equally well); pass --factors with at most 3 of: gemm_efficiency,"
        "attention_efficiency,layer_overhead_us,comm_efficiency,comm_overlap, or add runs of "
        "other layouts"
    )
    with pytest.raises(CalibrateError, match=r"^1 run\(s\) for 2 free factor\(s\)"):
        fit(runs[:1], ["gemm_efficiency", "comm_overlap"])
    assert fit(runs, ["gemm_efficiency", "attention_efficiency", "layer_overhead_us"]).names
    # repeats of one spec count once (trial 13: three measurements of one layout were advised
    # as enough for three factors, and the third wandered)
    same = [
        runs[0],
        dataclasses.replace(runs[0], name="again"),
        dataclasses.replace(runs[0], name="once more"),
    ]
    with pytest.raises(CalibrateError, match=r"^3 run\(s\) of 1 distinct spec\(s\) for 2 "):
        fit(same, ["gemm_efficiency", "attention_efficiency"])


def test_runs_the_model_cannot_describe_are_refused():
    assert AGREEMENT == (0.5, 2.0)
    runs = _runs("kernels")[:3]
    res = fit(runs, ["gemm_efficiency"])
    check_agreement(runs, res)  # within 0.5..2: no error
    runs[1].measured_step_seconds *= 1e6  # a unit error: microseconds as seconds
    res = fit(runs, ["gemm_efficiency"])
    with pytest.raises(CalibrateError) as e:
        check_agreement(runs, res)
    r0, r1, r2 = (
        r.measured_step_seconds / e for r, e in zip(runs, res.estimates_after, strict=True)
    )
    # the outlier drags the factor to where the others disagree too; the worst first
    assert r1 > 2 and r0 < r2 < 0.5
    assert str(e.value) == (
        "after the fit 3 of 3 run(s) disagree with the time model by more than 2x (measured / "
        f"estimated outside 0.5..2): r1 {r1:.4g}, r0 {r0:.4g}, r2 {r2:.4g}; check their "
        "measurements (seconds per step) and specs, or leave them out: no preset is written"
    )


def test_near_bound_is_relative_to_the_range():
    assert AT_BOUND_TOL == 1e-3
    assert near_bound(0.0, 0.0, 1.0) == 0.0
    assert near_bound(1.0, 0.0, 1.0) == 1.0
    assert near_bound(0.0009, 0.0, 1.0) == 0.0
    assert near_bound(0.0011, 0.0, 1.0) is None
    assert near_bound(4996.0, 0.0, 5000.0) == 5000.0  # 5000 x 1e-3 = 5 us
    assert near_bound(4994.0, 0.0, 5000.0) is None
    assert near_bound(0.05, 0.05, 1.0) == 0.05
    assert near_bound(0.0505, 0.05, 1.0) == 0.05  # 0.95 x 1e-3
    assert near_bound(0.052, 0.05, 1.0) is None


@pytest.fixture(scope="module")
def kernel_runs() -> list[Run]:
    return _runs("kernels")


def _fit_comm_overlap(runs: list[Run], truth: float):
    for r in runs:  # made with comm_overlap = truth, every other factor the cluster's
        assert r.plan is not None
        r.measured_step_seconds = step_estimate(r.plan, {"comm_overlap": truth})
    return fit(runs, ["comm_overlap"], start={"comm_overlap": 0.3})


def test_a_factor_near_a_bound_is_not_at_it(kernel_runs):
    """An optimum within 1e-3 of the range from a bound (0.0005 of 0..1) is kept, no note."""
    res = _fit_comm_overlap(kernel_runs, 0.0005)
    assert res.after["comm_overlap"] == pytest.approx(0.0005, abs=5e-5)
    assert res.after["comm_overlap"] > 0
    assert not [n for n in res.notes if "bound" in n]


@pytest.mark.parametrize(("truth", "side"), [(0.0, "lower"), (1.0, "upper")])
def test_a_factor_at_its_bound_is_set_there_and_noted(kernel_runs, truth, side):
    res = _fit_comm_overlap(kernel_runs, truth)
    assert res.after["comm_overlap"] == truth
    assert [n for n in res.notes if "bound" in n] == [
        f"comm_overlap ended at its {side} bound {truth:g} (range 0..1): the runs push it there "
        "or do not constrain it"
    ]


def _bad_csv_cases(tmp_path: Path) -> None:
    for i, g in enumerate(GRID[:3]):
        (tmp_path / f"run{i}.yaml").write_text(yaml.safe_dump(_spec_dict(*g)))


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("-3", "step_time_s '-3' is negative"),
        ("abc", "step_time_s 'abc' is not a number"),
        ("", "no measurement (step_time_s is empty)"),
        ("inf", "step_time_s 'inf' is not a finite number"),
    ],
)
def test_cli_bad_row_exits_2_and_writes_nothing(tmp_path, value, what):
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text(f"spec,step_time_s\nrun0.yaml,0.5\nrun1.yaml,{value}\n")
    out = tmp_path / "preset.yaml"
    proc = _cli("runs.csv", "--factors", "gemm_efficiency", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"trainc calibrate: error: runs.csv: 1 bad row(s): line 3: {what} (a measurement must "
        "be a positive number and a spec file must load; fix or delete these rows)\n"
    )
    assert proc.stdout == "" and not out.exists()


def test_cli_missing_spec_file_exits_2(tmp_path):
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text("spec,step_time_s\nrun0.yaml,0.5\nnope.yaml,0.5\n")
    proc = _cli("runs.csv", "-o", "preset.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "trainc calibrate: error: runs.csv: 1 bad row(s): line 3: spec file nope.yaml not found "
        "(a measurement must be a positive number and a spec file must load; fix or delete "
        "these rows)\n"
    )
    assert not (tmp_path / "preset.yaml").exists()


def test_cli_under_determined_fit_exits_2(tmp_path):
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text(
        "spec,step_time_s\nrun0.yaml,0.02\nrun1.yaml,0.05\nrun2.yaml,0.03\n"
    )
    proc = _cli("runs.csv", "-o", "preset.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        "trainc calibrate: error: 3 run(s) for 5 free factor(s): the fit is under-determined "
        "(many factor values match the runs equally well); pass --factors with at most 3 of: "
        "gemm_efficiency,attention_efficiency,layer_overhead_us,comm_efficiency,comm_overlap, "
        "or add runs of other layouts\n"
    )
    assert not (tmp_path / "preset.yaml").exists()


def test_cli_runs_the_model_cannot_describe_exit_2(tmp_path):
    """The new user's CSV: one run measured at 1e9 s per step: no preset with a 1e7 band."""
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text("spec,step_time_s\nrun0.yaml,1e9\nrun1.yaml,0.05\n")
    proc = _cli("runs.csv", "--factors", "gemm_efficiency", "-o", "preset.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert re.fullmatch(
        r"trainc calibrate: error: after the fit 2 of 2 run\(s\) disagree with the time "
        r"model by more than 2x \(measured / estimated outside 0\.5\.\.2\): runs\.csv:2 "
        r"run0\.yaml [0-9.]+e\+09, runs\.csv:3 run1\.yaml 0\.0[0-9]+; check their measurements "
        r"\(seconds per step\) and specs, or leave them out: no preset is written",
        lines[0],
    ), lines[0]
    assert proc.stdout == "" and not (tmp_path / "preset.yaml").exists()


@pytest.mark.parametrize(
    "head", ["\ufeffspec,step_time_s", "Spec,Step_Time_S", "spec, step_time_s"]
)
def test_csv_header_variants_are_read(tmp_path, head):
    """A spreadsheet's "CSV UTF-8" (byte-order mark), capitalised or spaced column names were
    read as the published-runs table ('global_batch not published') or 'no measured column'."""
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text(f"{head}\nrun0.yaml,0.5\nrun1.yaml,0.7\n", encoding="utf-8")
    runs, notes = runs_from_csv(tmp_path / "runs.csv")
    assert [r.measured_step_seconds for r in runs] == [0.5, 0.7] and notes == []


@pytest.mark.parametrize(
    ("factors", "err"),
    [
        ("gemm_efficiency,gemm_efficiency", "--factors names gemm_efficiency more than once"),
        ("fp8_gemm_efficiency", "no run exercises fp8_gemm_efficiency"),
        ("", "--factors names no factor"),
    ],
)
def test_cli_factors_that_cannot_be_fitted_exit_2(tmp_path, factors, err):
    """A factor named twice counted twice against the runs; a factor no run reads (FP8 on BF16
    runs) was 'fitted' to its start value; --factors '' fell back to the defaults."""
    _bad_csv_cases(tmp_path)
    (tmp_path / "runs.csv").write_text(
        "spec,step_time_s\nrun0.yaml,0.5\nrun1.yaml,0.7\nrun2.yaml,0.9\n"
    )
    proc = _cli("runs.csv", "--factors", factors, "-o", "p.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and err in proc.stderr, proc.stderr
    assert not (tmp_path / "p.yaml").exists()


def test_cli_a_spec_row_that_breaks_a_rule_exits_2(tmp_path):
    """A spec row with tp=3 (heads 16 not divisible) was skipped with a note and the fit went
    on; docs/calibrate.md says a row meant as a run that cannot be one is an error."""
    _bad_csv_cases(tmp_path)
    bad = _spec_dict(*GRID[0])
    bad["parallel"]["tp"] = 3
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    (tmp_path / "runs.csv").write_text(
        "spec,step_time_s\nrun0.yaml,0.5\nrun1.yaml,0.7\nbad.yaml,0.9\n"
    )
    proc = _cli("runs.csv", "--factors", "gemm_efficiency", "-o", "p.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "1 run(s) do not compile: runs.csv:4 bad.yaml (its layout breaks TRC101, TRC201"
        in proc.stderr
    )
    assert not (tmp_path / "p.yaml").exists()


def test_cli_contradicting_measurements_exit_2(tmp_path):
    """step_time_s 0.5 next to tokens_per_s_per_gpu that means a 2000x longer step: only the
    step time was used, silently. Now the row is an error naming both figures."""
    _bad_csv_cases(tmp_path)
    seq, _, _, nodes, gbs = GRID[1]
    tps = gbs * seq / (0.5 * nodes * 8)  # the tokens/s that agree with 0.5 s per step
    (tmp_path / "runs.csv").write_text(
        "spec,step_time_s,tokens_per_s_per_gpu\n"
        f"run0.yaml,0.5,\nrun1.yaml,0.5,{tps:g}\nrun2.yaml,0.5,{tps / 2000:g}\n"
    )
    proc = _cli("runs.csv", "--factors", "gemm_efficiency", "-o", "p.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "line 4: step_time_s 0.5 and tokens_per_s_per_gpu" in proc.stderr
    assert "line 3" not in proc.stderr and not (tmp_path / "p.yaml").exists()


def test_a_measured_run_the_memory_model_calls_a_sure_oom_is_kept_with_a_warning(tmp_path):
    """A user's run that the memory rule rejects (TRC401) ran, so the memory model (an estimate
    with an error band) may be wrong: the run is kept, flagged and named in a warning, never
    silently (a note per flagged run)."""
    big = _spec_dict(*GRID[0])
    big["model"].update(num_layers=64, hidden_size=8192, num_attention_heads=64)  # ~50B, tp 1
    (tmp_path / "oom.yaml").write_text(yaml.safe_dump(big))
    (tmp_path / "runs.csv").write_text("spec,step_time_s\noom.yaml,1.0\n")
    runs, _ = read_runs([str(tmp_path / "runs.csv")])
    kept, notes = prepare(runs)
    assert [r.name for r in kept] == [runs[0].name] and kept[0].memory_flagged
    assert kept[0].plan is not None and kept[0].measured_step_seconds == 1.0
    assert [n for n in notes if "sure OOM (TRC401)" in n and n.startswith("warning: ")] and all(
        runs[0].name in n for n in notes if "TRC401" in n
    )


def test_csv_with_extra_cells_or_a_near_miss_column_is_refused_with_the_reason(tmp_path):
    """A spec row with more cells than the header was read without them; a `step_time` header
    got no hint (trial 13)."""
    (tmp_path / "run0.yaml").write_text(yaml.safe_dump(_spec_dict(*GRID[0])))
    (tmp_path / "extra.csv").write_text("spec,step_time_s\nrun0.yaml,1.0,extra\n")
    with pytest.raises(CalibrateError, match=r"line 2: 1 cell\(s\) more than the header's 2"):
        runs_from_csv(tmp_path / "extra.csv")
    (tmp_path / "near.csv").write_text("spec,step_time\nrun0.yaml,1.0\n")
    with pytest.raises(CalibrateError, match=r"step_time \(did you mean `step_time_s`\?\)"):
        runs_from_csv(tmp_path / "near.csv")
