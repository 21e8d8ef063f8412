"""The transformer the FSDP2 worker trains: a plain-torch decoder with the plan's shape and
options (the same ``engines.megatron_core`` TransformerConfig / GPTModel values Megatron-Core
builds from), written so that ``fully_shard`` wraps each :class:`Block` and DTensor's
``parallelize_module`` shards it (:func:`tp_plan`).

Layer math follows Megatron-Core's GPT (``megatron/core/models/gpt/gpt_model.py``, 0.16.1):
pre-norm blocks ``x + attn(norm(x))``, ``x + mlp(norm(x))``; RMSNorm or LayerNorm with
``layernorm_epsilon``; rotary embeddings over ``rotary_percent`` of each head (base
``rotary_base``; Llama 3.1 frequency scaling with ``rope_scaling``: factor, low 1, high 4,
original length 8192, as ``megatron/core/models/common/embeddings/rope_utils``); SwiGLU
(``gated_linear_unit`` with silu) or GELU MLP; grouped-query attention (``num_query_groups``);
causal SDPA; hidden dropout after attention and MLP; tied or untied output layer; a final norm.
Initial weights are drawn per global parameter name (:func:`deterministic_init`), so every
layout starts from the same model.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainc.launch.shrink import Dims


class Norm(nn.Module):
    """RMSNorm (weight only) or LayerNorm (weight and bias), normalising the last dim."""

    def __init__(self, dim: int, eps: float, rms: bool) -> None:
        super().__init__()
        self.eps, self.rms = eps, rms
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = None if rms else nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rms:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def rope_frequencies(dim: int, seq: int, base: float, scaling: float | None) -> torch.Tensor:
    """[seq, dim // 2] rotation angles (radians) for ``dim`` rotated channels; with ``scaling``
    Llama 3.1's frequency scaling (low 1, high 4, original context 8192)."""
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if scaling:
        low, high, orig = 1.0, 4.0, 8192
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > orig / low, inv / scaling, inv)
        mid = (1 - smooth) * inv / scaling + smooth * inv
        between = (wavelen <= orig / low) & (wavelen >= orig / high)
        inv = torch.where(between, mid, scaled)
    return torch.outer(torch.arange(seq, dtype=torch.float64), inv).float()


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``2 * angles.shape[-1]`` channels of x [b, s, h, d] (non-interleaved
    halves, as Megatron-Core's ``_rotate_half``)."""
    rot = 2 * angles.shape[-1]
    xr, rest = x[..., :rot], x[..., rot:]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[None, :, None, :].to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1)[None, :, None, :].to(x.dtype)
    x1, x2 = xr.chunk(2, dim=-1)
    out = xr * cos + torch.cat([-x2, x1], dim=-1) * sin
    return torch.cat([out, rest], dim=-1)


class Attention(nn.Module):
    """Grouped-query self-attention with separate q / k / v projections (so that a column-wise
    TP split shards whole heads and whole query groups)."""

    def __init__(self, d: Dims, bias: bool, dropout: float, qkv_bias: bool | None = None) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = (
            d.num_attention_heads,
            d.num_query_groups,
            d.kv_channels,
        )
        qkv = bias if qkv_bias is None else qkv_bias  # Megatron-Core add_qkv_bias (Qwen2)
        self.wq = nn.Linear(d.hidden_size, self.heads * self.head_dim, bias=qkv)
        self.wk = nn.Linear(d.hidden_size, self.groups * self.head_dim, bias=qkv)
        self.wv = nn.Linear(d.hidden_size, self.groups * self.head_dim, bias=qkv)
        self.wo = nn.Linear(self.heads * self.head_dim, d.hidden_size, bias=bias)
        self.dropout = dropout
        self.recompute = False
        """Recompute softmax(QK^T)V in backward (Megatron's selective recompute)."""

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )

    def forward(self, x: torch.Tensor, angles: torch.Tensor | None) -> torch.Tensor:
        b, s, _ = x.shape
        # -1: the local head count (TP shards the projections' output features)
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        if angles is not None:
            q, k = apply_rope(q, angles), apply_rope(k, angles)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.recompute and self.training:
            o = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            o = self._core(q, k, v)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    """SwiGLU (w2(silu(w1 x) * w3 x)) or GELU (w2(gelu(w1 x))) feed-forward."""

    def __init__(self, d: Dims, gated: bool, bias: bool) -> None:
        super().__init__()
        self.gated = gated
        self.w1 = nn.Linear(d.hidden_size, d.ffn_hidden_size, bias=bias)
        self.w3 = nn.Linear(d.hidden_size, d.ffn_hidden_size, bias=bias) if gated else None
        self.w2 = nn.Linear(d.ffn_hidden_size, d.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """One pre-norm transformer layer (the unit ``fully_shard`` and activation checkpointing
    wrap)."""

    def __init__(self, d: Dims, o: dict[str, Any]) -> None:
        super().__init__()
        self.attention_norm = Norm(d.hidden_size, o["eps"], o["rms"])
        self.attention = Attention(d, o["bias"], o["attention_dropout"], o["qkv_bias"])
        self.ffn_norm = Norm(d.hidden_size, o["eps"], o["rms"])
        self.feed_forward = Mlp(d, o["gated"], o["bias"])
        self.dropout = nn.Dropout(o["hidden_dropout"])
        self.recompute = "none"
        """Activation checkpointing of this block: none, selective (attention core), full or
        selective_op (torchtitan's per-op policy, :func:`selective_op_contexts`)."""

    def _forward(self, x: torch.Tensor, angles: torch.Tensor | None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), angles))
        return x + self.dropout(self.feed_forward(self.ffn_norm(x)))

    def forward(self, x: torch.Tensor, angles: torch.Tensor | None) -> torch.Tensor:
        self.attention.recompute = self.recompute == "selective"
        if self.recompute in ("full", "selective_op") and self.training:
            ctx = selective_op_contexts if self.recompute == "selective_op" else None
            out = (
                checkpoint(self._forward, x, angles, use_reentrant=False, context_fn=ctx)
                if ctx
                else checkpoint(self._forward, x, angles, use_reentrant=False)
            )
            assert isinstance(out, torch.Tensor)
            return out
        return self._forward(x, angles)


def selective_op_contexts() -> Any:
    """Per-op selective activation checkpointing contexts for one block forward, torchtitan
    0.3.0's policy (``torchtitan/distributed/activation_checkpoint.py``
    ``SelectiveAC._wrap_block``, its default save set ``_get_default_save_ops``): save the
    outputs of mm / linear (all but every second one, counted per block and per pass), of the
    other compute-intensive ops (``torch._functorch.partitioners.get_default_op_list``), SDPA,
    ``max`` and the reduce-scatter / all-to-all collectives; recompute the rest."""
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    mm_ops = {aten.mm.default, aten.linear.default}
    save = {op.default for op in get_default_op_list().compute_intensive_ops}  # type: ignore[attr-defined]
    save |= mm_ops | {
        aten._scaled_dot_product_cudnn_attention.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_fused_attention_overrideable.default,
        aten.max.default,
        aten.topk.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops._c10d_functional.all_to_all_single.default,
    }
    count = {False: 0, True: 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        if func in mm_ops:
            count[ctx.is_recompute] += 1
            if count[ctx.is_recompute] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def options(plan: dict[str, Any]) -> dict[str, Any]:
    """The model options the worker reads from ``engines.megatron_core`` (layer flavour, not
    size)."""
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    gpt = plan["engines"]["megatron_core"]["GPTModel"]
    return {
        "eps": float(tc["layernorm_epsilon"]),
        "rms": tc["normalization"] == "RMSNorm",
        "bias": bool(tc["add_bias_linear"]),
        "qkv_bias": bool(tc["add_qkv_bias"]),
        "gated": bool(tc["gated_linear_unit"]),
        "hidden_dropout": float(tc["hidden_dropout"]),
        "attention_dropout": float(tc["attention_dropout"]),
        "init_std": float(tc["init_method_std"]),
        "rope": gpt["position_embedding_type"] == "rope",
        "rotary_base": float(gpt["rotary_base"]),
        "rotary_percent": float(gpt["rotary_percent"]),
        "rope_scaling": float(gpt["rope_scaling_factor"]) if gpt["rope_scaling"] else None,
        "tied": bool(gpt["share_embeddings_and_output_weights"]),
    }


class GPT(nn.Module):
    """Embedding, ``num_layers`` :class:`Block` s in ``layers`` (a ModuleDict keyed by global
    layer number, as torchtitan), final norm, output layer. ``forward(tokens [b, s]) -> logits
    [b, s, vocab]`` (logits float32)."""

    def __init__(self, d: Dims, o: dict[str, Any]) -> None:
        super().__init__()
        self.dims, self.opts = d, o
        self.tok_embeddings = nn.Embedding(d.vocab_size, d.hidden_size)
        self.pos_embeddings = (
            None if o["rope"] else nn.Embedding(d.max_position_embeddings, d.hidden_size)
        )
        self.layers = nn.ModuleDict({str(i): Block(d, o) for i in range(d.num_layers)})
        self.norm = Norm(d.hidden_size, o["eps"], o["rms"])
        self.output = nn.Linear(d.hidden_size, d.vocab_size, bias=False)
        if o["tied"]:
            self.output.weight = self.tok_embeddings.weight
        self.embed_dropout = nn.Dropout(o["hidden_dropout"])
        rot = int(d.kv_channels * o["rotary_percent"]) // 2 * 2
        self.register_buffer(
            "angles",
            rope_frequencies(rot, d.seq_length, o["rotary_base"], o["rope_scaling"])
            if o["rope"]
            else torch.zeros(0),
            persistent=False,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        if self.pos_embeddings is not None:
            h = h + self.pos_embeddings(torch.arange(tokens.shape[1])[None, :])
        h = self.embed_dropout(h)
        rope: torch.Tensor = self.angles  # type: ignore[assignment]
        angles = rope[: tokens.shape[1]] if self.opts["rope"] else None
        for block in self.layers.values():
            h = block(h, angles)
        return self.output(self.norm(h)).float()


def _seed(seed: int, name: str) -> int:
    return int(hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:15], 16)


@torch.no_grad()
def deterministic_init(model: GPT, seed: int) -> int:
    """Draw every matrix from a generator seeded by its name (normal, std ``init_method_std``;
    vectors keep ones / zeros); before any sharding, so every layout starts equal. Returns how
    many were set."""
    n = 0
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        gen = torch.Generator().manual_seed(_seed(seed, name))
        p.copy_(torch.randn(p.shape, generator=gen) * model.opts["init_std"])
        n += 1
    return n


def tp_plan(sequence_parallel: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """DTensor tensor-parallel plans (torch 2.13 ``torch.distributed.tensor.parallel``):
    (the root's, each block's). Column-wise q/k/v and w1/w3, row-wise wo and w2 (Megatron's
    split); the embedding row-wise over the vocabulary and the output column-wise (vocab-parallel
    logits, gathered for the loss); with sequence parallel the norms and dropouts run on sequence
    shards (``SequenceParallel``) and the block inputs are gathered (``PrepareModuleInput``), as
    torchtitan's ``parallelize_llama``."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq = Shard(1) if sequence_parallel else Replicate()
    root: dict[str, Any] = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "output": ColwiseParallel(
            input_layouts=seq, output_layouts=Replicate(), use_local_output=True
        ),
    }
    if sequence_parallel:
        root["norm"] = SequenceParallel()
    block: dict[str, Any] = {
        "attention": PrepareModuleInput(
            input_layouts=(seq, None), desired_input_layouts=(Replicate(), None)
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=seq),
        "feed_forward": PrepareModuleInput(
            input_layouts=(seq,), desired_input_layouts=(Replicate(),)
        ),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        "feed_forward.w3": ColwiseParallel(),
    }
    if sequence_parallel:
        block["attention_norm"] = SequenceParallel()
        block["ffn_norm"] = SequenceParallel()
    return root, block
