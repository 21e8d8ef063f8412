"""``trainc explain``: the plan's layout, memory, communication, time and rank map as Rich tables.

Rendering only (no arithmetic beyond unit conversion): every number comes from ``plan.json``
(``derived`` and ``estimates``); rank rows are computed on demand from the rank map, a bounded
number of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from trainc.compiler.estimate.rankmap import rank_row
from trainc.compiler.support.numfmt import gib as _gib
from trainc.compiler.support.numfmt import percent, sig
from trainc.schemas import Engine


def _group(g: dict[str, Any], limit: int = 4) -> str:
    ranks = g["ranks"][:limit]
    more = g["size"] - len(ranks)
    return ",".join(map(str, ranks)) + (f",… ({g['size']})" if more > 0 else "")


def explain_tables(plan: dict[str, Any], max_ranks: int | None = None) -> list[Any]:
    """Rich renderables for a compiled plan (imports Rich lazily): the layout, memory per stage,
    communication per axis, the collectives, the time model and the first ``max_ranks`` ranks
    (default one node, at most 256) of the rank map, in that order."""
    return [
        _layout_table(plan),
        _memory_table(plan["estimates"]),
        _comm_table(plan["estimates"]),
        _collectives_table(plan["estimates"]),
        _time_table(plan["estimates"]),
        _rank_table(plan, max_ranks),
    ]


def _key_value_table(
    title: str, rows: list[tuple[str, str]], justify: Literal["left", "right"] = "left"
) -> Any:
    """A headerless two-column table (key in bold) of ``rows``."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", justify=justify)
    for k, v in rows:
        table.add_row(k, v)
    return table


def _columns_table(title: str, columns: tuple[str, ...]) -> Any:
    """An empty table with right-justified ``columns``."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    return table


def _layout_table(plan: dict[str, Any]) -> Any:
    """The grids, the batch, the optimizer sharding and the parameter count."""
    s, d, e = plan["spec"], plan["derived"], plan["estimates"]
    rows = [
        (
            "world",
            f"{d['world_size']} = {s['cluster']['num_nodes']} nodes x "
            f"{s['cluster']['gpus_per_node']} GPUs ({s['cluster']['gpu']})",
        ),
        (
            "dense grid",
            f"tp {d['tp']} x cp {d['cp']} x dp {d['dp']} x pp {d['pp']}"
            + (f" (vpp {d['vpp']})" if d["vpp"] > 1 else ""),
        ),
        *(
            [
                (
                    "expert grid",
                    f"etp {d['etp']} x ep {d['ep']} x expert_dp {d['expert_dp']} x pp {d['pp']}",
                )
            ]
            if s["model"].get("num_experts")
            else []
        ),
        ("layers per stage", ", ".join(map(str, d["layers_per_stage"]))),
        (
            "micro-batches",
            f"{d['num_microbatches']} of {s['training']['micro_batch_size']} "
            f"(global batch {s['training']['global_batch_size']})",
        ),
        (
            "per step",
            f"{d['samples_per_step']:,} samples, {d['tokens_per_step']:,} tokens; "
            + (
                f"{d['steps_per_epoch']:,} steps per epoch ({d['epochs']:g} epochs)"
                if d.get("steps_per_epoch") is not None
                else "epochs unknown"
            ),
        ),
        ("sequence parallel", "yes" if d["sequence_parallel"] else "no"),
        ("optimizer sharding", SHARDING[Engine(s["engine"])](s, d)),
        ("recompute", s["training"]["recompute"]),
        (
            "parameters",
            f"{e['params_total']:,} total, {e['params_per_gpu']:,} per GPU "
            f"(stage {e['memory_stage']})",
        ),
    ]
    return _key_value_table(f"layout: {s['name']} ({s['engine']})", rows)


def _zero_sharding(s: dict[str, Any], d: dict[str, Any]) -> str:
    """engine=megatron|deepspeed: the ZeRO stage and what the derived layout makes of it."""
    return f"zero_stage {s['parallel']['zero_stage']}" + (
        " (Megatron-FSDP: weights, gradients and optimizer state over dp x cp)"
        if d.get("megatron_fsdp")
        else " (distributed optimizer over dp x cp)"
        if d["distributed_optimizer"]
        else ""
    )


def _memory_table(e: dict[str, Any]) -> Any:
    """Memory per GPU by pipeline stage; the stage over budget in red, the reported one bold."""
    budget = e["memory_budget_bytes"]
    mem = _columns_table(
        f"memory per GPU (GiB; budget {_gib(budget)} = gpu_memory_gib - reserve)",
        ("stage", "layers", "params", "grads", "optimizer", "activations", "total"),
    )
    for row in e["memory_per_stage"]:
        style = (
            "bold red"
            if row["total"] > budget
            else ("bold" if row["stage"] == e["memory_stage"] else None)
        )
        mem.add_row(
            str(row["stage"]),
            str(row["layers"]),
            *(_gib(row[k]) for k in ("params", "grads", "optimizer", "activations", "total")),
            style=style,
        )
    return mem


#: The rank map's group that carries each communication axis.
_AXIS_GROUP = {"tp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp_cp"}


def _comm_table(e: dict[str, Any]) -> Any:
    """Bytes and seconds per communication axis, and whether its group leaves an NVLink domain."""
    comm = _columns_table(
        "communication per GPU per step (bytes: the busiest stage per axis; "
        f"seconds: stage {e['critical_stage']}, the one that sets the step time)",
        ("axis", "sent+received GiB", "seconds", "leaves NVLink domain"),
    )
    cross = e["rank_map"]["groups_cross_nvlink_domain"]
    for axis, b in e["comm_bytes_per_step"].items():
        comm.add_row(
            axis,
            _gib(b),
            sig(e["comm_seconds_per_step"][axis]),
            "yes" if cross[_AXIS_GROUP[axis]] else "no",
        )
    return comm


def _collectives_table(e: dict[str, Any]) -> Any:
    """One row per collective of the critical stage: group, count, volume, bandwidth, time."""
    coll = _columns_table(
        f"collectives (stage {e['critical_stage']}, the one that sets the step time)",
        (
            "axis",
            "collective",
            "group",
            "ops",
            "sent GiB",
            "recv GiB",
            "GB/s",
            "seconds",
            "exposed",
        ),
    )
    for c in e["comm_collectives"]:
        coll.add_row(
            c["axis"],
            c["name"],
            str(c["group_size"]),
            str(c["count"]),
            _gib(c["sent_bytes"]),
            _gib(c["received_bytes"]),
            f"{c['bandwidth_gbps']:g}",
            sig(c["seconds"]),
            sig(c.get("exposed_seconds", c["seconds"])),
        )
    return coll


def _time_table(e: dict[str, Any]) -> Any:
    """FLOPs, compute, exposed communication, bubble, offload, step time, tokens / s and MFU."""
    a = e["assumptions"]
    rows = [
        ("model FLOPs / step", f"{e['flops_per_step']:.4e}"),
        (
            "executed FLOPs / step",
            f"{e['hardware_flops_per_step']:.4e}"
            + (" (with recompute)" if e["hardware_flops_per_step"] != e["flops_per_step"] else ""),
        ),
        ("compute", _compute_text(e)),
        (
            "exposed communication",
            f"{sig(e['exposed_comm_seconds'])} s (overlap "
            f"{a['comm_overlap']:g}, efficiency {a['comm_efficiency']:g})",
        ),
        (
            "pipeline bubble",
            f"{percent(e['pipeline_bubble_fraction'], 2)} % ({sig(e['bubble_seconds'])} s)",
        ),
        *(
            [
                (
                    "CPU offload",
                    f"{sig(e['offload_seconds'])} s (CPU Adam step and PCIe copies, a floor)",
                )
            ]
            if e.get("offload_seconds")
            else []
        ),
        ("step time", f"{sig(e['step_time_seconds'])} s" + _band_text(e)),
        ("tokens / s", f"{e['tokens_per_second']:,.0f}"),
        ("MFU (of the BF16 peak)", f"{percent(e['mfu'])} %"),
    ]
    return _key_value_table("time", rows, justify="right")


def _compute_text(e: dict[str, Any]) -> str:
    """Compute seconds: at the seed model's efficiency, or the kernel model's split by kind."""
    a = e["assumptions"]
    if a.get("time_model") == "seed":
        return f"{sig(e['compute_seconds'])} s at {a['compute_efficiency']:g} x peak"
    return (
        f"{sig(e['compute_seconds'])} s (kernel model: "
        + ", ".join(f"{k} {sig(v)}" for k, v in (e.get("compute_seconds_by_kind") or {}).items())
        + ")"
    )


def _band_text(e: dict[str, Any]) -> str:
    """The step time's p10-p90 band in parentheses ("" without one)."""
    if e.get("step_time_p10_seconds") is None:
        return ""
    return (
        f" (p10-p90 {sig(e['step_time_p10_seconds'])}-{sig(e['step_time_p90_seconds'])} s, "
        f"{e.get('step_time_band') or 'calibrated'}"
        + (
            "; the whole band is above the estimate: runs of this kind measured slower "
            "than the model, tokens / s and MFU are optimistic"
            if e["step_time_p10_seconds"] > e["step_time_seconds"]
            else ""
        )
        + ")"
    )


def _rank_table(plan: dict[str, Any], max_ranks: int | None) -> Any:
    """The first ``max_ranks`` ranks (default one node, at most 256): coordinates and groups."""
    d = plan["derived"]
    gpn = plan["spec"]["cluster"]["gpus_per_node"]
    n = min(max_ranks or gpn, d["world_size"], 256)
    rk = _columns_table(
        f"rank map, order tp-cp-ep-dp-pp (first {n} of {d['world_size']} ranks)",
        (
            "rank",
            "node",
            "tp",
            "cp",
            "dp",
            "pp",
            "etp",
            "ep",
            "edp",
            "TP group",
            "DPxCP group",
            "PP group",
            "EP group",
        ),
    )
    for r in range(n):
        row = rank_row(d, r, gpn)
        gr = row["groups"]
        rk.add_row(
            *(
                str(row[k])
                for k in ("rank", "node", "tp", "cp", "dp", "pp", "etp", "ep", "expert_dp")
            ),
            _group(gr["tp"]),
            _group(gr["dp_cp"]),
            _group(gr["pp"]),
            _group(gr["ep"]),
        )
    return rk


def fsdp_sharding(s: dict[str, Any]) -> str:
    """engine=fsdp: how FSDP2 shards (plan.json ``spec``): the shard group, HSDP replicas, the
    experts' group with expert parallelism and whether blocks are resharded after forward."""
    f = s["fsdp"]
    out = f"FSDP2 over dp_shard {f['dp_shard']}"
    if s["parallel"]["cp"] > 1:
        out += f" x cp {s['parallel']['cp']}"
    if f["dp_replicate"] > 1:
        out += f", HSDP x {f['dp_replicate']} replicas"
    p = s["parallel"]
    if s["model"].get("num_experts") and p["ep"] > 1:
        # torchtitan's experts' mesh: efsdp = dp_shard x cp x tp / ep (ParallelDims.build_mesh)
        efsdp = f["dp_shard"] * p["cp"] * p["tp"] // p["ep"]
        out += f", experts over efsdp {efsdp} x ep {p['ep']}"
    return out + (
        ", reshard after forward" if f["reshard_after_forward"] else ", no reshard after forward"
    )


#: How each engine shards the optimizer, as the layout table's "optimizer sharding" row says it
#: (plan.json ``spec`` and ``derived`` -> text). A new engine adds its row here.
SHARDING: dict[Engine, Callable[[dict[str, Any], dict[str, Any]], str]] = {
    Engine.megatron: _zero_sharding,
    Engine.deepspeed: _zero_sharding,
    Engine.fsdp: lambda s, d: fsdp_sharding(s),
}
