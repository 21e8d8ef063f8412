"""How the fitted factors of the GPU profiles were chosen (docs/performance.md): a coarse grid
over the few physical factors, scored by the median |error| of tokens/s per GPU on the published
runs (bench/fidelity.py's rows). Prints the grid's best points; changes nothing (the chosen
values are written by hand into trainc/conf/gpu/*.yaml and kernels.MOE_LAYER_OVERHEAD_US).

Factors: FP8 GEMM efficiency per GPU family (Hopper; B200 / GB200; GB300), the MoE per-layer
fixed cost. The BF16 GEMM efficiency, attention efficiency and memory efficiency are not fitted
(the table has no BF16 dense rows; they are set from kernel benchmarks, see the profiles).

Run: .venv/bin/python bench/calibrate_profiles.py
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import fidelity
from trainc.compiler.support import hardware
from trainc.compiler.estimate import kernels
from trainc.schemas import Gpu

FAMILIES = {
    "hopper": (Gpu.h100_80g, Gpu.h200, Gpu.h800),
    "blackwell": (Gpu.b200, Gpu.gb200),
    "gb300": (Gpu.gb300,),
}


def score(results: list[fidelity.Result], tag: str = "all") -> float:
    """Median |error| in per cent over the rows with ``tag``."""
    errs = [
        abs(r.predicted - r.measured) / r.measured
        for r in results
        if r.predicted and r.measured and tag in r.tags
    ]
    return 100 * statistics.median(errs) if errs else float("nan")


def main() -> int:
    """Print the best grid points."""
    orig = dict(hardware.GPUS)
    rows = []
    for hop, bw, gb3, moe in itertools.product(
        (0.6, 0.7), (0.5, 0.6), (0.6, 0.7), (300.0, 600.0, 900.0)
    ):
        for fam, val in (("hopper", hop), ("blackwell", bw), ("gb300", gb3)):
            for g in FAMILIES[fam]:
                p = orig[g]
                hardware.GPUS[g] = dataclasses.replace(
                    p, gemm_efficiency={**p.gemm_efficiency, "fp8": val}
                )
        kernels.MOE_LAYER_OVERHEAD_US = moe
        res = fidelity.run(fidelity.DEFAULT_CSV, baselines=False)
        rows.append((score(res), score(res, "dense"), score(res, "MoE"), hop, bw, gb3, moe))
    rows.sort()
    print("all  dense  MoE  | hopper blackwell gb300 moe_us")
    for r in rows[:10]:
        print(f"{r[0]:5.1f} {r[1]:5.1f} {r[2]:5.1f} | {r[3]:.2f} {r[4]:.2f} {r[5]:.2f} {r[6]:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
