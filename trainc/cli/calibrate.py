"""``trainc calibrate``: fit a cluster profile's time-model factors to measured runs, print
estimate vs measured per run before and after, and write the result as a cluster preset."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from trainc.cli._common import EXIT_OK, EXIT_SPEC, OutputError, _split, dumps, out, write_file


def _calibrate(args: argparse.Namespace) -> int:
    """``trainc calibrate RUNS... [KEY=VALUE ...] -o PRESET.yaml [--factors a,b] [--force]``."""
    from trainc.calibrate import (
        CalibrateError,
        check_agreement,
        check_one_cluster,
        fit,
        prepare,
        preset_dict,
        preset_text,
        read_runs,
    )

    paths, overrides = _split(args.items)
    target = args.output
    if (
        target
        and os.path.lexists(target)
        and (os.path.islink(target) or not os.path.isfile(target))
    ):
        print(
            f"trainc calibrate: {target} exists and is not a plain file; trainc never "
            "replaces it (give another -o)",
            file=sys.stderr,
        )
        return EXIT_SPEC
    if target and os.path.exists(target) and not args.force:
        print(f"trainc calibrate: {target} exists; pass --force to replace it", file=sys.stderr)
        return EXIT_SPEC
    names = (
        [n.strip() for n in args.factors.split(",") if n.strip()]
        if args.factors is not None
        else None
    )
    if names == []:
        print(
            "trainc calibrate: error: --factors names no factor (give A,B or leave it out "
            "for the defaults)",
            file=sys.stderr,
        )
        return EXIT_SPEC
    try:
        runs, notes = read_runs(
            paths,
            cluster=args.cluster,
            gpus_per_node=args.gpus_per_node,
            plan_path=args.plan,
            overrides=overrides,
            where=args.where,
        )
        runs, more = prepare(runs)
        notes += more
        if not runs:
            raise CalibrateError(
                "no usable run (every input was skipped: see the notes above)"
                if notes
                else f"no run in {', '.join(paths)}: a CSV needs a header and at least one data "
                "row, a log at least one timed iteration after the first"
            )
        check_one_cluster(runs, names or [])
        result = fit(runs, names)
        check_agreement(runs, result)
    except CalibrateError as e:
        for n in notes if "notes" in locals() else []:
            print(_note_line(n), file=sys.stderr)
        print(f"trainc calibrate: error: {e}", file=sys.stderr)
        return EXIT_SPEC
    for n in notes + result.notes:
        print(_note_line(n), file=sys.stderr)
    if args.format == "json":
        out(dumps(_json(runs, result, preset_dict(runs[0], result)), indent=2, sort_keys=True))
    else:
        _print_table(runs, result)
    if target:
        try:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot write {target}: {e.strerror or e}") from e
        write_file(target, preset_text(runs, result))
        print(f"wrote {target}", file=sys.stderr)
    return EXIT_OK


def _json(runs: list[Any], result: Any, preset: dict[str, Any]) -> dict[str, Any]:
    return {
        "factors": {"before": result.before, "after": result.after},
        "runs": [
            {
                "name": r.name,
                "measured_step_time_s": r.measured_step_seconds,
                "estimate_before_s": b,
                "estimate_after_s": a,
                "memory_flagged": bool(getattr(r, "memory_flagged", False)),
            }
            for r, b, a in zip(runs, result.estimates_before, result.estimates_after, strict=True)
        ],
        "rms_log_error": {"before": result.rms_log_before, "after": result.rms_log_after},
        "measured_over_estimated": {"p10": result.fitted_p10_ratio, "p90": result.fitted_p90_ratio},
        "band": {"p10": result.p10_ratio, "p90": result.p90_ratio},
        "preset": preset,
    }


def _print_table(runs: list[Any], result: Any) -> None:
    from rich import box
    from rich.table import Table

    from trainc.calibrate import BAND_FLOOR
    from trainc.console import Console
    from trainc.planner.table import console_width

    console = Console(width=console_width())
    t = Table(title=f"trainc calibrate: {len(runs)} run(s)", box=box.SIMPLE_HEAD, show_edge=False)
    t.add_column("run", overflow="fold")
    for head in ("measured s", "before s", "before/meas", "after s", "after/meas"):
        t.add_column(head, justify="right")
    for r, b, a in zip(runs, result.estimates_before, result.estimates_after, strict=True):
        m = r.measured_step_seconds
        t.add_row(r.name, f"{m:.4g}", f"{b:.4g}", f"{b / m:.3f}", f"{a:.4g}", f"{a / m:.3f}")
    console.print(t)
    f = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for head in ("factor", "before", "after"):
        f.add_column(head, justify="left" if head == "factor" else "right")
    for n in result.names:
        f.add_row(n, f"{result.before[n]:.4g}", f"{result.after[n]:.4g}")
    console.print(f)
    console.print(
        f"RMS log error {result.rms_log_before:.3f} -> {result.rms_log_after:.3f}; "
        f"measured / estimated after the fit: p10 {result.fitted_p10_ratio:.3f}, "
        f"p90 {result.fitted_p90_ratio:.3f}"
    )
    lo, hi = BAND_FLOOR
    console.print(
        f"preset band (p10 at most {lo:g} x, p90 at least {hi:g} x the median): "
        f"p10 {result.p10_ratio:.3f}, p90 {result.p90_ratio:.3f}"
    )


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """The ``calibrate`` subcommand's arguments."""
    c = sub.add_parser("calibrate", help="fit a cluster preset's time factors to measured runs")
    c.add_argument(
        "items",
        nargs="+",
        metavar="RUNS... [KEY=VALUE ...]",
        help="CSV files (a spec column or the published-runs columns, with a "
        "measured step_time_s, tokens_per_s_per_gpu or tflops_per_gpu), Megatron-LM "
        "training logs, trainc worker logs; KEY=VALUE overrides every run's spec",
    )
    c.add_argument(
        "-o",
        "--output",
        metavar="PRESET.yaml",
        help="write the fitted cluster preset here (default: print the fit only)",
    )
    c.add_argument("--force", action="store_true", help="replace an existing PRESET.yaml")
    c.add_argument(
        "--factors",
        metavar="A,B",
        help="the cluster factors to fit (default: "
        "those of the runs' cluster.time_model that the runs exercise; kernels: "
        "gemm_efficiency,fp8_gemm_efficiency,attention_efficiency,"
        "moe_layer_overhead_us,layer_overhead_us,comm_efficiency,comm_overlap; "
        "seed: compute_efficiency,gemm_half_efficiency_tokens,layer_overhead_us,"
        "comm_overlap)",
    )
    c.add_argument(
        "--cluster",
        metavar="PRESET",
        help="the cluster preset of a Megatron-LM log's run (e.g. dgx-h100)",
    )
    c.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="GPUs per node of a Megatron-LM log's run (default: the preset's)",
    )
    c.add_argument(
        "--plan",
        metavar="PLAN_JSON",
        help="the plan.json of a trainc worker log (default: the path it names)",
    )
    c.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COLUMN=TEXT",
        help="only CSV rows whose COLUMN contains TEXT (repeatable)",
    )
    c.add_argument("--format", choices=("text", "json"), default="text")


def _note_line(note: str) -> str:
    """A note of :func:`trainc.calibrate.prepare` / ``fit`` as printed on stderr; a note
    that starts with ``warning: `` (a kept run the memory model calls an OOM) prints as one."""
    if note.startswith("warning: "):
        return f"trainc calibrate: {note}"
    return f"trainc calibrate: note: {note}"
