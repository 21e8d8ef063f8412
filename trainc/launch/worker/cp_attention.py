"""Context-parallel core attention in pure torch: a CPU stand-in for Transformer Engine's.

Megatron-Core's local ``DotProductAttention`` refuses context_parallel_size > 1 and keys / values
of their own head widths (multi-head latent attention's ``k_channels`` / ``v_channels``), and TE
needs CUDA, so on CPU this module takes the ``core_attention`` slot of the layer spec (with
cp = 1 it is plain causal attention, windowed as
``TransformerConfig.window_size`` says; attention dropout draws from the tensor-parallel RNG
stream). It keeps Megatron's real CP plumbing (CP groups, the load-balanced sequence split of
``get_batch_on_this_cp_rank``, RoPE slicing per CP rank, dp-cp gradient reduction) and replaces
only the kernel: K and V are all-gathered over the CP group (backward: reduce-scatter), the
positions of Megatron's chunks are rebuilt (CP rank r holds chunks r and 2*cp-1-r of 2*cp), and
a causal mask is applied. Numerically it equals single-process attention; it does not exercise
TE's ring-attention kernels.
"""

from __future__ import annotations

import math

import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region
from megatron.core.transformer.module import MegatronModule


def _positions(rank: int, cp: int, seq_local: int) -> torch.Tensor:
    """Global token positions held by CP rank ``rank`` (two chunks of seq_local/2)."""
    c = seq_local // 2
    first = torch.arange(rank * c, (rank + 1) * c)
    second = torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c)
    return torch.cat([first, second])


class AllGatherCPDotProductAttention(MegatronModule):
    """Causal attention over the whole sequence while each CP rank holds 2 of its 2*cp chunks."""

    def __init__(  # type: ignore[no-untyped-def]
        self,
        config,
        layer_number,
        attn_mask_type,
        attention_type,
        attention_dropout=None,
        softmax_scale=None,
        cp_comm_type=None,
        pg_collection=None,
        k_channels=None,
        v_channels=None,
        **kwargs,
    ):
        super().__init__(config=config)
        # dropout on the attention probabilities, as Megatron-Core's DotProductAttention
        self.dropout_p = (
            config.attention_dropout if attention_dropout is None else attention_dropout
        )
        tp = parallel_state.get_tensor_model_parallel_world_size()
        self.heads = config.num_attention_heads // tp
        self.groups = config.num_query_groups // tp
        # multi-head latent attention passes its query/key and value head widths
        self.head_dim = k_channels or config.kv_channels
        self.v_dim = v_channels or config.kv_channels
        self.softmax_scale = softmax_scale or 1.0 / math.sqrt(self.head_dim)
        self.cp_group = parallel_state.get_context_parallel_group()
        # sliding-window attention, as Megatron-Core decides it per layer (0.16.1
        # transformer/utils.py is_layer_window_attention; mask: get_sliding_window_causal_mask)
        from megatron.core.transformer.utils import is_layer_window_attention

        window = config.window_size
        on = is_layer_window_attention(window, config.window_attn_skip_freq, layer_number)
        self.window_left = int(window[0]) if on and window[0] >= 0 else None

    def forward(  # type: ignore[no-untyped-def]
        self,
        query,
        key,
        value,
        attention_mask,
        attn_mask_type=None,
        attention_bias=None,
        packed_seq_params=None,
    ):
        """query [sq, b, np, hn], key/value [sk, b, ng, hn] (local) -> [sq, b, np*hn]."""
        cp, rank = self.cp_group.size(), self.cp_group.rank()
        sq = query.shape[0]
        key = gather_from_sequence_parallel_region(key, True, group=self.cp_group)
        value = gather_from_sequence_parallel_region(value, True, group=self.cp_group)
        pos_q = _positions(rank, cp, sq)
        pos_k = torch.cat([_positions(r, cp, sq) for r in range(cp)])
        if self.heads != self.groups:
            rep = self.heads // self.groups
            key = key.repeat_interleave(rep, dim=2)
            value = value.repeat_interleave(rep, dim=2)
        q = query.permute(1, 2, 0, 3).float()  # [b, np, sq, hn]
        k = key.permute(1, 2, 0, 3).float()
        v = value.permute(1, 2, 0, 3).float()
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.softmax_scale
        masked = pos_k[None, :] > pos_q[:, None]  # [sq, sk]
        if self.window_left is not None:  # keys more than window_left left of the query
            masked = masked | (pos_k[None, :] < pos_q[:, None] - self.window_left)
        scores = scores.masked_fill(masked, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if self.training and self.dropout_p > 0:
            # the tensor-parallel RNG stream, as Megatron-Core's attention: ranks of one TP group
            # drop different heads' probabilities
            with tensor_parallel.get_cuda_rng_tracker().fork():
                probs = torch.nn.functional.dropout(probs, p=self.dropout_p)
        ctx = torch.matmul(probs, v).to(query.dtype)  # [b, np, sq, hn]
        return ctx.permute(2, 0, 1, 3).reshape(sq, query.shape[1], self.heads * self.v_dim)
