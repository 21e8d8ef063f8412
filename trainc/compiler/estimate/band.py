"""The p10-p90 range an estimate's step time carries (plan.json ``step_time_p10_seconds``,
``step_time_p90_seconds`` and ``step_time_band``).

* A cluster calibrated by ``trainc calibrate`` has its own band: ``cluster.step_time_p10_ratio``
  / ``step_time_p90_ratio``, the 10th / 90th percentile of measured / estimated step time over
  the runs it was fitted on (docs/calibrate.md).
* Otherwise, with the kernel time model, the band measured on published training runs
  (``trainc/conf/step_time_band.yaml``, by model kind, dense or MoE; ``bench/fidelity.py --band``
  measures it): how far real runs of layouts like this one fall from the estimate.
* The seed time model without calibration has none (its error was never measured that way).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml

from trainc.compiler.decide import traits
from trainc.schemas import TimeModel, TrainSpec


@functools.cache
def published_bands() -> dict[str, tuple[float, float]]:
    """Model kind (``dense``, ``moe``) -> (p10, p90) ratio of measured / estimated step time,
    from ``trainc/conf/step_time_band.yaml``.

    >>> lo, hi = published_bands()["dense"]
    >>> lo < 1 < hi
    True
    """
    path = Path(str(resources.files("trainc") / "conf" / "step_time_band.yaml"))
    data = yaml.load(
        path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )  # libyaml when present
    return {k: (float(v["p10"]), float(v["p90"])) for k, v in data.items()}


def step_time_band(spec: TrainSpec) -> tuple[float, float, str] | None:
    """(p10 ratio, p90 ratio, where the band comes from: ``calibrated`` or ``published runs
    (dense)`` / ``(fsdp)`` / ``(moe)``) for the spec's estimate, or None (see the module
    docstring)."""
    c = spec.cluster
    lo, hi = c.step_time_p10_ratio, c.step_time_p90_ratio
    if lo is not None and hi is not None:
        return float(lo), float(hi), "calibrated"
    if c.time_model is not TimeModel.kernels:
        return None
    kind = "moe" if spec.model.num_experts else traits(spec).published_band
    p10, p90 = published_bands()[kind]
    return p10, p90, f"published runs ({kind})"
