"""Published training runs (a CSV with the columns of ``shared/calibration/published_runs.csv``)
as trainc specs.

The one place that turns a row of the published-runs table into a spec, shared by ``trainc
calibrate``'s CSV input, ``bench/planner_fidelity.py`` (is the published layout in the planner's
top 5?) and ``bench/fidelity.py`` (estimate vs measured); ``bench/published.py`` re-exports it.

* :func:`load_rows` reads the CSV (empty cell = not published = ``""``).
* :func:`row_to_spec` builds the spec as a plain dict for trainc's loader (write it as YAML and
  ``load_spec`` it; it has a ``defaults:`` list naming trainc's bundled presets), or None when the
  row cannot be built; :func:`row_to_spec_reason` says why.
* :func:`published_layout` is the row's layout (tp, pp, vpp, cp, ep, dp, micro batch).

Model: the row's architecture columns (layers, hidden, heads, kv_heads, ffn_hidden, vocab,
experts, topk) override the bundled model preset whose name matches the row's model name
(:data:`MODEL_PRESETS`); a row whose model has no preset and no complete architecture is skipped.
For MoE rows the table's ``ffn_hidden`` is the routed expert width (DeepSeek-V3: 2048), so it sets
``moe_ffn_hidden_size``. Cluster: :data:`CLUSTERS` maps the ``gpu_type`` column to a cluster preset
(and a GPU preset when the machine's GPU differs from the preset's); GPU types trainc has no
preset for (GB300) are skipped. Precision: the table's FP8 runs are planned in bf16 (trainc's
time model has no FP8 throughput term); the layout comparison is relative, the measured TFLOP/s
are not comparable with a bf16 estimate without a calibrated compute_efficiency.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

#: Normalized model name (lower case, ``_`` -> ``-``, suffix in parentheses dropped) -> bundled
#: model preset (trainc/conf/model). Llama 3 405B is Llama 3.1 405B's architecture.
MODEL_PRESETS = {
    "gpt3-175b": "gpt3-175b",
    "llama2-7b": "llama2-7b",
    "llama2-13b": "llama2-13b",
    "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b",
    "llama3-70b": "llama3-70b",
    "llama3-405b": "llama3.1-405b",
    "llama3.1-405b": "llama3.1-405b",
    "deepseekv3": "deepseek-v3-like",
    "mixtral-8x7b": "mixtral-8x7b",
}

#: Substring of ``gpu_type`` (first match wins) -> (cluster preset, GPU preset or None, GPUs per
#: node). DGX-GB200 runs are counted in 4-GPU compute trays inside the 72-GPU NVLink domain.
CLUSTERS: tuple[tuple[str, str, str | None, int], ...] = (
    ("GB300", "", None, 0),
    ("GB200", "gb200-nvl72", None, 4),
    ("B200", "dgx-h100", "b200", 8),
    ("H200", "dgx-h200", None, 8),
    ("H800", "hgx-h800", None, 8),
    ("H100", "dgx-h100", None, 8),
    ("A100", "dgx-a100-80g", None, 8),
)

_ARCH = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
         "kv_heads": "num_query_groups", "ffn_hidden": "ffn_hidden_size", "vocab": "vocab_size",
         "experts": "num_experts", "topk": "moe_router_topk"}
_REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")


def load_rows(path: str | Path) -> list[dict[str, str]]:
    """The table's rows as dicts of column -> text (stripped; empty = not published)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (v or "").strip() for k, v in row.items()} for row in csv.DictReader(f)]


def _int(row: dict[str, str], col: str) -> int | None:
    v = row.get(col, "")
    if not v:
        return None
    try:
        return int(float(v))
    except ValueError:
        return None


def model_key(name: str) -> str:
    """``'DeepSeekV3 (w/o MTP)'`` -> ``'deepseekv3'``; ``'LLAMA3.1_405B'`` ->
    ``'llama3.1-405b'``."""
    return re.sub(r"\(.*?\)", "", name).strip().lower().replace("_", "-").replace(" ", "-")


def published_layout(row: dict[str, str]) -> dict[str, int | None]:
    """The row's layout: tp, pp, vpp, cp, ep (empty = 1), dp and micro_batch (None if empty)."""
    one = {k: _int(row, k) or 1 for k in ("tp", "pp", "vpp", "cp", "ep")}
    return {**one, "dp": _int(row, "dp"), "micro_batch": _int(row, "micro_batch")}


def row_to_spec_reason(row: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """(spec dict, "") or (None, why the row cannot be built)."""
    gpus, gbs, seq = _int(row, "gpus"), _int(row, "global_batch"), _int(row, "seq_len")
    if not gpus or not gbs or not seq:
        return None, "gpus, global_batch or seq_len not published"
    cluster = next(((c, g, n) for key, c, g, n in CLUSTERS if key in row.get("gpu_type", "")),
                   None)
    if cluster is None or not cluster[0]:
        return None, f"no cluster preset for gpu_type {row.get('gpu_type')!r}"
    preset, gpu, per_node = cluster
    if gpus % per_node:
        return None, f"{gpus} GPUs is not whole {per_node}-GPU nodes"
    mpreset = MODEL_PRESETS.get(model_key(row.get("model", "")))
    arch = {key: _int(row, col) for col, key in _ARCH.items() if _int(row, col)}
    moe = bool(arch.get("num_experts"))
    if moe and "ffn_hidden_size" in arch:  # the table's ffn_hidden of an MoE row: expert width
        arch["moe_ffn_hidden_size"] = arch.pop("ffn_hidden_size")
    if mpreset is None and (moe or not all(k in arch for k in _REQUIRED)):
        return None, f"model {row.get('model')!r}: no bundled preset and no complete architecture"
    model: dict[str, Any] = {} if mpreset else {
        "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
        "vocab_size": 128256, "untie_embeddings_and_output_weights": True}
    model.update(arch)
    model["seq_length"] = seq
    model["max_position_embeddings"] = seq
    defaults: list[Any] = [{"cluster": preset}]
    if mpreset:
        defaults.insert(0, {"model": mpreset})
    defaults.append("_self_")
    cl: dict[str, Any] = {"num_nodes": gpus // per_node}
    if gpu:
        cl["gpu"] = gpu
    spec: dict[str, Any] = {
        "defaults": defaults,
        "name": re.sub(r"[^a-z0-9.-]+", "-", model_key(row.get("model", "run"))).strip("-")
        or "run",
        "model": model,
        "cluster": cl,
        "training": {"global_batch_size": gbs},
    }
    return spec, ""


def row_to_spec(row: dict[str, str]) -> dict[str, Any] | None:
    """The row as a spec dict for trainc's loader, or None (see :func:`row_to_spec_reason`)."""
    return row_to_spec_reason(row)[0]


def layout_overrides(row: dict[str, str]) -> dict[str, Any]:
    """The published layout as spec keys (``parallel``/``training`` sections) for estimating the
    run as published: tp, pp, vpp, cp, ep and the micro batch when published."""
    lay = published_layout(row)
    par: dict[str, Any] = {k: lay[k] for k in ("tp", "pp", "vpp", "cp", "ep")}
    if par["tp"] > 1:
        par["sequence_parallel"] = True
    out: dict[str, Any] = {"parallel": par}
    if lay["micro_batch"]:
        out["training"] = {"micro_batch_size": lay["micro_batch"]}
    return out
