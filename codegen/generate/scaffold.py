"""`tilegen init [DIR]`: a starter project — tilegen.toml, one commented spec per operator (each family's
`starters`), a README stub and a .gitignore — that validates and generates at once. Every spec is
validated in memory and every destination checked before the first file is written, and the files are written
into a temporary folder and moved into place, so an init either creates the whole project or leaves nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from codegen.core.errors import TilegenError
from codegen.families import all_families
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs
from codegen.spec.project import CONFIG_FILE

CONFIG_TEXT = """\
# tilegen project: `tilegen` run in this folder (or below it) works on it. README.md says what is where.
specs = ["specs"]   # spec files or folders, relative to this file
"""

README_TEXT = """\
# {name}: tilegen kernels

- `specs/` — operator specs (YAML), one file per family here; every field is documented in tilegen's docs/:
  docs/spec-format.md and one page per family, docs/gemm.md, ... (installed under <prefix>/share/doc/tilegen/).
- `generated/` — TileLang modules written by `tilegen gen` (commit them; `tilegen gen --check` keeps them honest).
- `reports/` — build, verify and bench reports; `.cache/` — the build cache (not committed).

```
tilegen validate      # check every spec against every target's hardware rules
tilegen gen           # write generated/
tilegen build --all   # compile for gfx942 (ISA + resource report) and sm_90 (cubin)
tilegen run           # the main job: validate, gen, build, verify and bench where a GPU is present
```
"""

GITIGNORE_TEXT = """\
/.cache/
/build/
"""


def starter_files(name: str) -> dict[str, str]:
    """The starter project's files, relative path -> text."""
    return {
        CONFIG_FILE: CONFIG_TEXT,
        **{f"specs/{op}.yaml": text for fam in all_families() for op, text in fam.starters.items()},
        "README.md": README_TEXT.format(name=name),
        ".gitignore": GITIGNORE_TEXT,
    }


class InitError(TilegenError):
    """`tilegen init` could not create the project; nothing of it was left behind."""


def _refuse(path: Path, problem: str) -> InitError:
    return InitError(f"{_escaped(path.as_posix())}: {problem}; `tilegen init` writes a new project and overwrites "
                     "nothing [init]")


def _escaped(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


def _first_missing(dest: Path) -> tuple[Path, Path]:
    """(the nearest existing folder at or above `dest`, the first folder below it on the way to `dest` that does
    not exist -- `dest` itself when its parent exists; equal to the existing folder when `dest` exists)."""
    if dest.exists():
        if not dest.is_dir():
            raise _refuse(dest, "exists and is not a folder")
        return dest, dest
    missing = dest
    while not missing.parent.exists():
        missing = missing.parent
    if not missing.parent.is_dir():
        raise _refuse(missing.parent, "is not a folder")
    return missing.parent, missing


def init_project(dest: Path) -> list[Path]:
    """Write the starter project into `dest` (created if absent, parents too), all or nothing: every spec is
    validated and every destination checked first, the files are written into a temporary folder beside their
    destination, then moved into place -- by one rename where `dest` is new, else file by file, each move undone
    if a later one fails. Every refusal is one line naming the path [init]: a file of the project exists
    already (or a dangling symlink of its name), `dest` or `specs` is not a folder, a symlink leads out of the
    project, a folder cannot be written."""
    given, dest = dest, Path(os.path.abspath(dest))
    files = starter_files(dest.name or "project")
    for rel, text in files.items():
        if rel.startswith("specs/"):
            build_instances(parse_specs(text, rel))  # the starter specs must validate for every target
    base, missing = _first_missing(dest)
    if missing == base:  # dest exists: nothing of the project may be there yet
        for rel in sorted({r.partition("/")[0] for r in files} | set(files)):
            path = dest / rel
            if rel == "specs" and path.is_dir() and not path.is_symlink():
                continue
            if os.path.lexists(path):
                raise _refuse(path, "is a symlink" if path.is_symlink() else "already exists" if rel != "specs"
                              else "exists and is not a folder")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".tilegen-init.", dir=base))
    except OSError as exc:
        raise _refuse(base, f"cannot write here ({exc.strerror or exc})") from None
    try:
        inner = tmp / missing.relative_to(base) / dest.relative_to(missing) if missing != base else tmp
        for rel, text in files.items():
            path = inner / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if missing != base:  # a new folder: one rename puts the whole project in place
            os.rename(tmp / missing.relative_to(base), missing)
        else:
            _move_each(tmp, dest, sorted(files))
    except OSError as exc:
        raise _refuse(Path(exc.filename) if exc.filename else dest, f"cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [given / rel for rel in files]


def _move_each(tmp: Path, dest: Path, rels: list[str]) -> None:
    """Move the files `rels` from `tmp` into the existing folder `dest` (a missing `specs/` by one rename), undoing
    every move made when one fails. os.link refuses an existing file, so nothing is overwritten."""
    done: list[Path] = []  # what now exists in dest because of us, undone in reverse order on failure
    try:
        if not (dest / "specs").exists():
            os.rename(tmp / "specs", dest / "specs")
            done.append(dest / "specs")
        for rel in rels:
            src = tmp / rel
            if not src.exists():  # moved with specs/
                continue
            os.link(src, dest / rel)
            done.append(dest / rel)
    except BaseException:
        for path in reversed(done):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
