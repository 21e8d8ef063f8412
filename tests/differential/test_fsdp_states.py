"""engine=fsdp: the model-state bytes trainc counts per GPU
(:func:`trainc.compiler.estimate.fsdp.fsdp_states`) against what each rank of the real FSDP2
stack holds: the FSDP2 worker's own model (``trainc.launch.worker.engines.fsdp.build_model``,
``fully_shard`` of torch 2.13 with the plan's mesh and ``MixedPrecisionPolicy``) and optimizer
(``build_optimizer``, AdamW) after one forward, backward and step on CPU under gloo
(``fsdp_state_oracle.py``, ranks spawned in a subprocess).

Scaling formula stated by the test. A parameter of ``r`` rows (dim 0) and ``c`` elements per
row, sharded over ``n = dp_shard x cp`` ranks (HSDP replicates over ``dp_replicate`` and
shards over ``dp_shard`` only), is chunked as ``torch.chunk`` does: every rank's storage holds
``ceil(r/n) * c`` elements (FSDP2 pads dim 0 to a multiple of ``n``: ``FSDPParam.
_init_sharded_param``, torch 2.13 ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``,
``padded_sharded_param = param_data.new_zeros(chunks[0].size())``), rank ``k`` uses
``clamp(r - k ceil(r/n), 0, ceil(r/n)) * c`` of them. So on every rank:

* sharded parameters: ``4 * sum ceil(r/n) c`` bytes (fp32, the original dtype; the bf16
  ``param_dtype`` only applies to the gathered copy);
* sharded gradients: the same ``4 * sum ceil(r/n) c`` bytes: one flat fp32 reduce-scatter
  output per ``fully_shard`` group, padded, the gradients views into it (``foreach_reduce``,
  ``_fsdp_collectives.py``; cast to the original dtype when ``reduce_dtype`` differs);
* AdamW exp_avg + exp_avg_sq: ``8 * sum clamp(...) c`` (``zeros_like`` of the unpadded local
  shard, ``torch/optim/adam.py`` ``Adam._init_group``): rank 0 holds the most, ``8 * sum
  ceil(r/n) c``; plus a 4-byte ``step`` scalar per tensor, on the host (not GPU memory).

trainc counts ``P/n`` per term (``P`` its parameter count, :mod:`trainc.compiler.estimate.params`),
so the real rank 0 holds trainc's bytes plus ``pad = sum (ceil(r/n) - r/n) c`` elements per
term: exactly trainc's when every dim 0 divides ``n`` (the usual case: powers of two), and less
than one row per tensor more otherwise (the ``odd`` model below: 90 elements at n = 2).

Gathered parameters (trainc's ``2 x largest block`` in ``param_dtype``): on CPU every collective
is synchronous, so the most unsharded bytes held at once are the root module's (embedding,
final norm, output: ``root_reshard_after_forward`` false) plus one block, padded, with
``reshard_after_forward``, or the whole model without it; on a GPU the block prefetched on the
all-gather stream comes on top (not observable here). No unsharded storage is left after the
step.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.e2e import base_spec, merge
from tests.support.kit import make
from trainc.compiler.estimate.fsdp import (
    DTYPE_BYTES,
    fsdp_states,
    optimizer_bytes,
    shard_group,
    sharded_params,
)
from trainc.compiler.estimate.params import stage_params
from trainc.compiler.pipeline import plan_and_estimate
from trainc.schemas import TrainSpec

pytest.importorskip("torch")
pytestmark = [pytest.mark.differential, pytest.mark.slow, pytest.mark.worker]

ORACLE = Path(__file__).with_name("fsdp_state_oracle.py")

#: A model whose dims do not divide 2 or 4 (ffn 45, vocab 101; at n = 4 also h 30): FSDP2 pads.
ODD = {
    "model": {
        "num_layers": 2,
        "hidden_size": 30,
        "num_attention_heads": 3,
        "ffn_hidden_size": 45,
        "vocab_size": 101,
        "make_vocab_size_divisible_by": 1,
    }
}
BF16 = {"training": {"precision": "bf16"}}
#: name -> (world size, spec changes on tests.support.e2e.base_spec with engine fsdp)
LAYOUTS: dict[str, tuple[int, dict[str, Any]]] = {
    "even_shard2_fp32": (2, {}),
    "odd_shard2_bf16": (2, merge(ODD, BF16)),
    "odd_shard2_bf16_no_reshard": (
        2,
        merge(merge(ODD, BF16), {"fsdp": {"reshard_after_forward": False}}),
    ),
    "odd_shard4_bf16": (4, merge(ODD, BF16)),
    "odd_hsdp2x2_bf16": (4, merge(merge(ODD, BF16), {"fsdp": {"dp_replicate": 2}})),
}
#: root-module parameters (not in a block)
ROOT = ("tok_embeddings.", "pos_embeddings.", "norm.", "output.")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _spec(name: str) -> tuple[TrainSpec, Any]:
    world, over = LAYOUTS[name]
    base = merge(base_spec(name, world), {"engine": "fsdp", "parallel": {"zero_stage": 1}})
    spec, diags, plan = plan_and_estimate(make(merge(base, over)), normalized=True)
    assert plan is not None, [d.to_json() for d in diags if d.is_error]
    return spec, plan


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("fsdp_states")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    out: dict[str, list[dict[str, Any]]] = {}
    for world in sorted({w for w, _ in LAYOUTS.values()}):
        names = [n for n, (w, _) in LAYOUTS.items() if w == world]
        paths = []
        for name in names:
            path = tmp / f"{name}.json"
            path.write_text(json.dumps(_spec(name)[1].to_json()))
            paths.append(str(path))
        res = subprocess.run(
            [sys.executable, str(ORACLE), _free_port(), str(world), *paths],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        line = next(x for x in res.stdout.splitlines() if x.startswith("FSDPMEM "))
        out |= dict(zip(names, json.loads(line[len("FSDPMEM ") :]), strict=True))
    return out


def _rows(shapes: dict[str, list[int]]) -> list[tuple[str, int, int]]:
    """(name, rows = dim 0, elements per row) of every parameter."""
    return [(k, s[0], math.prod(s[1:])) for k, s in shapes.items()]


def _padded(rows: list[tuple[str, int, int]], n: int) -> int:
    return sum(-(-r // n) * c for _, r, c in rows)


def _local(rows: list[tuple[str, int, int]], n: int, k: int) -> int:
    return sum(min(max(r - k * -(-r // n), 0), -(-r // n)) * c for _, r, c in rows)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_sharded_states_byte_for_byte(measured: dict[str, Any], name: str) -> None:
    spec, plan = _spec(name)
    (sp,) = stage_params(spec, plan)
    ranks = measured[name]
    rows = _rows(ranks[0]["shapes"])
    n = shard_group(spec)
    assert n == (2 if name != "odd_shard4_bf16" else 4)
    # trainc's parameter count is the real model's
    assert sum(r * c for _, r, c in rows) == sp.total
    padded = _padded(rows, n)
    pad = padded - sp.total / n  # elements per rank trainc does not count
    assert (pad == 0) is name.startswith("even")
    if name == "odd_shard2_bf16":
        assert pad == 90  # w1, w3 (45 rows) x 2 layers, embedding and output (101 rows): 15 each
    trainc_shard = 4 * sharded_params(spec, sp)
    opt_b = optimizer_bytes(spec)
    for k, got in enumerate(ranks):
        k_shard = k % n  # HSDP: the mesh is (dp_replicate, dp_shard), dp_shard innermost
        assert got["param_element_size"] == got["grad_element_size"] == "4"
        assert got["param_padded_numel"] == padded
        assert got["param_local_numel"] == got["grad_local_numel"] == _local(rows, n, k_shard)
        assert got["param_bytes"] == got["grad_bytes"] == 4 * padded == trainc_shard + 4 * pad
        moments = got["exp_avg_bytes"] + got["exp_avg_sq_bytes"]
        assert moments == opt_b * _local(rows, n, k_shard)
        assert got["step_bytes"] == 4 * got["tensors"]  # host scalars
        assert got["unsharded_after_step_bytes"] == 0
    # rank 0 holds the most: trainc's terms plus the padding
    st = fsdp_states(spec, sp)
    pd = DTYPE_BYTES[spec.fsdp.param_dtype]  # type: ignore[index]
    gathered = (
        2 * sp.largest_layer if spec.fsdp.reshard_after_forward else sp.total + sp.largest_layer
    )
    assert st.params - pd * gathered == trainc_shard
    assert st.grads - DTYPE_BYTES[spec.fsdp.reduce_dtype] * 2 * sp.largest_layer == trainc_shard
    assert max(r["exp_avg_bytes"] + r["exp_avg_sq_bytes"] for r in ranks) == (
        st.optimizer + opt_b * pad
    )


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_gathered_parameters_on_cpu(measured: dict[str, Any], name: str) -> None:
    spec, _ = _spec(name)
    n = shard_group(spec)
    got = measured[name][0]
    rows = _rows(got["shapes"])
    pd = DTYPE_BYTES[spec.fsdp.param_dtype]  # type: ignore[index]
    assert got["param_dtype"] == ("None" if pd == 4 else "torch.bfloat16")
    root = [x for x in rows if x[0].startswith(ROOT)]
    blocks = {x[0].split(".")[1] for x in rows if x[0].startswith("layers.")}
    block = max(_padded([x for x in rows if x[0].startswith(f"layers.{b}.")], n) for b in blocks)
    # the all-gather outputs are the padded unsharded tensors: n x the padded shard
    want = _padded(root, n) + block if spec.fsdp.reshard_after_forward else _padded(rows, n)
    assert got["peak_unsharded_param_bytes"] == pd * n * want
