"""Spec files -> validated specs, with every error located at file:line:col."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import get_args, get_origin

from pydantic import BaseModel, ValidationError

from codegen.core.errors import SpecError, SpecErrors
from codegen.core.yamlsrc import FieldPath, SourceDoc, format_path, load_yaml, read_spec_text
from codegen.families import ops as known_ops
from codegen.families import spec_model
from codegen.families.spec import MAX_INSTANCES
from codegen.spec.project import outside_message, outside_project

__all__ = ["LoadedSpec", "format_path", "load_spec_files", "parse_specs"]

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class LoadedSpec:
    spec: BaseModel  # the model its family registered for its `op:`
    doc: SourceDoc
    base: FieldPath  # path of this entry inside its file ((i,) for a list, () for a single mapping)

    def locate(self, path: FieldPath, *, key: bool = False):
        return self.doc.locate(self.base + tuple(path), key=key)


_ABSENT = object()


def _value_at(value, path: FieldPath):
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return _ABSENT
    return value


def _short(value) -> str:
    """A scalar as the user would write it in YAML (strings quoted, so '256' reads as text)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _model_at(annotation, path: FieldPath):
    """The pydantic model that holds the keys at `path` below `annotation`, or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not path:
            return annotation
        field = annotation.model_fields.get(path[0]) if isinstance(path[0], str) else None
        return _model_at(field.annotation, path[1:]) if field is not None else None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (list, dict):  # the next path part is an index or a key, not a field
        return _model_at(args[-1], path[1:]) if path else None
    for arg in args:  # Annotated, Optional, unions
        found = _model_at(arg, path)
        if found is not None:
            return found
    return None


def _unknown_key(model: type[BaseModel], path: FieldPath) -> str:
    holder = _model_at(model, path[:-1])
    if holder is None or not path:
        return "unknown key"
    close = difflib.get_close_matches(str(path[-1]), list(holder.model_fields), n=1)
    return f"unknown key (did you mean '{close[0]}'?)" if close else "unknown key"


# pydantic messages that talk Python rather than YAML
_MESSAGES = {
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
}


def _user_path(loc: tuple, entry, *, missing: bool) -> FieldPath:
    """The path in the user's entry that a pydantic error location names. A location also holds pydantic's own
    tags (a union member such as `list[int]`, a validator such as `function-after[...]`, `[key]`); a part is kept
    only where it is a key of the mapping (or an index of the list) at that point of the entry, so a key spelt
    like a tag (`a[0]`, an ANSI escape) is still the user's key and a tag is never taken for one. A missing
    field's name is not in the entry: it is the location's last part."""
    path: list[str | int] = []
    value = entry
    for part in loc:
        key = isinstance(value, dict) and isinstance(part, str) and part in value
        index = isinstance(value, list) and type(part) is int and 0 <= part < len(value)
        if key or index:
            path.append(part)
            value = value[part]
    if missing and loc and isinstance(loc[-1], str) and (not path or path[-1] != loc[-1]):
        path.append(loc[-1])
    return tuple(path)


def _pydantic_errors(exc: ValidationError, model: type[BaseModel], entry, doc: SourceDoc,
                     base: FieldPath) -> list[SpecError]:
    errors = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        path = _user_path(loc, entry, missing=err["type"] == "missing")
        is_key = "[key]" in loc and "[key]" not in path  # a dict key (an override's target name) failed, not its value
        where = format_path(path) or "<entry>"
        if err["type"] == "extra_forbidden":
            errors.append(SpecError(doc.locate(base + path, key=True), f"{where}: {_unknown_key(model, path)}",
                                    "unknown_key"))
            continue
        if err["type"] == "missing":
            hint = ""
            if len(path) >= 4 and path[0] == "overrides":  # overrides.<target>.<field>.<key>: a partial mapping
                hint = f" (an override replaces the whole `{path[2]}`: give every key of it)"
            errors.append(SpecError(doc.locate(base + path[:-1]), f"{where}: required field is missing{hint}",
                                    "missing"))
            continue
        value = (path[-1] if path else _ABSENT) if is_key else _value_at(entry, path)
        shown = where if value is _ABSENT or isinstance(value, (dict, list)) or is_key else f"{where}={_short(value)}"
        msg = _MESSAGES.get(err["type"], err["msg"].removeprefix("Value error, "))
        errors.append(SpecError(doc.locate(base + path, key=is_key), f"{shown}: {msg}", err["type"]))
    # one error per location and value is enough: pydantic reports each union member's (`split_kv: 0` fails both
    # the integer's bound and the 'auto' literal); the first member's is kept
    seen, unique = set(), []
    for e in errors:
        key = (str(e.location), str(e).removeprefix(f"{e.location}: ").split(": ", 1)[0])  # where, "path=value"
        if key not in seen:
            seen.add(key)
            unique.append(e)
    return unique


def parse_specs(text: str, file: str) -> list[LoadedSpec]:
    """Validate every entry of one spec file's text. Raises SpecErrors listing all problems."""
    doc = load_yaml(text, file)
    if isinstance(doc.value, list):
        entries = [((i,), item) for i, item in enumerate(doc.value)]
        if not entries:
            raise SpecErrors([SpecError(doc.locate(()), "spec file holds an empty list", "empty_file")])
        if len(entries) > MAX_INSTANCES:  # every entry is at least one kernel instance: refuse before validating any
            raise SpecErrors([SpecError(doc.locate((MAX_INSTANCES,)),
                                        f"[{MAX_INSTANCES}]: more than {MAX_INSTANCES} spec entries in one file "
                                        f"(a spec set may have at most {MAX_INSTANCES} kernel instances)",
                                        "instance_limit")])
    elif isinstance(doc.value, dict):
        entries = [((), doc.value)]
    else:
        raise SpecErrors(
            [SpecError(doc.locate(()), "a spec file holds a mapping or a list of mappings", "top_level")]
        )
    loaded, errors = [], []
    for base, entry in entries:
        if not isinstance(entry, dict):
            errors.append(SpecError(doc.locate(base), f"{format_path(base) or 'entry'}: must be a mapping", "entry_type"))
            continue
        known = ", ".join(known_ops())
        if "op" not in entry:
            errors.append(SpecError(doc.locate(base), f"op: required field is missing (one of: {known})", "missing"))
            continue
        op = entry["op"]
        if not isinstance(op, str) or op not in known_ops():  # a list or mapping is not hashable
            errors.append(SpecError(doc.locate(base + ("op",)), f"op={_short(op)}: unknown operator (known: {known})", "op"))
            continue
        model = spec_model(op)
        try:
            spec = model.model_validate(entry)
        except ValidationError as exc:
            errors.extend(_pydantic_errors(exc, model, entry, doc, base))
            continue
        loaded.append(LoadedSpec(spec=spec, doc=doc, base=base))
    if errors:
        raise SpecErrors(errors)
    return loaded


def find_spec_files(paths: list[Path], root: Path | None = None) -> list[Path]:
    """Spec files under `paths` (files or folders), sorted, so output order never depends on the OS. With the
    project `root`: a path inside the project, and every file found under it, must resolve inside it
    [outside_project] (a path named outside the project on the command line is the user's own choice)."""
    files: set[Path] = set()
    for p in paths:
        inside = root is not None and _named_inside(p, root)
        if inside and (real := outside_project(root, p)) is not None:
            raise SpecErrors([SpecError(_escaped(p.as_posix()), outside_message(root, real), "outside_project")])
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES and f.is_file())
            for f in found if inside else ():
                if (real := outside_project(root, f)) is not None:
                    raise SpecErrors([SpecError(_escaped(os.path.relpath(f, root)), outside_message(root, real),
                                                "outside_project")])
            files.update(found)
        elif p.is_file():
            files.add(p)
        else:
            what = "not a regular file or folder" if os.path.lexists(p) else "no such spec file or folder"
            raise SpecErrors([SpecError(_escaped(p.as_posix()), what, "io")])
    return sorted(files)


def _escaped(text: str) -> str:
    """`text` on one line of printable ASCII: a newline, a control or a non-ASCII character as its escape."""
    return text.encode("unicode_escape").decode("ascii")


def _named_inside(path: Path, root: Path) -> bool:
    """`path` is written as a path inside the project (before any symlink is followed)."""
    named = Path(os.path.abspath(path))
    return named.is_relative_to(os.path.abspath(root)) or named.is_relative_to(os.path.realpath(root))


def display_path(path: Path, root: Path) -> str:
    """How a spec file is named in messages, generated headers and reports: relative to the project
    root when inside it. A name holding a control or other non-printable character, a quote or a
    backslash is refused [file_name]: it would be written into generated code and one-line messages."""
    try:
        shown = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    bad = next((ch for ch in shown if not ch.isprintable() or ch in "'\"`\\"), None)
    if bad is not None:
        raise SpecError(_escaped(shown), f"spec file name holds {bad!r} (no control or non-printable character, "
                                         "quote or backslash may appear in one): rename the file", "file_name")
    return shown


def load_spec_files(paths: list[Path], root: Path) -> list[LoadedSpec]:
    """Load and field-validate every spec file; collect errors from all files before raising."""
    loaded, errors = [], []
    files = find_spec_files(paths, root)
    if not files:
        raise SpecErrors([SpecError(", ".join(str(p) for p in paths), "no spec files (*.yaml) found", "io")])
    for f in files:
        shown = display_path(f, root)
        try:
            loaded.extend(parse_specs(read_spec_text(f, shown), shown))
        except SpecErrors as exc:
            errors.extend(exc.errors)
        except SpecError as exc:
            errors.append(exc)
    if errors:
        raise SpecErrors(errors)
    _check_instance_count(loaded)
    return loaded


def _check_instance_count(loaded: list[LoadedSpec]) -> None:
    """Refuse a spec set of more than MAX_INSTANCES kernel instances (one per spec entry and target), at
    the entry that crosses the line, before any rule or template runs on it."""
    count = 0
    for ls in loaded:
        count += len(set(ls.spec.targets))
        if count > MAX_INSTANCES:
            raise SpecErrors([SpecError(ls.locate(("name",)),
                                        f"name='{ls.spec.name}': the spec set has more than {MAX_INSTANCES} kernel "
                                        "instances (spec entries x targets) up to here", "instance_limit")])
