"""Pipeline bubble: the idle fraction of a step caused by the pipeline schedule.

1F1B (and GPipe) with ``p`` stages and ``m`` micro-batches: each stage idles ``p - 1`` micro-batch
slots (forward + backward) out of ``m + p - 1``, so the bubble is ``(p - 1) / (m + p - 1)`` (Narayanan
et al. 2021, arXiv:2104.04473 §2.2; worked examples A and B, docs/references.md). The interleaved schedule with ``v``
model chunks per rank shrinks the idle slots to ``(p - 1)/v`` chunk-sized slots: ``(p - 1) / (v*m + p - 1)``
(worked example B; Narayanan et al. 2021 §2.2.2 gives the bubble *ratio* ``(p-1)/(v*m)``, i.e. bubble
time over ideal time; the fraction of the whole step is the form above).
"""

from __future__ import annotations


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Idle fraction of the step, in [0, 1).

    >>> bubble_fraction(4, 8)  # worked example B: 3/11
    0.2727272727272727
    >>> bubble_fraction(4, 16) == 3 / 19
    True
    >>> bubble_fraction(4, 8, 2) == 3 / 19
    True
    >>> bubble_fraction(1, 8)
    0.0
    """
    if pp <= 1:
        return 0.0
    m, v = max(num_microbatches, 1), max(vpp, 1)
    return (pp - 1) / (v * m + pp - 1)
