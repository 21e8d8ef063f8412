"""The fit pass (TRC4xx) and its what-if search, a package:

* :mod:`trainc.compiler.fit.check`: :func:`check_fit`, the pass after estimate: TRC401 / TRC403
  memory per GPU, TRC420 / TRC421 host memory of CPU offload, TRC402 pipeline bubble, TRC404
  step time against ``launch.time_limit``.
* :mod:`trainc.compiler.fit.whatif`: :func:`fitting_changes`, the cheapest changes that make a
  spec fit (TRC401's fix), re-estimated through the ``evaluate`` function the driver hands
  :func:`check_fit`.
"""

from trainc.compiler.fit.check import (
    BUBBLE_LIMIT,
    HOST_BUFFER_FACTOR,
    OOM_MARGIN,
    TIGHT_MARGIN,
    GiB,
    check_fit,
    host_offload_bytes_per_node,
    is_tight,
)
from trainc.compiler.fit.whatif import (
    CP_BAND,
    MAX_REBALANCE,
    MAX_SUGGESTIONS,
    Evaluate,
    fitting_changes,
)

__all__ = [
    "BUBBLE_LIMIT",
    "CP_BAND",
    "HOST_BUFFER_FACTOR",
    "MAX_REBALANCE",
    "MAX_SUGGESTIONS",
    "OOM_MARGIN",
    "TIGHT_MARGIN",
    "Evaluate",
    "GiB",
    "check_fit",
    "fitting_changes",
    "host_offload_bytes_per_node",
    "is_tight",
]
