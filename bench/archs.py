"""Architectures of the published runs whose rows leave the architecture columns empty.

Values from the models' public configurations (Hugging Face ``config.json`` of the released
checkpoints, or the NeMo / Megatron-Bridge recipe for models released only as recipes). Only the
fields trainc's model section needs; everything else keeps trainc's defaults. Sources per entry.
"""

from __future__ import annotations

from typing import Any

#: name (lower case, as :func:`bench.published.model_key` spells it) -> (model fields, source)
ARCHS: dict[str, tuple[dict[str, Any], str]] = {
    "gpt3-5b": ({"num_layers": 24, "hidden_size": 4096, "num_attention_heads": 32,
                 "ffn_hidden_size": 16384, "vocab_size": 50257, "activation": "gelu",
                 "normalization": "layernorm", "position_embedding": "learned",
                 "untie_embeddings_and_output_weights": False},
                "NeMo examples/nlp/language_modeling/conf/megatron_gpt_config / NeMo 2 "
                "GPTConfig5B (24 L, 4096 h, 32 heads, ffn 4h, GPT-2 BPE vocab)"),
    "gpt3-20b": ({"num_layers": 44, "hidden_size": 6144, "num_attention_heads": 48,
                  "ffn_hidden_size": 24576, "vocab_size": 50257, "activation": "gelu",
                  "normalization": "layernorm", "position_embedding": "learned",
                  "untie_embeddings_and_output_weights": False},
                 "NeMo 2 GPTConfig20B (44 L, 6144 h, 48 heads, ffn 4h)"),
    "gpt3-175b": ({"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
                   "ffn_hidden_size": 49152, "vocab_size": 50257, "activation": "gelu",
                   "normalization": "layernorm", "position_embedding": "learned",
                   "untie_embeddings_and_output_weights": False},
                  "Brown et al. 2020 (arXiv 2005.14165) Table 2.1; NeMo 2 GPTConfig175B"),
    "nemotron-8b": ({"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                     "ffn_hidden_size": 16384, "vocab_size": 256000, "activation": "gelu",
                     "normalization": "layernorm"},
                    "NeMo 2 Nemotron3Config8B (32 L, 4096 h, 32 heads MHA, ffn 16384, "
                    "squared-ReLU: two matrices, modelled as gelu; vocab 256000)"),
    "nemotron-22b": ({"num_layers": 40, "hidden_size": 6144, "num_attention_heads": 48,
                      "num_query_groups": 8, "ffn_hidden_size": 24576, "vocab_size": 256000,
                      "activation": "gelu", "normalization": "layernorm"},
                     "NeMo 2 Nemotron4Config22B (40 L, 6144 h, 48 heads / 8 groups, "
                     "ffn 24576, squared-ReLU)"),
    "nemotron-340b": ({"num_layers": 96, "hidden_size": 18432, "num_attention_heads": 96,
                       "num_query_groups": 8, "ffn_hidden_size": 73728, "vocab_size": 256000,
                       "activation": "gelu", "normalization": "layernorm"},
                      "Nemotron-4 340B technical report (arXiv 2406.11704) Table 1"),
    "qwen3-30b-a3b": ({"num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
                       "num_query_groups": 4, "kv_channels": 128, "ffn_hidden_size": 6144,
                       "vocab_size": 151936, "num_experts": 128, "moe_router_topk": 8,
                       "moe_ffn_hidden_size": 768, "rotary_base": 1000000},
                      "Qwen/Qwen3-30B-A3B config.json"),
    "qwen3-235b-a22b": ({"num_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
                         "num_query_groups": 4, "kv_channels": 128, "ffn_hidden_size": 12288,
                         "vocab_size": 151936, "num_experts": 128, "moe_router_topk": 8,
                         "moe_ffn_hidden_size": 1536, "rotary_base": 1000000},
                        "Qwen/Qwen3-235B-A22B config.json"),
    "gpt-oss-120b": ({"num_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
                      "num_query_groups": 8, "kv_channels": 64, "ffn_hidden_size": 2880,
                      "vocab_size": 201088, "num_experts": 128, "moe_router_topk": 4,
                      "moe_ffn_hidden_size": 2880, "rotary_base": 150000},
                     "openai/gpt-oss-120b config.json (alternating 128-token sliding-window "
                     "layers are modelled as full causal attention)"),
}

#: models the bench cannot express in trainc's model section, with the reason
UNSUPPORTED: dict[str, str] = {
    "nemotron-3-nano": "hybrid Mamba-2/attention MoE (Nemotron-H family): trainc models no "
                       "Mamba layers",
    "nemotron-3-super": "hybrid Mamba-2/attention MoE: trainc models no Mamba layers",
    "nemotron-3-ultra": "hybrid Mamba-2/attention MoE: trainc models no Mamba layers",
    "nemotron-3-5-lightning": "hybrid Mamba-2/attention MoE: trainc models no Mamba layers",
    "deepseekv4-flash": "architecture not public in a config this bench can cite",
}
