"""Published training runs (``../shared/calibration/published_runs.csv`` or any CSV with the same
columns) -> trainc specs.

``load_rows(path)`` reads the CSV; ``row_to_spec(row)`` returns ``(spec dict, reason)``: the spec
as the dict a trainc YAML file would compose to (no ``defaults``), or ``None`` with the reason the
row cannot be expressed. ``measured_tokens_per_gpu(row)`` is the published throughput in tokens/s
per GPU: the printed figure where the source prints it, else the model TFLOP/s converted with the
source's FLOP convention (Megatron's ``num_floating_point_operations``, which is what trainc's
``flops_per_step`` computes).

Conversion choices (each is a guess where the table is silent; ``notes`` of the row says so):

* architecture: the row's columns, else a preset in ``trainc/conf/model`` with the same name,
  else :data:`bench.archs.ARCHS`, else skipped;
* precision: ``precision=`` in ``notes``: BF16; FP8 / FP8 hybrid (Transformer Engine delayed
  scaling, NeMo <= 24.x); FP8-CS (current scaling = Megatron ``tensorwise``); FP8-MX / MXFP8
  (``mxfp8``); NVFP4 (``fp4_format=e2m1``); "not stated (FP8 variants)" -> FP8-CS;
* recompute: none (the Megatron-Bridge performance recipes train without full recompute; the
  table does not transcribe their per-module recompute lists);
* Megatron-FSDP rows (``zero_stage`` 3 / ``FSDP_col`` > 0) are compiled as engine=deepspeed ZeRO-3,
  the same sharding (parameters, gradients and optimizer state over DP);
* a missing global batch (long-sequence table) is ``8 x dp`` sequences, micro batch 1;
* MoE rows fold EP into DP (Megatron's parallel folding): ``ep`` may exceed ``dp``; the expert
  tensor-parallel size is 1 (Megatron-Bridge MoE recipes).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import yaml

from bench.archs import ARCHS, UNSUPPORTED

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT.parent / "shared" / "calibration" / "published_runs.csv"
if not DEFAULT_CSV.exists():
    DEFAULT_CSV = Path("/work/shared/calibration/published_runs.csv")
PRESETS = ROOT / "trainc" / "conf" / "model"

_PRESET_ALIASES = {
    "llama2-7b": "llama2-7b", "llama2-13b": "llama2-13b", "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b", "llama3-70b": "llama3-70b", "llama3.1-405b": "llama3.1-405b",
    "llama3-405b": "llama3.1-405b", "deepseekv3": "deepseek-v3-like",
    "mixtral-8x7b": "mixtral-8x7b",
}


def load_rows(path: str | Path = DEFAULT_CSV) -> list[dict[str, str]]:
    """The CSV's rows as dicts (column -> text, '' when not published)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def model_key(name: str) -> str:
    """'LLAMA3.1_405B' -> 'llama3.1-405b'; '(tokendrop)'-style suffixes are dropped.

    >>> model_key("Qwen3_30B_a3B (tokendrop)"), model_key("DeepSeekV3 (w/o MTP)")
    ('qwen3-30b-a3b', 'deepseekv3')
    """
    base = re.sub(r"\s*\(.*\)\s*$", "", name).strip().lower()
    return re.sub(r"[\s_]+", "-", base)


def note(row: dict[str, str], key: str) -> str | None:
    """``key=value`` from the row's notes."""
    m = re.search(rf"{re.escape(key)}=([^;]+)", row.get("notes", ""))
    return m.group(1).strip() if m else None


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


def gpu_of(row: dict[str, str]) -> str | None:
    """trainc ``cluster.gpu`` name of the row's system."""
    g = row["gpu_type"].upper()
    for key, name in (("GB300", "gb300"), ("GB200", "gb200"), ("B200", "b200"),
                      ("H100", "h100-80g"), ("H200", "h200"), ("A100", "a100-80g")):
        if key in g:
            return name
    return None


def _int(row: dict[str, str], key: str, default: int | None = None) -> int | None:
    v = row.get(key, "").strip()
    return int(float(v)) if v else default


def _arch(row: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    key = model_key(row["model"])
    if key in UNSUPPORTED:
        return None, UNSUPPORTED[key]
    base: dict[str, Any] | None = None
    src = ""
    if key in _PRESET_ALIASES:
        base = yaml.safe_load((PRESETS / f"{_PRESET_ALIASES[key]}.yaml").read_text())
        src = f"preset {_PRESET_ALIASES[key]}"
    elif key in ARCHS:
        base, src = dict(ARCHS[key][0]), f"bench/archs.py ({ARCHS[key][1]})"
    cols = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
            "kv_heads": "num_query_groups", "ffn_hidden": "ffn_hidden_size",
            "vocab": "vocab_size"}
    given = {f: _int(row, c) for c, f in cols.items() if row.get(c, "").strip()}
    if base is None:
        needed = {"num_layers", "hidden_size", "num_attention_heads", "vocab_size"}
        if not needed <= set(given) or row.get("experts", "").strip():
            return None, (f"architecture of {row['model']!r} not transcribed and not in "
                          "bench/archs.py")
        base, src = {}, "csv columns"
    if not base.get("num_experts"):  # the CSV's ffn column of MoE rows is the expert width
        base.update(given)
    if src == "csv columns" and key.startswith("gpt"):  # GPT-2/3 style (Brown et al. 2020)
        base.update(activation="gelu", normalization="layernorm", position_embedding="learned",
                    untie_embeddings_and_output_weights=False)
    return base, src


def row_to_spec(row: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """The trainc spec (composed dict) of one published run, or None and why not."""
    model, src = _arch(row)
    if model is None:
        return None, src
    gpu = gpu_of(row)
    if gpu is None:
        return None, f"unknown GPU type {row['gpu_type']!r}"
    prec = precision_of(row)
    if prec == "nvfp4" and gpu not in ("b200", "gb200", "gb300"):
        return None, "NVFP4 needs Blackwell"
    seq = _int(row, "seq_len")
    assert seq is not None
    n = _int(row, "gpus")
    assert n is not None
    tp, pp = _int(row, "tp", 1) or 1, _int(row, "pp", 1) or 1
    cp = _int(row, "cp", 1) or 1
    vpp = _int(row, "vpp", 1) or 1
    ep = _int(row, "ep", 1) or 1
    dp = n // (tp * pp * cp)
    mbs = _int(row, "micro_batch", 1) or 1
    gbs = _int(row, "global_batch") or 8 * dp * mbs
    model = dict(model)
    model["seq_length"] = seq
    model["max_position_embeddings"] = max(seq, model.get("max_position_embeddings") or 0)
    model.pop("rope_scaling_factor", None)
    # Megatron-FSDP (ZeRO-3 sharding) rows: compiled with Megatron's distributed optimizer (the
    # optimizer-state sharding part); the extra parameter all-gathers are not in those estimates
    fsdp = False
    gpn = 4 if gpu in ("gb200", "gb300") else 8
    if n % gpn:
        gpn = n
    spec: dict[str, Any] = {
        "name": "published",
        "engine": "deepspeed" if fsdp else "megatron",
        "model": model,
        "cluster": {"num_nodes": n // gpn, "gpus_per_node": gpn, "gpu": gpu,
                    # NVL72 racks run jobs on 64 of their 72 GPUs (16 trays; the rest spare)
                    "nvlink_domain_size": ((64 if n % 64 == 0 else 72)
                                           if gpu in ("gb200", "gb300") else gpn)},
        "parallel": {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp,
                     "sequence_parallel": tp > 1, "zero_stage": 3 if fsdp else 1},
        "training": {"micro_batch_size": mbs, "global_batch_size": gbs, "precision": "bf16",
                     "recompute": row.get("recompute", "").strip() or "none"},
    }
    if (row.get("zero_stage") or "").strip() == "0":
        spec["parallel"]["zero_stage"] = 0
    if note(row, "sequence_parallel") == "false":
        spec["parallel"]["sequence_parallel"] = False
    par = spec["parallel"]
    nl = model["num_layers"]
    if nl % (pp * vpp):  # Megatron-Bridge splits these with the embedding / loss counted as layers
        if (nl + 2) % (pp * vpp) == 0:
            par["account_for_embedding_in_pipeline_split"] = True
            par["account_for_loss_in_pipeline_split"] = True
        elif (nl + 1) % (pp * vpp) == 0:
            par["account_for_loss_in_pipeline_split"] = True
        else:  # an explicit first/last stage (Bridge's pipeline layout strings); one chunk
            vpp = 1
            mid = -(-nl // pp)
            rest = nl - (pp - 2) * mid
            if pp < 2 or rest < 2:
                return None, f"cannot split {nl} layers over pp={pp}"
            par["pipeline_first_stage_layers"] = rest // 2
            par["pipeline_last_stage_layers"] = rest - rest // 2
    if vpp > 1:
        par["vpp"] = vpp
    if ep > 1:
        spec["parallel"]["etp"] = 1
    tr = spec["training"]
    if prec.startswith("fp8") or prec == "mxfp8":
        tr["fp8_format"] = "hybrid"
        tr["fp8_recipe"] = {"fp8-delayed": "delayed", "fp8-cs": "tensorwise",
                            "mxfp8": "mxfp8"}[prec]
    elif prec == "nvfp4":
        tr["fp4_format"] = "e2m1"
    return spec, src


def _fsdp_col(row: dict[str, str]) -> int:
    v = (note(row, "FSDP_col") or "0").split()[0]
    return int(v) if v.isdigit() else 0


def measured_tokens_per_gpu(row: dict[str, str]) -> float | None:
    """Published tokens/s per GPU, if printed (``tokens_per_s_per_gpu=`` in notes)."""
    v = note(row, "tokens_per_s_per_gpu")
    m = re.match(r"[0-9.]+", v or "")
    return float(m.group(0)) if m else None


def measured_tflops(row: dict[str, str]) -> float | None:
    """Published model TFLOP/s per GPU (the source's own FLOP count)."""
    v = row.get("measured_tflops_per_gpu", "").strip()
    return float(v) if v else None


def source_short(row: dict[str, str]) -> str:
    """A short source label for per-source statistics."""
    s = row["source"]
    if "Megatron-Bridge" in s:
        c = note(row, "container") or ""
        return "bridge " + c.split()[0] if c else "bridge"
    if "long_sequence" in s:
        return "nemo long-seq"
    if "NeMo" in s:
        return "nemo 24.07"
    if "Megatron-LM" in s:
        return "megatron-lm"
    return " ".join(s.replace(",", "").split()[:2]).lower()
