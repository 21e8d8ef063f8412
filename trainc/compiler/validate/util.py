"""Small helpers for computing fixes: divisors and value lists."""

from __future__ import annotations

from collections.abc import Iterable


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending (empty for n < 1).

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    if n < 1:
        return []
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def show(values: Iterable[int], limit: int = 12) -> str:
    """``1, 2, 4`` (at most ``limit`` values, then ``...``)."""
    vals = list(values)
    text = ", ".join(str(v) for v in vals[:limit])
    return text + (", ..." if len(vals) > limit else "")


def nearest_multiple(value: int, unit: int) -> list[int]:
    """The multiples of ``unit`` just below and above ``value`` (positive, distinct).

    >>> nearest_multiple(1028, 8)
    [1024, 1032]
    """
    lo = (value // unit) * unit
    out = [v for v in (lo, lo + unit) if v > 0]
    return sorted(set(out))
