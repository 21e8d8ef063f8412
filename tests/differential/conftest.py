"""Differential tests: trainc against megatron-core and deepspeed used as oracles (CPU only).

Skipped when the libraries are absent (install the ``worker`` extra). ``TRAINC_DIFF_EXAMPLES``
sets the number of generated specs (default 2,000, the CI profile; derandomized).
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "differential: checks trainc's verdicts against megatron-core / deepspeed")
