"""Shell launchers: ``torchrun.sh`` (one node's share of the job) and ``sbatch.sh`` (Slurm).

Both are Jinja templates (``trainc/templates``) rendered from values computed here: the templates
only branch and loop, every spec string goes through ``|shquote``, and ``#SBATCH`` values go
through :func:`sbatch_value` (``sbatch`` reads directives itself, without a shell).
"""

from __future__ import annotations

import re
from typing import Any

from trainc.compiler.derive import domain_group_nodes, slurm_segment
from trainc.compiler.emit.render import header, render
from trainc.compiler.support.secrets import shell_reference
from trainc.compiler.support.slurm_time import signal_lead_seconds
from trainc.errors import InternalError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SBATCH_BARE = re.compile(r"[A-Za-z0-9._,:@%/+=-]+")


def sbatch_value(value: Any) -> str:
    """A value for a ``#SBATCH --opt=VALUE`` line, read back verbatim by ``sbatch``.

    sbatch parses directive lines itself (no shell expansion): a word ends at white space unless
    inside double quotes, and a backslash escapes the next character. A line break or other
    control character cannot be expressed and is refused.
    """
    text = str(value)
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InternalError(f"a Slurm directive value cannot contain control characters: {text!r}")
    if _SBATCH_BARE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _looks_expandable(text: str) -> bool:
    """True when a literal (single-quoted) value holds ``$``, a backtick or a backslash, which
    shellcheck flags (SC2016, SC1003) unless told that the quoting is on purpose."""
    return "$" in text or "`" in text or "\\" in text


def _env(plan: dict[str, Any]) -> list[tuple[str, str, bool]]:
    env = plan["spec"]["launch"]["env"]
    for key in env:
        if not _ENV_NAME.fullmatch(key):
            raise InternalError(f"launch.env key {key!r} is not a variable name (validator missed)")
    return [(k, str(env[k]), _looks_expandable(str(env[k]))) for k in sorted(env)]


def _common(plan: dict[str, Any]) -> dict[str, Any]:
    s = plan["spec"]
    return {
        "header": header(plan),
        "name": s["name"],
        "nnodes": s["cluster"]["num_nodes"],
        "nproc_per_node": s["cluster"]["gpus_per_node"],
        "master_port": int(s["launch"]["master_port"]),
        "env": _env(plan),
        "secret_exports": secret_exports(plan),
    }


def secret_exports(plan: dict[str, Any]) -> dict[str, str]:
    """Per secret ``launch.env`` name (``derived.secret_env``), the export line that takes the
    value from the submitting environment; plan.json holds only ``***`` for it."""
    return {k: shell_reference(k) for k in plan["derived"].get("secret_env", [])}


def _torchtitan_module(plan: dict[str, Any]) -> str:
    """torchtitan 0.3.0's module for ``--module``: ``qwen3`` (GQA decoder with grouped experts)
    when the plan's registry has MoE layers, else ``llama3`` (dense)."""
    fsdp = (plan.get("engines") or {}).get("fsdp") or {}
    registry = (fsdp.get("torchtitan") or {}).get("registry") or {}
    return "qwen3" if registry.get("moe") is not None else "llama3"


def torchrun(plan: dict[str, Any]) -> dict[str, str]:
    """``torchrun.sh``: one node's share of the job, like PyTorch's ``torchrun`` recipe for
    multi-node runs (static ``--node_rank``/``--master_addr`` by default, a c10d rendezvous when
    started by ``sbatch.sh``), running ``python -m trainc.launch.worker --plan <dir>/plan.json``
    or, for entrypoint megatron-lm, ``pretrain_gpt.py`` with ``megatron_args.txt``, or for
    entrypoint torchtitan, ``torchtitan.train`` 0.3.0 with ``torchtitan_args.txt`` (the
    ``config_registry`` function from ``TORCHTITAN_CONFIG``, in ``TORCHTITAN_MODULE``: by
    default ``qwen3`` for an MoE plan, whose decoder has grouped experts, else ``llama3``; see
    ``trainc/compiler/emit/torchtitan.py`` ``moe_comment``).
    """
    s, d = plan["spec"], plan["derived"]
    lc = s["launch"]
    cpu = lc["device"] == "cpu"
    ctx = _common(plan) | {
        "last_node_rank": s["cluster"]["num_nodes"] - 1,
        "entrypoint": lc["entrypoint"],
        "torchtitan_module": _torchtitan_module(plan),
        "megatron_lm_path": lc["megatron_lm_path"] or "",
        "add_checkpoint_dir": lc["save_dir"] is None,
        "load_dir": (s.get("resume") or {}).get("load_dir"),
        "cuda_device_max_connections_1": bool(d["cuda_device_max_connections_1"]) and not cpu,
        "set_omp_num_threads": cpu and "OMP_NUM_THREADS" not in lc["env"],
    }
    if ctx["cuda_device_max_connections_1"]:  # exported once, above launch.env
        ctx["env"] = [e for e in ctx["env"] if e[0] != "CUDA_DEVICE_MAX_CONNECTIONS"]
    return {"torchrun.sh": render("torchrun.sh.j2", **ctx)}


def sbatch(plan: dict[str, Any]) -> dict[str, str]:
    """``sbatch.sh``: one srun task per node (``--ntasks-per-node=1``), each running
    ``torchrun.sh`` with a c10d rendezvous on the first host of ``scontrol show hostnames``;
    pyxis ``--container-image``/``--container-mounts`` when set; ``--signal=USR1@N`` so the
    worker checkpoints before the time limit; ``--segment=N`` (Slurm topology/block) when the
    NVLink domain spans several nodes or ``launch.slurm_segment`` asks for it
    (:func:`trainc.compiler.derive.slurm_segment`). ``#SBATCH`` lines come first and hold no shell
    expansion.
    """
    s = plan["spec"]
    lc = s["launch"]
    signal = signal_lead_seconds(lc["time_limit"])
    mounts = ",".join(lc["container_mounts"] or [])
    c, par = s["cluster"], s["parallel"]
    span = domain_group_nodes(
        par["tp"],
        par["cp"],
        par["etp"],
        par["ep"] if s["model"]["num_experts"] else 1,
        c["gpus_per_node"],
    )
    segment = slurm_segment(
        c["num_nodes"], c["gpus_per_node"], c["nvlink_domain_size"], lc.get("slurm_segment"), span
    )
    ctx = _common(plan) | {
        "segment": segment,
        "segment_domains": max(c["nvlink_domain_size"] // c["gpus_per_node"], 1),
        "segment_group_nodes": span,
        "gpus_per_node": s["cluster"]["gpus_per_node"] if lc["device"] != "cpu" else None,
        "time_limit": sbatch_value(lc["time_limit"]),
        "partition": sbatch_value(lc["partition"]) if lc["partition"] else None,
        "account": sbatch_value(lc["account"]) if lc["account"] else None,
        "signal_seconds": signal,
        "requeue": bool(lc.get("requeue")),
        "save_dir": lc.get("save_dir"),
        "container_image": lc["container_image"],
        "container_mounts_prefix": mounts + "," if mounts else "",
        "srun_literal_dollar": bool(lc["container_image"])
        and _looks_expandable(lc["container_image"] + mounts),
    }
    return {"sbatch.sh": render("sbatch.sh.j2", **ctx)}
