"""``trainc plan``: search every parallel dimension for a spec's model, cluster and batch.

:func:`plan_layouts` loads the spec, runs :func:`trainc.planner.search.search`, then compiles the
best candidates for real (full rule set, full estimator, fit check) so that every returned
candidate compiles with no error, and ranks them by the full estimator's step time (ties: less
memory, then the simpler layout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.diagnostics import Diagnostic, sort_diagnostics
from trainc.compiler.load import load_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.pipeline import State, run_passes
from trainc.compiler.plan import spec_to_dict
from trainc.compiler.validate import validate
from trainc.planner.search import (
    Candidate,
    candidate_spec,
    explain,
    round_sig,
    search,
    summary,
)
from trainc.schemas import TrainSpec


@dataclass
class Planned:
    """One finalist: layout, full-estimator numbers, the spec that compiles, and why it ranks."""

    candidate: Candidate
    spec: TrainSpec
    estimates: dict[str, Any]
    reason: str = ""
    raw_spec: TrainSpec | None = None
    """The spec as the user wrote it with the layout applied, before normalization (what
    ``--apply`` writes when it cannot edit the file in place: derived values stay null)."""


@dataclass
class PlanResult:
    """Result of :func:`plan_layouts`: finalists best first, or the spec's diagnostics."""

    path: str
    diagnostics: list[Diagnostic]
    num_candidates_evaluated: int = 0
    num_fit: int = 0
    num_candidates_considered: int = 0
    planned: list[Planned] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No error diagnostics in the input spec."""
        return not any(d.is_error for d in self.diagnostics)


def plan_layouts(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = (),
                 top: int = 5) -> PlanResult:
    """Search layouts for the spec at ``path``; never raises for user mistakes.

    The spec may leave the parallel section out entirely; keys it (or an override) sets are
    constraints. Model-level errors (e.g. heads not divisible by a fixed tp) come back as
    diagnostics, as from ``trainc lint``; so do rule errors of the fixed keys when no layout
    survives.
    """
    loaded = load_spec(path, overrides)
    if loaded.spec is None:
        return PlanResult(str(path), sort_diagnostics(loaded.diagnostics))
    spec = normalize(loaded.spec)
    explicit = loaded.explicit
    result = search(spec, explicit)
    out = PlanResult(str(path), [], result.num_candidates_evaluated, result.num_fit,
                     result.num_candidates_considered)
    seen: set[tuple[Any, ...]] = set()
    for cand in result.candidates:
        # the compiler's own passes (the fit verdict without its what-if search)
        state = run_passes(State(spec=candidate_spec(loaded.spec, cand), suggest=False),
                           stop_after="check_fit")
        if state.failed or state.plan is None or state.plan.estimates is None:
            continue
        cspec, est = state.spec, state.plan.estimates.to_json()
        # A layout that differs from a finalist only in cp_comm_type and estimates the same is
        # not another choice: keep the first (the search yields p2p, Megatron's default, first).
        par = {k: v for k, v in summary(cand)["parallel"].items() if k != "cp_comm_type"}
        key = (repr(sorted(par.items())), repr(summary(cand)["training"]),
               round_sig(est.get("step_time_seconds", 0.0)),
               est.get("memory_bytes", {}).get("total", 0))
        if key in seen:
            continue
        seen.add(key)
        out.planned.append(Planned(cand, cspec, est,
                                   raw_spec=candidate_spec(loaded.spec, cand)))
        if len(out.planned) >= max(top * 3, top):
            break
    if not out.planned:
        # Nothing to offer: if the keys the user fixed break a rule, that is the reason (not
        # memory); report those errors as `trainc lint` would.
        out.diagnostics = sort_diagnostics([
            d for d in validate(spec) if d.is_error
            and (d.key in explicit or any(k in explicit for k in d.related))])
    out.planned.sort(key=lambda p: (round_sig(p.estimates.get("step_time_seconds", 0.0)),
                                    p.estimates.get("memory_bytes", {}).get("total", 0),
                                    p.candidate.simplicity()))
    out.planned = out.planned[:top]
    if out.planned:
        best = out.planned[0].estimates.get("step_time_seconds") or 0.0
        for i, p in enumerate(out.planned):
            step = p.estimates.get("step_time_seconds") or p.candidate.step_seconds
            p.reason = explain(p.candidate, i, step, best)
    return out


def to_json(res: PlanResult) -> dict[str, Any]:
    """The contract's ``--format json`` object."""
    return {
        "num_candidates_evaluated": res.num_candidates_evaluated,
        "num_candidates_fitting": res.num_fit,
        "num_candidates_considered": res.num_candidates_considered,
        "candidates": [{**summary(p.candidate), "estimates": p.estimates, "reason": p.reason}
                       for p in res.planned],
    }


def applied_spec(p: Planned) -> dict[str, Any]:
    """The finalist as a complete, explicit spec that ``trainc compile`` accepts unchanged."""
    return spec_to_dict(p.spec)
