"""`tilegen new gemm NAME`: a commented starter spec, validated before it is written."""

from __future__ import annotations

from pathlib import Path

from codegen.errors import TilegenError
from codegen.families.gemm.spec import STARTER as GEMM_STARTER
from codegen.load import parse_specs
from codegen.spec import name_problem


def starter_spec(name: str, dest: Path | None, root: Path) -> Path:
    problem = name_problem(name)
    if problem:
        raise TilegenError(f"name={name!r}: {problem} [identifier]")
    path = dest if dest is not None else root / "specs" / f"{name}.yaml"
    if path.exists():
        raise TilegenError(f"{path}: already exists; not overwritten")
    text = GEMM_STARTER.format(name=name)
    parse_specs(text, str(path))  # the starter itself must validate
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
