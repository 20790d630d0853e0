"""`tilegen init [DIR]`: a starter project — tilegen.toml, one commented spec per operator (each family's
`starters`), a README stub and a .gitignore — that validates and generates at once. Every spec is
validated in memory and every destination checked before the first file is written, so a refused init
writes nothing."""

from __future__ import annotations

from pathlib import Path

from codegen.errors import TilegenError
from codegen.families import all_families
from codegen.instance import build_instances
from codegen.load import parse_specs
from codegen.project import CONFIG_FILE

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


def init_project(dest: Path) -> list[Path]:
    """Write the starter project into `dest` (created if absent). Refuses, writing nothing, when any of its
    files exists already."""
    files = starter_files(dest.resolve().name or "project")
    for rel, text in files.items():
        if rel.startswith("specs/"):
            build_instances(parse_specs(text, rel))  # the starter specs must validate for every target
    clash = [rel for rel in files if (dest / rel).exists()]
    if clash:
        raise TilegenError(f"{dest / clash[0]}: already exists; `tilegen init` writes a new project and overwrites "
                           f"nothing")
    written = []
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
