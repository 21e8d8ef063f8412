"""``trainc import-hf``, ``trainc schema`` and ``trainc diff``."""

from __future__ import annotations

import argparse
import os
import sys

from trainc.cli._common import EXIT_OK, EXIT_SPEC, OutputError, _split, out, write_file


def _import_hf(args: argparse.Namespace) -> int:
    """``trainc import-hf CONFIG_JSON [-o MODEL_YAML]``: a model preset from a HF config.

    The preset goes to MODEL_YAML, or to stdout with no ``-o`` or ``-o -``; its notes (the
    ``# Note:`` comments of its header) are also printed on stderr, one ``note: ...`` line each.
    A config the preset would not reproduce (see ``hf_import``) exits 2 and writes nothing."""
    from trainc.ecosystem.hf_import import HFImportError, import_hf_with_notes

    try:
        text, notes = import_hf_with_notes(
            args.config,
            seq_length=args.seq_length,
            drop_rope_scaling=args.drop_rope_scaling,
            drop_sliding_window=args.drop_sliding_window,
        )
    except HFImportError as e:
        print(f"trainc import-hf: error: {e}", file=sys.stderr)
        return EXIT_SPEC
    if not args.output or args.output == "-":
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        out(text, end="")
        return EXIT_OK
    target = args.output
    if os.path.lexists(target) and (os.path.islink(target) or not os.path.isfile(target)):
        print(
            f"trainc import-hf: {target} exists and is not a plain file; trainc never replaces "
            "it (give another -o)",
            file=sys.stderr,
        )
        return EXIT_SPEC
    if os.path.exists(target) and not args.force:
        print(f"trainc import-hf: {target} exists; pass --force to replace it", file=sys.stderr)
        return EXIT_SPEC
    try:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot write {args.output}: {e.strerror or e}") from e
    write_file(args.output, text)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    """``trainc schema [--section NAME]``: the JSON Schema of a spec (or preset) file."""
    from trainc.ecosystem.jsonschema import render, sections

    if args.section is not None and args.section not in sections():
        print(
            f"trainc schema: unknown section {args.section!r}; choose one of "
            f"{', '.join(sections())}",
            file=sys.stderr,
        )
        return EXIT_SPEC
    out(render(args.section), end="")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    """``trainc diff A B [KEY=VALUE ...]``: what differs between two specs after resolution."""
    from trainc.ecosystem.diff import run_diff

    specs, overrides = _split(args.items)
    if len(specs) != 2:
        print(f"trainc diff: expected two spec files, got {len(specs)}", file=sys.stderr)
        return EXIT_SPEC
    return run_diff(
        specs[0],
        specs[1],
        overrides,
        fmt=args.format,
        show_all=args.all,
        require_resume=args.require_resume,
    )
