"""``trainc plan SPEC --apply OUT.yaml``: the user's spec file with the planned keys changed.

The spec's text is edited in place, not re-dumped: PyYAML's node marks (``yaml.compose``) locate
each value, and only that value's characters are replaced, so comments, key order, quoting, flow
or block style, indentation and the ``defaults:`` list stay as the user wrote them, and ``git diff``
shows exactly what the plan changes:

1. a group override of the command line (``model=llama3-8b``) replaces the option of that group in
   the ``defaults:`` list, or is appended to it (after ``_self_``, as the loader composes it);
2. every leaf key whose value in the planned spec differs from what that file resolves to (its
   defaults list, its own keys, trainc's defaults) is replaced in place, or inserted as the last
   key of its section (one line in a block mapping, ``, key: value`` in a flow mapping; a missing
   section is appended at the end of the file); every other key keeps its text;
3. the result is loaded again from OUT's folder and must resolve to the planned spec.

When step 3 fails (OUT.yaml is in another folder and the defaults list names presets found only
next to the spec, an anchor shared by two keys, ...), the complete resolved spec is written
instead (no defaults list), with a note saying why: :attr:`Applied.note`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainc.compiler.load import GROUPS, load_spec
from trainc.compiler.normalize import FILLED_FROM, normalize
from trainc.compiler.plan import spec_to_dict


@dataclass(frozen=True)
class Applied:
    """What :func:`applied_text` produced: the file's text, the group options and dotted keys
    it wrote (changed or inserted; a derived key that follows them without being written is not
    one), and a note when it had to fall back to the complete resolved spec."""

    text: str
    changed: list[str]
    note: str = ""


def _leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and not (prefix + k).startswith("launch.env"):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _resolve(text: str, folder: Path) -> dict[str, Any] | None:
    """The resolved spec of ``text`` as if it were a file in ``folder`` (None on any error)."""
    fd, tmp = tempfile.mkstemp(prefix=".trainc-apply-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        loaded = load_spec(tmp)
        if loaded.spec is None:
            return None
        return spec_to_dict(normalize(loaded.spec))
    finally:
        os.unlink(tmp)


def _flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False)
    return text.split("\n...")[0].rstrip("\n")


class _Editor:
    """Text edits at PyYAML node marks, applied back to front."""

    def __init__(self, text: str):
        self.text = text if text.endswith("\n") or not text else text + "\n"
        root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        if not isinstance(root, yaml.MappingNode) or root.flow_style:
            raise ValueError("the spec is not a block mapping")
        self.root = root
        self.edits: list[tuple[int, int, str]] = []
        self.appended: dict[str, list[str]] = {}  # new top-level key -> its lines
        # an empty section (``parallel:`` with no value) -> the keys it receives, written as
        # one flow mapping (one edit per key would write ``{tp: 8} {pp: 2}``)
        self.filled: dict[int, tuple[yaml.Node, dict[str, Any]]] = {}

    @staticmethod
    def _get(node: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
        return next(
            ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key),
            None,
        )

    def _line_end(self, node: yaml.Node) -> int:
        """End of the line on which ``node``'s last scalar ends."""
        while (
            isinstance(node, (yaml.MappingNode, yaml.SequenceNode))
            and node.value
            and not node.flow_style
        ):
            last = node.value[-1]
            node = last[1] if isinstance(last, tuple) else last
        nl = self.text.find("\n", node.end_mark.index)
        return len(self.text) if nl < 0 else nl

    def _replace(self, value_node: yaml.Node, new: str) -> None:
        self.edits.append(self._replacement(value_node, new))

    @staticmethod
    def _replacement(value_node: yaml.Node, new: str) -> tuple[int, int, str]:
        start, end = value_node.start_mark.index, value_node.end_mark.index
        if start == end:  # an empty value (``key:``): the new one goes after the colon
            new = " " + new
        return start, end, new

    def _insert(self, mapping: yaml.MappingNode, key: str, new: str) -> None:
        if mapping.flow_style:
            close = mapping.end_mark.index - 1  # the closing brace
            self.edits.append(
                (close, close, f", {key}: {new}" if mapping.value else f"{key}: {new}")
            )
            return
        column = mapping.value[0][0].start_mark.column
        at = self._line_end(mapping)
        self.edits.append((at, at, "\n" + " " * column + f"{key}: {new}"))

    def set(self, dotted: str, value: Any, indent: int) -> None:
        """Set ``section.key`` (or a top-level ``key``) to ``value``."""
        parts = dotted.split(".")
        if len(parts) > 2:
            raise ValueError(f"{dotted}: nested deeper than a section")
        hit = self._get(self.root, parts[0])
        if len(parts) == 1:
            if hit:
                self._replace(hit[1], _flow(value))
            else:
                self.appended[parts[0]] = [f"{parts[0]}: {_flow(value)}"]
            return
        section, key = parts
        if hit is None:
            lines = self.appended.setdefault(section, [f"{section}:"])
            lines.append(f"{' ' * indent}{key}: {_flow(value)}")
            return
        node = hit[1]
        if not isinstance(node, yaml.MappingNode) or (not node.value and not node.flow_style):
            self.filled.setdefault(id(node), (node, {}))[1][key] = value
            return
        inner = self._get(node, key)
        if inner:
            self._replace(inner[1], _flow(value))
        else:
            self._insert(node, key, _flow(value))

    def set_group(self, group: str, option: str) -> None:
        """Choose ``option`` for ``group`` in the defaults list (appended when not named)."""
        hit = self._get(self.root, "defaults")
        entry = f"{{{group}: {_flow(option)}}}"
        if hit is None or not isinstance(hit[1], yaml.SequenceNode):
            self.edits.append((0, 0, f"defaults:\n- _self_\n- {group}: {_flow(option)}\n"))
            return
        seq = hit[1]
        for item in seq.value:
            if isinstance(item, yaml.MappingNode):
                chosen = self._get(item, group)
                if chosen:
                    self._replace(chosen[1], _flow(option))
                    return
        if seq.flow_style or not seq.value:
            close = seq.end_mark.index - 1  # the closing bracket
            self.edits.append((close, close, f", {entry}" if seq.value else entry))
            return
        last = seq.value[-1]
        line_start = self.text.rfind("\n", 0, last.start_mark.index) + 1
        dash = self.text.rfind("-", line_start, last.start_mark.index)
        at = self._line_end(seq)
        self.edits.append(
            (at, at, "\n" + " " * (dash - line_start) + "- " + f"{group}: {_flow(option)}")
        )

    def result(self) -> str:
        text = self.text
        edits = self.edits + [
            self._replacement(node, _flow(keys)) for node, keys in self.filled.values()
        ]
        for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            text = text[:start] + new + text[end:]
        return text + "".join(ln + "\n" for lines in self.appended.values() for ln in lines)


def _indent(text: str) -> int:
    """The file's mapping indentation: the smallest indentation of a nested key (default 2)."""
    cols = [
        len(ln) - len(ln.lstrip())
        for ln in text.splitlines()
        if ln[:1] == " " and ln.strip() and not ln.lstrip().startswith(("#", "-"))
    ]
    return min(cols) if cols else 2


def _set_keys(text: str, keys: list[str], target: dict[str, Any]) -> str:
    """``text`` with each of ``keys`` set to its ``target`` value (comments kept)."""
    if not keys:
        return text
    edit = _Editor(text)
    indent = _indent(text)
    for k in keys:
        edit.set(k, target[k], indent)
    return edit.result()


def applied_text(
    spec_path: str | os.PathLike[str],
    overrides: list[str] | tuple[str, ...],
    planned_spec: Any,
    out_path: str | os.PathLike[str],
    raw_spec: Any = None,
) -> Applied:
    """The text of OUT.yaml for the finalist whose validated spec is ``planned_spec``
    (see the module docstring). Raises OSError when the spec cannot be read or OUT's folder
    cannot hold the check's scratch file."""
    target = _leaves(spec_to_dict(planned_spec))
    text = Path(spec_path).read_text(encoding="utf-8")
    why = (
        "it is not a plain block mapping, or its defaults list names presets found only next to it"
    )
    folder = Path(out_path).resolve().parent
    try:
        groups = [o.split("=", 1) for o in overrides if o.split("=", 1)[0] in GROUPS]
        edit = _Editor(text)
        for group, option in groups:
            edit.set_group(group, option)
        text1 = edit.result()
        resolved = _resolve(text1, folder)
        if resolved is not None:
            have = _leaves(resolved)
            moved = [k for k, v in target.items() if have.get(k, object()) != v]
            # keys normalization fills from others (etp from tp, ...) are written only where
            # the written keys do not already lead to the planned value: an explicit etp on a
            # dense model breaks a later `parallel.tp=4` (TRC312)
            first = [k for k in moved if k not in FILLED_FROM]
            text2 = _set_keys(text1, first, target)
            again = _resolve(text2, folder)
            got = _leaves(again) if again is not None else None
            if got is not None and got != target:
                # a filled key can move although it was already right (etp 1 from tp 1,
                # then tp 8 fills etp 8): every filled key the edit moved off the plan's value
                rest = [
                    k
                    for k in target
                    if k in FILLED_FROM and k not in first and got.get(k, object()) != target[k]
                ]
                first += rest
                text2 = _set_keys(text1, first, target)
                again = _resolve(text2, folder)
                got = _leaves(again) if again is not None else None
            if got == target:
                # the keys written, not the derived ones that follow them (etp from tp)
                return Applied(text2, [f"{g}={o}" for g, o in groups] + first)
            if got is not None:
                off = sorted(
                    k
                    for k in set(target) | set(got)
                    if got.get(k, object()) != target.get(k, object())
                )
                why = (
                    "the edited file still resolves to another value of "
                    + ", ".join(off[:4])
                    + (" ..." if len(off) > 4 else "")
                )
    except (yaml.YAMLError, ValueError):
        pass  # not a plain block mapping (or a key nested deeper): the full spec below
    # the spec before normalization: values trainc derives (lr_decay_iters, etp, the overlap
    # switches, ...) stay null, so a later override of what they derive from still moves them
    full = yaml.safe_dump(
        spec_to_dict(raw_spec if raw_spec is not None else planned_spec), sort_keys=False
    )
    return Applied(
        f"# written by trainc plan from {spec_path}\n{full}",
        sorted(target),
        note=f"{spec_path} could not be edited in place so that it resolves to the "
        f"planned layout from {folder} ({why}); wrote the complete resolved spec "
        "instead",
    )


class ApplyRefused(ValueError):
    """``--apply SPEC`` cannot edit SPEC in place (a user-facing refusal, exit 2)."""


def write_applied(
    spec_path: str | os.PathLike[str],
    overrides: list[str] | tuple[str, ...],
    planned_spec: Any,
    out_path: str | os.PathLike[str],
    raw_spec: Any = None,
) -> Applied:
    """:func:`applied_text`, written to ``out_path`` atomically (a scratch file in its folder,
    renamed over it). Raises OSError when that fails."""
    applied = applied_text(spec_path, overrides, planned_spec, out_path, raw_spec)
    out = Path(out_path)
    if applied.note and out.resolve() == Path(spec_path).resolve():
        # the complete resolved spec in place of the user's own (comments, defaults list) is
        # not the in-place edit --apply SPEC promises: nothing is written
        why = applied.note.replace("; wrote the complete resolved spec instead", "")
        raise ApplyRefused(
            f"{why}; {spec_path} is left as it is: pass --apply NEW.yaml to "
            "write the complete resolved spec there"
        )
    fd, tmp = tempfile.mkstemp(prefix=".trainc-apply-", suffix=".yaml", dir=out.resolve().parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(applied.text)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return applied
