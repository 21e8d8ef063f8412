"""The known-bad entries that need a spec setting beyond the engine (NVLS GPUs, several nodes,
Blackwell, ZeRO-1/2 in bf16, DeepSpeed pipelines, MoE layouts, MTP with TP): a spec with the
bad version and the setting gets the entry, the fix version or the spec without the setting does
not; and the container table: a known ``launch.container_image`` supplies the versions
``launch.versions`` leaves out, an explicit entry wins and a different one is TRC539."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kit import find, lint_cfg
from trainc import known_versions as KV

DS = {"engine": "deepspeed", "parallel.tp": 1, "parallel.pp": 1}
MOE = {"model.num_experts": 8, "model.moe_router_topk": 2, "parallel.tp": 1}
FP8 = {"training.fp8_format": "hybrid", "cluster.gpu": "h100-80g"}
PT2405 = "nvcr.io/nvidia/pytorch:24.05-py3"


def _entry(diags: list[Any], entry: str) -> list[Any]:
    return [d for d in find(diags, "TRC530") if d.facts["entry"] == entry]


# entry -> (component, bad version, fixed version, the setting, the spec without it)
CASES: dict[str, tuple[str, str, str, dict[str, Any], dict[str, Any]]] = {
    "nccl-2.17-nvls-hang": (
        "nccl",
        "2.17.1",
        "2.18.1",
        {"cluster.gpu": "h100-80g"},
        {"cluster.gpu": "a100-80g"},
    ),
    "nccl-2.18.1-tree-ll128-data-corruption": (
        "nccl",
        "2.18.1",
        "2.18.3",
        {"cluster.num_nodes": 2},
        {"cluster.num_nodes": 1},
    ),
    "cuda-blackwell-below-12.8": (
        "cuda",
        "12.6",
        "12.8",
        {"cluster.gpu": "b200"},
        {"cluster.gpu": "h100-80g"},
    ),
    "deepspeed-0.13.2-inf-grad-norm-nan": (
        "deepspeed",
        "0.14.0",
        "0.16.6",
        {**DS, "parallel.zero_stage": 1, "training.precision": "bf16"},
        {**DS, "parallel.zero_stage": 3, "training.precision": "bf16"},
    ),
    "deepspeed-0.18.3-pipeline-gas-rescaled": (
        "deepspeed",
        "0.18.3",
        "0.19.3",
        {**DS, "parallel.pp": 2},
        {**DS, "parallel.pp": 1},
    ),
    "mcore-0.11-moe-dense-hybrid-pp-hang": (
        "megatron_core",
        "0.11.0",
        "0.12.0",
        {**MOE, "parallel.pp": 2, "model.moe_first_k_dense_layers": 4},
        {**MOE, "parallel.pp": 2, "model.moe_first_k_dense_layers": 2},
    ),
    "mcore-0.11-aux-loss-with-expert-bias": (
        "megatron_core",
        "0.12.0",
        "0.13.0",
        {
            **MOE,
            "model.moe_aux_loss_coeff": 0.01,
            "model.moe_router_enable_expert_bias": True,
            "model.moe_router_score_function": "sigmoid",
        },
        {
            **MOE,
            "model.moe_aux_loss_coeff": 0.0,
            "model.moe_router_enable_expert_bias": True,
            "model.moe_router_score_function": "sigmoid",
        },
    ),
    "mcore-0.13-mtp-tp-convergence": (
        "megatron_core",
        "0.13.1",
        "0.14.0",
        {"model.mtp_num_layers": 1, "parallel.tp": 2},
        {"model.mtp_num_layers": 1, "parallel.tp": 1},
    ),
    "te-below-2.2-fp8-tensorwise": (
        "transformer_engine",
        "2.1",
        "2.2",
        {**FP8, "training.fp8_recipe": "tensorwise"},
        {**FP8, "training.fp8_recipe": "delayed"},
    ),
    "te-below-2.3-fp8-blockwise": (
        "transformer_engine",
        "2.2",
        "2.3",
        {**FP8, "training.fp8_recipe": "blockwise"},
        {**FP8, "training.fp8_recipe": "delayed"},
    ),
    "te-below-2.1-fp8-mxfp8": (
        "transformer_engine",
        "2.0",
        "2.1",
        {**FP8, "cluster.gpu": "b200", "training.fp8_recipe": "mxfp8"},
        {**FP8, "cluster.gpu": "b200", "training.fp8_recipe": "delayed"},
    ),
    "te-below-2.7-fp4-nvfp4": (
        "transformer_engine",
        "2.6",
        "2.7",
        {"cluster.gpu": "b200", "training.fp4_format": "e2m1"},
        {"cluster.gpu": "b200", "training.fp4_format": "none"},
    ),
    "te-below-1.7-moe-fp8": ("transformer_engine", "1.6", "1.7", {**MOE, **FP8}, MOE),
    "te-below-1.11-moe-fp8-grouped-gemm": (
        "transformer_engine",
        "1.9",
        "1.11",
        {**MOE, **FP8},
        FP8,
    ),
    "te-below-1.10-cp-comm-type-ignored": (
        "transformer_engine",
        "1.9",
        "1.10",
        {"parallel.cp": 2, "parallel.cp_comm_type": "a2a"},
        {"parallel.cp": 2, "parallel.cp_comm_type": "p2p"},
    ),
    "deepspeed-0.15.2-offload-grad-accum-norm": (
        "deepspeed",
        "0.16.0",
        "0.19.0",
        {
            **DS,
            "parallel.zero_stage": 2,
            "training.offload_optimizer": "cpu",
            "training.global_batch_size": 32,
        },
        {
            **DS,
            "parallel.zero_stage": 2,
            "training.offload_optimizer": "cpu",
            "training.global_batch_size": 8,
        },
    ),
    "mcore-moe-ep1-etp-not-tp-grad-reduction": (
        "megatron_core",
        "0.16.1",
        "0.19.0",
        {**MOE, "parallel.ep": 1, "parallel.etp": 2},
        {**MOE, "parallel.ep": 1, "parallel.etp": 1},
    ),
    "te-1.13-sequence-parallel-norm-grads": (
        "transformer_engine",
        "2.0",
        "2.1",
        {"parallel.tp": 2, "parallel.sequence_parallel": True},
        {"parallel.tp": 2, "parallel.sequence_parallel": False},
    ),
    "nccl-2.18-nvls-topology-search-crash": (
        "nccl",
        "2.18.3",
        "2.18.5",
        {"cluster.gpu": "h100-80g", "cluster.num_nodes": 2},
        {"cluster.gpu": "h100-80g", "cluster.num_nodes": 1},
    ),
}


@pytest.mark.parametrize("entry", CASES, ids=list(CASES))
def test_entry_needs_its_version_and_its_setting(entry: str) -> None:
    comp, bad, fixed, setting, without = CASES[entry]
    (d,) = _entry(lint_cfg(**setting, **{"launch.versions": {comp: bad}}), entry)
    e = next(x for x in KV.table() if x.id == entry)
    assert d.key == f"launch.versions.{comp}" and d.facts["link"] == e.link
    assert d.severity.value == e.severity
    assert d.edits == {f"launch.versions.{comp}": e.fixed_in[comp]}
    assert _entry(lint_cfg(**setting, **{"launch.versions": {comp: fixed}}), entry) == []
    assert _entry(lint_cfg(**without, **{"launch.versions": {comp: bad}}), entry) == []


def test_nvls_workaround_env_silences_the_entry() -> None:
    v = {"cluster.gpu": "h100-80g", "launch.versions": {"nccl": "2.17.1"}}
    assert _entry(lint_cfg(**v), "nccl-2.17-nvls-hang")
    assert not _entry(
        lint_cfg(**v, **{"launch.env": {"NCCL_NVLS_ENABLE": "0"}}), "nccl-2.17-nvls-hang"
    )
    # one GPU per node: no NVSwitch collective, nothing to warn about
    assert not _entry(
        lint_cfg(**v, **{"cluster.gpus_per_node": 1, "cluster.num_nodes": 8}), "nccl-2.17-nvls-hang"
    )


def _feats(**kw: Any) -> frozenset[str]:
    args: dict[str, Any] = dict(
        engine="megatron",
        entrypoint="trainc",
        device="cuda",
        ep=1,
        num_experts=None,
        dispatcher="alltoall",
        cp=1,
        fp8=False,
        zero_stage=0,
        tp_comm_overlap=False,
        gpu="h100-80g",
    )
    args.update(kw)
    return KV.job_features(**args)


def test_new_features_follow_their_settings() -> None:
    assert "nvls" in _feats(gpus_per_node=8) and "nvls" not in _feats(gpus_per_node=1)
    assert "nvls" not in _feats(gpus_per_node=8, gpu="a100-80g")
    assert "nvls" not in _feats(gpus_per_node=8, gpu="h800")
    assert "multinode" in _feats(num_nodes=2) and "multinode" not in _feats(num_nodes=1)
    assert "multinode" not in _feats(num_nodes=2, device="cpu")
    assert {"blackwell", "grace"} <= _feats(gpu="gb200") and "blackwell" in _feats(gpu="b200")
    assert "blackwell" not in _feats(gpu="h200")
    assert "fp16" in _feats(precision="fp16") and "bf16" in _feats(precision="bf16")
    assert not {"fp16", "bf16"} & _feats(precision="fp32")
    assert {"zero1_2"} <= _feats(engine="deepspeed", zero_stage=1)
    assert "zero1_2" not in _feats(engine="deepspeed", zero_stage=3)
    assert "zero1_2" not in _feats(engine="megatron", zero_stage=1)
    assert "pp" in _feats(pp=2) and "pp" not in _feats(pp=1)
    moe = dict(num_experts=8, pp=2)
    assert "moe_dense_pp" in _feats(**moe, moe_dense_stage=True)
    assert "moe_dense_pp" not in _feats(**{**moe, "pp": 1}, moe_dense_stage=True)
    assert "moe_dense_pp" not in _feats(engine="deepspeed", **moe, moe_dense_stage=True)
    assert "moe_aux_bias" in _feats(num_experts=8, moe_aux_bias=True)
    assert "moe_aux_bias" not in _feats(moe_aux_bias=True)
    assert "mtp_tp" in _feats(mtp=True, tp=2) and "mtp_tp" not in _feats(mtp=True, tp=1)
    assert "moe" in _feats(num_experts=8) and "moe" not in _feats()
    assert "fp4" in _feats(fp4=True) and "fp4" not in _feats()
    assert "fp8_blockwise" in _feats(fp8=True, fp8_recipe="blockwise")
    assert "fp8_blockwise" not in _feats(fp8=False, fp8_recipe="blockwise")
    assert "fp8_mxfp8" not in _feats(engine="fsdp", fp8=True, fp8_recipe="mxfp8")
    assert "fp8_delayed" not in _feats(fp8=True, fp8_recipe="delayed")
    assert "cp_not_p2p" in _feats(cp=2, cp_comm_type="all_gather")
    assert "cp_not_p2p" not in _feats(cp=2) and "cp_not_p2p" not in _feats(cp_comm_type="a2a")
    assert "offload_optimizer" in _feats(engine="deepspeed", offload_optimizer=True)
    assert "offload_optimizer" not in _feats(offload_optimizer=True)
    assert "grad_accum" in _feats(num_microbatches=2) and "grad_accum" not in _feats()
    assert "sequence_parallel" in _feats(sequence_parallel=True, tp=2)
    assert "sequence_parallel" not in _feats(sequence_parallel=True, tp=1)
    assert "sequence_parallel" not in _feats(engine="fsdp", sequence_parallel=True, tp=2)
    assert "moe_ep1_etp" in _feats(num_experts=8, tp=1, etp=4)
    assert "moe_ep1_etp" not in _feats(num_experts=8, tp=2)  # etp defaults to tp
    assert "moe_ep1_etp" not in _feats(num_experts=8, tp=1, etp=4, ep=4)
    assert "moe_ep1_etp" not in _feats(tp=1, etp=4)
    assert "moe_ep1_etp" not in _feats(engine="fsdp", num_experts=8, tp=1, etp=4)
    everything = _feats(
        gpu="gb200",
        num_nodes=2,
        gpus_per_node=4,
        precision="fp16",
        pp=2,
        tp=2,
        num_experts=8,
        ep=2,
        moe_dense_stage=True,
        moe_aux_bias=True,
        mtp=True,
        fp8=True,
        fp8_recipe="mxfp8",
        fp4=True,
        cp=2,
        cp_comm_type="a2a",
        num_microbatches=4,
        sequence_parallel=True,
        etp=4,
    )
    assert everything <= KV.FEATURES


@pytest.mark.parametrize(
    "args,want",
    [
        ((8, 2, 1, 1, 4), True),  # layers 0-3 dense, all on rank 0
        ((8, 2, 1, 1, 3), False),  # rank 0 holds MoE layer 3
        ((8, 2, 2, 1, 3), False),  # vpp 2: rank 0 holds chunks 0-1 and 4-5
        ((8, 2, 2, 1, 4), False),  # vpp 2: rank 1 holds 2-3 (dense) and 6-7 (MoE)
        ((8, 4, 1, 4, 0), True),  # freq 4: MoE layers 0 and 4, ranks 1 and 3 have none
        ((8, 2, 1, 2, 0), False),  # freq 2: every rank of 4 layers holds one
        ((8, 1, 1, 1, 4), False),  # no pipeline
        # the derived stage sizes, not an even split
        ((8, 2, 1, 1, 2, (2, 6)), True),  # rank 0 holds layers 0-1, both dense
        ((8, 2, 1, 1, 2, (4, 4)), False),  # rank 0 holds MoE layers 2-3
    ],
)
def test_moe_stage_without_experts(args: tuple[Any, ...], want: bool) -> None:
    assert KV.moe_stage_without_experts(*args) is want


def test_moe_aux_bias_needs_an_aux_loss_and_bias_or_groups() -> None:
    kw: dict[str, Any] = dict(
        num_experts=8,
        aux_loss_coeff=1e-3,
        load_balancing="seq_aux_loss",
        expert_bias=True,
        num_groups=None,
    )
    assert KV.moe_aux_bias_used(**kw)
    assert KV.moe_aux_bias_used(**{**kw, "expert_bias": False, "num_groups": 8})
    assert not KV.moe_aux_bias_used(**{**kw, "expert_bias": False})
    assert not KV.moe_aux_bias_used(**{**kw, "aux_loss_coeff": 0.0})
    assert not KV.moe_aux_bias_used(**{**kw, "load_balancing": "none"})
    assert not KV.moe_aux_bias_used(**{**kw, "num_experts": None})


# --- containers ------------------------------------------------------------------------------


def test_container_table_is_well_formed_and_every_image_is_found() -> None:
    images = KV.container_table()
    assert len(images) >= 14 and len({e.image for e in images}) == len(images)
    for e in images:
        assert KV.image_versions(e.image) == e
        assert e.versions and set(e.versions) <= set(KV.COMPONENTS)
        assert e.source.startswith("https://docs.nvidia.com/")
    assert KV.image_versions(PT2405).versions == {"torch": "2.4.0a0+07cecf4168"}  # type: ignore
    assert KV.parse_version(KV.image_versions(PT2405).versions["torch"]) == (2, 4, 0)  # type: ignore


@pytest.mark.parametrize(
    "ref, known",
    [
        # one image, however it is referenced: the 24.05 entry
        ("nvcr.io#nvidia/pytorch:24.05-py3", True),
        ("docker://nvcr.io/nvidia/pytorch:24.05-py3", True),
        ("nvcr.io/nvidia/pytorch:24.05-py3@sha256:" + "0" * 64, True),
        # unknown tags, no tag, no image: nothing supplied
        ("nvcr.io/nvidia/pytorch:24.06-py3", False),
        ("nvcr.io/nvidia/pytorch", False),
        ("ghcr.io/acme/trainc:0.1", False),
        ("", False),
        (None, False),
    ],
)
def test_image_references_are_normalized(ref: str | None, known: bool) -> None:
    want = KV.image_versions(PT2405) if known else None
    assert want is None or want.image == PT2405
    assert KV.image_versions(ref) == want


def test_image_supplies_torch_for_a_known_bad_combination() -> None:
    v = {**DS, "launch.container_image": PT2405, "launch.versions": {"deepspeed": "0.14.2"}}
    (d,) = _entry(lint_cfg(**v), "deepspeed-torch-2.4-elastic-import")
    assert d.is_error and d.key == "launch.versions.deepspeed"
    assert d.related == ("launch.container_image",)
    assert "(versions from torch of launch.container_image)" in d.message
    assert "torch 2.4.0a0+07cecf4168" in d.message
    assert d.edits == {"launch.versions.deepspeed": "0.14.4"}
    # another tag, or no image: torch unknown, the entry is not checked
    for image in ("nvcr.io/nvidia/pytorch:24.03-py3", None):
        other = {**v, "launch.container_image": image}
        assert not _entry(lint_cfg(**other), "deepspeed-torch-2.4-elastic-import")
    assert not find(lint_cfg(**v), "TRC539")


def test_entry_keyed_on_an_image_component_names_the_image() -> None:
    v = {"launch.container_image": "nvcr.io/nvidia/nemo:24.05"}
    (d,) = find(lint_cfg(**v), "TRC532")
    assert d.key == "launch.container_image" and d.edits == {}
    assert d.message.startswith("megatron_core of launch.container_image is 0.7.0")


def test_explicit_version_wins_over_the_image_and_the_conflict_is_a_warning() -> None:
    v = {
        **DS,
        "launch.container_image": PT2405,
        "launch.versions": {"deepspeed": "0.15.4", "torch": "2.6.0"},
    }
    diags = lint_cfg(**v)
    (w,) = find(diags, "TRC539")
    assert w.severity.value == "warning" and w.key == "launch.versions.torch"
    assert w.related == ("launch.container_image",)
    assert w.facts == {"image": PT2405, "shipped": "2.4.0a0+07cecf4168", "given": "2.6.0"}
    assert "the checks use launch.versions.torch = 2.6.0" in w.message
    # the explicit torch 2.6.0 is the one checked: the weights_only entry (torch >= 2.6) applies
    assert _entry(diags, "deepspeed-torch-2.6-weights-only-load")
    # the same release as the image (local version and pre-release tags aside) is no conflict
    same = {**v, "launch.versions": {"deepspeed": "0.15.4", "torch": "2.4.0"}}
    assert not find(lint_cfg(**same), "TRC539")


def test_trainc_run_reads_the_new_features_from_the_plan(tmp_path: Any) -> None:
    """``trainc run`` builds the same features from plan.json: the offload + accumulation entry
    for DeepSpeed, the NVLS entry for an H100 node, the MoE dense-stage entry for Megatron."""
    from tests.support.emit import compile_dict, write_files
    from tests.support.kit import BASE, apply
    from trainc.launch.host.local import version_problems

    ds = compile_dict(
        tmp_path,
        apply(
            BASE,
            {
                "engine": "deepspeed",
                "parallel": {"tp": 1, "pp": 1, "zero_stage": 2},
                "training": {
                    **BASE["training"],
                    "offload_optimizer": "cpu",
                    "global_batch_size": 32,
                },
            },
        ),
    )
    assert ds.ok, [d.to_json() for d in ds.diagnostics if d.is_error]
    out = write_files(tmp_path / "ds", ds.files)
    _, warn = version_problems(str(out), {}, {"deepspeed": "0.18.4"})
    assert [w for w in warn if "deepspeed-0.15.2-offload-grad-accum-norm" in w]
    assert version_problems(str(out), {}, {"deepspeed": "0.19.0"}) == ([], [])
    moe = {
        "model": {
            **BASE["model"],
            "num_experts": 8,
            "moe_router_topk": 2,
            "moe_first_k_dense_layers": 4,
        },
        "parallel": {"tp": 1, "pp": 2},
        "cluster": {**BASE["cluster"], "gpu": "h100-80g"},
    }
    lm = compile_dict(tmp_path, apply(BASE, moe))
    assert lm.ok, [d.to_json() for d in lm.diagnostics if d.is_error]
    out = write_files(tmp_path / "lm", lm.files)
    bad, _ = version_problems(str(out), {}, {"megatron_core": "0.11.0"})
    assert len(bad) == 1 and "mcore-0.11-moe-dense-hybrid-pp-hang" in bad[0]
    _, warn = version_problems(str(out), {}, {"nccl": "2.17.1"})
    assert len(warn) == 1 and "nccl-2.17-nvls-hang" in warn[0]
    sp = compile_dict(tmp_path, apply(BASE, {"parallel": {"tp": 2, "sequence_parallel": True}}))
    assert sp.ok, [d.to_json() for d in sp.diagnostics if d.is_error]
    out = write_files(tmp_path / "sp", sp.files)
    bad, _ = version_problems(str(out), {}, {"transformer_engine": "2.0.0"})
    assert len(bad) == 1 and "te-1.13-sequence-parallel-norm-grads" in bad[0]
    assert version_problems(str(out), {}, {"transformer_engine": "2.1.0"}) == ([], [])
    fold = {**moe, "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 2}}
    mf = compile_dict(tmp_path, apply(BASE, fold))
    assert mf.ok, [d.to_json() for d in mf.diagnostics if d.is_error]
    out = write_files(tmp_path / "fold", mf.files)
    bad, _ = version_problems(str(out), {}, {"megatron_core": "0.16.1"})
    assert len(bad) == 1 and "mcore-moe-ep1-etp-not-tp-grad-reduction" in bad[0]
    assert version_problems(str(out), {"NCCL_NVLS_ENABLE": "0"}, {"nccl": "2.17.1"}) == ([], [])
