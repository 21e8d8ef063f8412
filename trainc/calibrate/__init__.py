"""``trainc calibrate``: fit a cluster's time-model factors to measured runs.

Inputs (:func:`read_runs`), each a list of :class:`Run` (a spec and a measured step time):

* a CSV (:func:`runs_from_csv`): either a ``spec`` column (a spec file, relative to the CSV's
  folder) with one measured column, ``step_time_s`` (seconds per step), ``tokens_per_s_per_gpu``
  or ``tflops_per_gpu`` (model TFLOP/s per GPU, Megatron's count); or the columns of the
  published-runs table (``bench/published_runs.csv``: the model, GPUs, batch, the
  published layout and precision, converted by :mod:`trainc.calibrate.published`, the converter
  ``bench/fidelity.py`` uses) with ``tokens_per_s_per_gpu=`` in the notes or
  ``measured_tflops_per_gpu`` (over the source's own FLOP count,
  :func:`trainc.calibrate.published.flop_convention`); printed tokens/s win over TFLOP/s; rows
  without a published global batch are skipped;
* a Megatron-LM training log (:func:`parse_megatron_log`): the arguments block Megatron-LM prints
  at start (``megatron/training/arguments.py`` ``_print_args``: ``------------------------
  arguments ------------------------`` then ``  name ..... value`` lines) and the ``elapsed time
  per iteration (ms): X`` of its iteration lines (``megatron/training/training.py``
  ``training_log``), core_v0.16.x; the cluster comes from ``--cluster``;
* a trainc worker log (:func:`parse_worker_log`): ``trainc-worker: plan=PATH ...`` and the
  ``step=N ... step_time_s=X`` lines (:mod:`trainc.launch.worker.runtime`); the spec is plan.json's.

The measured step time of a log is the median over its logged iterations after the first (the
first includes compilation and warm-up).

The fit (:func:`fit`) changes the cluster's scalar factors the time model reads
(:data:`FACTORS`: per time model, name -> bounds; the list is data, a new factor of a time
model is one entry)
to minimise the sum over runs of ``(log estimate - log measured)^2``, with scipy's Nelder-Mead
when scipy is installed, else :func:`nelder_mead` (Nelder and Mead 1965, the standard
reflection/expansion/contraction/shrink coefficients 1, 2, 0.5, 0.5), each factor in units of
its start value and folded into its bounds by reflection, restarted from its best point until
it stops improving; with the default factors only those the runs support are freed (forward
selection, :func:`supported`), the others keep their start values. The estimate is the
compiler's own
(:func:`trainc.compiler.estimate.estimate` on the run's plan with the factors replaced).
The residual band is the 10th and 90th percentile (linear interpolation) of measured / fitted
estimate over the runs, widened to at least p10 0.95, p90 1.05 (:func:`residual_band`: run-to-run
variability of large jobs is about 5-9 %, so a band fitted to a few runs must not claim more); it
is written into the preset as ``step_time_p10_ratio`` / ``step_time_p90_ratio`` so estimates
carry a p10-p90 range and the planner's tie band follows.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainc.calibrate.published import flop_convention, row_to_spec_reason
from trainc.compiler.diagnostics import did_you_mean
from trainc.compiler.estimate import estimate
from trainc.compiler.estimate.flops import spec_flop_terms
from trainc.compiler.estimate.kernels import kernel_factor
from trainc.compiler.ir import Plan
from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import State, run_passes
from trainc.compiler.plan import recorded_spec, spec_to_dict
from trainc.schemas import ClusterSpec, Fp8Format, TimeModel, TrainSpec

#: Cluster factors the fit may change, per time model (``cluster.time_model``): name ->
#: (lower, upper) bound. Every name is a float/int field of :class:`trainc.schemas.ClusterSpec`
#: that model reads: ``seed`` (:func:`trainc.compiler.estimate.time.seed_step_time`) one
#: compute_efficiency over Megatron's FLOPs with its small-micro-batch roll-off; ``kernels``
#: (:mod:`trainc.compiler.estimate.kernels`, :func:`~trainc.compiler.estimate.time.
#: kernel_step_time`, :func:`~trainc.compiler.estimate.comm.time_collectives`) the GEMM and
#: attention ceilings and the MoE layer cost, whose null cluster keys resolve to the GPU
#: profile (:func:`trainc.compiler.estimate.kernels.kernel_factor`), and the fixed and
#: communication factors.
FACTORS: dict[TimeModel, dict[str, tuple[float, float]]] = {
    TimeModel.seed: {
        "compute_efficiency": (0.05, 1.0),
        "gemm_half_efficiency_tokens": (0.0, 65536.0),
        "layer_overhead_us": (0.0, 5000.0),
        "comm_overlap": (0.0, 1.0),
    },
    TimeModel.kernels: {
        "gemm_efficiency": (0.05, 1.0),
        "fp8_gemm_efficiency": (0.05, 1.0),
        "attention_efficiency": (0.05, 1.0),
        "moe_layer_overhead_us": (0.0, 5000.0),
        "layer_overhead_us": (0.0, 5000.0),
        "comm_efficiency": (0.05, 1.0),
        "comm_overlap": (0.0, 1.0),
    },
}


def factors_for(time_model: TimeModel) -> dict[str, tuple[float, float]]:
    """The factors (name -> bounds) the time model ``time_model`` reads (:data:`FACTORS`)."""
    return FACTORS[time_model]


def default_factors(runs: Sequence[Run]) -> list[str]:
    """The factors fitted when ``--factors`` is not given: those of the runs' time model that
    at least one run exercises (``fp8_gemm_efficiency`` needs an FP8/FP4 run,
    ``moe_layer_overhead_us`` an MoE run; a factor no run reads would wander freely)."""
    spec = runs[0].plan.spec if runs and runs[0].plan is not None else runs[0].spec
    names = list(factors_for(spec.cluster.time_model))
    specs = [r.plan.spec if r.plan is not None else r.spec for r in runs]
    if not any(x.training.fp8_format is not Fp8Format.none for x in specs):
        names = [n for n in names if n != "fp8_gemm_efficiency"]
    if not any(x.model.num_experts for x in specs):
        names = [n for n in names if n != "moe_layer_overhead_us"]
    return names


def factor_value(spec: TrainSpec, name: str) -> float:
    """The value the spec's time model uses for factor ``name`` (a null key: the GPU
    profile's)."""
    return kernel_factor(spec, name)


#: Nelder-Mead runs at most (each from the previous one's best point).
RESTARTS = 6
#: Factors the schema types as integers (rounded when written).
INT_FACTORS = frozenset({"gemm_half_efficiency_tokens"})
#: The narrowest band calibrate writes: p10 at most 0.95, p90 at least 1.05 (:func:`residual_band`).
BAND_FLOOR = (0.95, 1.05)
#: Fewer runs than this: the band's percentiles rest on a handful of points, and calibrate says
#: so (:func:`band_note`).
FEW_RUNS = 10
#: A fitted factor within this fraction of its range's width of a bound is tested for being at
#: the bound (:func:`near_bound`; the fit then sets it to the bound when that fits no worse).
AT_BOUND_TOL = 1e-3
#: A factor is unconstrained by the runs when fitting it lowers the RMS log error of the step
#: time by at most this (absolute; 0.005 = 0.5 % per run; :func:`supported`).
UNCONSTRAINED_RMS = 0.005
#: The columns that make a CSV a published-runs table (bench/published_runs.csv;
#: the converter, :mod:`trainc.calibrate.published`, fills a known model's shape from its name).
PUBLISHED_COLUMNS = ("model", "gpus")
#: After the fit every run's measured / estimated step time must lie within this range
#: (:func:`check_agreement`); otherwise the runs and the time model disagree and no preset is
#: written.
AGREEMENT = (0.5, 2.0)


class CalibrateError(Exception):
    """Bad input (unreadable file, no usable run, runs on different clusters): exit 2."""


@dataclass
class Run:
    """One measured run: the spec (as loaded, not normalized) and its measured step time."""

    name: str
    spec: TrainSpec
    measured_step_seconds: float
    source: str = ""
    plan: Plan | None = None
    """The planned spec (filled by :func:`prepare`)."""
    published: bool = False
    """A row of a published-runs table (built by the converter): one whose layout breaks a
    rule is left out with a note; any other run is the user's and such a run is an error."""
    memory_flagged: bool = False
    """The memory model calls this measured run a sure OOM (TRC401): it ran, so the run is kept
    (fitted like any other) and reported with a warning; set by :func:`prepare`."""


@dataclass
class FitResult:
    """What :func:`fit` found (factors by name; estimates in seconds, one per run)."""

    names: list[str]
    before: dict[str, float]
    after: dict[str, float]
    estimates_before: list[float]
    estimates_after: list[float]
    p10_ratio: float
    """The band written into the preset (:func:`residual_band`: at most BAND_FLOOR[0] x the
    median ratio)."""
    p90_ratio: float
    """The band's upper end (at least BAND_FLOOR[1] x the median ratio)."""
    fitted_p10_ratio: float
    """The 10th percentile of measured / fitted estimate over the runs, before the floor."""
    fitted_p90_ratio: float
    """The 90th percentile, before the floor."""
    rms_log_before: float
    rms_log_after: float
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)


# --- inputs -------------------------------------------------------------------------------


def _spec_from_dict(
    data: dict[str, Any], overrides: Sequence[str] = (), folder: Path | None = None
) -> tuple[TrainSpec | None, str]:
    """Load a spec given as a dict (written to a temporary file in ``folder``, so presets next to
    it resolve as for a file there). (spec, "") or (None, the loader's first error)."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        loaded = load_spec(path, list(overrides))
    if loaded.spec is None:
        msg = next((d.message for d in loaded.diagnostics if d.is_error), "cannot load")
        return None, msg
    return loaded.spec, ""


def _load(path: Path, overrides: Sequence[str]) -> tuple[TrainSpec | None, str]:
    """The spec file at ``path``: (spec, "") or (None, the loader's first error)."""
    loaded = load_spec(path, list(overrides))
    if loaded.spec is None:
        msg = next((d.message for d in loaded.diagnostics if d.is_error), "cannot load")
        return None, msg
    return loaded.spec, ""


#: The measured columns of a CSV row, in the order they are read (the published-runs notes may
#: carry ``tokens_per_s_per_gpu=X`` too).
MEASURED_COLUMNS = (
    "step_time_s",
    "measured_step_time_s",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "measured_tflops_per_gpu",
)
_NOTES_TPS = re.compile(r"(?:^|;)\s*tokens_per_s_per_gpu=([^;]*)")


def measured_value(text: str | None) -> tuple[float | None, str]:
    """A measured cell: (value, "") for a positive finite number, (None, "") for an empty or
    absent cell, (None, what is wrong with it) otherwise.

    >>> measured_value("0.5"), measured_value("")
    ((0.5, ''), (None, ''))
    >>> [measured_value(v)[1] for v in ("-3", "0", "abc", "inf")]
    ['is negative', 'is zero', 'is not a number', 'is not a finite number']
    """
    if text is None or text == "":
        return None, ""
    try:
        x = float(text)
    except ValueError:
        return None, "is not a number"
    if not math.isfinite(x):
        return None, "is not a finite number"
    if x <= 0:
        return None, "is negative" if x < 0 else "is zero"
    return x, ""


def _cells(row: dict[str, str]) -> list[tuple[str, str]]:
    """The row's non-empty measured cells as (column, text), the notes' tokens/s included."""
    cells = [(c, row[c]) for c in MEASURED_COLUMNS if row.get(c)]
    m = _NOTES_TPS.search(row.get("notes", ""))
    if m and not row.get("tokens_per_s_per_gpu"):
        cells.append(("tokens_per_s_per_gpu (notes)", m.group(1).strip()))
    return cells


def bad_measurement(row: dict[str, str]) -> str | None:
    """What is wrong with the row's measured cells (the first that is not a positive finite
    number, e.g. ``step_time_s '-3' is negative``), or None."""
    for col, text in _cells(row):
        _, why = measured_value(text)
        if why:
            return f"{col} {text!r} {why}"
    return None


def _measured_cells(row: dict[str, str]) -> dict[str, float | None]:
    """The row's measured cells by column (values as :func:`measured_value` reads them)."""
    return {col.split(" ")[0]: measured_value(text)[0] for col, text in _cells(row)}


def _measured(row: dict[str, str], spec: TrainSpec) -> tuple[float | None, str]:
    """Seconds per step from the row's measured column (needs the spec's FLOPs for TFLOP/s);
    the row's cells were checked by :func:`bad_measurement`."""
    got = _measured_cells(row)
    step = got.get("step_time_s") or got.get("measured_step_time_s")
    if step:
        return step, "step_time_s"
    world = spec.cluster.num_nodes * spec.cluster.gpus_per_node
    tokens = spec.training.global_batch_size * spec.model.seq_length
    tps = got.get("tokens_per_s_per_gpu")
    if tps:  # printed throughput first: a TFLOP/s figure depends on its source's FLOP count
        return tokens / (tps * world), "tokens_per_s_per_gpu"
    tflops = got.get("tflops_per_gpu") or got.get("measured_tflops_per_gpu")
    if tflops:  # converted once the plan's FLOPs are known, with the source's convention
        return -tflops, "tflops_per_gpu:" + (
            flop_convention(row) if not row.get("spec") else "causal"
        )
    return None, ""


def _disagree(row: dict[str, str], spec: TrainSpec) -> str | None:
    """Why a row's step time and tokens/s per GPU contradict each other (more than 10 % apart
    once converted with the spec's global batch, sequence and GPUs), or None. Only the step
    time would be used; a contradiction means one of the two (or the spec) is not the run."""
    got = _measured_cells(row)
    step = got.get("step_time_s") or got.get("measured_step_time_s")
    tps = got.get("tokens_per_s_per_gpu")
    if not step or not tps:
        return None
    world = spec.cluster.num_nodes * spec.cluster.gpus_per_node
    implied = spec.training.global_batch_size * spec.model.seq_length / (tps * world)
    if max(step, implied) <= 1.10 * min(step, implied):
        return None
    return (
        f"step_time_s {step:g} and tokens_per_s_per_gpu {tps:g} disagree (the latter means "
        f"{implied:.4g} s per step for {spec.training.global_batch_size} x "
        f"{spec.model.seq_length} tokens on {world} GPUs)"
    )


def runs_from_csv(
    path: Path, overrides: Sequence[str] = (), where: Sequence[str] = ()
) -> tuple[list[Run], list[str]]:
    """The CSV's runs and a note per row left out of scope (not kept by ``where``, a
    published-runs row the converter cannot build or without a published measurement).
    ``where``: ``COLUMN=TEXT`` filters (the column's value must contain TEXT,
    case-insensitive). Column names are read stripped and case-insensitive, and a leading
    byte-order mark (a spreadsheet's "CSV UTF-8") is dropped.

    A row that is meant as a run but cannot be one raises :class:`CalibrateError` naming the
    file, each such row's line and what is wrong: a measured cell that is not a positive finite
    number (negative, zero, not a number), a ``spec`` row without any measurement, a spec file
    that is missing or does not load. Every bad row is named at once, on one line."""
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark, which would
        # stick to the first column's name; column names are matched stripped and lower-case
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows, extra = [], []
            for r in reader:
                rows.append(
                    (
                        reader.line_num,
                        {
                            k.strip().lower(): (v or "").strip()
                            for k, v in r.items()
                            if k is not None
                        },
                    )
                )
                if r.get(None):  # csv.DictReader's restkey: cells past the header's columns
                    extra.append((reader.line_num, len(r[None])))
            header = [k.strip().lower() for k in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CalibrateError(f"cannot read {path}: {e}") from e
    filters = []
    for w in where:
        col, sep, text = w.partition("=")
        if not sep:
            raise CalibrateError(f"--where {w!r}: expected COLUMN=TEXT")
        filters.append((col.strip().lower(), text.lower()))
    spec_csv = "spec" in header and "global_batch" not in header
    missing = [c for c in PUBLISHED_COLUMNS if c not in header]
    if not spec_csv and header and missing:  # an empty file: "no run" below
        raise CalibrateError(
            f"{path}: columns not recognised ({', '.join(header) or 'no header'}): a CSV of your "
            f"runs needs a spec column and one of {', '.join(MEASURED_COLUMNS)}; a "
            f"published-runs table needs {', '.join(PUBLISHED_COLUMNS)} (missing: "
            f"{', '.join(missing)})"
        )
    if spec_csv and not any(c in header for c in MEASURED_COLUMNS):
        hints = [
            f"{c}{did_you_mean(c, list(MEASURED_COLUMNS))}"
            for c in header
            if c != "spec" and did_you_mean(c, list(MEASURED_COLUMNS))
        ]
        raise CalibrateError(
            f"{path}: no measured column (one of {', '.join(MEASURED_COLUMNS)})"
            + (f": {'; '.join(hints)}" if hints else "")
        )
    runs: list[Run] = []
    notes: list[str] = []
    # a spec row with more cells than the header has columns: an unquoted comma, or a shifted row
    errors = (
        [f"line {i}: {n} cell(s) more than the header's {len(header)} column(s)" for i, n in extra]
        if spec_csv
        else []
    )
    for i, row in rows:
        if any(text not in row.get(col, "").lower() for col, text in filters):
            continue
        name = f"{path.name}:{i}"
        bad = bad_measurement(row)
        if spec_csv and not row.get("spec"):
            errors.append(f"line {i}: the spec cell is empty")
            continue
        if row.get("spec"):
            spec_file = path.parent / row["spec"]
            name += f" {row['spec']}"
            if not spec_file.is_file():
                where_ = f" ({spec_file})" if str(spec_file) != row["spec"] else ""
                errors.append(
                    f"line {i}: spec file {row['spec']} not found{where_}"
                    + (f"; {bad}" if bad else "")
                )
                continue
            if bad:
                errors.append(f"line {i}: {bad}")
                continue
            if not _cells(row):
                present = [c for c in MEASURED_COLUMNS if c in header]
                errors.append(
                    f"line {i}: no measurement ({' and '.join(present)} "
                    f"{'is' if len(present) == 1 else 'are'} empty)"
                )
                continue
            spec, why = _load(spec_file, overrides)
            if spec is None:
                errors.append(f"line {i}: spec file {row['spec']} does not load ({why})")
                continue
        else:
            if bad:
                errors.append(f"line {i}: {bad}")
                continue
            if not row.get("global_batch"):  # the converter would guess it
                spec, why = None, "global_batch not published"
            else:
                data, why = row_to_spec_reason(row)
                spec = None
                if data is not None:
                    name += (
                        f" {row.get('model', '')} {row.get('gpus', '')}x{row.get('gpu_type', '')}"
                    )
                    spec, why = _spec_from_dict(data, overrides)
            if spec is None:
                notes.append(f"{name}: skipped ({why})")
                continue
        measured, kind = _measured(row, spec)
        clash = _disagree(row, spec) if spec_csv else None
        if clash:
            errors.append(f"line {i}: {clash}")
            continue
        if measured is None:  # a published-runs row without a measurement (spec rows: above)
            notes.append(
                f"{name}: skipped (no measured step_time_s, tokens_per_s_per_gpu or tflops_per_gpu)"
            )
            continue
        runs.append(Run(name.strip(), spec, measured, kind, published=not spec_csv))
    if errors:
        raise CalibrateError(
            f"{path}: {len(errors)} bad row(s): {'; '.join(errors)} (a "
            "measurement must be a positive number and a spec file must load; "
            "fix or delete these rows)"
        )
    return runs, notes


# (a log line may carry a launcher prefix such as "[rank0]: " or a timestamp: search, not match)
_ARGS_START = re.compile(r"-{8,} arguments -{8,}")
_ARGS_END = re.compile(r"-{8,} end of arguments -{8,}")
_ARG = re.compile(r"(?:^|\s)(\w+) \.+ (.*?)\s*$")
_ITER_MS = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")


def parse_megatron_args(text: str) -> dict[str, str]:
    """The arguments block of a Megatron-LM log as name -> printed value (strings)."""
    args: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if not inside and _ARGS_START.search(line):
            inside = True
            continue
        if inside and _ARGS_END.search(line):
            break
        if inside:
            m = _ARG.search(line)
            if m:
                args[m.group(1)] = m.group(2)
    return args


def _median_after_first(values: list[float]) -> float | None:
    vals = values[1:] if len(values) > 1 else values
    return statistics.median(vals) if vals else None


def _num(v: str | None) -> int | float | None:
    if v is None or v in ("None", ""):
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def megatron_spec_dict(
    args: dict[str, str], cluster: str, gpus_per_node: int, vocab_given: bool = False
) -> dict[str, Any]:
    """A spec dict for the run a Megatron-LM arguments block describes (model, layout, batch,
    recompute, precision), on the cluster preset ``cluster``. Raises CalibrateError when a
    required argument is missing."""

    def need(name: str) -> Any:
        v = _num(args.get(name))
        if v is None:
            raise CalibrateError(f"the Megatron-LM arguments block has no {name}")
        return v

    world = need("world_size")
    if world % gpus_per_node:
        raise CalibrateError(
            f"world_size {world} is not whole nodes of {gpus_per_node} GPUs (set --gpus-per-node)"
        )
    heads = need("num_attention_heads")
    model: dict[str, Any] = {
        "num_layers": need("num_layers"),
        "hidden_size": need("hidden_size"),
        "num_attention_heads": heads,
        "seq_length": need("seq_length"),
        "max_position_embeddings": _num(args.get("max_position_embeddings")) or need("seq_length"),
        "activation": "swiglu" if args.get("swiglu") == "True" else "gelu",
        "normalization": "rmsnorm" if args.get("normalization") == "RMSNorm" else "layernorm",
        "position_embedding": "rope"
        if args.get("position_embedding_type") == "rope"
        else "learned",
        "untie_embeddings_and_output_weights": args.get("untie_embeddings_and_output_weights")
        == "True",
    }
    for key, arg in (
        ("ffn_hidden_size", "ffn_hidden_size"),
        ("kv_channels", "kv_channels"),
        ("num_experts", "num_experts"),
        ("moe_router_topk", "moe_router_topk"),
        ("moe_ffn_hidden_size", "moe_ffn_hidden_size"),
        ("moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"),
    ):
        v = _num(args.get(arg))
        if v is not None:
            model[key] = v
    vocab = _num(args.get("padded_vocab_size")) or _num(args.get("vocab_size"))
    if vocab is None and vocab_given:  # a model.vocab_size=N override replaces it
        vocab = 1
    if vocab is None:
        raise CalibrateError(
            "the Megatron-LM arguments block has no padded_vocab_size or "
            "vocab_size (pass model.vocab_size=N)"
        )
    model["vocab_size"] = vocab
    if args.get("group_query_attention") == "True":
        model["num_query_groups"] = need("num_query_groups")
    vpp = _num(args.get("virtual_pipeline_model_parallel_size"))
    par: dict[str, Any] = {
        "tp": need("tensor_model_parallel_size"),
        "pp": need("pipeline_model_parallel_size"),
        "vpp": vpp or 1,
        "cp": _num(args.get("context_parallel_size")) or 1,
        "ep": _num(args.get("expert_model_parallel_size")) or 1,
        "sequence_parallel": args.get("sequence_parallel") == "True",
        "zero_stage": 1 if args.get("use_distributed_optimizer") == "True" else 0,
    }
    etp = _num(args.get("expert_tensor_parallel_size"))
    if etp is not None:
        par["etp"] = etp
    training: dict[str, Any] = {
        "micro_batch_size": need("micro_batch_size"),
        "global_batch_size": need("global_batch_size"),
        "precision": "bf16"
        if args.get("bf16") == "True"
        else "fp16"
        if args.get("fp16") == "True"
        else "fp32",
    }
    gran = args.get("recompute_granularity")
    training["recompute"] = gran if gran in ("full", "selective") else "none"
    if gran == "full":
        if args.get("recompute_method") in ("uniform", "block"):
            training["recompute_method"] = args["recompute_method"]
        n = _num(args.get("recompute_num_layers"))
        if n is not None:
            training["recompute_num_layers"] = n
    return {
        "defaults": [{"cluster": cluster}, "_self_"],
        "name": "megatron-run",
        "model": model,
        "cluster": {"num_nodes": world // gpus_per_node, "gpus_per_node": gpus_per_node},
        "parallel": par,
        "training": training,
    }


def parse_megatron_log(
    path: Path, cluster: str | None, gpus_per_node: int | None, overrides: Sequence[str] = ()
) -> Run:
    """One run from a Megatron-LM log (see the module docstring). Raises CalibrateError."""
    text = _read(path)
    args = parse_megatron_args(text)
    if not args:
        raise CalibrateError(f"{path}: no Megatron-LM arguments block ('---- arguments ----')")
    times = [float(x) / 1000 for x in _ITER_MS.findall(text)]
    step = _median_after_first(times)
    if step is None:
        raise CalibrateError(f"{path}: no 'elapsed time per iteration (ms)' line")
    if cluster is None:
        raise CalibrateError(
            f"{path}: a Megatron-LM log does not name the cluster: pass "
            "--cluster PRESET (e.g. dgx-h100)"
        )
    gpn = gpus_per_node or _preset_gpus_per_node(cluster)
    given = any(o.startswith("model.vocab_size=") for o in overrides)
    spec, why = _spec_from_dict(megatron_spec_dict(args, cluster, gpn, given), overrides)
    if spec is None:
        raise CalibrateError(f"{path}: {why}")
    return Run(f"{path.name} ({len(times)} iterations)", spec, step, "megatron-log")


def _preset_gpus_per_node(cluster: str) -> int:
    spec, _ = _spec_from_dict(
        {
            "defaults": [{"cluster": cluster}, "_self_"],
            "name": "probe",
            "model": {
                "num_layers": 1,
                "hidden_size": 64,
                "num_attention_heads": 1,
                "vocab_size": 64,
                "seq_length": 8,
            },
            "cluster": {"num_nodes": 1},
            "training": {"global_batch_size": 1},
        }
    )
    return spec.cluster.gpus_per_node if spec is not None else 8


#: The worker's first line (trainc.launch.worker.runtime):
#: ``plan=PATH engine=E device=D shrink=S ...``.
_WORKER_HEAD = re.compile(r"trainc-worker: (plan=\S+[^\n]*)")
_WORKER_STEP = re.compile(r"\bstep=(\d+) .*?\bstep_time_s=([0-9.]+)")


def parse_worker_log(
    path: Path, plan_path: Path | None = None, overrides: Sequence[str] = ()
) -> Run:
    """One run from a trainc worker log: the plan.json it names (or ``plan_path``) gives the
    spec, its ``step_time_s`` values the measured step time. Raises CalibrateError."""
    text = _read(path)
    m = _WORKER_HEAD.search(text)
    head = dict(f.split("=", 1) for f in m.group(1).split() if "=" in f) if m else {}
    device, shrunk = head.get("device", "cuda"), head.get("shrink") == "True"
    if device != "cuda" or shrunk:
        # the worker's CPU run (and any shrunk run) times a toy model on another device: its
        # step says nothing about the cluster the plan describes
        what = " and ".join(
            w
            for w, on in (
                (f"device={device}", device != "cuda"),
                ("shrink=True (the model shrunk to fit)", shrunk),
            )
            if on
        )
        raise CalibrateError(
            f"{path}: a {what} run of the trainc worker: its step times are "
            "not the plan's cluster's, so they cannot calibrate it; calibrate "
            "with logs of the job on its GPUs"
        )
    times = [float(t) for _, t in _WORKER_STEP.findall(text)]
    step = _median_after_first(times)
    if step is None:
        raise CalibrateError(f"{path}: no 'step=N ... step_time_s=X' line of the trainc worker")
    if plan_path is None:
        if "plan" not in head:
            raise CalibrateError(f"{path}: no 'trainc-worker: plan=PATH' line (pass --plan)")
        plan_path = Path(head["plan"])
    try:
        plan = json.loads(_read(plan_path))
        data = recorded_spec(plan)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CalibrateError(f"{plan_path}: not a trainc plan.json ({e})") from e
    spec, why = _spec_from_dict(data, overrides)
    if spec is None:
        raise CalibrateError(f"{plan_path}: {why}")
    return Run(f"{path.name} ({len(times)} steps)", spec, step, "worker-log")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CalibrateError(f"cannot read {path}: {e.strerror or e}") from e


def read_runs(
    paths: Sequence[str],
    *,
    cluster: str | None = None,
    gpus_per_node: int | None = None,
    plan_path: str | None = None,
    overrides: Sequence[str] = (),
    where: Sequence[str] = (),
) -> tuple[list[Run], list[str]]:
    """Every run of the given files (CSV by extension, else a Megatron-LM or trainc worker log
    by content) and the notes on skipped rows. Raises CalibrateError."""
    runs: list[Run] = []
    notes: list[str] = []
    for p in map(Path, paths):
        if p.suffix.lower() == ".csv":
            r, n = runs_from_csv(p, overrides, where)
            runs += r
            notes += n
            continue
        text = _read(p)
        if _ARGS_START.search(text):
            runs.append(parse_megatron_log(p, cluster, gpus_per_node, overrides))
        elif "trainc-worker:" in text or _WORKER_STEP.search(text):
            runs.append(parse_worker_log(p, Path(plan_path) if plan_path else None, overrides))
        else:
            raise CalibrateError(f"{p}: not a CSV, a Megatron-LM log or a trainc worker log")
    megatron = any(r.source == "megatron-log" for r in runs)
    for flag, value in (("--cluster", cluster), ("--gpus-per-node", gpus_per_node)):
        if value is not None and not megatron:  # it would be ignored: say so, not fit on
            raise CalibrateError(
                f"{flag} {value} names the cluster of a Megatron-LM log's run, "
                "and no input is one: a CSV row's or a worker log's spec names "
                "its own cluster (override it with cluster.KEY=VALUE)"
            )
    return runs, notes


# --- the fit ------------------------------------------------------------------------------


def _plan(spec: TrainSpec, fit: bool = True) -> tuple[Plan | None, str]:
    """The spec through normalize .. plan (the time model's input) and, with ``fit``, the
    memory-fit rule (a run of the user's own that the model calls a sure OOM, TRC401, was not
    the run that was measured; a published row's unstated recompute is not held against it);
    (None, rules) on errors."""
    state = run_passes(State(spec=spec, suggest=False), stop_after="check_fit" if fit else "plan")
    if state.failed or state.plan is None:
        errs = sorted({d.rule.id for d in state.diagnostics if d.is_error})
        return None, ", ".join(errs)
    return state.plan, ""


def prepare(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """Plan every run and turn a TFLOP/s measurement into seconds with the plan's model FLOPs
    (Megatron's count). A published row whose layout breaks a rule is dropped with a note; a
    run of the user's own (a spec CSV row, a log) that does is a :class:`CalibrateError` (it
    was measured, so trainc's rules or the row are wrong: either way the fit would be). The one
    exception is the memory verdict alone (TRC401): the memory estimate carries an error band
    (trainc.compiler.fit.OOM_MARGIN) and a run that was measured did fit, so it is kept,
    flagged (``Run.memory_flagged``) and named in a warning note, not refused."""
    kept, notes, bad = [], [], []
    for r in runs:
        plan, why = _plan(r.spec, fit=not r.published)
        if plan is None and why == "TRC401" and not r.published:
            plan, why = _plan(r.spec, fit=False)
            if plan is not None:
                r.memory_flagged = True
                notes.append(
                    f"warning: {r.name}: the memory model calls it a sure OOM (TRC401) "
                    "but it was measured: kept and flagged; check the spec is the run "
                    "that was measured, and record its peak "
                    "(torch.cuda.max_memory_allocated) to correct the memory model"
                )
        if plan is None:
            what = (
                "the memory model calls it a sure OOM, TRC401: is the spec the run that was "
                "measured?"
                if why == "TRC401"
                else f"its layout breaks {why}"
            )
            if not r.published:
                bad.append(f"{r.name} ({what})")
            else:
                notes.append(f"{r.name}: skipped ({what})")
            continue
        r.plan = plan
        if r.measured_step_seconds < 0:  # TFLOP/s per GPU
            d = plan.derived
            flops = estimate(plan).flops_per_step
            if r.source.endswith(":noncausal"):  # the source counts the full s x s scores
                tr = plan.spec.training
                flops += (
                    spec_flop_terms(plan.spec, plan).core_per_s2
                    * tr.global_batch_size
                    * plan.spec.model.seq_length**2
                )
            r.measured_step_seconds = flops / (-r.measured_step_seconds * 1e12 * d.world_size)
        kept.append(r)
    if bad:
        raise CalibrateError(
            f"{len(bad)} run(s) do not compile: {'; '.join(bad)}; fix the spec or leave the row out"
        )
    return kept, notes


def check_one_cluster(runs: list[Run], names: Sequence[str]) -> None:
    """All runs must share the cluster's hardware (every cluster key but num_nodes and the
    fitted factors): one preset describes one cluster. Raises CalibrateError."""

    def hw(r: Run) -> dict[str, Any]:
        assert r.plan is not None
        d = dict(spec_to_dict(r.plan.spec)["cluster"])
        for k in ("num_nodes", *names, "step_time_p10_ratio", "step_time_p90_ratio"):
            d.pop(k, None)
        return d

    first = hw(runs[0])
    for r in runs[1:]:
        other = hw(r)
        if other != first:
            diff = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
            raise CalibrateError(
                f"{r.name} runs on another cluster than {runs[0].name} ({', '.join(diff)} "
                "differ): calibrate one cluster at a time (e.g. --where gpu_type=H100)"
            )


def step_estimate(plan: Plan, factors: dict[str, float]) -> float:
    """The full estimator's step time (seconds) of ``plan`` with the cluster ``factors``."""
    changes: dict[str, Any] = dict(factors)
    cl = dataclasses.replace(plan.spec.cluster, **changes)
    spec = dataclasses.replace(plan.spec, cluster=cl)
    return float(estimate(dataclasses.replace(plan, spec=spec)).step_time_seconds)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation between order statistics (numpy's
    default 'linear' method)."""
    v = sorted(values)
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def residual_band(ratios: Sequence[float]) -> tuple[float, float]:
    """The (p10, p90) band ``trainc calibrate`` writes into the preset (``step_time_p10_ratio``,
    ``step_time_p90_ratio``) from the runs' measured / fitted estimate ``ratios``: their 10th and
    90th percentile (:func:`percentile`), widened where they do not reach the floor
    :data:`BAND_FLOOR` around their median ``m``: ``p10 = min(fitted p10, 0.95 m)``,
    ``p90 = max(fitted p90, 1.05 m)``. An end already beyond the floor is kept as fitted. After a
    fit ``m`` is about 1; when the fitted factors cannot reach the runs (``--factors`` holds some
    fixed, every run slower than the model) the band stays around where the runs are.

    Why a floor: measured step times of one layout vary by about 5-9 % between jobs, containers
    and clusters (run-to-run variability of large jobs; trainc/conf/step_time_band.yaml, issue
    14), so no estimate is surer than about +-5 %, however well the factors fit. A fit to a few
    runs (2-3) matches them almost exactly, and percentiles interpolated between so few points
    give a band such as 0.99-1.01: it would overstate the confidence of every estimate the
    preset carries, and shrink the planner's tie band (half the band's width) to 1 %.

    >>> residual_band([0.99, 1.01])
    (0.95, 1.05)
    >>> residual_band([0.9, 0.9, 1.2, 1.2])
    (0.9, 1.2)
    >>> residual_band([0.9, 1.0, 1.0, 1.01])
    (0.93, 1.05)
    >>> tuple(round(x, 4) for x in residual_band([1.19, 1.2, 1.21]))  # all slower: around 1.2
    (1.14, 1.26)
    """
    m = percentile(ratios, 0.5)
    return (
        min(percentile(ratios, 0.1), round(BAND_FLOOR[0] * m, 12)),
        max(percentile(ratios, 0.9), round(BAND_FLOOR[1] * m, 12)),
    )


def band_note(runs: int, fitted: tuple[float, float], band: tuple[float, float]) -> str | None:
    """The calibrate note on the band: with fewer than :data:`FEW_RUNS` runs, that it rests on
    ``runs`` runs and where it was widened to the floor; with more, only a widening; else None.
    ``fitted``: the runs' p10 and p90, ``band``: :func:`residual_band`'s."""
    floor = (
        f"the floor (p10 at most {BAND_FLOOR[0]:g} x, p90 at least {BAND_FLOOR[1]:g} x the "
        "median ratio: run-to-run variability of large jobs is about 5-9 %)"
    )
    ends = [
        f"{name} {f:.3f} -> {b:.3f}"
        for name, f, b in zip(("p10", "p90"), fitted, band, strict=True)
        if b != f
    ]
    widened = f"widened to {floor} where it did not reach it: {', '.join(ends)}"
    if runs < FEW_RUNS:
        head = (
            f"the step-time band rests on {runs} run(s) (measured / estimated p10 "
            f"{fitted[0]:.3f}, p90 {fitted[1]:.3f})"
        )
        return f"{head}; {widened}" if ends else f"{head}; kept: it reaches beyond {floor}"
    if ends:
        return f"the fitted step-time band (p10 {fitted[0]:.3f}, p90 {fitted[1]:.3f}) {widened}"
    return None


def nelder_mead(
    f: Callable[[list[float]], float],
    x0: list[float],
    *,
    step: float = 0.5,
    max_evals: int = 600,
    xtol: float = 1e-6,
    ftol: float = 1e-12,
) -> tuple[list[float], float, int]:
    """Minimise ``f`` from ``x0`` (Nelder and Mead 1965; coefficients 1, 2, 0.5, 0.5). Returns
    (x, f(x), evaluations)."""
    n = len(x0)
    simplex = [list(x0)] + [
        [x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)
    ]
    vals = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = sorted(range(n + 1), key=lambda i: vals[i])
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        if (
            abs(vals[-1] - vals[0]) <= ftol
            and max(abs(a - b) for x in simplex[1:] for a, b in zip(x, simplex[0], strict=True))
            <= xtol
        ):
            break
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(refl)
        evals += 1
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(exp)
            evals += 1
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(con)
            evals += 1
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for x, b in zip(p, best, strict=True)] for p in simplex[1:]
                ]
                vals = [vals[0]] + [f(x) for x in simplex[1:]]
                evals += n
    i = min(range(n + 1), key=lambda k: vals[k])
    return simplex[i], vals[i], evals


def _reflect(x: float, lo: float, hi: float) -> float:
    """``x`` folded into [lo, hi] by reflection at the bounds (a bounded search without the flat
    ends a logistic map has: the simplex never stalls against a bound)."""
    w = hi - lo
    t = (x - lo) / w % 2.0
    return lo + w * (2.0 - t if t > 1.0 else t)


def near_bound(value: float, lo: float, hi: float, tol: float = AT_BOUND_TOL) -> float | None:
    """The bound of [lo, hi] that ``value`` lies within ``tol`` x (hi - lo) of, else None.

    >>> near_bound(0.0, 0.0, 1.0), near_bound(0.0004, 0.0, 1.0), near_bound(4999.5, 0.0, 5000.0)
    (0.0, 0.0, 5000.0)
    >>> near_bound(0.0011, 0.0, 1.0), near_bound(0.051, 0.05, 1.0), near_bound(0.5, 0.0, 1.0)
    (None, None, None)
    """
    if value - lo <= tol * (hi - lo):
        return lo
    if hi - value <= tol * (hi - lo):
        return hi
    return None


def supported(rms_without: float, rms_with: float, n_runs: int) -> bool:
    """Whether freeing one more factor is supported by ``n_runs`` runs: it lowers the RMS log
    error of the step time from ``rms_without`` to ``rms_with`` by more than UNCONSTRAINED_RMS
    (run-to-run variability of large jobs is 5-9 %, so a smaller gain is noise) and by enough
    that the Bayesian information criterion prefers it (Schwarz 1978, Ann. Statist. 6(2):
    ``n ln(SSE_without / SSE_with) > ln n`` for one more parameter under Gaussian errors; the
    SSE ratio is the squared RMS ratio).

    >>> supported(0.174, 0.0145, 6), supported(0.064, 0.057, 9), supported(0.02, 0.016, 100)
    (True, False, False)
    """
    if rms_without - rms_with <= UNCONSTRAINED_RMS:
        return False
    if rms_with <= 0:
        return True
    return n_runs * 2 * math.log(rms_without / rms_with) > math.log(max(n_runs, 2))


def _minimise(
    loss_of: Callable[[dict[str, float]], float],
    names: Sequence[str],
    x0: dict[str, float],
    known: dict[str, tuple[float, float]],
    max_evals: int,
) -> tuple[dict[str, float], int]:
    """Minimise ``loss_of`` over the factors ``names`` from ``x0`` within their bounds
    ``known`` (Nelder-Mead, restarted from its best point while it improves; see the module
    docstring). Returns (the factors, evaluations); integer factors are rounded."""
    # search coordinates: each factor in units of its start value (or a tenth of its range)
    scale = {n: abs(x0[n]) if x0[n] else 0.1 * (known[n][1] - known[n][0]) for n in names}

    def factors_of(u: list[float]) -> dict[str, float]:
        return {n: _reflect(v * scale[n], *known[n]) for n, v in zip(names, u, strict=True)}

    def loss(u: list[float]) -> float:
        return loss_of(factors_of(u))

    u = [_reflect(x0[n], *known[n]) / scale[n] for n in names]
    try:
        from scipy.optimize import (  # type: ignore[import-untyped,unused-ignore]
            minimize,  # optional: scipy's Nelder-Mead when installed
        )
    except ImportError:
        minimize = None
    evals, best = 0, math.inf
    for _ in range(RESTARTS):  # restarting from the best point with a fresh simplex (standard
        # practice: a collapsed simplex stalls on narrow valleys)
        if minimize is not None:
            res = minimize(
                lambda v: loss(list(v)),
                u,
                method="Nelder-Mead",
                options={"maxfev": max_evals, "xatol": 1e-7, "fatol": 1e-14},
            )
            u, val, nfev = [float(v) for v in res.x], float(res.fun), int(res.nfev)
        else:
            u, val, nfev = nelder_mead(loss, u, step=0.3, max_evals=max_evals)
        evals += nfev
        if val >= best - 1e-12 * max(1.0, best):
            break
        best = val
    after = factors_of(u)
    for n in INT_FACTORS & set(after):
        after[n] = float(round(after[n]))
    return after, evals


def fit(
    runs: list[Run],
    names: Sequence[str] | None = None,
    start: dict[str, float] | None = None,
    max_evals: int = 600,
) -> FitResult:
    """Fit the factors ``names`` (default: :func:`default_factors`) to planned ``runs``
    (:func:`prepare`); ``start``: the initial values (default: the first run's cluster)."""
    if not runs:
        raise CalibrateError("no run to fit")
    assert all(r.plan is not None for r in runs)
    spec0 = runs[0].plan.spec  # type: ignore[union-attr]
    known = factors_for(spec0.cluster.time_model)
    names_given = bool(names)
    names = list(names or default_factors(runs))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CalibrateError(f"--factors names {', '.join(twice)} more than once")
    idle = [n for n in names if n in known and n not in default_factors(runs)]
    if idle:
        raise CalibrateError(
            f"no run exercises {', '.join(idle)} (fp8_gemm_efficiency needs an FP8/FP4 run, "
            "moe_layer_overhead_us an MoE run): the fit would leave it where it is; drop it "
            "from --factors"
        )
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CalibrateError(
            f"unknown factor(s) {', '.join(unknown)} for time_model "
            f"{spec0.cluster.time_model.value}; known: {', '.join(known)}"
        )
    # repeats of one spec measure its noise, not another direction: count distinct specs
    distinct = len({r.plan.spec_hash for r in runs})  # type: ignore[union-attr]
    if distinct < len(names):
        of = f" of {distinct} distinct spec(s)" if distinct < len(runs) else ""
        raise CalibrateError(
            f"{len(runs)} run(s){of} for {len(names)} free factor(s): the fit is "
            "under-determined (many factor values match the runs equally well); pass --factors "
            f"with at most {distinct} of: {','.join(names)}, or add runs of other layouts"
        )
    before = {n: factor_value(spec0, n) for n in names}
    x0 = dict(start or before)
    meas = [math.log(r.measured_step_seconds) for r in runs]

    def estimates(factors: dict[str, float]) -> list[float]:
        return [step_estimate(r.plan, factors) for r in runs]  # type: ignore[arg-type]

    def loss_of(fac: dict[str, float]) -> float:
        est = estimates(fac)
        if any(e <= 0 or not math.isfinite(e) for e in est):
            return 1e30
        return sum((math.log(e) - m) ** 2 for e, m in zip(est, meas, strict=True))

    notes: list[str] = []
    n_runs = len(runs)

    def rms_of(fac: dict[str, float]) -> float:
        return math.sqrt(loss_of(fac) / n_runs)

    def refit(free: Sequence[str], at: dict[str, float]) -> tuple[dict[str, float], int]:
        """``at`` with the factors ``free`` fitted (the others held at their ``at`` values)."""
        got, ev = _minimise(
            lambda f: loss_of({**at, **f}), free, {m: at[m] for m in free}, known, max_evals
        )
        return {**at, **got}, ev

    # Factors the runs do not constrain (runs that barely communicate say nothing about
    # comm_efficiency; several factors trade off along one direction, as a uniform slowdown
    # that the GEMM, attention and communication factors can each absorb) wander to wherever
    # the search stops, a bound typically, and the preset then prices other layouts with them.
    # With the default factors the fit therefore selects forward: from the start values, it
    # frees the factor whose fit lowers the RMS log error most, then the next, while the runs
    # support each (:func:`supported`: a gain above UNCONSTRAINED_RMS that the BIC accepts);
    # the rest keep their start values and are named. --factors fits exactly the named ones
    # and names those the same test does not support against fixing them at the start value.
    if names_given:
        after, evals = _minimise(loss_of, names, x0, known, max_evals)
        base = rms_of(after)
        free = list(names)
        for n in names if len(names) > 1 else []:
            trial, ev = refit([m for m in names if m != n], {**after, n: x0[n]})
            evals += ev
            cost = rms_of(trial) - base
            if not supported(rms_of(trial), base, n_runs):
                notes.append(
                    f"the runs hardly constrain {n}: fixed at its start value "
                    f"{x0[n]:g} with the others refitted, the RMS log error changes "
                    f"by {cost:+.4f} (fitted: {after[n]:g}); fit it from runs where it "
                    "matters, or leave it out of --factors"
                )
    else:
        after, evals, free = dict(x0), 0, []
        while len(free) < len(names):
            base = rms_of(after)
            trials = []
            for n in (m for m in names if m not in free):
                trial, ev = refit([*free, n], after)
                evals += ev
                trials.append((base - rms_of(trial), n, trial))
            gain, n, trial = max(trials, key=lambda t: (t[0], -names.index(t[1])))
            if not supported(base, base - gain, n_runs):
                break
            free.append(n)
            after = trial
        free = [n for n in names if n in free]
        if free:  # all selected factors together, from the start values
            after, ev = refit(free, dict(x0))
            evals += ev
        kept = [n for n in names if n not in free]
        if kept:
            notes.append(
                f"the runs do not constrain {', '.join(kept)}: kept at the start "
                "value(s) ("
                + ", ".join(f"{n} {x0[n]:g}" for n in kept)
                + "): freeing one more factor does not lower the RMS log error by "
                f"more than {UNCONSTRAINED_RMS} nor by enough for {n_runs} run(s) "
                "(the Bayesian information criterion); name one in --factors to fit "
                "it anyway"
            )
    # a factor at its bound: the search approaches a bound the runs push it against only to
    # within its tolerance, and a value near a bound may be a true interior optimum. Near a
    # bound (near_bound), the factor is at the bound when the bound itself fits no worse: it is
    # set there and a note says so; otherwise it stays where the fit put it, without a note.
    for n in free:
        lo, hi = known[n]
        b = near_bound(after[n], lo, hi)
        if b is None:
            continue
        trial = {**after, n: b}
        if b == after[n] or loss_of(trial) <= loss_of(after):
            after = trial
            notes.append(
                f"{n} ended at its {'lower' if b == lo else 'upper'} bound {b:g} "
                f"(range {lo:g}..{hi:g}): the runs push it there or do not constrain "
                "it"
            )
    eb, ea = estimates(before), estimates(after)
    ratios = [r.measured_step_seconds / e for r, e in zip(runs, ea, strict=True)]

    def rms(est: list[float]) -> float:
        return math.sqrt(
            sum((math.log(e) - m) ** 2 for e, m in zip(est, meas, strict=True)) / len(meas)
        )

    fitted = (percentile(ratios, 0.1), percentile(ratios, 0.9))
    band = residual_band(ratios)
    note = band_note(len(runs), fitted, band)
    if note:
        notes.append(note)
    return FitResult(
        names,
        before,
        after,
        eb,
        ea,
        p10_ratio=band[0],
        p90_ratio=band[1],
        fitted_p10_ratio=fitted[0],
        fitted_p90_ratio=fitted[1],
        rms_log_before=rms(eb),
        rms_log_after=rms(ea),
        evaluations=evals,
        notes=notes,
    )


def check_agreement(runs: Sequence[Run], result: FitResult) -> None:
    """The sanity rule of a fit: after it, every run's measured / estimated step time lies
    within :data:`AGREEMENT` (0.5..2). A run outside is one the time model cannot describe with
    any factors in their ranges (a wrong measurement, unit or spec): the factors then end
    wherever that run drags them and the preset would mislead every estimate. Raises
    CalibrateError naming the worst runs (at most 3) and their ratios."""
    lo, hi = AGREEMENT
    ratios = [
        (r.measured_step_seconds / e, r.name)
        for r, e in zip(runs, result.estimates_after, strict=True)
    ]
    bad = sorted(
        ((x, n) for x, n in ratios if not lo <= x <= hi), key=lambda t: -abs(math.log(t[0]))
    )
    if not bad:
        return
    shown = ", ".join(f"{n} {x:.4g}" for x, n in bad[:3]) + (" ..." if len(bad) > 3 else "")
    raise CalibrateError(
        f"after the fit {len(bad)} of {len(ratios)} run(s) disagree with the time model by "
        f"more than {hi:g}x (measured / estimated outside {lo:g}..{hi:g}): {shown}; check their "
        "measurements (seconds per step) and specs, or leave them out: no preset is written"
    )


# --- output -------------------------------------------------------------------------------


def preset_dict(run: Run, result: FitResult) -> dict[str, Any]:
    """The cluster preset (trainc/conf/cluster format): the run's cluster keys that differ from
    the schema's defaults (num_nodes left to the spec), the fitted factors and the band."""
    raw = spec_to_dict(run.spec)["cluster"]
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(ClusterSpec)
        if f.default is not dataclasses.MISSING
    }
    out: dict[str, Any] = {
        k: v
        for k, v in raw.items()
        if k != "num_nodes"
        and v is not None
        and defaults.get(k, object()) != v
        and k not in result.names
    }
    for n in result.names:
        v = result.after[n]
        out[n] = round(v) if n in INT_FACTORS else float(f"{v:.4g}")
    out["step_time_p10_ratio"] = float(f"{result.p10_ratio:.4g}")
    out["step_time_p90_ratio"] = float(f"{result.p90_ratio:.4g}")
    return out


def preset_text(runs: list[Run], result: FitResult) -> str:
    """The preset YAML with a comment saying where its factors come from."""
    head = [
        f"# Calibrated by trainc calibrate from {len(runs)} measured run(s): "
        f"{', '.join(r.name for r in runs[:6])}{' ...' if len(runs) > 6 else ''}.",
        f"# RMS log error of the step time: {result.rms_log_before:.3f} before, "
        f"{result.rms_log_after:.3f} after; measured / estimated p10 "
        f"{result.fitted_p10_ratio:.3f}, p90 {result.fitted_p90_ratio:.3f}; the band below "
        f"has p10 at most {BAND_FLOOR[0]:g} x, p90 at least {BAND_FLOOR[1]:g} x their median.",
        "# num_nodes is the job's choice: set cluster.num_nodes in the spec.",
    ]
    body = yaml.safe_dump(preset_dict(runs[0], result), sort_keys=False)
    return "\n".join(head) + "\n" + body
