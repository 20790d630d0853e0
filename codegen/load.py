"""Spec files -> validated specs, with every error located at file:line:col."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from codegen.errors import SpecError, SpecErrors
from codegen.spec import SPEC_MODELS, OpSpec
from codegen.yamlsrc import FieldPath, SourceDoc, load_yaml

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class LoadedSpec:
    spec: OpSpec
    doc: SourceDoc
    base: FieldPath  # path of this entry inside its file ((i,) for a list, () for a single mapping)
    file_sha256: str

    def locate(self, path: FieldPath, *, key: bool = False):
        return self.doc.locate(self.base + tuple(path), key=key)


def format_path(path: FieldPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _value_at(value, path: FieldPath):
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _short(value) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _pydantic_errors(exc: ValidationError, entry, doc: SourceDoc, base: FieldPath) -> list[SpecError]:
    errors = []
    for err in exc.errors(include_url=False):
        path = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or "function-" in p)))
        where = format_path(path) or "<entry>"
        if err["type"] == "extra_forbidden":
            errors.append(SpecError(doc.locate(base + path, key=True), f"{where}: unknown key", "unknown_key"))
            continue
        if err["type"] == "missing":
            errors.append(SpecError(doc.locate(base + path[:-1]), f"{where}: required field is missing", "missing"))
            continue
        value = _value_at(entry, path)
        shown = f"{where}={_short(value)}" if value is not None and not isinstance(value, (dict, list)) else where
        msg = err["msg"].removeprefix("Value error, ")
        errors.append(SpecError(doc.locate(base + path), f"{shown}: {msg}", err["type"]))
    # one error per location is enough (pydantic may report each union member)
    seen, unique = set(), []
    for e in errors:
        if str(e) not in seen:
            seen.add(str(e))
            unique.append(e)
    return unique


def parse_specs(text: str, file: str) -> list[LoadedSpec]:
    """Validate every entry of one spec file's text. Raises SpecErrors listing all problems."""
    doc = load_yaml(text, file)
    sha = hashlib.sha256(text.encode()).hexdigest()
    if isinstance(doc.value, list):
        entries = [((i,), item) for i, item in enumerate(doc.value)]
        if not entries:
            raise SpecErrors([SpecError(doc.locate(()), "spec file holds an empty list", "empty_file")])
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
        op = entry.get("op")
        if op not in SPEC_MODELS:
            where = doc.locate(base + ("op",)) if "op" in entry else doc.locate(base)
            known = ", ".join(sorted(SPEC_MODELS))
            errors.append(SpecError(where, f"op={_short(op)}: unknown operator (known: {known})", "op"))
            continue
        try:
            spec = SPEC_MODELS[op].model_validate(entry)
        except ValidationError as exc:
            errors.extend(_pydantic_errors(exc, entry, doc, base))
            continue
        loaded.append(LoadedSpec(spec=spec, doc=doc, base=base, file_sha256=sha))
    if errors:
        raise SpecErrors(errors)
    return loaded


def find_spec_files(paths: list[Path]) -> list[Path]:
    """Spec files under `paths` (files or folders), sorted, so output order never depends on the OS."""
    files: set[Path] = set()
    for p in paths:
        if p.is_dir():
            files.update(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES and f.is_file())
        elif p.is_file():
            files.add(p)
        else:
            raise SpecErrors([SpecError(str(p), "no such spec file or folder", "io")])
    return sorted(files)


def display_path(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def load_spec_files(paths: list[Path], root: Path) -> list[LoadedSpec]:
    """Load and field-validate every spec file; collect errors from all files before raising."""
    loaded, errors = [], []
    files = find_spec_files(paths)
    if not files:
        raise SpecErrors([SpecError(", ".join(str(p) for p in paths), "no spec files (*.yaml) found", "io")])
    for f in files:
        shown = display_path(f, root)
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(SpecError(shown, f"cannot read spec file: {exc}", "io"))
            continue
        try:
            loaded.extend(parse_specs(text, shown))
        except SpecErrors as exc:
            errors.extend(exc.errors)
        except SpecError as exc:
            errors.append(exc)
    if errors:
        raise SpecErrors(errors)
    return loaded
