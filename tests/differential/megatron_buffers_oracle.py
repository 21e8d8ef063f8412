"""Build a reduced Megatron-Core GPTModel (local layer spec, CPU, gloo, world size 1) and wrap it
in Megatron-Core's DistributedDataParallel, once with ``grad_reduce_in_fp32`` and once without;
print, as one JSON line, the parameter count and the bytes of the DDP parameter and gradient
buffers (``_ParamAndGradBuffer.param_data`` / ``grad_data``, megatron-core 0.16.1
``distributed/param_and_grad_buffer.py``).

Run in a subprocess by ``test_megatron_buffers.py`` (it initialises torch.distributed). The
buffers are allocated on ``torch.cuda.current_device()``; on a CPU-only machine that function is
pointed at ``"cpu"`` so the real allocation code runs on host memory (nothing else differs).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist


def main(port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(1, 1)
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not torch.cuda.is_available():
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    cfg = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=160,
        gated_linear_unit=True,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_cpu_initialization=True,
        add_bias_linear=False,
        normalization="RMSNorm",
    )
    out: dict[str, object] = {}
    for fp32 in (True, False):
        model = GPTModel(
            cfg,
            get_gpt_layer_local_spec(normalization="RMSNorm"),
            vocab_size=1000,
            max_sequence_length=128,
            position_embedding_type="rope",
            share_embeddings_and_output_weights=False,
        ).bfloat16()
        ddp = DistributedDataParallel(
            cfg,
            DistributedDataParallelConfig(grad_reduce_in_fp32=fp32, use_distributed_optimizer=True),
            model,
        )
        out["params"] = sum(p.numel() for p in model.parameters())
        out["tensors"] = sum(1 for _ in model.parameters())
        key = "fp32" if fp32 else "bf16"
        out[f"grad_bytes_{key}"] = sum(
            b.grad_data.numel() * b.grad_data.element_size() for b in ddp.buffers
        )
        out[f"grad_numel_{key}"] = sum(b.grad_data.numel() for b in ddp.buffers)
        out[f"param_bytes_{key}"] = sum(
            b.param_data.numel() * b.param_data.element_size()
            for b in ddp.buffers
            if b.param_data is not None
        )
        out[f"buckets_{key}"] = sum(len(b.buckets) for b in ddp.buffers)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
