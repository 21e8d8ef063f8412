"""Exception hierarchy. User mistakes are :class:`SpecError` (exit 2), bugs :class:`InternalError`
(exit 3), environment failures :class:`LaunchError` (exit 4). Each class carries the command's exit
code as ``exit_code`` (as click's exceptions do), so the CLI maps an error to its code in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainc.compiler.diagnostics import Diagnostic


class TraincError(Exception):
    """Base class of every error trainc raises on purpose."""

    #: Exit code of a ``trainc`` command that stops with this error.
    exit_code: int = 3


class SpecError(TraincError):
    """The spec has at least one error-severity diagnostic; carries all diagnostics (also
    warnings)."""

    exit_code = 2

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__(f"{sum(d.is_error for d in diagnostics)} error(s) in spec")


class InternalError(TraincError):
    """A bug in trainc (an invariant that validation should have guaranteed did not hold)."""


class LaunchError(TraincError):
    """The environment refused an action (writing OUTDIR or standard output, running torchrun or
    sbatch)."""

    exit_code = 4
