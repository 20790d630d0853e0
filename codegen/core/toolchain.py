"""What every target's toolchain discovery shares: the installed TileLang (whose headers generated
source includes), running a compiler for its version, and the error for a missing tool. Each target's
own compiler (where it is, its version, its exact flags) lives in its module, `codegen/targets/<target>.py`.

Nothing here imports tilelang: a build's cache key is made of toolchain fingerprints and must be
computable in milliseconds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
from dataclasses import dataclass
from pathlib import Path

from codegen.core.errors import TilegenError


class ToolchainMissing(TilegenError):
    """A compiler, header or library a target needs is absent; the message says how to get it."""


def run_version(cmd: list[str]) -> str:
    """stdout of a `--version`-style command, or ToolchainMissing when it cannot run."""
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainMissing(f"`{' '.join(cmd)}` failed: {exc}") from None
    return proc.stdout


@dataclass(frozen=True, kw_only=True)
class TileLangInstall:
    """Where the installed tilelang package keeps the headers its generated source includes."""

    version: str
    package_dir: Path

    @property
    def template_dir(self) -> Path:  # holds tl_templates/{hip,cuda}
        return self.package_dir / "src"

    @property
    def cutlass_include_dir(self) -> Path:
        return self.package_dir / "3rdparty" / "cutlass" / "include"


def find_tilelang() -> TileLangInstall:
    spec = importlib.util.find_spec("tilelang")  # locates without importing (importing takes ~2 s)
    if spec is None or spec.origin is None:
        raise ToolchainMissing("tilelang is not installed: `pip install tilelang==0.1.15` (or `pip install -e .`)")
    return TileLangInstall(version=importlib.metadata.version("tilelang"), package_dir=Path(spec.origin).parent)
