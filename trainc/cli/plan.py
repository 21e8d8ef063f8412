"""``trainc plan``: search the parallel layout of a spec, print the best ones as a table or JSON,
and optionally write the best as a spec (``--apply``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainc.cli._common import (
    EXIT_OK,
    EXIT_SPEC,
    _json_record,
    _print_text,
    _split,
    dumps,
    out,
    write_file,
)


def _plan(args: argparse.Namespace) -> int:
    """``trainc plan SPEC [KEY=VALUE ...] [--top K] [--apply OUT.yaml]``."""
    from trainc.planner import applied_spec, plan_layouts, to_json

    specs, overrides = _split(args.items)
    if len(specs) != 1:
        print("trainc plan: expected one spec file", file=sys.stderr)
        return EXIT_SPEC
    res = plan_layouts(specs[0], overrides, top=max(1, args.top))
    if not res.ok or not res.planned:
        if args.format == "json":  # one object on stdout, as promised, even with no layout
            out(dumps({**_json_record(res, False), **to_json(res), "ok": False},
                      indent=2, sort_keys=True))
        _print_text(res)
        if res.ok:
            print(f"trainc plan: no layout of {specs[0]} fits ({res.num_candidates_evaluated} "
                  "candidates evaluated); add nodes, GPUs with more memory, or a smaller batch",
                  file=sys.stderr)
        else:
            print(f"trainc plan: {specs[0]}: the keys it fixes break the rules above",
                  file=sys.stderr)
        return EXIT_SPEC
    if args.format == "json":
        out(dumps(to_json(res), indent=2, sort_keys=True))
    else:
        _plan_table(res)
    if args.apply:
        import yaml

        text = ("# written by trainc plan from " + specs[0] + "\n" +
                yaml.safe_dump(applied_spec(res.planned[0]), sort_keys=False))
        write_file(args.apply, text)
        if args.format == "text":
            out(f"wrote {args.apply}")
    return EXIT_OK


def _plan_table(res: Any) -> None:
    """The planned layouts of a :class:`trainc.planner.PlanResult` as a Rich table on stdout."""
    from rich.console import Console
    from rich.table import Table

    from trainc.planner.search import summary

    table = Table(title=f"trainc plan: {res.path} ({res.num_candidates_evaluated:,} candidates "
                        f"evaluated, {res.num_fit:,} fit)")
    for col in ("#", "tp", "pp", "vpp", "cp", "ep", "dp", "mbs", "recompute", "zero",
                "GiB/GPU", "bubble", "step s", "tok/s", "MFU", "why"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(res.planned):
        s = summary(p.candidate)
        par, tr, e = s["parallel"], s["training"], p.estimates
        mem = e.get("memory_bytes", {}).get("total", 0) / 2**30
        table.add_row(str(i + 1), str(par["tp"]), _pp(par), str(par["vpp"]),
                      f"{par['cp']}" + (f" {par['cp_comm_type']}" if par["cp"] > 1 else ""),
                      str(par["ep"]), str(par["dp"]), str(tr["micro_batch_size"]),
                      tr["recompute"], str(par["zero_stage"]), f"{mem:.1f}",
                      _fmt(e.get("pipeline_bubble_fraction"), "{:.1%}"),
                      _fmt(e.get("step_time_seconds"), "{:.2f}"),
                      _fmt(e.get("tokens_per_second"), "{:,.0f}"),
                      _fmt(e.get("mfu"), "{:.1%}"), p.reason)
    Console(width=200).print(table)


def _pp(par: dict) -> str:  # type: ignore[type-arg]
    acc = [x for x, k in (("E", "account_for_embedding_in_pipeline_split"),
                          ("L", "account_for_loss_in_pipeline_split")) if par.get(k)]
    if acc:  # Megatron's layout notation: the embedding (E) / loss (L) take a layer's slot
        return f"{par['pp']} (+{'+'.join(acc)})"
    if par["pipeline_first_stage_layers"] is None:
        return str(par["pp"])
    return f"{par['pp']} ({par['pipeline_first_stage_layers']}/.../" \
           f"{par['pipeline_last_stage_layers']})"


def _fmt(v: object, fmt: str) -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "-"
