"""Numbers where a person reads them (``explain``, ``report.md``, ``report.html``, ``diff``).

One rule for every renderer: a value is rounded to the precision it is shown with, and a value
that rounds to zero is shown as zero (never ``-0.00`` or ``-3.109e-15``); estimates are sums of
floats, so a "zero" can be a rounding residue of either sign. ``plan.json`` keeps the exact
numbers; only their text changes here.
"""

from __future__ import annotations

#: Below this magnitude a value shown with significant digits (:func:`sig`) is a rounding residue:
#: the estimates are seconds, bytes and FLOPs of steps, none of them meaningful under 1e-12.
NOISE_FLOOR = 1e-12


def fixed(x: float, digits: int = 2, *, sep: bool = False) -> str:
    """``x`` with ``digits`` decimals, zero without a sign: ``fixed(-3e-15) == "0.00"``;
    ``sep`` adds thousands separators."""
    r = round(float(x), digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{r:,.{digits}f}" if sep else f"{r:.{digits}f}"


def percent(fraction: float, digits: int = 1) -> str:
    """A fraction in percent without the sign: ``percent(0.1234) == "12.3"``."""
    return fixed(100 * float(fraction), digits)


def sig(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits (``g`` format); a value under
    :data:`NOISE_FLOOR` in magnitude is ``"0"``."""
    x = float(x)
    if abs(x) < NOISE_FLOOR:
        return "0"
    return f"{x:.{digits}g}"


def gib(nbytes: float, digits: int = 2, *, sep: bool = True) -> str:
    """Bytes in GiB with ``digits`` decimals (and thousands separators unless ``sep`` is
    False)."""
    return fixed(float(nbytes) / 2**30, digits, sep=sep)
