"""``trainc`` command line: compile, lint (and the commands later issues add).

Exit codes: 0 no errors (warnings allowed); 2 an error in a spec, a malformed spec, or a refused
OUTDIR; 3 an internal error (a bug: please report it with the printed spec hash); 4 the
environment refused (cannot write, launcher failed).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Sequence

from trainc import __version__

EXIT_OK, EXIT_SPEC, EXIT_INTERNAL, EXIT_ENV = 0, 2, 3, 4


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 on usage errors, which we keep
        self.print_usage(sys.stderr)
        self.exit(EXIT_SPEC, f"trainc: error: {message}\n")


def _split(items: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate spec paths from KEY=VALUE overrides (an item with '=' is an override)."""
    specs = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    return specs, overrides


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = _Parser(prog="trainc", description="Compile and lint distributed LLM training specs.")
    p.add_argument("--version", action="version", version=f"trainc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("compile", help="check a spec and write its artifacts")
    c.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    c.add_argument("-o", "--output", metavar="OUTDIR", help="default: out/<name>")
    c.add_argument("--force", action="store_true", help="replace a non-empty OUTDIR")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--werror", action="store_true", help="treat warnings as errors")

    lint = sub.add_parser("lint", help="check specs, write nothing")
    lint.add_argument("items", nargs="+", metavar="SPEC... [KEY=VALUE ...]")
    lint.add_argument("--format", choices=("text", "json"), default="text")
    lint.add_argument("--werror", action="store_true", help="treat warnings as errors")
    _add_plan_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainc`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "compile":
            return _compile(args)
        if args.command == "lint":
            return _lint(args)
        if args.command == "plan":
            return _plan(args)
    except KeyboardInterrupt:
        print("trainc: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug: say so, with what is needed to reproduce it
        print("trainc: internal error (this is a bug in trainc; please report it with the spec "
              "and this trace)", file=sys.stderr)
        traceback.print_exc()
        return EXIT_INTERNAL
    raise AssertionError(args.command)


def _failed(result, werror: bool) -> bool:  # type: ignore[no-untyped-def]
    if not result.ok:
        return True
    return werror and any(d.severity.value == "warning" for d in result.diagnostics)


def _print_text(result) -> None:  # type: ignore[no-untyped-def]
    from trainc.compiler.diagnostics import render_text

    text = render_text(result.diagnostics, path=result.path)
    if text:
        print(text, file=sys.stderr)


def _json_record(result, werror: bool) -> dict:  # type: ignore[no-untyped-def]
    return {"path": result.path, "ok": not _failed(result, werror),
            "diagnostics": [d.to_json() for d in result.diagnostics]}


def _lint(args: argparse.Namespace) -> int:
    from trainc.compiler.pipeline import compile_spec

    specs, overrides = _split(args.items)
    if not specs:
        print("trainc lint: no spec file given", file=sys.stderr)
        return EXIT_SPEC
    results = [compile_spec(s, overrides, emit_files=False) for s in specs]
    if args.format == "json":
        print(json.dumps({"specs": [_json_record(r, args.werror) for r in results]}, indent=2))
    else:
        for r in results:
            _print_text(r)
            n_err = sum(d.is_error for d in r.diagnostics)
            n_warn = sum(d.severity.value == "warning" for d in r.diagnostics)
            verdict = "FAILED" if _failed(r, args.werror) else "ok"
            print(f"{r.path}: {verdict} ({n_err} error(s), {n_warn} warning(s))")
    return EXIT_SPEC if any(_failed(r, args.werror) for r in results) else EXIT_OK


def _compile(args: argparse.Namespace) -> int:
    from trainc.compiler.pipeline import compile_spec
    from trainc.compiler.write import OutdirNotEmpty, write_artifacts
    from trainc.errors import LaunchError

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print(f"trainc compile: expected one spec file, got {len(specs)}: {' '.join(specs)}",
              file=sys.stderr)
        return EXIT_SPEC
    result = compile_spec(specs[0], overrides)
    failed = _failed(result, args.werror)
    if args.format == "json":
        print(json.dumps({"specs": [_json_record(result, args.werror)]}, indent=2))
    else:
        _print_text(result)
    if failed:
        if args.format == "text":
            print(f"trainc compile: {specs[0]}: errors found, nothing written", file=sys.stderr)
        return EXIT_SPEC
    assert result.plan is not None
    outdir = args.output or f"out/{result.plan['spec']['name']}"
    try:
        names = write_artifacts(result.files, result.plan, outdir, force=args.force)
    except OutdirNotEmpty as e:
        print(f"trainc compile: {e}", file=sys.stderr)
        return EXIT_SPEC
    except LaunchError as e:
        print(f"trainc compile: {e}", file=sys.stderr)
        return EXIT_ENV
    if args.format == "text":
        print(f"wrote {len(names)} files to {outdir}: {', '.join(names)}")
    return EXIT_OK


def _add_plan_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pl = sub.add_parser("plan", help="search the parallel layout for a spec")
    pl.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    pl.add_argument("--top", type=int, default=5, metavar="K")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    pl.add_argument("--apply", metavar="OUT.yaml", help="write the best layout as a spec")


def _plan(args: argparse.Namespace) -> int:
    from trainc.planner import applied_spec, plan_layouts, to_json

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print("trainc plan: expected one spec file", file=sys.stderr)
        return EXIT_SPEC
    res = plan_layouts(specs[0], overrides, top=max(1, args.top))
    if not res.ok:
        _print_text(res)
        return EXIT_SPEC
    if not res.planned:
        print(f"trainc plan: no layout of {specs[0]} fits ({res.num_candidates_evaluated} "
              "candidates evaluated); add nodes, GPUs with more memory, or a smaller batch",
              file=sys.stderr)
        return EXIT_SPEC
    if args.format == "json":
        print(json.dumps(to_json(res), indent=2, sort_keys=True))
    else:
        _plan_table(res)
    if args.apply:
        import yaml

        text = ("# written by trainc plan from " + specs[0] + "\n" +
                yaml.safe_dump(applied_spec(res.planned[0]), sort_keys=False))
        with open(args.apply, "w", encoding="utf-8") as fh:
            fh.write(text)
        if args.format == "text":
            print(f"wrote {args.apply}")
    return EXIT_OK


def _plan_table(res) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    from trainc.planner.search import summary

    table = Table(title=f"trainc plan: {res.path} ({res.num_candidates_evaluated:,} candidates "
                        f"evaluated, {res.num_fit:,} fit)")
    for col in ("#", "tp", "pp", "vpp", "cp", "ep", "dp", "mbs", "recompute", "zero",
                "GiB/GPU", "bubble", "step s", "tok/s", "MFU", "why"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(res.planned):
        s = summary(p.candidate)
        par, tr, e = s["parallel"], s["training"], p.estimates
        mem = e.get("memory_bytes", {}).get("total", 0) / 2**30
        table.add_row(str(i + 1), str(par["tp"]), _pp(par), str(par["vpp"]),
                      f"{par['cp']}" + (f" {par['cp_comm_type']}" if par["cp"] > 1 else ""),
                      str(par["ep"]), str(par["dp"]), str(tr["micro_batch_size"]),
                      tr["recompute"], str(par["zero_stage"]), f"{mem:.1f}",
                      _fmt(e.get("pipeline_bubble_fraction"), "{:.1%}"),
                      _fmt(e.get("step_time_seconds"), "{:.2f}"),
                      _fmt(e.get("tokens_per_second"), "{:,.0f}"),
                      _fmt(e.get("mfu"), "{:.1%}"), p.reason)
    Console(width=200).print(table)


def _pp(par: dict) -> str:  # type: ignore[type-arg]
    if par["pipeline_first_stage_layers"] is None:
        return str(par["pp"])
    return f"{par['pp']} ({par['pipeline_first_stage_layers']}/.../" \
           f"{par['pipeline_last_stage_layers']})"


def _fmt(v: object, fmt: str) -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "-"
