"""TRC217-TRC220: sequence length against context and sequence parallelism.

Sources (Megatron-LM core_v0.16.1): ``seq % (2*cp) == 0`` (``validate_args``: each CP rank
takes two mirrored chunks), ``(seq/cp) % tp == 0`` (``tensor_parallel/mappings.py``
scatter along the sequence; validate_args does not check it), together ``seq % (cp*lcm(2, tp))``
(bug case BC-015); ``--max-position-embeddings >= --seq-length``; a2a CP needs heads and query
groups per TP rank divisible by cp (Transformer Engine).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.precision_shapes import token_seq_unit
from trainc.compiler.validate.util import divisors, nearest_multiple, or_list, show
from trainc.schemas import CpCommType, ModelSpec, TrainSpec


def sequence_unit(cp: int, tp: int, sequence_parallel: bool) -> int:
    """The multiple seq_length must be (tokens): Megatron's CP and SP rules combined.

    >>> sequence_unit(2, 4, True)
    8
    >>> sequence_unit(1, 4, True), sequence_unit(4, 1, False), sequence_unit(3, 3, True)
    (4, 8, 18)
    """
    sp = sequence_parallel and tp > 1
    if cp > 1:
        return cp * math.lcm(2, tp) if sp else 2 * cp
    return tp if sp else 1


def _seq_choices(m: ModelSpec, unit: int) -> list[int]:
    """The multiples of ``unit`` next to seq_length that stay within a max_position_embeddings
    above seq_length (TRC219). One equal to seq_length may be the normalizer's fill (a spec
    without the key), so both neighbours stay and the fix raises it with the larger; so do
    they when none fits."""
    near = nearest_multiple(m.seq_length, unit)
    mpe = m.max_position_embeddings
    if mpe is None or mpe == m.seq_length:
        return near
    return [v for v in near if v <= mpe] or near


def _seq_fix(spec: TrainSpec, unit: int) -> dict[str, Any]:
    """TRC217 / TRC218's ``fix`` text and machine ``edits`` (:func:`_seq_choices`): the larger
    choice, with max_position_embeddings raised to it when it must be. With an FP8 / FP4
    recipe the multiple also keeps the GEMMs' tokens aligned (TRC371,
    :func:`~trainc.compiler.validate.precision_shapes.token_seq_unit`)."""
    m = spec.model
    lp, recipe = token_seq_unit(spec)
    step = math.lcm(unit, lp)
    why = (
        f": of {unit} for this split and of {lp} for the {recipe} recipe's GEMM tokens"
        if step != unit
        else ""
    )
    choices = _seq_choices(m, step)
    v, mpe = choices[-1], m.max_position_embeddings
    raise_mpe = mpe is not None and v > mpe
    return {
        "fix": f"set model.seq_length to {or_list(choices)} (a multiple of {step}{why})"
        + (f" and model.max_position_embeddings to at least {v}" if raise_mpe else ""),
        "edits": {
            "model.seq_length": v,
            **({"model.max_position_embeddings": v} if raise_mpe else {}),
        },
    }


def sequence(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC217-TRC220."""
    m, p = spec.model, spec.parallel
    s, cp, tp = m.seq_length, p.cp, p.tp
    sp = bool(p.sequence_parallel) and tp > 1
    unit = sequence_unit(cp, tp, sp)
    if cp > 1 and s % (2 * cp):
        yield diag(
            R.CP_SEQ,
            f"seq_length ({s}) is not a multiple of 2*cp (2*{cp} = {2 * cp}); "
            f"each CP rank takes two mirrored chunks for causal load balance"
            + (f" (with sequence parallelism the multiple is {unit})" if unit != 2 * cp else ""),
            "model.seq_length",
            related=("parallel.cp",),
            **_seq_fix(spec, unit),
            seq_length=s,
            cp=cp,
            required_multiple=unit,
        )
    # (a tp that does not even split the heads is TRC201's: a new seq_length would not fix it)
    if sp and (s % cp or (s // cp) % tp) and m.num_attention_heads % tp == 0:
        with_cp = (
            f"; with cp the sequence must be a multiple of cp*lcm(2, tp) = {unit}" if cp > 1 else ""
        )
        yield diag(
            R.SP_SEQ,
            f"seq_length ({s}) / cp ({cp}) is not a multiple of tp ({tp}), over which "
            f"sequence parallelism scatters the sequence{with_cp}",
            "model.seq_length",
            related=("parallel.tp", "parallel.cp", "parallel.sequence_parallel"),
            **_seq_fix(spec, unit),
            seq_length=s,
            tp=tp,
            cp=cp,
            required_multiple=unit,
        )
    mpe = m.max_position_embeddings or s
    if mpe < s:
        yield diag(
            R.MAX_POSITIONS,
            f"max_position_embeddings ({mpe}) is below seq_length ({s})",
            "model.max_position_embeddings",
            related=("model.seq_length",),
            fix=f"set model.max_position_embeddings to at least {s}",
            edits={"model.max_position_embeddings": s},
            max_position_embeddings=mpe,
            seq_length=s,
        )
    if cp > 1 and p.cp_comm_type is CpCommType.a2a:
        a, g = m.num_attention_heads, m.num_query_groups or m.num_attention_heads
        heads_rank = a // tp if a % tp == 0 else 0
        groups_rank = max(g // tp, 1)
        if heads_rank % cp or groups_rank % cp:
            ok = (
                [c for c in divisors(math.gcd(heads_rank, groups_rank)) if c > 1]
                if heads_rank
                else []
            )
            yield diag(
                R.CP_A2A_HEADS,
                f"cp_comm_type a2a splits heads over cp: heads per TP rank ({heads_rank}) "
                f"and query groups per TP rank ({groups_rank}) must be multiples of cp "
                f"({cp})",
                "parallel.cp_comm_type",
                related=("parallel.cp", "parallel.tp"),
                fix="set parallel.cp_comm_type to p2p or all_gather"
                + (f", or parallel.cp to one of {show(ok)}" if ok else ""),
                edits={"parallel.cp_comm_type": "p2p"},
                heads_per_rank=heads_rank,
                groups_per_rank=groups_rank,
                cp=cp,
            )
