"""TRC373, TRC375-TRC377, TRC390: MoE settings Megatron-Core 0.16.1 (or, TRC390, an older
release named in launch.versions.megatron_core) refuses when it builds the config or
the token dispatcher.

Sources (megatron-core 0.16.1): ``transformer/transformer_config.py``
``TransformerConfig.__post_init__`` ("Bias in Moe is only supported when ETP==1"; "Flex token
dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"; "fp8/fp4
must be specified when moe_router_padding_for_quantization is True"; "allgather and
alltoall_seq dispatcher does not support moe_router_padding_for_quantization");
``transformer/moe/token_dispatcher.py`` (``MoEFlexTokenDispatcher.__init__``: "Flex token
dispatcher requires TPxEP > 1", where TP is the expert tensor-parallel group;
``MoEAlltoAllTokenDispatcher`` / ``_DeepepManager``: drop-and-pad asserts a capacity factor).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.versions import before, release
from trainc.schemas import Device, Fp4Format, Fp8Format, MoeDispatcher, MoeFlexBackend, TrainSpec

#: The first Megatron-Core release whose TransformerConfig accepts a capacity factor with every
#: token dispatcher (core_v0.11.0 raises 'moe_expert_capacity_factor only works with alltoall
#: token dispatcher' for the others; removed in NVIDIA/Megatron-LM commit 0d389f5, first tagged
#: core_v0.12.0, where token dropping moved into the router).
CAPACITY_ANY_DISPATCHER_SINCE = "0.12.0"


def moe_dispatch(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC373 (expert bias with etp > 1), TRC390 (a capacity factor without alltoall before
    Megatron-Core 0.12), TRC375 (flex dispatcher), TRC376 (drop-and-pad without
    a capacity), TRC377 (router padding for FP8/FP4)."""
    if spec.model.num_experts is None:
        return
    yield from _expert_bias(spec, d)
    yield from _flex_dispatcher(spec, d)
    yield from _capacity(spec)
    yield from _quantization_padding(spec)


def _expert_bias(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC373: the MoE bias with expert tensor parallelism."""
    m = spec.model
    if m.add_bias_linear and d.etp > 1:
        yield diag(
            R.MOE_BIAS_ETP,
            f"add_bias_linear is true on an MoE model with etp "
            f"({d.etp}) > 1; Megatron-Core asserts 'Bias in Moe is only supported when "
            "ETP==1'",
            "model.add_bias_linear",
            related=("parallel.etp",),
            fix="set parallel.etp=1 (experts whole on each rank, split by ep), or "
            "model.add_bias_linear=false",
            edits={"parallel.etp": 1},
            etp=d.etp,
            add_bias_linear=True,
        )


def _flex_dispatcher(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC375 / TRC378: the flex dispatcher's group, device, backend and padding."""
    m, p = spec.model, spec.parallel
    flex = m.moe_token_dispatcher_type is MoeDispatcher.flex
    if flex and d.etp * p.ep == 1:
        yield diag(
            R.MOE_FLEX_DISPATCHER,
            "moe_token_dispatcher_type flex with etp = ep = 1: "
            "Megatron-Core's MoEFlexTokenDispatcher asserts 'Flex token dispatcher "
            "requires TPxEP > 1' (nothing to dispatch across)",
            "model.moe_token_dispatcher_type",
            related=("parallel.ep", "parallel.etp"),
            fix="set parallel.ep to a divisor of num_experts above 1, or "
            "model.moe_token_dispatcher_type=alltoall",
            edits={"model.moe_token_dispatcher_type": "alltoall"},
            ep=p.ep,
            etp=d.etp,
        )
    if flex and spec.launch.device is Device.cpu:
        yield diag(
            R.MOE_FLEX_DISPATCHER,
            "moe_token_dispatcher_type flex runs DeepEP / "
            "HybridEP CUDA kernels; launch.device is cpu",
            "model.moe_token_dispatcher_type",
            related=("launch.device",),
            fix="set model.moe_token_dispatcher_type=alltoall to try the layout on CPU",
            edits={"model.moe_token_dispatcher_type": "alltoall"},
            device="cpu",
        )
    group = d.etp * p.ep
    per_node = spec.cluster.gpus_per_node
    if flex and m.moe_flex_dispatcher_backend is MoeFlexBackend.deepep and 1 < group <= per_node:
        yield diag(
            R.MOE_FLEX_SCALE,
            f"the flex dispatcher's deepep backend with an etp x ep "
            f"group of {group} GPUs inside one node ({per_node} GPUs): DeepEP is tuned "
            "for expert parallelism across nodes (EP > 8); inside a node Megatron-LM's "
            "maintainers measured alltoall / allgather as fast or faster (Megatron-LM "
            "#1456)",
            "model.moe_token_dispatcher_type",
            related=("parallel.ep", "parallel.etp", "cluster.gpus_per_node"),
            fix="set model.moe_token_dispatcher_type=alltoall (or keep flex for an EP "
            "group that spans nodes)",
            edits={"model.moe_token_dispatcher_type": "alltoall"},
            group=group,
            gpus_per_node=per_node,
        )
    if (
        flex
        and m.moe_flex_dispatcher_backend is MoeFlexBackend.deepep
        and m.moe_pad_expert_input_to_capacity
    ):
        yield diag(
            R.MOE_FLEX_DISPATCHER,
            "the flex dispatcher's deepep backend does not "
            "drop-and-pad (Megatron-Core: 'Flex token dispatcher with deepep backend "
            "does not support moe_pad_expert_input_to_capacity')",
            "model.moe_pad_expert_input_to_capacity",
            related=("model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend"),
            fix="set model.moe_pad_expert_input_to_capacity=false (dropless or drop "
            "without padding), or model.moe_flex_dispatcher_backend=hybridep, or "
            "model.moe_token_dispatcher_type=alltoall",
            edits={"model.moe_pad_expert_input_to_capacity": False},
            backend="deepep",
        )
    if not flex and m.moe_flex_dispatcher_backend is not MoeFlexBackend.deepep:
        yield diag(
            R.MOE_FLEX_DISPATCHER,
            "moe_flex_dispatcher_backend "
            f"({m.moe_flex_dispatcher_backend.value}) is read only by the flex "
            f"dispatcher; moe_token_dispatcher_type is {m.moe_token_dispatcher_type.value}",
            "model.moe_flex_dispatcher_backend",
            related=("model.moe_token_dispatcher_type",),
            fix="set model.moe_token_dispatcher_type=flex, or remove "
            "model.moe_flex_dispatcher_backend",
            edits={"model.moe_token_dispatcher_type": "flex"},
            backend=m.moe_flex_dispatcher_backend.value,
        )


def _capacity(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC390 / TRC376: the capacity factor's dispatcher; drop-and-pad without a capacity."""
    m = spec.model
    if (
        m.moe_expert_capacity_factor is not None
        and m.moe_expert_capacity_factor >= 0
        and m.moe_token_dispatcher_type is not MoeDispatcher.alltoall
        and before(spec, "megatron_core", CAPACITY_ANY_DISPATCHER_SINCE)
    ):
        mc = ".".join(map(str, release(spec, "megatron_core") or ()))
        kind = m.moe_token_dispatcher_type.value
        yield diag(
            R.MOE_CAPACITY_DISPATCHER,
            f"moe_expert_capacity_factor ({m.moe_expert_capacity_factor:g}) with the "
            f"{kind} token dispatcher on Megatron-Core {mc}: TransformerConfig raises "
            "'moe_expert_capacity_factor only works with alltoall token dispatcher' "
            f"(releases before {CAPACITY_ANY_DISPATCHER_SINCE} drop tokens in the "
            "alltoall dispatcher only)",
            "model.moe_expert_capacity_factor",
            related=("model.moe_token_dispatcher_type", "launch.versions.megatron_core"),
            fix="set model.moe_token_dispatcher_type=alltoall to keep the capacity "
            f"factor, or model.moe_expert_capacity_factor=null (dropless) with {kind}, "
            f"or use Megatron-Core {CAPACITY_ANY_DISPATCHER_SINCE} or later "
            "(launch.versions.megatron_core)",
            edits={"model.moe_token_dispatcher_type": "alltoall"},
            capacity_factor=m.moe_expert_capacity_factor,
            dispatcher=kind,
            megatron_core=mc,
        )
    if m.moe_pad_expert_input_to_capacity and m.moe_expert_capacity_factor is None:
        yield diag(
            R.MOE_PAD_CAPACITY,
            "moe_pad_expert_input_to_capacity pads every expert to "
            "its capacity, but moe_expert_capacity_factor is null (dropless: no "
            "capacity); the token dispatcher asserts a capacity factor at init",
            "model.moe_pad_expert_input_to_capacity",
            related=("model.moe_expert_capacity_factor",),
            fix="set model.moe_expert_capacity_factor (e.g. 1.0), or "
            "model.moe_pad_expert_input_to_capacity=false",
            edits={"model.moe_expert_capacity_factor": 1.0},
            capacity_factor=None,
        )


def _quantization_padding(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC377: router padding for FP8/FP4 GEMMs."""
    m, t = spec.model, spec.training
    if m.moe_router_padding_for_quantization:
        low = t.fp8_format is not Fp8Format.none or t.fp4_format is not Fp4Format.none
        if not low:
            yield diag(
                R.MOE_QUANT_PADDING,
                "moe_router_padding_for_quantization pads expert "
                "tokens to the FP8/FP4 GEMM alignment, but fp8_format and fp4_format "
                "are none (Megatron-Core: 'fp8/fp4 must be specified when "
                "moe_router_padding_for_quantization is True')",
                "model.moe_router_padding_for_quantization",
                related=("training.fp8_format", "training.fp4_format"),
                fix="set model.moe_router_padding_for_quantization=false, or "
                "training.fp8_format=hybrid",
                edits={"model.moe_router_padding_for_quantization": False},
                fp8_format="none",
                fp4_format="none",
            )
        if m.moe_token_dispatcher_type is MoeDispatcher.allgather:
            yield diag(
                R.MOE_QUANT_PADDING,
                "moe_router_padding_for_quantization with the "
                "allgather dispatcher: Megatron-Core raises 'allgather and alltoall_seq "
                "dispatcher does not support moe_router_padding_for_quantization'",
                "model.moe_router_padding_for_quantization",
                related=("model.moe_token_dispatcher_type",),
                fix="set model.moe_token_dispatcher_type=alltoall, or "
                "model.moe_router_padding_for_quantization=false (the experts then "
                "pad themselves)",
                edits={"model.moe_token_dispatcher_type": "alltoall"},
                dispatcher="allgather",
            )
