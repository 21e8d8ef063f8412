"""``trainc calibrate``: fit a cluster's time-model factors to measured runs.

Inputs (:func:`read_runs`), each a list of :class:`Run` (a spec and a measured step time):

* a CSV (:func:`runs_from_csv`): either a ``spec`` column (a spec file, relative to the CSV's
  folder) with one measured column, ``step_time_s`` (seconds per step), ``tokens_per_s_per_gpu``
  or ``tflops_per_gpu`` (model TFLOP/s per GPU, Megatron's count); or the columns of the
  published-runs table (``bench/published_runs.csv``: the model, GPUs, batch, the
  published layout and precision, converted by :mod:`trainc.calibrate.published`, the converter
  ``bench/fidelity.py`` uses) with ``tokens_per_s_per_gpu=`` in the notes or
  ``measured_tflops_per_gpu`` (over the source's own FLOP count,
  :func:`trainc.calibrate.published.flop_convention`); printed tokens/s win over TFLOP/s; rows
  without a published global batch are skipped;
* a Megatron-LM training log (:func:`parse_megatron_log`): the arguments block Megatron-LM prints
  at start (``megatron/training/arguments.py`` ``_print_args``: ``------------------------
  arguments ------------------------`` then ``  name ..... value`` lines) and the ``elapsed time
  per iteration (ms): X`` of its iteration lines (``megatron/training/training.py``
  ``training_log``), core_v0.16.x; the cluster comes from ``--cluster``;
* a trainc worker log (:func:`parse_worker_log`): ``trainc-worker: plan=PATH ...`` and the
  ``step=N ... step_time_s=X`` lines (:mod:`trainc.launch.worker.steplog`); the spec is plan.json's.

The measured step time of a log is the median over its logged iterations after the first (the
first includes compilation and warm-up).

The fit (:func:`fit`) changes the cluster's scalar factors the time model reads
(:data:`FACTORS`: per time model, name -> bounds; the list is data, a new factor of a time
model is one entry)
to minimise the sum over runs of ``(log estimate - log measured)^2``, with scipy's Nelder-Mead
when scipy is installed, else :func:`nelder_mead` (Nelder and Mead 1965, the standard
reflection/expansion/contraction/shrink coefficients 1, 2, 0.5, 0.5), each factor in units of
its start value and folded into its bounds by reflection, restarted from its best point until
it stops improving; with the default factors only those the runs support are freed (forward
selection, :func:`supported`), the others keep their start values. The estimate is the
compiler's own
(:func:`trainc.compiler.estimate.estimate` on the run's plan with the factors replaced).
The residual band is the 10th and 90th percentile (linear interpolation) of measured / fitted
estimate over the runs, widened to at least p10 0.95, p90 1.05 (:func:`residual_band`: run-to-run
variability of large jobs is about 5-9 %, so a band fitted to a few runs must not claim more); it
is written into the preset as ``step_time_p10_ratio`` / ``step_time_p90_ratio`` so estimates
carry a p10-p90 range and the planner's tie band follows.
"""

from __future__ import annotations

from trainc.calibrate.band import BAND_FLOOR, FEW_RUNS, band_note, percentile, residual_band
from trainc.calibrate.fit import (
    AGREEMENT,
    AT_BOUND_TOL,
    FACTORS,
    INT_FACTORS,
    RESTARTS,
    UNCONSTRAINED_RMS,
    FitResult,
    check_agreement,
    default_factors,
    factor_value,
    factors_for,
    fit,
    near_bound,
    nelder_mead,
    step_estimate,
    supported,
)
from trainc.calibrate.prepare import check_one_cluster, prepare
from trainc.calibrate.preset import preset_dict, preset_text
from trainc.calibrate.readers import (
    MEASURED_COLUMNS,
    PUBLISHED_COLUMNS,
    _spec_from_dict,
    bad_measurement,
    measured_value,
    megatron_spec_dict,
    parse_megatron_args,
    parse_megatron_log,
    parse_worker_log,
    read_runs,
    runs_from_csv,
)
from trainc.calibrate.runs import CalibrateError, Run

__all__ = [
    "AGREEMENT",
    "AT_BOUND_TOL",
    "BAND_FLOOR",
    "FACTORS",
    "FEW_RUNS",
    "INT_FACTORS",
    "MEASURED_COLUMNS",
    "PUBLISHED_COLUMNS",
    "RESTARTS",
    "UNCONSTRAINED_RMS",
    "CalibrateError",
    "FitResult",
    "Run",
    "_spec_from_dict",
    "bad_measurement",
    "band_note",
    "check_agreement",
    "check_one_cluster",
    "default_factors",
    "factor_value",
    "factors_for",
    "fit",
    "measured_value",
    "megatron_spec_dict",
    "near_bound",
    "nelder_mead",
    "parse_megatron_args",
    "parse_megatron_log",
    "parse_worker_log",
    "percentile",
    "prepare",
    "preset_dict",
    "preset_text",
    "read_runs",
    "residual_band",
    "runs_from_csv",
    "step_estimate",
    "supported",
]

#: The examples in the docstrings of the package's modules, run by ``doctest.testmod`` on the
#: package (it collects only objects defined in the module it is given).
__test__ = {f.__name__: f for f in (measured_value, near_bound, supported, residual_band)}
