"""``trainc plan``: search the parallel layout of a spec, print the best ones as a table or JSON,
and optionally write the best as a spec (``--apply``)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from trainc.cli._common import (
    EXIT_OK,
    EXIT_SPEC,
    OutputError,
    _json_record,
    _print_text,
    _split,
    dumps,
    out,
)


def _plan(args: argparse.Namespace) -> int:
    """``trainc plan SPEC [KEY=VALUE ...] [--top K] [--apply OUT.yaml]``."""
    from trainc.planner import plan_layouts, to_json

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print("trainc plan: expected one spec file", file=sys.stderr)
        return EXIT_SPEC
    refused = _apply_refused(specs[0], args.apply, args.force) if args.apply else None
    if refused:
        print(f"trainc plan: {refused}", file=sys.stderr)
        return EXIT_SPEC
    res = plan_layouts(specs[0], overrides, top=max(1, args.top))
    if not res.ok or not res.planned:
        if args.format == "json":  # one object on stdout, as promised, even with no layout
            out(
                dumps(
                    {**_json_record(res, False), **to_json(res), "ok": False},
                    indent=2,
                    sort_keys=True,
                )
            )
        _print_text(res)
        if res.ok:
            print(
                f"trainc plan: no layout of {specs[0]} fits ({res.no_fit_reason()}); add "
                "nodes or GPUs with more memory"
                + (
                    ""
                    if not math.isfinite(res.min_memory_bytes)
                    else ", or use a smaller micro batch or recompute"
                ),
                file=sys.stderr,
            )
        elif res.planned == [] and res.num_candidates_considered:
            print(
                f"trainc plan: {specs[0]}: the keys it fixes break the rules above", file=sys.stderr
            )
        else:
            print(
                f"trainc plan: {specs[0]}: fix the errors above first (nothing was planned)",
                file=sys.stderr,
            )
        return EXIT_SPEC
    if args.format == "json":
        out(dumps(to_json(res), indent=2, sort_keys=True))
    else:
        from trainc.planner.table import print_plan_table

        print_plan_table(res)
    if args.apply:
        from trainc.planner.apply import ApplyRefused, write_applied

        try:
            applied = write_applied(
                specs[0], overrides, res.planned[0].spec, args.apply, res.planned[0].raw_spec
            )
        except ApplyRefused as e:
            print(f"trainc plan: {e}", file=sys.stderr)
            return EXIT_SPEC
        except OSError as e:
            raise OutputError(f"cannot write {args.apply}: {e.strerror or e}") from e
        if applied.note:
            print(f"trainc plan: note: {applied.note}", file=sys.stderr)
        if args.format == "text":
            out(
                f"wrote {args.apply} (the complete resolved spec)"
                if applied.note
                else f"wrote {args.apply} ({len(applied.changed)} key(s) changed)"
            )
    return EXIT_OK


def _apply_refused(spec: str, target: str, force: bool) -> str | None:
    """Why ``--apply target`` must not write (None: it may). The spec file itself is edited in
    place; a new file is written; any other existing path (a notes file, another spec, an
    artifact) is replaced only with ``--force``, and never when it is not a regular file."""
    if spec == "-":
        return (
            "--apply edits the spec file: with the spec on standard input there is no file "
            "to edit; pass the spec's path"
        )
    path = Path(target)
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        return f"--apply {target}: not a regular file; name a new file or the spec itself"
    if path.resolve() == Path(spec).resolve():
        return None
    if force:
        return None
    return (
        f"--apply {target}: the file exists and is not the spec ({spec}); --apply replaces "
        "only the spec itself or a new file without --force (add --force to replace it)"
    )
