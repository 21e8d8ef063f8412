"""The Megatron-Core model-state bytes trainc counts per parameter
(:func:`trainc.compiler.estimate.memory.megatron_state_bytes`) against the buffers the real
megatron-core 0.16.1 DistributedDataParallel allocates for a reduced GPTModel on CPU
(``megatron_buffers_oracle.py``, run in a subprocess).

Scaling formula stated by the test: Megatron-Core's buffer holds ``N + pad`` elements, ``N`` the
parameter count trainc computes (:mod:`trainc.compiler.estimate.params`) and ``pad`` the
alignment padding of ``_ParamAndGradBuffer`` (each parameter starts at a multiple of 64
elements, each bucket ends at a multiple of ``lcm(dp, 128)`` with the distributed optimizer), so
``pad < 64 * tensors + lcm(dp, 128) * buckets`` elements. The buffer's bytes are exactly
``(N + pad) * bytes_per_element``: 4 (fp32 grads) with ``grad_reduce_in_fp32``, 2 without
(``main_grads_dtype: bf16``), 2 for the bf16 parameter buffer. At Llama 3 8B size (291 tensors)
the padding is under 20,000 elements, 1e-5 of the buffer; trainc counts ``N``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.oracles import run_json_oracle
from trainc.compiler.estimate.memory import megatron_state_bytes
from trainc.compiler.estimate.params import attention_params, mlp_params, norm_params
from trainc.schemas import StateDtype, TrainingSpec

pytest.importorskip("megatron.core")
pytestmark = [pytest.mark.differential, pytest.mark.slow, pytest.mark.worker]

ORACLE = Path(__file__).with_name("megatron_buffers_oracle.py")


@pytest.fixture(scope="module")
def measured() -> dict[str, int]:
    return run_json_oracle(ORACLE, timeout=300)


def _trainc_params() -> int:
    """The oracle's model (2 layers, h 64, 4 heads of 16, 2 groups, SwiGLU f 160, RMSNorm,
    vocab 1000, untied) counted with trainc's own formulas."""
    layer = attention_params(64, 4, 2, 16) + mlp_params(64, 160, True) + 2 * norm_params(64, False)
    return 2 * layer + 2 * 1000 * 64 + norm_params(64, False)


def test_parameter_count_matches(measured: dict[str, int]) -> None:
    assert _trainc_params() == measured["params"] == 214_336


@pytest.mark.parametrize("dtype, key", [(StateDtype.fp32, "fp32"), (StateDtype.bf16, "bf16")])
def test_grad_and_param_buffer_bytes(measured: dict[str, int], dtype: StateDtype, key: str) -> None:
    pb, gb, _ = megatron_state_bytes(TrainingSpec(global_batch_size=8, main_grads_dtype=dtype))
    numel = measured[f"grad_numel_{key}"]
    pad = numel - _trainc_params()
    assert 0 <= pad < 64 * measured["tensors"] + math.lcm(1, 128) * measured[f"buckets_{key}"]
    assert measured[f"grad_bytes_{key}"] == gb * numel
    assert measured[f"param_bytes_{key}"] == pb * numel
    assert (gb, pb) == ((4, 2) if key == "fp32" else (2, 2))
