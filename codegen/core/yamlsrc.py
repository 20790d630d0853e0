"""Safe YAML loading that remembers where every value came from.

Values are built from yaml's node tree (never `yaml.load`), so each mapping key and value keeps its
line and column; duplicate keys, merge keys, non-string keys and tags other than the plain scalar,
list and mapping ones are errors. Plain scalars are typed by YAML 1.2's core schema, not PyYAML's
YAML 1.1 one: `yes`/`no`/`on`/`off` stay strings and `010` is not octal 8, so neither slips through
validation as a surprise bool or number.

Hostile input is refused before it costs anything (`LIMITS`): the file's size before it is parsed,
then the nesting depth, alias uses and node count after alias expansion, counted event by event as
the parser streams (PyYAML's parser is an iterative state machine; its composer and our builder recurse,
so they only ever see a document whose depth is already known to be bounded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from codegen.core.errors import Location, SpecError

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True, kw_only=True)
class YamlLimits:
    """What one spec file may cost; over a limit is a one-line error [yaml_limit]. The seeds in specs/ are
    at most 3.2 KB and 500 nodes; a spec with 256 flow-style shapes is about 1,900 nodes. PyYAML's pure-Python
    scanner and composer take ~1 s for 20,000 nodes of spec text or 1 MiB of blank lines, so these keep a file
    just inside every limit to about a second; one over a limit is refused in well under that (docs/limits.md)."""

    max_bytes: int = 256 * 1024  # checked before the text is read in full or parsed
    max_depth: int = 32  # nested lists/mappings, aliases expanded (a spec needs 4)
    max_aliases: int = 100  # uses of `*name`
    max_nodes: int = 20_000  # scalars, lists and mappings after alias expansion


LIMITS = YamlLimits()


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
MAX_KEY_SHOWN = 60  # a longer key is shown cut, with its length


def format_path(path: FieldPath) -> str:
    """`("tiling", "threads")` -> `tiling.threads`; `("shapes", 0, "m")` -> `shapes[0].m`. A key that is not a
    plain name (a bracket, a dot, a space, a control character: `a[0]`, an ANSI escape) is shown quoted and
    escaped, so it reads as one key on one line: `['a[0]']`, `['\\x1b[31m']`; a very long one is cut."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part) and len(part) <= MAX_KEY_SHOWN:
            out += f".{part}" if out else part
        else:
            shown = part if len(part) <= MAX_KEY_SHOWN else f"{part[:MAX_KEY_SHOWN]}... ({len(part)} characters)"
            out += f"[{shown!a}]"
    return out


class _CoreSchemaLoader(yaml.SafeLoader):
    """SafeLoader whose plain scalars resolve by the YAML 1.2 core schema."""

    yaml_implicit_resolvers: ClassVar[dict] = {}  # filled below; PyYAML's YAML 1.1 ones are not inherited

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node)
        return int(text, 0) if text.startswith(("0x", "0o")) else int(text, 10)  # "010" is 10, as in YAML 1.2


_CoreSchemaLoader.add_constructor("tag:yaml.org,2002:int", _CoreSchemaLoader.construct_yaml_int)


for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),  # recognised only to be refused with a clear message
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    # YAML 1.2's core schema: no digit separators (`1_000` is YAML 1.1's, a string here)
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$", list("-+0123456789")),
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


def _loc(file: str, node: yaml.Node | yaml.Event) -> Location:
    return Location(file=file, line=node.start_mark.line + 1, col=node.start_mark.column + 1)


@dataclass
class _Open:
    """A list or mapping whose end event has not come yet."""

    anchor: str | None
    nodes_before: int  # the document's node count before this collection
    level: int  # 1 for the root collection
    deepest: int  # the deepest level seen inside it, aliases expanded


class _Budget:
    """Checks `LIMITS` on a stream of parser events, one event at a time and before the composer sees it.

    An alias counts as the nodes and levels of the node it names, so a "billion laughs" file is refused
    after a few hundred events instead of being expanded."""

    def __init__(self, file: str):
        self.file = file
        self.nodes = 0
        self.aliases = 0
        self.open: list[_Open] = []
        self.anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, levels) of the node it names

    def _refuse(self, event: yaml.Event, message: str, rule: str = "yaml_limit") -> SpecError:
        return SpecError(_loc(self.file, event), message, rule)

    def _add(self, event: yaml.Event, nodes: int, levels: int, what: str) -> None:
        self.nodes += nodes
        depth = len(self.open) + levels
        if depth > LIMITS.max_depth:
            raise self._refuse(event, f"{what} nests deeper than {LIMITS.max_depth} levels")
        if self.nodes > LIMITS.max_nodes:
            raise self._refuse(event, f"{what} takes the document past {LIMITS.max_nodes} nodes")
        if self.open:
            self.open[-1].deepest = max(self.open[-1].deepest, depth)

    def see(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            what = f"alias *{event.anchor}"
            if self.aliases > LIMITS.max_aliases:
                raise self._refuse(event, f"{what}: more than {LIMITS.max_aliases} aliases")
            if any(o.anchor == event.anchor for o in self.open):
                raise self._refuse(event, f"{what} refers to a node that contains it", "yaml")
            nodes, levels = self.anchors.get(event.anchor, (1, 0))  # undefined: the composer says so
            self._add(event, nodes, levels, what)
        elif isinstance(event, yaml.ScalarEvent):
            self._add(event, 1, 0, "this value")
            if event.anchor is not None:
                self.anchors[event.anchor] = (1, 0)
        elif isinstance(event, yaml.CollectionStartEvent):
            self._add(event, 1, 1, "this list" if isinstance(event, yaml.SequenceStartEvent) else "this mapping")
            level = len(self.open) + 1
            self.open.append(_Open(anchor=event.anchor, nodes_before=self.nodes - 1, level=level, deepest=level))
        elif isinstance(event, yaml.CollectionEndEvent) and self.open:
            done = self.open.pop()
            if self.open:
                self.open[-1].deepest = max(self.open[-1].deepest, done.deepest)
            if done.anchor is not None:
                self.anchors[done.anchor] = (self.nodes - done.nodes_before, done.deepest - done.level + 1)


class _BoundedLoader(_CoreSchemaLoader):
    """The composer pulls every event through `get_event`: each is checked before it is composed."""

    def __init__(self, stream: str, budget: _Budget):
        super().__init__(stream)
        self._budget = budget

    def get_event(self) -> yaml.Event:
        event = super().get_event()
        self._budget.see(event)
        return event


def _prescan(text: str, file: str) -> None:
    """Refuse an over-limit document fast: libyaml's parser streams events ~20x faster than PyYAML's, and
    nothing is composed. Only a speed-up: the composer checks the same limits on PyYAML's own events, so a
    document libyaml cannot parse is left to PyYAML, whose message the user then sees."""
    if not yaml.__with_libyaml__:
        return
    budget = _Budget(file)
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            budget.see(event)
    except (yaml.YAMLError, ValueError):  # ValueError: libyaml takes only text that encodes as UTF-8
        return


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


def _too_big(file: str) -> SpecError:
    return SpecError(Location(file=file, line=1, col=1), f"spec file is over the {LIMITS.max_bytes}-byte limit",
                     "yaml_limit")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _compose(text: str, file: str) -> yaml.Node | None:
    _prescan(text, file)
    loader = _BoundedLoader(text, _Budget(file))
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def load_yaml(text: str, file: str) -> SourceDoc:
    """Parse `text` (named `file` in messages). Raises SpecError on syntax errors, duplicate keys and
    documents over `LIMITS`."""
    if len(text) > LIMITS.max_bytes or len(text.encode("utf-8", "surrogatepass")) > LIMITS.max_bytes:
        raise _too_big(file)
    try:
        node = _compose(text, file)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow; it has a position, not a mark
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise SpecError(Location(file=file, line=line, col=col),
                        f"YAML syntax error: character U+{ord(exc.character) if isinstance(exc.character, str) else exc.character:04X} is not allowed", "yaml") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file=file, line=mark.line + 1, col=mark.column + 1) if mark else Location(file=file, line=1, col=1)
        message = f"YAML syntax error: {exc.problem or exc.context}"
        ctx = exc.context_mark
        if exc.problem and exc.context and ctx and (ctx.line, ctx.column) != (mark.line, mark.column):
            message += f" ({exc.context} started at line {ctx.line + 1}, column {ctx.column + 1})"
        raise SpecError(where, _one_line(message), "yaml") from None
    except yaml.YAMLError as exc:
        raise SpecError(Location(file=file, line=1, col=1), f"YAML error: {_one_line(exc)}", "yaml") from None
    if node is None:
        raise SpecError(Location(file=file, line=1, col=1), "spec file is empty", "empty_file")
    builder = _Builder(file)
    value = builder.build(node, ())
    return SourceDoc(file=file, value=value, value_marks=builder.value_marks, key_marks=builder.key_marks)


def read_spec_text(path: Path, display: str) -> str:
    """The text of a spec file, refused unread past `LIMITS.max_bytes` (at most one byte more is read, so a
    huge file or an endless device costs nothing)."""
    try:
        with path.open("rb") as f:
            data = f.read(LIMITS.max_bytes + 1)
    except OSError as exc:
        raise SpecError(display, f"cannot read spec file: {exc}", "io") from None
    if len(data) > LIMITS.max_bytes:
        raise _too_big(display)
    try:  # newlines as `Path.read_text` gives them (universal newlines), so the file's sha256 is unchanged
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise SpecError(display, f"cannot read spec file: {exc}", "io") from None

