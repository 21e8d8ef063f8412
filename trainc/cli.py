"""``trainc`` command line: compile, lint (and the commands later issues add).

Exit codes: 0 no errors (warnings allowed); 2 an error in a spec, a malformed spec, or a refused
OUTDIR; 3 an internal error (a bug: please report it with the printed spec hash); 4 the
environment refused (cannot write, launcher failed).
"""

from __future__ import annotations

import argparse
import json
import os
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
    lint.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text",
                      help="sarif: SARIF 2.1.0 for code scanning; github: workflow annotations")
    lint.add_argument("--werror", action="store_true", help="treat warnings as errors")
    lint.add_argument("--slurm", action="store_true",
                      help="also ask the reachable Slurm controller whether it would run each "
                      "spec's sbatch.sh (sbatch --test-only); warns when none is reachable")

    ex = sub.add_parser("explain", help="estimates and the rank map as terminal tables")
    ex.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    ex.add_argument("--ranks", type=int, default=None, metavar="N",
                    help="rows of the rank table (default: one node; at most 256)")
    _add_ecosystem_parsers(sub)
    _add_plan_parser(sub)
    _add_submit_parser(sub)

    run = sub.add_parser("run", help="run OUTDIR/torchrun.sh on this machine")
    run.add_argument("--node-rank", type=int, metavar="I", help="this machine is node I of a "
                     "multi-node plan (started once on every node; default: refused)")
    run.add_argument("--master-addr", metavar="HOST", help="address of node 0 (with --node-rank)")
    run.add_argument("outdir", metavar="OUTDIR")
    run.add_argument("worker_args", nargs=argparse.REMAINDER,
                     help="extra worker flags (e.g. --train-iters 20 --load DIR), passed to every "
                     "rank through TRAINC_WORKER_ARGS")
    return p


def _add_ecosystem_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``import-hf``, ``schema`` and ``diff`` (issue 8)."""
    imp = sub.add_parser("import-hf", help="turn a Hugging Face config.json into a model preset")
    imp.add_argument("config", metavar="CONFIG_JSON")
    imp.add_argument("-o", "--output", metavar="MODEL_YAML", help="default: print to stdout")
    imp.add_argument("--seq-length", type=int, metavar="N",
                     help="training sequence length (default: min(pre-training positions, 8192))")

    sch = sub.add_parser("schema", help="print the JSON Schema of a spec file")
    sch.add_argument("--section", metavar="NAME",
                     help="only one section (model, cluster, ...), for preset files")

    d = sub.add_parser("diff", help="what differs between two specs after resolution")
    d.add_argument("items", nargs="+", metavar="A B [KEY=VALUE ...]")
    d.add_argument("--format", choices=("text", "json"), default="text")
    d.add_argument("--all", action="store_true", help="also list the keys that are equal")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainc`` console script; returns the exit code."""
    parser = build_parser()
    # KEY=VALUE overrides may follow options (`compile spec.yaml --force parallel.tp=4`): argparse
    # leaves positionals after an option unparsed, so they are put back into the items.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if any(e.startswith("-") for e in extra) or not hasattr(args, "items"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items = [*args.items, *extra]
    try:
        if args.command == "compile":
            return _compile(args)
        if args.command == "lint":
            return _lint(args)
        if args.command == "explain":
            return _explain(args)
        if args.command in ("import-hf", "schema", "diff"):
            return _ECOSYSTEM[args.command](args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "submit":
            return _submit(args)
        if args.command == "run":
            return _run(args)
    except KeyboardInterrupt:
        print("trainc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (`trainc lint --format json ... | head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail too
        return 141  # what a shell reports for a process ended by SIGPIPE
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
    results = [compile_spec(s, overrides, emit_files=args.slurm) for s in specs]
    slurm = [_slurm_check(r) for r in results] if args.slurm else [None] * len(results)
    if args.format in ("sarif", "github"):
        from trainc.ecosystem.lint_formats import render_github, render_sarif

        failed = [_failed(r, args.werror) or bool(c and c["ok"] is False)
                  for r, c in zip(results, slurm, strict=True)]
        print(render_sarif(results) if args.format == "sarif" else render_github(results, failed),
              end="")
        return EXIT_SPEC if any(failed) else EXIT_OK
    if args.format == "json":
        records = [_json_record(r, args.werror) for r in results]
        for rec, chk in zip(records, slurm, strict=True):
            if chk is not None:
                rec["slurm"] = chk
                rec["ok"] = rec["ok"] and chk["ok"] is not False
        print(json.dumps({"specs": records}, indent=2))
    else:
        for r, chk in zip(results, slurm, strict=True):
            _print_text(r)
            n_err = sum(d.is_error for d in r.diagnostics)
            n_warn = sum(d.severity.value == "warning" for d in r.diagnostics)
            verdict = "FAILED" if _failed(r, args.werror) else "ok"
            print(f"{r.path}: {verdict} ({n_err} error(s), {n_warn} warning(s))")
            if chk is not None:
                _print_slurm_check(r.path, chk)
    if any(_failed(r, args.werror) for r in results) or any(c and c["ok"] is False for c in slurm):
        return EXIT_SPEC
    if args.werror and any(c and c["ok"] is None for c in slurm):
        return EXIT_ENV  # --slurm asked for a check that could not be made
    return EXIT_OK


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


def _explain(args: argparse.Namespace) -> int:
    from rich.console import Console

    from trainc.compiler.estimate.explain import explain_tables
    from trainc.compiler.pipeline import compile_spec

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print(f"trainc explain: expected one spec file, got {len(specs)}: {' '.join(specs)}",
              file=sys.stderr)
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


def _import_hf(args: argparse.Namespace) -> int:
    from trainc.ecosystem.hf_import import HFImportError, import_hf

    try:
        text = import_hf(args.config, seq_length=args.seq_length)
    except HFImportError as e:
        print(f"trainc import-hf: error: {e}", file=sys.stderr)
        return EXIT_SPEC
    if not args.output:
        print(text, end="")
        return EXIT_OK
    try:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"trainc import-hf: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return EXIT_ENV
    print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    from trainc.ecosystem.jsonschema import render, sections

    if args.section is not None and args.section not in sections():
        print(f"trainc schema: unknown section {args.section!r}; choose one of "
              f"{', '.join(sections())}", file=sys.stderr)
        return EXIT_SPEC
    print(render(args.section), end="")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from trainc.ecosystem.diff import run_diff

    specs, overrides = _split(args.items)
    if len(specs) != 2:
        print(f"trainc diff: expected two spec files, got {len(specs)}", file=sys.stderr)
        return EXIT_SPEC
    return run_diff(specs[0], specs[1], overrides, fmt=args.format, show_all=args.all)


_ECOSYSTEM = {"import-hf": _import_hf, "schema": _schema, "diff": _diff}


def _add_plan_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pl = sub.add_parser("plan", help="search the parallel layout for a spec")
    pl.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    pl.add_argument("--top", type=int, default=5, metavar="K")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    pl.add_argument("--apply", metavar="OUT.yaml", help="write the best layout as a spec")


def _plan(args: argparse.Namespace) -> int:
    from trainc.planner import plan_layouts, to_json

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print("trainc plan: expected one spec file", file=sys.stderr)
        return EXIT_SPEC
    res = plan_layouts(specs[0], overrides, top=max(1, args.top))
    if not res.ok or not res.planned:
        if args.format == "json":  # one object on stdout, as promised, even with no layout
            print(json.dumps({**_json_record(res, False), **to_json(res), "ok": False},
                             indent=2, sort_keys=True))
        _print_text(res)
        if res.ok:
            print(f"trainc plan: no layout of {specs[0]} fits ({res.num_candidates_evaluated} "
                  "candidates evaluated); add nodes, GPUs with more memory, or a smaller batch",
                  file=sys.stderr)
        else:
            print(f"trainc plan: {specs[0]}: the keys it fixes break the rules above",
                  file=sys.stderr)
        return EXIT_SPEC
    if args.format == "json":
        print(json.dumps(to_json(res), indent=2, sort_keys=True))
    else:
        from trainc.planner.table import print_plan_table

        print_plan_table(res)
    if args.apply:
        from trainc.planner.apply import write_applied

        try:
            applied = write_applied(specs[0], overrides, res.planned[0].spec, args.apply)
        except OSError as e:
            print(f"trainc plan: cannot write {args.apply}: {e.strerror or e}", file=sys.stderr)
            return EXIT_ENV
        if applied.note:
            print(f"trainc plan: note: {applied.note}", file=sys.stderr)
        if args.format == "text":
            print(f"wrote {args.apply} ({len(applied.changed)} key(s) changed)")
    return EXIT_OK


# --- Slurm: lint --slurm and submit (the subprocess work is in trainc.launch.submit) -----------
def _add_submit_parser(sub) -> None:  # type: ignore[no-untyped-def]
    s = sub.add_parser("submit", help="submit OUTDIR/sbatch.sh to Slurm and print the job id")
    s.add_argument("outdir", metavar="OUTDIR", help="a folder written by trainc compile")
    s.add_argument("--wait", action="store_true",
                   help="follow the job to its end and exit with its exit code")
    s.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="with --wait: give up (exit 4, job left running) after this long")
    s.add_argument("--sbatch-option", dest="sbatch_args", action="append", default=[],
                   metavar="OPTION", help="one more sbatch option, overriding the script's "
                   "#SBATCH lines (repeatable), e.g. --sbatch-option=--dependency=afterok:123")


def _slurm_check(result) -> dict:  # type: ignore[no-untyped-def]
    """``sbatch --test-only`` of the spec's sbatch.sh: {"checked", "ok", "message"}; ok is None
    when the check could not be made (no controller, nothing generated)."""
    from trainc.launch.submit import SlurmUnavailable, test_only

    if not result.ok:
        return {"checked": False, "ok": None, "message": "not checked: the spec has errors"}
    script = result.files.get("sbatch.sh")
    if not script:
        return {"checked": False, "ok": None, "message": "not checked: no sbatch.sh was generated"}
    try:
        answer = test_only(script)
    except SlurmUnavailable as e:
        return {"checked": False, "ok": None,
                "message": f"not checked: {e}; start one or set SLURM_CONF to the cluster's "
                "slurm.conf"}
    verdict = "accepted" if answer.ok else "rejected"
    return {"checked": True, "ok": answer.ok,
            "message": f"sbatch --test-only {verdict} sbatch.sh: {answer.message}"}


def _print_slurm_check(path: str, check: dict) -> None:  # type: ignore[type-arg]
    if check["ok"] is None:
        print(f"warning: {path}: slurm: {check['message']}", file=sys.stderr)
    elif check["ok"]:
        print(f"{path}: slurm: ok: {check['message']}")
    else:
        print(f"error: {path}: slurm: {check['message']}", file=sys.stderr)
        print(f"{path}: slurm: FAILED")


def _submit(args: argparse.Namespace) -> int:
    """``trainc submit OUTDIR [--wait]``: the job id on stdout, progress on stderr."""
    from trainc.errors import LaunchError
    from trainc.launch import submit as slurm

    extra = list(args.sbatch_args)
    for warning in slurm.manifest_warnings(args.outdir):
        print(f"trainc submit: warning: {warning}", file=sys.stderr)
    try:
        job_id = slurm.submit(args.outdir, extra)
    except LaunchError as e:
        print(f"trainc submit: {e}", file=sys.stderr)
        return EXIT_ENV
    print(job_id, flush=True)
    if not args.wait:
        print(f"trainc submit: submitted job {job_id} from {args.outdir}", file=sys.stderr)
        return EXIT_OK

    def show(st: slurm.JobStatus) -> None:
        where = f" on {st.nodes}" if st.nodes and st.nodes != "(null)" else ""
        again = f" (restart {st.restarts})" if st.restarts else ""
        why = f" ({st.reason})" if st.reason and st.reason != "None" and not st.finished else ""
        print(f"trainc submit: job {job_id} {st.state}{again}{where}{why}", file=sys.stderr,
              flush=True)

    try:
        final = slurm.wait(job_id, timeout_s=args.timeout, on_change=show)
    except KeyboardInterrupt:
        print(f"trainc submit: stopped waiting; job {job_id} goes on (scancel {job_id} stops it)",
              file=sys.stderr)
        return 130
    except LaunchError as e:
        print(f"trainc submit: {e}", file=sys.stderr)
        return EXIT_ENV
    out = f"; output: {final.stdout}" if final.stdout else ""
    print(f"trainc submit: job {job_id} {final.state}, exit code {final.exit_code}:{final.signal}"
          f" -> {final.return_code}{out}", file=sys.stderr)
    return final.return_code


def _run(args: argparse.Namespace) -> int:
    """Start OUTDIR/torchrun.sh here (checks and launch in :mod:`trainc.launch.local`)."""
    from trainc.launch.local import run

    return run(args.outdir, args.worker_args, node_rank=args.node_rank,
               master_addr=args.master_addr)
