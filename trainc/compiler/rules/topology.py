"""TRC1xx, topology: the parallel grids against the cluster."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

WORLD_FACTORIZATION = Rule(
    id="TRC101",
    name="world-divisible-by-model-parallel",
    summary="world size must be a multiple of tp*pp*cp (Megatron initialize_model_parallel)",
    source="validate_args / parallel_state.initialize_model_parallel: world % (tp*pp*cp)",
)

DP_MISMATCH = Rule(
    id="TRC102",
    name="dp-matches-world",
    summary="a given dp must equal world / (tp*pp*cp)",
    source="validate_args: data_parallel_size = W/(tp*pp*cp)",
)

EP_COUNTED_IN_WORLD = Rule(
    id="TRC103",
    name="ep-not-a-world-factor",
    summary=(
        "EP does not multiply the world size in Megatron-Core; dp counts data-parallel replicas of "
        "the dense grid"
    ),
    source=(
        "parallel_state.initialize_model_parallel expert RankGenerator; worked example B "
        "(docs/references.md)"
    ),
)

EXPERT_GRID = Rule(
    id="TRC104",
    name="expert-grid-divisible",
    summary="world size must be a multiple of etp*ep*pp (Megatron expert rank generator)",
    engines={Engine.fsdp: Severity.na},
    source="parallel_state.initialize_model_parallel expert generator: world % (etp*ep*pp)",
)

TP_NVLINK = Rule(
    id="TRC105",
    name="tp-within-nvlink-domain",
    summary=(
        "tensor parallelism wider than the NVLink domain, or cut by a domain boundary (tp does not "
        "divide the domain, nor the Slurm segment), runs its all-reduces over the slow fabric"
    ),
    severity=Severity.warning,
    source=(
        "parallel_state.RankGenerator order tp-cp-ep-dp-pp (tp fastest); TP inside a node: "
        "Narayanan et al. 2021, arXiv:2104.04473 §3.3"
    ),
)

TP_CP_NVLINK = Rule(
    id="TRC106",
    name="tp-cp-within-nvlink-domain",
    summary=(
        "the tp*cp block wider than the NVLink domain, or cut by a domain boundary, runs "
        "context-parallel traffic over the fabric"
    ),
    severity=Severity.warning,
    source="parallel_state.RankGenerator order tp-cp-ep-dp-pp (tp, then cp, fastest)",
)

EP_NVLINK = Rule(
    id="TRC107",
    name="ep-within-nvlink-domain",
    summary=(
        "the etp*ep block wider than the NVLink domain, or cut by a domain boundary (etp*ep does "
        "not divide the domain, nor the Slurm segment), runs MoE all-to-all over the fabric"
    ),
    severity=Severity.warning,
    source=(
        "parallel_state.RankGenerator expert order; with the flex dispatcher: "
        "NVIDIA-NeMo/Megatron-Bridge#2883 (HybridEP limited to EP 8 on NVL8), "
        "deepseek-ai/DeepEP#411, NVIDIA/Megatron-LM#5039 (DeepEP internode hangs)"
    ),
)

WORLD_EXCEEDS_CLUSTER = Rule(
    id="TRC108",
    name="world-fits-cluster",
    summary="tp*pp*cp*dp must not exceed the cluster's GPUs",
    source="cluster size",
)

CLOCK_CAP = Rule(
    id="TRC109",
    name="clock-cap-fraction",
    summary="cluster.clock_cap is the sustained clock as a fraction of the profile's: 0 < x <= 1",
    source="cluster.clock_cap (nvidia-smi -pl / -lgc)",
)

#: the family: its id ranges and, explicitly, its rules
TOPOLOGY = Family(
    name="topology",
    ids=(range(100, 200),),
    about="the parallel grids against the cluster",
    rules=(
        WORLD_FACTORIZATION,
        DP_MISMATCH,
        EP_COUNTED_IN_WORLD,
        EXPERT_GRID,
        TP_NVLINK,
        TP_CP_NVLINK,
        EP_NVLINK,
        WORLD_EXCEEDS_CLUSTER,
        CLOCK_CAP,
    ),
)
