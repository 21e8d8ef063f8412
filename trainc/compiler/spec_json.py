"""The resolved spec as JSON values (``plan.json`` ``spec`` / ``spec_as_written``) and its hash.

Kept apart from :mod:`trainc.compiler.plan` so that :class:`trainc.compiler.ir.Plan` builds these
views only when ``plan.json`` is written (``trainc compile``) or read: ``trainc lint`` and the fit
check's what-if evaluations never need them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from typing import Any

from trainc.schemas import TrainSpec


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass ``cls`` in declaration order (computed once per class)."""
    return tuple(f.name for f in dataclasses.fields(cls))


#: Values :func:`_conv` returns as they are (checked by exact type first: the common case).
_SCALARS = (str, int, float, bool, type(None))


def _conv(v: Any) -> Any:
    if type(v) in _SCALARS:
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {name: _conv(getattr(v, name)) for name in _field_names(type(v))}
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, dict):
        return {str(k): _conv(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_conv(x) for x in v]
    return v


def spec_to_dict(spec: TrainSpec) -> dict[str, Any]:
    """The spec as plain JSON values (enums by their YAML spelling, the value; mappings with
    sorted keys), keys in schema order."""
    out = _conv(spec)
    assert isinstance(out, dict)
    return out


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline)."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def spec_hash(spec_dict: dict[str, Any]) -> str:
    """sha256 of the resolved spec's canonical JSON (hex)."""
    return hashlib.sha256(canonical_json(spec_dict).encode()).hexdigest()
