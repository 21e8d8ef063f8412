"""Differential tests: trainc against megatron-core and deepspeed used as oracles (CPU only).

Skipped when the libraries are absent (install the ``worker`` extra). ``TRAINC_DIFF_EXAMPLES``
sets the number of generated specs (default 2,000, the CI profile; derandomized).

The ``megatron_lm_wheel`` fixture provides Megatron-LM's target version (``plan.json``
``target_versions.megatron_lm``) for ``test_megatron_lm.py``: the megatron-core wheel, which
ships ``megatron.training``, downloaded and unpacked once by ``scripts/megatron_lm_wheel.py``
into ``.venv/trainc-oracles/`` (never installed: it sits beside the worker's megatron-core and
is only put on a subprocess's ``PYTHONPATH``). When it cannot be had (offline, no torch) the
tests skip with the reason, or fail when ``TRAINC_REQUIRE_MEGATRON_LM=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wheel_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "megatron_lm_wheel", REPO / "scripts" / "megatron_lm_wheel.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def megatron_lm_wheel() -> Path:
    """Folder of the unpacked megatron-core wheel of trainc's target Megatron-LM version."""
    required = os.environ.get("TRAINC_REQUIRE_MEGATRON_LM") == "1"

    def unavailable(reason: str) -> None:
        if required:
            pytest.fail(f"{reason} (TRAINC_REQUIRE_MEGATRON_LM=1)", pytrace=False)
        pytest.skip(reason)

    if importlib.util.find_spec("torch") is None:
        unavailable("the Megatron-LM oracle needs torch (install the worker extra)")
    script = _wheel_script()
    version = script.target_version()
    try:
        return script.ensure_wheel(version)
    except script.WheelUnavailable as e:
        unavailable(f"megatron-core {version} (Megatron-LM core_v{version}) unavailable: {e}")
    raise AssertionError("unreachable")
