"""The ``trainc plan`` text table: the finalists that are worth a choice, in the terminal's width.

* **Dominated finalists are hidden.** Finalist ``j`` is dominated by ``i`` when ``i`` is no slower
  (``step_time_seconds``) and no larger (``memory_bytes.total`` per GPU) and strictly better on
  one of the two: nothing speaks for ``j``. The hidden ones are counted under the table, with the
  layout that beats each (``--format json`` still lists every finalist). Ranks (``#``) stay those of
  the full list.
* **The top pick is always the first row**, dominated or not: the ranking places the simplest
  layout within the error band of the fastest first (:func:`trainc.planner.rank_within_band`),
  and a faster, smaller but less simple layout may beat it on both counts. The table shows the
  pick that ``--apply`` writes and the line under the table compares, and says what beats it.
* **Every layout axis is a column** (tp, sp, pp, vpp, cp, ep, etp, dp, mbs, recompute, zero, and
  offload when a finalist offloads), so two rows never read the same.
* **Width.** The table fits the console (Rich's width: the terminal, else ``COLUMNS``, else 120 for
  a pipe or file). When the full table does not fit, columns equal in every row move to one line
  under the table, then tok/s and bubble are dropped (step time and MFU remain); the ``why`` text
  wraps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from trainc.compiler.support.numfmt import fixed, percent
from trainc.planner import MAX_FULL, memory_tight
from trainc.planner.search import recompute_text, summary

#: Width of a pipe or file when COLUMNS is not set.
DEFAULT_WIDTH = 120
_WHY_MIN = 24


def _step(p: Any) -> float:
    return float(p.estimates.get("step_time_seconds") or p.candidate.step_seconds)


def _mem(p: Any) -> float:
    return float(p.estimates.get("memory_bytes", {}).get("total", 0))


def _beats(q: Any, p: Any) -> bool:
    return (
        _step(q) <= _step(p) and _mem(q) <= _mem(p) and (_step(q) < _step(p) or _mem(q) < _mem(p))
    )


def dominated_by(planned: Sequence[Any]) -> list[int | None]:
    """For each finalist, the index of the first undominated finalist that dominates it (no
    slower, no larger, strictly better on one), else None. Equal on both counts is not
    dominated. (Dominance is transitive, so a dominated finalist always has an undominated
    one above it.)"""
    free = [i for i, p in enumerate(planned) if not any(_beats(q, p) for q in planned)]
    return [
        None if i in free else next(j for j in free if _beats(planned[j], p))
        for i, p in enumerate(planned)
    ]


def _pp(par: dict[str, Any]) -> str:
    acc = [
        x
        for x, k in (
            ("E", "account_for_embedding_in_pipeline_split"),
            ("L", "account_for_loss_in_pipeline_split"),
        )
        if par.get(k)
    ]
    if acc:  # Megatron's layout notation: the embedding (E) / loss (L) take a layer's slot
        return f"{par['pp']} (+{'+'.join(acc)})"
    if par["pipeline_first_stage_layers"] is None:
        return str(par["pp"])
    return (
        f"{par['pp']} ({par['pipeline_first_stage_layers']}/.../"
        f"{par['pipeline_last_stage_layers']})"
    )


def _num(v: object, show: Any) -> str:
    return show(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _columns(
    planned: Sequence[Any],
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(layout columns, measure columns): each a (header, one text per finalist)."""
    rows = []
    for p in planned:
        s = summary(p.candidate)
        par, tr = s["parallel"], s["training"]
        rec = recompute_text(
            tr["recompute"], tr.get("recompute_method"), tr.get("recompute_num_layers")
        )
        rows.append(
            {
                "tp": str(par["tp"]),
                "sp": "yes" if par["sequence_parallel"] else "no",
                "pp": _pp(par),
                "vpp": str(par["vpp"]),
                "cp": f"{par['cp']}" + (f" {par['cp_comm_type']}" if par["cp"] > 1 else ""),
                "ep": str(par["ep"]),
                "etp": str(par["etp"]),
                "dp": str(par["dp"]),
                "mbs": str(tr["micro_batch_size"]),
                "recompute": rec,
                "zero": str(par["zero_stage"]),
                "offload": tr.get("offload_optimizer", "none"),
            }
        )
    keys = ["tp", "sp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "recompute", "zero"]
    if planned and planned[0].spec.engine.value == "fsdp":
        keys.remove("zero")  # FSDP2 shards by its own keys; zero_stage does not apply (TRC344)
    if any(r["offload"] != "none" for r in rows):
        keys.append("offload")
    layout = [(k, [r[k] for r in rows]) for k in keys]
    est = [p.estimates for p in planned]
    measures = [
        ("GiB/GPU", [fixed(_mem(p) / 2**30, 1) for p in planned]),
        (
            "bubble",
            [_num(e.get("pipeline_bubble_fraction"), lambda v: f"{percent(v)}%") for e in est],
        ),
        ("step s", [fixed(_step(p), 2) for p in planned]),
        ("tok/s", [_num(e.get("tokens_per_second"), lambda v: fixed(v, 0, sep=True)) for e in est]),
        ("MFU", [_num(e.get("mfu"), lambda v: f"{percent(v)}%") for e in est]),
    ]
    return layout, measures


def _natural(cols: list[tuple[str, list[str]]]) -> list[int]:
    return [max(len(h), *(len(v) for v in vals)) for h, vals in cols]


def _table(title: str, cols: list[tuple[str, list[str]]], why: list[str]) -> Any:
    """The Rich table: ``cols`` at their natural width (one space apart), ``why`` in the rest."""
    from rich import box
    from rich.table import Table

    widths = _natural(cols)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0))
    for (head, _), w in zip(cols, widths, strict=True):
        table.add_column(head, justify="right", no_wrap=True, min_width=w)
    table.add_column("why", overflow="fold")  # Rich gives it what the others leave
    for i, reason in enumerate(why):
        table.add_row(*(vals[i] for _, vals in cols), reason)
    return table


def render(res: Any, width: int) -> list[Any]:
    """The renderables (the table, then notes) for :class:`trainc.planner.PlanResult` ``res``
    in ``width`` columns."""
    from rich.text import Text

    beaten = dominated_by(res.planned)
    # the top pick (#1: what --apply writes and versus_spec compares) is shown even when
    # dominated: within the error band the simpler layout ranks first, so a faster, smaller,
    # less simple finalist may beat it on both counts
    shown = [i for i, b in enumerate(beaten) if b is None or i == 0]
    planned = [res.planned[i] for i in shown]
    layout, measures = _columns(planned)
    ranks = [str(i + 1) for i in shown]
    why = [p.reason for p in planned]
    title = (
        f"trainc plan: {res.path} ({res.num_candidates_evaluated:,} candidates evaluated, "
        f"{res.num_fit:,} fit)"
    )
    same = [(h, v[0]) for h, v in layout if len(planned) > 1 and len(set(v)) == 1]
    varying = [(h, v) for h, v in layout if (h, v[0]) not in same]
    rank = [("#", ranks)]
    attempts = [
        (layout, measures, []),
        (varying, measures, same),
        (varying, [m for m in measures if m[0] != "tok/s"], same),
        (varying, [m for m in measures if m[0] not in ("tok/s", "bubble")], same),
    ]
    # the first that fits with the why text on one line, else the first that fits with it
    # wrapped in at least _WHY_MIN columns, else the narrowest
    longest = max([3, *(len(w) for w in why)])
    fits = [sum(w + 1 for w in _natural(rank + cols + meas)) for cols, meas, _ in attempts]
    pick = next(
        (i for i, n in enumerate(fits) if n + longest <= width),
        next((i for i, n in enumerate(fits) if n + _WHY_MIN <= width), len(fits) - 1),
    )
    cols, meas, moved = attempts[pick]
    table = _table(title, rank + cols + meas, why)
    out: list[Any] = [table]
    if moved:
        out.append(Text("every row: " + ", ".join(f"{h} {v}" for h, v in moved)))
    tight = [i for i, p in enumerate(res.planned) if memory_tight(p)]
    if tight and tight[0] == 0:
        est = res.planned[0].estimates
        out.append(
            Text(
                f"#1 is memory-tight: {float(est['memory_bytes']['total']) / 2**30:.1f} of "
                f"{float(est['memory_budget_bytes']) / 2**30:.1f} GiB/GPU, within the memory "
                "model's margin (TRC403: it may run out of memory); "
                + (
                    f"{len(tight)} of the {len(res.planned)} listed layouts are tight"
                    if len(tight) < len(res.planned)
                    else "every listed layout is tight"
                )
                + " - measure one step, or add GPUs"
            )
        )
    if beaten and beaten[0] is not None:
        out.append(
            Text(
                f"#1, the top pick, is shown although #{beaten[0] + 1} is no slower "
                f"and no larger: within {res.error_band:.0%} of the fastest the simpler "
                "layout ranks first"
            )
        )
    hidden = [(i, b) for i, b in enumerate(beaten) if b is not None and i != 0]
    if hidden:
        pairs = ", ".join(f"#{i + 1} by #{b + 1}" for i, b in hidden)
        out.append(
            Text(
                f"{len(hidden)} dominated layout(s) hidden, each no faster and no smaller "
                f"than one shown ({pairs}); --format json lists them"
            )
        )
    if getattr(res, "num_full_estimates", 0):
        exact = (
            ""
            if getattr(res, "exact", True)
            else (
                f" (the cap of {MAX_FULL} full estimates was reached before the bound proved the "
                "order: a layout left unestimated may rank higher)"
                if res.num_full_estimates >= MAX_FULL
                else (
                    " (the bound did not prove the order: a layout left unestimated may "
                    "rank higher)"
                )
            )
        )
        out.append(
            Text(
                f"ranked by the full estimator ({res.num_full_estimates} layouts "
                f"estimated); within {res.error_band:.0%} of the fastest the simpler "
                f"layout ranks first{exact}"
            )
        )
    if getattr(res, "versus_spec", ""):
        out.append(Text(res.versus_spec))
    return out


def console_width() -> int:
    """The terminal's width, else ``COLUMNS``, else :data:`DEFAULT_WIDTH`."""
    from trainc.console import Console

    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console.width
    return DEFAULT_WIDTH


def print_plan_table(res: Any, width: int | None = None) -> None:
    """Print the table of ``res`` to stdout in ``width`` columns (default :func:`console_width`)."""
    from trainc.console import Console

    w = width or console_width()
    console = Console(width=w)
    for item in render(res, w):
        console.print(item)
