"""trainc import-hf: real Hugging Face config.json files -> presets equal to the shipped ones."""

from pathlib import Path

import pytest
import yaml

from trainc.cli import main
from trainc.compiler.load import conf_dir
from trainc.compiler.pipeline import compile_spec
from trainc.ecosystem.hf_import import SUPPORTED, HFImportError, convert, import_hf

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def _preset(name: str) -> dict:
    return yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())


@pytest.mark.parametrize(("config", "preset", "seq_length"), [
    ("Llama-2-70b-hf.json", "llama2-70b", None),
    ("Llama-2-7b-hf.json", "llama2-7b", None),
    ("Meta-Llama-3-8B.json", "llama3-8b", None),
    # the Mixtral preset trains at 4096 tokens (config.json only states 32768 positions)
    ("Mixtral-8x7B-v0.1.json", "mixtral-8x7b", 4096),
])
def test_import_reproduces_the_shipped_preset(config, preset, seq_length):
    imported = yaml.safe_load(import_hf(HF / config, seq_length=seq_length))
    assert imported == _preset(preset)


def test_deepseek_v3_matches_the_like_preset_on_architecture_keys():
    imported = yaml.safe_load(import_hf(HF / "DeepSeek-V3.json"))
    preset = _preset("deepseek-v3-like")
    # the preset keeps the 4K pre-training length and the paper's balance-loss weight
    keys = set(preset) - {"max_position_embeddings", "moe_aux_loss_coeff"}
    assert {k: imported[k] for k in keys} == {k: preset[k] for k in keys}
    assert imported["max_position_embeddings"] == 163840


def test_qwen3_moe_keys_and_head_dim():
    keys, notes = convert(yaml.safe_load((HF / "Qwen3-30B-A3B.json").read_text()))
    assert keys["kv_channels"] == 128  # head_dim 128 != 2048 / 32
    assert (keys["num_experts"], keys["moe_router_topk"], keys["moe_ffn_hidden_size"]) == (128, 8, 768)
    assert keys["num_query_groups"] == 4 and keys["moe_layer_freq"] == 1
    assert "QK-norm" in notes
    dense, _ = convert(yaml.safe_load((HF / "Qwen3-8B.json").read_text()))
    assert "kv_channels" not in dense and "num_experts" not in dense


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


@pytest.mark.parametrize("config", sorted(p.name for p in HF.glob("*.json")))
def test_every_imported_preset_compiles(tmp_path, capsys, config):
    """The written preset composes with a cluster preset into a spec that lints clean."""
    (tmp_path / "model").mkdir()
    assert main(["import-hf", str(HF / config), "-o", str(tmp_path / "model" / "imported.yaml"),
                 "--seq-length", "4096"]) == 0
    moe = "num_experts" in yaml.safe_load((tmp_path / "model" / "imported.yaml").read_text())
    (tmp_path / "spec.yaml").write_text(
        "defaults:\n  - model: imported\n  - cluster: dgx-h100\n  - _self_\n"
        "cluster:\n  num_nodes: 16\nparallel:\n  tp: 4\n"
        + ("  ep: 8\n" if moe else "")
        + "training:\n  global_batch_size: 1024\n  recompute: full\n")
    result = compile_spec(tmp_path / "spec.yaml", emit_files=False)
    errors = [d.to_json() for d in result.diagnostics if d.is_error and d.rule.id < "TRC400"]
    assert errors == []
