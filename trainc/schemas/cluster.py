"""``cluster:`` section: the machines the job runs on."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import Gpu, TimeModel


@dataclass(kw_only=True)
class ClusterSpec:
    """Nodes, GPUs and interconnect. A named ``gpu`` fills the hardware fields left null."""

    num_nodes: int
    """Nodes in the job (count). Required. world size = num_nodes x gpus_per_node."""
    gpus_per_node: int = 8
    """GPUs per node (count); torchrun's --nproc_per_node."""
    gpu: Gpu = Gpu.custom
    """GPU preset name (a100-40g, a100-80g, h100-80g, h200, h800, b200, b300, gb200, gb300,
    custom). A named GPU
    fills gpu_memory_gib, peak_tflops and the NVLink bandwidth; fields the spec sets override (the
    cluster presets leave them to the GPU, so ``cluster.gpu=a100-40g`` over ``dgx-h100`` gets the
    A100's 40 GiB and 312 TFLOP/s). Rules: TRC004."""
    gpu_memory_gib: float | None = None
    """HBM per GPU (GiB = 2**30 bytes). Default: from gpu."""
    peak_tflops: float | None = None
    """Dense bf16 peak per GPU (TFLOP/s = 1e12 FLOP/s). Default: from gpu."""
    nvlink_domain_size: int | None = None
    """GPUs sharing NVLink/NVSwitch (count): 8 on DGX/HGX, 72 on GB200 NVL72. Default:
    gpus_per_node. Rules: TRC105-TRC107."""
    intra_node_bandwidth_gbps: float | None = None
    """GB/s (1e9 bytes/s) per GPU, one direction, inside the NVLink domain. Default: from gpu."""
    inter_node_bandwidth_gbps: float | None = None
    """GB/s (1e9 bytes/s) per GPU, one direction, across the fabric (e.g. 25 for one 200 Gb/s
    HDR NIC per GPU). Default: from gpu."""
    compute_efficiency: float = 0.7
    """Fraction of peak_tflops that GEMM-heavy model compute achieves on large micro batches
    (estimates only). 0.7 reproduces Megatron-LM's published GPT-3 175B / 1T throughput
    (Narayanan et al. 2021, Table 1) within a few per cent; see gemm_half_efficiency_tokens."""
    time_model: TimeModel = TimeModel.kernels
    """Step-time model (estimates and planner): ``kernels`` times every GEMM of the layer from its
    shape after the TP/SP/EP/ETP split on the GPU profile (trainc/conf/gpu), fused attention,
    element-wise kernels by bytes moved, and hides communication per axis as the engines do
    (docs/performance.md); ``seed`` is the worked examples' model (docs/references.md):
    Megatron's FLOPs at compute_efficiency x peak_tflops x n / (n + gemm_half_efficiency_tokens)."""
    comm_efficiency: float = 0.8
    """Fraction of link bandwidth that collectives achieve (estimates only)."""
    comm_overlap: float = 0.0
    """Fraction of TP/CP/EP/DP communication hidden behind compute, in [0, 1] (estimates only)."""
    memory_reserve_gib: float = 4.0
    """GiB per GPU kept back for the CUDA context, NCCL buffers and allocator fragmentation; the
    fit check compares the estimate with gpu_memory_gib - memory_reserve_gib."""
    host_memory_gib: float | None = None
    """Host (CPU) memory per node available to the job (GiB = 2**30 bytes). null = not checked.
    With DeepSpeed optimizer / parameter offload to the CPU the offloaded states live there:
    TRC420 (a sure host out-of-memory), TRC421 (within DeepSpeed's 1.5x buffer factor)."""
    max_time_limit: str | None = None
    """The Slurm partition's MaxTime (``scontrol show partition``), in launch.time_limit's
    format ([D-]HH:MM:SS, minutes, or UNLIMITED), quoted in YAML. null = not checked. A
    launch.time_limit above it is refused by sbatch or pends indefinitely: TRC514 (with
    launch.requeue a job longer than MaxTime runs as several requeued segments). TRC502."""
    gemm_half_efficiency_tokens: int = 128
    """Tokens per GPU per micro batch (seq_length/cp x micro_batch_size) at which kernels reach
    half of compute_efficiency: small micro batches starve the GEMMs (estimates and planner use
    efficiency x n / (n + this)). A round figure chosen by trainc (with compute_efficiency 0.7 it
    keeps Narayanan et al. 2021 Table 1 within 10 %), not a measurement: override it with
    numbers from your own cluster."""
    layer_overhead_us: float = 40.0
    """Fixed time per layer per micro batch per pass (forward, backward) in microseconds: kernel
    launches and schedule bookkeeping that do not shrink with the work (estimates and planner)."""
    step_overhead_us: float = 0.0
    """Fixed host time per optimizer step in microseconds, on top of the per-layer cost: the
    training loop's Python between steps (zero_grad, loss logging, the optimizer's launch
    sequence) that nothing overlaps (estimates; the planner's fast model too). 0 = not counted;
    set it from a profile of your own job (one step's timeline minus its kernels)."""
    optimizer_step: bool = False
    """time_model=kernels: add the optimizer step's HBM time to every step (bytes per parameter
    this GPU updates over the HBM bandwidth; docs/performance.md). Off by default: the fitted GPU
    factors were fitted without it and absorb it (the pooled fidelity median worsens with it on).
    Estimates and the planner's fast model."""
    collective_latency: bool = False
    """time_model=kernels: every NCCL operation also pays NCCL's ring alpha-beta latency
    (``comm.collective_seconds``). Off by default (collectives timed by bytes over bandwidth), for
    the same reason as ``optimizer_step``. Estimates only."""
    clock_cap: float = 1.0
    """Sustained tensor-core clock as a fraction of the GPU profile's (0 < x <= 1): a power cap
    (``nvidia-smi -pl``) or a clock lock (``nvidia-smi -lgc``) below the boost clock the profile's
    peaks assume. Scales every precision's peak FLOP/s (estimates and planner); HBM and
    interconnect bandwidths are unchanged. Rules: TRC109."""
    sharp: bool = False
    """The scale-out fabric reduces in the network (InfiniBand SHARP through NCCL's CollNet /
    NVLS-SHARP plugins, ``NCCL_COLLNET_ENABLE=1``): a data-parallel all-reduce or reduce-scatter
    that leaves the NVLink domain sends each byte once to the switch instead of the ring's
    twice, so its inter-node bytes are halved (estimates and planner)."""

    gemm_efficiency: float | None = None
    """time_model=kernels: fraction of the BF16 peak a large, well-shaped BF16 GEMM reaches (the
    roofline's compute ceiling; shapes lower it further). Default: the GPU profile's
    ``gemm_efficiency.bf16`` (trainc/conf/gpu). ``trainc calibrate`` fits it."""
    fp8_gemm_efficiency: float | None = None
    """time_model=kernels: the same for FP8 GEMMs (fraction of the FP8 peak). Default: the GPU
    profile's ``gemm_efficiency.fp8`` (its BF16 figure on a GPU without FP8 tensor cores)."""
    attention_efficiency: float | None = None
    """time_model=kernels: fraction of the BF16 peak fused (flash) attention reaches at long
    sequences. Default: the GPU profile's ``attention_efficiency``."""
    moe_layer_overhead_us: float | None = None
    """time_model=kernels: fixed cost per MoE layer per pass in microseconds (dropless routing's
    host sync, routing and permutation launches). Default: 600 (kernels.MOE_LAYER_OVERHEAD_US)."""

    step_time_p10_ratio: float | None = None
    """Calibrated band of the step-time estimate: the 10th percentile of measured / estimated
    step time over the runs ``trainc calibrate`` fitted (a ratio; with step_time_p90_ratio the
    estimates carry a p10-p90 range and the planner's tie band is half its width). null = not
    calibrated."""
    step_time_p90_ratio: float | None = None
    """The 90th percentile of measured / estimated step time (see step_time_p10_ratio)."""

    flash_attention: bool = True
    """Estimates only: attention kernels do not keep the s x s score matrix (FlashAttention /
    cuDNN fused attention, Megatron-Core's default through Transformer Engine), so activation
    memory without recompute has no ``5 a s^2 b`` term (only fp32 softmax statistics). false =
    Korthikanti et al. 2022's unfused attention (``5 a s^2 b`` bytes per layer and micro-batch
    with attention dropout, ``2 a s^2 b`` without: the softmax output alone). fp32 compute runs
    the unfused attention whatever this says (the fused kernels take 16-bit inputs)."""
