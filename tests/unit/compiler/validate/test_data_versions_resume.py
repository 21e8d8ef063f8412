"""The data path, versions and resume rules (TRC350-TRC357, TRC530-TRC538): per-engine verdicts,
exact values and fixes, the derived epoch counts, what reaches the artifacts, and the installed
versions check of ``trainc run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.emit import compile_dict, make_stubs, read_nul, run_script, write_files
from tests.support.kit import BASE, apply, find, lint_cfg, make
from trainc import known_versions as KV
from trainc.compiler.derive import derive, epoch_counts
from trainc.compiler.validate.checkpoint import layout_facts, resume_findings
from trainc.launch.host.local import version_problems

DS = {"engine": "deepspeed", "parallel.tp": 1, "parallel.pp": 1}
LM = {"launch.entrypoint": "megatron-lm", "launch.megatron_lm_path": "/opt/Megatron-LM"}


def _one(diags, rule, key=None):
    found = [d for d in find(diags, rule) if key is None or d.key == key]
    assert len(found) == 1, [(d.rule.id, d.key, d.message) for d in diags]
    return found[0]


# --- per engine -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", [{}, DS], ids=["megatron", "deepspeed"])
def test_tokenizer_vocab_is_an_error_for_both_engines(engine):
    d = _one(lint_cfg(**engine, **{"data.tokenizer_vocab_size": 32100}), "TRC351")
    assert d.is_error and d.edits == {"model.vocab_size": 32100}
    assert d.facts["padded_vocab_size"] == 32000 and "device-side assert" in d.message


def test_packed_padding_unit_follows_cp_and_sequence_parallelism():
    d = _one(
        lint_cfg(
            **{
                "data.packed": True,
                "parallel.cp": 2,
                "parallel.pp": 1,
                "parallel.tp": 4,
                "data.pad_to_multiple_of": 4,
            }
        ),
        "TRC352",
    )
    assert d.facts["required_multiple"] == 8 and d.edits == {"data.pad_to_multiple_of": 8}
    ok = lint_cfg(
        **{
            "data.packed": True,
            "parallel.cp": 2,
            "parallel.pp": 1,
            "parallel.tp": 4,
            "parallel.sequence_parallel": False,
            "data.pad_to_multiple_of": 4,
        }
    )
    assert not find(ok, "TRC352")


@pytest.mark.parametrize("engine", [{}, DS], ids=["megatron", "deepspeed"])
def test_packed_data_has_no_runner_on_either_engine(engine):
    assert _one(lint_cfg(**engine, **{"data.packed": True}), "TRC356").is_error


def test_mask_ignored_by_transformer_engine_is_megatron_lm_only():
    d = _one(lint_cfg(**LM, **{"data.reset_attention_mask": True}), "TRC353")
    assert d.is_error and d.facts["transformer_impl"] == "transformer_engine"
    # the trainc worker (either engine) drops the mask: TRC356, not TRC353
    for engine in ({}, DS):
        diags = lint_cfg(**engine, **{"data.reset_attention_mask": True})
        assert (
            not find(diags, "TRC353") and _one(diags, "TRC356").key == "data.reset_attention_mask"
        )


def test_blend_and_data_path_together():
    d = _one(lint_cfg(**{"data.paths": ["/d/a"], "launch.data_path": "/d/b"}), "TRC350")
    assert d.key == "data.paths" and d.edits == {"launch.data_path": None}


def test_epochs_are_derived_once_and_cp_does_not_change_them():
    base = {"data.num_tokens": 1024 * 10_000, "training.train_iters": 1000}
    s1 = make(**base)
    s2 = make(**base, **{"parallel.cp": 2, "parallel.pp": 1})
    assert epoch_counts(s1) == epoch_counts(s2) == (10_000, 625, 1.6)
    d = derive(s2)
    assert (d.samples_per_step, d.tokens_per_step, d.steps_per_epoch) == (16, 16 * 1024, 625)
    info = _one(lint_cfg(**base), "TRC357")
    assert info.severity.value == "info" and "1.6 epochs" in info.message


# --- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,verdict", [({}, None), (DS, "error")], ids=["megatron", "deepspeed"]
)
def test_deepspeed_torch_entry_applies_to_the_deepspeed_engine_only(engine, verdict):
    diags = lint_cfg(**engine, **{"launch.versions": {"deepspeed": "0.14.2", "torch": "2.4.0"}})
    found = [
        d for d in find(diags, "TRC530") if d.facts["entry"] == "deepspeed-torch-2.4-elastic-import"
    ]
    assert [d.severity.value for d in found] == ([verdict] if verdict else [])
    if found:
        assert found[0].edits == {"launch.versions.deepspeed": "0.14.4"}
        assert found[0].facts["link"].endswith("/5603")


H100 = {"cluster.gpu": "h100-80g"}


@pytest.mark.parametrize(
    "changes,found",
    [
        ({**H100}, True),  # tp 2 + sequence parallelism on H100: tp_comm_overlap on by default
        ({"training.tp_comm_overlap": True}, True),
        ({**H100, "training.tp_comm_overlap": False}, False),
        ({}, False),  # A100: off by default
    ],
    ids=["h100-default", "explicit", "off", "a100-default"],
)
def test_te_tp_comm_overlap_entry_follows_the_resolved_setting(changes, found):
    diags = lint_cfg(**changes, **{"launch.versions": {"transformer_engine": "2.1.0"}})
    got = find(diags, "TRC530")
    assert bool(got) == found, [(d.key, d.message) for d in got]
    if found:
        d = _one(diags, "TRC530")
        assert d.is_error and d.key == "launch.versions.transformer_engine"
        assert d.facts["entry"] == "te-2.0-tp-comm-overlap-wrong-wgrad"
        assert d.edits == {"launch.versions.transformer_engine": "2.2"}
        assert d.fix == "upgrade transformer_engine to 2.2 or later"


@pytest.mark.parametrize(
    "versions,key,fixed,severity",
    [
        (
            {"transformer_engine": "1.9.0", "flash_attn": "2.6.3"},
            "transformer_engine",
            "1.11",
            "error",
        ),
        (
            {"transformer_engine": "2.5.0", "flash_attn": "2.8.3"},
            "transformer_engine",
            "2.10",
            "warning",
        ),
        ({"nccl": "2.29.2"}, "nccl", "2.29.3", "error"),
    ],
    ids=["te-1.9-fa-2.6.3", "te-2.5-fa-2.8.3", "nccl-2.29.2"],
)
def test_known_bad_entries_name_the_key_and_the_fixed_release(versions, key, fixed, severity):
    d = _one(lint_cfg(**{"launch.versions": versions}), "TRC530")
    assert d.key == f"launch.versions.{key}" and d.severity.value == severity
    assert d.edits == {f"launch.versions.{key}": fixed} and fixed in d.fix


FSDP = {"engine": "fsdp", "parallel.tp": 1, "parallel.pp": 1}


def test_versions_of_an_fsdp_job_are_checked_without_an_engine_target():
    # engine=fsdp has no engine package release trainc targets (TRC532): the table still applies
    d = _one(lint_cfg(**FSDP, **{"launch.versions": {"torch": "2.6.0"}}), "TRC530")
    assert d.severity.value == "warning" and d.key == "launch.versions.torch"
    assert d.facts["entry"] == "torch-2.6-fsdp2-state-dict-load" and d.edits == {
        "launch.versions.torch": "2.7"
    }
    diags = lint_cfg(**FSDP, **{"launch.versions": {"torch": "2.7.0", "deepspeed": "0.14.0"}})
    assert not find(diags, "TRC530") and not find(diags, "TRC532")
    assert not find(lint_cfg(**{"launch.versions": {"torch": "2.6.0"}}), "TRC530")


def _entry(diags, entry):
    """The TRC530 findings of one known-bad entry."""
    return [d for d in find(diags, "TRC530") if d.facts["entry"] == entry]


def test_deepspeed_weights_only_entry_names_its_workaround_env():
    v = {"launch.versions": {"deepspeed": "0.15.4", "torch": "2.6.0"}}
    (d,) = _entry(lint_cfg(**DS, **v), "deepspeed-torch-2.6-weights-only-load")
    assert d.is_error and d.key == "launch.versions.deepspeed"
    assert d.edits == {"launch.versions.deepspeed": "0.16.0"}
    assert d.fix == (
        "upgrade deepspeed to 0.16.0 or later (or work around it: set "
        "launch.env.TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1)"
    )
    env = {"launch.env": {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}}
    entry = "deepspeed-torch-2.6-weights-only-load"
    assert not _entry(lint_cfg(**DS, **v, **env), entry)
    assert not _entry(
        lint_cfg(**DS, **{"launch.versions": {"deepspeed": "0.15.4", "torch": "2.5.1"}}), entry
    )


def test_nccl_aarch64_entry_needs_a_grace_gpu_profile():
    v = {"launch.versions": {"nccl": "2.28.9"}}
    d = _one(lint_cfg(**v, **{"cluster.gpu": "gb200", "cluster.gpus_per_node": 4}), "TRC530")
    assert d.severity.value == "warning" and d.facts["entry"] == "nccl-aarch64-weak-cas-proxy-hang"
    assert d.edits == {"launch.versions.nccl": "2.29.3"}
    assert not find(lint_cfg(**v, **H100), "TRC530")


def test_nccl_zero_byte_entry_needs_moe_alltoall():
    moe = {"model.num_experts": 8, "parallel.ep": 2, "launch.versions": {"nccl": "2.12.7"}}
    d = _one(lint_cfg(**moe), "TRC530")
    assert d.is_error and d.edits == {"launch.versions.nccl": "2.12.10"}
    assert not find(lint_cfg(**{"launch.versions": {"nccl": "2.12.7"}}), "TRC530")


def test_te_1_11_flash_attn_2_6_entry_needs_context_parallelism():
    v = {"launch.versions": {"transformer_engine": "1.11.0", "flash_attn": "2.6.3"}}
    assert not find(lint_cfg(**v), "TRC530")
    d = _one(lint_cfg(**v, **{"parallel.cp": 2, "parallel.pp": 1}), "TRC530")
    assert d.key == "launch.versions.flash_attn" and d.related == (
        "launch.versions.transformer_engine",
    )
    assert d.edits == {"launch.versions.transformer_engine": "1.12"}


def test_version_target_follows_the_engine():
    v = {"launch.versions": {"megatron_core": "0.14.0", "deepspeed": "0.16.0"}}
    assert [d.key for d in find(lint_cfg(**v), "TRC532")] == ["launch.versions.megatron_core"]
    assert [d.key for d in find(lint_cfg(**DS, **v), "TRC532")] == ["launch.versions.deepspeed"]


def test_table_is_well_formed_and_ranges_are_exact():
    ids = [e.id for e in KV.table()]
    assert len(ids) == len(set(ids)) >= 3
    assert all(
        e.link.startswith(("https://github.com/", "https://docs.nvidia.com/")) for e in KV.table()
    )
    assert KV.in_range((2, 7, 0), ">=2.7.0,<2.7.1") and not KV.in_range((2, 7, 1), ">=2.7.0,<2.7.1")
    assert KV.parse_version("2.19.3-1+cuda12.2") == (2, 19, 3)


def test_trainc_run_checks_the_installed_versions(tmp_path):
    res = compile_dict(
        tmp_path,
        apply(
            BASE,
            {
                "engine": "deepspeed",
                "parallel": {"zero_stage": 1},
                "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "a100-80g"},
            },
        ),
    )
    assert res.ok, [d.to_json() for d in res.diagnostics if d.is_error]
    out = write_files(tmp_path / "out", res.files)
    bad, warn = version_problems(str(out), {}, {"deepspeed": "0.14.0", "torch": "2.5.1"})
    assert len(bad) == 1 and "deepspeed-torch-2.4-elastic-import" in bad[0]
    # ZeRO-1 in bf16 (from plan.json) also meets the 0.13.2-0.16.5 inf-norm warning
    assert len(warn) == 1 and "deepspeed-0.13.2-inf-grad-norm-nan" in warn[0]
    assert version_problems(str(out), {}, {"deepspeed": "0.19.8", "torch": "2.13.0"}) == ([], [])


def test_trainc_run_reads_zero2_and_tp_comm_overlap_from_the_plan(tmp_path):
    ds = compile_dict(
        tmp_path,
        apply(BASE, {"engine": "deepspeed", "parallel": {"tp": 1, "pp": 1, "zero_stage": 2}}),
    )
    assert ds.ok, [d.to_json() for d in ds.diagnostics if d.is_error]
    out = write_files(tmp_path / "ds", ds.files)
    bad, _ = version_problems(str(out), {}, {"deepspeed": "0.18.2"})
    assert len(bad) == 1 and "deepspeed-0.17.6-zero2-wrong-gradients" in bad[0]
    assert version_problems(str(out), {}, {"deepspeed": "0.18.3"}) == ([], [])
    overlap = {"training": {**BASE["training"], "tp_comm_overlap": True}}
    lm = compile_dict(tmp_path, apply(BASE, overlap))
    assert lm.ok, [d.to_json() for d in lm.diagnostics if d.is_error]
    out = write_files(tmp_path / "lm", lm.files)
    bad, _ = version_problems(str(out), {}, {"transformer_engine": "2.1.0"})
    assert len(bad) == 1 and "te-2.0-tp-comm-overlap-wrong-wgrad" in bad[0] and "2.2" in bad[0]


# --- resume ---------------------------------------------------------------------------------


def test_resume_rules_depend_on_the_saved_format():
    now = layout_facts(make(), derive(make()))
    assert now["checkpoint_format"] == "trainc"
    dp_change = {"dp": 4, "checkpoint_format": "torch"}
    assert resume_findings(dp_change, now) == []  # legacy files: dp may change
    [f] = resume_findings({"dp": 4, "checkpoint_format": "trainc"}, now)
    assert (f.rule.id, f.key, f.saved, f.now) == ("TRC534", "parallel.dp", 4, 2)
    # torch_dist reshards the model; the distributed optimizer's default save (dp_reshardable)
    # only in dp: the tp change needs its state saved fully reshardable
    tp_change = {"tp": 8, "pp": 1, "checkpoint_format": "torch_dist"}
    assert now["distributed_optimizer"] is True
    assert [f.key for f in resume_findings(tp_change, now)] == ["parallel.tp", "parallel.pp"]
    assert resume_findings({**tp_change, "optim_fully_reshardable": True}, now) == []
    assert (
        resume_findings(
            {**tp_change, "distributed_optimizer": False}, {**now, "distributed_optimizer": False}
        )
        == []
    )


@pytest.mark.parametrize("engine", [{}, DS], ids=["megatron", "deepspeed"])
def test_deepspeed_zero_shards_bind_dp(engine):
    diags = lint_cfg(**engine, **{"resume.saved.dp": 4})
    keys = {d.key for d in find(diags, "TRC534")}
    assert keys == {"parallel.dp"}  # the trainc worker and ZeRO shards both keep dp


@pytest.mark.parametrize(("engine", "dp"), [({}, 4), (DS, 16)], ids=["megatron", "deepspeed"])
def test_the_dp_fix_brings_the_saved_world_back(engine, dp):
    """dp is derived: TRC534's fix for a dp change sets the node count that gives the saved dp
    (setting parallel.dp alone would be TRC102), and applying it leaves no error."""
    diags = lint_cfg(**engine, **{"resume.saved.dp": dp})
    [d] = find(diags, "TRC534")
    spec = make(**engine)
    world = dp * spec.parallel.tp * spec.parallel.pp * spec.parallel.cp
    assert world % spec.cluster.gpus_per_node == 0
    nodes = world // spec.cluster.gpus_per_node
    assert d.edits == {"cluster.num_nodes": nodes, "parallel.dp": dp}
    fixed = lint_cfg(**engine, **{"resume.saved.dp": dp}, **d.edits)
    assert [x.rule.id for x in fixed if x.is_error] == []


def test_the_dp_fix_without_a_whole_node_count_edits_nothing():
    [d] = find(lint_cfg(**DS, **{"resume.saved.dp": 4}), "TRC534")  # 4 GPUs, 8 per node
    assert d.edits == {} and "run on 4 GPUs as saved" in (d.fix or "")


def test_finetune_waives_schedule_and_optimizer_on_megatron_lm():
    saved = {"resume.saved.global_batch_size": 64, "resume.saved.optimizer": "sgd"}
    diags = lint_cfg(**LM, **saved)
    assert _one(diags, "TRC537").severity.value == "warning" and _one(diags, "TRC538").is_error
    ok = lint_cfg(**LM, **saved, **{"resume.finetune": True})
    assert not find(ok, "TRC537") and not find(ok, "TRC538")


# --- artifacts ------------------------------------------------------------------------------


def test_blend_and_resume_reach_pretrain_gpt(tmp_path):
    spec = apply(
        BASE,
        {
            "launch": {"entrypoint": "megatron-lm", "megatron_lm_path": "/opt/Megatron-LM"},
            "data": {"paths": ["0.7 /d/web", "0.3 /d/code"], "eod_mask_loss": True},
            "resume": {"load_dir": "/ckpt/base", "finetune": True},
        },
    )
    res = compile_dict(tmp_path, spec)
    assert res.ok, [d.to_json() for d in res.diagnostics if d.is_error]
    out = write_files(tmp_path / "out", res.files)
    bindir, log = make_stubs(tmp_path)
    r = run_script(out / "torchrun.sh", bindir, log, out)
    assert r.returncode == 0, r.stderr
    args = read_nul(log / "torchrun.0.args")
    i = args.index("--data-path")
    assert args[i + 1 : i + 5] == ["0.7", "/d/web", "0.3", "/d/code"]
    assert args[args.index("--load") + 1] == "/ckpt/base" and args.count("--load") == 1
    assert args[args.index("--ckpt-format") + 1] == "torch_dist"
    assert "--finetune" in args and "--eod-mask-loss" in args
    plan = json.loads((out / "plan.json").read_text())
    assert plan["derived"]["checkpoint_format"] == "torch_dist"


def test_shared_root_exists():
    assert Path(KV.TABLE).is_file()


def test_report_and_plan_show_the_epoch_count(tmp_path):
    spec = apply(
        BASE,
        {
            "data": {"num_samples": 10_000},
            "training": {"micro_batch_size": 1, "global_batch_size": 16, "train_iters": 1250},
        },
    )
    res = compile_dict(tmp_path, spec)
    assert res.ok
    d = res.plan["derived"]
    assert (d["dataset_samples"], d["steps_per_epoch"], d["epochs"]) == (10_000, 625, 2.0)
    assert "| steps per epoch | 625 (2 epochs of 10,000 samples) |" in res.files["report.md"]


def test_inert_data_settings_warn():
    [d] = find(lint_cfg(**{"data.pad_to_multiple_of": 8}), "TRC329")
    assert d.key == "data.pad_to_multiple_of" and d.severity.value == "warning"
    # a blend makes launch.data_split count
    assert not find(lint_cfg(**{"data.paths": ["/d/a"], "launch.data_split": "98,1,1"}), "TRC329")


def test_kv_channels_with_mla_warns():
    """MLA sizes its heads from qk_head_dim / qk_pos_emb_head_dim / v_head_dim; a written
    kv_channels reaches no engine (TRC329), the filled default (hidden / heads) is silent."""
    mla = {
        "model.multi_latent_attention": True,
        "model.q_lora_rank": 64,
        "model.kv_lora_rank": 32,
        "model.qk_head_dim": 16,
        "model.qk_pos_emb_head_dim": 8,
        "model.v_head_dim": 16,
    }
    assert not [d for d in find(lint_cfg(**mla), "TRC329") if d.key == "model.kv_channels"]
    [d] = [
        d
        for d in find(lint_cfg(**mla, **{"model.kv_channels": 24}), "TRC329")
        if d.key == "model.kv_channels"
    ]
    assert d.message == (
        "model.kv_channels is set but has no effect: multi_latent_attention is "
        "true (head widths are qk_head_dim + qk_pos_emb_head_dim and v_head_dim)"
    )


FSDP = {"engine": "fsdp", "parallel.pp": 1}


def test_fsdp_writes_dcp_which_reshards():
    s = make(**FSDP)
    assert derive(s).checkpoint_format == "dcp"
    assert not find(lint_cfg(**FSDP, **{"resume.saved.tp": 1, "resume.saved.dp": 8}), "TRC534")
    # global shapes still bind
    assert find(lint_cfg(**FSDP, **{"resume.saved.num_layers": 4}), "TRC536")


def test_torchtitan_gets_no_data_or_resume_keys():
    titan = {**FSDP, "launch.entrypoint": "torchtitan"}
    diags = lint_cfg(**titan, **{"data.eod_mask_loss": True, "resume.load_dir": "/ckpt"})
    assert _one(diags, "TRC356").key == "data.eod_mask_loss"
    assert _one(diags, "TRC533").key == "resume.load_dir"


def test_eod_options_with_real_data_warn_about_the_end_of_document_id():
    """TRC358 (a fresh-user trial): with data.paths or launch.data_path, the options that look
    for the end-of-document token compare with the NullTokenizer's id, vocab_size - 1; without
    real data (mock data, whose documents end with that id) or without the options: nothing."""
    base = {"data.paths": ["/d/web"]}
    diag = _one(
        lint_cfg(**base, **{"data.eod_mask_loss": True, "data.reset_position_ids": True}), "TRC358"
    )
    assert not diag.is_error and diag.key == "data.eod_mask_loss"
    vocab = make().model.vocab_size
    assert f"vocab_size - 1 = {vocab - 1}" in diag.message
    assert diag.edits == {"data.eod_mask_loss": False, "data.reset_position_ids": False}
    assert _one(
        lint_cfg(**{"launch.data_path": "/d/web", "data.reset_position_ids": True}), "TRC358"
    )
    assert not find(lint_cfg(**{"data.eod_mask_loss": True}), "TRC358")
    assert not find(lint_cfg(**base), "TRC358")


# --- what each format reshards (trainc/conf/reshard.yaml) ------------------------------------
PP4 = {
    "resume.saved.pp": 4,
    "resume.saved.ep": 1,
    "parallel.pp": 1,
    "parallel.ep": 4,
    "model.num_experts": 8,
    "model.moe_router_topk": 2,
}


def test_torch_dist_with_the_distributed_optimizer_reshards_only_dp():
    """A PP4 checkpoint resumed as EP4 with the distributed optimizer: its state was saved
    dp_reshardable (Megatron-LM's default), which reshards only in dp."""
    diags = lint_cfg(**LM, **PP4, **{"parallel.zero_stage": 1})
    found = {d.key: d for d in find(diags, "TRC534")}
    assert set(found) == {"parallel.pp", "parallel.ep"}
    fix = found["parallel.pp"].fix or ""
    assert "resume.saved.optim_fully_reshardable=true" in fix
    assert "--dist-ckpt-optim-fully-reshardable" in fix and "resume.finetune=true" in fix
    assert found["parallel.pp"].edits == {"parallel.pp": 4}
    # saved fully reshardable, or weights only, or no distributed optimizer: it loads
    for ok in (
        {"resume.saved.optim_fully_reshardable": True},
        {"resume.finetune": True},
        {"parallel.zero_stage": 0},
    ):
        assert not find(lint_cfg(**LM, **PP4, **{"parallel.zero_stage": 1, **ok}), "TRC534"), ok
    # a dp change is what dp_reshardable allows
    assert not find(lint_cfg(**LM, **{"parallel.zero_stage": 1, "resume.saved.dp": 2}), "TRC534")


def test_fully_reshardable_save_is_emitted_as_the_megatron_lm_flag(tmp_path):
    lm = {"entrypoint": "megatron-lm", "megatron_lm_path": "/opt/Megatron-LM"}
    for on in (True, False):
        spec = apply(
            BASE,
            {
                "launch": lm,
                "parallel": {"zero_stage": 1},
                "resume": {"optim_fully_reshardable": on},
            },
        )
        res = compile_dict(tmp_path, spec)
        assert res.ok, [d.to_json() for d in res.diagnostics if d.is_error]
        args = res.files["megatron_args.txt"].split()
        assert ("--dist-ckpt-optim-fully-reshardable" in args) is on
    # the trainc worker writes its own files: the key is not read there
    assert (
        _one(lint_cfg(**{"resume.optim_fully_reshardable": True}), "TRC533").key
        == "resume.optim_fully_reshardable"
    )


def test_deepspeed_zero0_keeps_the_whole_optimizer_state_so_dp_may_change():
    """ZeRO-0 writes no zero_pp_rank optimizer shards (ds_to_universal has none to read): a dp
    change loads the native checkpoint; ZeRO 1-3 need a universal checkpoint."""
    assert not find(lint_cfg(**DS, **{"parallel.zero_stage": 0, "resume.saved.dp": 4}), "TRC534")
    [d] = find(lint_cfg(**DS, **{"parallel.zero_stage": 1, "resume.saved.dp": 4}), "TRC534")
    assert "ds_to_universal.py" in (d.fix or "") and "load_universal" in (d.fix or "")


@pytest.mark.parametrize("stage", [0, 1, 3])
def test_deepspeed_tp_change_is_refused_without_a_universal_checkpoint_fix(stage):
    """ds_to_universal merges tp slices only by the model's UNIVERSAL_CHECKPOINT_INFO patterns
    (deepspeedai/DeepSpeed#6503): a tp change is TRC534 at every ZeRO stage, and its fix is the
    saved tp, not a universal checkpoint; a pp change at the same dp still loads."""
    ds = {**DS, "parallel.zero_stage": stage, "cluster.gpus_per_node": 8}
    [d] = find(lint_cfg(**{**ds, "parallel.tp": 2, "resume.saved.tp": 1}), "TRC534")
    assert d.key == "parallel.tp" and d.edits == {"parallel.tp": 1}
    assert "universal" not in (d.fix or "") and "DeepSpeed#6503" in d.message
    assert not find(lint_cfg(**{**ds, "parallel.pp": 2, "resume.saved.pp": 1}), "TRC534")


def test_a_15t_token_budget_is_accepted_and_counted_in_samples():
    """data.num_tokens up to 1e15: a 15T-token run (Llama 3, arXiv:2407.21783) lints clean and
    is counted as floor(tokens / seq_length) samples; 2e15 is still refused."""
    spec = make(**{"data.num_tokens": 15 * 10**12})
    diags = lint_cfg(**{"data.num_tokens": 15 * 10**12})
    assert not find(diags, "TRC006")
    samples, _, _ = epoch_counts(spec)
    assert samples == 15 * 10**12 // spec.model.seq_length
    [d] = find(lint_cfg(**{"data.num_tokens": 2 * 10**15}), "TRC006")
    assert d.key == "data.num_tokens" and "1e+15" in d.message
