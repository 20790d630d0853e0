"""The committed kernels as the tests pick them: a seed's own (hand) configuration, apart from the tuned winners
that `tuned/` adds under the same spec name (a tune must not change which kernel a test of the seed reads)."""

from __future__ import annotations

from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile


def is_hand(f: RenderedFile) -> bool:
    """Whether some spec asks for this kernel as its hand configuration (not only a lockfile's winner)."""
    return any(not ref.tuned_on for ref in f.specs)


def hand_files(project: Project | None = None) -> list[RenderedFile]:
    return [f for f in (project or Project()).rendered() if is_hand(f)]
