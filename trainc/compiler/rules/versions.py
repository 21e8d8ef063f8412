"""TRC53x, versions and checkpoints: known-bad releases, version keys, checkpoint formats and
resume compatibility."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

KNOWN_BAD_VERSIONS = Rule(
    id="TRC530",
    name="known-bad-versions",
    summary=(
        "launch.versions (or the installed packages) match a known-bad combination of "
        "trainc/conf/known_bad_versions.yaml for a feature the job uses"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source="trainc/conf/known_bad_versions.yaml (each entry links its public report)",
)

VERSION_FORMAT = Rule(
    id="TRC531",
    name="version-key-format",
    summary=(
        "launch.versions keys are torch, cuda, nccl, transformer_engine, megatron_core, deepspeed, "
        "flash_attn; values are release numbers (2.4.0, 12.4, 0.14.4)"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source="trainc schema",
)

VERSION_TARGET = Rule(
    id="TRC532",
    name="version-below-target",
    summary=(
        "the engine library in launch.versions is older than the release trainc emits for "
        "(megatron-core 0.16.1, deepspeed 0.19.8): flags or config keys may not exist there"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source="trainc target_versions (plan.json)",
)

VERSION_CONTAINER = Rule(
    id="TRC539",
    name="version-container-conflict",
    summary=(
        "launch.versions names another release of a component than the one launch.container_image "
        "ships (trainc/conf/container_versions.yaml): the launch.versions value is the one checked"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source=(
        "trainc/conf/container_versions.yaml (NGC PyTorch / NeMo release notes and support tables; "
        "each image names its source)"
    ),
)

KNOWN_BAD_TARGET = Rule(
    id="TRC540",
    name="known-bad-target-version",
    summary=(
        "launch.versions (and a known container image) leave the engine library's release out, "
        "and the release trainc targets (megatron-core 0.16.1, deepspeed 0.19.8) is in a "
        "known-bad range of trainc/conf/known_bad_versions.yaml for a feature the job uses"
    ),
    severity=Severity.warning,
    engines={
        Engine.deepspeed: Severity.warning,
        Engine.megatron: Severity.warning,
        Engine.fsdp: Severity.na,
    },
    source=(
        "trainc/conf/known_bad_versions.yaml against trainc target_versions (plan.json; the "
        "worker runs megatron-core 0.16.1 and DeepSpeed 0.19.8)"
    ),
)

CKPT_FORMAT_RUNNER = Rule(
    id="TRC533",
    name="checkpoint-format-runner",
    summary=(
        "resume.checkpoint_format and resume.finetune are Megatron-LM's --ckpt-format / --finetune "
        "(entrypoint=megatron-lm); the trainc worker writes its own files, and torchtitan gets no "
        "resume.load_dir"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/training/arguments.py --ckpt-format (core_v0.16.x); "
        "trainc/launch/worker/checkpoint.py"
    ),
)

RESUME_LAYOUT = Rule(
    id="TRC534",
    name="resume-layout-change",
    summary=(
        "a parallel layout change on resume needs a format that reshards (torch_dist); legacy "
        "torch files, the trainc worker's files and DeepSpeed ZeRO shards load only into the "
        "layout that wrote them"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/training/checkpointing.py load_checkpoint (core_v0.16.x: legacy files per "
        "mp_rank); NVIDIA/Megatron-LM #296 (BC-053); DeepSpeed universal checkpoint "
        "(deepspeed/checkpoint/ds_to_universal.py, 0.19.8: tp slices merged only by the "
        "model's UNIVERSAL_CHECKPOINT_INFO patterns; deepspeedai/DeepSpeed #6503)"
    ),
)

RESUME_VOCAB = Rule(
    id="TRC535",
    name="resume-vocab-padding",
    summary=(
        "the padded vocabulary (embedding rows) must equal the saved one: it depends on tp and "
        "make_vocab_size_divisible_by"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/training/tokenizer vocab_size_with_padding (core_v0.16.x); "
        "THUDM/Chinese-Transformer-XL #3 (BC-051)"
    ),
)

RESUME_ARCH = Rule(
    id="TRC536",
    name="resume-architecture",
    summary=(
        "layers, widths, heads, experts, learned positions and embedding tying must match the "
        "checkpoint (global shape mismatch on load)"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/core/dist_checkpointing (global shape check, 0.16.1); NVIDIA-NeMo/Speech #10715 "
        "(BC-055)"
    ),
)

RESUME_SCHEDULE = Rule(
    id="TRC537",
    name="resume-batch-schedule",
    summary=(
        "resuming (not finetune) with another global batch, schedule or iteration count changes "
        "the learning-rate schedule and the data order mid-run"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source=(
        "megatron/core/optimizer_param_scheduler.py (consumed samples drive the lr, 0.16.1); "
        "megatron/training/checkpointing.py --finetune"
    ),
)

RESUME_OPTIMIZER = Rule(
    id="TRC538",
    name="resume-optimizer",
    summary=(
        "the optimizer state in the checkpoint belongs to the saved optimizer (and ZeRO stage); "
        "another one needs resume.finetune"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/training/checkpointing.py load_checkpoint --no-load-optim / --finetune "
        "(core_v0.16.x); deepspeed/runtime/engine.py load_checkpoint (0.19.8)"
    ),
)

#: the family: its id ranges and, explicitly, its rules
VERSIONS = Family(
    name="versions",
    ids=(range(530, 600),),
    about="versions, checkpoint formats and resume compatibility",
    rules=(
        KNOWN_BAD_VERSIONS,
        VERSION_FORMAT,
        VERSION_TARGET,
        VERSION_CONTAINER,
        KNOWN_BAD_TARGET,
        CKPT_FORMAT_RUNNER,
        RESUME_LAYOUT,
        RESUME_VOCAB,
        RESUME_ARCH,
        RESUME_SCHEDULE,
        RESUME_OPTIMIZER,
    ),
)
