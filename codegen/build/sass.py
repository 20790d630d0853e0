"""`tilegen sass NAME|--all`: the selected sm_90 kernels built (cached), and each cubin's SASS read by the
sm_90 target's analysis (codegen.targets.sm90_sass) into one report document."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codegen.build.compile import BuildOptions, build
from codegen.core.errors import TilegenError
from codegen.targets.base import load_widths
from codegen.targets.sm90 import HW, find_nvcc  # the sm_90 target's cubins are read: its record names the target
from codegen.targets.sm90_sass import SassKernel, cuobjdump_sass, find_cuobjdump, parse_sass, sass_vector_warnings


@dataclass(frozen=True, kw_only=True)
class SassBuild:
    uri: str
    shape: tuple[int, ...]
    kernels: tuple[tuple[SassKernel, tuple[str, ...]], ...]  # each kernel with its [vector_loads] warnings

    def to_json(self) -> dict[str, object]:
        return {"uri": self.uri, "shape": list(self.shape),
                "kernels": [k.to_json() | {"warnings": list(w)} for k, w in self.kernels]}


def run_sass(project, names: list[str], all_: bool, *, cache_dir: Path | None = None, jobs: int | None = None,
             cuobjdump: str | None = None) -> tuple[dict[str, object], list[SassBuild]]:
    """Build the selected sm_90 kernels (cached) and read each cubin's SASS; the report document (toolchain,
    cuobjdump, one entry per kernel and shape, no paths or times: the same wherever it is written with the
    same nvcc) and the builds."""
    opts = BuildOptions(names=tuple(names), all_=all_, targets=(HW.target,), jobs=jobs, cache_dir=cache_dir)
    files = {f.uri: f for f in project.select(list(names), all_=all_, targets=[HW.target])}
    if not files:
        raise TilegenError("no sm_90 kernel selected")
    nvcc = find_nvcc()
    tool = cuobjdump or find_cuobjdump(str(nvcc) if nvcc else None)  # before building: a missing tool costs nothing
    report = build(project, opts)
    if report.failed:
        raise TilegenError(f"{len(report.failed)} sm_90 build(s) failed: {report.failed[0].uri}: {report.failed[0].error}")
    builds = []
    for r in report.results:
        entry = Path(r.entry) if Path(r.entry).is_absolute() else project.root / r.entry
        inst = files[r.uri].instance
        kernels = parse_sass(cuobjdump_sass(tool, entry / "kernel.cubin"))
        widths = load_widths(inst, [k.symbol for k in kernels])
        rows = tuple((k, tuple(sass_vector_warnings(k, widths[k.symbol]))) for k in kernels)
        builds.append(SassBuild(uri=r.uri, shape=tuple(r.shape), kernels=rows))
    builds.sort(key=lambda b: (b.uri, b.shape))
    doc = {"target": HW.target.value, "source": "sass (cuobjdump -sass of the built cubins)",
           "toolchain": report.toolchains.get(HW.target, {}),
           "builds": [b.to_json() for b in builds]}
    return doc, builds
