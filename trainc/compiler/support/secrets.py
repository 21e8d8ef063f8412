"""Secrets in ``launch.env``: values whose name looks like a credential are never written.

``plan.json`` (the source every artifact renders from) shows them as ``***``; the shell scripts
read them from the submitting environment instead (``export K="${K:?...}"``), the Kubernetes
manifest from a Secret. The validator TRC510 tells the user so.
"""

from __future__ import annotations

import re
from typing import Any

#: Names of environment variables that hold credentials (WANDB_API_KEY, HF_TOKEN, ...;
#: PASS / PWD / AUTH only as a whole word of the name: MY_DB_PASS, PGPWD, GIT_AUTH, not BYPASS).
SECRET_NAME = re.compile(
    r"(?i)(token|secret|password|passwd|api_?key|access_?key|credential|"
    r"private_?key|(?:^|_)(?:pass|pwd|auth)(?:_|$))"
)
#: A value carrying a password in a URL's user information (``s3://KEY:SECRET@bucket``,
#: ``postgres://user:pw@host``): a credential whatever the variable is called.
CREDENTIAL_URL = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
#: What plan.json and everything rendered from it shows instead of a secret value.
MASK = "***"


def is_secret(name: str, value: object = "") -> bool:
    """True when an environment variable looks like a credential: its name
    (:data:`SECRET_NAME`) or its value (a URL with a password, :data:`CREDENTIAL_URL`).

    >>> is_secret("WANDB_API_KEY"), is_secret("HF_TOKEN"), is_secret("NCCL_DEBUG")
    (True, True, False)
    >>> is_secret("MY_DB_PASS"), is_secret("NCCL_BYPASS"), is_secret("S3", "s3://k:s@b/x")
    (True, False, True)
    """
    return bool(SECRET_NAME.search(name)) or bool(CREDENTIAL_URL.search(str(value)))


def redact(key: str, value: Any) -> Any:
    """``value`` as a diagnostic may show it for spec key ``key``: a secret ``launch.env`` entry
    as :data:`MASK`, the ``launch.env`` mapping with its secret entries masked; anything else
    unchanged. Diagnostics are printed, written as JSON / SARIF and posted as CI annotations.

    >>> redact("launch.env", {"HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO"})
    {'HF_TOKEN': '***', 'NCCL_DEBUG': 'INFO'}
    >>> redact("launch.env.HF_TOKEN", "hf_x"), redact("model.num_layers", 2)
    ('***', 2)
    """
    if key == "launch.env" and isinstance(value, dict):
        return {k: MASK if is_secret(str(k), v) else v for k, v in value.items()}
    if key.startswith("launch.env.") and is_secret(key[len("launch.env.") :], value):
        return MASK
    return value


def mask_secrets(spec_dict: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The resolved spec with secret ``launch.env`` values replaced by :data:`MASK`, and the
    sorted names of those variables (the input is not modified)."""
    env = (spec_dict.get("launch") or {}).get("env") or {}
    names = sorted(k for k, v in env.items() if is_secret(k, v))
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
    return (
        f'export {name}="${{{name}:?set {name} in the environment '
        f'(trainc does not write secrets)}}"'
    )
