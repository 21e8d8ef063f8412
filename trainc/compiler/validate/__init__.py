"""validate: run every rule family over a normalized spec and collect all diagnostics.

Validators never mutate and never raise for user input; each is ``(spec, derived) -> iterable of
Diagnostic``. A key whose value is invalid (a range error here, or a schema error the loader
found, passed as ``broken``) is set to its default, or a placeholder, and the families run over
a recording view of the spec (:mod:`trainc.compiler.validate.reads`): a finding of a family that
had read a broken key before yielding it is withheld, and one TRC009 note per broken key says
that the checks reading it were skipped. So one run reports every error whose inputs are known.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping

from trainc.compiler import rules as R
from trainc.compiler.derive import derive
from trainc.compiler.diagnostics import Diagnostic, diag, for_engine
from trainc.compiler.normalize import FILLED_FROM, spec_value
from trainc.compiler.support.treecopy import copy_tree
from trainc.compiler.validate.checkpoint import checkpoint
from trainc.compiler.validate.compatibility import compatibility
from trainc.compiler.validate.data import data_path
from trainc.compiler.validate.divisibility import _heads, _moe, divisibility
from trainc.compiler.validate.launcher import launcher
from trainc.compiler.validate.layers import _batch, _layers
from trainc.compiler.validate.ranges import ranges
from trainc.compiler.validate.reads import DerivedView, SpecView, hits
from trainc.compiler.validate.sequence import sequence
from trainc.compiler.validate.topology import _dense_grid, _expert_grid, _nvlink, topology
from trainc.compiler.validate.versions import versions
from trainc.schemas import TrainSpec

VALIDATORS = (topology, divisibility, compatibility, launcher, data_path, versions, checkpoint)
#: The same rules in finer parts (each family is the concatenation of its parts, a test checks
#: it), used when some keys are invalid: a part that read one has its findings withheld, so the
#: finer the parts, the more independent findings are still reported.
PARTS = (
    _dense_grid,
    _expert_grid,
    _nvlink,
    _heads,
    _moe,
    _layers,
    _batch,
    sequence,
    compatibility,
    launcher,
    data_path,
    versions,
    checkpoint,
)


def validate(
    spec: TrainSpec,
    broken: frozenset[str] = frozenset(),
    stands_for: Mapping[str, frozenset[str]] | None = None,
) -> list[Diagnostic]:
    """All diagnostics of a normalized spec (unsorted, without locations), graded for the
    spec's engine (:func:`trainc.compiler.diagnostics.for_engine`).

    ``broken``: keys whose value the loader could not take (they hold defaults or placeholders
    in ``spec``); findings that read them are withheld, as are those reading a key with a range
    error (TRC006). ``stands_for`` maps a broken key that normalization filled from others
    (``parallel.etp`` from ``parallel.tp``) to those, which the TRC009 notes name instead.
    """
    # a broken key holds a placeholder, or a value normalization computed from one
    # (``model.ffn_hidden_size`` = 0 from a missing ``hidden_size``): no range error of its own
    out = [d for d in _drop_echoes(list(ranges(spec)), spec) if d.key not in broken]
    bad = frozenset(broken) | {d.key for d in out if d.is_error} | _echo_keys(spec, out)
    if not bad:  # the fast path (the planner validates thousands of candidates)
        derived = derive(spec)
        for validator in VALIDATORS:
            out.extend(validator(spec, derived))
        return for_engine(out, spec.engine.value)
    found = out + _validate_around(_with_defaults(spec, bad), bad, stands_for or {})
    return for_engine(found, spec.engine.value)


def _echo(spec: TrainSpec, key: str, errs: set[str]) -> bool:
    """``key`` holds the value normalization copied from an input that has a range error
    (``parallel.etp`` = ``parallel.tp`` = -8, ``training.lr_decay_iters`` = ``train_iters`` =
    0): the same mistake, reported once, at the key the user wrote."""
    return any(
        i in errs and spec_value(spec, i) == spec_value(spec, key) for i in FILLED_FROM.get(key, ())
    )


def _echo_keys(spec: TrainSpec, found: list[Diagnostic]) -> set[str]:
    errs = {d.key for d in found if d.is_error}
    return {k for k in FILLED_FROM if k not in errs and _echo(spec, k, errs)}


def _drop_echoes(found: list[Diagnostic], spec: TrainSpec) -> list[Diagnostic]:
    """The range errors without those of keys that echo another's (:func:`_echo`)."""
    errs = {d.key for d in found if d.is_error}
    return [d for d in found if not (d.is_error and _echo(spec, d.key, errs - {d.key}))]


def _with_defaults(spec: TrainSpec, bad: frozenset[str]) -> TrainSpec:
    """``spec`` with each out-of-range key set to its default (or 1), so arithmetic stays total."""
    s = copy_tree(spec)
    for key in bad:
        section, _, name = key.rpartition(".")
        obj = getattr(s, section, None) if section else s
        if (
            obj is None
            or not dataclasses.is_dataclass(obj)
            or name not in {f.name for f in dataclasses.fields(obj)}
        ):
            continue
        value = getattr(obj, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f = next(f for f in dataclasses.fields(obj) if f.name == name)
            default = f.default if f.default is not dataclasses.MISSING else 1
            ok = default is None or (isinstance(default, (int, float)) and default > 0)
            setattr(obj, name, default if ok else type(value)(1))
    return s


def _validate_around(
    spec: TrainSpec, bad: frozenset[str], stands_for: Mapping[str, frozenset[str]]
) -> list[Diagnostic]:
    derive_reads: set[str] = set()
    try:
        derived = derive(SpecView(spec, derive_reads))  # type: ignore[arg-type]
    except (ArithmeticError, ValueError, TypeError):  # placeholders the arithmetic refuses
        return _notes(bad, Counter(), set(bad), stands_for)
    out: list[Diagnostic] = []
    withheld: Counter[str] = Counter()
    ever_read: set[str] = set()
    for validator in PARTS:
        reads: set[str] = set()
        view = SpecView(spec, reads)
        try:
            for d in validator(view, DerivedView(derived, derive_reads, reads)):  # type: ignore[arg-type]
                touched = hits(reads | {d.key, *d.related}, bad)
                if touched:
                    withheld.update(touched)
                else:
                    out.append(d)
        except (ArithmeticError, ValueError, TypeError):
            # a placeholder the family's arithmetic refuses: what it found so far stands
            reads |= set(bad)
        ever_read |= hits(reads, bad)
    return out + _notes(bad, withheld, ever_read, stands_for)


def _notes(
    bad: frozenset[str],
    withheld: Counter[str],
    read: set[str],
    stands_for: Mapping[str, frozenset[str]],
) -> list[Diagnostic]:
    """One TRC009 note per broken key (or the key it was filled from) that a check read."""
    roots: Counter[str] = Counter()
    seen: set[str] = set()
    for key in read & set(bad):
        # a key normalization filled from another bad one (etp from tp = 0) is named by it
        inputs = frozenset(i for i in FILLED_FROM.get(key, ()) if i in bad)
        for root in stands_for.get(key, inputs or frozenset({key})):
            seen.add(root)
            roots[root] += withheld[key]
    out = []
    for key in sorted(seen):
        n = roots[key]
        found = f"; {n} finding(s) computed from a stand-in value withheld" if n else ""
        out.append(
            diag(
                R.CHECKS_SKIPPED,
                f"checks that read {key} were skipped because its "
                f"value is invalid (see the error above){found}",
                key,
                fix=f"fix {key} and lint again",
                withheld=n,
            )
        )
    return out
