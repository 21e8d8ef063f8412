"""Exception hierarchy. Bugs are :class:`InternalError` (exit 3), environment failures
:class:`LaunchError` (exit 4); user mistakes are not exceptions but error diagnostics (the commands
exit 2 on them). Each class carries the command's exit code as ``exit_code`` (as click's exceptions
do), so the CLI maps an error to its code in one place.
"""

from __future__ import annotations


class TraincError(Exception):
    """Base class of every error trainc raises on purpose."""

    #: Exit code of a ``trainc`` command that stops with this error.
    exit_code: int = 3


class InternalError(TraincError):
    """A bug in trainc (an invariant that validation should have guaranteed did not hold)."""


class LaunchError(TraincError):
    """The environment refused an action (writing OUTDIR or standard output, running torchrun or
    sbatch)."""

    exit_code = 4
