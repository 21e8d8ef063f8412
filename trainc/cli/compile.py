"""``trainc compile``, ``trainc lint`` and ``trainc explain``: the commands that run the passes
over a spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainc.cli._common import (
    EXIT_ENV,
    EXIT_OK,
    EXIT_SPEC,
    _failed,
    _json_record,
    _print_text,
    _split,
    dumps,
    out,
)


def _expand_specs(items: list[str]) -> list[str]:
    """Spec arguments as files: a folder stands for its ``*.yaml`` / ``*.yml`` files (not its
    subfolders: model and cluster presets often sit there), a pattern that names no file (a
    quoted ``'specs/*.yaml'`` in CI) for its matches; each in sorted order. A folder without a
    spec and a pattern without a match stay as given: each gets its TRC000 like any unreadable
    spec path."""
    import glob

    out: list[str] = []
    for item in items:
        path = Path(item)
        found: list[str] = []
        if item != "-" and path.is_dir():
            found = sorted(
                str(f) for f in path.iterdir() if f.is_file() and f.suffix in (".yaml", ".yml")
            )
        elif item != "-" and not path.exists() and glob.has_magic(item):
            found = sorted(glob.glob(item))
        out += found or [item]
    return out


def _lint(args: argparse.Namespace) -> int:
    """``trainc lint SPEC... [KEY=VALUE ...]``: every spec's diagnostics; writes nothing."""
    from trainc.cli.slurm import _print_slurm_check, _slurm_check
    from trainc.compiler.pipeline import compile_spec

    specs, overrides = _split(args.items)
    if not specs:
        print("trainc lint: no spec file given", file=sys.stderr)
        return EXIT_SPEC
    specs = _expand_specs(specs)
    if specs.count("-") > 1:
        print("trainc lint: standard input (-) can be given once", file=sys.stderr)
        return EXIT_SPEC
    results = [compile_spec(s, overrides, emit_files=args.slurm) for s in specs]
    slurm = [_slurm_check(r) for r in results] if args.slurm else [None] * len(results)
    if args.format in ("sarif", "github"):
        from trainc.ecosystem.lint_formats import render_github, render_sarif

        failed = [
            _failed(r, args.werror) or bool(c and c["ok"] is False)
            for r, c in zip(results, slurm, strict=True)
        ]
        out(
            render_sarif(results) if args.format == "sarif" else render_github(results, failed),
            end="",
        )
        return EXIT_SPEC if any(failed) else EXIT_OK
    if args.format == "json":
        records = [_json_record(r, args.werror) for r in results]
        for rec, chk in zip(records, slurm, strict=True):
            if chk is not None:
                rec["slurm"] = chk
                rec["ok"] = rec["ok"] and chk["ok"] is not False
        out(dumps({"specs": records}, indent=2))
    else:
        for r, chk in zip(results, slurm, strict=True):
            _print_text(r)
            n_err = sum(d.is_error for d in r.diagnostics)
            n_warn = sum(d.severity.value == "warning" for d in r.diagnostics)
            verdict = "FAILED" if _failed(r, args.werror) else "ok"
            out(f"{r.path}: {verdict} ({n_err} error(s), {n_warn} warning(s))")
            if chk is not None:
                _print_slurm_check(r.path, chk)
    if any(_failed(r, args.werror) for r in results) or any(c and c["ok"] is False for c in slurm):
        return EXIT_SPEC
    if args.werror and any(c and c["ok"] is None for c in slurm):
        return EXIT_ENV  # --slurm asked for a check that could not be made
    return EXIT_OK


def _compile(args: argparse.Namespace) -> int:
    """``trainc compile SPEC [KEY=VALUE ...] [-o OUTDIR]``: check, then write the artifacts."""
    from trainc.compiler.emit.kubernetes import not_written
    from trainc.compiler.pipeline import compile_spec
    from trainc.compiler.support.write import write_artifacts

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print(
            f"trainc compile: expected one spec file, got {len(specs)}: {' '.join(specs)}",
            file=sys.stderr,
        )
        return EXIT_SPEC
    result = compile_spec(specs[0], overrides)
    failed = _failed(result, args.werror)
    if args.format == "json":
        out(dumps({"specs": [_json_record(result, args.werror)]}, indent=2))
    else:
        _print_text(result)
    if failed:
        if args.format == "text":
            print(f"trainc compile: {specs[0]}: errors found, nothing written", file=sys.stderr)
        return EXIT_SPEC
    assert result.plan is not None
    outdir = args.output or f"out/{result.plan['spec']['name']}"
    # OutdirRefused (exit 2) and LaunchError (exit 4) are reported by main()
    names = write_artifacts(
        result.files,
        result.plan,
        outdir,
        force=args.force,
        keep=() if specs[0] == "-" else (specs[0],),
    )
    if args.format == "text":
        out(f"wrote {len(names)} files to {outdir}: {', '.join(names)}")
        missing = not_written(result.plan)
        if missing:
            out(missing)
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    """``trainc explain SPEC``: the estimates and the rank map as terminal tables."""
    from trainc.compiler.estimate.explain import explain_tables
    from trainc.compiler.pipeline import compile_spec
    from trainc.console import Console

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print(
            f"trainc explain: expected one spec file, got {len(specs)}: {' '.join(specs)}",
            file=sys.stderr,
        )
        return EXIT_SPEC
    result = compile_spec(specs[0], overrides, emit_files=False)
    _print_text(result)
    if result.plan is None or not result.plan.get("estimates"):
        print(f"trainc explain: {specs[0]}: errors found", file=sys.stderr)
        return EXIT_SPEC
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # pipes and files: do not squeeze the tables to 80 columns
    for table in explain_tables(result.plan, args.ranks):
        console.print(table)
    return EXIT_SPEC if not result.ok else EXIT_OK
