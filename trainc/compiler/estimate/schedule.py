"""Pipeline schedule simulation (1F1B and interleaved 1F1B) for the report's timeline.

Each stage runs its operations in Megatron-Core's order
(``megatron/core/pipeline_parallel/schedules.py``): 1F1B does ``p - s - 1`` warm-up forwards, then
alternates one forward and one backward, then drains the backwards; the interleaved schedule warms
up ``2(p - s - 1) + (v - 1)p`` chunk-forwards and walks the model chunks in groups of ``p``
micro-batches. An operation starts when its stage is free and its input is ready (the previous
stage's forward, the next stage's backward). A forward takes ``t_f``, a backward ``2 t_f`` (the usual
2:1 ratio), divided by ``v`` for a model chunk. The makespan reproduces the bubble formula of
:mod:`.bubble`: ``(m + (p - 1)/v) (t_f + t_b)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    """One forward or backward of one micro-batch (and model chunk) on one stage."""

    stage: int
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int
    start: float
    end: float


def _order(p: int, s: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """(kind, microbatch, chunk) in the order stage ``s`` runs them."""
    total = m * v

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warm = min(p - s - 1, m) if v == 1 else min(2 * (p - s - 1) + (v - 1) * p, total)
    out = [fwd(k) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        out.append(fwd(f))
        f += 1
        out.append(bwd(b))
        b += 1
    out += [bwd(k) for k in range(b, total)]
    return out


def simulate(p: int, m: int, v: int = 1, t_f: float = 1.0) -> list[Op]:
    """Every operation with its start and end time.

    >>> ops = simulate(4, 8)
    >>> max(o.end for o in ops) == (8 + 4 - 1) * 3.0  # (m + p - 1)(t_f + t_b)
    True
    """
    if v > 1 and m % p:
        v = 1  # Megatron needs m % p == 0 to interleave; draw plain 1F1B otherwise
    t_b = 2 * t_f
    dur = {"F": t_f / v, "B": t_b / v}
    orders = [_order(p, s, m, v) for s in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    pos, free = [0] * p, [0.0] * p
    out: list[Op] = []

    def dep(kind: str, mb: int, ch: int, s: int) -> tuple[str, int, int, int] | None:
        if kind == "F":
            if s > 0:
                return ("F", mb, ch, s - 1)
            return ("F", mb, ch - 1, p - 1) if ch > 0 else None
        if s < p - 1:
            return ("B", mb, ch, s + 1)
        return ("B", mb, ch + 1, 0) if ch < v - 1 else ("F", mb, v - 1, p - 1)

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, mb, ch = orders[s][pos[s]]
                need = dep(kind, mb, ch, s)
                if need is not None and need not in done:
                    break
                start = max(free[s], done[need] if need is not None else 0.0)
                end = start + dur[kind]
                done[(kind, mb, ch, s)] = end
                free[s] = end
                out.append(Op(s, kind, mb, ch, start, end))
                pos[s] += 1
                remaining -= 1
                progressed = True
        assert progressed, "schedule deadlock"
    return out
