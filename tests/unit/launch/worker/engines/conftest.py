"""The worker's engine loops (trainc/launch/worker/engines) import torch at module level, and so
do their tests: without the ``[worker]`` extra every module of this folder is skipped with the
reason, at collection, instead of erroring on ``import torch``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REASON = "needs the [worker] extra (torch, megatron-core, deepspeed): pip install -e '.[worker]'"


class NeedsTorch(pytest.Module):
    """A test module that is collected only where torch imports (skipped with ``REASON`` else)."""

    def collect(self) -> Any:
        pytest.importorskip("torch", reason=REASON)
        return super().collect()


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    """Every test module of this folder as a :class:`NeedsTorch`."""
    return NeedsTorch.from_parent(parent, path=module_path)
