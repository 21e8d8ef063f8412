"""Check a composed spec (plain dicts) against the schema dataclasses and build the TrainSpec.

The dataclasses in :mod:`trainc.schemas` are Hydra structured configs; this module applies the same
type rules OmegaConf applies to them (a differential test compares the two) but reports *every*
problem at once, with did-you-mean, and costs microseconds instead of OmegaConf's ~50 ms per spec:

* int fields take ints (not bools, not floats: 8.0 is a mistake for a count);
* float fields take ints and floats (not bools);
* bool fields take bools; str fields take strings, ints and floats (converted, as OmegaConf does);
* Enum fields take a member name; ``X | None`` also takes null; list[str] / dict[str, str] take
  lists / mappings of scalars (converted to strings).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import types
import typing
from functools import cache
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag, did_you_mean
from trainc.compiler.support.secrets import MASK, redact
from trainc.schemas import TrainSpec

#: Keys whose value is a free-form mapping (not descended into by the schema check).
MAP_KEYS = frozenset({"launch.env"})
_MISSING = object()


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Resolved type hints of a schema dataclass."""
    return typing.get_type_hints(cls)


@cache
def schema_keys(cls: type = TrainSpec, prefix: str = "") -> dict[str, Any]:
    """Every dotted leaf key of the schema mapped to its type (sections are descended into)."""
    out: dict[str, Any] = {}
    for name, tp in field_types(cls).items():
        key = prefix + name
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out.update(schema_keys(tp, key + "."))
        else:
            out[key] = tp
    return out


@cache
def section_keys() -> tuple[str, ...]:
    """Dotted names of the schema's sections (``model``, ``cluster``, ...)."""
    return tuple(sorted({k.rsplit(".", 1)[0] for k in schema_keys() if "." in k}))


@cache
def _optional(tp: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed); once per schema type."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def type_name(tp: Any) -> str:
    """Human name of a schema type (``int or null``, ``one of swiglu, gelu``)."""
    base, optional = _optional(tp)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        name = "one of " + ", ".join(enum_choices(base))
    elif typing.get_origin(base) is list:
        name = "a list of strings"
    elif typing.get_origin(base) is dict:
        name = "a mapping of names to strings"
    else:
        name = getattr(base, "__name__", str(base))
    return name + (" or null" if optional else "")


def enum_choices(base: type[enum.Enum]) -> list[str]:
    """The YAML spellings of an enum: its members' values (``megatron-lm``, ``a100-40g``)."""
    return [str(m.value) for m in base]


def enum_member(base: type[enum.Enum], value: Any) -> Any:
    """The member whose value (the YAML spelling) or name is ``value``; ``_MISSING`` if none."""
    if isinstance(value, base):
        return value
    if not isinstance(value, str):
        return _MISSING
    for m in base:
        if m.value == value:
            return m
    return base.__members__.get(value, _MISSING)


def _scalar_str(v: Any) -> str | None:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, int, float)):
        return str(v)
    return None


def coerce(tp: Any, value: Any) -> Any:
    """``value`` converted to schema type ``tp``, or ``_MISSING`` if it does not fit."""
    base, optional = _optional(tp)
    if value is None:
        return None if optional else _MISSING
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return enum_member(base, value)
    if base is bool:
        return value if isinstance(value, bool) else _MISSING
    if base is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISSING
    if base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _MISSING
    if base is str:
        return (
            str(value)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool)
            else _MISSING
        )
    if typing.get_origin(base) is list:
        if not isinstance(value, list):
            return _MISSING
        items = [_scalar_str(v) for v in value]
        return _MISSING if None in items else items
    if typing.get_origin(base) is dict:
        if not isinstance(value, dict):
            return _MISSING
        out = {str(k): _scalar_str(v) for k, v in value.items()}
        return _MISSING if None in out.values() else out
    raise AssertionError(f"unsupported schema type {tp!r}")


def _show(v: Any, key: str = "") -> str:
    """``v`` for a message about spec key ``key`` (secret ``launch.env`` values masked:
    :func:`trainc.compiler.support.secrets.redact`), cut to 60 characters."""
    text = repr(redact(key, v))
    return text if len(text) <= 60 else text[:57] + "..."


#: Names engineers bring from Megatron-LM / Megatron-Core, DeepSpeed and Hugging Face configs ->
#: (trainc key, relative to the section unless dotted; a note). Checked before did-you-mean,
#: whose nearest spelling is often wrong for these (tensor_model_parallel_size is not
#: sequence_parallel; num_kv_heads is not num_attention_heads).
ALIASES: dict[str, tuple[str, str]] = {
    "tensor_model_parallel_size": ("tp", ""),
    "tensor_parallel": ("tp", ""),
    "tensor_parallel_size": ("tp", ""),
    "pipeline_model_parallel_size": ("pp", ""),
    "pipeline_parallel": ("pp", ""),
    "pipeline_parallel_size": ("pp", ""),
    "virtual_pipeline_model_parallel_size": ("vpp", ""),
    "num_virtual_stages_per_pipeline_rank": ("vpp", ""),
    "context_parallel_size": ("cp", ""),
    "expert_model_parallel_size": ("ep", ""),
    "expert_tensor_parallel_size": ("etp", ""),
    "data_parallel_size": ("dp", ""),
    "num_kv_heads": ("model.num_query_groups", "key/value heads = GQA groups"),
    "num_key_value_heads": ("model.num_query_groups", "key/value heads = GQA groups"),
    "n_kv_heads": ("model.num_query_groups", "key/value heads = GQA groups"),
    "intermediate_size": ("model.ffn_hidden_size", ""),
    "num_hidden_layers": ("model.num_layers", ""),
    "max_seq_length": ("model.seq_length", ""),
    "sliding_window": (
        "model.window_size",
        "keys left of each query: Hugging Face's sliding_window counts the query, so "
        "window_size = sliding_window - 1",
    ),
    "gradient_accumulation_steps": (
        "training.global_batch_size",
        "accumulation is derived: "
        "num_microbatches = global_batch_size / (micro_batch_size "
        "* dp); set global_batch_size",
    ),
    "train_micro_batch_size_per_gpu": ("training.micro_batch_size", ""),
    "train_batch_size": ("training.global_batch_size", ""),
    "use_distributed_optimizer": (
        "parallel.zero_stage",
        "Megatron's distributed optimizer is derived from zero_stage (1 = distributed optimizer)",
    ),
}


def _alias_target(ours: str) -> str:
    """The dotted trainc key of an :data:`ALIASES` target (a bare name is a parallel degree)."""
    return ours if "." in ours else "parallel." + ours


def _ratio(a: str, b: str) -> float:
    """difflib's similarity of two names (0..1), as :func:`did_you_mean` ranks them."""
    return difflib.SequenceMatcher(None, a, b).ratio()


def _read_as(text: str, value: Any) -> str:
    """What YAML (or Hydra) made of an unquoted scalar, in words."""
    if value is None:
        return "null (no value)"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if ":" in text:
        return f"a base-60 (YAML 1.1 time) number, {value!r}"
    if isinstance(value, int) and re.fullmatch(r"[-+]?0[0-7_]+", text):
        return f"an octal integer, {value}"
    if isinstance(value, int) and re.fullmatch(r"[-+]?0[xX][0-9a-fA-F_]+", text):
        return f"a hexadecimal integer, {value}"
    return f"{'an integer' if isinstance(value, int) else 'a number'}, {value!r}"


def _not_a_string(key: str, value: Any, text: str, from_cli: bool) -> Diagnostic:
    """TRC007: a string key whose unquoted value was read as another type (a secret
    ``launch.env`` value is not shown, nor offered as an edit)."""
    if redact(key, text) != text:
        leaf = key.rsplit(".", 1)[-1]
        who = "the override" if from_cli else "YAML"
        return diag(
            R.UNQUOTED_STRING,
            f"{key} is a string, but {who} read its unquoted value "
            f"as {type(value).__name__} (a secret: not shown)",
            key,
            fix=f'quote it: {leaf}: "..."',
            text=MASK,
            read_as=MASK,
        )
    what = "the override's" if from_cli else "YAML read the"
    verb = "was read as" if from_cli else "as"
    leaf = key.rsplit(".", 1)[-1]
    fix = (
        f"quote the value for Hydra, inside shell quotes: '{key}=\"{text}\"'"
        if from_cli
        else f'quote it: {leaf}: "{text}"'
    )
    return diag(
        R.UNQUOTED_STRING,
        f"{key} is a string, but {what} unquoted {text} {verb} {_read_as(text, value)}",
        key,
        fix=fix,
        edits={key: text},
        text=text,
        read_as=_show(value, key),
    )


def to_spec(
    cfg: dict[str, Any],
    raw: dict[str, tuple[str, bool]] | None = None,
) -> tuple[TrainSpec | None, list[Diagnostic]]:
    """:func:`check_spec` without the partial spec: (spec or None, diagnostics)."""
    res = check_spec(cfg, raw)
    return res.spec, res.diagnostics


@dataclasses.dataclass(frozen=True)
class SchemaResult:
    """What :func:`check_spec` found. ``spec`` is None when any diagnostic was found; then
    ``partial`` is the spec with every key that failed (``broken``: wrong type, bad choice,
    missing) at its default, or at a placeholder (1 for a count) when it has none, so that the
    rules which do not read a broken key can still run (all errors in one run)."""

    spec: TrainSpec | None
    diagnostics: list[Diagnostic]
    partial: TrainSpec | None = None
    broken: frozenset[str] = frozenset()


@cache
def _required_keys(cls: type = TrainSpec, prefix: str = "") -> frozenset[str]:
    """Dotted schema keys without a default (the loader reports them TRC003 when unset)."""
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        tp = field_types(cls)[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out |= _required_keys(tp, prefix + f.name + ".")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out.add(prefix + f.name)
    return frozenset(out)


def _placeholder(tp: Any) -> Any:
    """A value of schema type ``tp`` that keeps the arithmetic of later passes total."""
    base, optional = _optional(tp)
    if optional:
        return None
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return next(iter(base))
    return {int: 1, float: 1.0, str: "x", bool: False}.get(base)


def check_spec(
    cfg: dict[str, Any],
    raw: dict[str, tuple[str, bool]] | None = None,
) -> SchemaResult:
    """Check a composed container against the schema and build the :class:`TrainSpec`.

    Reports every unknown key (TRC002, with did-you-mean), wrong type (TRC001), bad enum value
    (TRC004), missing required key (TRC003), a string key whose unquoted value YAML or the
    override grammar read as a number, time, boolean or null (TRC007) and a NaN or infinity in a
    number key (TRC008); the spec is None if any was found. ``raw`` maps a dotted key to the
    source text of its value when that was an unquoted scalar read as another type than a
    string, and whether it came from the command line (the loader builds it). Diagnostics carry
    no locations (the loader adds them).

    ``launch.env`` values may be unquoted numbers written as meant (``1``, ``8``); anything YAML
    would change (``0123``, ``4:00:00``, ``1e3``, ``yes``) must be quoted there too.
    """
    checker = _Checker(raw or {})
    checker.walk(cfg, "")
    return _result(checker.values, checker.diags)


class _Checker:
    """One schema check: walks the composed container, collecting the coerced value of every
    key that fits (``values``) and a diagnostic for every one that does not (``diags``)."""

    def __init__(self, raw: dict[str, tuple[str, bool]]) -> None:
        self.raw = raw
        self.known = schema_keys()
        self.values: dict[str, Any] = {}
        self.diags: list[Diagnostic] = []

    def walk(self, d: dict[str, Any], prefix: str) -> None:
        """Check every key of mapping ``d`` (its dotted keys start with ``prefix``)."""
        for k, v in d.items():
            key = prefix + (str(k) or "''")  # an empty YAML key is still named in diagnostics
            if key in self.known:
                self.check(key, v)
            elif key in section_keys():
                if isinstance(v, dict):
                    self.walk(v, key + ".")
                elif v is not None:
                    self.diags.append(
                        diag(
                            R.TYPE_MISMATCH,
                            f"{key} must be a mapping of keys, got {_show(v, key)}",
                            key,
                            fix=f"write {key}: as a section",
                        )
                    )
            elif str(k) in ALIASES:
                self.diags.append(_foreign_name(key, str(k), v))
            else:
                self.diags.append(_unknown_key(key, str(k), [*self.known, *section_keys()]))

    def check(self, key: str, value: Any) -> None:
        """Check the value of schema key ``key``: the first problem found is reported, else
        the coerced value is kept."""
        tp = self.known[key]
        base, optional = _optional(tp)
        text, from_cli = self.raw.get(key, (_scalar_str(value) or "", False))
        if base is str and (
            isinstance(value, (bool, int, float)) or (value is None and not optional and text)
        ):
            # 4:00:00 -> 14400, 0123 -> 83, yes -> True, 1e3 -> 1000.0, ~ -> None
            self.diags.append(_not_a_string(key, value, text, from_cli))
            return
        if base is float and isinstance(value, float) and not math.isfinite(value):
            self.diags.append(
                diag(
                    R.NON_FINITE,
                    f"{key} = {value!r} is not a finite number",
                    key,
                    fix=f"set {key} to a finite number",
                    value=repr(value),
                )
            )
            return
        if typing.get_origin(base) is dict and isinstance(value, dict):
            found = self._map_entries(key, value)
            self.diags += found
            if found:
                return
        if typing.get_origin(base) is list and isinstance(value, list):
            found = self._list_items(key, value)
            self.diags += found
            if found:
                return
        got = coerce(tp, value)
        if got is not _MISSING:
            self.values[key] = got
        else:
            self.diags.append(_misfit(key, tp, base, value))

    def _map_entries(self, key: str, value: dict[str, Any]) -> list[Diagnostic]:
        """TRC007 for each entry of a string mapping (``launch.env``) whose unquoted value was
        read as another type (or spelled otherwise than its source text)."""
        raw = self.raw
        bad = [
            k
            for k, v in value.items()
            if not isinstance(v, str)
            and (
                isinstance(v, bool)
                or (isinstance(v, float) and not math.isfinite(v))
                or raw.get(f"{key}.{k}", (_scalar_str(v), False))[0] != _scalar_str(v)
            )
        ]
        out = []
        for k in bad:
            sub = f"{key}.{k}"
            t, cli = raw.get(sub, (_scalar_str(value[k]) or "", False))
            out.append(_not_a_string(sub, value[k], t, cli))
        return out

    def _list_items(self, key: str, value: list[Any]) -> list[Diagnostic]:
        """TRC007 for the first item of a list of strings that YAML read as a boolean, null or
        a non-finite number (yes/no/~ in a list of strings)."""
        odd = [
            i
            for i, v in enumerate(value)
            if v is None or isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v))
        ]
        if not odd:
            return []
        v = value[odd[0]]
        shown = self.raw.get(f"{key}[{odd[0]}]", (_scalar_str(v) or "null", False))[0]
        return [
            diag(
                R.UNQUOTED_STRING,
                f"{key} is a list of strings, but YAML read "
                f"the unquoted item {shown} as {_read_as(shown, v)}",
                key,
                fix=f'quote it: - "{shown}"',
                text=shown,
                read_as=_show(v, key),
            )
        ]


def _foreign_name(key: str, name: str, v: Any) -> Diagnostic:
    """TRC002 for a name from Megatron, DeepSpeed or Hugging Face configs (:data:`ALIASES`):
    what trainc calls it (with an edit), or how trainc derives it."""
    ours, why = ALIASES[name]
    target = _alias_target(ours)
    if "derived" in why:  # no one-to-one key: say how trainc gets it
        return diag(
            R.UNKNOWN_KEY,
            f"{key} is not a spec key: {why}",
            key,
            fix=f"remove {key} and set {target}",
            edits={key: None},
        )
    note = f" ({why})" if why else ""
    if name == "sliding_window" and type(v) is int:  # HF counts the query itself
        v = v - 1
    return diag(
        R.UNKNOWN_KEY,
        f"{key} is not a spec key: trainc calls it `{target}`{note}",
        key,
        fix=f"write {target}: {_show(v, target)} instead of {key}",
        edits={key: None, target: v},
    )


def _unknown_key(key: str, name: str, cands: list[str]) -> Diagnostic:
    """TRC002 for any other unknown key, with did-you-mean over the schema's keys (or a
    misspelt foreign name's trainc key)."""
    hint = did_you_mean(key, cands) or did_you_mean(
        name, sorted({c.rsplit(".", 1)[-1] for c in cands})
    )
    # a misspelt foreign name (pipline_parallel) is closer to its alias than to
    # any spec key (sequence_parallel): name the alias's trainc key
    alias = difflib.get_close_matches(name, list(ALIASES), n=1, cutoff=0.85)
    leafs = sorted({c.rsplit(".", 1)[-1] for c in cands})
    if alias and _ratio(name, alias[0]) > max((_ratio(name, c) for c in leafs), default=0.0):
        target = _alias_target(ALIASES[alias[0]][0])
        hint = f" (did you mean `{alias[0]}`, which trainc calls `{target}`?)"
    return diag(
        R.UNKNOWN_KEY,
        f"{key} is not a spec key{hint}",
        key,
        fix=f"remove {key} or correct its spelling",
    )


def _misfit(key: str, tp: Any, base: Any, value: Any) -> Diagnostic:
    """The diagnostic for a value :func:`coerce` refused: TRC004 (not one of an enum's choices)
    or TRC001 (wrong type; an integral float for an integer key says which integer)."""
    if isinstance(base, type) and issubclass(base, enum.Enum) and isinstance(value, str):
        choices = enum_choices(base)
        return diag(
            R.UNKNOWN_CHOICE,
            f"{key} = '{value}' is not one of {', '.join(choices)}{did_you_mean(value, choices)}",
            key,
            fix=f"set {key} to one of {', '.join(choices)}",
        )
    if base is int and isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        # YAML reads 1e3 as the float 1000.0: an integer field says which integer
        n = int(value)
        return diag(
            R.TYPE_MISMATCH,
            f"{key} must be {type_name(tp)}, got "
            f"{_show(value, key)} (a float: YAML reads a number with a decimal "
            "point or an exponent, 2.0 or 1e3, as a float)",
            key,
            fix=f"write it as the integer {n}: {key}={n}",
            edits={key: n},
            expected=type_name(tp),
            got=_show(value, key),
        )
    return diag(
        R.TYPE_MISMATCH,
        f"{key} must be {type_name(tp)}, got {_show(value, key)} ({type(value).__name__})",
        key,
        fix=f"set {key} to {type_name(tp)}",
        expected=type_name(tp),
        got=_show(value, key),
    )


def _result(values: dict[str, Any], diags: list[Diagnostic]) -> SchemaResult:
    """Build the :class:`TrainSpec` from the checked ``values`` (TRC003 for each missing
    required key); with any diagnostic, the partial spec with the broken keys filled in."""
    spec = _build(TrainSpec, "", values, diags)
    if not diags:
        assert isinstance(spec, TrainSpec)
        return SchemaResult(spec, [])
    broken = frozenset(d.key for d in diags if d.rule is not R.UNKNOWN_KEY)
    filled = dict(values)
    required = _required_keys()
    for key, tp in schema_keys().items():
        if (
            key not in filled
            and key in required
            and any(key == b or key.startswith(b + ".") for b in broken)
        ):
            filled[key] = _placeholder(tp)
    partial = _build(TrainSpec, "", filled, [])
    return SchemaResult(None, diags, partial if isinstance(partial, TrainSpec) else None, broken)


@cache
def _fields_plan(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """(field name, its section dataclass or None, whether it is required) of a schema class,
    in field order; once per class."""
    out = []
    for f in dataclasses.fields(cls):
        tp = field_types(cls)[f.name]
        nested = tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, nested, required))
    return tuple(out)


def _build(cls: type, prefix: str, values: dict[str, Any], diags: list[Diagnostic]) -> Any:
    kwargs: dict[str, Any] = {}
    for name, nested, required in _fields_plan(cls):
        key = prefix + name
        if nested is not None:
            kwargs[name] = _build(nested, key + ".", values, diags)
        elif key in values:
            kwargs[name] = values[key]
        elif required and not any(d.key == key for d in diags):
            diags.append(
                diag(
                    R.MISSING_VALUE,
                    f"{key} is required and has no value",
                    key,
                    fix=f"set {key} in the spec, a preset, or as {key}=VALUE",
                )
            )
    if any(d.rule is R.MISSING_VALUE or d.rule is R.TYPE_MISMATCH for d in diags):
        return None
    return cls(**kwargs)
