"""Plan and estimate a spec without emitting anything: the shared path of the fit check's
what-if candidates, ``trainc explain`` and the tests."""

from __future__ import annotations

from typing import Any

from trainc.compiler.diagnostics import Diagnostic
from trainc.compiler.normalize import normalize
from trainc.compiler.plan import plan as make_plan
from trainc.schemas import TrainSpec


def plan_and_estimate(spec: TrainSpec, *, normalized: bool = False
                      ) -> tuple[TrainSpec, list[Diagnostic], dict[str, Any] | None]:
    """(normalized spec, validation diagnostics, plan with estimates or None on errors)."""
    from trainc.compiler.estimate import estimate
    from trainc.compiler.validate import validate

    nspec = spec if normalized else normalize(spec)
    diags = validate(nspec)
    if any(d.is_error for d in diags):
        return nspec, diags, None
    the_plan = make_plan(nspec)
    the_plan["estimates"] = estimate(nspec, the_plan)
    return nspec, diags, the_plan
