"""Rule fixes that came out of the differential and fuzz tests (issue 7), as reject/allow pairs."""

from __future__ import annotations

from specs.kit import find, lint_cfg

QKV = {"model.hidden_size": 192, "model.num_attention_heads": 6, "model.num_query_groups": 1,
       "model.ffn_hidden_size": 768, "cluster.gpus_per_node": 3, "parallel.tp": 3,
       "parallel.pp": 1, "training.global_batch_size": 4}


def test_kv_replication_needs_tp_to_divide_the_fused_qkv_width() -> None:
    # megatron-core 0.16.1: SelfAttention splits kv_channels*(heads + 2*groups) = 32*8 = 256
    # over tp = 3 -> "256 is not divisible by 3"
    found = find(lint_cfg(**QKV), "TRC202")
    assert found and found[0].key == "parallel.tp" and found[0].facts["qkv_width"] == 256
    assert "3" in found[0].fix or "1" in found[0].fix


def test_kv_replication_allowed_when_tp_divides_the_qkv_width() -> None:
    ok = dict(QKV, **{"model.hidden_size": 6 * 48})  # kv_channels 48 -> width 384 = 3 * 128
    assert not find(lint_cfg(**ok), "TRC202")


def test_ffn_not_checked_when_every_layer_is_moe() -> None:
    moe = {"model.num_experts": 4, "model.moe_router_topk": 2, "model.moe_ffn_hidden_size": 1024,
           "model.ffn_hidden_size": 2049, "parallel.ep": 2, "parallel.etp": 1}
    assert not find(lint_cfg(**moe), "TRC203")
    # with a dense layer in the model (every 2nd layer MoE) the dense MLP splits ffn over tp
    assert find(lint_cfg(**moe, **{"model.moe_layer_freq": 2}), "TRC203")


def test_launch_strings_with_line_breaks_are_diagnosed() -> None:
    # (were an internal error at emit time; TRC511 from the rules branch now covers them)
    for key in ("launch.partition", "launch.account", "launch.data_path", "launch.save_dir"):
        found = find(lint_cfg(**{key: "gpu\ntouch /tmp/x"}), "TRC511")
        assert [d.key for d in found] == [key]
        assert not find(lint_cfg(**{key: "gpu-a100 x"}), "TRC511")


def test_absurd_layer_and_gpu_counts_are_range_errors() -> None:
    assert [d.key for d in find(lint_cfg(**{"model.num_layers": 10**12}), "TRC006")] == \
        ["model.num_layers"]
    assert find(lint_cfg(**{"cluster.num_nodes": 10**6}), "TRC006")
    assert not find(lint_cfg(**{"cluster.num_nodes": 1000}), "TRC006")
