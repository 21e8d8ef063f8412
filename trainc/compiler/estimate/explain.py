"""``trainc explain``: the plan's layout, memory, communication, time and rank map as Rich tables.

Rendering only (no arithmetic beyond unit conversion): every number comes from ``plan.json``
(``derived`` and ``estimates``); rank rows are computed on demand from the rank map, a bounded
number of them.
"""

from __future__ import annotations

from typing import Any

from trainc.compiler.estimate.rankmap import rank_row
from trainc.compiler.support.numfmt import gib as _gib
from trainc.compiler.support.numfmt import percent, sig


def _group(g: dict[str, Any], limit: int = 4) -> str:
    ranks = g["ranks"][:limit]
    more = g["size"] - len(ranks)
    return ",".join(map(str, ranks)) + (f",… ({g['size']})" if more > 0 else "")


def explain_tables(plan: dict[str, Any], max_ranks: int | None = None) -> list[Any]:
    """Rich renderables for a compiled plan (imports Rich lazily)."""
    from rich.table import Table

    s, d, e = plan["spec"], plan["derived"], plan["estimates"]
    out: list[Any] = []

    lay = Table(title=f"layout: {s['name']} ({s['engine']})", show_header=False)
    lay.add_column("key", style="bold")
    lay.add_column("value")
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
        (
            "optimizer sharding",
            fsdp_sharding(s)
            if s["engine"] == "fsdp"
            else f"zero_stage {s['parallel']['zero_stage']}"
            + (
                " (Megatron-FSDP: weights, gradients and optimizer state over dp x cp)"
                if d.get("megatron_fsdp")
                else " (distributed optimizer over dp x cp)"
                if d["distributed_optimizer"]
                else ""
            ),
        ),
        ("recompute", s["training"]["recompute"]),
        (
            "parameters",
            f"{e['params_total']:,} total, {e['params_per_gpu']:,} per GPU "
            f"(stage {e['memory_stage']})",
        ),
    ]
    for k, v in rows:
        lay.add_row(k, v)
    out.append(lay)

    budget = e["memory_budget_bytes"]
    mem = Table(title=f"memory per GPU (GiB; budget {_gib(budget)} = gpu_memory_gib - reserve)")
    for col in ("stage", "layers", "params", "grads", "optimizer", "activations", "total"):
        mem.add_column(col, justify="right")
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
    out.append(mem)

    comm = Table(
        title="communication per GPU per step (bytes: the busiest stage per axis; "
        f"seconds: stage {e['critical_stage']}, the one that sets the step time)"
    )
    for col in ("axis", "sent+received GiB", "seconds", "leaves NVLink domain"):
        comm.add_column(col, justify="right")
    cross = e["rank_map"]["groups_cross_nvlink_domain"]
    kind = {"tp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp_cp"}
    for axis, b in e["comm_bytes_per_step"].items():
        comm.add_row(
            axis,
            _gib(b),
            sig(e["comm_seconds_per_step"][axis]),
            "yes" if cross[kind[axis]] else "no",
        )
    out.append(comm)

    coll = Table(
        title=f"collectives (stage {e['critical_stage']}, the one that sets the step time)"
    )
    for name in (
        "axis",
        "collective",
        "group",
        "ops",
        "sent GiB",
        "recv GiB",
        "GB/s",
        "seconds",
        "exposed",
    ):
        coll.add_column(name, justify="right")
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
    out.append(coll)

    tm = Table(title="time", show_header=False)
    tm.add_column("key", style="bold")
    tm.add_column("value", justify="right")
    a = e["assumptions"]
    for k, v in (
        ("model FLOPs / step", f"{e['flops_per_step']:.4e}"),
        (
            "executed FLOPs / step",
            f"{e['hardware_flops_per_step']:.4e}"
            + (" (with recompute)" if e["hardware_flops_per_step"] != e["flops_per_step"] else ""),
        ),
        (
            "compute",
            f"{sig(e['compute_seconds'])} s at {a['compute_efficiency']:g} x peak"
            if a.get("time_model") == "seed"
            else f"{sig(e['compute_seconds'])} s (kernel model: "
            + ", ".join(
                f"{k} {sig(v)}" for k, v in (e.get("compute_seconds_by_kind") or {}).items()
            )
            + ")",
        ),
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
        (
            "step time",
            f"{sig(e['step_time_seconds'])} s"
            + (
                f" (p10-p90 {sig(e['step_time_p10_seconds'])}-{sig(e['step_time_p90_seconds'])} s, "
                f"{e.get('step_time_band') or 'calibrated'}"
                + (
                    "; the whole band is above the estimate: runs of this kind measured slower "
                    "than the model, tokens / s and MFU are optimistic"
                    if e["step_time_p10_seconds"] > e["step_time_seconds"]
                    else ""
                )
                + ")"
                if e.get("step_time_p10_seconds") is not None
                else ""
            ),
        ),
        ("tokens / s", f"{e['tokens_per_second']:,.0f}"),
        ("MFU (of the BF16 peak)", f"{percent(e['mfu'])} %"),
    ):
        tm.add_row(k, v)
    out.append(tm)

    gpn = s["cluster"]["gpus_per_node"]
    n = min(max_ranks or gpn, d["world_size"], 256)
    rk = Table(title=f"rank map, order tp-cp-ep-dp-pp (first {n} of {d['world_size']} ranks)")
    for c in (
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
    ):
        rk.add_column(c, justify="right")
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
    out.append(rk)
    return out


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
