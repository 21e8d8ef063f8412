"""Rules whose verdict follows the engine release the job runs (``launch.versions``, else the
release trainc targets) or an upstream check that only some settings hit: each test pins the
boundary the upstream code draws (the source is cited in the rule's docstring / SOURCES)."""

from __future__ import annotations

from tests.support.kit import find, lint_cfg

#: tp 8 over 2 KV groups (KV replication on Megatron-Core >= 0.16)
GQA_TP8 = {"model.num_query_groups": 2, "parallel.tp": 8, "parallel.pp": 1}


def test_kv_replication_is_an_error_before_megatron_core_0_16() -> None:
    found = find(lint_cfg(**GQA_TP8, **{"launch.versions": {"megatron_core": "0.15.3"}}), "TRC221")
    assert [(d.severity.value, d.key) for d in found] == [("error", "parallel.tp")]
    assert "must be a multiple of tensor_model_parallel_size (8)" in found[0].message
    assert found[0].edits == {"parallel.tp": 2}
    assert "0.16.0 or later" in (found[0].fix or "")


def test_kv_replication_is_a_warning_from_megatron_core_0_16() -> None:
    for versions in ({"megatron_core": "0.16.0"}, {}):  # {}: trainc's target, 0.16.1
        found = find(lint_cfg(**GQA_TP8, **{"launch.versions": versions}), "TRC221")
        assert [(d.severity.value, d.key) for d in found] == [("warning", "parallel.tp")]


#: 8 layers over pp 2: chunks of 4 layers
UNIFORM = {"training.recompute": "full", "training.recompute_method": "uniform"}


def test_uniform_recompute_must_divide_the_chunk_before_megatron_core_0_17() -> None:
    found = find(lint_cfg(**UNIFORM, **{"training.recompute_num_layers": 3}), "TRC260")
    assert [(d.severity.value, d.key) for d in found] == [
        ("error", "training.recompute_num_layers")
    ]
    assert found[0].facts["layers_per_chunk"] == [4]
    assert found[0].edits == {"training.recompute_num_layers": 2}
    assert "one of 1, 2, 4" in (found[0].fix or "")


def test_uniform_recompute_chunks_with_vpp_and_dividing_values() -> None:
    # vpp 2: chunks of 2 layers, so 4 (a divisor of the stage) is TRC309, 2 is fine
    assert not find(
        lint_cfg(
            **UNIFORM,
            **{
                "training.recompute_num_layers": 2,
                "parallel.vpp": 2,
                "training.global_batch_size": 32,
            },
        ),
        "TRC260",
    )
    assert not find(lint_cfg(**UNIFORM, **{"training.recompute_num_layers": 4}), "TRC260")


def test_uniform_recompute_is_clamped_from_megatron_core_0_17_and_block_never_overruns() -> None:
    odd = {**UNIFORM, "training.recompute_num_layers": 3}
    assert not find(lint_cfg(**odd, **{"launch.versions": {"megatron_core": "0.17.0"}}), "TRC260")
    assert not find(lint_cfg(**{**odd, "training.recompute_method": "block"}), "TRC260")
    assert not find(lint_cfg(**odd, engine="deepspeed"), "TRC260")


#: Mixtral-like: 8 experts, capacity factor 1.25, ep 4 x tp 2 on 8 GPUs
CAPACITY = {
    "model.num_experts": 8,
    "model.moe_router_topk": 2,
    "parallel.ep": 4,
    "parallel.pp": 1,
    "parallel.sequence_parallel": True,
    "model.moe_expert_capacity_factor": 1.25,
}


def test_capacity_factor_needs_alltoall_before_megatron_core_0_12() -> None:
    old = {"launch.versions": {"megatron_core": "0.11.0"}}
    for dispatcher in ("allgather", "flex"):
        found = find(
            lint_cfg(**CAPACITY, **old, **{"model.moe_token_dispatcher_type": dispatcher}), "TRC390"
        )
        assert [(d.severity.value, d.key) for d in found] == [
            ("error", "model.moe_expert_capacity_factor")
        ], dispatcher
        assert found[0].edits == {"model.moe_token_dispatcher_type": "alltoall"}
    assert not find(
        lint_cfg(**CAPACITY, **old, **{"model.moe_token_dispatcher_type": "alltoall"}), "TRC390"
    )


def test_capacity_factor_with_any_dispatcher_from_megatron_core_0_12() -> None:
    for versions in ({"megatron_core": "0.12.0"}, {}):  # {}: trainc's target, 0.16.1
        assert not find(
            lint_cfg(
                **CAPACITY,
                **{"launch.versions": versions, "model.moe_token_dispatcher_type": "allgather"},
            ),
            "TRC390",
        )


BLOCKWISE = {
    "cluster.gpu": "h100-80g",
    "training.fp8_format": "e4m3",
    "training.fp8_recipe": "blockwise",
    "parallel.pp": 1,
}


def test_blockwise_fp8_needs_cuda_12_9() -> None:
    found = [
        d
        for d in find(lint_cfg(**BLOCKWISE, **{"launch.versions": {"cuda": "12.8"}}), "TRC370")
        if d.key == "launch.versions.cuda"
    ]
    assert [d.severity.value for d in found] == ["error"]
    assert found[0].edits == {"launch.versions.cuda": "12.9"}
    for cuda in ("12.9", "13.0"):
        assert not find(lint_cfg(**BLOCKWISE, **{"launch.versions": {"cuda": cuda}}), "TRC370")
    assert not find(lint_cfg(**BLOCKWISE), "TRC370")  # the CUDA release is not given
    tensorwise = {**BLOCKWISE, "training.fp8_recipe": "tensorwise"}
    assert not find(lint_cfg(**tensorwise, **{"launch.versions": {"cuda": "12.8"}}), "TRC370")


def test_tp_comm_overlap_across_nodes_is_an_error() -> None:
    """TransformerEngine #1071: Userbuffers runs TP inside one NVLink domain only."""
    two_nodes = {
        "training.tp_comm_overlap": True,
        "parallel.sequence_parallel": True,
        "cluster.gpus_per_node": 4,
        "cluster.num_nodes": 2,
        "parallel.pp": 1,
        "cluster.gpu": "h100-80g",
    }
    found = find(lint_cfg(**two_nodes, **{"parallel.tp": 8}), "TRC382")
    assert [(d.severity.value, d.key) for d in found] == [("error", "training.tp_comm_overlap")]
    assert found[0].edits == {"training.tp_comm_overlap": False}
    assert not find(lint_cfg(**two_nodes, **{"parallel.tp": 4}), "TRC382")


def _vocab_finding(vocab: int, saved: dict[str, object], **changes: object):
    [d] = find(
        lint_cfg(
            **{
                "model.vocab_size": vocab,
                "resume.load_dir": "/ckpt",
                "resume.saved": {"engine": "megatron", "pp": 2, **saved},
            },
            **changes,
        ),
        "TRC535",
    )
    return d


def test_resume_vocab_fix_for_added_tokens_resizes_the_embedding() -> None:
    """epfLLM/Megatron-LLM#81: 32002 tokens at tp 2 pad to 32256; the checkpoint has 32000."""
    d = _vocab_finding(32002, {"tp": 2, "padded_vocab_size": 32000})
    assert "resize the checkpoint's word embeddings and output layer to 32256 rows" in d.fix
    assert "model.vocab_size at most 32000" in d.fix
    assert "saved tp" not in d.fix and d.edits == {}


def test_resume_vocab_fix_names_the_saved_tp_or_the_divisor() -> None:
    # make_vocab_size_divisible_by 1: 32001 rows saved at tp 1; tp 2 pads to 32002, and no
    # divisor of tp 2 gives an odd row count: the saved tp does
    d = _vocab_finding(
        32001, {"tp": 1, "padded_vocab_size": 32001}, **{"model.make_vocab_size_divisible_by": 1}
    )
    assert d.edits == {"parallel.tp": 1} and "the saved tp" in d.fix
    # 30000 tokens saved as 30080 rows at tp 2: 15040 x 2 = 30080
    d = _vocab_finding(30000, {"tp": 2, "padded_vocab_size": 30080})
    assert d.edits == {"model.make_vocab_size_divisible_by": 15040}


def test_mxfp8_aligns_the_sequence_parallel_shard() -> None:
    """ms-swift #9723: 31936 tokens at tp 4 with sequence parallelism: 7984 per rank."""
    mx = {
        "cluster.gpu": "b200",
        "training.fp8_format": "e4m3",
        "training.fp8_recipe": "mxfp8",
        "parallel.tp": 4,
        "parallel.pp": 1,
        "parallel.sequence_parallel": True,
        "model.max_position_embeddings": 65536,
    }
    found = [
        d
        for d in find(lint_cfg(**mx, **{"model.seq_length": 31936}), "TRC371")
        if d.key == "model.seq_length"
    ]
    assert [d.facts["tokens"] for d in found] == [7984]
    assert found[0].edits == {"model.seq_length": 32000}
    assert not [
        d
        for d in find(lint_cfg(**mx, **{"model.seq_length": 32000}), "TRC371")
        if d.key == "model.seq_length"
    ]
    # without sequence parallelism every rank holds the whole 31936 tokens (a multiple of 32)
    assert not [
        d
        for d in find(
            lint_cfg(**{**mx, "parallel.sequence_parallel": False}, **{"model.seq_length": 31936}),
            "TRC371",
        )
        if d.key == "model.seq_length"
    ]


def test_fsdp_single_stage_1f1b_rejects_fewer_microbatches_than_stages() -> None:
    """torch 2.13 Schedule1F1B.__init__ raises; torchtitan #775 hung before it."""
    fsdp = {"engine": "fsdp", "parallel.tp": 2, "parallel.pp": 2}
    found = find(lint_cfg(**fsdp, **{"training.global_batch_size": 2}), "TRC215")
    assert [(d.severity.value, d.key) for d in found] == [("error", "training.global_batch_size")]
    assert found[0].edits == {"training.global_batch_size": 4}
    assert not find(lint_cfg(**fsdp, **{"training.global_batch_size": 4}), "TRC215")
    # Megatron-Core's non-interleaved schedule runs it (idle stages): still a warning
    [d] = find(lint_cfg(**{"training.global_batch_size": 2, "parallel.tp": 2}), "TRC215")
    assert d.severity.value == "warning"
