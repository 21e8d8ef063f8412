"""Secrets in ``launch.env``: values whose name looks like a credential are never written.

``plan.json`` (the source every artifact renders from) shows them as ``***``; the shell scripts
read them from the submitting environment instead (``export K="${K:?...}"``), the Kubernetes
manifest from a Secret. The validator TRC510 tells the user so.
"""

from __future__ import annotations

import re
from typing import Any

#: Names of environment variables that hold credentials (WANDB_API_KEY, HF_TOKEN, ...).
SECRET_NAME = re.compile(r"(?i)(token|secret|password|passwd|api_?key|access_?key|credential|"
                         r"private_?key)")
#: What plan.json and everything rendered from it shows instead of a secret value.
MASK = "***"


def is_secret(name: str) -> bool:
    """True when an environment variable name looks like a credential.

    >>> is_secret("WANDB_API_KEY"), is_secret("HF_TOKEN"), is_secret("NCCL_DEBUG")
    (True, True, False)
    """
    return bool(SECRET_NAME.search(name))


def mask_secrets(spec_dict: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The resolved spec with secret ``launch.env`` values replaced by :data:`MASK`, and the
    sorted names of those variables (the input is not modified)."""
    env = (spec_dict.get("launch") or {}).get("env") or {}
    names = sorted(k for k in env if is_secret(k))
    if not names:
        return spec_dict, []
    launch = dict(spec_dict["launch"])
    launch["env"] = {k: (MASK if k in names else v) for k, v in env.items()}
    return {**spec_dict, "launch": launch}, names


def shell_reference(name: str) -> str:
    """The line a generated script uses to take a secret from the submitting environment.

    >>> shell_reference("HF_TOKEN")
    'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN in the environment (trainc does not write secrets)}"'
    """
    return (f'export {name}="${{{name}:?set {name} in the environment '
            f'(trainc does not write secrets)}}"')
