"""Count the tensors the real megatron-core 0.16.1 transformer layers save for backward (local
layer spec, CPU, fp32, gloo, world size 1) and print them, as one JSON line, per recompute mode.

Run in a subprocess by ``test_megatron_activations.py`` (it initialises torch.distributed).
A two-layer ``TransformerBlock`` (``post_process=False``: no final norm) runs one forward and
backward on a ``[s, b, h]`` input that requires grad, with a causal boolean mask, inside
``torch.autograd.graph.saved_tensors_hooks``. Every saved tensor is recorded once per storage
(``untyped_storage().data_ptr()``; views such as the Q, K, V slices of the QKV output count
once, with the storage's ``nbytes()``), under the innermost module whose forward was running
(module pre/post hooks), and with its phase: ``F`` saved in the forward, ``R`` saved again in
the backward by a recompute (``CheckpointFunction.backward`` re-runs the forward). Parameters
and views of them are skipped (weights are not activations). The hook keeps a reference to
every saved tensor, so a freed storage's address is never reused within a run.

CPU-only changes, none of which alters what is saved: ``torch.cuda.current_device`` is
pointed at ``"cpu"`` (the global memory buffer the attention scores are computed into, not
saved); the CUDA RNG tracker's ``fork`` and the checkpoint's RNG-state capture and restore
are no-ops (dropout is 0, nothing draws random numbers); the JIT fuser is off
(``megatron.core.jit.disable_jit_fuser``), so the fused SwiGLU's autograd function
(``fusions/fused_bias_swiglu.py`` ``SwiGLUFunction``, which saves only its input) runs
eagerly instead of through ``torch.compile``.

Usage: ``python megatron_activations_oracle.py PORT CONFIG...``, each ``CONFIG`` ``gpt`` (MHA,
GELU, ``f = 4h``) or ``gqa_swiglu`` (2 query groups, SwiGLU, the fused SwiGLU); sizes
``SIZES[CONFIG]``, sequence ``SEQ``, micro batch ``MICRO_BATCH``, ``LAYERS`` layers, LayerNorm
(``torch.nn.LayerNorm``: it saves its input, mean and rstd), no biases. Output:
``{config: {mode: [{phase, module, nbytes, shape, dtype}, ...]}}`` in save order.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

SEQ, MICRO_BATCH, LAYERS = 32, 2, 2
SIZES: dict[str, dict[str, Any]] = {
    "gpt": dict(hidden_size=64, num_attention_heads=4, num_query_groups=4, ffn_hidden_size=256),
    "gqa_swiglu": dict(
        hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=160
    ),
}
MODES: dict[str, dict[str, Any]] = {
    "none": {},
    "selective": dict(recompute_granularity="selective"),
    "full_uniform_1": dict(
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1
    ),
    "full_uniform_2": dict(
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=2
    ),
    "full_block_1": dict(
        recompute_granularity="full", recompute_method="block", recompute_num_layers=1
    ),
}


def _cpu_only() -> None:
    if not torch.cuda.is_available():  # the attention's score buffer is allocated there
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    from megatron.core.tensor_parallel import random as mrandom

    tracker = mrandom.get_cuda_rng_tracker()
    tracker.fork = lambda *a, **k: contextlib.nullcontext()  # type: ignore[method-assign]
    mrandom._get_all_rng_states = lambda: ()  # type: ignore[assignment]
    mrandom._set_all_rng_states = lambda *a: None  # type: ignore[assignment]
    mrandom._fork_rng = contextlib.nullcontext  # type: ignore[assignment]


def measure(config: str, mode: str) -> list[dict[str, Any]]:
    """The saved storages of one forward + backward of the block (see the module docstring)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlock
    from megatron.core.transformer.transformer_config import TransformerConfig

    swiglu = config == "gqa_swiglu"
    cfg = TransformerConfig(
        num_layers=LAYERS,
        **SIZES[config],
        gated_linear_unit=swiglu,
        activation_func=torch.nn.functional.silu if swiglu else torch.nn.functional.gelu,
        bias_activation_fusion=swiglu,
        add_bias_linear=False,
        normalization="LayerNorm",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=torch.float32,
        use_cpu_initialization=True,
        **MODES[mode],
    )
    block = TransformerBlock(
        cfg, get_gpt_layer_local_spec(normalization="LayerNorm"), post_process=False
    )
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    stack = [""]
    for name, mod in block.named_modules():
        mod.register_forward_pre_hook(lambda m, a, n=name: stack.append(n))
        mod.register_forward_hook(lambda m, a, o: (stack.pop(), None)[1])
    phase = ["F"]
    seen: dict[int, dict[str, Any]] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if isinstance(t, torch.nn.Parameter) or ptr in params:
            return t
        keep.append(t)
        if ptr not in seen:
            seen[ptr] = dict(
                phase=phase[0],
                module=stack[-1],
                nbytes=t.untyped_storage().nbytes(),
                shape=list(t.shape),
                dtype=str(t.dtype).removeprefix("torch."),
            )
        return t

    h = SIZES[config]["hidden_size"]
    x = torch.randn(SEQ, MICRO_BATCH, h, requires_grad=True)
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), 1)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x, mask)
        phase[0] = "R"
        y.sum().backward()
    return list(seen.values())


def main(port: str, configs: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import megatron.core.jit

    megatron.core.jit.disable_jit_fuser()
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(1, 1)
    _cpu_only()
    torch.manual_seed(0)
    out = {c: {mode: measure(c, mode) for mode in MODES} for c in configs}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
