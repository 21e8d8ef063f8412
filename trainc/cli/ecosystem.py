"""``trainc import-hf``, ``trainc schema`` and ``trainc diff`` (issue 8)."""

from __future__ import annotations

import argparse
import os
import sys

from trainc.cli._common import EXIT_ENV, EXIT_OK, EXIT_SPEC, _split


def _import_hf(args: argparse.Namespace) -> int:
    """``trainc import-hf CONFIG_JSON [-o MODEL_YAML]``: a model preset from a HF config."""
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
    """``trainc schema [--section NAME]``: the JSON Schema of a spec (or preset) file."""
    from trainc.ecosystem.jsonschema import render, sections

    if args.section is not None and args.section not in sections():
        print(f"trainc schema: unknown section {args.section!r}; choose one of "
              f"{', '.join(sections())}", file=sys.stderr)
        return EXIT_SPEC
    print(render(args.section), end="")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    """``trainc diff A B [KEY=VALUE ...]``: what differs between two specs after resolution."""
    from trainc.ecosystem.diff import run_diff

    specs, overrides = _split(args.items)
    if len(specs) != 2:
        print(f"trainc diff: expected two spec files, got {len(specs)}", file=sys.stderr)
        return EXIT_SPEC
    return run_diff(specs[0], specs[1], overrides, fmt=args.format, show_all=args.all)
