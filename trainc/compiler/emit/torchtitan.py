"""``torchtitan_args.txt`` (engine=fsdp): the torchtitan 0.3.0 ``torchtitan.train`` overrides of
``plan.json``'s ``engines.fsdp.torchtitan`` (built by :mod:`trainc.compiler.engines.fsdp` from
the same values the trainc FSDP2 worker reads).

torchtitan 0.3.0 has no TOML job file: a job is a Python ``config_registry`` function chosen
with ``--module``/``--config`` (``torchtitan/config/manager.py`` ``ConfigManager``), whose fields
tyro lets the command line override as ``--section.field value``. The model's shape, tokenizer,
data set and optimizer are set by that function only (``Trainer.Config.model_spec`` is
suppressed on the command line), so the file names the shape the registry entry must have.
"""

from __future__ import annotations

from typing import Any

from trainc.compiler.emit.render import header


def torchtitan_args(plan: dict[str, Any]) -> dict[str, str]:
    """``torchtitan_args.txt``: one override per line (``--flag`` or ``--flag value``; ``#``
    lines are comments), after a comment block naming the model shape and the command. Nothing
    unless engine=fsdp."""
    cfg = plan["engines"].get("fsdp")
    if cfg is None:
        return {}
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    tt = cfg["torchtitan"]
    comment = (
        f"# torchtitan {tt['version']} overrides (tyro --section.field): run with\n"
        "#   torchrun --nnodes=N --nproc_per_node=G -m torchtitan.train --module llama3 \\\n"
        "#     --config <registry function> $(grep -v '^#' torchtitan_args.txt)\n"
        "# The registry function sets the model (torchtitan's command line cannot): it must have\n"
        f"#   layers={tc['num_layers']} dim={tc['hidden_size']} "
        f"heads={tc['num_attention_heads']} kv_heads={tc['num_query_groups']} "
        f"ffn={tc['ffn_hidden_size']} vocab={plan['derived']['padded_vocab_size']}\n"
        f"# and the optimizer {cfg['optimizer']['class']} lr={cfg['optimizer']['lr']:g}; "
        "activation checkpointing "
        f"{cfg['activation_checkpoint']['mode']} (FullAC / SelectiveAC config class).\n")
    lines = [" ".join(item) for item in tt["args"]]
    return {"torchtitan_args.txt": header(plan) + comment + "\n".join(lines) + "\n"}
