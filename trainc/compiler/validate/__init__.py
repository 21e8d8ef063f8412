"""validate: run every rule family over a normalized spec and collect all diagnostics.

Validators never mutate and never raise for user input; each is ``(spec, derived) -> iterable of
Diagnostic``. Range errors (zero / negative sizes) stop the other families, whose arithmetic
would only repeat them.
"""

from __future__ import annotations

from trainc.compiler.derive import derive
from trainc.compiler.diagnostics import Diagnostic
from trainc.compiler.validate.compatibility import compatibility
from trainc.compiler.validate.divisibility import divisibility
from trainc.compiler.validate.launcher import launcher
from trainc.compiler.validate.ranges import ranges
from trainc.compiler.validate.topology import topology
from trainc.schemas import TrainSpec

VALIDATORS = (topology, divisibility, compatibility, launcher)


def validate(spec: TrainSpec) -> list[Diagnostic]:
    """All diagnostics of a normalized spec (unsorted, without locations)."""
    out = list(ranges(spec))
    if any(d.is_error for d in out):
        return out
    derived = derive(spec)
    for validator in VALIDATORS:
        out.extend(validator(spec, derived))
    return out
