"""``trainc`` command line: the parser, :func:`main`, and the table of commands.

Each command's handler lives in a module of this package (``compile``: compile, lint, explain;
``plan``; ``slurm``: submit; ``run``; ``ecosystem``: import-hf, schema, diff) and is imported only
when that command runs, as pip's ``commands_dict`` does, so ``trainc --help`` and a lint stay cheap.

Exit codes: 0 no errors (warnings allowed); 2 an error in a spec, a malformed spec, or a refused
OUTDIR; 3 an internal error (a bug: please report it with the printed spec hash); 4 the
environment refused (cannot write, launcher failed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from trainc import __version__
from trainc.cli._common import EXIT_ENV, EXIT_INTERNAL, EXIT_OK, EXIT_SPEC

__all__ = ["COMMANDS", "EXIT_ENV", "EXIT_INTERNAL", "EXIT_OK", "EXIT_SPEC", "build_parser", "main"]

#: command -> (module, handler); the module is imported when the command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "compile": ("trainc.cli.compile", "_compile"),
    "lint": ("trainc.cli.compile", "_lint"),
    "explain": ("trainc.cli.compile", "_explain"),
    "import-hf": ("trainc.cli.ecosystem", "_import_hf"),
    "schema": ("trainc.cli.ecosystem", "_schema"),
    "diff": ("trainc.cli.ecosystem", "_diff"),
    "plan": ("trainc.cli.plan", "_plan"),
    "calibrate": ("trainc.cli.calibrate", "_calibrate"),
    "submit": ("trainc.cli.slurm", "_submit"),
    "run": ("trainc.cli.run", "_run"),
}


def handler(command: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs ``command`` (imports its module)."""
    module, name = COMMANDS[command]
    fn: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return fn


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, except that a ``nargs="+"`` positional whose metavar already
    says how it repeats (``SPEC [KEY=VALUE ...]``) is shown once: argparse would write
    ``SPEC [KEY=VALUE ...] [SPEC [KEY=VALUE ...] ...]``."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if action.nargs == "+" and isinstance(action.metavar, str) and "[" in action.metavar:
            return action.metavar
        return super()._format_args(action, default_metavar)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # argparse exits 2 on usage errors, as we do
        self.print_usage(sys.stderr)
        self.exit(EXIT_SPEC, f"trainc: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = _Parser(prog="trainc", description="Compile and lint distributed LLM training specs.")
    p.add_argument("--version", action="version", version=f"trainc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("compile", help="check a spec and write its artifacts")
    c.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    c.add_argument("-o", "--output", metavar="OUTDIR", help="default: out/<name>")
    c.add_argument(
        "--force",
        action="store_true",
        help="replace OUTDIR if it is a previous trainc output (its manifest.json "
        "lists everything in it); nothing else is ever replaced",
    )
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--werror", action="store_true", help="treat warnings as errors")

    lint = sub.add_parser("lint", help="check specs, write nothing")
    lint.add_argument(
        "items",
        nargs="+",
        metavar="SPEC... [KEY=VALUE ...]",
        help="spec files; a folder stands for its *.yaml / *.yml files (not its "
        "subfolders), a quoted glob for its matches",
    )
    lint.add_argument(
        "--format",
        choices=("text", "json", "sarif", "github"),
        default="text",
        help="sarif: SARIF 2.1.0 for code scanning; github: workflow annotations",
    )
    lint.add_argument("--werror", action="store_true", help="treat warnings as errors")
    lint.add_argument(
        "--slurm",
        action="store_true",
        help="also ask the reachable Slurm controller whether it would run each "
        "spec's sbatch.sh (sbatch --test-only); warns when none is reachable",
    )

    ex = sub.add_parser("explain", help="estimates and the rank map as terminal tables")
    ex.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    ex.add_argument(
        "--ranks",
        type=_positive_int,
        default=None,
        metavar="N",
        help="rows of the rank table (default: one node; at most 256)",
    )
    _add_ecosystem_parsers(sub)
    _add_plan_parser(sub)
    from trainc.cli.calibrate import add_parser as _add_calibrate_parser

    _add_calibrate_parser(sub)
    _add_submit_parser(sub)

    run = sub.add_parser("run", help="run OUTDIR/torchrun.sh on this machine")
    run.add_argument(
        "--node-rank",
        type=int,
        metavar="I",
        help="this machine is node I of a "
        "multi-node plan (started once on every node; default: refused)",
    )
    run.add_argument("--master-addr", metavar="HOST", help="address of node 0 (with --node-rank)")
    run.add_argument("outdir", metavar="OUTDIR")
    run.add_argument(
        "worker_args",
        nargs=argparse.REMAINDER,
        help="extra worker flags (e.g. --train-iters 20 --load DIR), passed to every "
        "rank through TRAINC_WORKER_ARGS",
    )
    return p


def _add_ecosystem_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """``import-hf``, ``schema`` and ``diff``."""
    imp = sub.add_parser("import-hf", help="turn a Hugging Face config.json into a model preset")
    imp.add_argument("config", metavar="CONFIG_JSON")
    imp.add_argument(
        "-o",
        "--output",
        metavar="MODEL_YAML",
        help="default (or '-'): print to stdout; notes go to stderr either way",
    )
    imp.add_argument(
        "--seq-length",
        type=int,
        metavar="N",
        help="training sequence length (default: min(P, 8192), P = "
        "rope_scaling.original_max_position_embeddings or max_position_embeddings)",
    )
    imp.add_argument(
        "--drop-rope-scaling",
        action="store_true",
        help="import plain RoPE when config.json's rope_scaling cannot be expressed "
        "(a different model from the checkpoint: for training from scratch)",
    )
    imp.add_argument(
        "--drop-sliding-window",
        action="store_true",
        help="import full causal attention instead of config.json's sliding_window "
        "(model.window_size; a different model from the checkpoint: for training "
        "from scratch, or a layer_types pattern window_attn_skip_freq cannot state)",
    )
    imp.add_argument(
        "--force",
        action="store_true",
        help="replace an existing MODEL_YAML file (never a folder or a device)",
    )

    sch = sub.add_parser("schema", help="print the JSON Schema of a spec file")
    sch.add_argument(
        "--section", metavar="NAME", help="only one section (model, cluster, ...), for preset files"
    )

    d = sub.add_parser("diff", help="what differs between two specs after resolution")
    d.add_argument("items", nargs="+", metavar="A B [KEY=VALUE ...]")
    d.add_argument("--format", choices=("text", "json"), default="text")
    d.add_argument("--all", action="store_true", help="also list the keys that are equal")
    d.add_argument(
        "--require-resume",
        action="store_true",
        help="exit 1 when B cannot resume from A's checkpoints (for CI)",
    )


def _add_plan_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    pl = sub.add_parser("plan", help="search the parallel layout for a spec")
    pl.add_argument("items", nargs="+", metavar="SPEC [KEY=VALUE ...]")
    pl.add_argument("--top", type=_positive_int, default=5, metavar="K")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    pl.add_argument(
        "--apply",
        metavar="OUT.yaml",
        help="write the best layout as a spec: the "
        "spec file itself is edited in place; another existing file is replaced only "
        "with --force",
    )
    pl.add_argument(
        "--force", action="store_true", help="with --apply: replace OUT.yaml although it exists"
    )


def _add_submit_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    s = sub.add_parser("submit", help="submit OUTDIR/sbatch.sh to Slurm and print the job id")
    s.add_argument("outdir", metavar="OUTDIR", help="a folder written by trainc compile")
    s.add_argument(
        "--wait", action="store_true", help="follow the job to its end and exit with its exit code"
    )
    s.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="with --wait: give up (exit 4, job left running) after this long",
    )
    s.add_argument(
        "--sbatch-option",
        dest="sbatch_args",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more sbatch option, overriding the script's "
        "#SBATCH lines (repeatable), e.g. --sbatch-option=--dependency=afterok:123",
    )


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--top 0`` showed one row anyway)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainc`` console script; returns the exit code."""
    if sys.stderr is None:  # started with 2>&- : diagnostics go nowhere rather than crash
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    if sys.stdout is None:  # started with >&- : refuse before anything is written to disk
        print(
            "trainc: standard output is closed; run trainc with stdout open (redirect it "
            "to a file or /dev/null)",
            file=sys.stderr,
        )
        return EXIT_ENV
    parser = build_parser()
    # KEY=VALUE overrides may follow options (`compile spec.yaml --force parallel.tp=4`): argparse
    # leaves positionals after an option unparsed, so they are put back into the items.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if any(e.startswith("-") for e in extra) or not hasattr(args, "items"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items = [*args.items, *extra]
    from trainc.errors import InternalError, TraincError

    try:
        code = handler(args.command)(args)
        sys.stdout.flush()  # a full disk shows here, not as a traceback at interpreter exit
        return code
    except TraincError as e:
        if isinstance(e, InternalError):
            raise
        # one line, the class's exit code (OUTDIR refused 2, environment 4); no traceback
        _park_stdout()
        print(f"trainc {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("trainc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (`trainc lint --format json ... | head`)
        _park_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE
    except OSError as e:  # writing output (Rich tables, diff) or reading input refused
        _park_stdout()
        where = f"{e.filename}: " if e.filename else ""
        print(f"trainc {args.command}: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_ENV
    except Exception:  # a bug: say so, with what is needed to reproduce it
        print(
            "trainc: internal error (this is a bug in trainc; please report it with the spec "
            "and this trace)",
            file=sys.stderr,
        )
        traceback.print_exc()
        return EXIT_INTERNAL


def _park_stdout() -> None:
    """Point stdout at /dev/null if it can no longer be written, so the interpreter's final
    flush of what is still buffered does not fail (and print a second error) at exit."""
    try:
        sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


#: The handlers' former names in the single-module cli (``trainc.cli._plan_table`` ...).
_MOVED = {
    "_split": "_common",
    "_failed": "_common",
    "_print_text": "_common",
    "_json_record": "_common",
    "_lint": "compile",
    "_compile": "compile",
    "_explain": "compile",
    "_import_hf": "ecosystem",
    "_schema": "ecosystem",
    "_diff": "ecosystem",
    "_plan": "plan",
    "_plan_table": "plan",
    "_pp": "plan",
    "_fmt": "plan",
    "_slurm_check": "slurm",
    "_print_slurm_check": "slurm",
    "_submit": "slurm",
    "_run": "run",
}


def __getattr__(name: str) -> Any:
    """Lazy access to a handler by its former ``trainc.cli`` name."""
    if name in _MOVED:
        return getattr(importlib.import_module(f"trainc.cli.{_MOVED[name]}"), name)
    raise AttributeError(f"module 'trainc.cli' has no attribute {name!r}")
