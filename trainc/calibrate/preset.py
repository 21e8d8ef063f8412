"""The calibrated cluster preset (``trainc/conf/cluster`` format): the run's cluster keys, the
fitted factors and the band (:func:`preset_dict`), as YAML with a comment on its origin
(:func:`preset_text`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from trainc.calibrate.band import BAND_FLOOR
from trainc.calibrate.fit import INT_FACTORS, FitResult
from trainc.calibrate.runs import Run
from trainc.compiler.plan import spec_to_dict
from trainc.schemas import ClusterSpec


def preset_dict(run: Run, result: FitResult) -> dict[str, Any]:
    """The cluster preset (trainc/conf/cluster format): the run's cluster keys that differ from
    the schema's defaults (num_nodes left to the spec), the fitted factors and the band."""
    raw = spec_to_dict(run.spec)["cluster"]
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(ClusterSpec)
        if f.default is not dataclasses.MISSING
    }
    out: dict[str, Any] = {
        k: v
        for k, v in raw.items()
        if k != "num_nodes"
        and v is not None
        and defaults.get(k, object()) != v
        and k not in result.names
    }
    for n in result.names:
        v = result.after[n]
        out[n] = round(v) if n in INT_FACTORS else float(f"{v:.4g}")
    out["step_time_p10_ratio"] = float(f"{result.p10_ratio:.4g}")
    out["step_time_p90_ratio"] = float(f"{result.p90_ratio:.4g}")
    return out


def preset_text(runs: list[Run], result: FitResult) -> str:
    """The preset YAML with a comment saying where its factors come from."""
    head = [
        f"# Calibrated by trainc calibrate from {len(runs)} measured run(s): "
        f"{', '.join(r.name for r in runs[:6])}{' ...' if len(runs) > 6 else ''}.",
        f"# RMS log error of the step time: {result.rms_log_before:.3f} before, "
        f"{result.rms_log_after:.3f} after; measured / estimated p10 "
        f"{result.fitted_p10_ratio:.3f}, p90 {result.fitted_p90_ratio:.3f}; the band below "
        f"has p10 at most {BAND_FLOOR[0]:g} x, p90 at least {BAND_FLOOR[1]:g} x their median.",
        "# num_nodes is the job's choice: set cluster.num_nodes in the spec.",
    ]
    body = yaml.safe_dump(preset_dict(runs[0], result), sort_keys=False)
    return "\n".join(head) + "\n" + body
