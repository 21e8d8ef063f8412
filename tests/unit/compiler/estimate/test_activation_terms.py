"""``dense_layer_terms`` splits ``dense_layer_bytes`` into the tensors it counts: the terms sum to
the estimate for every argument combination (standard attention)."""

from __future__ import annotations

import itertools
import math

from trainc.compiler.estimate.activations import dense_layer_bytes, dense_layer_terms


def test_terms_sum_to_the_layer_estimate() -> None:
    flags = [False, True]
    for s, g, t, sp, swiglu, scores, masks, fp8, drop in itertools.product(
        [32, 8192 / 3], [1, 8, 32], [1, 2, 16], flags, flags, flags, flags, flags, flags
    ):
        kw = dict(s=s, b=2, h=4096, a=32, g=g, d=128, f=14336, t=t, sp=sp, swiglu=swiglu)
        more = dict(with_scores=scores, masks=masks, fp8=fp8, attn_dropout=drop)
        total = sum(dense_layer_terms(**kw, **more).values())
        assert math.isclose(total, dense_layer_bytes(**kw, **more), rel_tol=1e-12)


def test_terms_of_the_paper_layer() -> None:
    # Korthikanti et al. Table 2, t = 1: 34 sbh + 5 a s^2 b, GELU f = 4h, MHA
    s, b, h, a = 2048, 1, 4096, 32
    terms = dense_layer_terms(
        s=s, b=b, h=h, a=a, g=a, d=h // a, f=4 * h, t=1, sp=False, swiglu=False,
        with_scores=True,
    )  # fmt: skip
    assert terms["norm_inputs"] + terms["norm_outputs"] + terms["dropout_masks"] == 10 * s * b * h
    assert terms["q"] + terms["kv"] + terms["o_proj_input"] == 8 * s * b * h
    assert terms["fc1_output"] + terms["fc2_input"] == 16 * s * b * h
    scores = terms["softmax_output"] + terms["attn_dropout_mask"] + terms["attn_dropout_output"]
    assert scores == 5 * a * s * s * b
