"""trainc import-hf: real Hugging Face config.json files -> presets equal to the shipped ones."""

import json
from pathlib import Path

import pytest
import yaml

from trainc.cli import main
from trainc.compiler.load import conf_dir
from trainc.compiler.pipeline import compile_spec
from trainc.ecosystem.hf_import import (
    KEY_ORDER,
    SUPPORTED,
    HFImportError,
    convert,
    import_hf,
    import_hf_with_notes,
    window_keys,
)

HF = Path(__file__).resolve().parents[2] / "data" / "hf"


def _preset(name: str) -> dict:
    return yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())


@pytest.mark.parametrize(
    ("config", "preset", "seq_length"),
    [
        ("Llama-2-70b-hf.json", "llama2-70b", None),
        ("Llama-2-7b-hf.json", "llama2-7b", None),
        ("Meta-Llama-3-8B.json", "llama3-8b", None),
        # the Mixtral preset trains at 4096 tokens (config.json only states 32768 positions)
        ("Mixtral-8x7B-v0.1.json", "mixtral-8x7b", 4096),
    ],
)
def test_import_reproduces_the_shipped_preset(config, preset, seq_length):
    imported = yaml.safe_load(import_hf(HF / config, seq_length=seq_length))
    assert imported == _preset(preset)


def test_deepseek_v3_matches_the_like_preset_on_architecture_keys():
    # the like preset trains plain RoPE at the pre-training length (YaRN came after)
    imported = yaml.safe_load(import_hf(HF / "DeepSeek-V3.json", drop_rope_scaling=True))
    preset = _preset("deepseek-v3-like")
    # the preset keeps the 4K pre-training length and the paper's balance-loss weight and init std
    keys = set(preset) - {"max_position_embeddings", "moe_aux_loss_coeff", "init_method_std"}
    assert {k: imported[k] for k in keys} == {k: preset[k] for k in keys}
    assert imported["max_position_embeddings"] == 163840


def _deepseek_v3(**changes) -> dict:
    """deepseek-ai/DeepSeek-V3's config.json with ``changes`` applied (None removes a key) and
    without its YaRN ``rope_scaling`` unless ``changes`` gives one (trainc cannot express YaRN; see
    test_yarn_linear_longrope_and_unknown_scalings_are_errors)."""
    cfg = json.loads((HF / "DeepSeek-V3.json").read_text())
    cfg.pop("rope_scaling")
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def test_deepseek_v3_exact_keys_and_router_notes():
    yarn = json.loads((HF / "DeepSeek-V3.json").read_text())["rope_scaling"]
    keys, notes = convert(_deepseek_v3(rope_scaling=yarn), drop_rope_scaling=True)
    assert keys == {
        "num_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "ffn_hidden_size": 18432,
        "vocab_size": 129280,
        "seq_length": 4096,
        "max_position_embeddings": 163840,
        "activation": "swiglu",
        "normalization": "rmsnorm",
        "position_embedding": "rope",
        "rotary_base": 10000,
        "untie_embeddings_and_output_weights": True,
        "norm_epsilon": 1e-6,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "multi_latent_attention": True,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64,
        "v_head_dim": 128,
        "num_experts": 256,
        "moe_router_topk": 8,
        "moe_ffn_hidden_size": 2048,
        "moe_shared_expert_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "moe_router_score_function": "sigmoid",
        "moe_router_topk_scaling_factor": 2.5,
        "moe_router_load_balancing_type": "seq_aux_loss",
        # dense first layers, MTP, group-limited routing and aux-loss-free balancing
        "moe_first_k_dense_layers": 3,
        "mtp_num_layers": 1,
        "moe_router_num_groups": 8,
        "moe_router_group_topk": 4,
        "moe_router_enable_expert_bias": True,
    }
    assert list(keys) == [k for k in KEY_ORDER if k in keys]
    assert not any(n.startswith(("topk_method", "n_group", "the first 3 dense")) for n in notes)
    # the config's alpha (0.001) is not copied: the note says what trainc uses and the paper's
    (alpha,) = (n for n in notes if n.startswith("aux_loss_alpha 0.001 in config.json"))
    assert "moe_aux_loss_coeff 0.0" in alpha and "arXiv 2412.19437" in alpha
    assert "alpha = 1e-4" in alpha and "model.moe_aux_loss_coeff=1e-4" in alpha
    # initializer_range 0.02 is trainc's default: no key, but the paper's 0.006 is pointed out
    (init,) = (n for n in notes if n.startswith("initializer_range 0.02"))
    assert "model.init_method_std=0.006" in init and "arXiv 2412.19437" in init
    assert (
        "num_nextn_predict_layers 1 is imported as mtp_num_layers 1: multi-token prediction "
        "is built by Megatron-LM's pretrain_gpt.py only, so a spec with this preset needs "
        "engine=megatron and launch.entrypoint=megatron-lm (TRC386)" in notes
    )
    assert (
        "rope_scaling (rope_type yarn: beta_fast 32, beta_slow 1, factor 40, mscale 1, "
        "mscale_all_dim 1, original_max_position_embeddings 4096) is dropped "
        "(--drop-rope-scaling): the preset trains plain RoPE, a different model from this "
        "checkpoint" in notes
    )
    assert (
        "seq_length (the training sequence length) is not in config.json: trainc uses 4096 = "
        "min(rope_scaling.original_max_position_embeddings 4096, 8192); set --seq-length N or "
        "model.seq_length=N for another" in notes
    )
    assert len(notes) == 5


def test_deepseek_v3_without_aux_loss_alpha_notes_the_unset_coefficient():
    keys, notes = convert(_deepseek_v3(aux_loss_alpha=None))
    assert "moe_aux_loss_coeff" not in keys  # trainc's default, 0.0
    assert keys["moe_router_load_balancing_type"] == "seq_aux_loss"
    (unset,) = (n for n in notes if "aux_loss" in n and "balance-loss coefficient" in n)
    assert unset.startswith(
        "the balance-loss coefficient is unset in config.json "
        "(no aux_loss_alpha): trainc uses moe_aux_loss_coeff 0.0"
    )
    assert "arXiv 2412.19437" in unset and "auxiliary-loss-free" in unset
    assert "alpha = 1e-4" in unset and "model.moe_aux_loss_coeff=1e-4" in unset
    assert not any(n.startswith("aux_loss_alpha") for n in notes)


def test_deepseek_v3_initializer_range_maps_to_init_method_std():
    keys, notes = convert(_deepseek_v3(initializer_range=0.006))
    assert keys["init_method_std"] == 0.006
    assert list(keys).index("init_method_std") == list(keys).index("norm_epsilon") + 1
    assert (
        "initializer_range 0.006 is mapped to init_method_std 0.006 (trainc's and Megatron's "
        "default is 0.02)" in notes
    )
    assert not any("model.init_method_std=0.006" in n for n in notes)  # it is the paper's value
    # the default (0.02) and an absent initializer_range write no key
    assert "init_method_std" not in convert(_deepseek_v3(initializer_range=None))[0]
    assert "init_method_std" not in convert(_deepseek_v3(initializer_range=0.02))[0]
    with pytest.raises(HFImportError, match="'initializer_range' must be a positive number"):
        convert(_deepseek_v3(initializer_range=0))
    # any family: an initializer_range other than 0.02 is mapped and noted
    llama = json.loads((HF / "Llama-2-7b-hf.json").read_text()) | {"initializer_range": 0.008}
    keys, notes = convert(llama, seq_length=4096)
    assert keys["init_method_std"] == 0.008
    assert notes == [
        "initializer_range 0.008 is mapped to init_method_std 0.008 (trainc's and "
        "Megatron's default is 0.02)"
    ]


def test_deepseek_v3_router_variants():
    keys, notes = convert(
        _deepseek_v3(
            scoring_func="softmax", routed_scaling_factor=1.0, topk_method="greedy", seq_aux=False
        )
    )
    assert keys["moe_router_score_function"] == "softmax"
    assert "moe_router_topk_scaling_factor" not in keys  # 1.0 scales nothing
    assert keys["moe_router_load_balancing_type"] == "aux_loss"
    # greedy top-k ignores the expert groups: nothing unmodelled about the router
    assert not any(n.startswith(("topk_method", "n_group")) for n in notes)
    _, notes = convert(_deepseek_v3(n_group=1, topk_group=1))
    assert not any(n.startswith("n_group") for n in notes)
    keys, notes = convert(
        _deepseek_v3(scoring_func="sqrtsoftplus", topk_method="mystery", norm_topk_prob=False)
    )
    assert "moe_router_score_function" not in keys
    assert (
        "scoring_func 'sqrtsoftplus' is not modelled (trainc's moe_router_score_function is "
        "softmax or sigmoid); the preset keeps softmax" in notes
    )
    assert (
        "topk_method 'mystery' is not modelled: trainc routes each token to its top-k experts "
        "(greedy)" in notes
    )
    assert any(n.startswith("norm_topk_prob false") for n in notes)
    _, notes = convert(_deepseek_v3(scoring_func=None))
    assert (
        "scoring_func is unset in config.json: trainc uses moe_router_score_function softmax "
        "(DeepSeek-V3 scores with sigmoid)" in notes
    )
    with pytest.raises(HFImportError, match="'routed_scaling_factor' must be a positive number"):
        convert(_deepseek_v3(routed_scaling_factor="2.5"))


def test_notes_are_written_as_header_comments():
    text = import_hf(HF / "DeepSeek-V3.json", drop_rope_scaling=True)
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert all(len(line) <= 100 for line in header[1:])
    notes = " ".join(line.lstrip("# ") for line in header[1:])
    assert notes.count("Note: ") == 5
    assert "num_nextn_predict_layers 1 is imported as mtp_num_layers 1" in notes
    assert "moe_router_enable_expert_bias: true" in text and "moe_router_num_groups: 8" in text
    assert "Not modelled:" not in text


def test_qwen3_moe_keys_and_head_dim():
    keys, notes = convert(yaml.safe_load((HF / "Qwen3-30B-A3B.json").read_text()))
    assert keys["kv_channels"] == 128  # head_dim 128 != 2048 / 32
    assert (keys["num_experts"], keys["moe_router_topk"], keys["moe_ffn_hidden_size"]) == (
        128,
        8,
        768,
    )
    assert keys["num_query_groups"] == 4 and keys["moe_layer_freq"] == 1
    assert keys["qk_layernorm"] is True and not [n for n in notes if "QK" in n]
    dense, _ = convert(yaml.safe_load((HF / "Qwen3-8B.json").read_text()))
    assert "kv_channels" not in dense and "num_experts" not in dense
    assert dense["qk_layernorm"] is True


@pytest.mark.parametrize(("norm", "pre_softmax"), [(False, True), (None, True), (True, None)])
def test_qwen_moe_router_follows_norm_topk_prob(norm, pre_softmax):
    """Qwen2 / Qwen3-MoE take the softmax over every expert and renormalize the top-k weights
    only with norm_topk_prob (false by default): unnormalized is Megatron's pre-softmax router
    (trial 13: the import left Megatron's normalized default, a different model)."""
    cfg = yaml.safe_load((HF / "Qwen3-30B-A3B.json").read_text())
    cfg.pop("norm_topk_prob", None)
    if norm is not None:
        cfg["norm_topk_prob"] = norm
    keys, _ = convert(cfg)
    assert keys.get("moe_router_pre_softmax") is pre_softmax


def test_sizes_must_be_positive_and_seq_length_within_the_positions():
    cfg = yaml.safe_load((HF / "Qwen2-7B.json").read_text())
    with pytest.raises(HFImportError, match="'num_hidden_layers' must be at least 1, got -2"):
        convert({**cfg, "num_hidden_layers": -2})
    with pytest.raises(HFImportError, match="pass --seq-length 131072 or less"):
        convert(cfg, seq_length=200000)


def test_seq_length_is_capped_and_documented():
    text = import_hf(HF / "Qwen2-7B.json")
    keys = yaml.safe_load(text)
    assert keys["seq_length"] == 8192 and keys["max_position_embeddings"] == 131072
    assert text.startswith("# Imported by trainc") and keys["add_qkv_bias"] is True


def test_unknown_architecture_lists_the_supported_ones():
    with pytest.raises(HFImportError) as e:
        convert({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    for mt in SUPPORTED:
        assert mt in str(e.value)


def test_cli_unknown_architecture_exits_2_without_traceback(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "bert", "architectures": ["BertModel"]}')
    assert main(["import-hf", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "unsupported model_type 'bert'" in err and "Traceback" not in err
    assert main(["import-hf", str(tmp_path / "missing.json")]) == 2


#: the stored configs of architectures import-hf refuses (test_unsupported_architectures_*)
REFUSED = {"Llama-4-Scout-17B-16E.json", "gpt-oss-20b.json", "gemma-3-27b-it.json"}


@pytest.mark.parametrize(
    "config", sorted(p.name for p in HF.glob("*.json") if p.name not in REFUSED)
)
def test_every_imported_preset_compiles(tmp_path, capsys, config):
    """The written preset composes with a cluster preset into a spec that lints clean."""
    (tmp_path / "model").mkdir()
    drop = (
        ["--drop-rope-scaling"] if config in ("DeepSeek-V3.json", "Kimi-K2-Instruct.json") else []
    )  # YaRN
    assert (
        main(
            [
                "import-hf",
                str(HF / config),
                "-o",
                str(tmp_path / "model" / "imported.yaml"),
                "--seq-length",
                "4096",
                *drop,
            ]
        )
        == 0
    )
    preset = yaml.safe_load((tmp_path / "model" / "imported.yaml").read_text())
    moe = "num_experts" in preset
    # multi-token prediction is built by Megatron-LM's pretrain_gpt.py only (TRC386)
    mtp = (
        "launch:\n  entrypoint: megatron-lm\n  megatron_lm_path: /opt/Megatron-LM\n"
        if preset.get("mtp_num_layers")
        else ""
    )
    (tmp_path / "spec.yaml").write_text(
        "defaults:\n  - model: imported\n  - cluster: dgx-h100\n  - _self_\n"
        "cluster:\n  num_nodes: 16\nparallel:\n  tp: 4\n"
        + ("  ep: 8\n" if moe else "")
        + "training:\n  global_batch_size: 1024\n  recompute: full\n"
        + mtp
    )
    result = compile_spec(tmp_path / "spec.yaml", emit_files=False)
    errors = [d.to_json() for d in result.diagnostics if d.is_error and d.rule.id < "TRC400"]
    assert errors == []


# --- RoPE scaling, notes on stderr, -o - ------------------------------------------------------

#: Llama 3.1's RoPE scaling (meta-llama/Llama-3.1-8B config.json), which Megatron-Core reproduces.
LLAMA31_SCALING = {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}


def _llama31(**scaling) -> dict:
    """meta-llama/Llama-3.1-8B's config.json (Llama 3 8B's, 131072 positions, llama3 RoPE
    scaling), its rope_scaling updated with ``scaling`` (None removes a field)."""
    cfg = json.loads((HF / "Meta-Llama-3-8B.json").read_text())
    rope = {k: v for k, v in (LLAMA31_SCALING | scaling).items() if v is not None}
    return cfg | {
        "max_position_embeddings": 131072,
        "rope_scaling": rope,
        "eos_token_id": [128001, 128008, 128009],
        "transformers_version": "4.43.0.dev0",
    }


def _write(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_llama31_scaling_with_megatron_core_constants_maps_to_rope_scaling_factor():
    keys, notes = convert(_llama31())
    assert keys == _preset("llama3-8b") | {
        "max_position_embeddings": 131072,
        "rope_scaling_factor": 8.0,
    }
    assert list(keys) == [k for k in KEY_ORDER if k in keys]
    # seq_length: the length before scaling (8192 = Llama 3's pre-training length), not 131072
    assert notes == [
        "seq_length (the training sequence length) is not in config.json: trainc uses "
        "8192 = min(rope_scaling.original_max_position_embeddings 8192, 8192); set "
        "--seq-length N or model.seq_length=N for another"
    ]
    assert convert(_llama31(), seq_length=32768) == (keys | {"seq_length": 32768}, [])
    # rope_type "default" is plain RoPE; a legacy "type" key is read like rope_type
    assert "rope_scaling_factor" not in convert(_llama31(rope_type="default"))[0]
    assert convert(_llama31(rope_type=None, type="llama3"))[0] == keys


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"high_freq_factor": 2.0}, "it has high_freq_factor 2,"),
        (
            {"original_max_position_embeddings": 4096},
            "it has original_max_position_embeddings 4096,",
        ),
        (
            {"low_freq_factor": 2.0, "high_freq_factor": 8.0},
            "it has low_freq_factor 2, high_freq_factor 8,",
        ),
        ({"low_freq_factor": None}, "it lacks low_freq_factor,"),
    ],
)
def test_llama3_scaling_megatron_core_cannot_reproduce_is_an_error(changes, fields):
    with pytest.raises(HFImportError) as e:
        convert(_llama31(**changes))
    msg = str(e.value)
    assert msg.startswith("rope_scaling (rope_type llama3: factor 8")
    assert (
        f"cannot be reproduced: {fields} but Megatron-Core applies Llama 3 RoPE scaling with "
        "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 fixed "
        "(RotaryEmbedding._apply_scaling; trainc's rope_scaling_factor sets only the factor)" in msg
    )
    assert msg.endswith(
        "pass --drop-rope-scaling to import plain RoPE instead (no "
        "rope_scaling_factor), which is right only for training the architecture "
        "from scratch, not for continuing this checkpoint"
    )
    # the escape hatch: plain RoPE at the pre-scaling length, and a note saying so
    keys, notes = convert(_llama31(**changes), drop_rope_scaling=True)
    assert "rope_scaling_factor" not in keys
    assert any(
        n.startswith("rope_scaling (rope_type llama3:")
        and n.endswith(
            "is dropped (--drop-rope-scaling): the preset trains plain RoPE, a different model "
            "from "
            "this checkpoint"
        )
        for n in notes
    )


def test_llama3_scaling_without_factor_is_an_error():
    with pytest.raises(
        HFImportError,
        match=r"^rope_scaling \(rope_type llama3: high_freq_factor "
        r"4, .*\) has no factor; Llama 3 scaling needs one \(8\.0 for Llama 3\.1\)",
    ):
        convert(_llama31(factor=None))


@pytest.mark.parametrize(
    ("scaling", "what"),
    [
        (
            {"type": "linear", "factor": 2.0},
            "linear position interpolation (positions divided by the factor)",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            "YaRN (rescaled frequencies and attention temperature)",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
            "LongRoPE (per-channel rescaled frequencies)",
        ),
        ({"rope_type": "mystery", "factor": 3.0}, "a RoPE scaling trainc does not know"),
    ],
)
def test_yarn_linear_longrope_and_unknown_scalings_are_errors(scaling, what):
    cfg = json.loads((HF / "Qwen2-7B.json").read_text()) | {"rope_scaling": scaling}
    with pytest.raises(HFImportError) as e:
        convert(cfg)
    assert (
        f"cannot be expressed: it is {what}, and trainc's model schema has only "
        "rope_scaling_factor, Llama 3.1's scaling (rope_type llama3; Megatron-Core "
        "--use-rope-scaling). Without it the preset would train plain RoPE, a different model "
        "from this checkpoint. Fix: pass --drop-rope-scaling" in str(e.value)
    )
    keys, _ = convert(cfg, drop_rope_scaling=True)
    assert "rope_scaling_factor" not in keys


def test_deepseek_v3_yarn_is_an_error_naming_every_field():
    with pytest.raises(HFImportError) as e:
        import_hf(HF / "DeepSeek-V3.json")
    assert str(e.value).startswith(
        "rope_scaling (rope_type yarn: beta_fast 32, beta_slow 1, factor 40, mscale 1, "
        "mscale_all_dim 1, original_max_position_embeddings 4096) cannot be expressed: it is YaRN"
    )


def test_dynamic_scaling_is_a_note_up_to_its_original_length():
    cfg = json.loads((HF / "Qwen2-7B.json").read_text()) | {
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "dynamic", "factor": 4.0},
    }
    keys, notes = convert(cfg)
    assert keys["seq_length"] == 8192 and "rope_scaling_factor" not in keys
    assert (
        "rope_scaling (rope_type dynamic: factor 4) is not modelled: dynamic NTK scaling "
        "changes RoPE only beyond 32768 tokens, so training at seq_length 8192 is unaffected; "
        "inference past that length will differ" in notes
    )
    cfg["rope_scaling"]["original_max_position_embeddings"] = 4096
    with pytest.raises(
        HFImportError,
        match=r"dynamic NTK scaling equals plain RoPE only up to "
        r"4096 tokens and seq_length 8192 exceeds that; .* Fix: --seq-length 4096 "
        r"or less, or pass --drop-rope-scaling",
    ):
        convert(cfg, seq_length=8192)
    assert convert(cfg)[0]["seq_length"] == 4096


def test_malformed_rope_scaling_is_an_error():
    with pytest.raises(HFImportError, match=r"'rope_scaling' must be an object or null, got 8\.0"):
        convert(_llama31() | {"rope_scaling": 8.0})
    with pytest.raises(HFImportError, match=r"'rope_scaling\.factor' must be a positive number"):
        convert(_llama31(factor=-8.0))


def test_cli_llama3_mismatch_exits_2_and_writes_nothing(tmp_path, capsys):
    cfg = _write(tmp_path, _llama31(high_freq_factor=2.0, original_max_position_embeddings=4096))
    target = tmp_path / "model" / "llama31.yaml"
    assert main(["import-hf", str(cfg), "-o", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not target.exists() and not target.parent.exists()
    assert captured.err.startswith("trainc import-hf: error: rope_scaling (rope_type llama3: ")
    assert (
        "it has high_freq_factor 2, original_max_position_embeddings 4096, but Megatron-Core "
        "applies Llama 3 RoPE scaling with low_freq_factor 1, high_freq_factor 4, "
        "original_max_position_embeddings 8192 fixed" in captured.err
    )
    assert "--drop-rope-scaling" in captured.err and "Traceback" not in captured.err
    # with the escape hatch it is written, plain RoPE at the pre-scaling 4096 tokens
    assert main(["import-hf", str(cfg), "-o", str(target), "--drop-rope-scaling"]) == 0
    keys = yaml.safe_load(target.read_text())
    assert "rope_scaling_factor" not in keys and keys["seq_length"] == 4096


def test_cli_prints_every_note_on_stderr_and_keeps_the_comments(tmp_path, capsys):
    target = tmp_path / "m.yaml"
    assert (
        main(["import-hf", str(HF / "DeepSeek-V3.json"), "-o", str(target), "--drop-rope-scaling"])
        == 0
    )
    captured = capsys.readouterr()
    _, notes = import_hf_with_notes(HF / "DeepSeek-V3.json", drop_rope_scaling=True)
    assert len(notes) == 5
    assert captured.out == ""
    assert captured.err == "".join(f"note: {n}\n" for n in notes) + f"wrote {target}\n"
    assert target.read_text().count("# Note: ") == 5


def test_cli_output_dash_writes_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _write(tmp_path, json.loads((HF / "Qwen3-8B.json").read_text()))
    text, notes = import_hf_with_notes(cfg)
    assert notes and "qk_layernorm: true" in text
    assert main(["import-hf", str(cfg), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == text and not (tmp_path / "-").exists()
    assert captured.err == "".join(f"note: {n}\n" for n in notes)
    # no -o: the same
    assert main(["import-hf", str(cfg)]) == 0
    assert capsys.readouterr() == (text, "".join(f"note: {n}\n" for n in notes))
    # a file named '-' is still reachable as ./-
    assert main(["import-hf", str(cfg), "-o", "./-"]) == 0
    assert (tmp_path / "-").read_text() == text


@pytest.mark.parametrize(
    "attn, mlp, keys, note",
    [
        (True, True, {"add_qkv_bias": True, "add_bias_linear": True}, None),
        (True, False, {"add_qkv_bias": True}, "o_proj's bias is not modelled"),
        (False, True, {}, "set model.add_bias_linear=true to have them all"),
    ],
)
def test_llama_biases_map_or_are_noted(attn, mlp, keys, note):
    """attention_bias + mlp_bias on a Llama config became add_qkv_bias only: the MLP and o_proj
    biases were dropped without a word. Both on is add_bias_linear; one alone has no Megatron
    switch and is a note."""
    cfg = json.loads((HF / "Meta-Llama-3-8B.json").read_text())
    got, notes = convert(cfg | {"attention_bias": attn, "mlp_bias": mlp})
    assert {k: got[k] for k in ("add_qkv_bias", "add_bias_linear") if k in got} == keys
    assert any(note in n for n in notes) if note else not any("bias" in n for n in notes)


def test_mistral_sliding_window_maps_to_window_size(tmp_path, capsys):
    """Mistral 7B v0.1's ``sliding_window`` 4096 counts the query itself (transformers
    ``masking_utils.sliding_window_overlay``: keys q-4095 .. q), Megatron-Core's window_size the
    keys to its left: window_size 4095 on every layer (no skip_freq). A window that covers the
    sequence is a note and no key; --drop-sliding-window imports full attention with a note."""
    mistral = json.loads((HF / "Mistral-7B-v0.1.json").read_text())
    keys, notes = convert(mistral)  # seq_length min(32768, 8192) = 8192
    assert keys["seq_length"] == 8192 and keys["window_size"] == 4095
    assert "window_attn_skip_freq" not in keys
    keys, notes = convert(mistral, seq_length=4096)
    assert "window_size" not in keys
    assert (
        "sliding-window attention (4096 tokens, the query included) covers the whole "
        "4096-token sequence: full causal attention is the same attention"
    ) in notes
    keys, notes = convert(mistral, seq_length=4097)  # the last query would miss key 0
    assert keys["window_size"] == 4095
    keys, notes = convert(mistral, seq_length=16384, drop_sliding_window=True)
    assert "window_size" not in keys and any("is dropped" in n for n in notes)
    assert "window_size" not in convert({**mistral, "use_sliding_window": False})[0]
    path = _write(tmp_path, mistral)
    target = tmp_path / "model" / "mistral.yaml"
    assert main(["import-hf", str(path), "-o", str(target)]) == 0
    assert "window_size: 4095\n" in target.read_text()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("layer_types", "want"),
    [
        # Gemma 3: five sliding then one full
        ((["sliding_attention"] * 5 + ["full_attention"]) * 2, {"window_attn_skip_freq": 6}),
        # gpt-oss: alternating, sliding first
        (["sliding_attention", "full_attention"] * 3, {"window_attn_skip_freq": 2}),
        (["sliding_attention"] * 4, {}),
        # a trailing partial period: 8 layers, only layer 5 (0-based) full
        (
            ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2,
            {"window_attn_skip_freq": 6},
        ),
    ],
)
def test_periodic_layer_types_map_to_window_attn_skip_freq(layer_types, want):
    """``layer_types`` -> Megatron-Core's int window_attn_skip_freq N (full attention on the
    1-based layers N, 2N, ...: ``is_layer_window_attention``)."""
    cfg = {"sliding_window": 129, "num_hidden_layers": len(layer_types), "layer_types": layer_types}
    assert window_keys(cfg, 4096) == ({"window_size": 128, **want}, None)


def test_non_periodic_layer_types_are_an_error_naming_the_difference():
    types = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
    cfg = {"sliding_window": 128, "num_hidden_layers": 4, "layer_types": types}
    with pytest.raises(HFImportError) as e:
        window_keys(cfg, 4096)
    assert str(e.value) == (
        "layer_types is not periodic: its first full_attention layer is 1 (0-based), so "
        "window_attn_skip_freq 2 makes layer 3 full_attention, but config.json has "
        "sliding_attention; Megatron-Core's int window_attn_skip_freq (full attention on layers "
        "N, 2N, ...) cannot state this pattern. Fix: none in import-hf (--drop-sliding-window "
        "imports full attention on every layer)"
    )
    assert window_keys({**cfg, "layer_types": ["full_attention"] * 4}, 4096) == (
        {},
        "layer_types: every layer is full_attention, so sliding_window is unused",
    )


# --- Kimi K2, and what a missing key names ----------------------------------------------------


def test_kimi_k2_exact_keys_and_notes():
    """moonshotai/Kimi-K2-Instruct: DeepSeek-V3's architecture (model_type kimi_k2) with one
    dense first layer, 384 experts, no expert groups (n_group 1) and no MTP layer."""
    keys, notes = convert(
        json.loads((HF / "Kimi-K2-Instruct.json").read_text()), drop_rope_scaling=True
    )
    assert keys == {
        "num_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "ffn_hidden_size": 18432,
        "vocab_size": 163840,
        "seq_length": 4096,
        "max_position_embeddings": 131072,
        "activation": "swiglu",
        "normalization": "rmsnorm",
        "position_embedding": "rope",
        "rotary_base": 50000,
        "untie_embeddings_and_output_weights": True,
        "norm_epsilon": 1e-6,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "multi_latent_attention": True,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64,
        "v_head_dim": 128,
        "num_experts": 384,
        "moe_router_topk": 8,
        "moe_ffn_hidden_size": 2048,
        "moe_shared_expert_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "moe_router_score_function": "sigmoid",
        "moe_router_topk_scaling_factor": 2.827,
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_first_k_dense_layers": 1,
        "moe_router_enable_expert_bias": True,
    }
    assert notes == [
        "aux_loss_alpha 0.001 in config.json is not copied: trainc uses moe_aux_loss_coeff 0.0, "
        "the default of trainc and Megatron-Core, which turns the balance loss off; the expert "
        "bias balances the experts; set model.moe_aux_loss_coeff for a sequence-wise balance "
        "loss as well (DeepSeek-V3 used 1e-4, DeepSeek-V3's technical report (arXiv "
        "2412.19437, section 4.2))",
        "seq_length (the training sequence length) is not in config.json: trainc uses 4096 = "
        "min(rope_scaling.original_max_position_embeddings 4096, 8192); set --seq-length N or "
        "model.seq_length=N for another",
        "rope_scaling (rope_type yarn: beta_fast 1, beta_slow 1, factor 32, mscale 1, "
        "mscale_all_dim 1, original_max_position_embeddings 4096) is dropped "
        "(--drop-rope-scaling): the preset trains plain RoPE, a different model from this "
        "checkpoint",
    ]
    # without --drop-rope-scaling its YaRN is refused, as DeepSeek-V3's is
    with pytest.raises(HFImportError, match="rope_type yarn"):
        convert(json.loads((HF / "Kimi-K2-Instruct.json").read_text()))


@pytest.mark.parametrize(
    ("config", "key", "kinds"),
    [
        ("Kimi-K2-Instruct.json", "n_routed_experts", "deepseek_v3, kimi_k2"),
        (
            "Mixtral-8x7B-v0.1.json",
            "num_experts_per_tok",
            "mixtral, qwen2_moe, qwen3_moe, deepseek_v3, kimi_k2",
        ),
        ("DeepSeek-V3.json", "kv_lora_rank", "deepseek_v3, kimi_k2"),
    ],
)
def test_a_missing_key_names_the_model_kinds_that_need_it(config, key, kinds):
    cfg = json.loads((HF / config).read_text())
    del cfg[key]
    with pytest.raises(HFImportError) as e:
        convert(cfg, drop_rope_scaling=True)
    assert str(e.value) == (
        f"config.json has no '{key}', which model_type "
        f"{cfg['model_type']!r} needs (the model_type values that need it: "
        f"{kinds}); add it from the checkpoint's own config.json"
    )
    del cfg["vocab_size"]
    with pytest.raises(
        HFImportError,
        match="'vocab_size', which model_type .* needs "
        r"\(every supported model_type needs it\)",
    ):
        convert(cfg, drop_rope_scaling=True)


# --- architectures the schema cannot reproduce: every difference named -------------------------


REFUSALS = {
    "Llama-4-Scout-17B-16E.json": (
        "llama4",
        (
            "attention_chunk_size 8192: the RoPE layers attend within fixed chunks of that many "
            "tokens (chunked local attention); trainc's attention is full causal on every layer",
            "no_rope_layers [] (no_rope_layer_interval 4): layers 3, 7, 11, ..., 47 (12 of 48) use "
            "no rotary embedding and full attention; trainc rotates every layer",
            "attn_temperature_tuning (floor_scale 8192, attn_scale 0.1): the no-RoPE layers scale "
            "their queries by a function of the position; trainc has no such scaling",
            "use_qk_norm true: a parameter-free L2 norm of queries and keys after RoPE on the RoPE "
            "layers; trainc's qk_layernorm is a learned RMSNorm before RoPE",
            "num_local_experts 16, num_experts_per_tok 1: the router scales each token's input to "
            "its expert by the sigmoid of its score (Llama4TextMoe), where Megatron-Core weights "
            "the expert's output; a shared expert of intermediate_size 8192 runs beside it",
            "rope_scaling (rope_type llama3: factor 16, high_freq_factor 1, low_freq_factor 1, "
            "original_max_position_embeddings 8192): Megatron-Core applies Llama 3 scaling with "
            "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 fixed",
        ),
    ),
    "gpt-oss-20b.json": (
        "gpt_oss",
        (
            "attention sinks: every head has a learned sink logit (GptOssAttention.sinks) that "
            "joins the softmax; trainc's attention has none",
            "rope_scaling (rope_type yarn: beta_fast 32, beta_slow 1, factor 32, "
            "original_max_position_embeddings 4096, truncate False): trainc's model schema has no "
            "YaRN",
            "swiglu_limit 7: the experts clamp the gate (at most the limit) and the up projection "
            "(within plus or minus the limit) and compute (up + 1) * gate * sigmoid(1.702 * gate); "
            "trainc's swiglu is silu(gate) * up",
            "attention_bias true: q, k, v and o_proj have biases; Megatron has no switch for the "
            "o_proj bias without MLP biases",
            "the experts' projections and the router carry biases (gate_up_proj_bias, "
            "down_proj_bias, router.bias); Megatron-Core's router has none",
        ),
    ),
    "gemma-3-27b-it.json": (
        "gemma3",
        (
            "hidden_activation gelu_pytorch_tanh: a gated MLP with the tanh GELU (GeGLU); trainc's "
            "gated MLP is SwiGLU and its gelu is ungated",
            "rope_theta 1e+06 on the global layers and rope_local_base_freq 10000 on the "
            "sliding-window layers: trainc has one rotary_base",
            "rope_scaling (rope_type linear: factor 8) on the global layers only: trainc's model "
            "schema has no linear RoPE scaling",
            "query_pre_attn_scalar 168: attention scores are scaled by 168^-0.5, not head_dim "
            "128^-0.5",
            "the embedding output is multiplied by sqrt(hidden_size) = sqrt(5376) "
            "(Gemma3TextScaledWordEmbedding); trainc's is not",
            "four RMSNorms per layer (input, post-attention, pre-feedforward, post-feedforward); "
            "trainc's pre-norm layer has two",
        ),
    ),
}


def test_refused_configs_are_the_stored_ones():
    assert set(REFUSALS) == REFUSED


@pytest.mark.parametrize("config", sorted(REFUSALS))
def test_unsupported_architectures_name_every_difference(config):
    model_type, differences = REFUSALS[config]
    cfg = json.loads((HF / config).read_text())
    assert cfg["model_type"] == model_type
    # even the escape hatches do not turn these into a preset: they are not one difference
    with pytest.raises(HFImportError) as e:
        convert(cfg, drop_rope_scaling=True, drop_sliding_window=True, seq_length=4096)
    assert e.value.differences == differences
    message = str(e.value)
    assert message.startswith(f"model_type {model_type!r} (")
    assert all(f"({i}) {d}" in message for i, d in enumerate(differences, 1))


@pytest.mark.parametrize("config", sorted(REFUSALS))
def test_cli_refuses_them_with_exit_2_and_writes_nothing(tmp_path, capsys, config):
    target = tmp_path / "model" / "x.yaml"
    assert main(["import-hf", str(HF / config), "-o", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not target.exists() and "Traceback" not in captured.err
    assert "cannot be imported: a preset would train a different model" in captured.err


def test_maverick_interleaved_moe_layers_are_a_named_difference():
    """Llama 4 Maverick's MoE layers are the odd ones (interleave_moe_layer_step 2), which
    moe_layer_freq (i % k == 0) cannot state."""
    cfg = json.loads((HF / "Llama-4-Scout-17B-16E.json").read_text())
    cfg["text_config"] |= {"interleave_moe_layer_step": 2, "num_local_experts": 128}
    with pytest.raises(HFImportError) as e:
        convert(cfg)
    assert (
        "interleave_moe_layer_step 2: layers 1, 3, ... are MoE (i % 2 == 1) and the rest "
        "dense MLPs of intermediate_size_mlp 16384; trainc's moe_layer_freq makes layers "
        "i % 2 == 0 MoE and its dense layers have ffn_hidden_size" in e.value.differences
    )
