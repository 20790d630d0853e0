"""`tilegen init [DIR]`: a starter project — tilegen.toml, one commented spec per operator family, a
README stub and a .gitignore — that validates and generates at once. Every spec is validated in memory
and every destination checked before the first file is written, so a refused init writes nothing."""

from __future__ import annotations

from pathlib import Path

from codegen.errors import TilegenError
from codegen.instance import build_instances
from codegen.load import parse_specs
from codegen.project import CONFIG_FILE
from codegen.starter import GEMM_STARTER

CONFIG_TEXT = """\
# tilegen project: `tilegen` run in this folder (or below it) works on it. README.md says what is where.
specs = ["specs"]   # spec files or folders, relative to this file
"""

SOFTMAX_STARTER = """\
# softmax over the last dim of X[rows, cols], fp32 statistics; one workgroup per row.
- name: softmax_fp16
  op: softmax
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  variant: two_pass         # two_pass (any row length) | online (row held in registers, one read)
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 128              # a multiple of 64 on gfx942, of 32 on sm_90
  vector: 8                 # elements per thread per load (8 x fp16 = one 16-byte load)
  tail: none                # none | predicated | specialized (cols not a multiple of threads x vector)
  targets: [gfx942, sm_90]
"""

RMSNORM_STARTER = """\
# rmsnorm: Y = X / sqrt(mean(X^2) + eps) * W over the last dim, fp32 statistics.
- name: rmsnorm_fp16
  op: rmsnorm
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-6
  variant: streamed         # streamed (any row length) | registers (row read once into registers)
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""

LAYERNORM_STARTER = """\
# layernorm: Y = (X - mean) / sqrt(var + eps) * W + B over the last dim (biased variance), fp32 statistics.
- name: layernorm_fp16
  op: layernorm
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-5
  variant: registers
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""

ATTENTION_STARTER = """\
# Attention forward (FlashAttention style): Q, O [batch, seq_q, heads, head_dim], K, V [batch, seq_kv,
# kv_heads, head_dim]; online softmax over KV blocks; causal masks aligned top-left.
- name: attn_fp16_d128
  op: attention
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  shapes:
    - {batch: 1, heads: 32, kv_heads: 8, seq_q: 2048, seq_kv: 2048}
  head_dim: 128
  causal: true
  tiling: {block_m: 128, block_n: 128, threads: 256}
  pipeline: {stages: 2}
  tail: none
  targets: [gfx942, sm_90]
  overrides:
    gfx942:                 # 64 KiB of LDS: Q 128x128 plus one 128x32 K/V buffer
      tiling: {block_m: 128, block_n: 32, threads: 256}
      pipeline: {stages: 1}
"""

README_TEXT = """\
# {name}: tilegen kernels

- `specs/` — operator specs (YAML), one file per family here; every field is documented in tilegen's README.
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
        "specs/gemm.yaml": GEMM_STARTER.format(name="gemm_fp16_nt"),
        "specs/softmax.yaml": SOFTMAX_STARTER,
        "specs/rmsnorm.yaml": RMSNORM_STARTER,
        "specs/layernorm.yaml": LAYERNORM_STARTER,
        "specs/attention.yaml": ATTENTION_STARTER,
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
