"""A frozen snapshot of the command-line surface: every ``trainc`` command and option, and the
worker's flags (``python -m trainc.launch.worker``, which ``trainc run`` forwards after ``--``).

A command, option, choice, default, nargs or type that appears, disappears or changes is a
deliberate diff of ``tests/data/cli_surface.txt``, reviewed with the change, never a silent one.
The idea is torchtitan's ``tests/unit_tests/test_no_new_cli_options.py`` (a frozen set of the
options its trainer's config exposes); here the snapshot is a file and both directions count.

To change the surface on purpose, regenerate the file and commit it with the change::

    pytest tests/test_cli_surface.py --update-golden     # or TRAINC_UPDATE_GOLDEN=1

Help texts are not part of the snapshot (rewording one is no change of the surface).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainc.cli import COMMANDS, build_parser

SNAPSHOT = Path(__file__).resolve().parent / "data" / "cli_surface.txt"
UPDATE_HINT = (
    "the CLI surface changed: if that is intended, run "
    "`pytest tests/test_cli_surface.py --update-golden` and commit "
    "tests/data/cli_surface.txt with the change"
)


def _describe(action: argparse.Action) -> str:
    """One line of the snapshot: names, then every attribute that changes how it parses."""
    name = "/".join(action.option_strings) or action.dest
    fields = [name, type(action).__name__.lstrip("_")]
    if action.option_strings:
        fields.append(f"dest={action.dest}")
    if action.nargs is not None:
        fields.append(f"nargs={action.nargs}")
    if action.metavar is not None:
        fields.append(f"metavar={action.metavar}")
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        fields.append(f"choices={','.join(map(str, action.choices))}")
    if action.type is not None:
        fields.append(f"type={getattr(action.type, '__name__', repr(action.type))}")
    if action.option_strings and action.default not in (None, argparse.SUPPRESS):
        fields.append(f"default={action.default!r}")
    if action.required and action.option_strings:
        fields.append("required")
    return " ".join(fields)


def _parser_lines(prefix: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                lines += _parser_lines(f"{prefix} {command}", sub)
            continue
        lines.append(f"{prefix}: {_describe(action)}")
    return lines


def _worker_parser() -> argparse.ArgumentParser:
    """The worker's parser as ``worker_args.parse_args`` builds it (it builds and parses in one
    call: its ``parse_args`` is intercepted to hand back the parser)."""
    from trainc.launch import worker_args

    built: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        built.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", capture)
        worker_args.parse_args([])
    [parser] = built
    return parser


def surface() -> str:
    """The snapshot's text: one line per argument, commands in the parser's order."""
    lines = _parser_lines("trainc", build_parser())
    lines += _parser_lines("python -m trainc.launch.worker", _worker_parser())
    return "\n".join(lines) + "\n"


def test_cli_surface_is_the_snapshot(update_golden: bool) -> None:
    now = surface()
    if update_golden:
        SNAPSHOT.write_text(now)
        return
    assert SNAPSHOT.exists(), UPDATE_HINT
    want = SNAPSHOT.read_text().splitlines()
    got = now.splitlines()
    added = [line for line in got if line not in want]
    removed = [line for line in want if line not in got]
    assert (added, removed) == ([], []), UPDATE_HINT
    assert got == want, UPDATE_HINT + " (the order changed)"


def test_every_command_of_the_table_is_in_the_snapshot() -> None:
    """The snapshot covers each command ``trainc.cli.COMMANDS`` dispatches, and no other."""
    commands = {
        line.split(":")[0].split()[1]
        for line in SNAPSHOT.read_text().splitlines()
        if line.startswith("trainc ")
    }
    assert commands == set(COMMANDS)


def test_a_new_option_is_a_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison sees an option added to a subcommand (the check can fail)."""
    real = build_parser

    def with_extra() -> argparse.ArgumentParser:
        p = real()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["lint"].add_argument("--new-flag", action="store_true")
        return p

    monkeypatch.setattr(f"{__name__}.build_parser", with_extra)
    text = surface()
    assert "trainc lint: --new-flag StoreTrueAction dest=new_flag nargs=0 default=False" in text
    assert text != SNAPSHOT.read_text()
