"""The driver: the only code that knows the order of the passes.

load -> normalize -> validate -> (stop on errors) -> plan -> estimate -> check_fit -> (stop) -> emit
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.diagnostics import Diagnostic, locate, sort_diagnostics
from trainc.compiler.emit import emit
from trainc.compiler.estimate import estimate
from trainc.compiler.load import Loaded, artifact_file, load_spec
from trainc.compiler.normalize import normalize, tainted
from trainc.compiler.plan import plan as make_plan
from trainc.compiler.validate import validate
from trainc.compiler.validate.fit import check_fit
from trainc.schemas import TrainSpec

PASSES = ("load", "normalize", "validate", "plan", "estimate", "check_fit", "emit")


@dataclass
class CompileResult:
    """What :func:`compile_spec` produced. ``ok`` is False when any diagnostic is an error; then
    ``plan`` may be None and ``files`` is empty."""

    path: str
    diagnostics: list[Diagnostic]
    spec: TrainSpec | None = None
    plan: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    loaded: Loaded | None = None

    @property
    def ok(self) -> bool:
        """True when there is no error-severity diagnostic."""
        return not any(d.is_error for d in self.diagnostics)


def _artifact_record(d: Diagnostic, spec_path: str | os.PathLike[str]) -> dict[str, Any]:
    """A diagnostic's JSON record for ``plan.json``: its file relative to the spec's folder."""
    rec = d.to_json()
    if "file" in rec:
        rec["file"] = artifact_file(rec["file"], spec_path)
    return rec


def compile_spec(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = (), *,
                 emit_files: bool = True) -> CompileResult:
    """Run the passes on the spec at ``path``; never raises for user mistakes.

    With ``emit_files`` false (``trainc lint``) it stops after the fit check.
    """
    loaded = load_spec(path, overrides)
    if loaded.spec is None:
        diags = list(loaded.diagnostics)
        if loaded.partial is not None:  # schema errors: run the rules that do not read them
            partial = normalize(loaded.partial)
            filled = tainted(loaded.partial, loaded.broken)
            diags += locate(validate(partial, loaded.broken | set(filled), filled),
                            loaded.where)
        return CompileResult(loaded.path, sort_diagnostics(diags), loaded=loaded)
    spec = normalize(loaded.spec)
    diags = locate(validate(spec), loaded.where)
    result = CompileResult(loaded.path, sort_diagnostics(diags), spec=spec, loaded=loaded)
    if not result.ok:
        return result
    the_plan = make_plan(spec)
    the_plan["presets"] = loaded.presets
    the_plan["estimates"] = estimate(spec, the_plan)
    diags += locate(check_fit(spec, the_plan), loaded.where)
    result.diagnostics = sort_diagnostics(diags)
    the_plan["diagnostics"] = [_artifact_record(d, path) for d in result.diagnostics]
    result.plan = the_plan
    if result.ok and emit_files:
        result.files = emit(the_plan)
    return result
