"""Small helpers for computing fixes: divisors, value lists and the layouts that fit the cluster.

Every helper is total and bounded: specs may carry counts up to ``ranges.MAX_COUNT`` (1e12), so
nothing here loops over a value's full range.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Trial division stops here; beyond it only the small divisors (and their cofactors) are listed.
_MAX_TRIAL = 10**6


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending (empty for n < 1).

    For n above 1e12 only divisors found by trial division up to 1e6 (and their cofactors) are
    listed, which keeps fixes cheap for absurd inputs.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    if n < 1:
        return []
    top = min(int(n**0.5) + 1, _MAX_TRIAL)
    small = [i for i in range(1, top + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def show(values: Iterable[int], limit: int = 12) -> str:
    """``1, 2, 4`` (at most ``limit`` values, then ``...``); ``none`` for an empty list."""
    vals = list(values)
    if not vals:
        return "none"
    text = ", ".join(str(v) for v in vals[:limit])
    return text + (", ..." if len(vals) > limit else "")


def nearest_multiple(value: int, unit: int) -> list[int]:
    """The multiples of ``unit`` just below and above ``value`` (positive, distinct).

    >>> nearest_multiple(1028, 8)
    [1024, 1032]
    >>> nearest_multiple(3, 8)
    [8]
    """
    unit = max(unit, 1)
    lo = (value // unit) * unit
    out = [v for v in (lo, lo + unit) if v > 0]
    return sorted(set(out))


def or_list(values: Iterable[int]) -> str:
    """``1024 or 2048``."""
    return " or ".join(str(v) for v in values)


def fitting(candidates: Iterable[int], capacity: int | None) -> list[int]:
    """The candidates that divide ``capacity`` (all of them when capacity is None).

    >>> fitting([1, 2, 3, 4, 6, 12], 8)
    [1, 2, 4]
    """
    vals = list(candidates)
    if capacity is None or capacity < 1:
        return vals
    return [v for v in vals if capacity % v == 0]


def capacity(world: int, *others: int) -> int | None:
    """world / prod(others) when it divides evenly (the room left for one more axis), else None.

    >>> capacity(64, 4, 1)
    16
    >>> capacity(64, 3) is None
    True
    """
    prod = 1
    for o in others:
        prod *= max(o, 1)
    return world // prod if world % prod == 0 else None


def nearest(values: Iterable[int], current: int) -> int | None:
    """The value closest to ``current``, preferring the smaller one on ties (None if empty).

    >>> nearest([1, 2, 4], 3)
    2
    >>> nearest([5, 10], 1)
    5
    """
    vals = sorted(values)
    if not vals:
        return None
    return min(vals, key=lambda v: (abs(v - current), v))
