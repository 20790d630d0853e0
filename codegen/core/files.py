"""Writing files so that a reader never sees half of one: temp file in the same folder, then rename.

A writer killed between the two (SIGKILL, power loss) leaves its temp file `.<name>.<random>.tmp`
behind; `leftover_temp_files` finds them so the folder's owner can report and remove them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, with the permissions an ordinary file gets (umask applied)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def leftover_temp_files(folder: Path) -> list[Path]:
    """The temp files write_text_atomic left in `folder` (none while no write is under way), sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX)
                  and p.is_file())


_SCALAR = r'(?:-?\d+|"[^"\\\n]*")'  # an integer, or a string without escapes (a symbolic size or extent)
_SCALAR_LIST_RE = re.compile(rf"\[\n\s*({_SCALAR}(?:,\n\s*{_SCALAR})*)\n\s*\]")


def _one_line(m: re.Match) -> str:
    items = [x.strip() for x in m.group(1).split(",\n")]
    return "[" + ", ".join(items) + "]" if any(not x.startswith('"') for x in items) else m.group(0)


def dump_json(doc: object) -> str:
    """Indented JSON, one value per line (a review diff shows each number that changed), with
    short lists of integers (shapes, grids; a dynamic-M kernel's `"m"` or grid expression among them) kept
    on one line; lists of strings alone (warnings) stay one a line."""
    text = json.dumps(doc, indent=2)
    return _SCALAR_LIST_RE.sub(_one_line, text) + "\n"
