"""GPU presets: what ``cluster.gpu: NAME`` fills in when the cluster fields are left null.

Figures are the vendors' published numbers: HBM capacity (GiB as printed on the data sheet),
dense (not sparse) BF16 tensor-core peak, NVLink bandwidth per GPU one direction (half of the
bidirectional figure NVIDIA quotes), and the usual scale-out NIC per GPU (one direction).
Sources: NVIDIA A100 data sheet (2021), H100 data sheet (2023), H200 product brief (2024),
H800 (China-market H100 variant, NVLink 400 GB/s bidirectional), DGX B200 data sheet (2024),
GB200 NVL72 data sheet (2024).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas import Gpu


@dataclass(frozen=True, slots=True)
class GpuPreset:
    """Hardware defaults of one GPU model (units in the field names)."""

    memory_gib: float
    peak_tflops: float
    intra_node_bandwidth_gbps: float
    inter_node_bandwidth_gbps: float
    nvlink_domain_size: int | None = None  # None: the node (gpus_per_node)


GPUS: dict[Gpu, GpuPreset] = {
    # A100 SXM: 312 TFLOPS dense BF16; NVLink3 600 GB/s bidirectional; 8x HDR 200 Gb/s per DGX.
    Gpu.a100_40g: GpuPreset(40, 312, 300, 25),
    Gpu.a100_80g: GpuPreset(80, 312, 300, 25),
    # H100 SXM: 989 TFLOPS dense BF16; NVLink4 900 GB/s bidirectional; 8x NDR 400 Gb/s per DGX.
    Gpu.h100_80g: GpuPreset(80, 989, 450, 50),
    # H200 SXM: 141 GB HBM3e, same compute and NVLink as H100.
    Gpu.h200: GpuPreset(141, 989, 450, 50),
    # H800 SXM: H100 compute, NVLink cut to 400 GB/s bidirectional.
    Gpu.h800: GpuPreset(80, 989, 200, 50),
    # B200 (DGX B200): 180 GB, 2.25 PFLOPS dense BF16, NVLink5 1.8 TB/s bidirectional.
    Gpu.b200: GpuPreset(180, 2250, 900, 50),
    # GB200 NVL72: 186 GB per GPU, 2.5 PFLOPS dense BF16, one 72-GPU NVLink domain.
    Gpu.gb200: GpuPreset(186, 2500, 900, 50, nvlink_domain_size=72),
    # GB300 NVL72 (Blackwell Ultra): 279 GB HBM3e per GPU, 2.5 PFLOPS dense BF16, one 72-GPU
    # NVLink domain, ConnectX-8 800 Gb/s per GPU.
    Gpu.gb300: GpuPreset(279, 2500, 900, 100, nvlink_domain_size=72),
}
