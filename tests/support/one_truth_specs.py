"""Generated specs for the "one truth" tests: the differential tests' coherent layouts
(:func:`differential.strategies.coherent_specs`), made runnable for engine=deepspeed (the trainc
worker on DeepSpeed splits tp and dp only, TRC313), plus draws of the keys issue 11 added
(optimizer and its hyper-parameters, schedules, overlap, bias, norm, init, dropouts, RoPE, MoE
router, data split), each within the range its rule accepts."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.support.kit import make
from tests.support.spec_dicts import coherent_specs
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.validate.precision_shapes import ALIGN, misaligned, recipe_name


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def one_truth_specs(
    draw: st.DrawFn, *, engine: str | None = None, low_precision: bool = True
) -> dict[str, Any]:
    """A spec dict that trainc should accept, with the issue-11 keys drawn (and, with
    ``low_precision``, the FP8/FP4 and optimizer-state keys, which need Transformer Engine on
    CUDA to build)."""
    cfg = draw(coherent_specs(engine=engine))
    m, p, t, c = cfg["model"], cfg["parallel"], cfg["training"], cfg["cluster"]
    ds = cfg["engine"] == "deepspeed"
    if ds and p["pp"] > 1:  # tp x dp only: drop the pipeline, keep the other degrees
        world = c["num_nodes"] * c["gpus_per_node"] // p["pp"]
        p["pp"], p["vpp"] = 1, 1
        c["gpus_per_node"] = max(d for d in _divisors(world) if d <= 8)
        c["num_nodes"] = world // c["gpus_per_node"]
    t["train_iters"] = draw(st.sampled_from([10, 100, 1000]))
    # multi-head latent attention (Megatron-Core builds it: megatron and deepspeed engines)
    if (
        cfg["engine"] != "fsdp"
        and m.get("position_embedding", "rope") == "rope"
        and draw(st.integers(0, 4)) == 0
    ):
        m["multi_latent_attention"] = True
        m.pop("num_query_groups", None)  # MLA has no grouped-query attention (TRC316)
        m["q_lora_rank"] = draw(st.sampled_from([None, 32, 64]))
        m["kv_lora_rank"] = draw(st.sampled_from([16, 32]))
        m["qk_head_dim"] = draw(st.sampled_from([16, 32]))
        m["qk_pos_emb_head_dim"] = draw(st.sampled_from([8, 16]))
        m["v_head_dim"] = draw(st.sampled_from([16, 32]))
    # optimizer and its hyper-parameters
    if draw(st.integers(0, 3)) == 0:
        t["optimizer"] = "sgd"
        if draw(st.booleans()):
            t["sgd_momentum"] = draw(st.sampled_from([0.0, 0.5, 0.95]))
    else:
        if draw(st.booleans()):
            t["adam_beta1"] = draw(st.sampled_from([0.8, 0.9]))
            t["adam_beta2"] = draw(st.sampled_from([0.95, 0.98, 0.999]))
        if draw(st.booleans()):
            t["adam_eps"] = draw(st.sampled_from([1e-8, 1e-6, 1.5e-5]))
    t["lr"] = draw(st.sampled_from([3e-4, 1e-3, 6e-5]))
    t["min_lr"] = draw(st.sampled_from([0.0, t["lr"] / 10, 1e-6]))
    t["weight_decay"] = draw(st.sampled_from([0.0, 0.01, 0.1]))
    t["grad_clip"] = draw(st.sampled_from([0.0, 1.0, 0.5]))
    # schedule
    styles = (
        ["constant", "cosine", "linear"]
        if ds
        else ["constant", "cosine", "linear", "inverse-square-root", "WSD"]
    )
    style = draw(st.sampled_from(styles))
    t["lr_decay_style"] = style
    if draw(st.booleans()):
        t["lr_decay_iters"] = draw(st.sampled_from([t["train_iters"], t["train_iters"] // 2 or 1]))
    decay = t.get("lr_decay_iters", t["train_iters"])
    t["lr_warmup_iters"] = draw(st.sampled_from([0, 0, max(decay // 10, 1) if decay > 1 else 0]))
    if ds and style == "linear":
        t["min_lr"] = 0.0  # DeepSpeed's WarmupDecayLR warms up from the value it decays to
    if ds and t["lr_warmup_iters"] == 1:
        t["lr_warmup_iters"] = 2 if decay > 2 else 0  # DeepSpeed warms up over >= 2 steps (TRC323)
    if style == "WSD":
        t["lr_wsd_decay_iters"] = draw(st.sampled_from([max(decay // 5, 1), decay]))
        t["lr_wsd_decay_style"] = draw(
            st.sampled_from(["exponential", "linear", "cosine", "minus_sqrt"])
        )
    # overlap (Megatron-Core DDP only)
    if not ds and draw(st.booleans()):
        t["overlap_grad_reduce"] = draw(st.booleans())
        if t["overlap_grad_reduce"] and p["zero_stage"] == 1:
            t["overlap_param_gather"] = draw(st.booleans())
        else:
            t["overlap_param_gather"] = False
    # FP8 / FP4 and optimizer state precision (engine=megatron on CUDA only, TRC330)
    cuda = low_precision and cfg.get("launch", {}).get("device", "cuda") == "cuda"
    if not ds and cuda and draw(st.integers(0, 2)) == 0:
        if draw(st.booleans()):
            t["fp8_format"] = draw(st.sampled_from(["e4m3", "hybrid"]))
            t["fp8_recipe"] = draw(st.sampled_from(["delayed", "tensorwise", "blockwise", "mxfp8"]))
            t["fp8_param_gather"] = p["zero_stage"] == 1 and draw(st.booleans())
        else:
            t["fp4_format"] = "e2m1"
        # Blackwell runs every recipe (TRC370); delayed scaling keeps no BF16 layers (TRC372)
        c["gpu"] = "b200"
        t["first_last_layers_bf16"] = t.get("fp8_recipe") != "delayed" and draw(st.booleans())
        if _misaligned(cfg):  # the local GEMM shapes of this layout do not quantize (TRC371)
            for k in ("fp8_format", "fp8_recipe", "fp4_format", "first_last_layers_bf16"):
                t.pop(k, None)
            t["fp8_param_gather"] = False
    # TP communication overlap (engine=megatron on CUDA, tp > 1 with sequence parallelism)
    on_cuda = cfg.get("launch", {}).get("device", "cuda") == "cuda"
    if (
        not ds
        and on_cuda
        and p.get("tp", 1) > 1
        and p.get("sequence_parallel", True)
        and draw(st.booleans())
    ):
        t["tp_comm_overlap"] = draw(st.booleans())
    if (
        not ds
        and cuda
        and p["zero_stage"] == 1
        and t.get("optimizer", "adam") == "adam"
        and draw(st.integers(0, 2)) == 0
    ):
        t["main_grads_dtype"] = draw(st.sampled_from(["fp32", "bf16"]))
        t["main_params_dtype"] = draw(st.sampled_from(["fp32", "fp16"]))
        t["exp_avg_dtype"] = draw(st.sampled_from(["fp32", "fp16", "bf16", "fp8"]))
        t["exp_avg_sq_dtype"] = draw(st.sampled_from(["fp32", "fp16", "bf16", "fp8"]))
    # model keys
    if draw(st.booleans()):
        m["add_qkv_bias"] = draw(st.booleans())
    if draw(st.booleans()):
        m["add_bias_linear"] = draw(st.booleans())
    if draw(st.booleans()):
        m["norm_epsilon"] = draw(st.sampled_from([1e-5, 1e-6]))
        m["init_method_std"] = draw(st.sampled_from([0.02, 0.008, 0.006]))
    if draw(st.booleans()):
        m["hidden_dropout"] = draw(st.sampled_from([0.0, 0.1]))
        m["attention_dropout"] = draw(st.sampled_from([0.0, 0.1]))
    if m.get("position_embedding", "rope") == "rope" and draw(st.booleans()):
        m["rotary_base"] = draw(st.sampled_from([10000, 500000, 1000000]))
        m["rotary_percent"] = draw(st.sampled_from([1.0, 0.5]))
        m["rope_scaling_factor"] = draw(st.sampled_from([None, 8.0, 4.0]))
    m["vocab_size"] = draw(st.sampled_from([m["vocab_size"], 32001, 50257, 129]))
    if m.get("num_experts"):
        lb = draw(
            st.sampled_from(["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"])
        )
        m["moe_router_load_balancing_type"] = lb
        m["moe_aux_loss_coeff"] = draw(st.sampled_from([0.0, 1e-2, 1e-3]))
        m["moe_z_loss_coeff"] = draw(st.sampled_from([None, 1e-3]))
        m["moe_router_score_function"] = draw(st.sampled_from(["softmax", "sigmoid"]))
        if draw(st.booleans()):
            m["moe_router_pre_softmax"] = draw(st.booleans())
        m["moe_router_topk_scaling_factor"] = draw(st.sampled_from([None, 2.5]))
        if lb != "sinkhorn":
            m["moe_expert_capacity_factor"] = draw(st.sampled_from([None, 1.0, 1.25]))
        if draw(st.booleans()):
            m["moe_shared_expert_intermediate_size"] = p["tp"] * 64 * draw(st.integers(1, 4))
        etp = p.get("etp") or p["tp"]
        flex = ["flex"] if p.get("ep", 1) * etp > 1 else []  # TRC375: etp*ep > 1
        m["moe_token_dispatcher_type"] = draw(st.sampled_from(["alltoall", "allgather", *flex]))
        if m["moe_token_dispatcher_type"] == "flex":
            m["moe_flex_dispatcher_backend"] = draw(st.sampled_from(["deepep", "hybridep"]))
        deepep = m.get("moe_flex_dispatcher_backend") == "deepep"
        if m.get("moe_expert_capacity_factor") is not None and not deepep:
            m["moe_pad_expert_input_to_capacity"] = draw(st.booleans())  # TRC375, TRC376
        low = t.get("fp8_format", "none") != "none" or t.get("fp4_format", "none") != "none"
        if low and m["moe_token_dispatcher_type"] != "allgather":
            m["moe_router_padding_for_quantization"] = draw(st.booleans())  # TRC377
    # Megatron-LM's pretrain_gpt.py instead of the trainc worker
    if not ds and draw(st.integers(0, 3)) == 0:
        cfg["launch"] |= {"entrypoint": "megatron-lm", "megatron_lm_path": "/opt/Megatron-LM"}
        # Megatron-FSDP (zero_stage 3): its overlaps are always on (TRC383), no fp8 param
        # gather and precision-aware optimizer keys drawn for the distributed optimizer only
        if p["zero_stage"] == 1 and draw(st.integers(0, 2)) == 0:
            p["zero_stage"] = 3
            for k in ("overlap_grad_reduce", "overlap_param_gather"):
                if t.get(k) is False:
                    t.pop(k)
    # data
    if not ds and draw(st.integers(0, 2)) == 0:
        cfg["launch"]["data_path"] = "/data/corpus_text_document"
        cfg["launch"]["data_split"] = draw(st.sampled_from(["100,0,0", "98,1,1", "969,30,1"]))
    elif not ds and draw(st.integers(0, 2)) == 0:  # a blend (data.paths)
        cfg["data"] = {
            "paths": draw(
                st.sampled_from(
                    [["/data/a_text", "/data/b_text"], ["0.7 /data/a_text", "0.3 /data/b_text"]]
                )
            )
        }
    data = cfg.setdefault("data", {})
    data["reset_position_ids"] = draw(st.booleans())
    data["eod_mask_loss"] = draw(st.booleans())
    # (reset_attention_mask compiles nowhere: TRC353 with TE, TRC356 for the trainc worker)
    lm = cfg["launch"].get("entrypoint") == "megatron-lm"
    if lm and draw(st.booleans()):  # load another run's checkpoint, maybe weights only
        cfg["resume"] = {
            "load_dir": "/ckpt/base",
            "finetune": draw(st.booleans()),
            "checkpoint_format": draw(st.sampled_from([None, "torch_dist", "torch"])),
        }
    return cfg


def _misaligned(cfg: dict[str, Any]) -> bool:
    """True when the FP8/FP4 recipe drawn in ``cfg`` cannot quantize its local GEMMs."""
    spec = make(cfg)
    recipe = recipe_name(spec)
    if recipe is None:
        return False
    m_unit, unit = ALIGN[recipe]
    tokens = spec.training.micro_batch_size * spec.model.seq_length // spec.parallel.cp
    etp = spec.parallel.etp or spec.parallel.tp
    return bool(misaligned(spec, spec.parallel.tp, etp, unit)) or tokens % m_unit != 0


def compile_cfg(cfg: dict[str, Any], overrides: tuple[str, ...] = ()) -> Any:
    """compile_spec of a spec dict (written to a temporary spec.yaml)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        return compile_spec(path, list(overrides))
