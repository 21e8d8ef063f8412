"""Planner fidelity against published runs: is the published layout among ``trainc plan``'s top 5?

For every row of ``bench/published_runs.csv`` (sources in ``bench/published_runs.md``) that
:mod:`trainc.calibrate.published` (the one converter, shared with ``bench/fidelity.py`` and
``trainc calibrate``) turns into a spec
and whose global batch is published (the converter guesses a missing one; the planner would plan
the guess), the planner runs on the published model, GPUs, global batch, sequence length and
precision (FP8 / FP4 rows with their ``fp8_format`` / ``fp8_recipe`` / ``fp4_format`` keys) with
no layout key fixed (:func:`planning_spec` drops the parallel section, micro batch and recompute;
only a published ``zero_stage`` 0 -- a Megatron-LM run from before its distributed optimizer --
stays, as a framework fact). A
row counts as *found* when one of the top 5 has the published tp, pp, cp and ep (the model-parallel
degrees; dp follows from them, and vpp, the micro batch and the layer split are secondary choices
that the table does not always publish). It also reports, per row, whether the planner's first
pick is no slower by the model than the published layout (estimated with the same planner search
constrained to the published tp/pp/cp/ep, so the published run gets its best split and micro
batch as well), and whether it is within the planner's error band of it (the simplicity
tie-break takes a simpler layout up to that much slower).

Prints one line per row and the figures; asserts nothing (not a timed test).

Run: .venv/bin/python bench/planner_fidelity.py [CSV] [--top K]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from trainc.planner import plan_layouts
from trainc.calibrate.published import load_rows, published_layout, row_to_spec_reason

#: The published-runs table the time model is fitted on (in the repo, next to this script).
DEFAULT_CSV = Path(__file__).resolve().parent / "published_runs.csv"

AXES = ("tp", "pp", "cp", "ep")


def _key(c: Any) -> tuple[int, ...]:
    return tuple(getattr(c, a) for a in AXES)


def planning_spec(row: dict[str, str]) -> dict[str, Any] | None:
    """The row's spec without the published layout (what the planner chooses: the parallel
    section, the micro batch, recompute), or None (not buildable, or no published global
    batch)."""
    spec, _why = row_to_spec_reason(row)
    if spec is None or not row.get("global_batch"):
        return None
    par = spec.pop("parallel")
    if par.get("zero_stage") == 0 and spec.get("engine", "megatron") == "megatron":
        # a run without Megatron's distributed optimizer (plain DDP: Megatron-LM before 2022)
        # is a fact of its framework, not a layout choice: the planner gets it as a fixed key,
        # as a user without that optimizer would write it
        spec["parallel"] = {"zero_stage": 0}
    for k in ("micro_batch_size", "recompute"):
        spec["training"].pop(k, None)
    return spec


def evaluate(rows: list[dict[str, str]], top: int = 5) -> list[dict[str, Any]]:
    """One record per buildable row: found (published layout in the top ``top``), the planner's
    first pick and its step time, and the published layout's best step time (None when the
    published layout does not fit or breaks a rule by the model)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, row in enumerate(rows):
            spec = planning_spec(row)
            if spec is None:
                continue
            path = Path(tmp) / f"row{i}.yaml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            lay = published_layout(row)
            want = tuple(int(lay[a] or 1) for a in AXES)
            t = time.perf_counter()
            res = plan_layouts(path, top=top)
            wall = time.perf_counter() - t
            keys = [_key(p.candidate) for p in res.planned]
            pub = plan_layouts(
                path, [f"parallel.{a}={v}" for a, v in zip(AXES, want, strict=True)], top=1
            )
            best = res.planned[0].estimates["step_time_seconds"] if res.planned else None
            pub_step = pub.planned[0].estimates["step_time_seconds"] if pub.planned else None
            out.append(
                {
                    "row": i,
                    "model": row["model"],
                    "gpus": row["gpus"],
                    "gpu_type": row["gpu_type"],
                    "moe": bool(row.get("experts")),
                    "published": want,
                    "found": want in keys,
                    "rank": keys.index(want) + 1 if want in keys else None,
                    "pick": keys[0] if keys else None,
                    "step": best,
                    "published_step": pub_step,
                    "band": res.error_band,
                    "wall": wall,
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV))
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    recs = evaluate(load_rows(args.csv), args.top)
    for r in recs:
        slower = (
            "-"
            if r["published_step"] is None or r["step"] is None
            else f"{r['step'] / r['published_step'] - 1:+.1%}"
        )
        print(
            f"row {r['row']:3d} {r['model'][:24]:24s} {r['gpus']:>5s} {r['gpu_type'][:10]:10s}"
            f" published tp/pp/cp/ep={r['published']} rank={r['rank'] or '-'} "
            f"pick={r['pick']} pick vs published {slower} ({r['wall']:.1f} s)"
        )
    n = len(recs)
    found = sum(r["found"] for r in recs)
    moe = [r for r in recs if r["moe"]]
    comparable = [r for r in recs if r["published_step"] is not None and r["step"] is not None]
    no_slower = sum(r["step"] <= r["published_step"] * (1 + 1e-6) for r in comparable)
    # the simplicity tie-break may pick a layout up to the error band slower (docs/planner.md)
    in_band = sum(r["step"] <= r["published_step"] * (1 + r["band"] + 1e-6) for r in comparable)
    print(
        f"published layout in the top {args.top}: {found}/{n} = {found / max(n, 1):.0%} "
        f"(MoE {sum(r['found'] for r in moe)}/{len(moe)}); first pick no slower than the "
        f"published layout by the model: {no_slower}/{len(comparable)} rows where the "
        f"published layout fits, {in_band}/{len(comparable)} within the error band"
    )


if __name__ == "__main__":
    main()
