"""Fidelity of trainc's performance and memory model against published training runs.

Compiles every row of a published-runs CSV (default ``bench/published_runs.csv``, sources in
``bench/published_runs.md``; conversion in :mod:`trainc.calibrate.published`, the one converter)
through trainc's own passes
(normalize .. check_fit) and prints, per subset (all, BF16, FP8, dense, MoE, FSDP, per GPU,
per source):

* median |error|, p90 |error| and bias (median signed error) of predicted tokens/s per GPU
  against the published figure (``(pred - meas) / meas``);
* the memory-fit verdicts: TRC401 (sure OOM, an error) and TRC403 (tight, a warning) per row;
* side by side: a constant hardware-FLOP utilisation baseline (one HFU of the BF16 dense peak,
  fitted on the same rows: the median of measured / peak FLOP rate) and llm-analysis 0.2.2 with
  one flops_efficiency (fitted likewise), when it is installed (``pip install llm-analysis==0.2.2
  fire``); otherwise the line says so;
* leave-one-source-out: trainc's fitted profile factors are not refitted per source (they are
  data in ``trainc/conf/gpu``), so the per-source lines are the out-of-source view; the baseline's
  HFU is refitted without each source and its error on that source printed next to trainc's.

It asserts nothing (tests assert formulas); it is a measurement. Run:
``.venv/bin/python bench/fidelity.py [CSV] [--rows] [--planner]`` (``--help`` for every
option).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainc.compiler.estimate.flops import spec_flop_terms
from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import State, run_passes
from trainc.calibrate.published import (
    load_rows,
    measured_tokens_per_gpu,
    note,
    precision_of,
    row_to_spec_reason,
)

ROOT = Path(__file__).resolve().parents[1]
#: The published-runs table the time model is fitted on (in the repo; sources in
#: bench/published_runs.md).
DEFAULT_CSV = ROOT / "bench" / "published_runs.csv"
#: Every published table in the repo (``--all``): the calibration CSV first, then the held-out
#: and validation tables (sources in bench/published_runs.md and each row's ``source``).
ALL_CSVS = [
    DEFAULT_CSV,
    ROOT / "bench" / "heldout_runs.csv",
    ROOT / "bench" / "validation_nvidia.csv",
    ROOT / "bench" / "validation_papers.csv",
]
#: A step shorter than this (seconds, from the published tokens/s: global batch x sequence /
#: (tokens/s per GPU x GPUs)) is a "short step": fixed per-step costs (optimizer, host,
#: collective latency) weigh in it.
SHORT_STEP_S = 1.0
SHORT_TAG = "short step (<1 s)"


def source_short(row: dict[str, str]) -> str:
    """A short source label for per-source statistics."""
    s = row["source"]
    if "Megatron-Bridge" in s:
        c = note(row, "container") or ""
        return "bridge " + c.split()[0] if c else "bridge"
    if "long_sequence" in s:
        return "nemo long-seq"
    if "NeMo" in s:
        return "nemo 24.07"
    if "Megatron-LM" in s:
        return "megatron-lm"
    return " ".join(s.replace(",", "").split()[:2]).lower()


@dataclass
class Result:
    """One row's outcome."""

    row: dict[str, str]
    spec: dict[str, Any] | None
    reason: str
    measured: float | None = None  # tokens/s per GPU
    predicted: float | None = None
    flops_per_token: float | None = None  # trainc's Megatron count, model FLOPs per token
    peak_bf16: float | None = None  # TFLOP/s
    fit: str = ""  # "", "TRC401", "TRC403"
    fit_assumed: str = ""  # what the verdict assumes beyond the table (memory_fallbacks)
    errors: list[str] = field(default_factory=list)
    llm_analysis: float | None = None  # tokens/s per GPU at efficiency 1
    margin: float | None = None  # memory margin of the literal reading
    tags: set[str] = field(default_factory=set)


def compile_row(spec: dict[str, Any], tmp: Path) -> tuple[Any, list[Any]]:
    """(plan, diagnostics) of a composed spec dict."""
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_spec(path)
    if loaded.spec is None:
        return None, list(loaded.diagnostics)
    st = run_passes(
        State(spec=loaded.spec, where=loaded.where, suggest=False), stop_after="check_fit"
    )
    return st.plan, list(st.diagnostics)


def _llm_analysis(spec: dict[str, Any]) -> float | None:
    """llm-analysis 0.2.2 tokens/s per GPU at flops_efficiency 1 (scaled later), or None."""
    try:
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import (
            DtypeConfig,
            GPUConfig,
            ModelConfig,
            ParallelismConfig,
        )
    except Exception:
        return None
    m, p, t, c = spec["model"], spec["parallel"], spec["training"], spec["cluster"]
    peaks = {
        "h100-80g": 989,
        "h200": 989,
        "b200": 2250,
        "gb200": 2500,
        "gb300": 2500,
        "a100-80g": 312,
    }
    ffn = m.get("moe_ffn_hidden_size") if m.get("num_experts") else m.get("ffn_hidden_size")
    ffn = ffn or 4 * m["hidden_size"]
    try:
        mc = ModelConfig(
            name="x",
            num_layers=m["num_layers"],
            n_head=m["num_attention_heads"],
            hidden_dim=m["hidden_size"],
            vocab_size=m["vocab_size"],
            max_seq_len=m["seq_length"],
            num_key_value_heads=m.get("num_query_groups") or m["num_attention_heads"],
            ffn_embed_dim=ffn,
            expansion_ratio=ffn / m["hidden_size"],
            moe_num_experts=m.get("num_experts") or 1,
            moe_top_k=m.get("moe_router_topk", 1) if m.get("num_experts") else 1,
        )
        gc = GPUConfig(
            name=c["gpu"],
            mem_per_GPU_in_GB=1e6,
            hbm_bandwidth_in_GB_per_sec=3350,
            intra_node_bandwidth_in_GB_per_sec=450,
            intra_node_min_message_latency=8e-6,
            peak_fp16_TFLOPS=peaks[c["gpu"]],
            inter_node_bandwidth_in_GB_per_sec=50,
        )
        pc = ParallelismConfig(
            tp_size=p["tp"],
            pp_size=p["pp"],
            dp_size=p["dp"] * p["cp"],
            ep_size=min(p.get("ep", 1), p["dp"] * p["cp"]) or 1,
        )
        la = LLMAnalysis(mc, gc, DtypeConfig(), pc, flops_efficiency=1.0, hbm_memory_efficiency=1.0)
        import logging

        logging.disable(logging.CRITICAL)
        out = la.training(
            batch_size_per_gpu=t["micro_batch_size"],
            global_batch_size=t["global_batch_size"],
            seq_len=m["seq_length"],
            ds_zero=la.__class__.__module__
            and __import__("llm_analysis.analysis", fromlist=["DSZeRO"]).DSZeRO(
                3 if p.get("zero_stage") == 3 else 1
            ),
            flash_attn=True,
            mlp_gated_linear_units=m.get("activation", "swiglu") == "swiglu",
        )
        lat = out["latency_per_iter"]
        world = c["num_nodes"] * c["gpus_per_node"]
        return t["global_batch_size"] * m["seq_length"] / lat / world if lat > 0 else None
    except Exception:
        return None


def _verdict(diags: list[Any]) -> str:
    ids = {dg.rule.id for dg in diags}
    return "TRC401" if "TRC401" in ids else ("TRC403" if "TRC403" in ids else "")


def memory_fallbacks(row: dict[str, str], spec: dict[str, Any], tmp: Path) -> tuple[str, str]:
    """The memory verdict under what the table leaves out, when the literal reading is TRC401:
    the recipes' recompute (Megatron-Bridge sets per-module ``recompute_modules`` that the table
    does not transcribe): the verdict with ``recompute: full`` stands for "some recompute".
    (Megatron-FSDP rows, ``zero_stage`` 3, are compiled as what they are: engine=megatron with
    zero_stage 3.)

    Returns (verdict, the assumption that produced it)."""
    full = copy.deepcopy(spec)
    full["training"]["recompute"] = "full"
    tries = [("recompute=full", full)]
    for label, cand in tries:
        plan, diags = compile_row(cand, tmp)
        if plan is None or plan.estimates is None:
            continue
        v = _verdict(diags)
        if v != "TRC401":
            return v, label
    return "TRC401", "none fits"


#: ``--cluster KEY=VALUE`` settings applied to every row's ``cluster`` (e.g. the step-cost
#: switches ``optimizer_step=true``, ``collective_latency=true``).
CLUSTER_SET: dict[str, Any] = {}


def run(path: str | Path, baselines: bool = True) -> list[Result]:
    """Compile every row; one :class:`Result` each (``baselines``: also run llm-analysis)."""
    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for row in load_rows(path):
            spec, why = row_to_spec_reason(row)
            res = Result(row, spec, why)
            out.append(res)
            if spec is None:
                continue
            spec["cluster"].update(CLUSTER_SET)
            prec = precision_of(row)
            res.tags |= {
                "all",
                "BF16" if prec == "bf16" else "FP8/FP4",
                "MoE" if spec["model"].get("num_experts") else "dense",
                spec["cluster"]["gpu"],
                source_short(row),
            }
            res.tags.add("engine=" + spec["engine"])
            if spec["engine"] == "deepspeed":
                res.tags.add("FSDP/ZeRO-3")
            if prec == "bf16" and not spec["model"].get("num_experts"):
                res.tags.add("BF16 dense")
            plan, diags = compile_row(spec, tmp)
            errs = [dg for dg in diags if dg.is_error and dg.rule.id != "TRC401"]
            if plan is None or plan.estimates is None or errs:
                res.errors = [f"{dg.rule.id} {dg.message[:100]}" for dg in diags if dg.is_error]
                res.reason = "does not compile: " + "; ".join(res.errors[:2])
                continue
            res.fit = _verdict(diags)
            if res.fit == "TRC401":
                res.fit, res.fit_assumed = memory_fallbacks(row, spec, tmp)
            e, world = plan.estimates, plan.derived.world_size
            res.margin = e.memory_margin
            res.predicted = e.tokens_per_second / world
            tok = spec["training"]["global_batch_size"] * spec["model"]["seq_length"]
            res.flops_per_token = e.flops_per_step / tok
            res.peak_bf16 = plan.spec.cluster.peak_tflops
            core = spec_flop_terms(plan.spec, plan).core_per_s2 * spec["model"]["seq_length"]
            # printed tokens/s, else TFLOP/s over the source's own FLOP count
            res.measured = measured_tokens_per_gpu(row, res.flops_per_token, core)
            res.llm_analysis = _llm_analysis(spec) if baselines else None
            if (
                res.measured
                and res.measured * world > 0
                and tok / (res.measured * world) < SHORT_STEP_S
            ):
                res.tags.add(SHORT_TAG)
    return out


def stats(errs: list[float]) -> tuple[float, float, float]:
    """(median |e|, p90 |e|, median e) in per cent."""
    a = sorted(abs(x) for x in errs)
    p90 = a[min(len(a) - 1, round(0.9 * (len(a) - 1)))]
    return 100 * statistics.median(a), 100 * p90, 100 * statistics.median(errs)


def _err(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or not meas else (pred - meas) / meas


def hfu_fit(rs: Iterable[Result]) -> float:
    """The constant baseline: median measured FLOP rate / BF16 peak."""
    xs = [
        r.measured * r.flops_per_token / (r.peak_bf16 * 1e12)
        for r in rs
        if r.measured and r.flops_per_token and r.peak_bf16
    ]
    return statistics.median(xs) if xs else 0.0


def report(
    results: list[Result], show_rows: bool = False, fit_on: list[Result] | None = None
) -> str:
    """The printed tables; ``fit_on``: the rows the baselines' single factors are fitted on
    (default: ``results`` themselves; a held-out CSV passes the calibration rows)."""
    ok = [r for r in results if r.predicted is not None and r.measured]
    lines = [
        f"rows: {len(results)}, compiled and measured: {len(ok)}, skipped: "
        f"{sum(r.spec is None for r in results)}, not compiling: "
        f"{sum(r.spec is not None and r.predicted is None for r in results)}"
    ]
    basis = ok if fit_on is None else [r for r in fit_on if r.predicted is not None and r.measured]
    hfu = hfu_fit(basis)
    la_ok = [r for r in basis if r.llm_analysis]
    la_eff = statistics.median(r.measured / r.llm_analysis for r in la_ok) if la_ok else 0.0

    def base(r: Result) -> float:
        assert r.flops_per_token and r.peak_bf16
        return hfu * r.peak_bf16 * 1e12 / r.flops_per_token

    where = "these rows" if fit_on is None else "the calibration CSV"
    lines.append(
        f"constant-HFU baseline: HFU {hfu:.3f} of the BF16 dense peak (fitted on "
        f"{where}); llm-analysis 0.2.2: "
        + (
            f"flops_efficiency {la_eff:.3f} (fitted), {len(la_ok)} rows"
            if la_ok
            else "not installed or failed on every row: not compared"
        )
    )
    hdr = (
        f"{'subset':<22}{'n':>4} | {'trainc med':>10}{'p90':>7}{'bias':>7} | "
        f"{'HFU med':>8}{'bias':>7} | {'llm-a med':>9}{'bias':>7} | {'401':>4}{'403':>4}"
    )
    lines += [hdr, "-" * len(hdr)]
    tags = [
        "all",
        "BF16",
        "FP8/FP4",
        "dense",
        "MoE",
        "BF16 dense",
        "FSDP/ZeRO-3",
        "engine=megatron",
        "engine=deepspeed",
        "engine=fsdp",
        SHORT_TAG,
        "a100-80g",
        "h100-80g",
        "h200",
        "b200",
        "b300",
        "gb200",
        "gb300",
    ]
    tags += sorted({t for r in ok for t in r.tags if t.startswith(("bridge", "nemo", "megatron"))})
    for tag in tags:
        sub = [r for r in ok if tag in r.tags]
        if not sub:
            continue
        tm = stats([e for r in sub if (e := _err(r.predicted, r.measured)) is not None])
        hb = stats([e for r in sub if (e := _err(base(r), r.measured)) is not None])
        la = [
            e
            for r in sub
            if r.llm_analysis and (e := _err(r.llm_analysis * la_eff, r.measured)) is not None
        ]
        las = f"{stats(la)[0]:>9.1f}{stats(la)[2]:>+7.1f}" if la else f"{'-':>9}{'-':>7}"
        n401 = sum(r.fit == "TRC401" for r in sub)
        n403 = sum(r.fit == "TRC403" for r in sub)
        lines.append(
            f"{tag:<22}{len(sub):>4} | {tm[0]:>10.1f}{tm[1]:>7.1f}{tm[2]:>+7.1f} | "
            f"{hb[0]:>8.1f}{hb[2]:>+7.1f} | {las} | {n401:>4}{n403:>4}"
        )
    # leave-one-source-out for the baseline (trainc's factors are not per-source)
    lines.append("")
    lines.append("leave-one-source-out (baseline HFU refitted without the source):")
    for src in sorted({source_short(r.row) for r in ok}):
        inn = [r for r in ok if source_short(r.row) == src]
        out_h = hfu_fit([r for r in ok if source_short(r.row) != src])
        be = [
            (out_h * r.peak_bf16 * 1e12 / r.flops_per_token - r.measured) / r.measured
            for r in inn
            if r.peak_bf16 and r.flops_per_token and r.measured
        ]
        te = [e for r in inn if (e := _err(r.predicted, r.measured)) is not None]
        lines.append(
            f"  {src:<20} n={len(inn):>3}  trainc med {stats(te)[0]:5.1f} %  "
            f"baseline(HFU {out_h:.3f}) med {stats(be)[0]:5.1f} %"
        )
    rej = [r for r in ok if r.fit == "TRC401"]
    lines.append(
        f"\nfit rule: TRC401 (sure OOM, error) on {len(rej)} of {len(ok)} published "
        f"layouts; TRC403 (tight, warning) on {sum(r.fit == 'TRC403' for r in ok)}"
    )
    assumed: dict[str, int] = {}
    for r in ok:
        if r.fit_assumed:
            assumed[r.fit_assumed] = assumed.get(r.fit_assumed, 0) + 1
    for k, n in sorted(assumed.items()):
        lines.append(
            f"  {n} verdicts assume {k} (not in the table; bench/fidelity.py memory_fallbacks)"
        )
    margins = sorted((r.margin, r.row["model"]) for r in ok if r.margin is not None)
    if margins:
        lines.append(
            f"  memory margin (budget - estimate) / budget of the literal reading: "
            f"min {100 * margins[0][0]:+.1f} % ({margins[0][1]}), median "
            f"{100 * statistics.median(m for m, _ in margins):+.1f} %"
        )
    for r in rej:
        lines.append(
            f"  TRC401: {r.row['model']} {r.row['gpu_type'][:10]} tp{r.row['tp']} "
            f"pp{r.row['pp']} cp{r.row['cp']} ep{r.row['ep']} mbs{r.row['micro_batch']}"
        )
    lines.append("\nskipped / not compiling:")
    seen: dict[str, int] = {}
    for r in results:
        if r.predicted is None:
            key = f"{r.row['model']}: {r.reason[:140]}"
            seen[key] = seen.get(key, 0) + 1
    lines += [f"  {n}x {k}" for k, n in seen.items()]
    if show_rows:
        lines.append("\nrows (pred / meas tokens/s/GPU):")
        for r in ok:
            e = _err(r.predicted, r.measured)
            assert e is not None
            lines.append(
                f"  {r.row['model'][:24]:<24} {r.row['gpu_type'][:10]:<10} "
                f"{precision_of(r.row):<11} tp{r.row['tp']} pp{r.row['pp']} "
                f"cp{r.row['cp']} ep{r.row['ep'] or 1} "
                f"gbs{r.spec['training']['global_batch_size'] if r.spec else ''}"
                f" {r.predicted:9.0f} / {r.measured:9.0f}  {100 * e:+6.1f} %  {r.fit}"
            )
    return "\n".join(lines)


def band_report(results: list[Result]) -> str:
    """The spread of measured / estimated step time by kind (MoE, dense under engine=fsdp, other
    dense; p10, p50, p90: what ``trainc/conf/step_time_band.yaml`` holds) and how many rows fall
    inside the band the estimates carry now (about 80 % where the band describes the rows)."""
    from trainc.compiler.estimate.band import published_bands

    bands = published_bands()
    lines = ["step time band (measured / estimated step time = predicted / measured tokens/s):"]

    def kind_of(r: Result) -> str:
        if "MoE" in r.tags:
            return "moe"
        return "fsdp" if r.spec and r.spec["engine"] == "fsdp" else "dense"

    for kind in ("dense", "fsdp", "moe"):
        rs = sorted(
            r.predicted / r.measured
            for r in results
            if r.predicted and r.measured and kind_of(r) == kind
        )
        if not rs:
            continue

        def q(p: float, xs: list[float] = rs) -> float:
            return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]

        lo, hi = bands[kind]
        inside = sum(lo <= x <= hi for x in rs)
        lines.append(
            f"  {kind:<6} n={len(rs):>4}  p10 {q(0.1):.3f}  p50 {q(0.5):.3f}  "
            f"p90 {q(0.9):.3f}  | inside the carried band [{lo:.3f}, {hi:.3f}]: "
            f"{inside}/{len(rs)} ({100 * inside / len(rs):.0f} %)"
        )
    return "\n".join(lines)


def planner_top5(results: list[Result], limit: int | None = None) -> str:
    """The planner's top-5 rate: for each distinct (model, cluster, batch, precision) of the
    compiled rows, does ``trainc plan`` (the spec without its parallel section, micro batch and
    recompute) list the published tp / pp / cp / ep among its five best layouts?"""
    from trainc.planner import plan_layouts

    seen: dict[str, tuple[bool, str]] = {}
    with tempfile.TemporaryDirectory() as d:
        for r in results:
            if r.spec is None or r.predicted is None:
                continue
            spec = copy.deepcopy(r.spec)
            par = spec.pop("parallel")
            for k in ("micro_batch_size", "recompute"):
                spec["training"].pop(k, None)
            key = yaml.safe_dump(spec, sort_keys=True)
            if key in seen:
                continue
            if limit is not None and len(seen) >= limit:
                break
            path = Path(d) / "plan.yaml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            res = plan_layouts(path, top=5)
            want = (par["tp"], par["pp"], par["cp"], par.get("ep", 1))
            got = [
                (p.candidate.tp, p.candidate.pp, p.candidate.cp, p.candidate.ep)
                for p in res.planned
            ]
            seen[key] = (
                want in got,
                f"{r.row['model']} on {r.row['gpus']} x "
                f"{r.row['gpu_type'][:10]}: published {want}, top-5 {got}",
            )
    hits = sum(ok for ok, _ in seen.values())
    lines = [
        f"planner top-5 rate: {hits} of {len(seen)} distinct published runs have their "
        f"tp/pp/cp/ep among trainc plan's five best"
    ]
    lines += [f"  {'hit ' if ok else 'miss'} {why}" for ok, why in seen.values()]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bench/fidelity.py",
        description="Fidelity of trainc's performance and memory model against published "
        "training runs: predicted vs published tokens/s per GPU by subset, the "
        "memory-fit verdicts and the step-time band. Asserts nothing; prints.",
    )
    ap.add_argument(
        "csv",
        nargs="*",
        metavar="CSV",
        type=Path,
        help="the published-runs table to compile (one; with --band, any number). "
        f"Default: {DEFAULT_CSV}. Another table (e.g. bench/heldout_runs.csv) "
        "is compared with baselines fitted on the default table (on its own "
        "rows when the default table is missing)",
    )
    ap.add_argument(
        "--rows",
        action="store_true",
        help="also print every row: predicted / published tokens/s per GPU, the "
        "error and the memory verdict",
    )
    ap.add_argument(
        "--planner",
        action="store_true",
        help="also report the planner's top-5 rate: run trainc plan once per "
        "distinct published run (minutes)",
    )
    ap.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a cluster key on every row (YAML value), e.g. "
        "--cluster optimizer_step=true --cluster collective_latency=true",
    )
    ap.add_argument(
        "--all",
        action="store_true",
        help="compile every published table in the repo (the calibration, held-out "
        "and validation CSVs): one report per table (baselines fitted on the "
        "calibration table), then all tables pooled",
    )
    ap.add_argument(
        "--band",
        action="store_true",
        help="print only the step-time band (measured / estimated, p10 / p50 / p90 "
        "by kind) over every CSV given together, the figures "
        "trainc/conf/step_time_band.yaml holds (default: the calibration and "
        "the held-out tables)",
    )
    return ap


def _missing(tables: list[Path]) -> str | None:
    """The one-line complaint about the first table that is not a readable file, else None."""
    for t in tables:
        if not t.is_file():
            what = "not a file" if t.exists() else "no such file"
            return (
                f"bench/fidelity.py: published-runs CSV {t}: {what}; pass another as the "
                f"CSV argument (.venv/bin/python bench/fidelity.py PATH.csv, see --help)"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``fidelity.py [CSV] [--rows] [--planner]`` (the planner's top-5 rate runs
    ``trainc plan`` once per distinct run: minutes); ``fidelity.py --band [CSV ...]`` prints
    the step-time band over the tables together (default: calibration and held-out), the
    figures ``trainc/conf/step_time_band.yaml`` holds. A table that is missing ends it with
    exit status 2 and a one-line message."""
    ap = _parser()
    args = ap.parse_intermixed_args(argv)
    paths: list[Path] = args.csv
    if args.band:  # the band over every table given (default: calibration + held-out)
        tables = paths or [DEFAULT_CSV, ROOT / "bench" / "heldout_runs.csv"]
        if (why := _missing(tables)) is not None:
            print(why, file=sys.stderr)
            return 2
        print(band_report([r for t in tables for r in run(t, baselines=False)]))
        return 0
    for kv in args.cluster:
        key, _, val = kv.partition("=")
        CLUSTER_SET[key] = yaml.safe_load(val)
    if args.all:
        if (why := _missing(ALL_CSVS)) is not None:
            print(why, file=sys.stderr)
            return 2
        per = {t: run(t) for t in ALL_CSVS}
        calib = per[DEFAULT_CSV]
        for t, res in per.items():
            print(f"== {t.relative_to(ROOT)}")
            print(report(res, args.rows, None if t == DEFAULT_CSV else calib))
            print()
        print("== every table pooled")
        print(report([r for res in per.values() for r in res], False, calib))
        return 0
    if len(paths) > 1:
        ap.error("one CSV at a time (several only with --band)")
    path = paths[0] if paths else DEFAULT_CSV
    if (why := _missing([path])) is not None:
        print(why, file=sys.stderr)
        return 2
    held_out = path.resolve() != DEFAULT_CSV.resolve()
    if held_out and _missing([DEFAULT_CSV]) is not None:
        print(
            f"bench/fidelity.py: note: the calibration table {DEFAULT_CSV} is missing: the "
            f"baselines are fitted on {path}'s own rows",
            file=sys.stderr,
        )
        held_out = False
    results = run(path)
    calib = run(DEFAULT_CSV) if held_out else None
    print(report(results, args.rows, calib))
    print()
    print(band_report(results))
    if args.planner:
        print()
        print(planner_top5(results))
    else:
        print("\nplanner top-5 rate: not run (add --planner; one trainc plan per distinct run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
