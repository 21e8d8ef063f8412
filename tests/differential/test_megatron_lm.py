"""``megatron_args.txt`` through Megatron-LM's own parser, validation and set-up (the target
version, ``plan.json`` ``target_versions.megatron_lm``), in one subprocess
(:mod:`differential.megatron_lm_oracle`, on the unpacked wheel of the ``megatron_lm_wheel``
fixture).

For every golden case that emits ``megatron_args.txt``, for a few explicit specs, and for
generated specs that trainc accepts (hypothesis, derandomized; ``TRAINC_MLM_EXAMPLES``, default
90 drawn, of which about 60 % are accepted; ``TRAINC_MLM_SEED`` draws a random run from that
seed): Megatron-LM accepts the flags and derives what ``plan.json`` says, each property one
*kind* of :func:`disagreements`:

* ``accepted``: parse_args, validate_args, the micro-batch calculator, build_tokenizer,
  initialize_model_parallel, TransformerConfig, the DDP/optimizer configs and a meta-device
  GPTModel of pipeline rank 0 all pass;
* ``dp``, ``padded_vocab``, ``num_microbatches``, ``layers_per_chunk`` (per pipeline rank and
  virtual stage), ``kv_channels``: equal to ``plan.json``;
* ``tokenizer_vocab``: the tokenizer covers ``model.vocab_size`` ids;
* ``split``: with a data path, the split is stated (``--split``), not Megatron's legacy
  ``969, 30, 1`` default;
* ``ddp_config``, ``transformer_config``, ``optimizer_config``, ``initialize_model_parallel``,
  ``forward_backward_func``, ``gpt_model``: every key of those sections of
  ``megatron_core.yaml`` (what the worker builds) equals what Megatron-LM builds from the flags
  (``get_megatron_ddp_config``, ``core_transformer_config_from_args``,
  ``get_megatron_optimizer_config``, and the keyword arguments of ``initialize_model_parallel``,
  the training step's ``forward_backward_func`` and pretrain_gpt's ``GPTModel``).

Known disagreements of today's trainc are ``xfail(strict=True)`` with the bug named: remove the
mark when the fix lands (a strict xfail that passes fails the run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainc.compiler.derive import stage_chunk_sizes
from trainc.compiler.pipeline import compile_spec

pytestmark = pytest.mark.differential

ORACLE = Path(__file__).with_name("megatron_lm_oracle.py")
CASES = Path(__file__).resolve().parents[1] / "golden" / "cases"
EXAMPLES = int(os.environ.get("TRAINC_MLM_EXAMPLES", "90"))
SEED = os.environ.get("TRAINC_MLM_SEED")

#: What each kind compares (the test ids).
KINDS = (
    "accepted",
    "dp",
    "padded_vocab",
    "num_microbatches",
    "layers_per_chunk",
    "kv_channels",
    "tokenizer_vocab",
    "split",
    "ddp_config",
    "transformer_config",
    "optimizer_config",
    "initialize_model_parallel",
    "forward_backward_func",
    "gpt_model",
)

# The known bugs of issue 11 this oracle found (vocab_size - 1 for --vocab-size, no --split
# with a data path, shared-expert width not a multiple of tp, --optimizer adamw, megatron-lm on
# CPU, overlap flags that megatron_core.yaml contradicted) are fixed: the explicit specs below
# reproduce them and must agree, or be refused by trainc's own rule (REFUSED_BY_TRAINC).


def _spec(**changes: Any) -> dict[str, Any]:
    """A small valid Megatron spec with dotted-key changes (explicit examples)."""
    cfg: dict[str, Any] = {
        "name": "mlm",
        "engine": "megatron",
        "model": {
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1024,
            "seq_length": 256,
        },
        "cluster": {"num_nodes": 1, "gpus_per_node": 4, "gpu": "h100-80g"},
        "parallel": {"tp": 2, "pp": 2},
        "training": {"micro_batch_size": 1, "global_batch_size": 8},
        "launch": {},
    }
    for key, value in changes.items():
        section, _, leaf = key.rpartition(".")
        (cfg[section] if section else cfg)[leaf] = value
    return cfg


#: name -> (spec, {kind: reason} of the kinds known to fail today). These specs reproduced the
#: disagreements of issue 11 (vocab_size - 1, no --split, overlap flags); all agree now.
EXPLICIT: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    # 32001 % (128 * 1) == 1: Megatron pads 32001 ids to 32128 (trainc wrote 32000 before)
    "vocab-32001": (
        _spec(
            **{
                "model.vocab_size": 32001,
                "parallel.tp": 1,
                "parallel.pp": 1,
                "cluster.gpus_per_node": 1,
            }
        ),
        {},
    ),
    "vocab-32001-tp2": (
        _spec(**{"model.vocab_size": 32001, "parallel.pp": 1, "cluster.gpus_per_node": 2}),
        {},
    ),
    "vocab-32000": (_spec(**{"model.vocab_size": 32000}), {}),
    "data-path": (_spec(**{"launch.data_path": "/data/corpus_text_document"}), {}),
    "vocab-1": (_spec(**{"model.vocab_size": 1}), {}),
    "dp2": (_spec(**{"cluster.gpus_per_node": 8}), {}),
    "sgd-betas-wsd": (
        _spec(
            **{
                "training.optimizer": "sgd",
                "training.sgd_momentum": 0.8,
                "training.lr_decay_style": "WSD",
                "training.lr_wsd_decay_iters": 100,
                "training.lr_warmup_iters": 10,
            }
        ),
        {},
    ),
    "adam-0.95-linear": (
        _spec(
            **{
                "training.adam_beta2": 0.95,
                "training.adam_eps": 1.0e-6,
                "training.lr_decay_style": "linear",
                "model.init_method_std": 0.006,
                "model.hidden_dropout": 0.0,
                "model.add_qkv_bias": True,
                "model.norm_epsilon": 1.0e-6,
                "model.rotary_percent": 0.5,
                "model.rope_scaling_factor": 8.0,
            }
        ),
        {},
    ),
    "moe-router": (
        _spec(
            **{
                "model.hidden_size": 512,
                "model.num_attention_heads": 8,
                "model.num_experts": 4,
                "model.moe_router_topk": 2,
                "model.moe_router_load_balancing_type": "seq_aux_loss",
                "model.moe_aux_loss_coeff": 1.0e-3,
                "model.moe_z_loss_coeff": 1.0e-3,
                "model.moe_router_score_function": "sigmoid",
                "model.moe_router_topk_scaling_factor": 2.5,
                "model.moe_expert_capacity_factor": 1.25,
                "parallel.tp": 2,
                "parallel.pp": 1,
                "parallel.ep": 2,
                "parallel.sequence_parallel": True,
            }
        ),
        {},
    ),
    # multi-head latent attention (issue 14): --multi-latent-attention with the latent ranks, head
    # widths, --rope-type rope and --no-rope-fusion must give megatron_core.yaml's
    # MLATransformerConfig (with and without a query latent)
    "mla-deepseek-like": (
        _spec(
            **{
                "model.hidden_size": 512,
                "model.num_attention_heads": 8,
                "model.multi_latent_attention": True,
                "model.q_lora_rank": 96,
                "model.kv_lora_rank": 64,
                "model.qk_head_dim": 32,
                "model.qk_pos_emb_head_dim": 16,
                "model.v_head_dim": 32,
                "parallel.sequence_parallel": True,
                "model.num_experts": 4,
                "parallel.ep": 2,
                "parallel.pp": 1,
            }
        ),
        {},
    ),
    "mla-no-query-latent": (
        _spec(
            **{
                "model.multi_latent_attention": True,
                "model.kv_lora_rank": 32,
                "model.qk_head_dim": 64,
                "model.qk_pos_emb_head_dim": 32,
                "model.v_head_dim": 64,
            }
        ),
        {},
    ),
    # FP8 keys (issue 13): --fp8-format/--fp8-recipe/--fp8-param-gather/--first-last-layers-bf16
    # must give the TransformerConfig and DDP config megatron_core.yaml states
    "fp8-tensorwise-param-gather": (
        _spec(
            **{
                "training.fp8_format": "hybrid",
                "training.fp8_recipe": "tensorwise",
                "training.fp8_param_gather": True,
                "training.first_last_layers_bf16": True,
                "parallel.zero_stage": 1,
            }
        ),
        {},
    ),
}

#: Specs Megatron-LM refuses, which trainc refuses too (name -> (spec, the trainc rule)).
REFUSED_BY_TRAINC: dict[str, tuple[dict[str, Any], str]] = {
    # Megatron-Core fails at model build: '2730 is not divisible by 4'
    "shared-expert-not-multiple-of-tp": (
        _spec(
            **{
                "model.hidden_size": 512,
                "model.num_attention_heads": 8,
                "model.num_experts": 4,
                "model.moe_shared_expert_intermediate_size": 2730,
                "parallel.tp": 4,
                "parallel.pp": 1,
                "parallel.sequence_parallel": True,
            }
        ),
        "TRC327",
    ),
    # the parser: invalid choice: 'adamw'
    "adamw": (_spec(**{"training.optimizer": "adamw"}), "TRC004"),
    # initialize_megatron: 'Megatron requires CUDA.'
    "megatron-lm-on-cpu": (
        _spec(
            **{
                "launch.entrypoint": "megatron-lm",
                "launch.device": "cpu",
                "launch.megatron_lm_path": "/opt/Megatron-LM",
            }
        ),
        "TRC325",
    ),
}

#: golden case -> {kind: reason} known to fail today.
GOLDEN_KNOWN: dict[str, dict[str, str]] = {}

#: kind -> reason for the kinds that generated specs fail today.
GENERATED_KNOWN: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------
# running the oracle
# ---------------------------------------------------------------------------------------------


@dataclass
class Compiled:
    """One spec trainc accepted: its artifacts and Megatron-LM's result on them."""

    name: str
    cfg: dict[str, Any] | None
    plan: dict[str, Any]
    files: dict[str, str]
    result: dict[str, Any] | None = None
    _bad: dict[str, str] | None = None

    @property
    def bad(self) -> dict[str, str]:
        """:func:`disagreements` (computed once)."""
        if self._bad is None:
            self._bad = disagreements(self)
        return self._bad


def _compile(path: Path) -> Any:
    return compile_spec(path)


def _compile_cfg(cfg: dict[str, Any], tmp: Path) -> Any:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return compile_spec(path)


def _accepted(name: str, cfg: dict[str, Any] | None, result: Any) -> Compiled | None:
    if not result.ok or "megatron_args.txt" not in result.files:
        return None
    return Compiled(name, cfg, json.loads(result.files["plan.json"]), dict(result.files))


def _generated(tmp: Path) -> list[Compiled]:
    """The accepted specs among ``EXAMPLES`` drawn, two thirds by
    :func:`differential.strategies.spec_dicts` (layouts around the rules, half of them valid)
    and one third by :func:`property.strategies.valid_cfg` (valid by construction, wider sizes:
    vocabularies of 1-70,000, MoE top-k up to the expert count)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis import strategies as st

    from tests.support.kit_strategies import valid_cfg
    from tests.support.spec_dicts import spec_dicts

    out: list[Compiled] = []

    def one(tag: str, cfg: dict[str, Any]) -> None:
        c = _accepted(f"{tag}-{len(out)}", cfg, _compile_cfg(cfg, tmp))
        if c is not None:
            out.append(c)

    for tag, strategy, n in (
        ("diff", spec_dicts(engine="megatron"), EXAMPLES - EXAMPLES // 3),
        ("valid", valid_cfg(), EXAMPLES // 3),
    ):
        draw = settings(
            max_examples=n,
            derandomize=SEED is None,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(st.just(tag), strategy)(one))
        if SEED is not None:
            draw = hyp_seed(int(SEED))(draw)
        draw()
    return out


def run_oracle(wheel: Path, items: list[Compiled], tmp: Path) -> None:
    """Megatron-LM's verdict on every item's megatron_args.txt (sets ``item.result``)."""
    jobs = []
    for i, c in enumerate(items):
        args = tmp / f"job{i}.megatron_args.txt"
        args.write_text(c.files["megatron_args.txt"], encoding="utf-8")
        d = c.plan["derived"]
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if d["cuda_device_max_connections_1"] else {}
        launch = c.plan["spec"]["launch"]
        device = launch["device"] if launch["entrypoint"] == "megatron-lm" else "cuda"
        jobs.append(
            {
                "id": c.name,
                "args_file": str(args),
                "world_size": d["world_size"],
                "env": env,
                "device": device,
            }
        )
    jobs_file, out_file = tmp / "jobs.json", tmp / "results.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(wheel)
    env["NO_VCS_VERSION"] = "1"  # megatron.core's version string would run git in the wheel
    proc = subprocess.run(
        [sys.executable, str(ORACLE), str(jobs_file), "--out", str(out_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0 or not out_file.is_file():
        pytest.fail(
            f"the Megatron-LM oracle failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    results = {r["id"]: r for r in json.loads(out_file.read_text(encoding="utf-8"))}
    for c in items:
        c.result = results[c.name]


#: Edits of llama3-8b-pp2-vpp2's megatron_args.txt that Megatron-LM refuses:
#: stage -> ((old, new) text replacement, what Megatron-LM says).
REFUSED_BASE = "llama3-8b-pp2-vpp2"
REFUSED = {
    "parse_args": (
        ("--seed 1234", "--seed 1234\n--no-such-flag"),
        "unrecognized arguments: --no-such-flag",
    ),
    "validate_args": (
        ("--global-batch-size 32", "--global-batch-size 31"),
        "global_batch_size (31) must be divisible",
    ),
    "transformer_config": (
        ("--num-attention-heads 32", "--num-attention-heads 31"),
        "num_attention_heads (31) must be a multiple of tensor_model_parallel_size (2)",
    ),
}


def _refused(base: Compiled) -> dict[str, Compiled]:
    out = {}
    for stage, ((old, new), _msg) in REFUSED.items():
        text = base.files["megatron_args.txt"]
        assert old in text, (old, REFUSED_BASE)
        out[stage] = Compiled(
            f"refused-{stage}",
            None,
            base.plan,
            {**base.files, "megatron_args.txt": text.replace(old, new)},
        )
    return out


@dataclass
class Oracle:
    golden: dict[str, Compiled]
    explicit: dict[str, Compiled | None]
    generated: list[Compiled]
    refused: dict[str, Compiled]


@pytest.fixture(scope="module")
def oracle(megatron_lm_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    """Compile the golden cases, the explicit specs and the generated ones; one oracle run."""
    tmp = tmp_path_factory.mktemp("megatron_lm")
    golden = {}
    for case in sorted(p for p in CASES.iterdir() if (p / "spec.yaml").is_file()):
        result = _compile(case / "spec.yaml")
        assert result.ok, [d.to_json() for d in result.diagnostics if d.is_error]
        c = _accepted(case.name, None, result)
        if c is not None:
            golden[case.name] = c
    explicit = {
        name: _accepted(name, cfg, _compile_cfg(cfg, tmp))
        for name, (cfg, _known) in EXPLICIT.items()
    }
    generated = _generated(tmp)
    refused = _refused(golden[REFUSED_BASE])
    items = [*golden.values(), *(c for c in explicit.values() if c), *generated, *refused.values()]
    run_oracle(megatron_lm_wheel, items, tmp)
    return Oracle(golden, explicit, generated, refused)


# ---------------------------------------------------------------------------------------------
# what must agree
# ---------------------------------------------------------------------------------------------


#: (section, key) -> when the key has no effect (given the section), so its value is not compared.
NO_EFFECT = {
    ("TransformerConfig", "cp_comm_type"): lambda sec: sec["context_parallel_size"] == 1,
    # the schedules read it for encoder-decoder models only; GPT is decoder-only
    ("forward_backward_func", "decoder_seq_length"): lambda sec: True,
}


def _chunks(plan: dict[str, Any]) -> list[list[int]]:
    """The layers per (stage, virtual stage) of a plan.json (trainc's layer split)."""
    par = plan["spec"]["parallel"]
    return stage_chunk_sizes(
        plan["derived"]["layers_per_stage"],
        plan["derived"]["vpp"],
        par["account_for_embedding_in_pipeline_split"],
        par["account_for_loss_in_pipeline_split"],
    )


def _differ(section: str, ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """Keys of a megatron_core.yaml section whose value differs from Megatron-LM's config
    (``None`` and ``False`` are the same switch; keys of :data:`NO_EFFECT` are skipped where
    they do nothing)."""
    bad = []
    for key, value in sorted(ours.items()):
        unused = NO_EFFECT.get((section, key))
        if unused is not None and unused(ours):
            continue
        if key not in theirs:
            bad.append(f"{section}.{key}: not a field of Megatron-LM's {section}")
        elif theirs[key] != value and not {theirs[key], value} <= {None, False}:
            bad.append(
                f"{section}.{key}: megatron_core.yaml {value!r}, Megatron-LM {theirs[key]!r}"
            )
    return bad


def disagreements(c: Compiled) -> dict[str, str]:
    """kind -> what differs, for every kind of :data:`KINDS` that does not agree."""
    r, plan = c.result, c.plan
    assert r is not None
    d, m = plan["derived"], plan["spec"]["model"]
    bad: dict[str, str] = {}
    if not r["accepted"]:  # nothing else to compare
        return {"accepted": f"Megatron-LM rejects at {r['stage']}: {r['error']}"}
    if r.get("model_error"):
        return {"accepted": f"Megatron-LM rejects at model build: {r['model_error']}"}
    want = {
        "dp": d["dp"],
        "padded_vocab": d["padded_vocab_size"],
        "num_microbatches": d["num_microbatches"],
        "layers_per_chunk": _chunks(plan),
        "kv_channels": m["kv_channels"],
        "tokenizer_vocab": m["vocab_size"],
    }
    got_key = {
        "dp": "dp",
        "padded_vocab": "padded_vocab_size",
        "num_microbatches": "num_microbatches",
        "layers_per_chunk": "layers_per_chunk",
        "kv_channels": "kv_channels",
        "tokenizer_vocab": "tokenizer_vocab_size",
    }
    for kind, value in want.items():
        got = r.get(got_key[kind])
        if got != value:
            bad[kind] = f"plan.json {value!r}, Megatron-LM {got!r}"
    if plan["spec"]["launch"].get("data_path") and "split" not in r.get("args", {}):
        bad["split"] = f"no --split: Megatron-LM uses {r.get('split')!r}"
    core = yaml.safe_load(c.files["megatron_core.yaml"])
    for kind, section in (
        ("ddp_config", "DistributedDataParallelConfig"),
        ("transformer_config", "TransformerConfig"),
        ("optimizer_config", "OptimizerConfig"),
        ("initialize_model_parallel", "initialize_model_parallel"),
        ("forward_backward_func", "forward_backward_func"),
        ("gpt_model", "GPTModel"),
    ):
        theirs = r.get(kind)
        if theirs is None:
            bad.setdefault(kind, "Megatron-LM built no config (rejected earlier)")
            continue
        diff = _differ(section, core.get(section, {}), theirs)
        if diff:
            bad[kind] = "; ".join(diff)
    return bad


def _xfail(kinds_known: dict[str, str], kind: str) -> list[Any]:
    reason = kinds_known.get(kind)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


def _golden_params() -> list[Any]:
    out = []
    for case in sorted(p.name for p in CASES.iterdir() if (p / "spec.yaml").is_file()):
        if not (CASES / case / "expected" / "megatron_args.txt").is_file():
            continue
        known = GOLDEN_KNOWN.get(case, {})
        out += [
            pytest.param(case, kind, marks=_xfail(known, kind), id=f"{case}-{kind}")
            for kind in KINDS
        ]
    return out


@pytest.mark.parametrize(("case", "kind"), _golden_params())
def test_golden_case_agrees_with_megatron_lm(oracle: Oracle, case: str, kind: str) -> None:
    bad = oracle.golden[case].bad
    assert kind not in bad, f"{case}: {kind}: {bad[kind]}"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        pytest.param(name, kind, marks=_xfail(known, kind), id=f"{name}-{kind}")
        for name, (_cfg, known) in EXPLICIT.items()
        for kind in KINDS
    ],
)
def test_explicit_spec_agrees_with_megatron_lm(oracle: Oracle, name: str, kind: str) -> None:
    c = oracle.explicit[name]
    assert c is not None, f"{name}: trainc rejects a spec Megatron-LM should accept"
    assert kind not in c.bad, f"{name}: {kind}: {c.bad[kind]}\n{EXPLICIT[name][0]}"


@pytest.mark.parametrize("kind", [pytest.param(k, marks=_xfail(GENERATED_KNOWN, k)) for k in KINDS])
def test_generated_specs_trainc_accepts_megatron_lm_agrees(oracle: Oracle, kind: str) -> None:
    """trainc accepts => Megatron-LM accepts, and derives the same (one kind per test)."""
    assert len(oracle.generated) >= EXAMPLES // 4, len(oracle.generated)
    failing = [(c, c.bad[kind]) for c in oracle.generated if kind in c.bad]
    assert not failing, (
        f"{len(failing)} of {len(oracle.generated)} accepted specs: {kind}\n"
        + "\n".join(f"{msg}\n  {c.cfg}" for c, msg in failing[:5])
    )


@pytest.mark.parametrize("name", sorted(REFUSED_BY_TRAINC))
def test_trainc_refuses_what_megatron_lm_refuses(name: str, tmp_path: Path) -> None:
    """Bugs of issue 11 that Megatron-LM refuses at parse, validate or model-build time: trainc
    refuses the spec itself, with its own rule."""
    cfg, rule = REFUSED_BY_TRAINC[name]
    result = _compile_cfg(cfg, tmp_path)
    assert not result.ok
    assert rule in {d.rule.id for d in result.diagnostics if d.is_error}, [
        d.to_json() for d in result.diagnostics
    ]


def test_oracle_runs_the_target_version(oracle: Oracle) -> None:
    """The subprocess imported the wheel (not the worker's megatron-core), whose version is
    plan.json's target_versions.megatron_lm."""
    some = next(iter(oracle.golden.values()))
    assert some.result is not None
    target = some.plan["target_versions"]["megatron_lm"]
    assert f"core_v{some.result['megatron_core_version']}" == target


def test_oracle_rejects_what_megatron_lm_rejects(oracle: Oracle) -> None:
    """The oracle is not a rubber stamp: flags Megatron-LM refuses come back rejected, each at
    the step that refuses it, with Megatron-LM's message."""
    assert set(oracle.refused) == set(REFUSED)
    for stage, item in oracle.refused.items():
        assert item.result is not None
        assert not item.result["accepted"], item.result
        assert item.result["stage"] == stage, item.result
        assert REFUSED[stage][1] in item.result["error"], item.result["error"]
