"""Memory and time terms of torchtitan's activation checkpointing (engine=fsdp), per mode
(:mod:`trainc.compiler.targets.torchtitan_ac` has the modes and their torchtitan sources).

Activation bytes per layer and micro-batch (``T = s b`` tokens of the rank's sequence shard,
``s = seq / cp``; hidden ``h``, ``a`` heads of ``d`` channels, ``g`` query groups, FFN ``f``,
TP ``t``; ``tsp = t`` with sequence parallelism, else 1; ``kv = max(g / t, 1) d``):

* none: the whole layer (:func:`~trainc.compiler.estimate.activations.dense_layer_bytes`).
* full: the block input ``2 T h / tsp`` per layer, plus one block's whole activations while it
  is recomputed (the working set).
* selective_op (:func:`sac_layer_bytes`): the block input, and the outputs the per-op policy
  saves: the GEMMs at odd positions of the block's mm sequence (:func:`gemm_sequence`; a
  column-parallel output is ``/t`` wide, a row-parallel one the full ``h``, the partial sum
  before the reduce-scatter / all-reduce), the SDPA output ``2 T a d / t`` with the fp32
  log-sum-exp ``4 a T / t`` (flash / cuDNN / efficient kernels; the SDPA ops are in the save
  set), with TP and SP the two reduce-scatter outputs ``2 x 2 T h / t`` (comm ops in the save
  set); the same with torchao float8 (the SAC dispatch mode runs before the float8 tensor
  subclass's ``__torch_dispatch__``, so it sees ``aten.mm``, not the ``_scaled_mm`` inside);
  plus the working set as full.
* selective_layer (every N): the block input on the N-th, 2N-th ... block of the rank, the whole
  layer on the others, plus the working set.
* memory_budget ``B``: ``full + B (none - full)`` per layer, the endpoints as
  ``torch._functorch.config.activation_memory_budget`` defines them (0 = full checkpointing of
  the compiled region, 1 = the partitioner's default, which keeps what the eager run keeps);
  linear in between is trainc's assumption (the partitioner's Pareto curve is convex, so the
  real memory at ``B`` is at most this).

Recomputed forward work per layer (:func:`recompute_parts`, fractions of the layer's forward
GEMM, attention-core and element-wise time): full and the checkpointed blocks of every-N
``(1, 1, 1)``; per-op SAC ``(share, 0, 1)``, ``share`` the GEMM FLOPs at even mm positions
(:func:`sac_gemm_recompute_share`), the SDPA output being saved and every norm, RoPE and
activation recomputed; memory_budget ``(1 - B)`` of the full recompute (the same linear
assumption); none nothing. torch.compile is not given a factor here (no published factor
for it: its element-wise fusion is already in ``kernels.elementwise_seconds``).
"""

from __future__ import annotations

from trainc.compiler.decide import traits
from trainc.compiler.ir import filled
from trainc.compiler.targets.torchtitan_ac import FUSED_QKV_FIRST, ac_setting, checkpointed_blocks
from trainc.schemas import Activation, TrainSpec


def gemm_sequence(
    *, h: int, a: int, g: int, d: int, f: int, gated: bool, fused_qkv: bool
) -> list[tuple[str, int, bool]]:
    """The GEMMs of one dense torchtitan block in forward order, ``(name, forward FLOPs per
    token / 2 = in x out, column-parallel)``: fused ``wqkv`` (0.3.0) or ``wq, wk, wv``, then
    ``wo``, then the MLP ``w1, w3, w2`` (``w2(silu(w1(x)) * w3(x))``, Python evaluates w1 first;
    0.3.0 ``models/common/feed_forward.py`` ``FeedForward.forward``) or ``w1, w2`` ungated.

    >>> [n for n, _, _ in gemm_sequence(h=8, a=2, g=1, d=4, f=16, gated=True, fused_qkv=True)]
    ['wqkv', 'wo', 'w1', 'w3', 'w2']
    """
    qkv = (
        [("wqkv", h * (a * d + 2 * g * d), True)]
        if fused_qkv
        else [("wq", h * a * d, True), ("wk", h * g * d, True), ("wv", h * g * d, True)]
    )
    mlp = (
        [("w1", h * f, True), ("w3", h * f, True), ("w2", f * h, False)]
        if gated
        else [("w1", h * f, True), ("w2", f * h, False)]
    )
    return [*qkv, ("wo", a * d * h, False), *mlp]


def _saved(seq: list[tuple[str, int, bool]]) -> list[bool]:
    """Per GEMM of ``seq``: saved by per-op SAC (odd 1-based position)."""
    return [k % 2 == 1 for k in range(1, len(seq) + 1)]


def _dims(spec: TrainSpec) -> dict[str, int]:
    m = spec.model
    return {
        "h": m.hidden_size,
        "a": m.num_attention_heads,
        "g": filled(m.num_query_groups, "model.num_query_groups"),
        "d": filled(m.kv_channels, "model.kv_channels"),
        "f": filled(m.ffn_hidden_size, "model.ffn_hidden_size"),
    }


def _sequence(spec: TrainSpec) -> list[tuple[str, int, bool]]:
    ac = ac_setting(spec)
    return gemm_sequence(
        **_dims(spec),
        gated=spec.model.activation is Activation.swiglu,
        fused_qkv=ac.minor >= FUSED_QKV_FIRST,
    )


def sac_gemm_recompute_share(spec: TrainSpec) -> float:
    """Share of a dense layer's forward GEMM FLOPs per-op SAC recomputes in backward: the GEMMs
    at even positions of :func:`gemm_sequence`.

    Llama 3 8B (h 4096, 32 heads x 128, 8 groups, f 14336), torchtitan 0.3.0 (fused wqkv):
    ``wo + w3 = 4096 x 4096 + 4096 x 14336 = 4096 x 18432`` of ``4096 x (6144 + 4096 + 3 x
    14336) = 4096 x 53248``: 18432 / 53248 = 0.34615...; 0.2.x (wq, wk, wv): ``wk + wo + w3 =
    4096 x 19456``: 19456 / 53248 = 0.36538...
    """
    seq = _sequence(spec)
    keep = _saved(seq)
    total = sum(w for _, w, _ in seq)
    return sum(w for (_, w, _), k in zip(seq, keep, strict=True) if not k) / total


def sac_layer_bytes(spec: TrainSpec, *, s: float, b: int, t: int, sp: bool, flash: bool) -> float:
    """Bytes per-op SAC keeps for one dense layer and micro-batch (2-byte activations; see the
    module docstring), working set excluded.

    Llama 3 8B, s 8192, b 1, t 1, flash, torchtitan 0.3.0: input ``2Th`` + wqkv ``2T x 6144``
    + SDPA ``2T x 4096`` + lse ``4 x 32 T`` + w1 ``2T x 14336`` + w2 ``2Th`` =
    ``T (8192 + 12288 + 8192 + 128 + 28672 + 8192) = 65664 T`` = 537,919,488 bytes (the whole
    layer keeps ``34 T h`` = 139264 T).
    """
    dm = _dims(spec)
    h, a, g, d = dm["h"], dm["a"], dm["g"], dm["d"]
    T, tsp = s * b, (t if sp else 1)
    kv = max(g / t, 1.0) * d
    seq = _sequence(spec)
    out = 2 * T * h / tsp  # the checkpoint's input (the block input)
    for (name, w, col), keep in zip(seq, _saved(seq), strict=True):
        if not keep:
            continue
        if name == "wqkv":
            width = a * d / t + 2 * kv
        elif name in ("wk", "wv"):
            width = kv
        elif col:
            width = w / h / t  # wq: a d / t; w1, w3: f / t
        else:
            width = h  # row-parallel: the partial sum before the reduce
        out += 2 * T * width
    out += 2 * T * a * d / t + (4 * a * T / t if flash else 0.0)
    if t > 1 and sp:
        out += 2 * 2 * T * h / t  # the two reduce-scatter outputs (comm ops are saved)
    return out


def recompute_parts(spec: TrainSpec, n_layers: int) -> list[tuple[float, float, float]] | None:
    """Per layer of a rank's ``n_layers`` (build order): the fractions ``(gemm, attention core,
    element-wise)`` of its forward that torchtitan's mode recomputes in backward (module
    docstring), or None when the spec is not engine=fsdp (Megatron's modes apply)."""
    if not traits(spec).torchtitan_ac:
        return None
    ac = ac_setting(spec)
    if ac.mode == "none":
        return [(0.0, 0.0, 0.0)] * n_layers
    if ac.mode == "full":
        return [(1.0, 1.0, 1.0)] * n_layers
    if ac.mode == "selective_layer":
        return [
            (1.0, 1.0, 1.0) if c else (0.0, 0.0, 0.0)
            for c in checkpointed_blocks(n_layers, filled(ac.every_n, "every_n"))
        ]
    if ac.mode == "memory_budget":
        x = 1.0 - filled(ac.memory_budget, "fsdp.memory_budget")
        return [(x, x, x)] * n_layers
    return [(sac_gemm_recompute_share(spec), 0.0, 1.0)] * n_layers
