"""Rule fixes that came out of the differential and fuzz tests (issue 7), as reject/allow pairs."""

from __future__ import annotations

from tests.support.kit import find, lint_cfg

QKV = {
    "model.hidden_size": 192,
    "model.num_attention_heads": 6,
    "model.num_query_groups": 1,
    "model.ffn_hidden_size": 768,
    "cluster.gpus_per_node": 3,
    "parallel.tp": 3,
    "parallel.pp": 1,
    "training.global_batch_size": 4,
}


def test_kv_replication_needs_tp_to_divide_the_fused_qkv_width() -> None:
    # megatron-core 0.16.1: SelfAttention splits kv_channels*(heads + 2*groups) = 32*8 = 256
    # over tp = 3 -> "256 is not divisible by 3"
    found = find(lint_cfg(**QKV), "TRC222")
    assert found and found[0].key == "parallel.tp" and found[0].facts["qkv_width"] == 256
    assert "3" in found[0].fix or "1" in found[0].fix


def test_kv_replication_allowed_when_tp_divides_the_qkv_width() -> None:
    ok = dict(QKV, **{"model.hidden_size": 6 * 48})  # kv_channels 48 -> width 384 = 3 * 128
    assert not find(lint_cfg(**ok), "TRC222")


def test_ffn_not_checked_when_every_layer_is_moe() -> None:
    moe = {
        "model.num_experts": 4,
        "model.moe_router_topk": 2,
        "model.moe_ffn_hidden_size": 1024,
        "model.ffn_hidden_size": 2049,
        "parallel.ep": 2,
        "parallel.etp": 1,
    }
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
    assert [d.key for d in find(lint_cfg(**{"model.num_layers": 10**12}), "TRC006")] == [
        "model.num_layers"
    ]
    assert find(lint_cfg(**{"cluster.num_nodes": 10**6}), "TRC006")
    assert not find(lint_cfg(**{"cluster.num_nodes": 1000}), "TRC006")


P10, P90 = "cluster.step_time_p10_ratio", "cluster.step_time_p90_ratio"


def test_step_time_band_ends_must_be_positive() -> None:
    found = find(lint_cfg(**{P10: 0.0, P90: -1.0}), "TRC006")
    assert [(d.key, d.message, d.fix, d.is_error) for d in found] == [
        (
            P10,
            f"{P10} must be positive (a ratio of measured / estimated step time), got (0.0)",
            f"set {P10} to the ratio `trainc calibrate` wrote (e.g. 0.95), or remove it",
            True,
        ),
        (
            P90,
            f"{P90} must be positive (a ratio of measured / estimated step time), got (-1.0)",
            f"set {P90} to the ratio `trainc calibrate` wrote (e.g. 1.05), or remove it",
            True,
        ),
    ]
    assert not find(lint_cfg(**{P10: 0.9, P90: 1.1}), "TRC006")


def test_step_time_band_p10_above_p90_is_an_error() -> None:
    [d] = find(lint_cfg(**{P10: 1.2, P90: 0.9}), "TRC006")
    assert d.is_error and d.key == P10 and d.related == (P90,)
    assert d.message == (
        "step_time_p10_ratio=1.2 is above step_time_p90_ratio=0.9; the band is p10 <= p90"
    )
    assert d.fix == (f"swap them ({P10}=0.9, {P90}=1.2) or re-run `trainc calibrate`")
    assert d.edits == {P10: 0.9, P90: 1.2}
    # the fix's values pass; an empty band (p10 == p90) is allowed
    assert not find(lint_cfg(**d.edits), "TRC006")
    assert not find(lint_cfg(**{P10: 1.0, P90: 1.0}), "TRC006")


def test_one_end_of_the_step_time_band_is_a_setting_without_effect() -> None:
    # the calibrated band needs both (trainc.compiler.estimate.band.step_time_band): the
    # kernel model's estimates fall back to the published-runs band, the seed model's to none
    [d] = find(lint_cfg(**{P10: 0.9}), "TRC329")
    assert d.severity.value == "warning" and d.key == P10 and d.related == (P90,)
    assert d.message == (
        f"{P10} is set but has no effect: the calibrated step-time band needs both ends and {P90} "
        "is not set, so the estimates carry the published-runs band instead "
        "(trainc/conf/step_time_band.yaml) and the planner ties layouts within its default "
        "10 % band"
    )
    assert d.fix == f"set {P90} too (`trainc calibrate` writes both), or remove {P10}"
    [d] = find(lint_cfg(**{P90: 1.1, "cluster.time_model": "seed"}), "TRC329")
    assert d.key == P90 and d.message == (
        f"{P90} is set but has no effect: the calibrated step-time band needs both ends and {P10} "
        "is not set, so the estimates carry no band instead (time_model seed has no "
        "published-runs band) and the planner ties layouts within its default 10 % band"
    )
    assert not find(lint_cfg(**{P10: 0.9, P90: 1.1}), "TRC329")
    assert not find(lint_cfg(), "TRC329")
