"""`tilegen new gemm NAME`: a commented starter spec, validated before it is written."""

from __future__ import annotations

from pathlib import Path

from codegen.errors import TilegenError
from codegen.load import parse_specs
from codegen.spec import name_problem

GEMM_STARTER = """\
# tilegen GEMM spec: C[M, N] = op(A) @ op(B). Every field is documented in README.md ("Spec reference").
- name: {name}              # lower-case identifier: file, kernel and report name
  op: gemm
  dtypes: {{a: fp16, b: fp16, out: fp16, accumulate: fp32}}   # fp16 | bf16 | fp32 | fp8_e4m3 (a == b)
  layout: nt                # nn | nt | tn | tt (first letter A, second B; t = stored transposed; nt = nn.Linear)
  shapes:                   # concrete problem sizes; ragged sizes need a tail policy
    - {{m: 4096, n: 4096, k: 4096}}
  tiling:
    block_m: 128            # multiples of the MMA tile (gfx942 fp16: 16x16x16)
    block_n: 128
    block_k: 32
    threads: 256            # multiple of 64 on gfx942 (wavefront), of 32 on sm_90 (warp)
    policy: square          # square | full_row | full_col: how waves split the block
  pipeline:
    stages: 2               # 0/1: one LDS buffer; 2+: double/triple-buffered (explicit order/stage on gfx942)
  unroll: 1                 # K-loop unroll factor (only with stages <= 1)
  swizzle_panel: 0          # 0 = off; else a power of two: block rasterization panel for L2 reuse
  k_pack: 1                 # gfx942 only: 1 or 2 MFMA ops packed along K
  tail: none                # none | predicated | specialized
  targets: [gfx942, sm_90]
  # overrides:              # per-target replacements of tiling / pipeline / unroll / swizzle_panel / k_pack
  #   sm_90:
  #     tiling: {{block_m: 128, block_n: 256, block_k: 64, threads: 256}}
  #     pipeline: {{stages: 3}}
"""


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
