"""The fit of ``trainc calibrate``: the cluster factors each time model reads (:data:`FACTORS`),
a bounded Nelder-Mead search (:func:`nelder_mead`, :func:`_minimise`), the fit with its forward
selection of the factors the runs support (:func:`fit`) and the sanity rule after it
(:func:`check_agreement`). The method is described in :mod:`trainc.calibrate`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainc.calibrate.band import band_note, percentile, residual_band
from trainc.calibrate.runs import CalibrateError, Run
from trainc.compiler.estimate import estimate
from trainc.compiler.estimate.kernels import kernel_factor
from trainc.compiler.ir import Plan
from trainc.schemas import Fp8Format, TimeModel, TrainSpec

#: Cluster factors the fit may change, per time model (``cluster.time_model``): name ->
#: (lower, upper) bound. Every name is a float/int field of :class:`trainc.schemas.ClusterSpec`
#: that model reads: ``seed`` (:func:`trainc.compiler.estimate.time.seed_step_time`) one
#: compute_efficiency over Megatron's FLOPs with its small-micro-batch roll-off; ``kernels``
#: (:mod:`trainc.compiler.estimate.kernels`, :func:`~trainc.compiler.estimate.time.
#: kernel_step_time`, :func:`~trainc.compiler.estimate.comm.time_collectives`) the GEMM and
#: attention ceilings and the MoE layer cost, whose null cluster keys resolve to the GPU
#: profile (:func:`trainc.compiler.estimate.kernels.kernel_factor`), and the fixed and
#: communication factors.
FACTORS: dict[TimeModel, dict[str, tuple[float, float]]] = {
    TimeModel.seed: {
        "compute_efficiency": (0.05, 1.0),
        "gemm_half_efficiency_tokens": (0.0, 65536.0),
        "layer_overhead_us": (0.0, 5000.0),
        "comm_overlap": (0.0, 1.0),
    },
    TimeModel.kernels: {
        "gemm_efficiency": (0.05, 1.0),
        "fp8_gemm_efficiency": (0.05, 1.0),
        "attention_efficiency": (0.05, 1.0),
        "moe_layer_overhead_us": (0.0, 5000.0),
        "layer_overhead_us": (0.0, 5000.0),
        "comm_efficiency": (0.05, 1.0),
        "comm_overlap": (0.0, 1.0),
    },
}


def factors_for(time_model: TimeModel) -> dict[str, tuple[float, float]]:
    """The factors (name -> bounds) the time model ``time_model`` reads (:data:`FACTORS`)."""
    return FACTORS[time_model]


def default_factors(runs: Sequence[Run]) -> list[str]:
    """The factors fitted when ``--factors`` is not given: those of the runs' time model that
    at least one run exercises (``fp8_gemm_efficiency`` needs an FP8/FP4 run,
    ``moe_layer_overhead_us`` an MoE run; a factor no run reads would wander freely)."""
    spec = runs[0].plan.spec if runs and runs[0].plan is not None else runs[0].spec
    names = list(factors_for(spec.cluster.time_model))
    specs = [r.plan.spec if r.plan is not None else r.spec for r in runs]
    if not any(x.training.fp8_format is not Fp8Format.none for x in specs):
        names = [n for n in names if n != "fp8_gemm_efficiency"]
    if not any(x.model.num_experts for x in specs):
        names = [n for n in names if n != "moe_layer_overhead_us"]
    return names


def factor_value(spec: TrainSpec, name: str) -> float:
    """The value the spec's time model uses for factor ``name`` (a null key: the GPU
    profile's)."""
    return kernel_factor(spec, name)


#: Nelder-Mead runs at most (each from the previous one's best point).
RESTARTS = 6
#: Factors the schema types as integers (rounded when written).
INT_FACTORS = frozenset({"gemm_half_efficiency_tokens"})
#: A fitted factor within this fraction of its range's width of a bound is tested for being at
#: the bound (:func:`near_bound`; the fit then sets it to the bound when that fits no worse).
AT_BOUND_TOL = 1e-3
#: A factor is unconstrained by the runs when fitting it lowers the RMS log error of the step
#: time by at most this (absolute; 0.005 = 0.5 % per run; :func:`supported`).
UNCONSTRAINED_RMS = 0.005
#: After the fit every run's measured / estimated step time must lie within this range
#: (:func:`check_agreement`); otherwise the runs and the time model disagree and no preset is
#: written.
AGREEMENT = (0.5, 2.0)


@dataclass
class FitResult:
    """What :func:`fit` found (factors by name; estimates in seconds, one per run)."""

    names: list[str]
    before: dict[str, float]
    after: dict[str, float]
    estimates_before: list[float]
    estimates_after: list[float]
    p10_ratio: float
    """The band written into the preset (:func:`residual_band`: at most BAND_FLOOR[0] x the
    median ratio)."""
    p90_ratio: float
    """The band's upper end (at least BAND_FLOOR[1] x the median ratio)."""
    fitted_p10_ratio: float
    """The 10th percentile of measured / fitted estimate over the runs, before the floor."""
    fitted_p90_ratio: float
    """The 90th percentile, before the floor."""
    rms_log_before: float
    rms_log_after: float
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)


def step_estimate(plan: Plan, factors: dict[str, float]) -> float:
    """The full estimator's step time (seconds) of ``plan`` with the cluster ``factors``."""
    changes: dict[str, Any] = dict(factors)
    cl = dataclasses.replace(plan.spec.cluster, **changes)
    spec = dataclasses.replace(plan.spec, cluster=cl)
    return float(estimate(dataclasses.replace(plan, spec=spec)).step_time_seconds)


def nelder_mead(
    f: Callable[[list[float]], float],
    x0: list[float],
    *,
    step: float = 0.5,
    max_evals: int = 600,
    xtol: float = 1e-6,
    ftol: float = 1e-12,
) -> tuple[list[float], float, int]:
    """Minimise ``f`` from ``x0`` (Nelder and Mead 1965; coefficients 1, 2, 0.5, 0.5). Returns
    (x, f(x), evaluations)."""
    n = len(x0)
    simplex = [list(x0)] + [
        [x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)
    ]
    vals = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = sorted(range(n + 1), key=lambda i: vals[i])
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        if (
            abs(vals[-1] - vals[0]) <= ftol
            and max(abs(a - b) for x in simplex[1:] for a, b in zip(x, simplex[0], strict=True))
            <= xtol
        ):
            break
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(refl)
        evals += 1
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(exp)
            evals += 1
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(con)
            evals += 1
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for x, b in zip(p, best, strict=True)] for p in simplex[1:]
                ]
                vals = [vals[0]] + [f(x) for x in simplex[1:]]
                evals += n
    i = min(range(n + 1), key=lambda k: vals[k])
    return simplex[i], vals[i], evals


def _reflect(x: float, lo: float, hi: float) -> float:
    """``x`` folded into [lo, hi] by reflection at the bounds (a bounded search without the flat
    ends a logistic map has: the simplex never stalls against a bound)."""
    w = hi - lo
    t = (x - lo) / w % 2.0
    return lo + w * (2.0 - t if t > 1.0 else t)


def near_bound(value: float, lo: float, hi: float, tol: float = AT_BOUND_TOL) -> float | None:
    """The bound of [lo, hi] that ``value`` lies within ``tol`` x (hi - lo) of, else None.

    >>> near_bound(0.0, 0.0, 1.0), near_bound(0.0004, 0.0, 1.0), near_bound(4999.5, 0.0, 5000.0)
    (0.0, 0.0, 5000.0)
    >>> near_bound(0.0011, 0.0, 1.0), near_bound(0.051, 0.05, 1.0), near_bound(0.5, 0.0, 1.0)
    (None, None, None)
    """
    if value - lo <= tol * (hi - lo):
        return lo
    if hi - value <= tol * (hi - lo):
        return hi
    return None


def supported(rms_without: float, rms_with: float, n_runs: int) -> bool:
    """Whether freeing one more factor is supported by ``n_runs`` runs: it lowers the RMS log
    error of the step time from ``rms_without`` to ``rms_with`` by more than UNCONSTRAINED_RMS
    (run-to-run variability of large jobs is 5-9 %, so a smaller gain is noise) and by enough
    that the Bayesian information criterion prefers it (Schwarz 1978, Ann. Statist. 6(2):
    ``n ln(SSE_without / SSE_with) > ln n`` for one more parameter under Gaussian errors; the
    SSE ratio is the squared RMS ratio).

    >>> supported(0.174, 0.0145, 6), supported(0.064, 0.057, 9), supported(0.02, 0.016, 100)
    (True, False, False)
    """
    if rms_without - rms_with <= UNCONSTRAINED_RMS:
        return False
    if rms_with <= 0:
        return True
    return n_runs * 2 * math.log(rms_without / rms_with) > math.log(max(n_runs, 2))


def _minimise(
    loss_of: Callable[[dict[str, float]], float],
    names: Sequence[str],
    x0: dict[str, float],
    known: dict[str, tuple[float, float]],
    max_evals: int,
) -> tuple[dict[str, float], int]:
    """Minimise ``loss_of`` over the factors ``names`` from ``x0`` within their bounds
    ``known`` (Nelder-Mead, restarted from its best point while it improves; see the module
    docstring). Returns (the factors, evaluations); integer factors are rounded."""
    # search coordinates: each factor in units of its start value (or a tenth of its range)
    scale = {n: abs(x0[n]) if x0[n] else 0.1 * (known[n][1] - known[n][0]) for n in names}

    def factors_of(u: list[float]) -> dict[str, float]:
        return {n: _reflect(v * scale[n], *known[n]) for n, v in zip(names, u, strict=True)}

    def loss(u: list[float]) -> float:
        return loss_of(factors_of(u))

    u = [_reflect(x0[n], *known[n]) / scale[n] for n in names]
    try:
        from scipy.optimize import (  # type: ignore[import-untyped,unused-ignore]
            minimize,  # optional: scipy's Nelder-Mead when installed
        )
    except ImportError:
        minimize = None
    evals, best = 0, math.inf
    for _ in range(RESTARTS):  # restarting from the best point with a fresh simplex (standard
        # practice: a collapsed simplex stalls on narrow valleys)
        if minimize is not None:
            res = minimize(
                lambda v: loss(list(v)),
                u,
                method="Nelder-Mead",
                options={"maxfev": max_evals, "xatol": 1e-7, "fatol": 1e-14},
            )
            u, val, nfev = [float(v) for v in res.x], float(res.fun), int(res.nfev)
        else:
            u, val, nfev = nelder_mead(loss, u, step=0.3, max_evals=max_evals)
        evals += nfev
        if val >= best - 1e-12 * max(1.0, best):
            break
        best = val
    after = factors_of(u)
    for n in INT_FACTORS & set(after):
        after[n] = float(round(after[n]))
    return after, evals


@dataclass
class _Objective:
    """The fit's objective over planned ``runs``: the sum over runs of ``(log estimate - log
    measured)^2`` of the step time, the estimate :func:`step_estimate`'s with the factors
    replaced; ``known``: the factors' bounds, ``max_evals``: per Nelder-Mead run."""

    runs: list[Run]
    known: dict[str, tuple[float, float]]
    max_evals: int
    meas: list[float] = field(init=False)
    """The runs' log measured step times."""

    def __post_init__(self) -> None:
        self.meas = [math.log(r.measured_step_seconds) for r in self.runs]

    def estimates(self, factors: dict[str, float]) -> list[float]:
        """The runs' estimated step times (seconds) with the cluster ``factors``."""
        return [step_estimate(r.plan, factors) for r in self.runs]  # type: ignore[arg-type]

    def loss(self, fac: dict[str, float]) -> float:
        """The sum of squared log errors with the factors ``fac`` (1e30 if an estimate is not a
        positive finite number)."""
        est = self.estimates(fac)
        if any(e <= 0 or not math.isfinite(e) for e in est):
            return 1e30
        return sum((math.log(e) - m) ** 2 for e, m in zip(est, self.meas, strict=True))

    def rms(self, fac: dict[str, float]) -> float:
        """The RMS log error of the step time with the factors ``fac``."""
        return math.sqrt(self.loss(fac) / len(self.runs))

    def rms_of_estimates(self, est: list[float]) -> float:
        """The RMS log error of the step-time estimates ``est`` (one per run)."""
        return math.sqrt(
            sum((math.log(e) - m) ** 2 for e, m in zip(est, self.meas, strict=True))
            / len(self.meas)
        )

    def refit(self, free: Sequence[str], at: dict[str, float]) -> tuple[dict[str, float], int]:
        """``at`` with the factors ``free`` fitted (the others held at their ``at`` values)."""
        got, ev = _minimise(
            lambda f: self.loss({**at, **f}),
            free,
            {m: at[m] for m in free},
            self.known,
            self.max_evals,
        )
        return {**at, **got}, ev


def _check_factor_names(
    runs: list[Run], names: list[str], known: dict[str, tuple[float, float]], spec0: TrainSpec
) -> None:
    """Raise CalibrateError for factor ``names`` the fit cannot free: named twice, exercised by
    no run, unknown to the time model, or more than the runs' distinct specs."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CalibrateError(f"--factors names {', '.join(twice)} more than once")
    idle = [n for n in names if n in known and n not in default_factors(runs)]
    if idle:
        raise CalibrateError(
            f"no run exercises {', '.join(idle)} (fp8_gemm_efficiency needs an FP8/FP4 run, "
            "moe_layer_overhead_us an MoE run): the fit would leave it where it is; drop it "
            "from --factors"
        )
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CalibrateError(
            f"unknown factor(s) {', '.join(unknown)} for time_model "
            f"{spec0.cluster.time_model.value}; known: {', '.join(known)}"
        )
    # repeats of one spec measure its noise, not another direction: count distinct specs
    distinct = len({r.plan.spec_hash for r in runs})  # type: ignore[union-attr]
    if distinct < len(names):
        of = f" of {distinct} distinct spec(s)" if distinct < len(runs) else ""
        raise CalibrateError(
            f"{len(runs)} run(s){of} for {len(names)} free factor(s): the fit is "
            "under-determined (many factor values match the runs equally well); pass --factors "
            f"with at most {distinct} of: {','.join(names)}, or add runs of other layouts"
        )


def _fit_named(
    obj: _Objective, names: list[str], x0: dict[str, float]
) -> tuple[dict[str, float], int, list[str], list[str]]:
    """The factors ``names`` (``--factors``) fitted together from ``x0``, and a note for each
    that the runs do not support (:func:`supported`) against fixing it at its start value.
    Returns (factors, evaluations, the free factors, notes)."""
    notes: list[str] = []
    n_runs = len(obj.runs)
    after, evals = _minimise(obj.loss, names, x0, obj.known, obj.max_evals)
    base = obj.rms(after)
    free = list(names)
    for n in names if len(names) > 1 else []:
        trial, ev = obj.refit([m for m in names if m != n], {**after, n: x0[n]})
        evals += ev
        cost = obj.rms(trial) - base
        if not supported(obj.rms(trial), base, n_runs):
            notes.append(
                f"the runs hardly constrain {n}: fixed at its start value "
                f"{x0[n]:g} with the others refitted, the RMS log error changes "
                f"by {cost:+.4f} (fitted: {after[n]:g}); fit it from runs where it "
                "matters, or leave it out of --factors"
            )
    return after, evals, free, notes


def _select_forward(
    obj: _Objective, names: list[str], x0: dict[str, float]
) -> tuple[dict[str, float], int, list[str], list[str]]:
    """Forward selection from the start values ``x0``: free the factor of ``names`` whose fit
    lowers the RMS log error most, then the next, while the runs support each
    (:func:`supported`), then fit the selected ones together from ``x0``; the rest keep their
    start values and a note names them. Returns (factors, evaluations, the free factors,
    notes)."""
    notes: list[str] = []
    n_runs = len(obj.runs)
    free: list[str] = []
    after, evals = dict(x0), 0
    while len(free) < len(names):
        base = obj.rms(after)
        trials = []
        for n in (m for m in names if m not in free):
            trial, ev = obj.refit([*free, n], after)
            evals += ev
            trials.append((base - obj.rms(trial), n, trial))
        gain, n, trial = max(trials, key=lambda t: (t[0], -names.index(t[1])))
        if not supported(base, base - gain, n_runs):
            break
        free.append(n)
        after = trial
    free = [n for n in names if n in free]
    if free:  # all selected factors together, from the start values
        after, ev = obj.refit(free, dict(x0))
        evals += ev
    kept = [n for n in names if n not in free]
    if kept:
        notes.append(
            f"the runs do not constrain {', '.join(kept)}: kept at the start "
            "value(s) ("
            + ", ".join(f"{n} {x0[n]:g}" for n in kept)
            + "): freeing one more factor does not lower the RMS log error by "
            f"more than {UNCONSTRAINED_RMS} nor by enough for {n_runs} run(s) "
            "(the Bayesian information criterion); name one in --factors to fit "
            "it anyway"
        )
    return after, evals, free, notes


def _snap_to_bounds(
    obj: _Objective, free: list[str], after: dict[str, float]
) -> tuple[dict[str, float], list[str]]:
    """The fitted factors with each free factor near a bound (:func:`near_bound`) set to the
    bound when the bound fits no worse, and a note for each so set. Returns (factors, notes)."""
    # a factor at its bound: the search approaches a bound the runs push it against only to
    # within its tolerance, and a value near a bound may be a true interior optimum. Near a
    # bound (near_bound), the factor is at the bound when the bound itself fits no worse: it is
    # set there and a note says so; otherwise it stays where the fit put it, without a note.
    notes: list[str] = []
    for n in free:
        lo, hi = obj.known[n]
        b = near_bound(after[n], lo, hi)
        if b is None:
            continue
        trial = {**after, n: b}
        if b == after[n] or obj.loss(trial) <= obj.loss(after):
            after = trial
            notes.append(
                f"{n} ended at its {'lower' if b == lo else 'upper'} bound {b:g} "
                f"(range {lo:g}..{hi:g}): the runs push it there or do not constrain "
                "it"
            )
    return after, notes


def _fit_result(
    obj: _Objective,
    names: list[str],
    before: dict[str, float],
    after: dict[str, float],
    evals: int,
    notes: list[str],
) -> FitResult:
    """The :class:`FitResult` of the fitted factors ``after``: estimates before and after, the
    residual band (:func:`residual_band`) and its note (:func:`band_note`) after ``notes``."""
    runs = obj.runs
    eb, ea = obj.estimates(before), obj.estimates(after)
    ratios = [r.measured_step_seconds / e for r, e in zip(runs, ea, strict=True)]
    fitted = (percentile(ratios, 0.1), percentile(ratios, 0.9))
    band = residual_band(ratios)
    note = band_note(len(runs), fitted, band)
    if note:
        notes.append(note)
    return FitResult(
        names,
        before,
        after,
        eb,
        ea,
        p10_ratio=band[0],
        p90_ratio=band[1],
        fitted_p10_ratio=fitted[0],
        fitted_p90_ratio=fitted[1],
        rms_log_before=obj.rms_of_estimates(eb),
        rms_log_after=obj.rms_of_estimates(ea),
        evaluations=evals,
        notes=notes,
    )


def fit(
    runs: list[Run],
    names: Sequence[str] | None = None,
    start: dict[str, float] | None = None,
    max_evals: int = 600,
) -> FitResult:
    """Fit the factors ``names`` (default: :func:`default_factors`) to planned ``runs``
    (:func:`prepare`); ``start``: the initial values (default: the first run's cluster)."""
    if not runs:
        raise CalibrateError("no run to fit")
    assert all(r.plan is not None for r in runs)
    spec0 = runs[0].plan.spec  # type: ignore[union-attr]
    known = factors_for(spec0.cluster.time_model)
    names_given = bool(names)
    names = list(names or default_factors(runs))
    _check_factor_names(runs, names, known, spec0)
    before = {n: factor_value(spec0, n) for n in names}
    x0 = dict(start or before)
    obj = _Objective(runs, known, max_evals)
    # Factors the runs do not constrain (runs that barely communicate say nothing about
    # comm_efficiency; several factors trade off along one direction, as a uniform slowdown
    # that the GEMM, attention and communication factors can each absorb) wander to wherever
    # the search stops, a bound typically, and the preset then prices other layouts with them.
    # With the default factors the fit therefore selects forward: from the start values, it
    # frees the factor whose fit lowers the RMS log error most, then the next, while the runs
    # support each (:func:`supported`: a gain above UNCONSTRAINED_RMS that the BIC accepts);
    # the rest keep their start values and are named. --factors fits exactly the named ones
    # and names those the same test does not support against fixing them at the start value.
    step = _fit_named if names_given else _select_forward
    after, evals, free, notes = step(obj, names, x0)
    after, bound_notes = _snap_to_bounds(obj, free, after)
    return _fit_result(obj, names, before, after, evals, notes + bound_notes)


def check_agreement(runs: Sequence[Run], result: FitResult) -> None:
    """The sanity rule of a fit: after it, every run's measured / estimated step time lies
    within :data:`AGREEMENT` (0.5..2). A run outside is one the time model cannot describe with
    any factors in their ranges (a wrong measurement, unit or spec): the factors then end
    wherever that run drags them and the preset would mislead every estimate. Raises
    CalibrateError naming the worst runs (at most 3) and their ratios."""
    lo, hi = AGREEMENT
    ratios = [
        (r.measured_step_seconds / e, r.name)
        for r, e in zip(runs, result.estimates_after, strict=True)
    ]
    bad = sorted(
        ((x, n) for x, n in ratios if not lo <= x <= hi), key=lambda t: -abs(math.log(t[0]))
    )
    if not bad:
        return
    shown = ", ".join(f"{n} {x:.4g}" for x, n in bad[:3]) + (" ..." if len(bad) > 3 else "")
    raise CalibrateError(
        f"after the fit {len(bad)} of {len(ratios)} run(s) disagree with the time model by "
        f"more than {hi:g}x (measured / estimated outside {lo:g}..{hi:g}): {shown}; check their "
        "measurements (seconds per step) and specs, or leave them out: no preset is written"
    )
