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

    run = sub.add_parser("run", help="run OUTDIR/torchrun.sh on this machine")
    run.add_argument("outdir", metavar="OUTDIR")
    run.add_argument("worker_args", nargs=argparse.REMAINDER,
                     help="extra arguments passed on to torchrun.sh (and so to the worker)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainc`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "compile":
            return _compile(args)
        if args.command == "lint":
            return _lint(args)
        if args.command == "run":
            return _run(args)
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


def _run(args: argparse.Namespace) -> int:
    """Start OUTDIR/torchrun.sh here; its output streams through; return its exit code.

    Exit 4 when the script is missing or cannot be started (the environment refused).
    """
    import os
    import subprocess

    script = os.path.join(args.outdir, "torchrun.sh")
    if not os.path.isfile(script):
        print(f"trainc run: {script}: not found (run `trainc compile SPEC -o {args.outdir}` "
              "first)", file=sys.stderr)
        return EXIT_ENV
    extra = [a for a in args.worker_args if a != "--"]
    try:
        proc = subprocess.Popen(["bash", script, *extra])
    except OSError as e:
        print(f"trainc run: cannot start {script}: {e}", file=sys.stderr)
        return EXIT_ENV
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 130
