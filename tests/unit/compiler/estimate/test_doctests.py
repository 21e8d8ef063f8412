"""Every worked number in the estimate modules' docstrings is checked (conventions §11.8)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "activations",
    "bubble",
    "comm",
    "flops",
    "kernels",
    "megatron_ref",
    "memory",
    "params",
    "rankmap",
    "time",
    "__init__",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(f"trainc.compiler.estimate.{name}".replace(".__init__", ""))
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
