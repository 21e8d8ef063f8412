"""The residual band ``trainc calibrate`` writes into the preset: the 10th and 90th percentile
of measured / fitted estimate over the runs, widened to a floor (:func:`residual_band`), and
the note that says how it was made (:func:`band_note`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The narrowest band calibrate writes: p10 at most 0.95, p90 at least 1.05 (:func:`residual_band`).
BAND_FLOOR = (0.95, 1.05)
#: Fewer runs than this: the band's percentiles rest on a handful of points, and calibrate says
#: so (:func:`band_note`).
FEW_RUNS = 10


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation between order statistics (numpy's
    default 'linear' method)."""
    v = sorted(values)
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def residual_band(ratios: Sequence[float]) -> tuple[float, float]:
    """The (p10, p90) band ``trainc calibrate`` writes into the preset (``step_time_p10_ratio``,
    ``step_time_p90_ratio``) from the runs' measured / fitted estimate ``ratios``: their 10th and
    90th percentile (:func:`percentile`), widened where they do not reach the floor
    :data:`BAND_FLOOR` around their median ``m``: ``p10 = min(fitted p10, 0.95 m)``,
    ``p90 = max(fitted p90, 1.05 m)``. An end already beyond the floor is kept as fitted. After a
    fit ``m`` is about 1; when the fitted factors cannot reach the runs (``--factors`` holds some
    fixed, every run slower than the model) the band stays around where the runs are.

    Why a floor: measured step times of one layout vary by about 5-9 % between jobs, containers
    and clusters (run-to-run variability of large jobs; trainc/conf/step_time_band.yaml, issue
    14), so no estimate is surer than about +-5 %, however well the factors fit. A fit to a few
    runs (2-3) matches them almost exactly, and percentiles interpolated between so few points
    give a band such as 0.99-1.01: it would overstate the confidence of every estimate the
    preset carries, and shrink the planner's tie band (half the band's width) to 1 %.

    >>> residual_band([0.99, 1.01])
    (0.95, 1.05)
    >>> residual_band([0.9, 0.9, 1.2, 1.2])
    (0.9, 1.2)
    >>> residual_band([0.9, 1.0, 1.0, 1.01])
    (0.93, 1.05)
    >>> tuple(round(x, 4) for x in residual_band([1.19, 1.2, 1.21]))  # all slower: around 1.2
    (1.14, 1.26)
    """
    m = percentile(ratios, 0.5)
    return (
        min(percentile(ratios, 0.1), round(BAND_FLOOR[0] * m, 12)),
        max(percentile(ratios, 0.9), round(BAND_FLOOR[1] * m, 12)),
    )


def band_note(runs: int, fitted: tuple[float, float], band: tuple[float, float]) -> str | None:
    """The calibrate note on the band: with fewer than :data:`FEW_RUNS` runs, that it rests on
    ``runs`` runs and where it was widened to the floor; with more, only a widening; else None.
    ``fitted``: the runs' p10 and p90, ``band``: :func:`residual_band`'s."""
    floor = (
        f"the floor (p10 at most {BAND_FLOOR[0]:g} x, p90 at least {BAND_FLOOR[1]:g} x the "
        "median ratio: run-to-run variability of large jobs is about 5-9 %)"
    )
    ends = [
        f"{name} {f:.3f} -> {b:.3f}"
        for name, f, b in zip(("p10", "p90"), fitted, band, strict=True)
        if b != f
    ]
    widened = f"widened to {floor} where it did not reach it: {', '.join(ends)}"
    if runs < FEW_RUNS:
        head = (
            f"the step-time band rests on {runs} run(s) (measured / estimated p10 "
            f"{fitted[0]:.3f}, p90 {fitted[1]:.3f})"
        )
        return f"{head}; {widened}" if ends else f"{head}; kept: it reaches beyond {floor}"
    if ends:
        return f"the fitted step-time band (p10 {fitted[0]:.3f}, p90 {fitted[1]:.3f}) {widened}"
    return None
