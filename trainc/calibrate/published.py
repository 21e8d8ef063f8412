"""Published training runs (a CSV with the columns of ``bench/published_runs.csv``)
as trainc specs: the one converter, used by ``trainc calibrate``'s CSV input,
``bench/fidelity.py`` (estimate vs measured), ``bench/planner_fidelity.py`` and the planner
top-5 rate of ``bench/fidelity.py --planner`` (is the published layout among the planner's five
best?).

* :func:`load_rows` reads the CSV (column -> stripped text; empty = not published).
* :func:`row_to_spec_reason` builds the spec, as the composed dict a trainc YAML file would hold
  (no ``defaults:`` list: write it as YAML and ``load_spec`` it), with the published layout,
  batch, precision and recompute; or None and why the row cannot be built.
* :func:`published_layout` is the row's tp, pp, vpp, cp, ep, dp and micro batch.

Conversion (each choice is a guess where the table is silent; the row's ``notes`` say so):

* model: the preset in ``trainc/conf/model`` with the row's model name (:data:`MODEL_PRESETS`;
  for a dense preset the row's architecture columns override it; an MoE row's ``ffn_hidden`` is
  its expert width, and the MoE presets are taken as they are), else the entry of
  ``trainc/conf/published_models.yaml`` (architectures from the models' public configurations,
  with sources; the models trainc cannot express are listed there with the reason), else the
  row's columns when they give layers, hidden, heads and vocabulary of a dense model (GPT-2/3
  style, Brown et al. 2020, for a ``GPT*`` name: GELU, LayerNorm, learned positions, tied
  embeddings; trainc's Llama-style defaults otherwise) or, with ``experts``, ``topk`` and the
  expert width in ``ffn_hidden``, of an MoE model (every layer MoE, no shared expert, Llama-
  style); else skipped. ``seq_len`` is the
  sequence, ``max_position_embeddings`` at least that; RoPE scaling is dropped (it changes no
  estimate);
* cluster: ``cluster.gpu`` from ``gpu_type`` (:func:`gpu_of`; an A800 is the A100 profile with
  its 200 GB/s NVLink), 8 GPUs per node (4 per GB200 /
  GB300 compute tray, whose NVLink domain is the 72-GPU rack, or the 64 GPUs of 16 trays a job
  uses when the GPU count is a multiple of 64; elsewhere the domain is the node), the GPU
  preset's bandwidths and memory; a row that publishes its node's scale-out bandwidth
  (``network_gbps_per_node=`` in ``notes``, Gb/s per node: IBM's fms-fsdp tables, "A100 with
  400 Gbps") gets ``inter_node_bandwidth_gbps`` = that / 8 bits / GPUs per node (GB/s per GPU);
* precision (:func:`precision_of`, ``precision=`` in ``notes``): BF16; FP8 / FP8 hybrid
  (Transformer Engine delayed scaling, NeMo <= 24.x) is ``fp8_format: hybrid`` with
  ``fp8_recipe: delayed``; FP8-CS (current scaling) ``tensorwise``; FP8-MX / MXFP8 ``mxfp8``;
  NVFP4 ``fp4_format: e2m1`` (Blackwell only); "precision not stated" is FP8-CS. ``precision``
  stays bf16 (the dtype of parameters and of the other kernels);
* layout: the published tp, pp, vpp, cp, ep (empty = 1), dp = GPUs / (tp pp cp), sequence
  parallel with tp > 1 (unless the notes say ``sequence_parallel=false``), the expert
  tensor-parallel size from :func:`expert_tensor_parallel` (EP folds into DP, so ep may exceed
  dp), ZeRO stage 1 (Megatron's distributed optimizer; ``zero_stage`` 0 is plain DDP).
  ``zero_stage`` 3 is Megatron-FSDP (``engine: megatron``, zero_stage 3: Megatron-Bridge's
  FSDP rows, the MoE-folding paper's FSDP+EP; the framework picks the engine by
  :data:`ZERO3_ENGINES`, the engine's step is in :data:`ZERO3_SECTIONS`); with
  ``framework=deepspeed`` in the notes
  DeepSpeed ZeRO-3; with ``framework=`` fsdp, llm-foundry, torchtitan or automodel
  ``engine: fsdp`` (full shard over the data-parallel ranks; torchtitan's rows, and rows with
  pp, cp or ep > 1, which the trainc FSDP2 worker cannot split, with
  ``launch.entrypoint: torchtitan``; torchtitan's rows with ``launch.versions.torchtitan: 0.2.2``,
  the last release before 0.3.0's config and model rework: the tables' runs (2024-2025 commits)
  predate it, so their per-op SAC projects q, k and v separately and their float8 default is
  tensorwise; ``selective`` is torchtitan's per-op SAC, as the rows say; ``torch_compile=on``
  in the notes sets
  ``fsdp.compile``; ``sharding=HSDP``, shard within the node and replicate across nodes, sets
  ``fsdp.dp_replicate`` to the node count). GPT-style models (``gpt*``, ``mpt*`` names) get
  GELU, LayerNorm, learned positions, tied embeddings. Layers that do not divide over pp x vpp:
  Megatron-Bridge's split with the embedding and the loss counted as layers
  (``account_for_embedding/loss_in_pipeline_split``, both, else the loss only), else an
  explicit first/last stage (its pipeline layout strings) with vpp 1;
* batch: the published micro batch (1 when empty) and global batch; an empty global batch (the
  NeMo long-sequence table) is ``8 x dp x micro batch`` sequences: callers that need published
  inputs only check ``row["global_batch"]``;
* attention: ``attention=unfused`` in the notes (runs before FlashAttention, 2022) sets
  ``cluster.flash_attention: false``: the score matrix's memory and kernels are priced;
* TP communication overlap: trainc's default (on for Hopper and newer with sequence
  parallelism) for Megatron-LM / NeMo runs; off (``training.tp_comm_overlap: false``) for
  frameworks without Transformer Engine's userbuffers (:func:`tp_overlap_framework`);
* recompute: the ``recompute`` column, else none (the Megatron-Bridge performance recipes train
  without full recompute; the table does not transcribe their per-module lists).
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler.load import conf_dir
from trainc.schemas import Engine

#: Model name (as :func:`model_key` spells it) -> bundled model preset (``trainc/conf/model``).
#: Llama 3 405B is Llama 3.1 405B's architecture.
MODEL_PRESETS = {
    "llama2-7b": "llama2-7b",
    "llama2-13b": "llama2-13b",
    "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b",
    "llama3-70b": "llama3-70b",
    "llama3.1-405b": "llama3.1-405b",
    "llama3-405b": "llama3.1-405b",
    "deepseekv3": "deepseek-v3-like",
    "mixtral-8x7b": "mixtral-8x7b",
    "gpt3-175b": "gpt3-175b",
}
#: Substring of ``gpu_type`` (first match wins) -> ``cluster.gpu``.
GPUS = (
    ("GB300", "gb300"),
    ("GB200", "gb200"),
    ("B300", "b300"),
    ("B200", "b200"),
    ("H100", "h100-80g"),
    ("H200", "h200"),
    ("H800", "h800"),
    ("A100-SXM4-40GB", "a100-40g"),
    ("A100", "a100-80g"),
    ("A800", "a100-80g"),
)
#: GPUs of a profile with another NVLink: ``gpu_type`` substring -> NVLink GB/s per GPU, one
#: direction (the A800 is an A100 with NVLink at 400 GB/s bidirectional: NVIDIA A800 data sheet).
NVLINK_GBPS = {"A800": 200}
#: ``cluster.gpu`` -> its profile's memory (GiB); a ``gpu_type`` naming another size (Meta's
#: 96 GB HBM2e H100s) sets ``cluster.gpu_memory_gib`` to it.
PROFILE_MEMORY_GIB = {"h100-80g": 80}
#: GPUs whose node is a 4-GPU compute tray in a 72-GPU NVLink rack.
RACK_GPUS = ("gb200", "gb300")
#: The table's architecture columns -> model keys.
ARCH_COLUMNS = {
    "layers": "num_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_query_groups",
    "ffn_hidden": "ffn_hidden_size",
    "vocab": "vocab_size",
}


def load_rows(path: str | Path) -> list[dict[str, str]]:
    """The table's rows as dicts of column -> text (stripped; empty = not published)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [
            {k: (v or "").strip() for k, v in row.items() if k is not None}
            for row in csv.DictReader(f)
        ]


@functools.cache
def published_models() -> dict[str, Any]:
    """``trainc/conf/published_models.yaml``: ``models`` (name -> source, model) and
    ``unsupported`` (name -> why)."""
    data = yaml.safe_load((conf_dir() / "published_models.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def model_key(name: str) -> str:
    """The table's model name as a key: lower case, a trailing ``(...)`` dropped, runs of spaces
    and underscores as ``-``.

    >>> model_key("Qwen3_30B_a3B (tokendrop)"), model_key("LLAMA3.1_405B")
    ('qwen3-30b-a3b', 'llama3.1-405b')
    """
    base = re.sub(r"\s*\(.*\)\s*$", "", name).strip().lower()
    return re.sub(r"[\s_]+", "-", base)


def note(row: dict[str, str], key: str) -> str | None:
    """``key=value`` from the row's ``notes`` (``;``-separated items; the key is a whole item's
    name: ``flops=`` does not match ``aggregate_pflops=``).

    >>> note({"notes": "aggregate_pflops=19.6; flops=Megatron"}, "flops")
    'Megatron'
    """
    m = re.search(rf"(?:^|;)\s*{re.escape(key)}=([^;]+)", row.get("notes", ""))
    return m.group(1).strip() if m else None


def flop_convention(row: dict[str, str]) -> str:
    """How the row's source counts the attention core in its model TFLOP/s: ``noncausal`` (the
    full ``s x s`` scores, as NeMo's ``nemo/utils/flops_formulas.py`` (its ``12 s / h`` term),
    Megatron-LM's ``num_floating_point_operations`` before it halved the causal scores (its
    ``seq_length / hidden_size`` term, 2024), Narayanan et al.'s ``s / 6h`` and llm-foundry /
    torchtitan's ``12 L H d s``) or ``causal`` (trainc's count, today's Megatron-LM). A
    ``flops=`` note that says which wins; else NVIDIA/NeMo's tables of NeMo 2.x containers
    (24.09 and later, whose TFLOP/s come from ``flops_formulas.py``) are ``noncausal``; else
    ``causal`` (NeMo 1.x tables do not say how they counted).

    >>> flop_convention({"notes": "flops=12*L*heads*head_dim*seq (attention, non-causal)"})
    'noncausal'
    >>> flop_convention({"source": "NVIDIA/NeMo docs/source/performance/x.md",
    ...                  "notes": "container=NeMo 25.04.rc2"})
    'noncausal'
    >>> flop_convention({"source": "NVIDIA-NeMo/Megatron-Bridge docs", "notes": ""})
    'causal'
    """
    text = (note(row, "flops") or "").lower().replace(" ", "")
    if any(k in text for k in ("non-causal", "noncausal", "s/6h", "seq_length/hidden_size")):
        return "noncausal"
    if "causal" in text:
        return "causal"
    if "NVIDIA/NeMo" in row.get("source", ""):  # NeMo 2.x (24.09+) FLOPsMeasurementCallback
        m = re.search(r"NeMo\s+(\d+)\.(\d+)", f"{row.get('source', '')} {note(row, 'container')}")
        if m and (int(m.group(1)), int(m.group(2))) >= (24, 9):
            return "noncausal"
    return "causal"


def measured_tokens_per_gpu(
    row: dict[str, str], causal_flops_per_token: float, core_flops_per_token: float
) -> float | None:
    """The row's measured tokens/s per GPU: ``tokens_per_s_per_gpu=`` when the notes print
    it, else ``measured_tflops_per_gpu`` over the model FLOPs per token of the source's
    convention (:func:`flop_convention`): trainc's (causal) count ``causal_flops_per_token``,
    plus the causal attention core once more (``core_flops_per_token``) for a non-causal
    source. None without either."""
    m = re.match(r"[0-9.]+", note(row, "tokens_per_s_per_gpu") or "")
    if m:
        return float(m.group(0))
    try:
        tf = float(row.get("measured_tflops_per_gpu", "") or "nan")
    except ValueError:
        return None
    if not tf > 0:
        return None
    per_token = causal_flops_per_token + (
        core_flops_per_token if flop_convention(row) == "noncausal" else 0.0
    )
    return tf * 1e12 / per_token


def precision_of(row: dict[str, str]) -> str:
    """bf16 | fp8-delayed | fp8-cs | mxfp8 | nvfp4 (see the module docstring)."""
    p = (note(row, "precision") or "").upper()
    if "precision not stated" in row.get("notes", ""):
        return "fp8-cs"
    if p.startswith("BF16"):
        return "bf16"
    if "NVFP4" in p:
        return "nvfp4"
    if "MX" in p:
        return "mxfp8"
    if "CS" in p:
        return "fp8-cs"
    if p.startswith("FP8"):
        return "fp8-delayed"
    return "bf16"


def tp_overlap_framework(row: dict[str, str]) -> bool:
    """Whether the row's framework has Transformer Engine's TP communication overlap
    (userbuffers), which trainc's default turns on for Hopper and newer with sequence
    parallelism: Megatron-LM / Megatron-Core / NeMo runs (no ``framework=`` note, as NVIDIA's
    tables, or one naming megatron or nemo); not nanotron, DeepSpeed, llm-foundry, torchtitan,
    PyTorch FSDP or others, whose rows compile with ``training.tp_comm_overlap: false``.

    >>> tp_overlap_framework({"notes": "framework=megatron (Megatron-LM commit f)"})
    True
    >>> tp_overlap_framework({"notes": "framework=nanotron (v0.5)"})
    False
    """
    fw = (note(row, "framework") or "megatron").strip().lower()
    return fw.startswith(("megatron", "nemo"))


def gpu_of(row: dict[str, str]) -> str | None:
    """trainc ``cluster.gpu`` of the row's system (:data:`GPUS`), or None."""
    g = row.get("gpu_type", "").upper()
    return next((name for key, name in GPUS if key in g), None)


def _int(row: dict[str, str], col: str, default: int | None = None) -> int | None:
    v = row.get(col, "").strip()
    if not v:
        return default
    try:
        return int(float(v))
    except ValueError:
        return default


def published_layout(row: dict[str, str]) -> dict[str, int | None]:
    """The row's layout: tp, pp, vpp, cp, ep (empty = 1), dp and micro_batch (None if empty)."""
    one = {k: _int(row, k) or 1 for k in ("tp", "pp", "vpp", "cp", "ep")}
    return {**one, "dp": _int(row, "dp"), "micro_batch": _int(row, "micro_batch")}


def expert_tensor_parallel(row: dict[str, str], tp: int) -> int:
    """The row's expert tensor-parallel size (ETP) for an MoE row (ep > 1).

    An ``etp=`` note wins. Megatron-Core without MoE parallel folding (the folding paper's
    ``method=MCore``, ``TP+EP+DP`` and ``FSDP+EP`` rows) splits the experts by the attention's TP:
    ``expert_tensor_parallel_size`` defaults to ``tensor_model_parallel_size``
    (megatron/core/transformer/transformer_config.py at core_r0.16.0, ``__post_init__``).
    Otherwise 1, as NVIDIA's MoE recipes (Megatron-Bridge) and folding runs set it."""
    m = re.match(r"\d+", note(row, "etp") or "")
    if m:
        return int(m.group(0))
    method = (note(row, "method") or "").strip()
    return tp if method in ("MCore", "TP+EP+DP", "FSDP+EP") else 1


def _model(row: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """(model section, "") or (None, why), by the order of the module docstring."""
    key = model_key(row.get("model", ""))
    known = published_models()
    if key in known["unsupported"]:
        return None, str(known["unsupported"][key])
    given = {f: v for c, f in ARCH_COLUMNS.items() if (v := _int(row, c)) is not None}
    if key in MODEL_PRESETS:
        base = yaml.safe_load(
            (conf_dir() / "model" / f"{MODEL_PRESETS[key]}.yaml").read_text(encoding="utf-8")
        )
    elif key in known["models"]:
        base = dict(known["models"][key]["model"])
    else:
        needed = {"num_layers", "hidden_size", "num_attention_heads", "vocab_size"}
        experts, topk = _int(row, "experts"), _int(row, "topk")
        moe = bool(row.get("experts", ""))
        if not needed <= set(given) or (
            moe and not (experts and topk and "ffn_hidden_size" in given)
        ):
            return None, (
                f"architecture of {row.get('model')!r} not transcribed, no model "
                "preset and not in trainc/conf/published_models.yaml"
            )
        base = dict(given)
        if moe:  # every layer an MoE layer of ``experts`` experts of width ffn_hidden, top-k
            base.update(
                num_experts=experts,
                moe_router_topk=topk,
                moe_ffn_hidden_size=given["ffn_hidden_size"],
            )
            return base, ""
        if key.startswith(("gpt", "mpt")):  # GPT-2/3 style (Brown et al. 2020); MPT alike
            # (GELU MLP of 4h, LayerNorm, tied embeddings; its ALiBi is off by default and it
            # learns absolute positions: mosaicml/llm-foundry model configs)
            base.update(
                activation="gelu",
                normalization="layernorm",
                position_embedding="learned",
                untie_embeddings_and_output_weights=False,
            )
    if not base.get("num_experts"):  # an MoE row's ffn_hidden is the expert width
        base.update(given)
    return base, ""


def _pipeline_split(nl: int, pp: int, vpp: int) -> tuple[dict[str, Any] | None, int, str]:
    """How ``nl`` layers split over ``pp`` stages of ``vpp`` chunks: (the parallel keys that
    make them divide, the vpp, "") or (None, 1, why not). Megatron-Bridge counts the embedding
    and the loss as layers (``account_for_embedding/loss_in_pipeline_split``, both, else the
    loss only), else an explicit first/last stage (its pipeline layout strings) with vpp 1."""
    if not nl % (pp * vpp):
        return {}, vpp, ""
    if (nl + 2) % (pp * vpp) == 0:
        return (
            {
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
            },
            vpp,
            "",
        )
    if (nl + 1) % (pp * vpp) == 0:
        return {"account_for_loss_in_pipeline_split": True}, vpp, ""
    # an explicit first/last stage (Bridge's pipeline layout strings); one chunk
    mid = -(-nl // pp)
    rest = nl - (pp - 2) * mid
    if pp < 2 or rest < 2:
        return None, 1, f"cannot split {nl} layers over pp={pp}"
    split = {
        "pipeline_first_stage_layers": rest // 2,
        "pipeline_last_stage_layers": rest - rest // 2,
    }
    return split, 1, ""


def _parallel(
    row: dict[str, str], lay: dict[str, int | None], n: int, nl: int
) -> tuple[dict[str, Any] | None, str]:
    """The ``parallel`` section of a row on ``n`` GPUs with ``nl`` layers and the published
    layout ``lay`` (:func:`published_layout`), or (None, why the layers do not split)."""
    tp, pp, vpp, cp, ep = (int(lay[k] or 1) for k in ("tp", "pp", "vpp", "cp", "ep"))
    par: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "dp": n // (tp * pp * cp),
        "sequence_parallel": tp > 1 and note(row, "sequence_parallel") != "false",
        "zero_stage": 0 if row.get("zero_stage") == "0" else 1,
    }
    split, vpp, why = _pipeline_split(nl, pp, vpp)
    if split is None:
        return None, why
    par.update(split)
    if vpp > 1:
        par["vpp"] = vpp
    if ep > 1:
        par["etp"] = expert_tensor_parallel(row, tp)
    return par, ""


def _training(
    row: dict[str, str], lay: dict[str, int | None], par: dict[str, Any], prec: str
) -> dict[str, Any]:
    """The ``training`` section: the published micro and global batch (``8 x dp x micro
    batch`` sequences when the global batch is not published), recompute, TP overlap and the
    precision ``prec`` (:func:`precision_of`)."""
    mbs = lay["micro_batch"] or 1
    tr: dict[str, Any] = {
        "micro_batch_size": mbs,
        "global_batch_size": _int(row, "global_batch") or 8 * par["dp"] * mbs,
        "precision": "bf16",
        "recompute": row.get("recompute") or "none",
    }
    if par["tp"] > 1 and not tp_overlap_framework(row):  # no userbuffer TP overlap there
        tr["tp_comm_overlap"] = False
    if prec in ("fp8-delayed", "fp8-cs", "mxfp8"):
        tr["fp8_format"] = "hybrid"
        tr["fp8_recipe"] = {"fp8-delayed": "delayed", "fp8-cs": "tensorwise", "mxfp8": "mxfp8"}[
            prec
        ]
    elif prec == "nvfp4":
        tr["fp4_format"] = "e2m1"
    return tr


def _cluster(row: dict[str, str], gpu: str, n: int, gpn: int) -> dict[str, Any]:
    """The ``cluster`` section of a row on ``n`` GPUs ``gpu``, ``gpn`` per node: memory, NVLink,
    the NVLink domain of a rack, unfused attention and the published scale-out bandwidth."""
    cluster: dict[str, Any] = {"num_nodes": n // gpn, "gpus_per_node": gpn, "gpu": gpu}
    mem = re.search(r"(?:^|[\s(])(\d{2,3})(?:-\d+)?\s*GB", row.get("gpu_type", ""))
    if gpu in PROFILE_MEMORY_GIB and mem and int(mem.group(1)) != PROFILE_MEMORY_GIB[gpu]:
        cluster["gpu_memory_gib"] = int(mem.group(1))
    for key, gbps in NVLINK_GBPS.items():
        if key in row.get("gpu_type", "").upper():
            cluster["intra_node_bandwidth_gbps"] = gbps
    if gpu in RACK_GPUS:  # elsewhere the NVLink domain is the node (the default)
        cluster["nvlink_domain_size"] = 64 if n % 64 == 0 else 72
    if (note(row, "attention") or "").lower().startswith("unfused"):
        cluster["flash_attention"] = False  # the score matrix materialised (pre-2022 stacks)
    net = re.match(r"\d+(?:\.\d+)?", note(row, "network_gbps_per_node") or "")
    if net:  # the node's scale-out Gb/s, shared by its GPUs: GB/s per GPU, one direction
        cluster["inter_node_bandwidth_gbps"] = round(float(net.group()) / 8 / gpn, 4)
    return cluster


#: A ZeRO-3 step: (row, its framework, parallel, training, GPUs, GPUs per node) -> the spec's
#: extra sections.
_Zero3Step = Callable[
    [dict[str, str], str, dict[str, Any], dict[str, Any], int, int], dict[str, Any]
]

#: The first word of a ZeRO-3 row's ``framework=`` note (lower case) -> the engine that ran it;
#: any other framework (or none) is Megatron-FSDP (``engine: megatron``, zero_stage 3).
ZERO3_ENGINES: dict[str, Engine] = {
    "deepspeed": Engine.deepspeed,
    "fsdp": Engine.fsdp,
    "torchtitan": Engine.fsdp,
    "llm-foundry": Engine.fsdp,
    "automodel": Engine.fsdp,
}


def _megatron_fsdp(
    row: dict[str, str], fw: str, par: dict[str, Any], tr: dict[str, Any], n: int, gpn: int
) -> dict[str, Any]:
    """Megatron-FSDP runs in pretrain_gpt.py on CUDA (TRC383): its ``launch`` section."""
    return {"launch": {"entrypoint": "megatron-lm", "megatron_lm_path": "/opt/Megatron-LM"}}


def _deepspeed_zero3(
    row: dict[str, str], fw: str, par: dict[str, Any], tr: dict[str, Any], n: int, gpn: int
) -> dict[str, Any]:
    """DeepSpeed ZeRO-3: ``zero_stage`` 3 is all it needs (no further section)."""
    return {}


def _fsdp_full_shard(
    row: dict[str, str], fw: str, par: dict[str, Any], tr: dict[str, Any], n: int, gpn: int
) -> dict[str, Any]:
    """PyTorch FSDP / FSDP2 full shard over the data-parallel ranks: ``zero_stage`` and ``dp``
    dropped from ``par``, an unknown recompute made full in ``tr``; the ``launch`` (torchtitan
    for its own rows and for pp, cp or ep > 1) and ``fsdp`` (compile, HSDP) sections."""
    par.pop("zero_stage")
    par.pop("dp", None)
    if tr["recompute"] not in ("none", "full", "selective"):
        tr["recompute"] = "full"
    spec_launch: dict[str, Any] = {}
    spec_fsdp: dict[str, Any] = {}
    if fw == "torchtitan":
        spec_launch = {"entrypoint": "torchtitan", "versions": {"torchtitan": "0.2.2"}}
    elif any(int(par.get(a) or 1) > 1 for a in ("pp", "cp", "ep")):
        # the trainc FSDP2 worker splits tp and dp only: torchtitan is trainc's runner
        # of FSDP2 with pipeline, context or expert parallelism (on CUDA)
        spec_launch = {"entrypoint": "torchtitan"}
    if (note(row, "torch_compile") or "").lower().startswith("on"):
        spec_fsdp["compile"] = True  # torch.compile fuses the element-wise kernels
    if (note(row, "sharding") or "").upper().startswith("HSDP") and n // gpn > 1:
        spec_fsdp["dp_replicate"] = n // gpn  # shard within the node, replicate across
    out: dict[str, Any] = {}
    if spec_launch:
        out["launch"] = spec_launch
    if spec_fsdp:
        out["fsdp"] = spec_fsdp
    return out


#: Per engine, the step that makes a ZeRO-3 row (parameters, gradients and optimizer state
#: sharded) that engine's: it edits ``parallel`` / ``training`` and returns the spec's extra
#: sections (``launch``, ``fsdp``).
ZERO3_SECTIONS: dict[Engine, _Zero3Step] = {
    Engine.megatron: _megatron_fsdp,
    Engine.deepspeed: _deepspeed_zero3,
    Engine.fsdp: _fsdp_full_shard,
}


def _engine(
    row: dict[str, str], par: dict[str, Any], tr: dict[str, Any], n: int, gpn: int
) -> tuple[Engine, dict[str, Any]]:
    """The row's engine (Megatron-LM unless ``zero_stage`` is 3: :data:`ZERO3_ENGINES`) and
    the extra spec sections its ZeRO-3 step returns (:data:`ZERO3_SECTIONS`)."""
    if row.get("zero_stage") != "3":
        return Engine.megatron, {}
    fw = ((note(row, "framework") or "").lower().split() or [""])[0]
    par["zero_stage"] = 3  # Megatron-FSDP unless another framework ran it
    engine = ZERO3_ENGINES.get(fw, Engine.megatron)
    return engine, ZERO3_SECTIONS[engine](row, fw, par, tr, n, gpn)


def row_to_spec_reason(row: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """(spec dict, "") or (None, why the row cannot be built); see the module docstring."""
    model, why = _model(row)
    if model is None:
        return None, why
    gpu = gpu_of(row)
    if gpu is None:
        return None, f"unknown GPU type {row.get('gpu_type')!r}"
    prec = precision_of(row)
    if prec == "nvfp4" and gpu not in ("b200", *RACK_GPUS):
        return None, "NVFP4 needs Blackwell"
    seq, n = _int(row, "seq_len"), _int(row, "gpus")
    if not seq or not n:
        return None, "gpus or seq_len not published"
    lay = published_layout(row)
    model = {
        **model,
        "seq_length": seq,
        "max_position_embeddings": max(seq, model.get("max_position_embeddings") or 0),
    }
    model.pop("rope_scaling_factor", None)
    gpn = 4 if gpu in RACK_GPUS else 8
    if n % gpn:
        gpn = n
    par, why = _parallel(row, lay, n, model["num_layers"])
    if par is None:
        return None, why
    tr = _training(row, lay, par, prec)
    name = re.sub(r"[^a-z0-9.-]+", "-", model_key(row.get("model", ""))).strip("-.") or "run"
    cluster = _cluster(row, gpu, n, gpn)
    engine, sections = _engine(row, par, tr, n, gpn)
    spec = {
        "name": name,
        "engine": engine.value,
        "model": model,
        "cluster": cluster,
        "parallel": par,
        "training": tr,
        **sections,
    }
    return spec, ""


def row_to_spec(row: dict[str, str]) -> dict[str, Any] | None:
    """The row as a spec dict, or None (see :func:`row_to_spec_reason`)."""
    return row_to_spec_reason(row)[0]
