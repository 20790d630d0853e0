"""TileLang lowering of the generated kernels to device source, and what that source must show.

One session fixture lowers every committed instance (first shape of each spec) plus a few probe
instances, once (in parallel worker processes where there are cores to spare); the tests then only
read the lowered text. Lowering needs TileLang but no GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from codegen.generate.instance import build_instances
from codegen.generate.lower import LoweredKernel
from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile, render_all
from codegen.spec.load import parse_specs
from codegen.targets import TARGETS

# the session's lowered first shapes are made once: the module's tests in one xdist worker
pytestmark = pytest.mark.xdist_group("lowering")

pytest.importorskip("tilelang")

# The same tiling single-, double- and triple-buffered on gfx942.
STAGE_PROBES = "".join(
    f"""\
- name: lds_stages_{s}
  op: gemm
  dtypes: {{a: fp16, b: fp16, out: fp16}}
  layout: nt
  shapes: [{{m: 256, n: 256, k: 256}}]
  tiling: {{block_m: 128, block_n: 128, block_k: 32, threads: 256}}
  pipeline: {{stages: {s}}}
  targets: [gfx942]
"""
    for s in (1, 2, 3)
)
TILE_BYTES = 128 * 32 * 2  # one fp16 128x32 tile of A (and of B)

COMMITTED = [f for f in Project().rendered() if f.instance.op == "gemm"]  # row families: tests/test_softmax.py
PROBES = render_all(build_instances(parse_specs(STAGE_PROBES, "tests/stage_probes.yaml")))


@pytest.fixture(scope="session")
def lowered(lower_once) -> dict[str, LoweredKernel]:
    """URI -> the lowered first shape of every committed and probe instance (a committed one's first shape
    is test_kernels' too: the run lowers it once, tests/conftest.py)."""
    kernels = [lower_once(f, f.instance.shapes[0], f.instance.target) for f in COMMITTED + PROBES]
    return {k.uri: k for k in kernels}


def by_name(name: str, target: str) -> RenderedFile:
    [f] = [f for f in COMMITTED + PROBES if f.instance.name == name and f.instance.target.value == target]
    return f


# ---- a little structure over the C++ text ------------------------------------------------------


@dataclass(frozen=True)
class Block:
    header: str  # the text before `{`: "for (int k = 0; k < 30; ++k)", "if (...)", "else", ...
    body: str
    start: int  # offset of the body in the text it was found in


def blocks(text: str) -> list[Block]:
    """Every `{...}` block of `text` (nested ones too), with its header; preprocessor lines are dropped."""
    out, stack, stmt_start, parens = [], [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            parens += 1
        elif ch == ")":
            parens -= 1
        elif ch == ";" and parens == 0:  # the `;`s inside `for (...)` do not end a statement
            stmt_start = i + 1
        elif ch == "{":
            lines = text[stmt_start:i].strip().splitlines()
            stack.append((" ".join(ln.strip() for ln in lines if not ln.lstrip().startswith("#")), i + 1))
            stmt_start = i + 1
        elif ch == "}":
            header, start = stack.pop()
            out.append(Block(header=header, body=text[start:i], start=start))
            stmt_start = i + 1
    assert not stack and parens == 0, "unbalanced source"
    return out


def kernels(source: str) -> list[Block]:
    """The `__global__` function definitions, in source order (declarations are skipped)."""
    return [b for b in blocks(source) if "__global__" in b.header]


def enclosing(fn: Block, pos: int) -> list[str]:
    """Headers of the blocks of `fn` that contain offset `pos` of its body, outermost first."""
    inner = [b for b in blocks(fn.body) if b.start <= pos <= b.start + len(b.body)]
    return [b.header for b in sorted(inner, key=lambda b: b.start)]


MMA = re.compile(r"__builtin_amdgcn_mfma|wgmma|mma_sync|tl::mma")
K_LOOP = re.compile(r"for \(int (k(?:_\d+)?) = 0; \1 < (\d+); \+\+\1\)")


def main_k_loop(fn: Block) -> tuple[int, str]:
    """(trip count, body) of the K loop that issues the MMAs: the interior of the GEMM."""
    loops = [(int(m[2]), b.body) for b in blocks(fn.body) if (m := K_LOOP.fullmatch(b.header)) and MMA.search(b.body)]
    assert len(loops) == 1, [b.header for b in blocks(fn.body) if K_LOOP.fullmatch(b.header)]
    return loops[0]


C_STORE = re.compile(r"\*\(\w+\*\)\(C \+")
CHECKED = re.compile(r"_conditional<|\bif \(|\?")  # a predicated copy, a branch or a select


def c_store_guards(fn: Block) -> list[str]:
    """The `if` conditions around the kernel's stores to C (in a GEMM epilogue, only bounds checks)."""
    stores = [m.start() for m in C_STORE.finditer(fn.body)]
    assert stores, "no store to C found"
    return [h for pos in stores for h in enclosing(fn, pos) if h.startswith("if")]


def test_block_parser_on_a_known_snippet():
    src = 'extern "C" __global__ void f(int* C) {\n  for (int k = 0; k < 3; ++k) {\n    x = wgmma();\n  }\n' \
          '  if (blockIdx.x < 2) {\n    *(int*)(C + 0) = 1;\n  }\n}\n'
    [fn] = kernels(src)
    assert main_k_loop(fn) == (3, "\n    x = wgmma();\n  ")
    assert c_store_guards(fn) == ["if (blockIdx.x < 2)"]


# ---- every committed instance lowers ------------------------------------------------------------


@pytest.mark.parametrize("f", COMMITTED, ids=[f.uri for f in COMMITTED])
def test_committed_instance_lowers(f: RenderedFile, lowered):
    src = lowered[f.uri].source
    assert kernels(src), "no __global__ function"
    assert re.search(rf"\b{f.uri}_kernel\(", kernels(src)[0].header)  # the URI is the kernel symbol
    amd = TARGETS[f.instance.target].source_suffix == ".hip"  # gfx942, gfx950
    mma = f.instance.uses_matrix_cores()  # not gemv, nor true fp32 on sm_90 (CUDA-core FMA)
    if amd:
        assert ("__builtin_amdgcn_mfma" in src) == mma
        assert "hip_runtime.h" in src
    else:
        assert "__global__" in src and ("wgmma" in src or "mma_sync" in src) == mma
        assert "hip" not in src and "__builtin_amdgcn" not in src
    assert lowered[f.uri].relpath.suffix == (".hip" if amd else ".cu")
    # every shared buffer starts inside the budget the lds_budget rule computed (gemv: none, its lanes load
    # into registers; the AMD cross-lane sum's workspace is TileLang's own, counted in lds_bytes)
    offsets = [int(off) for _, off in SHARED.findall(src)]
    if f.instance.structure in ("gemv", "gemv_n"):
        assert not offsets
    else:
        assert offsets and max(offsets) < f.instance.lds_bytes


# ---- pipelining: stages N really means N LDS buffers ------------------------------------------


SHARED = re.compile(r"void\* (\w+) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ (\d+)\)\);")


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_stages_allocate_that_many_lds_buffers(stages: int, lowered):
    f = by_name(f"lds_stages_{stages}", "gfx942")
    src = lowered[f.uri].source
    offsets = {name: int(off) for name, off in SHARED.findall(src)}
    assert set(offsets) == {"A_shared", "B_shared"}
    # A and B are laid out back to back: the gap is A's size, which is one tile per stage
    assert abs(offsets["B_shared"] - offsets["A_shared"]) == stages * TILE_BYTES
    assert 2 * stages * TILE_BYTES == f.instance.lds_bytes
    _, loop = main_k_loop(kernels(src)[0])
    rotating = re.findall(r"\(\(k \+ \d\) % 3\)|\(\(k \+ 1\) & 1\)|\(k & 1\)|\(k % 3\)", loop)
    if stages == 1:
        assert "T.Pipelined" not in f.text and "for k in T.serial(k_tiles)" in f.text
        assert not rotating  # negative control: one buffer, nothing to rotate through
        assert "cp_async_wait<1>" not in loop
    else:
        assert f"stage=[0, 0, {stages - 1}]" in f.text
        assert rotating  # the loop picks a buffer by k
        assert f"cp_async_wait<{stages - 1}>" in loop  # and keeps stages-1 tiles of loads in flight


# ---- tail policies -----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_specialized_interior_kernel_is_unchecked_predicated_is_checked(target: str, lowered):
    spec_f, pred_f = by_name("gemm_fp16_ragged_spec", target), by_name("gemm_fp16_ragged_pred", target)
    m, n, k = spec_f.instance.shapes[0]
    bm, bn, bk = spec_f.instance.block_m, spec_f.instance.block_n, spec_f.instance.block_k
    assert (pred_f.instance.block_m, pred_f.instance.block_n, pred_f.instance.block_k) == (bm, bn, bk)
    assert m % bm and n % bn and k % bk, "the probe shape must be ragged in every dimension"

    spec_kernels = kernels(lowered[spec_f.uri].source)
    pred_kernels = kernels(lowered[pred_f.uri].source)
    assert len(pred_kernels) == 1
    assert len(spec_kernels) == 3  # interior, bottom edge, right edge
    interior = spec_kernels[0]

    # the interior K loop runs over whole tiles only: one fewer than the predicated one (K % BLOCK_K != 0)
    spec_trip, spec_loop = main_k_loop(interior)
    pred_trip, pred_loop = main_k_loop(pred_kernels[0])
    assert spec_trip == pred_trip - 1

    # no bounds check in the interior's main K loop: no predicated copy, no branch, no select
    assert not CHECKED.search(spec_loop), spec_loop
    # control: the same detector finds the checks in the edge kernels' K loops of the very same source
    assert all(CHECKED.search(main_k_loop(fn)[1]) for fn in spec_kernels[1:])
    if target == "gfx942":
        # explicit loads: unconditional in the interior, predicated in the single predicated kernel
        assert "cp_async_gs<" in spec_loop
        assert "cp_async_gs_conditional<" in pred_loop
    else:
        # TMA loads clip at the tensor edge in hardware, so the predicated K loop has no check of its own
        assert "tma_load" in lowered[spec_f.uri].source
        assert not CHECKED.search(pred_loop)

    # the epilogue: the interior stores C unguarded; the predicated kernel and the edge kernels guard it
    assert c_store_guards(interior) == []
    assert c_store_guards(pred_kernels[0])
    assert all(c_store_guards(fn) for fn in spec_kernels[1:])


# ---- k_pack is a knob of the AMD targets' gemm ---------------------------------------------------

# what `k_pack=2` of fp16/bf16 lowers to: two MFMAs along K per step on gfx942; on gfx950 TileLang 0.1.15
# remaps it to one MFMA of twice the K (16x16x32), so there is no kp loop
K_PACK_EVIDENCE = {"gfx942": r"for \(int kp = 0; kp < 2; \+\+kp\)", "gfx950": r"__builtin_amdgcn_mfma_f32_16x16x32_(f16|bf16)"}


def test_k_pack_appears_only_for_the_amd_targets(lowered):
    packed = {f.instance.name for f in COMMITTED if f.instance.k_pack == 2}
    assert packed, "some committed spec should use k_pack: 2"
    for f in COMMITTED:
        src = lowered[f.uri].source
        if not TARGETS[f.instance.target].supports_k_pack:
            assert f.instance.k_pack is None
            assert "k_pack" not in f.text.replace("'k_pack': None", "")
            assert "rocm_gemm" not in f.text
            assert "for (int kp" not in src
        elif f.instance.name in packed:
            assert "k_pack=2" in f.text
            assert re.search(K_PACK_EVIDENCE[f.instance.target.value], src)
        else:
            assert "k_pack=" not in f.text
            assert "for (int kp" not in src
    # a spec that asks for k_pack: 2 and also targets sm_90 gets none there
    assert {f.instance.name for f in COMMITTED if f.instance.target.value == "sm_90"} >= packed
