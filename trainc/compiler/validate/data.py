"""TRC350-TRC357: the data path (``data:``) against the model, the layout and the runner.

Sources: Megatron-Core ``GPTDatasetConfig`` / ``GPTDataset`` (megatron/core/datasets, 0.16.1):
documents are concatenated into samples of seq_length tokens; ``reset_attention_mask`` builds a
dense block-diagonal [s, s] mask per sample, which Transformer Engine's causal attention ignores
(NVIDIA/Megatron-LM #2357). Transformer Engine's THD context parallelism splits every document
of a pack into 2*cp chunks, so each must be padded to a multiple of 2*cp (TransformerEngine
#1368, PR #641; Megatron-Bridge PR #1867), and sequence parallelism scatters the cp chunk over
tp (the same unit as TRC217/TRC218, :func:`trainc.compiler.validate.sequence.sequence_unit`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.sequence import sequence_unit
from trainc.schemas import Device, Entrypoint, TrainSpec


def parse_blend(paths: list[str]) -> tuple[list[str], list[float] | None] | str:
    """``(prefixes, weights)`` of data.paths entries (``PREFIX`` or ``"WEIGHT PREFIX"``), or the
    reason they do not form a blend (Megatron-LM --data-path: all weighted or none).

    >>> parse_blend(["0.7 /d/web", "0.3 /d/code"])
    (['/d/web', '/d/code'], [0.7, 0.3])
    >>> parse_blend(["/d/web", "/d/code"])
    (['/d/web', '/d/code'], None)
    >>> parse_blend(["0.7 /d/web", "/d/code"])
    'entry 2 ("/d/code") has no weight while entry 1 has one: weight all entries or none'
    """
    prefixes: list[str] = []
    weights: list[float] = []
    if not paths:
        return "data.paths is empty"
    for i, entry in enumerate(paths, 1):
        parts = entry.split()
        if len(parts) not in (1, 2):
            return f'entry {i} ("{entry}") is neither PREFIX nor "WEIGHT PREFIX"'
        if len(parts) == 2:
            try:
                w = float(parts[0])
            except ValueError:
                return f'entry {i} ("{entry}") is not "WEIGHT PREFIX": {parts[0]} is no number'
            if not math.isfinite(w) or w <= 0:
                return f'entry {i} ("{entry}") has weight {parts[0]}; weights must be > 0'
            weights.append(w)
        prefixes.append(parts[-1])
        if weights and len(weights) != len(prefixes):
            first = 1 + min(j for j, e in enumerate(paths[:i]) if len(e.split()) != len(parts))
            has, lacks = (first, i) if len(parts) == 1 else (i, first)
            return (
                f'entry {lacks} ("{paths[lacks - 1]}") has no weight while entry {has} has '
                f"one: weight all entries or none"
            )
    return prefixes, (weights or None)


def _blend(spec: TrainSpec) -> Iterator[Diagnostic]:
    data, lc = spec.data, spec.launch
    if data.paths is None:
        return
    got = parse_blend(data.paths)
    if isinstance(got, str):
        yield diag(
            R.DATA_BLEND,
            f"data.paths is not a blend: {got}",
            "data.paths",
            fix='write each entry as "WEIGHT PREFIX" (e.g. '
            '"0.7 /data/web_text_document") or all as bare prefixes',
            paths=list(data.paths),
        )
    if lc.data_path is not None:
        yield diag(
            R.DATA_BLEND,
            f"launch.data_path ({lc.data_path!r}) and data.paths are both "
            "set; Megatron takes one --data-path",
            "data.paths",
            related=("launch.data_path",),
            fix=f"add {lc.data_path!r} to data.paths and unset launch.data_path",
            edits={"launch.data_path": None},
            data_path=lc.data_path,
        )


def _torchtitan(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC356 for entrypoint=torchtitan: no data: key reaches torchtitan.train."""
    data, lc = spec.data, spec.launch
    set_keys = [
        k
        for k, v in (
            ("data.paths", data.paths),
            ("data.reset_position_ids", data.reset_position_ids),
            ("data.reset_attention_mask", data.reset_attention_mask),
            ("data.eod_mask_loss", data.eod_mask_loss),
            ("data.packed", data.packed),
        )
        if v
    ]
    for key in set_keys:
        yield diag(
            R.DATA_RUNNER,
            f"{key} is not passed to torchtitan.train (its dataset is "
            "configured by torchtitan's own [training] dataset keys)",
            key,
            related=("launch.entrypoint",),
            fix=f"unset {key}, or use launch.entrypoint=trainc",
            edits={key: None if key == "data.paths" else False},
            entrypoint=lc.entrypoint.value,
        )


def _runner(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC356 / TRC353: what pretrain_gpt.py and the trainc worker do with the data options."""
    data, lc = spec.data, spec.launch
    runner = "pretrain_gpt.py" if lc.entrypoint is Entrypoint.megatron_lm else "the trainc worker"
    te = lc.entrypoint is Entrypoint.megatron_lm and lc.device is Device.cuda
    if data.packed:
        yield diag(
            R.DATA_RUNNER,
            f"data.packed (THD sequences with cu_seqlens) is not read by {runner}: it "
            "builds fixed-length GPTDataset samples, and the packs would be trained as "
            "one document each",
            "data.packed",
            fix="train packed data with a fine-tuning pipeline that passes "
            "PackedSeqParams (Megatron-Bridge, NeMo), or set data.packed=false and "
            "use data.reset_position_ids / data.eod_mask_loss",
            edits={"data.packed": False},
            runner=runner,
        )
    if data.reset_attention_mask and lc.entrypoint is Entrypoint.trainc:
        yield diag(
            R.DATA_RUNNER,
            "data.reset_attention_mask: the trainc worker passes no attention mask to the "
            "model (causal attention over the whole sequence), so the cross-document "
            "mask would be dropped",
            "data.reset_attention_mask",
            related=("launch.entrypoint",),
            fix="set data.reset_attention_mask=false (documents attend across the EOD "
            "boundary, as without the flag; data.reset_position_ids and "
            "data.eod_mask_loss still apply)",
            edits={"data.reset_attention_mask": False},
            runner=runner,
        )
    if data.reset_attention_mask and te and not data.packed:
        yield diag(
            R.MASK_IGNORED,
            "data.reset_attention_mask with Transformer Engine attention "
            "(--transformer-impl transformer_engine, attn_mask_type causal): TE ignores "
            "the block-diagonal mask GPTDataset builds, so documents attend across each "
            "other as if the flag were off (Megatron-LM #2357)",
            "data.reset_attention_mask",
            related=("launch.entrypoint", "launch.device"),
            fix="set data.reset_attention_mask=false and keep data.reset_position_ids / "
            "data.eod_mask_loss (the same training, stated), or train packed THD data "
            "with cu_seqlens in a fine-tuning pipeline",
            edits={"data.reset_attention_mask": False},
            transformer_impl="transformer_engine",
        )


def _eod(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC358: the options that look for the end-of-document token, with real data."""
    data, lc = spec.data, spec.launch
    keys = [
        k
        for k in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask")
        if getattr(data, k)
    ]
    if not keys or not (data.paths or lc.data_path):
        return
    eod = spec.model.vocab_size - 1
    names = ", ".join("data." + k for k in keys)
    yield diag(
        R.EOD_TOKEN,
        f"{names} find{'' if len(keys) > 1 else 's'} document ends by the "
        f"end-of-document token; trainc's artifacts run Megatron's NullTokenizer (no "
        f"tokenizer key exists), whose end-of-document id is vocab_size - 1 = {eod}. "
        f"Data tokenized with another id (Llama 3: 128001, Mistral: 2) never matches it: "
        f"the option{'s do' if len(keys) > 1 else ' does'} nothing",
        "data." + keys[0],
        related=tuple("data." + k for k in keys[1:]),
        fix=f"write the data's end-of-document tokens as id {eod}, or drop {names}",
        edits={"data." + k: False for k in keys},
        eod_id=eod,
        options=keys,
    )


def data_path(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC350-TRC358."""
    m, p, data, lc = spec.model, spec.parallel, spec.data, spec.launch
    yield from _blend(spec)
    tv = data.tokenizer_vocab_size
    if tv is not None and tv > m.vocab_size:
        yield diag(
            R.TOKENIZER_VOCAB,
            f"the tokenizer produces {tv} token ids but model.vocab_size is {m.vocab_size}: "
            f"ids {m.vocab_size}..{tv - 1} index past the vocabulary"
            + (
                f" (the padded embedding has {d.padded_vocab_size} rows: ids from "
                f"{d.padded_vocab_size} crash with a device-side assert, the others train "
                f"padding rows that an export drops)"
                if d.padded_vocab_size < tv
                else f" (they land in the {d.padded_vocab_size - m.vocab_size} padding rows, "
                f"which an export to vocab_size {m.vocab_size} drops)"
            ),
            "data.tokenizer_vocab_size",
            related=("model.vocab_size",),
            fix=f"set model.vocab_size to {tv}",
            edits={"model.vocab_size": tv},
            tokenizer_vocab_size=tv,
            vocab_size=m.vocab_size,
            padded_vocab_size=d.padded_vocab_size,
        )
    sp = bool(p.sequence_parallel) and p.tp > 1
    if data.packed and p.cp > 1:
        unit = sequence_unit(p.cp, p.tp, sp)
        pad = data.pad_to_multiple_of
        if pad is not None and pad % unit:
            good = math.lcm(pad, unit)
            yield diag(
                R.PACKED_CP_PADDING,
                f"packed sequences with cp={p.cp}: Transformer Engine splits every document "
                f"into 2*cp chunks, so each must be padded to a multiple of {unit}"
                + (
                    f" (cp*lcm(2, tp) = {unit} with sequence parallelism)"
                    if unit != 2 * p.cp
                    else ""
                )
                + f"; data.pad_to_multiple_of is {pad}",
                "data.pad_to_multiple_of",
                related=("parallel.cp", "data.packed"),
                fix=f"set data.pad_to_multiple_of to {good} (a multiple of {unit}) and "
                f"pack the data again",
                edits={"data.pad_to_multiple_of": good},
                pad_to_multiple_of=pad,
                cp=p.cp,
                required_multiple=unit,
            )
    if lc.entrypoint is Entrypoint.torchtitan:
        yield from _torchtitan(spec)
    else:
        yield from _runner(spec)
        yield from _eod(spec)
    if d.epochs is not None and d.dataset_samples is not None and d.epochs > 1:
        need = spec.training.train_iters * spec.training.global_batch_size
        yield diag(
            R.EPOCHS,
            f"training.train_iters ({spec.training.train_iters}) x global_batch_size "
            f"({spec.training.global_batch_size}) = {need} samples is {d.epochs:g} epochs "
            f"of the {d.dataset_samples} samples in the data ({d.steps_per_epoch} steps "
            f"per epoch): GPTDataset repeats the documents",
            "training.train_iters",
            related=("data.num_samples", "data.num_tokens", "training.global_batch_size"),
            fix=f"set training.train_iters to {d.steps_per_epoch} for one epoch, or keep "
            f"it to repeat the data",
            samples=need,
            dataset_samples=d.dataset_samples,
            steps_per_epoch=d.steps_per_epoch,
            epochs=d.epochs,
        )
