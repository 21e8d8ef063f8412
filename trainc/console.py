"""A Rich console that behaves like a Unix tool when its reader goes away.

Rich 13's ``Console.on_broken_pipe`` (rich/console.py) points stdout at /dev/null and raises
``SystemExit(1)``, so ``trainc explain SPEC | head`` exited 1. This console points stdout at
/dev/null the same way (nothing more is written, no "Exception ignored" at exit) and raises
:class:`BrokenPipeError`, which ``trainc.cli.main`` turns into a quiet exit 141 (128 + SIGPIPE,
what a shell reports for a process ended by SIGPIPE; Python's note on SIGPIPE:
https://docs.python.org/3/library/signal.html#note-on-sigpipe).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console as _RichConsole


class Console(_RichConsole):
    """:class:`rich.console.Console` whose broken pipe raises :class:`BrokenPipeError`."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise BrokenPipeError("stdout closed by its reader")
