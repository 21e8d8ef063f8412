"""GPU profiles: what ``cluster.gpu: NAME`` fills in when the cluster fields are left null, the
kernel-level figures the time model reads (peak per precision, HBM bandwidth, SM count,
achievable fractions), and the architecture and compute capability the low-precision recipe
checks read.

The profiles are data: ``trainc/conf/gpu/NAME.yaml``, one per :class:`~trainc.schemas.Gpu`
value (a new GPU is that file and the enum member), each with its sources in a comment (vendor
data sheets for the peaks, bandwidths and capacities; the efficiency fractions are fitted once on
published runs, docs/performance.md).
Peaks are dense (not sparse) tensor-core TFLOP/s; NVLink bandwidth per GPU one direction (half the
bidirectional figure NVIDIA quotes); the scale-out NIC per GPU one direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from trainc.schemas import Gpu


@dataclass(frozen=True, slots=True)
class GpuPreset:
    """Hardware of one GPU model (units in the field names)."""

    memory_gib: float
    peak_tflops: float
    """Dense BF16 tensor-core peak (TFLOP/s)."""
    intra_node_bandwidth_gbps: float
    inter_node_bandwidth_gbps: float
    nvlink_domain_size: int | None = None  # None: the node (gpus_per_node)
    peaks: dict[str, float] = field(default_factory=dict)
    """Dense peak per GEMM precision (``bf16``, ``fp8``, ``fp4``; TFLOP/s). A missing key: the
    GPU has no tensor cores for it (A100: no FP8), the GEMM runs at the BF16 peak."""
    memory_bandwidth_gbps: float = 3350.0
    """HBM bandwidth (GB/s = 1e9 B/s)."""
    sm_count: int = 132
    """Streaming multiprocessors: the GEMM wave size (tiles run one per SM at a time)."""
    gemm_efficiency: dict[str, float] = field(default_factory=lambda: {"bf16": 0.8})
    """Fraction of the precision's peak a large, well-shaped GEMM reaches (the roofline's
    compute ceiling); shapes lower it further (wave and tile quantization, memory bound)."""
    attention_efficiency: float = 0.55
    """Fraction of the BF16 peak fused (flash) attention reaches, forward + backward, at long
    sequences (``s / (s + 512)`` of it at ``s`` keys): Transformer Engine's fused attention
    (cuDNN on Hopper and Blackwell), what engine=megatron and engine=deepspeed run."""
    sdpa_attention_efficiency: float | None = None
    """The same for PyTorch's ``scaled_dot_product_attention`` (its flash backend is
    FlashAttention-2), what engine=fsdp (the trainc worker's model, torchtitan) runs; None:
    as ``attention_efficiency`` (A100, where FlashAttention-2 is the fast kernel)."""
    memory_efficiency: float = 0.8
    """Fraction of HBM bandwidth element-wise and normalisation kernels reach."""
    architecture: str | None = None
    """NVIDIA's architecture name (``Ampere``, ``Hopper``, ``Blackwell``); None: not given."""
    compute_capability: tuple[int, int] | None = None
    """(major, minor), as ``torch.cuda.get_device_capability`` reports it and Transformer
    Engine's recipe checks compare it (https://developer.nvidia.com/cuda-gpus); None: not
    given, and the checks that need it skip the GPU as they skip ``custom``."""


def _conf() -> Path:
    return Path(str(resources.files("trainc") / "conf" / "gpu"))


def load_profile(path: Path) -> GpuPreset:
    """One ``conf/gpu/*.yaml`` profile."""
    # libyaml's parser when PyYAML has it (the same values, ~10x faster than the pure-Python one)
    d = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    peaks = {k: float(v) for k, v in d["peak_tflops"].items()}
    return GpuPreset(
        memory_gib=float(d["memory_gib"]),
        peak_tflops=peaks["bf16"],
        intra_node_bandwidth_gbps=float(d["intra_node_bandwidth_gbps"]),
        inter_node_bandwidth_gbps=float(d["inter_node_bandwidth_gbps"]),
        nvlink_domain_size=d.get("nvlink_domain_size"),
        peaks=peaks,
        memory_bandwidth_gbps=float(d["memory_bandwidth_gbps"]),
        sm_count=int(d["sm_count"]),
        gemm_efficiency={k: float(v) for k, v in d["gemm_efficiency"].items()},
        attention_efficiency=float(d["attention_efficiency"]),
        sdpa_attention_efficiency=(
            None
            if d.get("sdpa_attention_efficiency") is None
            else float(d["sdpa_attention_efficiency"])
        ),
        memory_efficiency=float(d["memory_efficiency"]),
        architecture=d.get("architecture"),
        compute_capability=_capability(d.get("compute_capability")),
    )


def _capability(text: str | None) -> tuple[int, int] | None:
    """``"9.0"`` -> ``(9, 0)``; None stays None."""
    if text is None:
        return None
    major, minor = str(text).split(".")
    return int(major), int(minor)


def _load_all() -> dict[Gpu, GpuPreset]:
    out = {}
    for g in Gpu:
        path = _conf() / f"{g.value}.yaml"
        if path.exists():
            out[g] = load_profile(path)
    return out


GPUS: dict[Gpu, GpuPreset] = _load_all()

#: GPU profile -> (architecture, compute capability) as Transformer Engine checks it, for the
#: profiles that give both (``architecture`` and ``compute_capability`` in the YAML).
GPU_ARCH: dict[Gpu, tuple[str, tuple[int, int]]] = {
    g: (p.architecture, p.compute_capability)
    for g, p in GPUS.items()
    if p.architecture is not None and p.compute_capability is not None
}

#: the profile a ``custom`` GPU gets for the figures the cluster section does not carry (an
#: H100-like part scaled to the spec's ``peak_tflops``: FP8 = 2x, FP4 = 4x BF16)
GENERIC = GpuPreset(
    80,
    989,
    450,
    50,
    peaks={"bf16": 989, "fp8": 1979, "fp4": 3958},
    gemm_efficiency={"bf16": 0.8, "fp8": 0.7, "fp4": 0.6},
)
