"""Safe YAML loading that remembers where every value came from.

Values are built from yaml's node tree (never `yaml.load`), so each mapping key and value keeps its
line and column; duplicate keys, merge keys and non-string keys are errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from codegen.errors import Location, SpecError

FieldPath = tuple[str | int, ...]


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
        self._scalars = yaml.SafeLoader("")  # only its scalar constructors are used

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        self.value_marks[path] = _loc(self.file, node)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise SpecError(_loc(self.file, key_node), "YAML merge keys ('<<') are not supported", "yaml")
                key = self.build(key_node, path + ("<key>",))
                if not isinstance(key, str):
                    raise SpecError(_loc(self.file, key_node), f"key {key!r} must be a string", "yaml")
                if key in out:
                    first = self.key_marks[path + (key,)]
                    raise SpecError(
                        _loc(self.file, key_node),
                        f"duplicate key '{key}' (first at line {first.line})",
                        "duplicate_key",
                    )
                self.key_marks[path + (key,)] = _loc(self.file, key_node)
                out[key] = self.build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalars.construct_object(node)


def load_yaml(text: str, file: str) -> SourceDoc:
    """Parse `text` (named `file` in messages). Raises SpecError on syntax errors and duplicate keys."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file=file, line=mark.line + 1, col=mark.column + 1) if mark else Location(file=file, line=1, col=1)
        raise SpecError(where, f"YAML syntax error: {exc.problem or exc.context}", "yaml") from None
    except yaml.YAMLError as exc:
        raise SpecError(Location(file=file, line=1, col=1), f"YAML error: {exc}", "yaml") from None
    if node is None:
        raise SpecError(Location(file=file, line=1, col=1), "spec file is empty", "empty_file")
    builder = _Builder(file)
    value = builder.build(node, ())
    return SourceDoc(file=file, value=value, value_marks=builder.value_marks, key_marks=builder.key_marks)


def read_yaml(path: Path, display: str) -> SourceDoc:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(display, f"cannot read spec file: {exc}", "io") from None
    return load_yaml(text, display)
