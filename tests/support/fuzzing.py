"""Fuzz inputs for trainc's front end and the check that bad input never crashes it.

Three generators: YAML-ish text (tokens that matter to YAML, Hydra and trainc, glued at random,
sometimes as raw bytes), mutations of a valid spec (a key set to a value of the wrong type, size
or shape, or a new key), and command-line overrides. :func:`check_input` runs ``compile_spec`` on
one input: it must return (never raise), and every error must carry a rule of the catalog, a key
and a message.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from trainc.compiler import rules as R
from trainc.compiler.pipeline import CompileResult, compile_spec

VALID: dict[str, Any] = {
    "defaults": [{"model": "llama3-8b"}, {"cluster": "dgx-h100"}, "_self_"],
    "name": "fuzz",
    "cluster": {"num_nodes": 2},
    "parallel": {"tp": 2, "pp": 2},
    "training": {"micro_batch_size": 1, "global_batch_size": 32},
    "launch": {"env": {"NCCL_DEBUG": "WARN"}},
}

#: Dotted keys a mutation may touch (schema keys, sections, and a few that do not exist).
KEYS = [
    "name",
    "engine",
    "model",
    "cluster",
    "parallel",
    "training",
    "launch",
    "model.num_layers",
    "model.hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.ffn_hidden_size",
    "model.vocab_size",
    "model.seq_length",
    "model.num_experts",
    "model.moe_router_topk",
    "model.activation",
    "model.kv_channels",
    "cluster.num_nodes",
    "cluster.gpus_per_node",
    "cluster.gpu",
    "cluster.gpu_memory_gib",
    "cluster.nvlink_domain_size",
    "cluster.compute_efficiency",
    "parallel.tp",
    "parallel.pp",
    "parallel.vpp",
    "parallel.cp",
    "parallel.ep",
    "parallel.etp",
    "parallel.dp",
    "parallel.sequence_parallel",
    "parallel.zero_stage",
    "parallel.pipeline_first_stage_layers",
    "parallel.cp_comm_type",
    "training.micro_batch_size",
    "training.global_batch_size",
    "training.precision",
    "training.recompute",
    "training.recompute_num_layers",
    "training.lr",
    "training.min_lr",
    "training.offload_optimizer",
    "training.nvme_path",
    "training.train_iters",
    "launch.partition",
    "launch.account",
    "launch.time_limit",
    "launch.container_image",
    "launch.container_mounts",
    "launch.env",
    "launch.env.WANDB_API_KEY",
    "launch.env.A B",
    "launch.master_port",
    "launch.device",
    "launch.entrypoint",
    "launch.megatron_lm_path",
    "launch.data_path",
    "launch.save_dir",
    "parallel.tpp",
    "modle",
    "model.layers",
    "training.extra.deep",
]

EVIL_STRINGS = [
    "$(touch /tmp/trainc-fuzz-canary)",
    "`id`",
    "a; rm -rf ~",
    "x\ny",
    "a\x00b",
    "'\"",
    "${IFS}",
    "é" * 3,
    "x" * 10_000,
    "",
    " ",
    "-",
    "--help",
    "../..",
    "llama9",
    "${oc.env:HOME}",
    "${name}",
    "%(x)s",
    "{}",
    "[",
    "null",
    "1e400",
]

SCALARS = st.one_of(
    st.integers(min_value=-3, max_value=9),
    st.sampled_from([0, -1, 2**31, 2**63, 10**12, 10**13, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([1.0, 2.0, 0.5, -0.0, 1e-300, 1e300]),
    st.booleans(),
    st.none(),
    st.sampled_from(EVIL_STRINGS),
    st.text(max_size=20),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """The valid spec with 1-4 keys set to arbitrary values, as YAML text."""
    cfg = copy.deepcopy(VALID)
    if draw(st.integers(0, 9)) == 0:  # rarely: each new defaults list costs a Hydra compose
        cfg["defaults"] = draw(
            st.one_of(
                VALUES,
                st.lists(
                    st.fixed_dictionaries(
                        {"model": st.sampled_from(["llama2-7b", "mixtral-8x7b", "nope", "../x"])}
                    ),
                    max_size=2,
                ),
            )
        )
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(KEYS))
        value = draw(VALUES)
        parts = key.split(".")
        cur: Any = cfg
        for p in parts[:-1]:
            if not isinstance(cur.get(p), dict):
                cur[p] = {}
            cur = cur[p]
        if draw(st.integers(0, 9)) == 0:
            cur.pop(parts[-1], None)
        else:
            cur[parts[-1]] = value
    return yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)


TOKENS = [
    "model",
    "cluster",
    "parallel",
    "training",
    "launch",
    "defaults",
    "name",
    "tp",
    "pp",
    "num_layers",
    "global_batch_size",
    "env",
    ":",
    ": ",
    " ",
    "  ",
    "\n",
    "\n  ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "<<: ",
    "!!str ",
    "!!python/object:os.system ",
    "'",
    '"',
    "#",
    "${",
    "}",
    "1",
    "2.5",
    "-3",
    "1e400",
    "0x10",
    "null",
    "~",
    "true",
    ".nan",
    "\t",
    "\x00",
    "é",
    "? ",
    "|\n",
    ">\n",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "- model: llama3-8b\n",
    "- cluster: dgx-h100\n",
    "- _self_\n",
    "llama3-8b",
    "\\",
    "=",
]


@st.composite
def yamlish(draw: st.DrawFn) -> bytes:
    """Text glued from YAML-significant tokens (sometimes raw bytes, sometimes a valid prefix)."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200))
    text = "".join(draw(st.lists(st.sampled_from(TOKENS), max_size=60)))
    if kind <= 3:
        text = yaml.safe_dump(VALID, sort_keys=False) + text
    return text.encode("utf-8", errors="surrogatepass")


OV_TOKENS = [
    "parallel.tp",
    "model",
    "cluster",
    "launch.env",
    "training.lr",
    "name",
    "=",
    "==",
    "+",
    "~",
    "@",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "1",
    "-1",
    "1.5",
    "llama3-8b",
    "${x}",
    "'",
    '"',
    " ",
    "int(3)",
    "range(1,3)",
    "choice(1,2)",
    "null",
    "\x00",
    "é",
    "9" * 50,
]


@st.composite
def overrides(draw: st.DrawFn) -> list[str]:
    """A few KEY=VALUE overrides, valid or not."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append("".join(draw(st.lists(st.sampled_from(OV_TOKENS), min_size=1, max_size=8))))
        else:
            key = draw(st.sampled_from(KEYS))
            value = draw(
                st.sampled_from(
                    [
                        "1",
                        "0",
                        "-2",
                        "3.0",
                        "x",
                        "[1,2]",
                        "{a:1}",
                        "null",
                        "true",
                        "llama9",
                        "1e400",
                        "${name}",
                        "''",
                    ]
                )
            )
            out.append(f"{key}={value}")
    return out


def check_input(
    tmp: Path, data: bytes | str, ovs: list[str] | tuple[str, ...] = ()
) -> CompileResult:
    """Compile ``data`` (written to ``tmp/spec.yaml``) with ``ovs``; the result must be well
    formed. An exception escaping ``compile_spec`` propagates: that is the crash being hunted."""
    path = tmp / "spec.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    result = compile_spec(path, list(ovs))
    for d in result.diagnostics:
        assert d.rule.id in R.RULES_BY_ID, d.rule
        assert d.key and d.message, d.to_json()
        if d.is_error:
            assert not result.files, "files emitted for a spec with errors"
    if result.ok:
        assert result.files and "plan.json" in result.files
        est = (result.plan or {}).get("estimates") or {}
        mfu = est.get("mfu")
        assert mfu is None or (isinstance(mfu, float) and not math.isnan(mfu))
    return result
