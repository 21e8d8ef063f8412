"""``report.html``: a self-contained page (inline CSS and SVG, no scripts, no network) with the
layout, an SVG timeline of the pipeline schedule, memory bars per stage, the communication table,
the time model and the first node's rank map. Every number comes from ``plan.json``.

The markup is well-formed XML (XHTML-compatible) so tests can parse it with ElementTree.
"""

from __future__ import annotations

from html import escape
from typing import Any

from trainc.compiler.estimate.rankmap import rank_row
from trainc.compiler.estimate.schedule import simulate
from trainc.compiler.support.numfmt import gib, percent, sig

GiB = 2**30
COLORS = {
    "params": "#4e79a7",
    "grads": "#f28e2b",
    "optimizer": "#e15759",
    "activations": "#76b7b2",
    "F": "#5b8ff9",
    "B": "#5ad8a6",
    "idle": "#eeeeee",
}
CSS = (
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222}"
    "table{border-collapse:collapse;margin:8px 0 20px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}"
    "th{background:#f4f4f4}h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    ".note{color:#666;font-size:12px}"
)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    h = "".join(f"<th>{escape(str(x))}</th>" for x in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{h}</tr>{body}</table>"


#: The timeline draws at most this many operations, this many stage rows (the first and last
#: halves when there are more), and no operation narrower than MIN_OP_PX pixels; what is left out
#: is said in the note under it.
MAX_OPS, MAX_STAGE_ROWS, MIN_OP_PX = 1200, 32, 3.0


def timeline_svg(p: int, m: int, v: int, width: int = 960) -> tuple[str, int, str]:
    """SVG of the simulated schedule of ``m`` micro-batches, the number of operations drawn, and
    a note saying what is left out ("" when everything is drawn).

    What fits is drawn: at most :data:`MAX_STAGE_ROWS` stages (the first and the last half of
    them), and the schedule from its start up to the time where :data:`MAX_OPS` operations are
    drawn or the shortest operation would be narrower than :data:`MIN_OP_PX` (an operation running
    across that time is cut there).
    """
    ops = simulate(p, m, v)
    span = max(o.end for o in ops)
    left, row_h, top = 70, 26, 22
    area = width - left - 10
    half = MAX_STAGE_ROWS // 2
    stages = list(range(p)) if p <= MAX_STAGE_ROWS else [*range(half), *range(p - half, p)]
    row_of = {s: i + (1 if p > MAX_STAGE_ROWS and i >= half else 0) for i, s in enumerate(stages)}
    mine = sorted((o for o in ops if o.stage in row_of), key=lambda o: (o.start, o.stage))
    t_end = min(span, area * min(o.end - o.start for o in ops) / MIN_OP_PX)
    if sum(o.start < t_end for o in mine) > MAX_OPS:
        t_end = mine[MAX_OPS].start
    drawn = [o for o in ops if o.stage in row_of and o.start < t_end]  # in schedule order
    scale = area / t_end
    n_rows = len(stages) + (1 if p > MAX_STAGE_ROWS else 0)
    h = top + n_rows * row_h + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
        f'role="img" aria-label="pipeline timeline">'
    ]
    for s in stages:
        y = top + row_of[s] * row_h
        parts.append(
            f'<rect x="{left}" y="{y}" width="{t_end * scale:.1f}" height="{row_h - 4}" '
            f'fill="{COLORS["idle"]}"/>'
        )
        parts.append(f'<text x="4" y="{y + 16}" font-size="12">stage {s}</text>')
    if p > MAX_STAGE_ROWS:
        parts.append(
            f'<text x="4" y="{top + half * row_h + 16}" font-size="12">stages {half} to '
            f"{p - half - 1} not drawn</text>"
        )
    for o in drawn:
        end = min(o.end, t_end)
        x, w = left + o.start * scale, (end - o.start) * scale
        y = top + row_of[o.stage] * row_h
        label = f"{o.kind}{o.microbatch}" + (f".{o.chunk}" if v > 1 else "")
        parts.append(
            f'<rect class="op" x="{x:.1f}" y="{y}" width="{max(w - 0.6, 0.5):.1f}" '
            f'height="{row_h - 4}" fill="{COLORS[o.kind]}"><title>{label} stage '
            f"{o.stage}</title></rect>"
        )
        if w > 22:
            parts.append(f'<text x="{x + 2:.1f}" y="{y + 15}" font-size="10">{label}</text>')
    left_out = []
    if t_end < span:
        left_out.append(f"time {t_end:g} to {span:g} of the schedule")
    if p > MAX_STAGE_ROWS:
        left_out.append(f"stages {half} to {p - half - 1} ({p - 2 * half} of {p})")
    note = (
        f"not drawn: {' and '.join(left_out)}; {len(drawn)} of {len(ops)} operations shown"
        if left_out
        else ""
    )
    y = top + n_rows * row_h + 16
    parts.append(
        f'<text x="{left}" y="{y}" font-size="11">time (forward = 1 unit, backward = 2)'
        f" - grey: idle{'; ' + note if note else ''}</text></svg>"
    )
    return "".join(parts), len(drawn), note


def memory_svg(stages: list[dict[str, int]], budget: int, width: int = 960) -> str:
    """Stacked horizontal bars per stage, with the budget as a red line."""
    left, row_h, top = 70, 24, 10
    peak = max([budget] + [s["total"] for s in stages]) or 1
    scale = (width - left - 80) / peak
    h = top + len(stages) * row_h + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
        f'role="img" aria-label="memory per stage">'
    ]
    for i, s in enumerate(stages):
        y, x = top + i * row_h, float(left)
        parts.append(f'<text x="4" y="{y + 15}" font-size="12">stage {s["stage"]}</text>')
        for k in ("params", "grads", "optimizer", "activations"):
            w = s[k] * scale
            parts.append(
                f'<rect class="mem" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                f'height="{row_h - 6}" fill="{COLORS[k]}"><title>{k} '
                f"{s[k] / GiB:.2f} GiB</title></rect>"
            )
            x += w
        parts.append(
            f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="11">{s["total"] / GiB:.1f} GiB</text>'
        )
    bx = left + budget * scale
    parts.append(
        f'<line x1="{bx:.1f}" y1="{top - 4}" x2="{bx:.1f}" '
        f'y2="{top + len(stages) * row_h}" stroke="#d00" stroke-width="2"/>'
    )
    ly = top + len(stages) * row_h + 22
    lx = left
    for k in ("params", "grads", "optimizer", "activations"):
        parts.append(
            f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{COLORS[k]}"/>'
            f'<text x="{lx + 16}" y="{ly}" font-size="11">{k}</text>'
        )
        lx += 110
    parts.append(
        f'<text x="{lx}" y="{ly}" font-size="11" fill="#d00">budget '
        f"{budget / GiB:.1f} GiB</text></svg>"
    )
    return "".join(parts)


def report_html(plan: dict[str, Any]) -> dict[str, str]:
    """``report.html`` (empty dict when the plan carries no estimates)."""
    e = plan.get("estimates") or {}
    if not e:
        return {}
    name = escape(plan["spec"]["name"])
    html = (
        '<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head>'
        '<meta charset="utf-8"/>'
        f"<title>{name} - trainc report</title><style>{CSS}</style></head>"
        f"<body>{_body(plan, e)}</body></html>\n"
    )
    return {"report.html": html}


def _body(plan: dict[str, Any], e: dict[str, Any]) -> str:
    """The page's sections in order: title, layout, schedule, memory, communication, time, rank
    map and (when there are any) diagnostics."""
    s = plan["spec"]
    diags = [[x["severity"], x["rule"], x["message"]] for x in plan.get("diagnostics", [])]
    return (
        f"<h1>{escape(s['name'])}: {escape(s['engine'])} training plan</h1>"
        f'<p class="note">generated by trainc {escape(plan["trainc_version"])} from spec '
        f"{escape(plan['spec_hash'][:16])}; do not edit: change the spec and run trainc compile "
        "again</p>"
        "<h2>Layout</h2>"
        + _table(["key", "value"], _layout_rows(plan["derived"]))
        + _schedule_section(plan["derived"], e)
        + "<h2>Memory per GPU</h2>"
        + memory_svg(e["memory_per_stage"], e["memory_budget_bytes"])
        + _table(_MEMORY_HEAD, _memory_rows(e))
        + "<h2>Communication per GPU per step</h2>"
        + _table(
            ["axis", "sent+received GiB (busiest stage)", f"seconds (stage {e['critical_stage']})"],
            _comm_rows(e),
        )
        + _table(_COLLECTIVES_HEAD, _collective_rows(e))
        + "<h2>Time</h2>"
        + _table(["quantity", "value"], _time_rows(e))
        + "<h2>Rank map (first node, order tp-cp-ep-dp-pp)</h2>"
        + _table(_RANKS_HEAD, _rank_rows(plan))
        + ("<h2>Diagnostics</h2>" + _table(["severity", "rule", "message"], diags) if diags else "")
    )


#: Column heads of the memory, collectives and rank-map tables.
_MEMORY_HEAD = [
    "stage",
    "layers",
    "params GiB",
    "grads GiB",
    "optimizer GiB",
    "activations GiB",
    "total GiB",
]
_COLLECTIVES_HEAD = [
    "axis",
    "collective",
    "group",
    "ops",
    "sent GiB",
    "received GiB",
    "GB/s",
    "seconds",
    "exposed s",
]
_RANKS_HEAD = [
    "rank",
    "node",
    "tp",
    "cp",
    "dp",
    "pp",
    "ep",
    "TP group",
    "DPxCP group",
    "PP group",
    "EP group",
]


def _layout_rows(d: dict[str, Any]) -> list[list[Any]]:
    """The grid sizes, the micro-batch count and the layers per stage."""
    return [
        ["world", d["world_size"]],
        ["tp", d["tp"]],
        ["pp", d["pp"]],
        ["vpp", d["vpp"]],
        ["cp", d["cp"]],
        ["dp", d["dp"]],
        ["ep", d["ep"]],
        ["etp", d["etp"]],
        ["expert_dp", d["expert_dp"]],
        ["micro-batches", d["num_microbatches"]],
        ["layers per stage", ", ".join(map(str, d["layers_per_stage"]))],
    ]


def _schedule_section(d: dict[str, Any], e: dict[str, Any]) -> str:
    """The pipeline-schedule heading, its note and the timeline of the first micro-batches (two
    rounds of 1F1B, or up to three of the interleaved schedule)."""
    p, v, m = d["pp"], d["vpp"], d["num_microbatches"]
    shown = min(m, max(2 * p, 8) if v == 1 else p * max(2, min(m // p, 3)))
    svg, _, left_out = timeline_svg(p, shown, v)
    return (
        f"<h2>Pipeline schedule ({'interleaved ' if v > 1 else ''}1F1B)</h2>"
        f'<p class="note">first {shown} of {m} micro-batches; bubble fraction of the real step '
        f"{percent(e['pipeline_bubble_fraction'], 2)} %"
        + (f"; {escape(left_out)} (the page keeps to what can be read)" if left_out else "")
        + "</p>"
        + svg
    )


def _memory_rows(e: dict[str, Any]) -> list[list[Any]]:
    """Memory per GPU by pipeline stage (GiB)."""
    return [
        [r["stage"], r["layers"]]
        + [gib(r[k], sep=False) for k in ("params", "grads", "optimizer", "activations", "total")]
        for r in e["memory_per_stage"]
    ]


def _comm_rows(e: dict[str, Any]) -> list[list[Any]]:
    """Bytes (busiest stage) and seconds (critical stage) per communication axis."""
    return [
        [a, gib(b, sep=False), sig(e["comm_seconds_per_step"][a])]
        for a, b in e["comm_bytes_per_step"].items()
    ]


def _collective_rows(e: dict[str, Any]) -> list[list[Any]]:
    """One row per collective of the critical stage."""
    return [
        [
            c["axis"],
            c["name"],
            c["group_size"],
            c["count"],
            gib(c["sent_bytes"], sep=False),
            gib(c["received_bytes"], sep=False),
            f"{c['bandwidth_gbps']:g}",
            sig(c["seconds"]),
            sig(c.get("exposed_seconds", c["seconds"])),
        ]
        for c in e["comm_collectives"]
    ]


def _time_rows(e: dict[str, Any]) -> list[list[Any]]:
    """FLOPs, compute, exposed communication, bubble, offload, step time, tokens / s and MFU."""
    return [
        ["model FLOPs / step", f"{e['flops_per_step']:.4e}"],
        ["compute (s)", sig(e["compute_seconds"])],
        ["exposed communication (s)", sig(e["exposed_comm_seconds"])],
        [
            "pipeline bubble",
            f"{percent(e['pipeline_bubble_fraction'], 2)} % ({sig(e['bubble_seconds'])} s)",
        ],
        *([["CPU offload (s)", sig(e["offload_seconds"])]] if e.get("offload_seconds") else []),
        ["step time (s)", sig(e["step_time_seconds"])],
        ["tokens / s", f"{e['tokens_per_second']:,.0f}"],
        ["MFU (of the BF16 peak)", f"{percent(e['mfu'])} %"],
    ]


def _rank_rows(plan: dict[str, Any]) -> list[list[Any]]:
    """The first node's ranks (at most 72): coordinates and up to 8 members of each group."""
    d = plan["derived"]
    gpn = plan["spec"]["cluster"]["gpus_per_node"]
    rows = []
    for r in range(min(gpn, d["world_size"], 72)):
        row = rank_row(d, r, gpn, max_members=8)
        g = row["groups"]
        rows.append(
            [
                r,
                row["node"],
                row["tp"],
                row["cp"],
                row["dp"],
                row["pp"],
                row["ep"],
                *(
                    ",".join(map(str, g[k]["ranks"])) + ("…" if g[k]["size"] > 8 else "")
                    for k in ("tp", "dp_cp", "pp", "ep")
                ),
            ]
        )
    return rows
