"""``dense_layer_terms`` splits ``dense_layer_bytes`` into the tensors it counts, and
``dense_layer_bytes`` is their sum: exactly (the terms are whole numbers) for the integer shapes
trainc compiles, standard attention and MLA, and within rounding for a fractional ``s``."""

from __future__ import annotations

import itertools
import math

from trainc.compiler.estimate.activations import dense_layer_bytes, dense_layer_terms

FLAGS = [False, True]
MLA = [None, (1536, 512, 128, 64, 128), (None, 512, 192, 64, 128)]


def test_terms_sum_to_the_layer_estimate() -> None:
    for s, g, t, sp, swiglu, scores, masks, fp8, drop, mla in itertools.product(
        [32, 4096, 8192 / 3], [1, 8, 32], [1, 2, 16], FLAGS, FLAGS, FLAGS, FLAGS, FLAGS, FLAGS, MLA
    ):
        kw = dict(s=s, b=2, h=4096, a=32, g=g, d=128, f=14336, t=t, sp=sp, swiglu=swiglu)
        more = dict(with_scores=scores, masks=masks, fp8=fp8, attn_dropout=drop, mla=mla)
        terms = dense_layer_terms(**kw, **more)
        total = dense_layer_bytes(**kw, **more)
        if s == int(s):
            assert all(v == int(v) for v in terms.values())
            assert math.fsum(terms.values()) == total
        else:
            assert math.isclose(math.fsum(terms.values()), total, rel_tol=1e-15)


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
    assert terms["mla_latents"] == terms["mla_rope_key"] == 0


def test_mla_layer_terms() -> None:
    # DeepSeek-V3's attention (q_lora 1536, kv_lora 512, qk 128, rope 64, v 128, 128 heads),
    # h 7168, SwiGLU f 18432, t 2 with SP, no dropout, no scores (flash), bf16
    s, b, h, a, f, t = 4096, 1, 7168, 128, 18432, 2
    terms = dense_layer_terms(
        s=s, b=b, h=h, a=a, g=a, d=192, f=f, t=t, sp=True, swiglu=True, with_scores=False,
        masks=False, attn_dropout=False, mla=(1536, 512, 128, 64, 128),
    )  # fmt: skip
    assert terms["mla_latents"] == 4 * (1536 + 512) * s * b / t
    assert terms["mla_rope_key"] == 2 * 64 * s * b / t
    assert terms["q"] == 2 * a * 192 * s * b / t
    assert terms["kv"] == (2 * a * 192 + 2 * a * 128) * s * b / t
    assert terms["o_proj_input"] == 2 * a * 128 * s * b / t
    total = dense_layer_bytes(
        s=s, b=b, h=h, a=a, g=a, d=192, f=f, t=t, sp=True, swiglu=True, with_scores=False,
        masks=False, attn_dropout=False, mla=(1536, 512, 128, 64, 128),
    )  # fmt: skip
    # the layer: 8 sbh norms, (4 (1536 + 512) + 2 x 64) sb latents, Q K V O, 6 sbf MLP, all / t
    assert total == (8 * h + 4 * 2048 + 128 + 4 * a * 192 + 4 * a * 128 + 6 * f) * s * b / t
    assert total == 696_516_608
