"""Rules whose verdict follows the engine release the job runs (``launch.versions``, else the
release trainc targets) or an upstream check that only some settings hit: each test pins the
boundary the upstream code draws (the source is cited in the rule's docstring / SOURCES)."""

from __future__ import annotations

from specs.kit import find, lint_cfg

#: tp 8 over 2 KV groups (KV replication on Megatron-Core >= 0.16)
GQA_TP8 = {"model.num_query_groups": 2, "parallel.tp": 8, "parallel.pp": 1}


def test_kv_replication_is_an_error_before_megatron_core_0_16() -> None:
    found = find(lint_cfg(**GQA_TP8, **{"launch.versions": {"megatron_core": "0.15.3"}}),
                 "TRC221")
    assert [(d.severity.value, d.key) for d in found] == [("error", "parallel.tp")]
    assert "must be a multiple of tensor_model_parallel_size (8)" in found[0].message
    assert found[0].edits == {"parallel.tp": 2}
    assert "0.16.0 or later" in (found[0].fix or "")


def test_kv_replication_is_a_warning_from_megatron_core_0_16() -> None:
    for versions in ({"megatron_core": "0.16.0"}, {}):  # {}: trainc's target, 0.16.1
        found = find(lint_cfg(**GQA_TP8, **{"launch.versions": versions}), "TRC221")
        assert [(d.severity.value, d.key) for d in found] == [("warning", "parallel.tp")]
