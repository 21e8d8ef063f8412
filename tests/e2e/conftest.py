"""End-to-end worker tests: skipped (with the reason) when the [worker] extra is not installed."""

import importlib.util

import pytest

_MISSING = [
    m
    for m in ("torch", "megatron.core", "deepspeed")
    if importlib.util.find_spec(m.split(".")[0]) is None
    or (m == "megatron.core" and importlib.util.find_spec("megatron.core") is None)
]


def pytest_collection_modifyitems(config, items):
    for item in items:
        node = item.nodeid.replace("\\", "/")
        if "tests/e2e/" in node and "test_light.py" not in node:
            item.add_marker(pytest.mark.worker)
            if _MISSING:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs the [worker] extra (pip install -e '.[test,worker]'): "
                        f"{', '.join(_MISSING)} not importable"
                    )
                )


def pytest_terminal_summary(terminalreporter):
    from tests.support.e2e import TIMINGS

    if TIMINGS:
        terminalreporter.write_sep("-", "trainc e2e launch timings (s)")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"{v:7.1f}  {k}")
