"""The GPU profiles (``trainc/conf/gpu/*.yaml``) carry the architecture and the compute capability
that the low-precision recipe checks (TRC330, TRC370) read, so a new GPU is its profile and its
``Gpu`` enum member."""

from __future__ import annotations

from trainc.compiler.support.hardware import GPU_ARCH, GPUS
from trainc.schemas import Gpu


def test_the_recipe_checks_read_architecture_and_capability_from_the_profiles() -> None:
    # compute capabilities: https://developer.nvidia.com/cuda-gpus (A100 8.0, H100 / H200 / H800
    # 9.0, B200 / GB200 10.0); b300 and gb300 give none yet (the checks skip them, as custom)
    assert {
        Gpu.a100_40g: ("Ampere", (8, 0)),
        Gpu.a100_80g: ("Ampere", (8, 0)),
        Gpu.h100_80g: ("Hopper", (9, 0)),
        Gpu.h200: ("Hopper", (9, 0)),
        Gpu.h800: ("Hopper", (9, 0)),
        Gpu.b200: ("Blackwell", (10, 0)),
        Gpu.gb200: ("Blackwell", (10, 0)),
    } == GPU_ARCH


def test_a_profile_gives_both_or_neither() -> None:
    for gpu, profile in GPUS.items():
        given = (profile.architecture is not None, profile.compute_capability is not None)
        assert given in ((True, True), (False, False)), gpu
