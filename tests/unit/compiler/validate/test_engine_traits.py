"""The validate checks look engines up instead of comparing them: every ``Engine`` has its row."""

from __future__ import annotations

import importlib

from trainc.compiler.decide import ENGINE_TRAITS as TRAITS
from trainc.schemas import Engine


def test_every_engine_has_a_traits_row_and_its_own_checks() -> None:
    assert set(TRAITS) == set(Engine)
    compatibility = importlib.import_module("trainc.compiler.validate.compatibility")
    assert set(compatibility._ENGINE_CHECKS) == set(Engine)


def test_megatron_ddp_switches_are_read_exactly_where_megatron_core_trains() -> None:
    """``own_overlap`` is None only for an engine whose DDP is Megatron-Core's (TRC324)."""
    for engine, row in TRAITS.items():
        assert (row.own_overlap is None) == row.megatron_core, engine
