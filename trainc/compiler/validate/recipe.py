"""TRC333: a large pre-training run whose optimizer settings no published recipe uses.

Every published recipe for billion-parameter decoder pre-training warms the learning rate up and
runs Adam with beta2 0.95, not PyTorch's / Megatron-LM's default 0.999:

* Llama 2 (Touvron et al. 2023, arXiv 2307.09288, section 2.2): AdamW beta1 0.9, beta2 0.95,
  eps 1e-5, 2,000 warm-up steps, cosine decay to 10 % of the peak, weight decay 0.1, gradient
  clip 1.0;
* GPT-3 (Brown et al. 2020, arXiv 2005.14165, appendix B): beta2 0.95, linear warm-up over the
  first 375M tokens;
* OPT (Zhang et al. 2022, arXiv 2205.01068, section 2.2): beta2 0.95, warm-up over 2,000 steps
  (375M tokens for the 175B model).

The finding is a warning: a run without warm-up or with beta2 0.999 can train, it is only far
from every recipe that is known to. Fine-tuning (resume.finetune) and CPU runs are left alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.schemas import Activation, Device, Optimizer, TrainSpec

#: Models from this many parameters on count as large scale (the recipes above start at 125M
#: for GPT-3 and OPT, 7B for Llama 2; 1e9 keeps small ablations out).
LARGE_PARAMS = 1_000_000_000
#: Warm-up steps of the Llama 2 recipe (arXiv 2307.09288 section 2.2).
RECIPE_WARMUP = 2000
#: Adam beta2 of the Llama 2, GPT-3 and OPT recipes.
RECIPE_BETA2 = 0.95
#: beta2 from which the rule reports (PyTorch's and Megatron-LM's default 0.999 and above).
HIGH_BETA2 = 0.999


def approx_params(spec: TrainSpec) -> int:
    """Weights of the model, roughly (count, all experts included): per layer the attention
    projections (2 h^2 for query and output, 2 h x groups x head_dim for key and value) plus the
    MLP (3 h x ffn for swiglu, 2 h x ffn for gelu, times num_experts on MoE models, every layer
    counted as MoE), plus the embedding (twice when untied). Norms, biases, routers and MLA are
    ignored: only used to tell a large model from a small one (Llama-2-70B: 69.0e9)."""
    m = spec.model
    h = m.hidden_size
    heads = max(m.num_attention_heads, 1)
    head_dim = m.kv_channels or h // heads
    groups = m.num_query_groups or heads
    gated = m.activation is Activation.swiglu
    ffn = (m.moe_ffn_hidden_size if m.num_experts else None) or m.ffn_hidden_size or 4 * h
    mlp = (3 if gated else 2) * h * ffn * (m.num_experts or 1)
    attn = 2 * h * h + 2 * h * groups * head_dim
    embed = m.vocab_size * h * (2 if m.untie_embeddings_and_output_weights else 1)
    return m.num_layers * (attn + mlp) + embed


def recipe(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC333 findings of ``spec``: no warm-up, and Adam beta2 >= 0.999, each once, for a
    pre-training run (not resume.finetune) on CUDA of a model of at least :data:`LARGE_PARAMS`
    parameters. Never raises."""
    t = spec.training
    if spec.launch.device is not Device.cuda or spec.resume.finetune:
        return
    n = approx_params(spec)
    if n < LARGE_PARAMS:
        return
    size = f"{n / 1e9:.0f}B" if n >= 1e10 else f"{n / 1e9:.1f}B"
    decay = t.lr_decay_iters or t.train_iters
    if t.lr_warmup_iters == 0 and decay > 1:
        warm = min(RECIPE_WARMUP, max(decay // 10, 1))
        yield diag(
            R.PRETRAIN_RECIPE,
            f"pre-training a ~{size}-parameter model with no "
            "learning-rate warm-up (lr_warmup_iters 0): the first steps run at the peak "
            f"lr ({t.lr:g}); published recipes warm up (Llama 2, arXiv 2307.09288: 2,000 "
            "steps; GPT-3, arXiv 2005.14165: 375M tokens)",
            "training.lr_warmup_iters",
            related=("training.lr", "training.lr_decay_iters"),
            fix=f"set training.lr_warmup_iters={warm} (Llama 2 warms up 2,000 steps; at "
            "most a tenth of the decay)",
            edits={"training.lr_warmup_iters": warm},
            size=size,
            warmup=0,
        )
    if t.optimizer is Optimizer.adam and t.adam_beta2 >= HIGH_BETA2:
        yield diag(
            R.PRETRAIN_RECIPE,
            f"pre-training a ~{size}-parameter model with Adam beta2 "
            f"{t.adam_beta2:g}: Llama 2 (arXiv 2307.09288), GPT-3 (arXiv 2005.14165) and "
            "OPT (arXiv 2205.01068) use 0.95 (a second-moment average over ~20 steps "
            "instead of ~1,000, so it follows gradient-norm spikes)",
            "training.adam_beta2",
            related=("training.optimizer",),
            fix=f"set training.adam_beta2={RECIPE_BETA2}",
            edits={"training.adam_beta2": RECIPE_BETA2},
            size=size,
            adam_beta2=t.adam_beta2,
        )
