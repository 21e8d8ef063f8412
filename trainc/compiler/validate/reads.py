"""Which spec keys a rule read: run the validators over a recording view of the spec, so that a
finding computed from an invalid key is withheld (one lint run reports every error whose
inputs are known, and says which checks it skipped).

The view returns the spec's own leaf values (ints, enums, strings) and records each dotted key
read; sections are views too. Derived quantities (:class:`~trainc.compiler.derive.Derived`) count
as reads of every key :func:`~trainc.compiler.derive.derive` read.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class SpecView:
    """Read-only view of a spec (or a section) that adds every dotted key read to ``reads``."""

    __slots__ = ("_obj", "_prefix", "_reads")

    def __init__(self, obj: Any, reads: set[str], prefix: str = "") -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        key = self._prefix + name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return SpecView(value, self._reads, key + ".")
        self._reads.add(key)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("validators never change the spec")


class DerivedView:
    """View of a :class:`Derived` whose every field read counts as reading ``inputs``."""

    __slots__ = ("_inputs", "_obj", "_reads")

    def __init__(self, obj: Any, inputs: set[str], reads: set[str]) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_inputs", inputs)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        self._reads.update(self._inputs)
        return getattr(self._obj, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("validators never change the derived values")


def hits(keys: set[str], broken: frozenset[str]) -> set[str]:
    """The broken keys that ``keys`` touch (a broken section covers its keys)."""
    return {
        b for b in broken for k in keys if k == b or k.startswith(b + ".") or b.startswith(k + ".")
    }
