"""GEMM structure gemv (the small-M path): its rules with the user's coordinates, what its kernels are made of
(16-byte loads of B and A, a cross-lane sum, no matrix cores), and its derived shapes. Lowered here; run on
the GPU by tests/test_kernels.py."""

from __future__ import annotations

import re

import pytest
from spectext import FILE, edit, errors

from codegen.core.hardware import Target
from codegen.families.gemm.numerics import gemm_derived_shapes
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

BASE = """\
- name: gv
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 4, n: 4096, k: 4096}
  structure: gemv
  tiling: {block_m: 16, block_n: 8, block_k: 256, threads: 256}
  tail: none
  targets: [gfx942, sm_90]
"""


MATRIX_CORES = re.compile(r"tl::mma_sync|tl::wgmma|__builtin_amdgcn_mfma")


def files(text: str = BASE):
    return render_all(build_instances(parse_specs(text, FILE)))


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("layout: nt", "layout: nn",
     ("specs/x.yaml:4:11: layout=nn: structure gemv streams B's rows along K: use layout nt (A: M x K, B: N x K) "
     "[gemv_shape]")),
    ("{m: 4, n: 4096, k: 4096}", "{m: 17, n: 4096, k: 4096}",
     "specs/x.yaml:6:7: shapes[0]: m=17 is over tiling.block_m=16, the rows one gemv workgroup serves [gemv_shape]"),
    ("{m: 4, n: 4096, k: 4096}", "{m: 4, n: 4096, k: 4100}",
     "specs/x.yaml:6:7: shapes[0]: k=4100 is not a multiple of 8: gemv loads K in 16-byte vectors [gemv_shape]"),
    ("threads: 256}", "threads: 128}",
     ("specs/x.yaml:8:60: tiling.threads=128: must be block_n * block_k / 8 = 256: one lane per vector of a K step, "
     "for each of the block's columns [gemv_shape]")),
    ("block_k: 256", "block_k: 192",
     ("specs/x.yaml:8:46: tiling.block_k=192: must be 8 (one 16-byte vector) times a power of two up to 32 (the "
     "lanes of one warp that sum a column) [gemv_shape]")),
    ("block_m: 16", "block_m: 32",
     ("specs/x.yaml:8:21: tiling.block_m=32: structure gemv keeps every row of A in registers: at most 16 rows "
     "[gemv_shape]")),
    ("dtypes: {a: fp16, b: fp16, out: fp16}", "dtypes: {a: fp32, b: fp32, out: fp32}\n  precision: 3xtf32",
     ("specs/x.yaml:8:14: structure=gemv: not with precision tf32 / 3xtf32 (staged) (not supported): gemv's lanes "
      "multiply in true fp32 (no tensor cores to round for): use precision ieee [unsupported_combination]")),
    ("{m: 4, n: 4096, k: 4096}", "{m: 4, n: 4100, k: 4096}",
     ("specs/x.yaml:6:7: shapes[0]: n=4100 is not a multiple of block_n=8: set tail: predicated or specialized "
     "[tail_policy]")),
])
def test_gemv_rules(old, new, expected):
    found = errors(edit(BASE, old, new))
    assert expected in found, found


def test_m_below_the_block_needs_no_tail_policy_and_ignored_tunables_are_one_kernel():
    (a, b) = files()  # m = 4 < block_m = 16 is no ragged edge: gemv serves every m up to block_m
    staged = files(edit(BASE, "  tail: none\n", "  tail: none\n  pipeline: {stages: 4}\n  swizzle_panel: 8\n"))
    assert [f.uri for f in staged] == [a.uri, b.uri]  # stages and swizzling do not apply to gemv
    assert a.uri.startswith("gemv_fp16_nt_16x8x256_t256_")


@pytest.mark.parametrize("target", [Target.SM_90, Target.GFX942])
def test_gemv_kernel_streams_b_in_16_byte_vectors_and_sums_across_lanes(target):
    f = next(f for f in files() if f.instance.target == target)
    src = lower(f, f.instance.shapes[0], target).source
    assert src.count("*(uint4*)(b_vec") == 1 and src.count("*(uint4*)(a_vec") == 1  # 16-byte loads of B and A
    if target == Target.SM_90:
        assert "__shfl_down_sync" in src
    assert not MATRIX_CORES.search(src)
    # the tiled structure of the same problem uses the matrix cores: the negative control of the check above
    text = edit(edit(edit(BASE, "structure: gemv", "structure: tiled"), "tail: none", "tail: predicated"),
                "block_n: 8, block_k: 256, threads: 256", "block_n: 32, block_k: 128, threads: 128")
    tiled = next(t for t in files(text) if t.instance.target == target)
    assert MATRIX_CORES.search(lower(tiled, (4, 4096, 4096), target).source)


@pytest.mark.parametrize("tail", ["none", "predicated"])
def test_derived_shapes_are_legal_and_reach_the_edges(tail):
    text = edit(BASE, "tail: none", f"tail: {tail}")
    (f, _) = files(text)
    shapes = gemm_derived_shapes(f.instance)
    grown = edit(text, "    - {m: 4, n: 4096, k: 4096}\n",
                 "".join(f"    - {{m: {m}, n: {n}, k: {k}}}\n" for m, n, k in shapes))
    build_instances(parse_specs(grown, FILE))  # every derived shape passes every rule
    if tail == "predicated":
        assert (1, 1, 8) in shapes and any(n % 8 for _, n, _ in shapes) and any(k % 256 for _, _, k in shapes)


# ---- structure gemv_n: the small-N path (the roles of A and B swapped) ------------------------------------

BASE_N = """\
- name: gvn
  op: gemm
  dtypes: {a: fp32, b: fp32, out: fp32}
  layout: nn
  shapes:
    - {m: 4096, n: 1, k: 4096}
  structure: gemv_n
  tiling: {block_m: 8, block_n: 4, block_k: 128, threads: 256}
  tail: predicated
  targets: [gfx942, sm_90]
"""


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("layout: nn", "layout: tn",
     "specs/x.yaml:4:11: layout=tn: structure gemv_n streams A's rows along K: use layout nn or nt (A: M x K) [gemv_shape]"),
    ("{m: 4096, n: 1, k: 4096}", "{m: 4096, n: 5, k: 4096}",
     ("specs/x.yaml:6:7: shapes[0]: n=5 is over tiling.block_n=4, the columns one gemv_n workgroup serves "
      "[gemv_shape]")),
    ("threads: 256}", "threads: 128}",
     ("specs/x.yaml:8:59: tiling.threads=128: must be block_m * block_k / 4 = 256: one lane per vector of a K step, "
      "for each of the block's rows [gemv_shape]")),
    ("block_n: 4", "block_n: 32",
     ("specs/x.yaml:8:33: tiling.block_n=32: structure gemv_n keeps every column of B in registers: at most 16 "
      "columns [gemv_shape]")),
    ("tail: predicated", "tail: none\n  split_k: 4",
     "split_k=4: not with structure gemv_n (not supported)"),
])
def test_gemv_n_rules(old, new, expected):
    found = errors(edit(BASE_N, old, new))
    assert any(expected in e for e in found), found


def test_gemv_n_whole_m_blocks_need_no_tail_and_n_below_the_block_is_no_edge():
    text = edit(BASE_N, "tail: predicated", "tail: none")
    (a, _) = files(text)  # m = 4096 whole blocks of 8 rows, n = 1 < block_n = 4: nothing ragged
    assert a.uri.startswith("gemvn_fp32_nn_8x4x128_t256_") and a.instance.launch_grids((4096, 1, 4096)) == ((512, 1, 1),)
    assert "m=4095 is not a multiple of block_m=8" in " ".join(errors(edit(text, "m: 4096", "m: 4095")))


@pytest.mark.parametrize("target", [Target.SM_90, Target.GFX942])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_gemv_n_kernel_streams_a_in_16_byte_vectors_and_sums_across_lanes(target, layout):
    text = edit(edit(BASE_N, "layout: nn", f"layout: {layout}"), "dtypes: {a: fp32, b: fp32, out: fp32}",
                "dtypes: {a: bf16, b: bf16, out: bf16}")
    text = edit(text, "block_k: 128, threads: 256", "block_k: 256, threads: 256")
    f = next(f for f in files(text) if f.instance.target == target)
    src = lower(f, (4096, 3, 4096), target).source
    assert src.count("*(uint4*)(a_vec") == 1  # 16-byte loads of A, the streamed operand
    assert src.count("*(uint4*)(b_vec") == (1 if layout == "nt" else 0)  # B's columns: vectors only when K-major
    if target == Target.SM_90:
        assert "__shfl_down_sync" in src
    assert not MATRIX_CORES.search(src)


@pytest.mark.parametrize("tail", ["none", "predicated"])
def test_gemv_n_derived_shapes_are_legal_and_reach_the_edges(tail):
    text = edit(BASE_N, "tail: predicated", f"tail: {tail}")
    (f, _) = files(text)
    shapes = gemm_derived_shapes(f.instance)
    grown = edit(text, "    - {m: 4096, n: 1, k: 4096}\n",
                 "".join(f"    - {{m: {m}, n: {n}, k: {k}}}\n" for m, n, k in shapes))
    build_instances(parse_specs(grown, FILE))  # every derived shape passes every rule
    assert all(n <= 4 for _, n, _ in shapes)
    if tail == "predicated":
        assert any(m % 8 for m, _, _ in shapes) and any(k % 128 for _, _, k in shapes)
