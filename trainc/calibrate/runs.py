"""A measured run (:class:`Run`) and the error of bad calibration input (:class:`CalibrateError`):
the types the readers produce and the fit consumes."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.compiler.ir import Plan
from trainc.schemas import TrainSpec


class CalibrateError(Exception):
    """Bad input (unreadable file, no usable run, runs on different clusters): exit 2."""


@dataclass
class Run:
    """One measured run: the spec (as loaded, not normalized) and its measured step time."""

    name: str
    spec: TrainSpec
    measured_step_seconds: float
    source: str = ""
    plan: Plan | None = None
    """The planned spec (filled by :func:`prepare`)."""
    published: bool = False
    """A row of a published-runs table (built by the converter): one whose layout breaks a
    rule is left out with a note; any other run is the user's and such a run is an error."""
    memory_flagged: bool = False
    """The memory model calls this measured run a sure OOM (TRC401): it ran, so the run is kept
    (fitted like any other) and reported with a warning; set by :func:`prepare`."""
