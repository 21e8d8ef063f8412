"""Training data for the worker: Megatron-Core's MockGPTDataset or an indexed dataset.

Samples are addressed by their *global* index, so every layout (and the one-process reference)
sees the same tokens: step ``t``, data-parallel rank ``d``, microbatch ``m``, row ``i`` reads sample
``t*gbs + (d*num_mb + m)*mbs + i``. Every TP/CP/PP rank of a replica reads the same samples (no
broadcast needed); CP ranks then keep their load-balanced slices.
"""

from __future__ import annotations

from typing import Any

import torch


def build_dataset(
    num_samples: int,
    seq_length: int,
    vocab_size: int,
    seed: int,
    data_path: str | None,
    data: dict[str, Any] | None = None,
) -> Any:
    """The training split of a GPT dataset holding at least ``num_samples`` samples.

    ``data`` is plan.json's ``spec.data``: a ``paths`` blend (``PREFIX`` or ``WEIGHT PREFIX``
    entries, Megatron-Core ``get_blend_from_list``) replaces ``data_path``; ``reset_position_ids``
    and ``eod_mask_loss`` go to GPTDatasetConfig as written. (The compiler refuses
    ``reset_attention_mask`` and ``packed`` for this worker, TRC356: it passes no mask.)"""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset

    # NullTokenizer(V-1): token ids 0..V-2, end-of-document id V-1.
    from megatron.core.datasets.utils import get_blend_from_list
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    tok = NullTokenizer(vocab_size - 1)
    data = data or {}
    if data.get("reset_attention_mask") or data.get("packed"):
        raise SystemExit(
            "trainc-worker: data.reset_attention_mask / data.packed are not read "
            "by this worker (trainc lint: TRC356)"
        )
    kwargs: dict[str, Any] = dict(
        random_seed=seed,
        sequence_length=seq_length,
        reset_position_ids=bool(data.get("reset_position_ids")),
        reset_attention_mask=False,
        eod_mask_loss=bool(data.get("eod_mask_loss")),
        tokenizer=tok,
        mid_level_dataset_surplus=0.005,
    )
    paths = data.get("paths")
    if paths:
        items = [x for entry in paths for x in str(entry).split()]
        kwargs.update(blend=get_blend_from_list(items), split="100,0,0")
        cls = GPTDataset
    elif data_path:
        kwargs.update(blend=([data_path], None), split="100,0,0")
        cls = GPTDataset
    else:
        cls = MockGPTDataset
    config = GPTDatasetConfig(**kwargs)
    train, _, _ = BlendedMegatronDatasetBuilder(
        cls, [num_samples, 0, 0], lambda: True, config
    ).build()
    return train


class Batches:
    """Microbatches of one step for one data-parallel rank, as dicts of [mbs, seq] tensors."""

    def __init__(self, dataset: Any, gbs: int, mbs: int, num_mb: int, dp_rank: int) -> None:
        self.dataset, self.gbs, self.mbs, self.num_mb, self.dp_rank = (
            dataset,
            gbs,
            mbs,
            num_mb,
            dp_rank,
        )

    def microbatch(self, step: int, mb: int) -> dict[str, torch.Tensor]:
        """Microbatch ``mb`` (0-based) of optimizer step ``step`` (0-based)."""
        first = step * self.gbs + (self.dp_rank * self.num_mb + mb) * self.mbs
        rows = [self.dataset[first + i] for i in range(self.mbs)]
        out = {
            k: torch.stack([torch.as_tensor(r[k]) for r in rows])
            for k in ("tokens", "labels", "loss_mask", "position_ids")
        }
        out["tokens"] = out["tokens"].long()
        out["labels"] = out["labels"].long()
        out["position_ids"] = out["position_ids"].long()
        out["loss_mask"] = out["loss_mask"].float()
        return out

    def iterator(self, step: int):  # type: ignore[no-untyped-def]
        """An iterator over the step's microbatches (one per model chunk with VPP)."""
        return iter([self.microbatch(step, m) for m in range(self.num_mb)])
