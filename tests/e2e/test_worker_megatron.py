"""The compiled layout is the layout that trains, and trains correctly (Megatron-Core on CPU/gloo).

Each case compiles a tiny spec (launch.device=cpu), launches the generated script, and checks:
(a) every step's loss and grad norm equal a one-process reference run of the same model and data
    (rtol 2e-4 on loss, 2e-3 on grad norm over the first 6 steps; 2e-3/2e-2 after: fp32
    reduction order differs between layouts and Adam amplifies it slowly);
(b) the loss falls over 24 steps (mean of the last 4 below 90 % of step 1);
(c) resume: the worker reloads its step-16 checkpoint and replays steps 17-24 to the same losses
    (rtol 1e-6) -- and, for the TP2xPP2 case, a second launch with --load does the same until
    SIGUSR1 (sent to the launch's process group) stops every rank at one step with a checkpoint;
(d) the groups parallel_state formed equal the plan's rank map (order tp-cp-ep-dp-pp).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.e2e import (
    base_spec,
    check_case,
    close,
    compile_case,
    launch,
    launch_and_signal,
    merge,
    references,
    steps,
)
from trainc.launch.worker.runtime import STOPPED_MARKER

MOE = {"num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 32}
MLA = {
    "multi_latent_attention": True,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_head_dim": 8,
    "qk_pos_emb_head_dim": 4,
    "v_head_dim": 8,
}

# name -> (world size, spec overrides, extra env)
CASES: dict[str, tuple[int, dict, dict]] = {
    "tp2": (2, {"parallel": {"tp": 2}}, {}),
    "tp2_sp": (2, {"parallel": {"tp": 2, "sequence_parallel": True}}, {}),
    "pp2": (2, {"parallel": {"pp": 2}}, {}),
    "pp2_vpp2": (2, {"parallel": {"pp": 2, "vpp": 2}}, {}),
    "dp2_distopt": (2, {"parallel": {"zero_stage": 1}}, {}),
    # Megatron-FSDP needs CUDA: on CPU the same math with the distributed optimizer (TRC383)
    "dp2_megatron_fsdp": (2, {"parallel": {"zero_stage": 3}}, {}),
    "cp2": (2, {"parallel": {"cp": 2}}, {}),
    "ep2_alltoall": (
        2,
        {"model": {**MOE, "moe_token_dispatcher_type": "alltoall"}, "parallel": {"ep": 2}},
        {},
    ),
    "ep2_allgather": (
        2,
        {"model": {**MOE, "moe_token_dispatcher_type": "allgather"}, "parallel": {"ep": 2}},
        {},
    ),
    "tp2_sp_ep2": (
        2,
        {"model": MOE, "parallel": {"tp": 2, "sequence_parallel": True, "ep": 2, "etp": 1}},
        {},
    ),
    # 6 layers + embedding + loss = 8 slots over pp=4 x vpp=2 (Megatron account_for_*): the
    # first chunk of rank 0 is the embedding alone and the last chunk of rank 3 the loss alone,
    # as in Llama 3 405B's 126 layers on pp=16 x vpp=8
    "pp4_vpp2": (
        4,
        {
            "model": {"num_layers": 6},
            "parallel": {
                "pp": 4,
                "vpp": 2,
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
            },
        },
        {},
    ),
    # a real preset, shrunk: same layout, tiny dims
    "tp2_pp2_shrink": (
        4,
        {
            "defaults": [{"model": "llama2-7b"}, "_self_"],
            "model": {
                "num_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "ffn_hidden_size": 11008,
                "vocab_size": 32000,
                "make_vocab_size_divisible_by": 128,
                "seq_length": 4096,
            },
            "parallel": {"tp": 2, "pp": 2, "sequence_parallel": True, "zero_stage": 1},
            "training": {"global_batch_size": 4},
            "launch": {"shrink": True},
        },
        {},
    ),
    "cp2_tp2": (4, {"parallel": {"cp": 2, "tp": 2, "sequence_parallel": True}}, {}),
    # multi-head latent attention (DeepSeek-V3-like: a query latent, a KV latent, rotary and
    # value heads of their own widths) split by tp with sequence parallelism; on CPU its core
    # attention is trainc's torch stand-in (Megatron-Core's local one takes one head width)
    "tp2_sp_mla": (2, {"model": MLA, "parallel": {"tp": 2, "sequence_parallel": True}}, {}),
    # without sequence parallelism the query-latent norm's gradient takes another path
    # (finalize_model_grads' qk_layernorm rule; cpu_compat mla_local_grads)
    "tp2_mla": (2, {"model": MLA, "parallel": {"tp": 2}}, {}),
    # Qwen3's per-head query / key norms split by tp (their gradients summed over TP by
    # finalize_model_grads' qk_layernorm rule)
    "tp2_qknorm": (2, {"model": {"qk_layernorm": True}, "parallel": {"tp": 2}}, {}),
    # recompute reruns attention inside autograd's backward (the CPU causal-mask patch)
    "tp2_sp_selective": (
        2,
        {"parallel": {"tp": 2, "sequence_parallel": True}, "training": {"recompute": "selective"}},
        {},
    ),
    "pp2_full_recompute": (
        2,
        {
            "parallel": {"pp": 2},
            "training": {
                "recompute": "full",
                "recompute_method": "block",
                "recompute_num_layers": 1,
            },
        },
        {},
    ),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("e2e")
    return {
        name: compile_case(tmp, name, merge(base_spec(name, world), over))
        for name, (world, over, _) in CASES.items()
    }


@pytest.fixture(scope="module")
def reference_logs(compiled) -> dict[str, str]:
    return references(list(compiled.values()))


@pytest.mark.parametrize("name", list(CASES))
def test_layout_trains_like_reference(name, compiled, reference_logs):
    out = compiled[name]
    log = launch(out, ["--resume-check", "16"], env=CASES[name][2])
    check_case(name, out, log, reference_logs[name])
    if name == "dp2_megatron_fsdp":  # the substitution is announced, not silent
        assert (
            "override: Megatron-FSDP needs CUDA: DistributedDataParallelConfig "
            "use_megatron_fsdp True -> False"
        ) in log, log
    if name == "pp2_vpp2":  # the plan must choose the safe p2p mode for interleaved PP=2
        assert "overlap_p2p_comm=True batch_p2p_comm=False" in log
    if name == "pp4_vpp2":  # the layers each rank built are the ones trainc estimated with
        import json

        from trainc.compiler.derive import stage_layer_indices

        plan = json.loads((out / "plan.json").read_text())
        par = plan["spec"]["parallel"]
        want = stage_layer_indices(
            plan["derived"]["layers_per_stage"],
            plan["derived"]["vpp"],
            par["account_for_embedding_in_pipeline_split"],
            par["account_for_loss_in_pipeline_split"],
        )
        got = {
            int(r): ast.literal_eval(b)
            for r, b in re.findall(r"pp rank (\d+) built layers (\[.*\])$", log, flags=re.M)
        }
        assert {r: [x for c in b for x in c] for r, b in got.items()} == dict(enumerate(want)), log
        assert got[0][0] == [] and got[3][-1] == []  # the embedding's and the loss's chunks
    if name.startswith("tp2_pp2_shrink"):
        # shrink printed; a real second launch resumes from step 16 to the same losses, and
        # SIGUSR1 to its process group (as Slurm signals a step before the time limit) makes all
        # four ranks save and stop at one step, through torchrun.sh (torchrun starts the
        # workers in sessions of their own; the script forwards the signal)
        assert "shrunk dims:" in log
        first = steps(log)
        # the layout record beside the shards (trainc run checks a resume against it)
        import json

        saved = json.loads((out / "checkpoints" / "iter_0000016" / "layout.json").read_text())
        assert (saved["tp"], saved["pp"], saved["sp"]) == (2, 2, True), saved
        (out / "checkpoints" / "latest").write_text("16\n")
        rc, log2 = launch_and_signal(
            out,
            ["--load", str(out / "checkpoints")],
            at_step=18,
            label=f"{name} (resume launch, SIGUSR1 at step 18)",
        )
        assert rc == 0, log2[-4000:]
        stopped = re.findall(r"SIGUSR1: stopping after step (\d+)", log2)
        assert len(stopped) == 1, log2[-4000:]
        n = int(stopped[0])
        second = steps(log2)
        assert 18 <= n < 24 and sorted(second) == list(range(17, n + 1)), log2[-4000:]
        for k in second:
            assert close(second[k]["loss"], first[k]["loss"], 1e-6)
        assert (out / "checkpoints" / STOPPED_MARKER).exists()
        assert (out / "checkpoints" / "latest").read_text().strip() == str(n)
    # every setting of plan.json's engines.megatron_core (= megatron_core.yaml) reached the objects
    assert re.search(r"cross-checked \d+ Megatron-Core settings with plan.json: all agree", log)
    assert "trainc-worker: done" in log


def test_attention_dropout_on_the_cpu_attention_stand_in(tmp_path, compiled):
    """Attention dropout reaches the CPU core-attention stand-in (context parallelism and MLA
    build on it): losses differ from the dropout-free run of the same layout, still fall, and the
    resume check replays them exactly (the TP RNG tracker's state is checkpointed)."""
    over = merge(CASES["cp2"][1], {"model": {"attention_dropout": 0.3}})
    out = compile_case(tmp_path, "cp2_dropout", merge(base_spec("cp2_dropout", 2), over))
    log = launch(out, ["--resume-check", "16"])
    got, plain = (
        steps(log),
        steps(
            (compiled["cp2"] / "launch.log").read_text()
            if (compiled["cp2"] / "launch.log").exists()
            else launch(compiled["cp2"])
        ),
    )
    assert sorted(got) == list(range(1, 25)), log[-4000:]
    assert any(not close(got[n]["loss"], plain[n]["loss"], 1e-4) for n in range(2, 25)), (
        "attention_dropout=0.3 left every loss equal to the dropout-free run"
    )
    assert sum(got[n]["loss"] for n in range(21, 25)) / 4 < 0.9 * got[1]["loss"]
    again = steps(log, resume=True)
    assert sorted(again) == list(range(17, 25))
    for n in again:
        assert close(again[n]["loss"], got[n]["loss"], 1e-6), (n, again[n], got[n])
