"""Megatron-LM's own theoretical memory estimator, reproduced term for term
(``megatron/training/theoretical_memory_usage.py``, Megatron-LM core_v0.16.1).

This is the *reference mode* ("megatron_theoretical"): the tests check it against the golden values
that Megatron-LM's own functions return (run on CPU) exactly. The plan's estimator
(:mod:`.memory`, :mod:`.activations`) deliberately differs where Megatron's estimator is known
to be off:

* dist-opt sharding over ``dp x cp`` (Megatron divides by ``dp`` only, so CP > 1 overestimates);
* the last stage's output layer and final norm are counted on the stage that holds them (Megatron
  adds ``h*V`` and the final norm ``/p`` to the first shard and never looks at the last stage);
* activations: CP divides ``s``, full recompute reduces the per-layer term, SwiGLU's wider fc1
  output and GQA's narrower K/V are counted, and the ``1.05`` fudge factor is not applied.
"""

from __future__ import annotations

from trainc.compiler.estimate.params import attention_params, mlp_params


def theoretical_weight_and_optimizer_bytes(
    *,
    h: int,
    a: int,
    g: int,
    d: int,
    f: int,
    V: int,
    L: int,
    swiglu: bool,
    rmsnorm: bool,
    untied: bool,
    t: int,
    p: int,
    dp: int,
    dist_opt: bool,
    num_experts: int = 0,
    f_e: int = 0,
    num_moe_layers: int = 0,
    f_s: int = 0,
    ep: int = 1,
    etp: int | None = None,
    expert_dp: int = 1,
) -> float:
    """``compute_weight_and_optimizer_memory`` (bf16 params, fp32 grads, Adam), bytes.

    >>> b = theoretical_weight_and_optimizer_bytes(h=4096, a=32, g=8, d=128, f=14336, V=128256,
    ...     L=32, swiglu=True, rmsnorm=True, untied=True, t=2, p=2, dp=2, dist_opt=True)
    >>> round(b / 2**20, 1)  # Megatron-LM's own function gives the same, Llama-3-8B-like
    22975.5
    """
    nu = 1 if rmsnorm else 2
    etp = t if etp is None else etp
    L_moe, L_d = num_moe_layers, L - num_moe_layers
    p_attn = attention_params(h, a, g, d)
    p_mlp, p_sh = mlp_params(h, f, swiglu), mlp_params(h, f_s, swiglu)
    p_rt = mlp_params(h, f_e, swiglu) * num_experts
    p_ln = 2 * nu * h
    p_router = h * num_experts
    n_tp = ((p_attn + p_mlp) * L_d + (p_attn + p_sh) * L_moe) / p + h * V
    if untied and p == 1:
        n_tp += h * V
    n_tp /= t
    n_rep = (p_ln * L_d + (p_ln + p_router) * L_moe + nu * h) / p
    n_exp = (p_rt * L_moe / p) / (etp * ep)

    def beta(x: int) -> float:
        return 6 + 12 / x if dist_opt else 18

    return (n_tp + n_rep) * beta(dp) + n_exp * beta(expert_dp)


def theoretical_activation_bytes(
    *,
    s: int,
    b: int,
    h: int,
    f: int,
    V: int,
    L: int,
    t: int,
    p: int,
    sp_selective: bool,
    vpp: int | None = None,
    num_microbatches: int | None = None,
) -> float:
    """``compute_activation_memory`` (path A: SP + selective) or ``..._without_sp`` (path B), bytes.

    >>> round(theoretical_activation_bytes(s=8192, b=1, h=4096, f=14336, V=128256, L=32, t=2,
    ...     p=2, sp_selective=True, num_microbatches=8) / 2**20, 1)
    16416.1
    """
    pi = 1 + (p - 1) / (p * vpp) if vpp else 1.0
    mu = min(1.0, num_microbatches / p) if (not vpp and p > 1 and num_microbatches) else 1.0
    sbh = s * b * h
    if sp_selective:
        a = (sbh * (18 + 4 * f / h) * L + 8 * s * b * p + sbh * p) * pi * mu
        if p == 1:
            a += 4 * sbh * (1 + V / h)
        return a / t
    a = (sbh * (10 + 24 / t) * L + 8 * s * b * p + sbh * p) * pi * mu
    if p == 1:
        a += 2 * (s * b * V / t + sbh)
    return a * 1.05
