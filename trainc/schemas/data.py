"""``data:`` section: what the training data is and how it is packed into sequences."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class DataSpec:
    """The data path (Megatron-Core ``GPTDatasetConfig``, megatron/core/datasets/gpt_dataset.py,
    0.16.1) and the sizes trainc derives the epoch count from. Rules: TRC350-TRC357."""

    paths: list[str] | None = None
    """A blend of indexed dataset prefixes, each ``PREFIX`` or ``"WEIGHT PREFIX"`` (all weighted
    or none; weights > 0, normalized by Megatron-Core: Megatron-LM ``--data-path w1 p1 w2 p2``,
    GPTDatasetConfig.blend); exclusive with launch.data_path (one prefix). TRC350."""
    num_samples: int | None = None
    """Sequences of seq_length tokens in the training split (count); gives steps per epoch
    (derived.steps_per_epoch). TRC357."""
    num_tokens: int | None = None
    """Tokens in the training split (count), when num_samples is not known: samples =
    floor(num_tokens / seq_length). TRC357."""
    tokenizer_vocab_size: int | None = None
    """Token ids the tokenizer produces (count, special tokens included); must not exceed
    model.vocab_size. TRC351."""
    packed: bool = False
    """Variable-length (THD) packing: several documents per sequence with cu_seqlens
    (Megatron-Core PackedSeqParams), the attention stays within each document. Supervised
    fine-tuning pipelines (Megatron-Bridge, NeMo) write such data; the trainc worker and
    pretrain_gpt.py do not read it (TRC356)."""
    pad_to_multiple_of: int | None = None
    """data.packed: each document of a pack is padded to a multiple of this (tokens). With
    cp > 1 it must be a multiple of 2*cp (times tp with sequence parallelism) (Transformer
    Engine THD context parallelism). Default: the multiple the layout needs. TRC352."""
    reset_attention_mask: bool = False
    """Block attention across the documents concatenated into one sequence (Megatron-LM
    ``--reset-attention-mask``: a dense [s, s] mask per sample). TRC353, TRC356."""
    reset_position_ids: bool = False
    """Restart position ids at each document (Megatron-LM ``--reset-position-ids``)."""
    eod_mask_loss: bool = False
    """No loss on end-of-document tokens (Megatron-LM ``--eod-mask-loss``)."""
