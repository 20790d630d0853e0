"""Which project tilegen works on: the nearest folder holding `tilegen.toml` (or a `pyproject.toml`
with a `[tool.tilegen]` table), searched upwards from the current directory; else the current
directory. `--project DIR` names it outright. Specs, generated/, reports/ and the build cache all live
in that project; nothing of it is looked up beside the installed package.

`tilegen.toml` (all keys optional):

    specs = ["specs"]   # spec files or folders, relative to the project root

Every path it names is checked here, once: relative, inside the project, printable.
"""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from codegen.errors import TilegenError

CONFIG_FILE = "tilegen.toml"
PYPROJECT_FILE = "pyproject.toml"


class ProjectError(TilegenError):
    """A project folder or its configuration is unusable."""


def _inside_project(value: str) -> str:
    """A path written in the config: relative, no '..', printable ASCII (it becomes a path and appears in
    generated headers and reports)."""
    if not value or not all(" " <= ch <= "~" for ch in value) or "\\" in value:
        raise ValueError("must be a non-empty path of printable ASCII characters")
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError("must be a path inside the project (relative, no '..')")
    return path.as_posix()


ProjectPath = Annotated[str, AfterValidator(_inside_project)]


class ProjectConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    specs: Annotated[list[ProjectPath], Field(min_length=1, max_length=64)] = ["specs"]


def _tool_table(pyproject: Path) -> dict | None:
    """`[tool.tilegen]` of a pyproject.toml, or None when it has none (or cannot be read as TOML)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    table = data.get("tool", {}).get("tilegen") if isinstance(data.get("tool"), dict) else None
    return table if isinstance(table, dict) else None


def find_project_root(start: Path) -> Path:
    """The nearest folder at or above `start` that holds tilegen.toml or a pyproject.toml with
    [tool.tilegen]; `start` itself when none does."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
        pyproject = folder / PYPROJECT_FILE
        if pyproject.is_file() and _tool_table(pyproject) is not None:
            return folder
    return start


def read_config(root: Path) -> ProjectConfig:
    """The project's configuration (defaults when it has no config file). Errors name the file and key."""
    toml = root / CONFIG_FILE
    if toml.is_file():
        shown = CONFIG_FILE
        try:
            data = tomllib.loads(toml.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ProjectError(f"{shown}: cannot read: {exc} [config]") from None
        except tomllib.TOMLDecodeError as exc:
            raise ProjectError(f"{shown}: {exc} [config]") from None
    else:
        shown = f"{PYPROJECT_FILE} [tool.tilegen]"
        data = _tool_table(root / PYPROJECT_FILE) or {}
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "<table>"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        raise ProjectError(f"{shown}: {where}: {message} [config]") from None


def resolve_root(project: Path | None, cwd: Path | None = None) -> Path:
    """The project root for `--project DIR` (must exist) or, without it, found from `cwd`."""
    if project is not None:
        if not project.is_dir():
            raise ProjectError(f"{project}: no such project folder")
        return project.resolve()
    return find_project_root(cwd or Path.cwd())
