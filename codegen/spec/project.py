"""Which project tilegen works on: the nearest folder holding `tilegen.toml` (or a `pyproject.toml`
with a `[tool.tilegen]` table), searched upwards from the current directory; else the current
directory. `--project DIR` names it outright. Specs, generated/, reports/ and the build cache all live
in that project; nothing of it is looked up beside the installed package.

`tilegen.toml` (all keys optional):

    specs = ["specs"]   # spec files or folders, relative to the project root

Every path it names is checked here, once: relative, inside the project, printable. Both files are read
with a size cap and their nesting depth counted before tomllib (which recurses once per level) parses them
(`TOML_LIMITS`). Every path tilegen reads or writes on its own (the config's spec paths and what is found under
them, generated/, reports/, tuned/, the build cache) is resolved -- symlinks followed -- and must stay inside the
project (`confined`).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from codegen.core.errors import TilegenError

CONFIG_FILE = "tilegen.toml"
PYPROJECT_FILE = "pyproject.toml"


class ProjectError(TilegenError):
    """A project folder or its configuration is unusable: one line, ending in the rule."""

    def __init__(self, message: str, rule: str | None = None):
        self.rule = rule
        super().__init__(f"{message} [{rule}]" if rule else message)


@dataclass(frozen=True, kw_only=True)
class TomlLimits:
    """What tilegen.toml and pyproject.toml may cost before tomllib parses them; past a limit, one line [config]."""

    max_config_bytes: int = 64 * 1024  # tilegen.toml: one `specs` list of at most 64 paths needs a few KB
    max_pyproject_bytes: int = 1024 * 1024  # a pyproject.toml holds other tools' tables too
    max_depth: int = 16  # nested arrays / inline tables ([tool.tilegen] needs 1)
    # parts of one dotted key or table name (`tool.tilegen` has 2): tomllib's time grows with the square of a
    # key's parts (8,000 parts: a second), so a 1 MiB file of one dotted key would take an hour
    max_key_parts: int = 16


TOML_LIMITS = TomlLimits()

# TOML's tokens as far as nesting goes: strings and comments (skipped whole: a bracket or a dot in them is text),
# dotted keys (bare or quoted parts joined by dots), bare words, and the brackets. Possessive quantifiers and
# the bare word as a token of its own keep the scan linear in the text.
_QUOTED = r'"(?:[^"\\\n]|\\.)*+"|\'[^\'\n]*+\''
_PART = rf"(?:[A-Za-z0-9_-]++|{_QUOTED})"
_TOML_TOKENS = re.compile(rf'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|(?P<dotted>{_PART}(?:[ \t]*+\.[ \t]*+{_PART})++)|{_QUOTED}'
                          rf"|[A-Za-z0-9_-]++|#[^\n]*+|(?P<open>[\[{{])|(?P<close>[\]}}])")
_TOML_PART = re.compile(_PART)


def _check_toml_nesting(text: str, shown: str) -> None:
    """Refuse nesting past TOML_LIMITS -- brackets deeper than max_depth, a dotted key of more than max_key_parts
    parts -- counted on the text in one linear pass, before tomllib recurses or walks the key."""
    def refuse(at: int, problem: str) -> ProjectError:
        line = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        return ProjectError(f"{shown}:{line}:{col}: {problem}", "config_limit")

    depth = 0
    for m in _TOML_TOKENS.finditer(text):
        if m.group("open"):
            depth += 1
            if depth > TOML_LIMITS.max_depth:
                raise refuse(m.start(), f"nests deeper than {TOML_LIMITS.max_depth} arrays or inline tables")
        elif m.group("close"):
            depth = max(depth - 1, 0)
        elif m.group("dotted") and len(_TOML_PART.findall(m.group())) > TOML_LIMITS.max_key_parts:
            raise refuse(m.start(), f"a dotted key or table name of more than {TOML_LIMITS.max_key_parts} parts")


def read_toml(path: Path, shown: str, max_bytes: int) -> dict:
    """A TOML file as tomllib reads it, refused in one line when it is not a regular file, is over `max_bytes`
    (at most one byte more is read) or nests past TOML_LIMITS (_check_toml_nesting: 100,000 brackets are refused
    instead of overflowing tomllib's recursion)."""
    try:
        if not path.is_file():
            raise ProjectError(f"{shown}: not a regular file", "config")
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise ProjectError(f"{shown}: cannot read: {exc.strerror or exc}", "config") from None
    if len(data) > max_bytes:
        raise ProjectError(f"{shown}: over the {max_bytes}-byte limit (read no further)", "config_limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProjectError(f"{shown}: not UTF-8 text (byte {exc.start})", "config") from None
    _check_toml_nesting(text, shown)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectError(f"{shown}: {' '.join(str(exc).split())}", "config") from None
    except RecursionError:  # not reached within max_depth; kept so no input can end in a traceback
        raise ProjectError(f"{shown}: nests too deeply for the TOML parser", "config_limit") from None


def outside_project(root: Path, path: Path) -> Path | None:
    """Where `path` really is (every symlink resolved; it need not exist yet) when that is outside the project
    `root`, else None."""
    real = Path(os.path.realpath(path))
    return None if real.is_relative_to(os.path.realpath(root)) else real


def outside_message(root: Path, real: Path) -> str:
    return (f"resolves to {_escaped(real.as_posix())}, outside the project {_escaped(os.path.realpath(root))} "
            "(a symlink pointing out of it?): tilegen reads and writes only inside the project")


def confined(root: Path, path: Path, shown: str | None = None) -> Path:
    """`path`, refused unless it stays inside the project `root` once every symlink is resolved
    [outside_project]: a symlink in the project must not make tilegen read or write elsewhere."""
    real = outside_project(root, path)
    if real is not None:
        raise ProjectError(f"{shown or _relative(path, root)}: {outside_message(root, real)}", "outside_project")
    return path


def _relative(path: Path, root: Path) -> str:
    try:
        return _escaped(path.relative_to(root).as_posix())
    except ValueError:
        return _escaped(path.as_posix())


def _escaped(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


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
    """`[tool.tilegen]` of a pyproject.toml, or None when it has none or is not TOML. One over TOML_LIMITS is
    refused (ProjectError), not skipped: it may hold the table."""
    try:
        data = read_toml(pyproject, pyproject.as_posix(), TOML_LIMITS.max_pyproject_bytes)
    except ProjectError as exc:
        if exc.rule == "config_limit":
            raise
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
    if os.path.lexists(toml):
        shown = CONFIG_FILE
        confined(root, toml, shown)
        data = read_toml(toml, shown, TOML_LIMITS.max_config_bytes)
    else:
        shown = f"{PYPROJECT_FILE} [tool.tilegen]"
        data = _tool_table(root / PYPROJECT_FILE) or {}
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = _escaped(".".join(str(p) for p in first["loc"])) or "<table>"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        raise ProjectError(f"{shown}: {where}: {message}", "config") from None


def resolve_root(project: Path | None, cwd: Path | None = None) -> Path:
    """The project root for `--project DIR` (must exist) or, without it, found from `cwd`."""
    if project is not None:
        if not project.is_dir():
            raise ProjectError(f"{_escaped(project.as_posix())}: no such project folder", "project")
        return project.resolve()
    return find_project_root(cwd or Path.cwd())
