"""Issue 13, precision and searched fixes: exact local GEMM shapes, recipe x GPU verdicts, the
alignment of each recipe, and the first/last pipeline split search."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kit import find, lint_cfg, make
from trainc.compiler.load import load_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.validate import validate
from trainc.compiler.validate.layers import _uneven_fix
from trainc.compiler.validate.precision_shapes import ALIGN, local_gemms, misaligned

LLAMA8B = {
    "model.num_layers": 32,
    "model.hidden_size": 4096,
    "model.num_attention_heads": 32,
    "model.num_query_groups": 8,
    "model.ffn_hidden_size": 14336,
    "model.vocab_size": 128256,
    "model.seq_length": 8192,
    "cluster.gpu": "h100-80g",
    "parallel.tp": 4,
    "parallel.pp": 2,
}


def test_local_gemm_shapes_of_llama3_8b_at_tp4() -> None:
    spec = make(**LLAMA8B)
    shapes = {g.layer: (g.k, g.n) for g in local_gemms(spec, tp=4, etp=4)}
    # qkv: (32 + 2*8) heads * 128 / 4; proj: 32*128/4; fc1: 2*14336/4 (swiglu); fc2: 14336/4
    assert shapes == {
        "linear_qkv": (4096, 1536),
        "linear_proj": (1024, 4096),
        "linear_fc1": (4096, 7168),
        "linear_fc2": (3584, 4096),
    }


def test_kv_heads_replicated_when_tp_exceeds_groups() -> None:
    spec = make(**LLAMA8B)
    qkv = next(g for g in local_gemms(spec, tp=16, etp=16) if g.layer == "linear_qkv")
    assert qkv.n == 2 * 128 + 2 * 1 * 128  # 2 query heads + one K and one V head per rank


def test_moe_gemms_split_by_etp_and_shared_by_tp() -> None:
    spec = make(
        **{
            **LLAMA8B,
            "model.num_experts": 8,
            "model.moe_ffn_hidden_size": 1536,
            "model.moe_shared_expert_intermediate_size": 4096,
            "parallel.etp": 1,
        }
    )
    shapes = {g.layer: (g.k, g.n) for g in local_gemms(spec, tp=4, etp=1)}
    assert shapes["experts.linear_fc1"] == (4096, 3072)
    assert shapes["experts.linear_fc2"] == (1536, 4096)
    assert shapes["shared_experts.linear_fc2"] == (1024, 4096)
    assert "linear_fc1" not in shapes  # every layer is an MoE layer (moe_layer_freq 1)


@pytest.mark.parametrize(
    ("recipe", "unit"),
    [("delayed", 16), ("tensorwise", 16), ("blockwise", 16), ("mxfp8", 32), ("nvfp4", 16)],
)
def test_alignment_per_recipe(recipe: str, unit: int) -> None:
    assert ALIGN[recipe][1] == unit
    # ffn 14400 at tp 4: fc2 input 3600 is a multiple of 16 but not of 32; fc1 output 7200 is
    spec = make(**{**LLAMA8B, "model.ffn_hidden_size": 14400})
    bad = {g.layer for g in misaligned(spec, 4, 4, unit)}
    assert bad == ({"linear_fc2"} if unit == 32 else set())


@pytest.mark.parametrize(
    ("gpu", "recipe", "rule_key"),
    [
        ("a100-80g", "tensorwise", "training.fp8_format"),
        ("h100-80g", "mxfp8", "training.fp8_recipe"),
        ("h200", "mxfp8", "training.fp8_recipe"),
        ("h800", "mxfp8", "training.fp8_recipe"),
        ("b200", "mxfp8", None),
        ("gb200", "mxfp8", None),
        ("h100-80g", "blockwise", None),
        ("h100-80g", "delayed", None),
        ("custom", "mxfp8", None),
    ],
)
def test_recipe_runs_on_gpu(gpu: str, recipe: str, rule_key: str | None) -> None:
    extra = (
        {
            "cluster.gpu_memory_gib": 80.0,
            "cluster.peak_tflops": 900.0,
            "cluster.intra_node_bandwidth_gbps": 400.0,
            "cluster.inter_node_bandwidth_gbps": 50.0,
        }
        if gpu == "custom"
        else {}
    )
    found = [
        d
        for d in find(
            lint_cfg(
                **{
                    **LLAMA8B,
                    **extra,
                    "cluster.gpu": gpu,
                    "training.fp8_format": "e4m3",
                    "training.fp8_recipe": recipe,
                }
            ),
            "TRC370",
        )
        if d.is_error
    ]
    assert [d.key for d in found] == ([rule_key] if rule_key else [])


def test_nvfp4_on_hopper_falls_back_to_fp8() -> None:
    found = find(lint_cfg(**{**LLAMA8B, "training.fp4_format": "e2m1"}), "TRC370")
    assert [d.key for d in found] == ["training.fp4_recipe"]
    assert found[0].edits == {
        "training.fp4_format": "none",
        "training.fp8_format": "hybrid",
        "training.fp8_recipe": "tensorwise",
    }


def test_blockwise_on_blackwell_is_a_warning() -> None:
    found = find(
        lint_cfg(
            **{
                **LLAMA8B,
                "cluster.gpu": "b200",
                "training.fp8_format": "e4m3",
                "training.fp8_recipe": "blockwise",
            }
        ),
        "TRC370",
    )
    assert [d.severity.value for d in found] == ["warning"]


def test_shape_fix_names_nearest_tp_and_etp() -> None:
    moe = {
        **LLAMA8B,
        "model.num_experts": 8,
        "model.moe_ffn_hidden_size": 1544,
        "parallel.etp": 2,
        "training.fp8_format": "hybrid",
        "cluster.num_nodes": 2,
        "parallel.ep": 4,
    }
    d = next(d for d in find(lint_cfg(**moe), "TRC371"))
    # 1544 / 2 = 772 is not a multiple of 16 and 1544 % 16 = 8, so no etp aligns the experts:
    # the fix pads moe_ffn_hidden_size to 1568 (a multiple of 16 x etp 2 = 32)
    assert d.key == "parallel.etp"
    assert "model.moe_ffn_hidden_size=1568" in (d.fix or "")
    assert "parallel.etp=" not in (d.fix or "")


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "first", "last"),
    [
        (30, 4, 1, 7, 7),
        (7, 2, 1, 3, 4),
        (126, 16, 1, 7, 7),
        (61, 8, 1, 6, 7),
        (10, 3, 2, 4, 4),
    ],
)
def test_uneven_split_searches_first_and_last_together(
    layers: int, pp: int, vpp: int, first: int, last: int
) -> None:
    fix = _uneven_fix(layers, pp, vpp)
    assert (
        f"pipeline_first_stage_layers={first} and "
        f"parallel.pipeline_last_stage_layers={last} " in fix
    ), fix


def test_uneven_split_search_is_bounded_for_huge_counts() -> None:
    fix = _uneven_fix(10**12, 10**6, 1)
    assert "first and last searched together" in fix
    assert "x 999998" in fix  # the middle is shown as a count, not listed


GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "cases"
KNOWN_MODELS = [
    "gpt3-175b",
    "llama2-70b-tp8pp4",
    "llama3-8b-pp2-vpp2",
    "llama3.1-405b-pp16-vpp8",
    "megatron-lm-uneven-cp",
    "mixtral-8x7b-ep8",
    "mixtral-8x7b-gb200-nvl72",
]


@pytest.mark.parametrize("case", KNOWN_MODELS)
@pytest.mark.parametrize(
    ("recipe", "gpu"), [("tensorwise", "h100-80g"), ("delayed", "h200"), ("mxfp8", "b200")]
)
def test_published_models_quantize_at_their_layouts(case: str, recipe: str, gpu: str) -> None:
    """No false alarm: GPT-3, Llama 2/3, Mixtral at their published layouts train in FP8
    (NeMo / Megatron-Bridge recipes), so no TRC370 / TRC371 error."""
    gpu = "gb200" if "gb200" in case else gpu
    loaded = load_spec(
        GOLDEN / case / "spec.yaml",
        ["training.fp8_format=e4m3", f"training.fp8_recipe={recipe}", f"cluster.gpu={gpu}"],
    )
    assert loaded.spec is not None
    found = [
        (d.rule.id, d.key)
        for d in validate(normalize(loaded.spec))
        if d.rule.id in {"TRC370", "TRC371"}
    ]
    assert found == []
