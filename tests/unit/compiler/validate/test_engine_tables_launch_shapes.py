"""The launch and head-shape checks look engines up: every ``Engine`` has its row in their tables
(a new engine fails here until it has one)."""

from __future__ import annotations

from trainc.compiler.validate.divisibility import QUERY_GROUP_CHECKS
from trainc.compiler.validate.launcher import MAX_CONNECTIONS_CHECKS
from trainc.schemas import Engine


def test_every_engine_has_its_row() -> None:
    assert set(MAX_CONNECTIONS_CHECKS) == set(Engine)
    assert set(QUERY_GROUP_CHECKS) == set(Engine)
