"""Soak run of the trust checks: many more inputs than CI, random seeds.

    .venv/bin/python scripts/soak.py --diff 10000 --fuzz 10000 [--seed N]

* differential: ``--diff`` generated specs checked against megatron-core / deepspeed (the harness
  of tests/differential, tests/support/differential.py), plus the divergence table's coverage;
* fuzz: ``--fuzz`` inputs split over mutated specs, YAML-ish text and overrides, each compiled
  in-process; an exception escaping ``compile_spec`` is a crash.

Prints the counts and exits 1 on any disagreement or crash (the first few are printed).
Needs the ``worker`` extra for the differential part (``--diff 0`` skips it).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test helpers: tests.support


def soak_diff(n: int, seed: int) -> int:
    from tests.support import differential as H
    from tests.support.divergences import table

    rows = table()
    stricter = {r for r, (_, k) in rows.items() if k == "stricter"}
    t0 = time.time()
    report = H.run_generated(n, stricter, derandomize=False, seed=seed)
    print(f"differential: {report.summary()} ({time.time() - t0:.0f} s)", flush=True)
    never = sorted(set(rows) - set(report.divergences) - set(report.emit_divergences))
    if never:
        print(f"differential: table rows not exercised in this run: {never}")
    for cfg, bad in report.disagreements[:5]:
        print(f"DISAGREEMENT {cfg}\n  " + "\n  ".join(bad))
    return len(report.disagreements)


def soak_fuzz(n: int, seed: int) -> int:
    import yaml
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed

    from tests.support.fuzzing import VALID, check_input, mutated_specs, overrides, yamlish

    os.environ["TRAINC_NO_CACHE"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="trainc-soak-"))
    counts = {"inputs": 0, "accepted": 0, "rejected": 0, "crashes": 0}
    crashes: list[str] = []

    def one(data: object, ovs: list[str] | None = None) -> None:
        counts["inputs"] += 1
        try:
            ok = check_input(tmp, data, ovs or []).ok  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - a crash is what this hunts
            if isinstance(e, KeyboardInterrupt):
                raise
            counts["crashes"] += 1
            if len(crashes) < 5:
                crashes.append(
                    f"{type(e).__name__}: {e}\n  input: {str(data)[:300]!r} "
                    f"{ovs}\n{traceback.format_exc()[-1500:]}"
                )
            return
        counts["accepted" if ok else "rejected"] += 1

    base = yaml.safe_dump(VALID)
    per = max(1, n // 3)
    cfg = settings(
        max_examples=per,
        derandomize=False,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    t0 = time.time()

    def text(data: object) -> None:
        one(data)

    def cli(ovs: list[str]) -> None:
        one(base, ovs)

    for i, (strategy, fn) in enumerate(
        ((mutated_specs(), text), (yamlish(), text), (overrides(), cli))
    ):
        run = hyp_seed(seed + i)(cfg(given(strategy)(fn)))
        run()
    print(
        f"fuzz: {counts['inputs']} inputs, {counts['accepted']} compiled, "
        f"{counts['rejected']} rejected with diagnostics, {counts['crashes']} crashes "
        f"({time.time() - t0:.0f} s)",
        flush=True,
    )
    for c in crashes:
        print("CRASH", c)
    return counts["crashes"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diff", type=int, default=10_000, help="differential specs (0: skip)")
    ap.add_argument("--fuzz", type=int, default=10_000, help="fuzz inputs (0: skip)")
    ap.add_argument("--seed", type=int, default=None, help="default: random")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"soak seed {seed}", flush=True)
    bad = 0
    if args.fuzz:
        bad += soak_fuzz(args.fuzz, seed)
    if args.diff:
        bad += soak_diff(args.diff, seed)
    print("soak: OK" if not bad else f"soak: {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
