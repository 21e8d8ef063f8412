"""The one converter of published-runs rows into specs (trainc/calibrate/published.py), used by
``trainc calibrate``, bench/fidelity.py and bench/planner_fidelity.py: precision from the notes,
Megatron-Bridge's layer splits, the architectures of trainc/conf/published_models.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainc.calibrate import runs_from_csv
from trainc.calibrate.published import (
    load_rows,
    model_key,
    precision_of,
    published_models,
    row_to_spec_reason,
)
from trainc.compiler.load import load_spec

#: A published row (the table's columns); tests change what they need.
ROW = {
    "source": "NVIDIA Megatron-Bridge performance summary",
    "model": "LLAMA3_8B",
    "params_B": "8",
    "layers": "",
    "hidden": "",
    "heads": "",
    "kv_heads": "",
    "ffn_hidden": "",
    "vocab": "",
    "seq_len": "8192",
    "experts": "",
    "topk": "",
    "gpus": "8",
    "gpu_type": "DGX-H100",
    "tp": "1",
    "pp": "1",
    "vpp": "",
    "cp": "1",
    "ep": "",
    "dp": "8",
    "zero_stage": "",
    "micro_batch": "1",
    "global_batch": "128",
    "recompute": "",
    "measured_tflops_per_gpu": "700",
    "mfu_pct": "",
    "notes": "precision=FP8-CS",
}


def build(**changes: str) -> dict[str, Any]:
    spec, why = row_to_spec_reason({**ROW, **changes})
    assert spec is not None, why
    return spec


def loads(spec: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_spec(path)
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics if d.is_error]


@pytest.mark.parametrize(
    "notes,gpu,keys",
    [
        ("precision=BF16", "DGX-H100", {}),
        ("precision=FP8", "DGX-H100", {"fp8_format": "hybrid", "fp8_recipe": "delayed"}),
        ("precision=FP8-CS", "DGX-H100", {"fp8_format": "hybrid", "fp8_recipe": "tensorwise"}),
        (
            "precision not stated (FP8 variants)",
            "DGX-H100",
            {"fp8_format": "hybrid", "fp8_recipe": "tensorwise"},
        ),
        ("precision=FP8-MX", "DGX-B200", {"fp8_format": "hybrid", "fp8_recipe": "mxfp8"}),
        ("precision=NVFP4", "DGX-GB200", {"fp4_format": "e2m1"}),
    ],
)
def test_precision_keys_from_the_notes(
    notes: str, gpu: str, keys: dict[str, str], tmp_path: Path
) -> None:
    """The FP8 / FP4 rows keep their precision (the planner and calibrate plan them so)."""
    spec = build(notes=notes, gpu_type=gpu)
    tr = spec["training"]
    assert tr["precision"] == "bf16"
    assert {k: tr[k] for k in ("fp8_format", "fp8_recipe", "fp4_format") if k in tr} == keys
    loads(spec, tmp_path)


def test_nvfp4_needs_blackwell() -> None:
    spec, why = row_to_spec_reason({**ROW, "notes": "precision=NVFP4"})
    assert spec is None and "Blackwell" in why


def test_published_layout_and_batch(tmp_path: Path) -> None:
    spec = build(
        tp="2",
        pp="2",
        vpp="2",
        micro_batch="2",
        zero_stage="0",
        notes="precision=BF16; sequence_parallel=false",
        gpus="16",
    )
    par, tr = spec["parallel"], spec["training"]
    assert (par["tp"], par["pp"], par["vpp"], par["dp"]) == (2, 2, 2, 4)
    assert par["zero_stage"] == 0 and par["sequence_parallel"] is False
    assert (tr["micro_batch_size"], tr["global_batch_size"], tr["recompute"]) == (2, 128, "none")
    assert spec["cluster"] == {"num_nodes": 2, "gpus_per_node": 8, "gpu": "h100-80g"}
    loads(spec, tmp_path)


@pytest.mark.parametrize(
    "layers,pp,vpp,want",
    [
        # 126 = 128 - 2 over pp 16 x vpp 8: the embedding and the loss count as layers
        (
            "126",
            "16",
            "8",
            {
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
                "vpp": 8,
            },
        ),
        ("31", "4", "2", {"account_for_loss_in_pipeline_split": True, "vpp": 2}),
        # 61 over pp 8: an explicit first / last stage, one chunk
        ("61", "8", "4", {"pipeline_first_stage_layers": 6, "pipeline_last_stage_layers": 7}),
    ],
)
def test_megatron_bridge_layer_splits(
    layers: str, pp: str, vpp: str, want: dict[str, Any], tmp_path: Path
) -> None:
    spec = build(
        model="Custom",
        layers=layers,
        hidden="1024",
        heads="8",
        vocab="32000",
        pp=pp,
        vpp=vpp,
        gpus=str(8 * int(pp)),
        global_batch="512",
    )
    par = spec["parallel"]
    assert {k: par[k] for k in want} == want
    assert "vpp" in want or "vpp" not in par
    loads(spec, tmp_path)


def test_architecture_sources(tmp_path: Path) -> None:
    # a preset, its columns overriding it (dense)
    assert build(layers="40")["model"]["num_layers"] == 40
    # an MoE preset keeps its expert width (the row's ffn_hidden is the expert width)
    ds = build(model="DeepSeekV3 (w/o MTP)", ffn_hidden="2048", experts="256", gpus="64", ep="8")
    assert ds["model"]["num_experts"] == 256 and ds["model"]["ffn_hidden_size"] == 18432
    assert ds["parallel"]["etp"] == 1
    # trainc/conf/published_models.yaml
    qwen = build(model="Qwen3_30B_a3B (tokendrop)")
    assert qwen["model"]["num_experts"] == 128 and qwen["model"]["moe_ffn_hidden_size"] == 768
    # the columns alone, GPT style for a GPT name
    gpt = build(model="GPT3-1B", layers="24", hidden="2048", heads="16", vocab="50257")["model"]
    assert (gpt["activation"], gpt["position_embedding"]) == ("gelu", "learned")
    assert gpt["untie_embeddings_and_output_weights"] is False
    # a model trainc cannot express, and one nobody transcribed
    assert "Mamba" in row_to_spec_reason({**ROW, "model": "Nemotron_3_Nano"})[1]
    assert row_to_spec_reason({**ROW, "model": "Unknown-9B"})[0] is None


def test_every_published_model_compiles(tmp_path: Path) -> None:
    """Each architecture of published_models.yaml is a valid model section (it names its
    source), on a node of B200s."""
    models = published_models()["models"]
    assert models and all(v["source"] for v in models.values())
    for name in models:
        assert model_key(name) == name
        spec = build(
            model=name,
            gpu_type="DGX-B200",
            notes="precision=BF16",
            ep="8" if models[name]["model"].get("num_experts") else "",
        )
        loads(spec, tmp_path)


def test_rack_gpus_are_trays_in_an_nvlink_rack() -> None:
    gb = build(gpu_type="DGX-GB200", gpus="128")["cluster"]
    assert gb == {"num_nodes": 32, "gpus_per_node": 4, "gpu": "gb200", "nvlink_domain_size": 64}
    assert build(gpu_type="DGX-GB300", gpus="72")["cluster"]["nvlink_domain_size"] == 72


def test_calibrate_reads_the_csv_with_the_converter(tmp_path: Path) -> None:
    """trainc calibrate's CSV input: the converter's spec (FP8 keys, the published layout), and
    no guessed global batch."""
    import csv

    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROW))
        w.writeheader()
        w.writerow({**ROW, "tp": "2"})
        w.writerow({**ROW, "global_batch": ""})
    runs, notes = runs_from_csv(path)
    assert len(runs) == 1 and runs[0].spec.parallel.tp == 2
    assert runs[0].spec.training.fp8_format.value == "hybrid"
    assert runs[0].spec.training.fp8_recipe.value == "tensorwise"
    assert len(notes) == 1 and "global_batch not published" in notes[0]


def test_tflops_rows_use_their_sources_flop_count(tmp_path: Path) -> None:
    """A TFLOP/s-only row becomes a step time with the source's FLOP convention: NeMo 2.x
    (flops_formulas.py) counts the attention scores non-causal, trainc causal: the same TFLOP/s
    is a longer step for the larger count. Printed tokens/s win over TFLOP/s."""
    import csv

    from trainc.calibrate import prepare
    from trainc.compiler.estimate import estimate
    from trainc.compiler.estimate.flops import spec_flop_terms

    nemo2 = {
        **ROW,
        "source": "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md",
        "notes": "precision=FP8-CS; container=NeMo 25.04",
    }
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROW))
        w.writeheader()
        w.writerows([ROW, nemo2, {**ROW, "notes": "precision=FP8-CS; tokens_per_s_per_gpu=100"}])
    runs, _ = prepare(runs_from_csv(path)[0])
    causal, noncausal, printed = runs
    plan = causal.plan
    assert plan is not None
    flops = estimate(plan).flops_per_step
    tr, s = plan.spec.training, plan.spec.model.seq_length
    core = spec_flop_terms(plan.spec, plan).core_per_s2 * tr.global_batch_size * s * s
    assert causal.measured_step_seconds * (flops + core) == pytest.approx(
        noncausal.measured_step_seconds * flops
    )
    world = plan.derived.world_size
    assert printed.measured_step_seconds == pytest.approx(tr.global_batch_size * s / (100 * world))


def test_heldout_rows_build() -> None:
    """bench/heldout_runs.csv (in the repository) converts row by row."""
    rows = load_rows(Path(__file__).resolve().parents[3] / "bench" / "heldout_runs.csv")
    assert rows
    for row in rows:
        spec, why = row_to_spec_reason(row)
        assert spec is not None, why
        assert (
            precision_of(row) == "bf16"
            or "fp8_format" in spec["training"]
            or "fp4_format" in spec["training"]
        )


@pytest.mark.parametrize(
    ("framework", "engine"),
    [
        ("fsdp", "fsdp"),
        ("llm-foundry", "fsdp"),
        ("torchtitan", "fsdp"),
        ("deepspeed", "deepspeed"),
        ("megatron", "megatron"),
    ],
)
def test_fully_sharded_rows_build_the_engine_that_ran_them(
    framework: str, engine: str, tmp_path: Path
) -> None:
    """zero_stage 3: DeepSpeed rows are ZeRO-3, PyTorch FSDP rows (llm-foundry, torchtitan)
    engine=fsdp (torchtitan's with its entrypoint), Megatron-FSDP rows the distributed
    optimizer (not a trainc engine)."""
    spec = build(zero_stage="3", notes=f"precision=BF16; framework={framework}")
    assert spec["engine"] == engine
    if engine == "deepspeed":
        assert spec["parallel"]["zero_stage"] == 3
    if engine == "fsdp":
        assert "zero_stage" not in spec["parallel"]
        assert spec.get("launch", {}).get("entrypoint") == (
            "torchtitan" if framework == "torchtitan" else None
        )
        # the tables' torchtitan runs predate 0.3.0 (separate q/k/v under per-op SAC)
        assert spec.get("launch", {}).get("versions") == (
            {"torchtitan": "0.2.2"} if framework == "torchtitan" else None
        )
    loads(spec, tmp_path)


@pytest.mark.parametrize(
    ("compile_note", "want"),
    [
        ("torch_compile=on", True),
        ("torch_compile=off (train_configs toml compile=false)", False),
        ("", False),
    ],
)
def test_torch_compile_note_sets_fsdp_compile(
    compile_note: str, want: bool, tmp_path: Path
) -> None:
    """torchtitan / FSDP rows run with torch.compile say so (``torch_compile=on``): the spec
    sets ``fsdp.compile``, which the kernel model reads (fused element-wise kernels)."""
    spec = build(zero_stage="3", notes=f"precision=BF16; framework=torchtitan; {compile_note}")
    assert spec.get("fsdp", {}).get("compile", False) is want
    loads(spec, tmp_path)


def test_moe_rows_build_from_their_columns(tmp_path: Path) -> None:
    """An MoE model without a preset builds from the row's columns (every layer MoE, expert
    width ffn_hidden, top-k); without the expert width it is skipped with a reason."""
    cols = dict(
        model="Grok-1-314B",
        layers="64",
        hidden="6144",
        heads="48",
        kv_heads="8",
        ffn_hidden="32768",
        vocab="128256",
        seq_len="8192",
        experts="8",
        topk="2",
        ep="8",
        notes="precision=BF16",
    )
    spec = build(**cols)
    m = spec["model"]
    assert (m["num_experts"], m["moe_router_topk"], m["moe_ffn_hidden_size"]) == (8, 2, 32768)
    loads(spec, tmp_path)
    spec, why = row_to_spec_reason({**ROW, **cols, "ffn_hidden": ""})
    assert spec is None and "not transcribed" in why


def test_unfused_attention_note(tmp_path: Path) -> None:
    """``attention=unfused`` (runs before FlashAttention) sets cluster.flash_attention false."""
    spec = build(notes="precision=BF16; attention=unfused (2021 Megatron-LM)")
    assert spec["cluster"]["flash_attention"] is False
    loads(spec, tmp_path)
    assert "flash_attention" not in build(notes="precision=BF16")["cluster"]


@pytest.mark.parametrize(
    ("framework", "off"),
    [
        ("", False),
        ("framework=megatron (Megatron-LM commit f)", False),
        ("framework=nemo", False),
        ("framework=nanotron (v0.5)", True),
        ("framework=deepspeed", True),
    ],
)
def test_tp_comm_overlap_only_where_the_framework_has_it(
    framework: str, off: bool, tmp_path: Path
) -> None:
    """Transformer Engine's userbuffer TP overlap (trainc's default on Hopper with SP) is a
    Megatron / NeMo feature: other frameworks' rows compile with tp_comm_overlap false."""
    spec = build(tp="4", gpu_type="H100-SXM5-80GB", notes=f"precision=BF16; {framework}")
    assert ("tp_comm_overlap" in spec["training"]) is off
    if off:
        assert spec["training"]["tp_comm_overlap"] is False
    loads(spec, tmp_path)
    assert (
        "tp_comm_overlap"
        not in build(tp="1", notes="precision=BF16; framework=nanotron")["training"]
    )


def test_a800_is_an_a100_with_its_nvlink(tmp_path: Path) -> None:
    """A800 rows (Chinese papers) build on the A100 profile with 200 GB/s NVLink per direction."""
    spec = build(gpu_type="A800-SXM4-80GB", notes="precision=BF16")
    assert spec["cluster"]["gpu"] == "a100-80g"
    assert spec["cluster"]["intra_node_bandwidth_gbps"] == 200
    loads(spec, tmp_path)


def test_mpt_rows_are_gpt_style() -> None:
    """MPT (llm-foundry): GELU MLP, LayerNorm, learned positions, tied embeddings."""
    spec = build(
        model="MPT-7B",
        layers="32",
        hidden="4096",
        heads="32",
        kv_heads="32",
        ffn_hidden="16384",
        vocab="50368",
        seq_len="2048",
        notes="precision=BF16",
    )
    m = spec["model"]
    assert (
        m["activation"],
        m["normalization"],
        m["position_embedding"],
        m["untie_embeddings_and_output_weights"],
    ) == ("gelu", "layernorm", "learned", False)


@pytest.mark.parametrize(
    "notes,want",
    [
        ("precision=BF16; method=MCore w/ Folding; etp=1 (as printed)", 1),
        ("precision=BF16; method=MCore; MCore 5D parallelism without folding", 4),
        ("precision=BF16; method=TP+EP+DP", 4),
        ("precision=BF16; method=MCore; etp=2", 2),
        ("precision=BF16", 1),  # NVIDIA's MoE recipes set expert_tensor_parallel_size 1
    ],
)
def test_expert_tensor_parallel_from_the_row(notes: str, want: int) -> None:
    spec = build(
        model="Mixtral-8x7B", experts="8", topk="2", ep="8", tp="4", gpus="64", dp="16", notes=notes
    )
    assert spec["parallel"]["etp"] == want


@pytest.mark.parametrize(
    "gpu_type,gpu,memory",
    [
        ("A100-SXM4-40GB", "a100-40g", None),
        ("A100-SXM4-80GB (DGX A100, Selene)", "a100-80g", None),
        ("H100-SXM5-80GB", "h100-80g", None),
        ("H100-SXM5 (Grand Teton HBM2e 96GB, 500W)", "h100-80g", 96),
        ("H100-SXM5 (HBM2e 94-96GB, lower TDP)", "h100-80g", 94),
    ],
)
def test_gpu_profile_and_memory_from_the_gpu_type(
    gpu_type: str, gpu: str, memory: int | None
) -> None:
    cl = build(gpu_type=gpu_type, notes="precision=BF16")["cluster"]
    assert (cl["gpu"], cl.get("gpu_memory_gib")) == (gpu, memory)


@pytest.mark.parametrize(
    ("notes", "gbps"),
    [
        ("network_gbps_per_node=800 (README 'with 800 Gbps')", 12.5),
        ("network_gbps_per_node=1600", 25.0),
        ("interconnect=not stated", None),
    ],
)
def test_network_note_sets_the_scale_out_bandwidth_per_gpu(
    notes: str, gbps: float | None, tmp_path: Path
) -> None:
    """A row that publishes its node's scale-out bandwidth (``network_gbps_per_node``, Gb/s per
    node) gets it per GPU in GB/s (/ 8 bits / 8 GPUs); without it the GPU profile's figure
    stands (no key)."""
    spec = build(gpus="96", notes=f"precision=BF16; {notes}")
    assert spec["cluster"].get("inter_node_bandwidth_gbps") == gbps
    loads(spec, tmp_path)


@pytest.mark.parametrize(
    ("gpus", "sharding", "want"),
    [
        ("96", "sharding=HSDP (HYBRID_SHARD: shard within the 8-GPU node)", 12),
        ("96", "sharding=FSDP (FULL_SHARD)", None),
        ("8", "sharding=HSDP", None),
    ],
)
def test_hsdp_note_shards_within_the_node(
    gpus: str, sharding: str, want: int | None, tmp_path: Path
) -> None:
    """An FSDP row sharded within the node and replicated across nodes (``sharding=HSDP``)
    builds ``fsdp.dp_replicate`` = nodes (one node: plain FSDP); full shard leaves it unset."""
    spec = build(
        gpus=gpus,
        tp="1",
        pp="1",
        zero_stage="3",
        notes=f"precision=BF16; framework=fsdp; {sharding}",
    )
    assert spec.get("fsdp", {}).get("dp_replicate") == want
    loads(spec, tmp_path)
