"""``report.md``: the human-readable summary of a plan (layout, batch, estimates when present,
diagnostics, artifacts, how to run). Deterministic: built from the plan dict only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainc.compiler.emit.kubernetes import not_written
from trainc.compiler.emit.render import header
from trainc.compiler.estimate.explain import fsdp_sharding
from trainc.compiler.support.numfmt import fixed, gib, percent
from trainc.schemas import Engine


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    out = ["| quantity | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return out


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _estimates(est: dict[str, Any]) -> list[str]:
    """Summary lines for the estimates the plan carries (every key optional)."""
    rows: list[tuple[str, Any]] = []
    if _num(est.get("params_total")):
        rows.append(("model parameters", f"{est['params_total'] / 1e9:.2f} B"))
    mem = est.get("memory_bytes") or {}
    for k in ("params", "grads", "optimizer", "activations", "total"):
        if _num(mem.get(k)):
            rows.append((f"memory per GPU: {k}", f"{gib(mem[k], sep=False)} GiB"))
    if _num(est.get("memory_budget_bytes")):
        rows.append(("memory budget per GPU", f"{gib(est['memory_budget_bytes'], sep=False)} GiB"))
    if _num(est.get("pipeline_bubble_fraction")):
        rows.append(("pipeline bubble", f"{percent(est['pipeline_bubble_fraction'])}%"))
    for key, label in (
        ("compute_seconds", "compute per step"),
        ("exposed_comm_seconds", "exposed communication per step"),
    ):
        if _num(est.get(key)):
            rows.append((label, f"{fixed(est[key], 3)} s"))
    if _num(est.get("offload_seconds")) and est["offload_seconds"] > 0:
        rows.append(
            (
                "CPU offload per step (CPU Adam, PCIe; a floor)",
                f"{fixed(est['offload_seconds'], 3)} s",
            )
        )
    if _num(est.get("flops_per_step")):
        rows.append(("model FLOPs per step", f"{est['flops_per_step']:.3e}"))
    if _num(est.get("step_time_seconds")):
        band = ""
        if _num(est.get("step_time_p10_seconds")) and _num(est.get("step_time_p90_seconds")):
            band = (
                f" (p10-p90 {fixed(est['step_time_p10_seconds'], 3)}-"
                f"{fixed(est['step_time_p90_seconds'], 3)} s, "
                f"{est.get('step_time_band') or 'calibrated'})"
            )
        rows.append(("step time", f"{fixed(est['step_time_seconds'], 3)} s{band}"))
    if _num(est.get("tokens_per_second")):
        rows.append(("tokens per second", fixed(est["tokens_per_second"], 0, sep=True)))
    if _num(est.get("mfu")):
        rows.append(("MFU (of the BF16 peak)", f"{percent(est['mfu'])}%"))
    if _num(est.get("memory_margin")) and est.get("memory_budget_bytes"):
        rows.append(("memory margin", f"{100 * est['memory_margin']:.1f}% of the budget"))
    comm = est.get("comm_bytes_per_step") or {}
    for k in ("tp", "cp", "ep", "pp", "dp"):
        if _num(comm.get(k)) and comm[k]:
            rows.append(
                (f"{k} traffic per GPU per step (busiest stage)", f"{gib(comm[k], sep=False)} GiB")
            )
    for c in est.get("comm_collectives") or []:
        if _num(c.get("exposed_seconds")) and _num(c.get("seconds")) and c["seconds"]:
            rows.append(
                (
                    f"{c['axis']} {c['name']}: exposed / total (stage "
                    f"{est.get('critical_stage', 0)})",
                    f"{fixed(c['exposed_seconds'], 4)} / {fixed(c['seconds'], 4)} s",
                )
            )
    return ["", "## Estimates", "", *_table(rows)] if rows else []


def _memory_per_stage(est: dict[str, Any]) -> list[str]:
    """A per-pipeline-stage memory table (GiB), when the estimates have one."""
    stages = est.get("memory_per_stage")
    keys = ("params", "grads", "optimizer", "activations", "total")
    if not isinstance(stages, list) or not stages:
        return []
    out = [
        "",
        "### Memory per GPU by pipeline stage (GiB)",
        "",
        "| stage | layers | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for st in stages:
        vals = [gib(st[k], sep=False) if _num(st.get(k)) else "" for k in keys]
        out.append(f"| {st.get('stage', '')} | {st.get('layers', '')} | " + " | ".join(vals) + " |")
    return out


def _rank_map(est: dict[str, Any]) -> list[str]:
    """The first node's ranks with their grid coordinates, and the groups that leave a node."""
    rmap = est.get("rank_map")
    if not isinstance(rmap, dict) or not isinstance(rmap.get("first_node"), list):
        return []
    cols = ("rank", "node", "local_rank", "tp", "cp", "dp", "pp", "ep", "etp", "expert_dp")
    out = [
        "",
        "## Rank map (first node)",
        "",
        f"order {rmap.get('order', '?')} (first axis varies fastest)",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in rmap["first_node"]:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    for label, key in (
        ("groups that span nodes", "groups_cross_nodes"),
        ("groups that leave the NVLink domain", "groups_cross_nvlink_domain"),
    ):
        groups = rmap.get(key)
        if isinstance(groups, dict):
            names = [g for g in sorted(groups) if groups[g]]
            out += ["", f"{label}: {', '.join(names) if names else 'none'}"]
    return out


def _megatron_zero(s: dict[str, Any], d: dict[str, Any]) -> str:
    """engine=megatron: the ZeRO stage the derived layout amounts to (Megatron-FSDP shards
    weights, gradients and optimizer state; the distributed optimizer the optimizer state)."""
    if d.get("megatron_fsdp"):
        return "3 (Megatron-FSDP, optim_grads_params)"
    return "1 (distributed optimizer)" if d["distributed_optimizer"] else "0"


#: The layout table's "ZeRO stage" row per engine (plan.json ``spec`` and ``derived`` -> cell).
#: A new engine adds its row here.
ZERO_STAGE_ROW: dict[Engine, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    Engine.megatron: _megatron_zero,
    Engine.deepspeed: lambda s, d: s["parallel"]["zero_stage"],
    Engine.fsdp: lambda s, d: fsdp_sharding(s),
}


def report_text(plan: dict[str, Any], artifacts: list[str]) -> str:
    """The Markdown text of ``report.md`` for ``plan`` and the artifact names being written."""
    s, d = plan["spec"], plan["derived"]
    m, c, t, lc = s["model"], s["cluster"], s["training"], s["launch"]
    moe = m["num_experts"] is not None
    lines = [header(plan, comment="<!--").rstrip("\n") + " -->", "", f"# {s['name']}", ""]
    model = (
        f"{m['num_layers']} layers, hidden {m['hidden_size']}, {m['num_attention_heads']} "
        f"heads ({m['num_query_groups']} KV groups), ffn {m['ffn_hidden_size']}, "
        f"vocab {m['vocab_size']} (padded {d['padded_vocab_size']}), seq {m['seq_length']}"
    )
    if moe:
        model += (
            f"; MoE: {m['num_experts']} experts, top-{m['moe_router_topk']}, "
            f"{d['num_moe_layers']} MoE layers"
        )
    lines += [
        f"- engine: {s['engine']} (entrypoint {lc['entrypoint']}, device {lc['device']}"
        f"{', shrunk for a smoke test' if lc['shrink'] else ''})",
        f"- model: {model}",
        f"- cluster: {c['num_nodes']} node(s) x {c['gpus_per_node']} {c['gpu']} GPU(s) = "
        f"{d['world_size']} GPUs",
        f"- precision {t['precision']}, recompute {t['recompute']}, "
        f"{t['train_iters']} steps, {d['tokens_per_step']:,} tokens per step",
    ]
    presets = plan.get("presets") or {}
    if presets:  # which files the spec was composed with (a local one shadows a bundled one)
        lines.append("- presets: " + ", ".join(f"{g} `{f}`" for g, f in sorted(presets.items())))
    lines += [
        "",
        "## Layout",
        "",
        f"dense grid: world {d['world_size']} = tp {d['tp']} x cp {d['cp']} x dp {d['dp']}"
        f" x pp {d['pp']}"
        + (
            f"; expert grid: world {d['world_size']} = etp {d['etp']} x "
            f"ep {d['ep']} x expert_dp {d['expert_dp']} x pp {d['pp']}"
            if moe
            else ""
        ),
        "",
    ]
    lines += _table(
        [
            ("tp / pp / vpp / cp", f"{d['tp']} / {d['pp']} / {d['vpp']} / {d['cp']}"),
            ("ep / etp / expert_dp", f"{d['ep']} / {d['etp']} / {d['expert_dp']}"),
            ("dp", d["dp"]),
            ("sequence parallel", "yes" if d["sequence_parallel"] else "no"),
            ("ZeRO stage", ZERO_STAGE_ROW[Engine(s["engine"])](s, d)),
            ("micro / global batch", f"{t['micro_batch_size']} / {t['global_batch_size']}"),
            ("micro-batches per step", d["num_microbatches"]),
            ("samples / tokens per step", f"{d['samples_per_step']:,} / {d['tokens_per_step']:,}"),
            ("steps per epoch", epochs_text(d)),
            ("checkpoint format", d["checkpoint_format"]),
            ("layers per stage", ", ".join(str(n) for n in d["layers_per_stage"])),
            (
                "pipeline p2p",
                ("overlapped, unbatched" if d["overlap_p2p_comm"] else "batched")
                if d["pp"] > 1
                else "n/a",
            ),
        ]
    )
    est = plan.get("estimates") or {}
    lines += _estimates(est) + _memory_per_stage(est) + _rank_map(est)
    lines += ["", "## Diagnostics", ""]
    diags = plan.get("diagnostics") or []
    lines += [
        f"- {g['severity']} [{g['rule']}] `{g['key']}`: {g['message']}"
        + (f" (fix: {g['fix']})" if g.get("fix") else "")
        for g in diags
    ] or ["none"]
    lines += ["", "## Artifacts", ""]
    lines += [f"- `{name}`" for name in sorted(artifacts)]
    lines += [
        "",
        "## Run",
        "",
        "- this machine, one node: `trainc run OUTDIR` (or `bash OUTDIR/torchrun.sh`)",
        f"- by hand on {c['num_nodes']} node(s): on node i run `NODE_RANK=i "
        "MASTER_ADDR=<node 0> bash OUTDIR/torchrun.sh`",
        "- Slurm: `trainc submit OUTDIR` (or `cd OUTDIR && sbatch sbatch.sh`)",
    ]
    missing = not_written(plan)
    if missing:
        lines.append(f"- Kubernetes: {missing}")
    elif "trainjob.yaml" in artifacts:
        lines.append(
            "- Kubernetes: `kubectl apply -f OUTDIR/trainjob.yaml` (or pytorchjob.yaml; "
            "their headers say what to create first)"
        )
    lines.append("")
    return "\n".join(lines)


def report(plan: dict[str, Any], artifacts: list[str] | None = None) -> dict[str, str]:
    """``report.md``; ``artifacts`` are the names written with it (default: none listed)."""
    return {"report.md": report_text(plan, artifacts or [])}


def epochs_text(d: dict[str, Any]) -> str:
    """``625 (1.6 epochs of 10,000 samples)``, or why there is no epoch count (derive.py
    epoch_counts: the one place it is computed; cp never changes it)."""
    if d.get("steps_per_epoch") is None:
        return "unknown (set data.num_samples or data.num_tokens)"
    return f"{d['steps_per_epoch']:,} ({d['epochs']:g} epochs of {d['dataset_samples']:,} samples)"
