"""Safe YAML loading that remembers where every value came from.

Values are built from yaml's node tree (never `yaml.load`), so each mapping key and value keeps its
line and column; duplicate keys, merge keys, non-string keys and tags other than the plain scalar,
list and mapping ones are errors. Plain scalars are typed by YAML 1.2's core schema, not PyYAML's
YAML 1.1 one: `yes`/`no`/`on`/`off` stay strings and `010` is not octal 8, so neither slips through
validation as a surprise bool or number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from codegen.errors import Location, SpecError

FieldPath = tuple[str | int, ...]


def format_path(path: FieldPath) -> str:
    """`("tiling", "threads")` -> `tiling.threads`; `("shapes", 0, "m")` -> `shapes[0].m`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _CoreSchemaLoader(yaml.SafeLoader):
    """SafeLoader whose plain scalars resolve by the YAML 1.2 core schema."""

    yaml_implicit_resolvers: ClassVar[dict] = {}  # filled below; PyYAML's YAML 1.1 ones are not inherited

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node).replace("_", "")
        return int(text, 0) if text.startswith(("0x", "0o")) else int(text, 10)  # "010" is 10, as in YAML 1.2


_CoreSchemaLoader.add_constructor("tag:yaml.org,2002:int", _CoreSchemaLoader.construct_yaml_int)


for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),  # recognised only to be refused with a clear message
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+.0123456789")),
):
    _CoreSchemaLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)

_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str", "seq", "map")
)


@dataclass(frozen=True)
class SourceDoc:
    """A parsed YAML file: the plain value plus a map from field path to its location."""

    file: str
    value: Any
    value_marks: dict[FieldPath, Location] = field(repr=False)
    key_marks: dict[FieldPath, Location] = field(repr=False)

    def locate(self, path: FieldPath, *, key: bool = False) -> Location:
        """The location of `path`, or of its nearest ancestor that has one."""
        p = tuple(path)
        while True:
            if key and p in self.key_marks:
                return self.key_marks[p]
            if p in self.value_marks:
                return self.value_marks[p]
            if not p:
                return Location(file=self.file, line=1, col=1)
            p = p[:-1]


def _loc(file: str, node: yaml.Node) -> Location:
    return Location(file=file, line=node.start_mark.line + 1, col=node.start_mark.column + 1)


class _Builder:
    def __init__(self, file: str):
        self.file = file
        self.value_marks: dict[FieldPath, Location] = {}
        self.key_marks: dict[FieldPath, Location] = {}
        self._scalars = _CoreSchemaLoader("")  # only its scalar constructors are used

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        self.value_marks[path] = _loc(self.file, node)
        if node.tag not in _PLAIN_TAGS:
            raise SpecError(_loc(self.file, node), f"{_where(path)}YAML tag '{node.tag}' is not supported", "yaml")
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise SpecError(_loc(self.file, key_node), f"{_where(path)}YAML merge keys ('<<') are not supported",
                                    "yaml")
                key = self.build(key_node, path + ("<key>",))
                if not isinstance(key, str):
                    raise SpecError(_loc(self.file, key_node), f"{_where(path)}key {key!r} must be a string", "yaml")
                if key in out:
                    first = self.key_marks[path + (key,)]
                    raise SpecError(
                        _loc(self.file, key_node),
                        f"{_where(path + (key,))}duplicate key (first at line {first.line}, column {first.col})",
                        "duplicate_key",
                    )
                self.key_marks[path + (key,)] = _loc(self.file, key_node)
                out[key] = self.build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        try:
            return self._scalars.construct_object(node)
        except (yaml.YAMLError, ValueError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(_loc(self.file, node), f"{_where(path)}cannot read {node.value!r}: {problem}", "yaml") from None


def _where(path: FieldPath) -> str:
    """The field path inside one spec entry, as a message prefix (a list file's entry index is dropped:
    the line number already says which entry)."""
    inner = path[1:] if path and isinstance(path[0], int) else path
    inner = tuple(p for p in inner if p != "<key>")
    return f"{format_path(inner)}: " if inner else ""


def load_yaml(text: str, file: str) -> SourceDoc:
    """Parse `text` (named `file` in messages). Raises SpecError on syntax errors and duplicate keys."""
    try:
        node = yaml.compose(text, Loader=_CoreSchemaLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file=file, line=mark.line + 1, col=mark.column + 1) if mark else Location(file=file, line=1, col=1)
        message = f"YAML syntax error: {exc.problem or exc.context}"
        ctx = exc.context_mark
        if exc.problem and exc.context and ctx and (ctx.line, ctx.column) != (mark.line, mark.column):
            message += f" ({exc.context} started at line {ctx.line + 1}, column {ctx.column + 1})"
        raise SpecError(where, message, "yaml") from None
    except yaml.YAMLError as exc:
        raise SpecError(Location(file=file, line=1, col=1), f"YAML error: {exc}", "yaml") from None
    if node is None:
        raise SpecError(Location(file=file, line=1, col=1), "spec file is empty", "empty_file")
    builder = _Builder(file)
    value = builder.build(node, ())
    return SourceDoc(file=file, value=value, value_marks=builder.value_marks, key_marks=builder.key_marks)
