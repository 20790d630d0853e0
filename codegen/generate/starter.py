"""`tilegen new gemm NAME`: a commented starter spec, validated before it is written, and never
one that would break the project's spec set (a name already used, a file that exists)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from codegen.core.errors import Location, SpecError, TilegenError
from codegen.core.files import write_text_atomic
from codegen.core.yamlsrc import load_yaml, read_spec_text
from codegen.families.gemm.spec import STARTER as GEMM_STARTER
from codegen.families.spec import name_problem
from codegen.spec.load import SPEC_SUFFIXES, display_path, find_spec_files, parse_specs

if TYPE_CHECKING:
    from codegen.generate.pipeline import Project


def _name_used(name: str, spec_paths: list[Path], root: Path) -> Location | None:
    """Where a spec of the set under `spec_paths` is named `name`, or None. Read leniently: a file
    with other errors still counts (its names are taken from the YAML as written), one that cannot be
    read or parsed at all is passed over (`tilegen validate` reports it)."""
    for f in find_spec_files([p for p in spec_paths if p.exists()], root):
        try:
            shown = display_path(f, root)
            doc = load_yaml(read_spec_text(f, shown), shown)
        except (SpecError, OSError, UnicodeDecodeError):
            continue
        entries = list(enumerate(doc.value)) if isinstance(doc.value, list) else [(None, doc.value)]
        for i, entry in entries:
            if isinstance(entry, dict) and entry.get("name") == name:
                return doc.locate(((i,) if i is not None else ()) + ("name",))
    return None


def starter_spec(name: str, dest: Path | None, project: Project) -> Path:
    """Write the starter spec named `name` to `dest` (default: NAME.yaml in the project's first spec
    folder) and return its path. Refused, writing nothing, when the name is not an identifier, a spec
    of the project already has it, or the file exists."""
    problem = name_problem(name)
    if problem:
        raise TilegenError(f"name={name!r}: {problem} [identifier]")
    spec_paths = project.spec_paths(None)
    folders = [p for p in spec_paths if p.suffix not in SPEC_SUFFIXES]
    path = dest if dest is not None else (folders[0] if folders else project.root / "specs") / f"{name}.yaml"
    if path.exists():
        raise TilegenError(f"{path}: already exists; not overwritten")
    used = _name_used(name, spec_paths, project.root)
    if used is not None:
        raise TilegenError(f"name={name!r}: already used by the spec at {used}; pick another name [duplicate_name]")
    text = GEMM_STARTER.format(name=name)
    parse_specs(text, str(path))  # the starter itself must validate
    write_text_atomic(path, text)
    return path
