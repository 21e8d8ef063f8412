"""TRC533-TRC538: can this job load the checkpoint it names (``resume:``)?

One comparison, :func:`resume_findings`, over plain "layout facts" (the keys of
:class:`trainc.schemas.SavedLayout`), used by the validator (``resume.saved`` against the spec)
and by ``trainc diff A B`` (plan A's facts against plan B's: can B resume from A?).

What may change depends on the format that *wrote* the checkpoint: Megatron-Core's distributed
format (``--ckpt-format torch_dist``) stores global tensors with their sharding and reshards on
load, so TP/PP/EP/DP may change (megatron/core/dist_checkpointing, 0.16.1); the legacy format
(``torch``) stores one file per model-parallel rank (``mp_rank_XX_YYY``) and needs
tools/checkpoint/convert.py for another TP/PP (NVIDIA/Megatron-LM #296); the trainc worker
records its layout and requires it on load (trainc/launch/worker/checkpoint.py); DeepSpeed ZeRO
shards the optimizer per data-parallel rank and loads another DP only as a universal checkpoint
(deepspeed/checkpoint/ds_to_universal.py, 0.19.8); engine=fsdp writes torch.distributed.checkpoint
(DCP) files of DTensor state dicts, which load into another mesh (torch 2.13
torch/distributed/checkpoint, ``dcp.load`` reshards by the saved metadata). The embedding's row
count (the padded vocabulary) and the architecture are global shapes: no format changes them
(BC-051, BC-055).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler import rules as R
from trainc.compiler.decide import DpSync, zero_layout
from trainc.compiler.derive import Derived, padded_vocab
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.rules import Rule
from trainc.schemas import Entrypoint, PositionEmbedding, TrainSpec

#: Layout facts and the spec key each is reported on.
LAYOUT = {
    "tp": "parallel.tp",
    "pp": "parallel.pp",
    "vpp": "parallel.vpp",
    "cp": "parallel.cp",
    "ep": "parallel.ep",
    "etp": "parallel.etp",
    "dp": "parallel.dp",
}
ARCH = {
    "num_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads",
    "num_query_groups": "model.num_query_groups",
    "ffn_hidden_size": "model.ffn_hidden_size",
    "num_experts": "model.num_experts",
    "max_position_embeddings": "model.max_position_embeddings",
    "untie_embeddings_and_output_weights": "model.untie_embeddings_and_output_weights",
}
SCHEDULE = {
    "global_batch_size": "training.global_batch_size",
    "lr_decay_style": "training.lr_decay_style",
}
#: What each format reshards on load, with its sources (trainc/conf/reshard.yaml).
RESHARD_TABLE = Path(__file__).resolve().parents[2] / "conf" / "reshard.yaml"


def _axes(v: Any) -> frozenset[str]:
    return frozenset(LAYOUT) if v == "all" else frozenset(v)


def _load_reshards() -> dict[str, Any]:
    with RESHARD_TABLE.open(encoding="utf-8") as fh:
        return dict(yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["formats"])


_FORMATS = _load_reshards()
#: Which layout facts each writer's format lets change on load (the model's tensors; the
#: distributed optimizer and the ZeRO stages narrow it: :func:`reshard_axes`).
RESHARDS = {k: _axes(v.get("axes", "all")) for k, v in _FORMATS.items()}
#: Megatron-LM's flag that saves the distributed optimizer's state fully reshardable.
FULLY_RESHARDABLE_FLAG = str(_FORMATS["torch_dist"]["distributed_optimizer"]["flag"])


def reshard_axes(
    fmt: str, saved: Mapping[str, Any], now: Mapping[str, Any], finetune: bool = False
) -> frozenset[str]:
    """The layout axes (keys of :data:`LAYOUT`) a job with facts ``now`` may change against a
    checkpoint in format ``fmt`` written with facts ``saved`` (trainc/conf/reshard.yaml).

    ``torch_dist`` with the distributed optimizer (saved or current ``distributed_optimizer``)
    (the formats whose entry has a ``distributed_optimizer`` table) reshards only dp unless the
    optimizer state was saved fully reshardable
    (``optim_fully_reshardable``; megatron-core 0.16.1 DistributedOptimizer.sharded_state_dict,
    'dp_reshardable' vs 'fully_reshardable') or ``finetune`` loads the weights only.
    ``deepspeed`` (an entry with a ``zero_stage`` table) depends on the ZeRO stage (saved, else
    current): stage 0 keeps the whole optimizer state in each model-parallel file."""
    entry = _FORMATS.get(fmt)
    if entry is None:
        return frozenset()
    if "distributed_optimizer" in entry and not finetune:  # torch_dist
        distopt = saved.get("distributed_optimizer")
        if distopt is None:
            distopt = now.get("distributed_optimizer")
        if distopt:
            kind = "fully_reshardable" if saved.get("optim_fully_reshardable") else "dp_reshardable"
            return _axes(entry["distributed_optimizer"][kind])
    if "zero_stage" in entry:  # deepspeed
        stage = saved.get("zero_stage")
        if stage is None:
            stage = now.get("zero_stage")
        if stage is not None and int(stage) in entry["zero_stage"]:
            return _axes(entry["zero_stage"][int(stage)])
    return RESHARDS[fmt]


@dataclass(frozen=True)
class Finding:
    """One reason B cannot (or should not) resume from A: the rule, the spec key, the saved and
    the current value, a message and a fix (with its edits)."""

    rule: Rule
    key: str
    saved: Any
    now: Any
    message: str
    fix: str
    edits: Mapping[str, Any]


def layout_facts(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """The :class:`trainc.schemas.SavedLayout` facts of a normalized spec (what its checkpoint
    will hold), and ``gpus_per_node``, which is not a saved fact (never compared): TRC534's dp
    fix turns the saved world into a node count with it."""
    m, p, t = spec.model, spec.parallel, spec.training
    learned = m.position_embedding is PositionEmbedding.learned
    # what zero_stage means on the engine (decide.zero_layout): DeepSpeed's own ZeRO stage, and
    # Megatron-Core's distributed optimizer saved in torch_dist (zero_stage 1; Megatron-FSDP,
    # zero_stage 3, writes fsdp_dtensor)
    zero = zero_layout(spec)
    zero_fact = zero.zero_stage if zero.dp_sync is DpSync.zero else None
    distopt_fact = zero.distributed_optimizer and not zero.megatron_fsdp
    return {
        "engine": spec.engine.value,
        "checkpoint_format": d.checkpoint_format,
        "tp": p.tp,
        "pp": p.pp,
        "vpp": p.vpp,
        "cp": p.cp,
        "ep": p.ep,
        "etp": d.etp,
        "dp": d.dp,
        "zero_stage": zero_fact,
        "distributed_optimizer": distopt_fact,
        "optim_fully_reshardable": spec.resume.optim_fully_reshardable,
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups,
        "ffn_hidden_size": m.ffn_hidden_size,
        "num_experts": m.num_experts,
        "max_position_embeddings": (m.max_position_embeddings or m.seq_length) if learned else None,
        "gpus_per_node": spec.cluster.gpus_per_node,
        "padded_vocab_size": d.padded_vocab_size,
        "vocab_size": m.vocab_size,
        "make_vocab_size_divisible_by": m.make_vocab_size_divisible_by,
        "untie_embeddings_and_output_weights": m.untie_embeddings_and_output_weights,
        "global_batch_size": t.global_batch_size,
        "optimizer": t.optimizer.value,
        "lr_decay_style": t.lr_decay_style.value,
        "train_iters": t.train_iters,
    }


def saved_facts(spec: TrainSpec) -> dict[str, Any]:
    """The facts ``resume.saved`` gives (enum values as strings), without the unknown ones."""
    out = {}
    for f in dataclasses.fields(spec.resume.saved):
        v = getattr(spec.resume.saved, f.name)
        if v is not None:
            out[f.name] = getattr(v, "value", v)
    return out


def _vocab_fix(
    saved_rows: int, now: Mapping[str, Any], saved_tp: Any = None
) -> tuple[str, dict[str, Any]]:
    """The fix for TRC535 (the checkpoint's ``saved_rows`` embedding rows differ from this job's
    padded vocabulary), from Megatron-LM's padding (``vocab_size_with_padding``: ``ceil(V /
    (d x tp)) x d x tp``, megatron/training/tokenizer/tokenizer.py, core_v0.16.x):

    * ``vocab_size`` above the saved rows (tokens were added, as ``vocab_extra_ids_list`` in
      epfLLM/Megatron-LLM#81): no padding gets back to the saved rows; the embedding and output
      layer must be resized, or the tokens dropped;
    * a ``make_vocab_size_divisible_by`` that pads to the saved rows at this tp;
    * the saved tp, where it pads to the saved rows with this ``make_vocab_size_divisible_by``;
    * else converting the checkpoint's embedding."""
    tp, v, unit = int(now["tp"]), int(now["vocab_size"]), int(now["make_vocab_size_divisible_by"])
    rows = now["padded_vocab_size"]
    if v > saved_rows:
        return (
            f"vocab_size {v} is above the checkpoint's {saved_rows} embedding rows (tokens "
            f"were added): resize the checkpoint's word embeddings and output layer to "
            f"{rows} rows (new rows initialised) before loading, or train with the saved "
            f"vocabulary (model.vocab_size at most {saved_rows})",
            {},
        )
    if saved_rows % tp == 0 and padded_vocab(v, saved_rows // tp, tp) == saved_rows:
        d = saved_rows // tp
        return (
            f"set model.make_vocab_size_divisible_by to {d} ({d} x tp {tp} = {saved_rows} "
            f"rows, as saved)",
            {"model.make_vocab_size_divisible_by": d},
        )
    if (
        isinstance(saved_tp, int)
        and saved_tp != tp
        and padded_vocab(v, unit, saved_tp) == saved_rows
    ):
        return (
            f"set parallel.tp to {saved_tp} (the saved tp: vocab_size {v} pads to "
            f"{saved_rows} rows there), or convert the checkpoint's embedding to {rows} rows "
            f"(tools/checkpoint/convert.py)",
            {"parallel.tp": saved_tp},
        )
    return (f"convert the checkpoint's embedding to {rows} rows (tools/checkpoint/convert.py)", {})


def _dp_fix(saved: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """dp is derived (world / (tp x pp x cp)): the saved dp comes back with the saved world, so
    the fix sets the node count that gives it (with the saved tp, pp and cp where known), not
    parallel.dp alone, which would only trade this error for TRC102."""
    dp = int(saved["dp"])
    world = dp * math.prod(int(saved.get(k) or now[k]) for k in ("tp", "pp", "cp"))
    gpn = int(now["gpus_per_node"])
    if world % gpn == 0:
        nodes = world // gpn
        return (
            f"run on {world} GPUs as saved: set cluster.num_nodes to {nodes} "
            f"({gpn} GPUs per node; dp {dp})",
            {"cluster.num_nodes": nodes, "parallel.dp": dp},
        )
    return (
        f"run on {world} GPUs as saved (dp {dp}); {world} is not a multiple of {gpn} GPUs per node",
        {},
    )


def resume_findings(
    saved: Mapping[str, Any], now: Mapping[str, Any], finetune: bool = False
) -> list[Finding]:
    """Why a job with facts ``now`` cannot (errors) or should not (warnings) load a checkpoint
    written with facts ``saved``; facts missing from ``saved`` are not checked. In order: the
    engine or the checkpoint format, the layout, the vocabulary, the architecture, and (unless
    ``finetune`` loads the weights only) the schedule and the optimizer."""
    return [
        *_engine_or_format(saved, now),
        *_layout(saved, now, finetune),
        *_vocab(saved, now),
        *_architecture(saved, now),
        *(() if finetune else (*_schedule(saved, now), *_optimizer(saved, now))),
    ]


def _differs(saved: Mapping[str, Any], now: Mapping[str, Any], k: str) -> bool:
    """Fact ``k`` is known on both sides and differs."""
    return k in saved and saved[k] is not None and k in now and saved[k] != now[k]


def _engine_or_format(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[Finding]:
    """TRC534: another engine reads another format; Megatron-FSDP reads fsdp_dtensor only."""
    if _differs(saved, now, "engine"):
        return [
            Finding(
                R.RESUME_LAYOUT,
                "engine",
                saved["engine"],
                now["engine"],
                f"the checkpoint was written by engine={saved['engine']}; "
                f"engine={now['engine']} reads another format",
                f"set engine={saved['engine']}",
                {"engine": saved["engine"]},
            )
        ]
    if _differs(saved, now, "checkpoint_format") and "fsdp_dtensor" in (
        saved["checkpoint_format"],
        now["checkpoint_format"],
    ):
        # Megatron-FSDP saves and loads fsdp_dtensor only (validate_args); a torch_dist / torch
        # checkpoint needs the Megatron-FSDP guide's conversion step, and back
        z = 3 if saved["checkpoint_format"] == "fsdp_dtensor" else 1
        return [
            Finding(
                R.RESUME_LAYOUT,
                "parallel.zero_stage",
                saved["checkpoint_format"],
                now["checkpoint_format"],
                f"the checkpoint is {saved['checkpoint_format']} and this job reads "
                f"{now['checkpoint_format']} (Megatron-FSDP, zero_stage 3, reads and "
                "writes fsdp_dtensor only)",
                f"set parallel.zero_stage={z} (as the saving run), or convert the "
                "checkpoint (Megatron-FSDP user guide, checkpoint conversion)",
                {"parallel.zero_stage": z},
            )
        ]
    return []


#: Why a format does not reshard the layout axes that moved (TRC534's message), by format.
_NOT_RESHARDED = {
    "torch": "legacy torch files hold one shard per model-parallel rank",
    "trainc": "the trainc worker's files record their layout and load only into it",
    "torch_dist": "the distributed optimizer's state was saved dp_reshardable "
    f"(Megatron-LM's default without {FULLY_RESHARDABLE_FLAG}), "
    "which reshards only in dp",
    "deepspeed": "DeepSpeed ZeRO stages 1-3 write one optimizer shard per data-parallel rank",
}
#: Why an axis does not change even through the format's conversion (TRC534's message and fix:
#: no conversion is offered), by (format, axis): trainc/conf/reshard.yaml.
_NO_CONVERSION = {
    ("deepspeed", "tp"): "and a tensor-parallel change does not load even through a universal "
    "checkpoint: ds_to_universal merges tp slices only by the parameter patterns the model "
    "declares (UNIVERSAL_CHECKPOINT_INFO), else concatenates every slice, replicated norms "
    "included (deepspeedai/DeepSpeed#6503)",
}
#: How to convert a checkpoint of the format to one that loads (TRC534's fix), by format.
_CONVERSION = {
    "torch": "; or convert it with Megatron-LM tools/checkpoint/convert.py "
    "(--target-tensor-parallel-size / --target-pipeline-parallel-size) "
    "or save it as torch_dist (--ckpt-format torch_dist, "
    "--ckpt-convert-format)",
    "torch_dist": "; or, if the saving run used "
    f"{FULLY_RESHARDABLE_FLAG}, set "
    "resume.saved.optim_fully_reshardable=true; or set "
    "resume.finetune=true (weights only, a fresh optimizer); save "
    "with resume.optim_fully_reshardable=true to reshard later",
    "deepspeed": "; or convert it to a universal checkpoint "
    "(deepspeed/checkpoint/ds_to_universal.py) and load that with "
    '"checkpoint": {"load_universal": true}',
}


def _layout(saved: Mapping[str, Any], now: Mapping[str, Any], finetune: bool) -> list[Finding]:
    """TRC534: layout axes that moved and that the checkpoint's format does not reshard
    (:func:`reshard_axes`)."""
    fmt = str(saved.get("checkpoint_format") or now["checkpoint_format"])
    # a dense model has no expert weights: its etp (= tp, derived) is no saved layout of its own
    dense = now.get("num_experts") is None and saved.get("num_experts") is None
    allowed = reshard_axes(fmt, saved, now, finetune)
    moved = [
        k
        for k in LAYOUT
        if _differs(saved, now, k) and k not in allowed and not (k == "etp" and dense)
    ]
    if not moved:
        return []
    change = ", ".join(f"{k} {saved[k]} -> {now[k]}" for k in moved)
    how = _NOT_RESHARDED.get(fmt, f"format {fmt} does not reshard")
    stuck = [_NO_CONVERSION[fmt, k] for k in moved if (fmt, k) in _NO_CONVERSION]
    if stuck:
        how = f"{how}, {'; '.join(stuck)}"
    out = []
    for k in moved:
        fix, edits = (
            _dp_fix(saved, now)
            if k == "dp"
            else (f"set {LAYOUT[k]} to {saved[k]} (the saved layout)", {LAYOUT[k]: saved[k]})
        )
        out.append(
            Finding(
                R.RESUME_LAYOUT,
                LAYOUT[k],
                saved[k],
                now[k],
                f"resuming with {change} from a {fmt} checkpoint: {how}",
                fix + ("" if (fmt, k) in _NO_CONVERSION else _CONVERSION.get(fmt, "")),
                edits,
            )
        )
    return out


def _vocab(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[Finding]:
    """TRC535: the embedding's row count (the padded vocabulary) is a global shape."""
    if not _differs(saved, now, "padded_vocab_size"):
        return []
    fix, edits = _vocab_fix(int(saved["padded_vocab_size"]), now, saved.get("tp"))
    return [
        Finding(
            R.RESUME_VOCAB,
            "model.make_vocab_size_divisible_by",
            saved["padded_vocab_size"],
            now["padded_vocab_size"],
            f"the checkpoint's embedding has {saved['padded_vocab_size']} rows, this job pads "
            f"vocab_size {now['vocab_size']} to {now['padded_vocab_size']} (a multiple of "
            f"make_vocab_size_divisible_by {now['make_vocab_size_divisible_by']} x tp "
            f"{now['tp']}): the word embeddings do not load (size mismatch)",
            fix,
            edits,
        )
    ]


def _architecture(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[Finding]:
    """TRC536: the architecture's sizes are global shapes no format changes."""
    return [
        Finding(
            R.RESUME_ARCH,
            key,
            saved[k],
            now[k],
            f"{k} is {saved[k]} in the checkpoint and {now[k]} here: its tensors have "
            f"another global shape",
            f"set {key} to {saved[k]}",
            {key: saved[k]},
        )
        for k, key in ARCH.items()
        if _differs(saved, now, k)
    ]


def _schedule(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[Finding]:
    """TRC537: the learning-rate schedule continues from the checkpoint's iteration."""
    return [
        Finding(
            R.RESUME_SCHEDULE,
            key,
            saved[k],
            now[k],
            f"resuming with {k} {saved[k]} -> {now[k]}: the learning-rate schedule and "
            f"the samples consumed continue from the checkpoint's iteration",
            f"set {key} to {saved[k]}, or set resume.finetune=true to start a new "
            f"schedule from the weights",
            {key: saved[k]},
        )
        for k, key in SCHEDULE.items()
        if _differs(saved, now, k)
    ]


def _optimizer(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[Finding]:
    """TRC538: the saved optimizer state loads only into the same optimizer and ZeRO stage."""
    return [
        Finding(
            R.RESUME_OPTIMIZER,
            key,
            saved[k],
            now[k],
            f"{k} is {saved[k]} in the checkpoint and {now[k]} here: the saved "
            f"optimizer state does not load into it",
            f"set {key} to {saved[k]}, or set resume.finetune=true (weights only, a "
            f"fresh optimizer)",
            {key: saved[k]},
        )
        for k, key in (("optimizer", "training.optimizer"), ("zero_stage", "parallel.zero_stage"))
        if _differs(saved, now, k)
    ]


def checkpoint(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC533-TRC538."""
    r, lc = spec.resume, spec.launch
    titan = lc.entrypoint is Entrypoint.torchtitan
    if lc.entrypoint is not Entrypoint.megatron_lm and (
        r.checkpoint_format is not None
        or r.finetune
        or r.optim_fully_reshardable
        or (titan and r.load_dir is not None)
    ):
        key = (
            "resume.load_dir"
            if titan and r.load_dir is not None
            else "resume.checkpoint_format"
            if r.checkpoint_format is not None
            else "resume.optim_fully_reshardable"
            if r.optim_fully_reshardable
            else "resume.finetune"
        )
        runner = (
            "torchtitan.train (trainc writes no --checkpoint.* flags for it)"
            if titan
            else "the trainc worker, which writes its own files and always resumes weights, "
            "optimizer and step"
        )
        yield diag(
            R.CKPT_FORMAT_RUNNER,
            f"{key} is read by pretrain_gpt.py (--load / --ckpt-format / --finetune), not "
            f"by {runner}",
            key,
            related=("launch.entrypoint",),
            fix=f"unset {key}, or use launch.entrypoint=megatron-lm",
            edits={
                key: False if key in ("resume.finetune", "resume.optim_fully_reshardable") else None
            },
            entrypoint=lc.entrypoint.value,
            value=getattr(
                getattr(r, key.partition(".")[2]), "value", getattr(r, key.partition(".")[2])
            ),
        )
    saved = saved_facts(spec)
    if not saved:
        return
    for f in resume_findings(saved, layout_facts(spec, d), r.finetune):
        yield diag(
            f.rule,
            f.message,
            f.key,
            related=(f"resume.saved.{_fact(f.key)}",),
            fix=f.fix,
            edits=f.edits,
            saved=f.saved,
            now=f.now,
        )


def _fact(key: str) -> str:
    name = key.rpartition(".")[2]
    return "padded_vocab_size" if name == "make_vocab_size_divisible_by" else name
