"""The committed kernels as the tests pick them: a seed's own (hand) configuration, apart from the tuned winners
that `tuned/` adds under the same spec name (a tune must not change which kernel a test of the seed reads)."""

from __future__ import annotations

from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile


def hand_files(project: Project | None = None) -> list[RenderedFile]:
    return [f for f in (project or Project()).rendered() if f.is_hand]
