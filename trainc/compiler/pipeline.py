"""The driver: :data:`PASSES` is the only statement of the pass order, and :func:`run_passes` the
only code that runs it. ``trainc compile``, ``lint``, ``explain``, ``diff``, ``plan`` (the layout
search) and the fit check's what-if search all go through it.

load -> normalize -> validate -> (stop on errors) -> plan -> estimate -> check_fit -> (stop) -> emit
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.diagnostics import (
    Diagnostic,
    Location,
    for_engine,
    locate,
    sort_diagnostics,
)
from trainc.compiler.estimate import estimate
from trainc.compiler.fit import check_fit
from trainc.compiler.ir import Plan
from trainc.compiler.load import Loaded, artifact_file, load_spec
from trainc.compiler.normalize import normalize, tainted
from trainc.compiler.plan import plan as make_plan
from trainc.compiler.validate import validate
from trainc.schemas import TrainSpec


@dataclass(frozen=True, slots=True)
class State:
    """What the passes have produced so far (each pass returns a new State)."""

    spec: TrainSpec
    """The spec; normalized from the normalize pass on."""
    where: Mapping[str, Location] = field(default_factory=dict)
    """Where each key was set (diagnostics are located with it)."""
    presets: Mapping[str, str] | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    plan: Plan | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    suggest: bool = True
    """check_fit's what-if search for TRC401's fix (off for the layout planner)."""
    spec_path: str | None = None
    """The spec file: plan.json names diagnostic files relative to its folder."""
    written: TrainSpec | None = None
    """The spec before the normalize pass (plan.json ``spec_as_written``)."""

    @property
    def failed(self) -> bool:
        """True once a pass reported an error: the driver stops there."""
        return any(d.is_error for d in self.diagnostics)


def _normalize(s: State) -> State:
    return dataclasses.replace(s, spec=normalize(s.spec), written=s.spec)


def _validate(s: State) -> State:
    return dataclasses.replace(
        s, diagnostics=s.diagnostics + tuple(locate(validate(s.spec), s.where))
    )


def _plan(s: State) -> State:
    return dataclasses.replace(
        s, plan=dataclasses.replace(make_plan(s.spec, s.written), presets=s.presets)
    )


def _estimate(s: State) -> State:
    assert s.plan is not None
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, estimates=estimate(s.plan)))


def _check_fit(s: State) -> State:
    assert s.plan is not None
    evaluate = _evaluate if s.suggest else None
    found = tuple(
        locate(for_engine(check_fit(s.plan, evaluate=evaluate), s.spec.engine.value), s.where)
    )
    diags = tuple(sort_diagnostics([*s.diagnostics, *found]))
    plan = dataclasses.replace(
        s.plan, diagnostics=tuple(_artifact_record(d, s.spec_path) for d in diags)
    )
    return dataclasses.replace(s, diagnostics=diags, plan=plan)


def _artifact_record(d: Diagnostic, spec_path: str | None) -> dict[str, Any]:
    """A diagnostic's JSON record for ``plan.json``: its file relative to the spec's folder."""
    rec = d.to_json()
    if "file" in rec and spec_path is not None:
        rec["file"] = artifact_file(rec["file"], spec_path)
    return rec


def _emit(s: State) -> State:
    # imported here: the emitters (report, Kubernetes manifests, Jinja2 templates) are ~40 % of
    # the pipeline's import time, and lint / explain / diff / plan never emit
    from trainc.compiler.emit import emit

    assert s.plan is not None
    return dataclasses.replace(s, files=emit(s.plan))


Pass = Callable[[State], State]
#: The passes in order, by name (``stop_after`` names one).
PASSES: tuple[tuple[str, Pass], ...] = (
    ("normalize", _normalize),
    ("validate", _validate),
    ("plan", _plan),
    ("estimate", _estimate),
    ("check_fit", _check_fit),
    ("emit", _emit),
)


def run_passes(state: State, *, start: str = "normalize", stop_after: str = "emit") -> State:
    """Run :data:`PASSES` from ``start`` up to and including ``stop_after``; stops after the
    first pass that reports an error (later passes assume a valid spec). Never raises for user
    mistakes."""
    names = [name for name, _ in PASSES]
    for _, fn in PASSES[names.index(start) : names.index(stop_after) + 1]:
        state = fn(state)
        if state.failed:
            break
    return state


def plan_and_estimate(
    spec: TrainSpec, *, normalized: bool = False
) -> tuple[TrainSpec, list[Diagnostic], Plan | None]:
    """(normalized spec, validation diagnostics, the plan with estimates or None on errors):
    the passes normalize (unless ``normalized``) .. estimate."""
    state = run_passes(
        State(spec=spec), start="validate" if normalized else "normalize", stop_after="estimate"
    )
    return state.spec, list(state.diagnostics), None if state.failed else state.plan


#: The fit check's what-if results of this process, keyed by :func:`_what_if_key`; bounded by
#: :data:`_WHAT_IF_MAX` (cleared when full).
_WHAT_IF: dict[str, Plan | None] = {}
_WHAT_IF_MAX = 512
#: The job name every what-if is evaluated under (the name reaches no estimate; only TRC501,
#: which a valid name passes, reads it).
_WHAT_IF_NAME = "trainc-what-if"


def _what_if_key(spec: TrainSpec) -> str:
    """The memo key of a what-if spec: its ``repr`` (every field of every section, dataclass
    reprs list them all), the job name set to :data:`_WHAT_IF_NAME` first."""
    return repr(dataclasses.replace(spec, name=_WHAT_IF_NAME))


def _evaluate(spec: TrainSpec) -> Plan | None:
    """The fit check's what-if: a changed spec through normalize .. estimate (None if invalid).

    Memoized per process: ``trainc lint`` over many specs that differ in their name and a few
    keys asks for the same what-ifs again (the same TRC401 change on the same model and
    cluster). The job name is replaced by :data:`_WHAT_IF_NAME` before the spec is evaluated,
    so two specs that differ only in their name share the result; the fit check reads the
    estimates and the layout of the result, never its name. The returned plan is shared:
    callers must not modify it (the fit check does not)."""
    key = _what_if_key(spec)
    if key not in _WHAT_IF:
        if len(_WHAT_IF) >= _WHAT_IF_MAX:
            _WHAT_IF.clear()
        _WHAT_IF[key] = plan_and_estimate(dataclasses.replace(spec, name=_WHAT_IF_NAME))[2]
    return _WHAT_IF[key]


@dataclass
class CompileResult:
    """What :func:`compile_spec` produced. ``ok`` is False when any diagnostic is an error; then
    ``plan`` may be None and ``files`` is empty. ``plan`` is the plan.json view (a dict) of
    ``ir``, the typed :class:`~trainc.compiler.ir.Plan`."""

    path: str
    diagnostics: list[Diagnostic]
    spec: TrainSpec | None = None
    files: dict[str, str] = field(default_factory=dict)
    loaded: Loaded | None = None
    ir: Plan | None = None
    _plan_json: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def plan(self) -> dict[str, Any] | None:
        """The plan.json view of :attr:`ir` (None without a plan with estimates), built on the
        first read and kept (``lint`` never reads it, so it never pays for the conversion)."""
        if self._plan_json is None and self.ir is not None:
            self._plan_json = self.ir.to_json()
        return self._plan_json

    @property
    def ok(self) -> bool:
        """True when there is no error-severity diagnostic."""
        return not any(d.is_error for d in self.diagnostics)


def compile_spec(
    path: str | os.PathLike[str],
    overrides: list[str] | tuple[str, ...] = (),
    *,
    emit_files: bool = True,
) -> CompileResult:
    """Load the spec at ``path`` and run the passes; never raises for user mistakes.

    With ``emit_files`` false (``trainc lint``, ``explain``, ``diff``) it stops after the fit
    check.
    """
    loaded = load_spec(path, overrides)
    if loaded.spec is None:
        diags = list(loaded.diagnostics)
        if loaded.partial is not None:  # schema errors: run the rules that do not read them
            partial = normalize(loaded.partial)
            filled = tainted(loaded.partial, loaded.broken)
            diags += locate(validate(partial, loaded.broken | set(filled), filled), loaded.where)
        return CompileResult(loaded.path, sort_diagnostics(diags), loaded=loaded)
    state = run_passes(
        State(spec=loaded.spec, where=loaded.where, presets=loaded.presets, spec_path=str(path)),
        stop_after="emit" if emit_files else "check_fit",
    )
    ir = state.plan if state.plan is not None and state.plan.estimates is not None else None
    return CompileResult(
        loaded.path,
        sort_diagnostics(list(state.diagnostics)),
        spec=state.spec,
        files=dict(state.files),
        loaded=loaded,
        ir=ir,
    )
