"""``KEY=VALUE`` overrides: parsed with Hydra's override grammar (imported only when there are
overrides), group overrides (``model=llama3-8b``) told apart from key overrides
(``parallel.tp=4``, ``~KEY``), and key overrides applied to the composed spec after composition,
as Hydra applies them, together with the record of where each key was set and its source text
(:class:`Provenance`). Problems become TRC005 diagnostics located on the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Location, diag
from trainc.compiler.load.paths import GROUPS
from trainc.compiler.load.schema_check import MAP_KEYS
from trainc.compiler.load.yaml_source import located_at, scalar_texts

COMMAND_LINE = "<command line>"

_DELETE = object()  # marks a ~KEY override (and, as its expected value, "any value")
_NO_VALUE = object()  # a path the parsed override does not have


@dataclass
class ParsedOverrides:
    """The overrides of one load: ``groups`` as ``GROUP=NAME`` (presets to choose), ``keys`` as
    (dotted key, value, 1-based position on the command line), a ``~KEY`` deletion's value being
    ``(_DELETE, expected value or _DELETE)``; ``diagnostics`` for those that cannot be used."""

    groups: list[str] = field(default_factory=list)
    keys: list[tuple[str, Any, int]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class Provenance:
    """Where the composed spec's keys come from: ``where`` maps a dotted key to the
    :class:`Location` that set it last, ``raw`` a key to the source text of an unquoted scalar
    read as another type than a string (and whether it came from the command line), and
    ``explicit`` holds the keys the spec file or the command line set (not a preset)."""

    where: dict[str, Location]
    raw: dict[str, tuple[str, bool]]
    explicit: set[str]


def parse_overrides(overrides: list[str] | tuple[str, ...]) -> ParsedOverrides:
    """Parse ``overrides`` with Hydra's grammar and sort them into group and key overrides."""
    out = ParsedOverrides()
    if not overrides:
        return out
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for i, text in enumerate(overrides):
        try:
            ov = parser.parse_overrides([text])[0]
            value = ov.value()
        except (HydraException, ValueError, RecursionError) as e:
            # ValueError: an integer beyond Python's 4300-digit conversion limit;
            # RecursionError: brackets nested thousands deep (both from Hydra's parser)
            out.diagnostics.append(_unparsable(text, e, i + 1))
            continue
        _sort_one(ov, value, text, i + 1, out)
    return out


def _unparsable(text: str, e: Exception, idx: int) -> Diagnostic:
    """TRC005 for an override Hydra's grammar cannot parse (with how to quote its value)."""
    msg = (str(e).splitlines() or [type(e).__name__])[0][:200]
    shown_ov = text if len(text) <= 80 else text[:77] + "..."
    key, sep, value = text.partition("=")
    quote = (
        (
            f"; a value with characters outside Hydra's unquoted grammar (spaces, "
            f"non-ASCII, brackets) is quoted: {key}='{value}' (in a shell: "
            f"\"{key}='{value}'\")"
        )
        if sep and key and "'" not in value
        else ""
    )
    return located_at(
        diag(
            R.BAD_OVERRIDE,
            f"cannot parse override '{shown_ov}': {msg}",
            "<command line>",
            fix="write overrides as KEY=VALUE, e.g. parallel.tp=4 or model=llama3-8b" + quote,
        ),
        COMMAND_LINE,
        idx,
    )


def _sort_one(ov: Any, value: Any, text: str, idx: int, out: ParsedOverrides) -> None:
    """File one parsed Hydra override (``ov``, its ``value``) as a group or key override, or as
    a TRC005 diagnostic (no key, a package, deleting a group)."""
    key = ov.key_or_group
    if not key:
        out.diagnostics.append(
            located_at(
                diag(
                    R.BAD_OVERRIDE,
                    f"override '{text[:80]}' has no key",
                    "<command line>",
                    fix="write overrides as KEY=VALUE, e.g. parallel.tp=4",
                ),
                COMMAND_LINE,
                idx,
            )
        )
    elif ov.package or (ov.is_delete() and key in GROUPS):
        fix = (
            f"choose another preset instead ({key}=NAME)"
            if ov.is_delete()
            else "use plain KEY=VALUE overrides"
        )
        out.diagnostics.append(
            located_at(
                diag(R.BAD_OVERRIDE, f"override '{text}' is not supported", key, fix=fix),
                COMMAND_LINE,
                idx,
            )
        )
    elif ov.is_delete():
        # Hydra's ~KEY (delete) and ~KEY=VALUE (delete if it holds VALUE): the key goes back
        # to its schema default
        out.keys.append((key, (_DELETE, value if "=" in text else _DELETE), idx))
    elif key in GROUPS and isinstance(value, str):
        # A group the spec's defaults list does not name is appended (Hydra's '+group='),
        # after _self_: the chosen preset then replaces the spec's own section values.
        out.groups.append(f"{key}={value}")
    else:
        out.keys.append((key, value, idx))


def apply_key_overrides(
    cfg: dict[str, Any],
    keys: list[tuple[str, Any, int]],
    overrides: list[str] | tuple[str, ...],
    prov: Provenance,
) -> Diagnostic | None:
    """Apply the key overrides to the composed spec ``cfg`` in order and update ``prov``;
    returns the TRC005 of a ``~KEY`` that cannot be applied (the key is not set), else None."""
    for key, value, idx in keys:
        if isinstance(value, tuple) and value and value[0] is _DELETE:
            problem = _delete_path(cfg, key, value[1])
            if problem:
                return located_at(
                    diag(
                        R.BAD_OVERRIDE,
                        f"cannot apply '{overrides[idx - 1]}': {problem}",
                        key,
                        fix=f"delete a key the composed spec sets (trainc explain shows "
                        f"them), or set it: {key}=VALUE",
                    ),
                    COMMAND_LINE,
                    idx,
                )
            _forget_deleted(prov, key)
            continue
        _set_path(cfg, key, value)
        _record_set(prov, key, value, overrides[idx - 1], idx)
    return None


def _under(k: str, key: str) -> bool:
    """``k`` is ``key`` itself, a key inside it or an item of it (``key[i]``)."""
    return k == key or k.startswith((key + ".", key + "["))


def _forget_deleted(prov: Provenance, key: str) -> None:
    """A ``~KEY`` removed ``key``: it and what was inside it were set by no one."""
    for k in list(prov.where):
        if _under(k, key):
            del prov.where[k]
    for k in list(prov.raw):
        if _under(k, key):
            del prov.raw[k]
    prov.explicit = {k for k in prov.explicit if not _under(k, key)}


def _record_set(prov: Provenance, key: str, value: Any, override: str, idx: int) -> None:
    """``KEY=VALUE`` (``override`` as typed, number ``idx`` on the command line) set ``key``:
    the command line set it and, for a mapping, each key inside it."""
    for k in list(prov.where):
        if k.startswith(key + "."):
            del prov.where[k]
    for k in list(prov.raw):
        if _under(k, key):
            del prov.raw[k]
    if value is None or isinstance(value, (bool, int, float)):
        prov.raw[key] = (override.split("=", 1)[1], True)
    elif isinstance(value, dict):  # key={nccl: 2.20}: the source text of each entry
        prov.raw.update(_override_map_texts(key, override.split("=", 1)[1], value))
    prov.where[key] = Location(key=key, file=COMMAND_LINE, line=idx)
    prov.explicit.add(key)
    if isinstance(value, dict):
        subs = [f"{key}.{k}" for k in value] if key in MAP_KEYS else _flatten(value, key + ".")
        for sub in subs:
            prov.where[sub] = Location(key=sub, file=COMMAND_LINE, line=idx)
            prov.explicit.add(sub)


def _override_map_texts(key: str, text: str, value: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """The source text of each entry of a mapping override (``key={nccl: 2.20}``) that Hydra's
    grammar read as a number, boolean or null, as ``{dotted key: (text, True)}``, so that a
    string key's ``2.20`` is TRC007 (Hydra read it as 2.2) as it is in a file or as
    ``key.nccl=2.20``. The text comes from YAML's flow mapping of the same characters, which
    spells Hydra's plain scalars alike; a text YAML cannot read gives no entries."""
    try:
        node = yaml.compose("v: " + text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    texts: dict[str, str | None] = {}
    scalar_texts(node, "", texts)
    out: dict[str, tuple[str, bool]] = {}
    for sub, t in texts.items():
        if t is None or not sub.startswith("v."):
            continue
        cur: Any = value
        for part in sub[2:].split("."):
            cur = cur.get(part, _NO_VALUE) if isinstance(cur, dict) else _NO_VALUE
        if cur is None or isinstance(cur, (bool, int, float)):
            out[f"{key}.{sub[2:]}"] = (t, True)
    return out


def _flatten(value: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for k, v in value.items():
        key = prefix + str(k)
        out.append(key)
        if isinstance(v, dict) and key not in MAP_KEYS:
            out.extend(_flatten(v, key + "."))
    return out


def _delete_path(cfg: dict[str, Any], key: str, expected: Any) -> str | None:
    """Remove ``key`` (dotted) from the composed spec, as Hydra's ``~KEY`` does; with
    ``~KEY=VALUE`` only if it holds VALUE. Returns why it cannot, or None."""
    parts = key.split(".")
    cur: Any = cfg
    for p in parts[:-1]:
        cur = cur.get(p) if isinstance(cur, dict) else None
    if not isinstance(cur, dict) or parts[-1] not in cur:
        return f"{key} is not set in the composed spec"
    if expected is not _DELETE and cur[parts[-1]] != expected:
        return f"{key} is {cur[parts[-1]]!r}, not {expected!r}"
    del cur[parts[-1]]
    return None


def _set_path(cfg: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = cfg
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value
