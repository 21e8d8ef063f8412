"""TRC4xx, resource fit: checks on the estimates (memory, bubble, step time, host memory)."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

MEMORY_FIT = Rule(
    id="TRC401",
    name="memory-fits-gpu",
    summary=(
        "estimated memory per GPU must not exceed gpu_memory_gib minus memory_reserve_gib by more "
        "than the memory model's error margin (a sure out-of-memory)"
    ),
    source="trainc estimates",
)

BUBBLE_HIGH = Rule(
    id="TRC402",
    name="pipeline-bubble-high",
    summary="the pipeline bubble exceeds 25 % of the step",
    severity=Severity.warning,
    source="trainc estimates",
)

MEMORY_TIGHT = Rule(
    id="TRC403",
    name="memory-tight",
    summary=(
        "estimated memory per GPU is within the memory model's error margin of the budget: it may "
        "or may not fit"
    ),
    severity=Severity.warning,
    source="trainc estimates",
)

STEP_TIME_LIMIT = Rule(
    id="TRC404",
    name="step-vs-time-limit",
    summary=(
        "one step must finish well inside launch.time_limit: before the limit at all, and within "
        "the lead at which Slurm signals the checkpoint (SIGUSR1)"
    ),
    severity=Severity.warning,
    source="trainc estimates; Slurm sbatch --time and --signal (the generated sbatch.sh)",
)

HOST_MEMORY_FIT = Rule(
    id="TRC420",
    name="host-memory-fits-offload",
    summary=(
        "the optimizer / parameter states offloaded to the CPU by the GPUs of one node must fit "
        "host_memory_gib (a sure host out-of-memory otherwise)"
    ),
    engines={Engine.megatron: Severity.na},
    source=(
        "deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs and "
        "stage_1_and_2.py estimate_zero2_model_states_mem_needs (0.19.8); DeepSpeed #4867; "
        "torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy (torch 2.13)"
    ),
)

HOST_MEMORY_TIGHT = Rule(
    id="TRC421",
    name="host-memory-tight",
    summary=(
        "the offloaded states fit host_memory_gib, but not with a 1.5x buffer factor (DeepSpeed's) "
        "for pinned buffers and the CPU optimizer: the host may run out of memory"
    ),
    severity=Severity.warning,
    engines={Engine.megatron: Severity.na},
    source=(
        "deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs "
        "additional_buffer_factor=1.5 (0.19.8)"
    ),
)

#: the family: its id ranges and, explicitly, its rules
FIT = Family(
    name="fit",
    ids=(range(400, 500),),
    about="checks on the estimates",
    rules=(
        MEMORY_FIT,
        BUBBLE_HIGH,
        MEMORY_TIGHT,
        STEP_TIME_LIMIT,
        HOST_MEMORY_FIT,
        HOST_MEMORY_TIGHT,
    ),
)
