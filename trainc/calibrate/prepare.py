"""Runs through the compiler before the fit: each planned (:func:`prepare`, the time model's
input; a TFLOP/s measurement turned into seconds with the plan's FLOPs) and all on one cluster
(:func:`check_one_cluster`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainc.calibrate.runs import CalibrateError, Run
from trainc.compiler.estimate import estimate
from trainc.compiler.estimate.flops import spec_flop_terms
from trainc.compiler.ir import Plan
from trainc.compiler.pipeline import State, run_passes
from trainc.compiler.plan import spec_to_dict
from trainc.schemas import TrainSpec


def _plan(spec: TrainSpec, fit: bool = True) -> tuple[Plan | None, str]:
    """The spec through normalize .. plan (the time model's input) and, with ``fit``, the
    memory-fit rule (a run of the user's own that the model calls a sure OOM, TRC401, was not
    the run that was measured; a published row's unstated recompute is not held against it);
    (None, rules) on errors."""
    state = run_passes(State(spec=spec, suggest=False), stop_after="check_fit" if fit else "plan")
    if state.failed or state.plan is None:
        errs = sorted({d.rule.id for d in state.diagnostics if d.is_error})
        return None, ", ".join(errs)
    return state.plan, ""


def prepare(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """Plan every run and turn a TFLOP/s measurement into seconds with the plan's model FLOPs
    (Megatron's count). A published row whose layout breaks a rule is dropped with a note; a
    run of the user's own (a spec CSV row, a log) that does is a :class:`CalibrateError` (it
    was measured, so trainc's rules or the row are wrong: either way the fit would be). The one
    exception is the memory verdict alone (TRC401): the memory estimate carries an error band
    (trainc.compiler.fit.OOM_MARGIN) and a run that was measured did fit, so it is kept,
    flagged (``Run.memory_flagged``) and named in a warning note, not refused."""
    kept, notes, bad = [], [], []
    for r in runs:
        plan, why = _plan(r.spec, fit=not r.published)
        if plan is None and why == "TRC401" and not r.published:
            plan, why = _plan(r.spec, fit=False)
            if plan is not None:
                r.memory_flagged = True
                notes.append(
                    f"warning: {r.name}: the memory model calls it a sure OOM (TRC401) "
                    "but it was measured: kept and flagged; check the spec is the run "
                    "that was measured, and record its peak "
                    "(torch.cuda.max_memory_allocated) to correct the memory model"
                )
        if plan is None:
            what = (
                "the memory model calls it a sure OOM, TRC401: is the spec the run that was "
                "measured?"
                if why == "TRC401"
                else f"its layout breaks {why}"
            )
            if not r.published:
                bad.append(f"{r.name} ({what})")
            else:
                notes.append(f"{r.name}: skipped ({what})")
            continue
        r.plan = plan
        if r.measured_step_seconds < 0:  # TFLOP/s per GPU
            d = plan.derived
            flops = estimate(plan).flops_per_step
            if r.source.endswith(":noncausal"):  # the source counts the full s x s scores
                tr = plan.spec.training
                flops += (
                    spec_flop_terms(plan.spec, plan).core_per_s2
                    * tr.global_batch_size
                    * plan.spec.model.seq_length**2
                )
            r.measured_step_seconds = flops / (-r.measured_step_seconds * 1e12 * d.world_size)
        kept.append(r)
    if bad:
        raise CalibrateError(
            f"{len(bad)} run(s) do not compile: {'; '.join(bad)}; fix the spec or leave the row out"
        )
    return kept, notes


def check_one_cluster(runs: list[Run], names: Sequence[str]) -> None:
    """All runs must share the cluster's hardware (every cluster key but num_nodes and the
    fitted factors): one preset describes one cluster. Raises CalibrateError."""

    def hw(r: Run) -> dict[str, Any]:
        assert r.plan is not None
        d = dict(spec_to_dict(r.plan.spec)["cluster"])
        for k in ("num_nodes", *names, "step_time_p10_ratio", "step_time_p90_ratio"):
            d.pop(k, None)
        return d

    first = hw(runs[0])
    for r in runs[1:]:
        other = hw(r)
        if other != first:
            diff = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
            raise CalibrateError(
                f"{r.name} runs on another cluster than {runs[0].name} ({', '.join(diff)} "
                "differ): calibrate one cluster at a time (e.g. --where gpu_type=H100)"
            )
