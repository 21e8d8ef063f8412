"""The inputs of ``trainc calibrate``, each read into a list of :class:`~trainc.calibrate.runs.Run`
(a spec and a measured step time): a CSV of runs or published runs (:func:`runs_from_csv`), a
Megatron-LM training log (:func:`parse_megatron_log`) and a trainc worker log
(:func:`parse_worker_log`); :func:`read_runs` picks the reader by extension and content. The
formats are described in :mod:`trainc.calibrate`."""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from trainc.calibrate.published import flop_convention, row_to_spec_reason
from trainc.calibrate.runs import CalibrateError, Run
from trainc.compiler.diagnostics import did_you_mean
from trainc.compiler.load import load_spec
from trainc.compiler.plan import recorded_spec
from trainc.launch.worker.steplog import step_times
from trainc.schemas import TrainSpec

#: The columns that make a CSV a published-runs table (bench/published_runs.csv;
#: the converter, :mod:`trainc.calibrate.published`, fills a known model's shape from its name).
PUBLISHED_COLUMNS = ("model", "gpus")


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


def _read_csv(
    path: Path,
) -> tuple[list[tuple[int, dict[str, str]]], list[tuple[int, int]], list[str]]:
    """The CSV's rows as (line, column -> stripped text), the rows with cells past the header's
    columns as (line, how many), and the header (stripped, lower case). Raises CalibrateError
    when the file cannot be read."""
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
    return rows, extra, header


def _where_filters(where: Sequence[str]) -> list[tuple[str, str]]:
    """``--where COLUMN=TEXT`` filters as (column, text), both lower case. Raises
    CalibrateError on a filter without ``=``."""
    filters = []
    for w in where:
        col, sep, text = w.partition("=")
        if not sep:
            raise CalibrateError(f"--where {w!r}: expected COLUMN=TEXT")
        filters.append((col.strip().lower(), text.lower()))
    return filters


def _is_spec_csv(path: Path, header: list[str]) -> bool:
    """Whether the CSV is one of spec files (a ``spec`` column, no ``global_batch``) rather
    than a published-runs table. Raises CalibrateError for a header that is neither, or a
    spec CSV without a measured column."""
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
    return spec_csv


def _spec_row(
    path: Path,
    i: int,
    row: dict[str, str],
    header: list[str],
    overrides: Sequence[str],
    bad: str | None,
) -> tuple[TrainSpec | None, str]:
    """The spec of row ``i`` that names a spec file (relative to the CSV's folder): (spec, "")
    or (None, what is wrong with the row); ``bad``: :func:`bad_measurement`'s verdict."""
    spec_file = path.parent / row["spec"]
    if not spec_file.is_file():
        where_ = f" ({spec_file})" if str(spec_file) != row["spec"] else ""
        return None, (
            f"line {i}: spec file {row['spec']} not found{where_}" + (f"; {bad}" if bad else "")
        )
    if bad:
        return None, f"line {i}: {bad}"
    if not _cells(row):
        present = [c for c in MEASURED_COLUMNS if c in header]
        return None, (
            f"line {i}: no measurement ({' and '.join(present)} "
            f"{'is' if len(present) == 1 else 'are'} empty)"
        )
    spec, why = _load(spec_file, overrides)
    if spec is None:
        return None, f"line {i}: spec file {row['spec']} does not load ({why})"
    return spec, ""


def _published_row(
    row: dict[str, str], overrides: Sequence[str]
) -> tuple[TrainSpec | None, str, str]:
    """A published-runs row through the converter (:mod:`trainc.calibrate.published`):
    (spec, the model and system for the run's name, "") or (None, that or "", why the row is
    skipped)."""
    if not row.get("global_batch"):  # the converter would guess it
        return None, "", "global_batch not published"
    data, why = row_to_spec_reason(row)
    if data is None:
        return None, "", why
    system = f" {row.get('model', '')} {row.get('gpus', '')}x{row.get('gpu_type', '')}"
    spec, why = _spec_from_dict(data, overrides)
    return spec, system, why


def _row_run(
    path: Path,
    i: int,
    row: dict[str, str],
    header: list[str],
    spec_csv: bool,
    overrides: Sequence[str],
) -> tuple[Run | None, str, str]:
    """Row ``i`` as a run: (run, "", ""), or (None, what is wrong with it, "") for a row meant
    as a run that cannot be one, or (None, "", the note) for a row left out of scope."""
    name = f"{path.name}:{i}"
    bad = bad_measurement(row)
    if spec_csv and not row.get("spec"):
        return None, f"line {i}: the spec cell is empty", ""
    if row.get("spec"):
        name += f" {row['spec']}"
        spec, error = _spec_row(path, i, row, header, overrides, bad)
        if spec is None:
            return None, error, ""
    else:
        if bad:
            return None, f"line {i}: {bad}", ""
        spec, system, why = _published_row(row, overrides)
        name += system
        if spec is None:
            return None, "", f"{name}: skipped ({why})"
    measured, kind = _measured(row, spec)
    clash = _disagree(row, spec) if spec_csv else None
    if clash:
        return None, f"line {i}: {clash}", ""
    if measured is None:  # a published-runs row without a measurement (spec rows: above)
        return (
            None,
            "",
            (f"{name}: skipped (no measured step_time_s, tokens_per_s_per_gpu or tflops_per_gpu)"),
        )
    return Run(name.strip(), spec, measured, kind, published=not spec_csv), "", ""


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
    rows, extra, header = _read_csv(path)
    filters = _where_filters(where)
    spec_csv = _is_spec_csv(path, header)
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
        run, error, skipped = _row_run(path, i, row, header, spec_csv, overrides)
        if error:
            errors.append(error)
        elif skipped:
            notes.append(skipped)
        elif run is not None:
            runs.append(run)
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


#: The worker's first line (its start-up log, :mod:`trainc.launch.worker.runtime`):
#: ``trainc-worker: plan=PATH engine=E device=D shrink=S ...``.
_WORKER_HEAD = re.compile(r"trainc-worker: (plan=\S+[^\n]*)")


def worker_head(text: str) -> dict[str, str]:
    """The ``key=value`` fields of a worker log's first line (``trainc-worker: plan=PATH
    engine=E device=D shrink=S ...``, :mod:`trainc.launch.worker.runtime`); {} without one."""
    m = _WORKER_HEAD.search(text)
    return dict(f.split("=", 1) for f in m.group(1).split() if "=" in f) if m else {}


def worker_step_times(text: str) -> list[float]:
    """The ``step_time_s`` (seconds) of every step line of a worker log, in log order: the
    step-line format's one owner, :func:`trainc.launch.worker.steplog.step_times`, read
    leniently (a line may carry a launcher prefix). Raises ValueError on a value that is not a
    number."""
    return step_times(text)


def _is_worker_log(text: str) -> bool:
    """Whether ``text`` is a trainc worker log (its ``trainc-worker:`` lines or a step line)."""
    return "trainc-worker:" in text or bool(worker_step_times(text))


def _check_worker_device(path: Path, head: dict[str, str]) -> None:
    """Raise CalibrateError for a worker run that is not the plan's cluster's: a CPU run or a
    shrunk one (:func:`worker_head`'s ``device`` and ``shrink``)."""
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


def _plan_spec(plan_path: Path, overrides: Sequence[str]) -> TrainSpec:
    """The spec recorded in the plan.json at ``plan_path``, with ``overrides``. Raises
    CalibrateError."""
    try:
        plan = json.loads(_read(plan_path))
        data = recorded_spec(plan)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CalibrateError(f"{plan_path}: not a trainc plan.json ({e})") from e
    spec, why = _spec_from_dict(data, overrides)
    if spec is None:
        raise CalibrateError(f"{plan_path}: {why}")
    return spec


def parse_worker_log(
    path: Path, plan_path: Path | None = None, overrides: Sequence[str] = ()
) -> Run:
    """One run from a trainc worker log: the plan.json it names (or ``plan_path``) gives the
    spec, its ``step_time_s`` values the measured step time. Raises CalibrateError."""
    text = _read(path)
    head = worker_head(text)
    _check_worker_device(path, head)
    times = worker_step_times(text)
    step = _median_after_first(times)
    if step is None:
        raise CalibrateError(f"{path}: no 'step=N ... step_time_s=X' line of the trainc worker")
    if plan_path is None:
        if "plan" not in head:
            raise CalibrateError(f"{path}: no 'trainc-worker: plan=PATH' line (pass --plan)")
        plan_path = Path(head["plan"])
    spec = _plan_spec(plan_path, overrides)
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
        elif _is_worker_log(text):
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
