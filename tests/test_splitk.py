"""GEMM split-K (`split_k` > 1 on the tiled structure): its rules with the user's coordinates, unchanged names
at split_k 1, what its kernels are made of (partial products split along grid z into an fp32 workspace, a
second kernel that sums them in a fixed order), its derived shapes, and on the CPU its numerics: the
`dropped_split` control rejected, a split-K emulation verified. Run on the GPU by tests/test_kernels.py."""

from __future__ import annotations

import math
import re

import pytest
import torch
from numcheck import check_output
from spectext import FILE, check_rule_case, edit, errors

from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.gemm.numerics import gemm_derived_shapes, gemm_tolerance
from codegen.families.gemm.rules import split_tiles
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.tune.search import constrain, expand

BASE = """\
- name: sk
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 8192}
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  pipeline: {stages: 2}
  split_k: 4
  tail: none
  targets: [gfx942, sm_90]
"""

MATRIX_CORES = re.compile(r"tl::mma_sync|tl::wgmma|__builtin_amdgcn_mfma")


def files(text: str = BASE):
    return render_all(build_instances(parse_specs(text, FILE)))


# ---- rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("split_k: 4", "split_k: 65",
     "specs/x.yaml:9:12: split_k=65: at most 64 splits of the K range (each writes an fp32 partial of C) [split_k_limit]"),
    ("split_k: 4", "split_k: 0", "specs/x.yaml:9:12: split_k=0: Input should be greater than 0 [greater_than]"),
    ("  tail: none\n", "  tail: none\n  structure: gemv\n",
     ("specs/x.yaml:9:12: split_k=4: not with structure gemv (not supported): gemv's lanes of a column share K "
      "already, and it has no output tile to split [unsupported_combination]")),
    ("tail: none", "tail: specialized",
     ("specs/x.yaml:10:9: tail=specialized: not with split_k > 1 (not supported): the specialized interior and "
      "edge kernels have no K split: use tail none or predicated [unsupported_combination]")),
    # the split composes with fp32 products (128x128x64 fp32 tiles are over gfx942's LDS: smaller ones there)
    ("{a: fp16, b: fp16, out: fp16}", ("{a: fp32, b: fp32, out: fp32}\n  overrides: {gfx942: {tiling: {block_m: 64, "
                                       "block_n: 64, block_k: 32, threads: 256}}}"), None),
    ("k: 8192}", "k: 8256}",
     ("specs/x.yaml:6:7: shapes[0]: k=8256 is not a multiple of block_k*split_k=256: every split takes the same "
      "whole K tiles (or set tail: predicated) [split_k_divides]")),
    ("{m: 256, n: 256, k: 8192}", "{m: 8192, n: 8192, k: 8192}",
     ("specs/x.yaml:6:7: shapes[0]: split_k=4 x m=8192 x n=8192 fp32 partials need 1073741824 B (1024 MiB) of "
      "workspace, over 256 MiB [split_k_workspace]")),
    ("  pipeline: {stages: 2}\n", "  pipeline: {stages: 1}\n  unroll: 2\n",  # 8192 is whole rounds of 64 * 2 * 4
     None),
])
def test_split_k_rules(old, new, expected):
    check_rule_case(edit(BASE, old, new), expected)


def test_a_predicated_split_needs_a_real_k_tile_in_every_split():
    text = edit(BASE, "tail: none", "tail: predicated")
    # 9 K tiles of 64: runs of ceil(576 / 256) = 3 tiles give the fourth split none
    found = errors(edit(text, "k: 8192}", "k: 576}"))
    assert found == [("specs/x.yaml:6:7: shapes[0]: k=576 is 9 K tile(s) of block_k=64: split_k=4 runs of 3 leave "
                      "the last split none: every split needs at least one [split_k_tiles]")]
    # 13 tiles, the last ragged: runs of 4, 4, 4 and 1 (+ 3 past K, zeros); k = 8256 (not whole splits) too
    assert files(edit(text, "k: 8192}", "k: 769}")) and files(edit(text, "k: 8192}", "k: 8256}"))


def test_split_k_rules_point_into_an_override_and_name_the_target():
    text = edit(BASE, "  targets: [gfx942, sm_90]\n",
                "  targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n      split_k: 32\n")
    assert files(text)  # 8192 = 128 tiles of 64: 32 splits of 4 tiles each
    found = errors(edit(text, "split_k: 32", "split_k: 3"))
    assert found == [("specs/x.yaml:6:7: shapes[0]: k=8192 is not a multiple of block_k*split_k=192 on sm_90: every "
                      "split takes the same whole K tiles (or set tail: predicated) [split_k_divides]")]
    found = errors(edit(text, "split_k: 32", "split_k: 80"))
    assert ("specs/x.yaml:14:16: overrides.sm_90.split_k=80: at most 64 splits of the K range (each writes an fp32 "
            "partial of C) [split_k_limit]") in found


def test_unroll_counts_whole_rounds_in_each_split():
    text = edit(BASE, "  pipeline: {stages: 2}\n", "  pipeline: {stages: 1}\n  unroll: 2\n")
    found = errors(edit(text, "k: 8192}", "k: 8448}"))  # 33 tiles of 256 per split: not whole rounds of 2
    assert found == [("specs/x.yaml:9:11: unroll=2: shapes[0].k=8448 is not a multiple of "
                      "block_k*unroll*split_k=512 [unroll_divides]")]


def test_split_k_in_a_search_space_is_checked_point_by_point():
    text = BASE + "  search:\n    sm_90:\n      split_k: [1, 4, 65]\n      pipeline: {stages: [2, 3]}\n"
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert len(part.points) == 6
    assert part.rejected_by_rule == {"split_k_limit": 2, "split_k_divides": 2}  # 8192 % (64 * 65) != 0 as well
    kept = {f.instance.split_k for f in part.files.values()}
    assert kept == {1, 4}


# ---- names: split_k 1 is the plain kernel --------------------------------------------------------

def test_split_k_1_is_the_plain_kernel_and_the_split_is_in_the_name():
    plain = files(edit(BASE, "  split_k: 4\n", ""))
    one = files(edit(BASE, "split_k: 4", "split_k: 1"))
    assert [f.uri for f in one] == [f.uri for f in plain] and [f.text for f in one] == [f.text for f in plain]
    for f in one:
        assert '"split_k":1' in f.instance.canonical()
        assert "_sk" not in f.uri and "C_PART" not in f.text
    split = files()
    assert [f.uri.replace("_s2_sk4_", "_s2_") for f in split] != [f.uri for f in plain]  # another hash, too
    assert all("_s2_sk4_" in f.uri and "C_PART: T.Tensor((SPLIT_K, M, N), ACCUM_DTYPE)" in f.text for f in split)


def test_committed_seeds_without_a_split_have_no_split_code():
    for f in Project().rendered():
        if f.instance.op == "gemm" and f.instance.split_k == 1:
            assert "C_PART" not in f.text and '"split_k":1' in f.instance.canonical(), f.uri


# ---- what the kernels are made of ---------------------------------------------------------------

def test_render_has_a_workspace_and_a_fixed_order_sum():
    for f in files():
        text = f.text
        assert "C_PART: T.Tensor((SPLIT_K, M, N), ACCUM_DTYPE)," in text
        assert text.count("with T.Kernel(") == 2 and "SPLIT_K, threads=THREADS) as (bx, by, bz):" in text
        assert "for s in T.serial(SPLIT_K):" in text and "T.atomic" not in text
        assert "T.copy(C_local, C_PART[bz, row0, col0])" in text
        inst = f.instance
        assert (inst.reduce_block_m, inst.reduce_block_n) == (8, 128)  # 256 threads x 4 fp32 over 128 columns
        assert inst.launch_grids((256, 256, 8192)) == ((2, 2, 4), (2, 32, 1))
        assert inst.metadata(f.uri)["split_k"] == 4


@pytest.mark.parametrize("target", [Target.SM_90, Target.GFX942])
@pytest.mark.parametrize("tail", ["none", "predicated"])
def test_lowered_kernels_split_k_along_z_and_sum_without_atomics(target, tail):
    text = edit(BASE, "tail: none", f"tail: {tail}")
    f = next(f for f in files(text) if f.instance.target == target)
    shape = (256, 256, 8192) if tail == "none" else (200, 250, 1100)
    src = lower(f, shape, target).source
    bodies = re.split(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?', src)
    product = next(b for b in bodies if b.startswith(f"{f.uri}_kernel(") and "{" in b.split("\n")[0])
    total = next(b for b in bodies if b.startswith(f"{f.uri}_kernel_1(") and "{" in b.split("\n")[0])
    assert "blockIdx.z" in product and MATRIX_CORES.search(product) and "C_PART" in product
    assert not MATRIX_CORES.search(total) and "atomic" not in total.lower()
    assert re.search(r"for \(int s = 0; s < 4; \+\+s\)", total)  # the partials in order (gfx942 may unroll it)
    if tail == "predicated":
        assert re.search(r"< 125\)|< 250\)", total)  # the ragged columns of C (N = 250) are guarded


# ---- derived shapes and numerics (CPU) ----------------------------------------------------------

SEEDS = ("gemm_fp16_splitk_narrow", "gemm_bf16_splitk_deep", "gemm_fp16_splitk_decode")
RENDERED = [f for f in Project().rendered() if f.instance.name in SEEDS]
# the hand configurations and the tuned winners that split K (a winner may not: cuBLAS's narrow-N structure)
INSTANCES = [f.instance for f in RENDERED if f.instance.split_k > 1]
HAND = [f.instance for f in RENDERED if f.is_hand]


def test_the_seeds_are_split():
    assert sorted((i.name, i.target.value, i.split_k) for i in HAND) == [
        ("gemm_bf16_splitk_deep", "gfx942", 16), ("gemm_bf16_splitk_deep", "sm_90", 8),
        ("gemm_fp16_splitk_decode", "gfx942", 8), ("gemm_fp16_splitk_decode", "sm_90", 4),
        ("gemm_fp16_splitk_narrow", "gfx942", 8), ("gemm_fp16_splitk_narrow", "sm_90", 4)]


@pytest.mark.parametrize("tail", ["none", "predicated"])
def test_derived_shapes_are_legal_and_reach_the_split_edges(tail):
    text = edit(BASE, "tail: none", f"tail: {tail}")
    for f in files(text):
        shapes = gemm_derived_shapes(f.instance)
        grown = edit(text, "    - {m: 256, n: 256, k: 8192}\n",
                     "".join(f"    - {{m: {m}, n: {n}, k: {k}}}\n" for m, n, k in shapes))
        build_instances(parse_specs(grown, FILE))  # every derived shape passes every rule
        if tail == "predicated":
            bk, sk = f.instance.block_k, f.instance.split_k
            assert (1, 1, (sk - 1) * bk + 1) in shapes  # one K tile a split, the last of one element
            # a last run that ends in a tile wholly past K (it loads zeros)
            assert any(sk * split_tiles(k, bk, sk) > -(-k // bk) for _, _, k in shapes)


def _split_emulation(inst, drop: int | None = None):
    """What the kernel computes: each split's fp32 partial over its run of K tiles, summed in order
    s = 0..split_k-1 in fp32 (one rounding, to the output dtype, in check_output); `drop`: one split left out."""
    def out(case, ref):
        a, b = case.A32, case.B32
        run = split_tiles(a.shape[1], inst.block_k, inst.split_k) * inst.block_k
        acc = torch.zeros_like(ref)
        for s in range(inst.split_k):
            if s != drop:
                acc += a[:, s * run:(s + 1) * run] @ b[s * run:(s + 1) * run, :]
        return acc
    return out


@pytest.mark.parametrize("inst", INSTANCES, ids=lambda i: i.uri)
def test_split_emulation_verifies_and_the_dropped_split_is_rejected(inst):
    for shape in gemm_derived_shapes(inst):
        for seed in (0, 1):  # verify's draws on the edge shapes
            for kind in ("normal", "wide"):
                status, cmp, controls = check_output(inst, shape, _split_emulation(inst), kind=kind, seed=seed)
                assert status == "verified", (shape, seed, kind, cmp, controls)
                assert controls["dropped_split"] == "rejected", (shape, seed, kind, controls)
                assert all(v == "rejected" or v.startswith("n/a") for v in controls.values()), controls


@pytest.mark.parametrize("drop", ["first", "last"])
def test_a_kernel_that_drops_a_split_fails(drop):
    inst = next(i for i in HAND if i.name == "gemm_fp16_splitk_decode" and i.target == Target.SM_90)
    for shape in gemm_derived_shapes(inst):
        which = 0 if drop == "first" else inst.split_k - 1
        status, cmp, _ = check_output(inst, shape, _split_emulation(inst, drop=which))
        assert status == "failed" and cmp.mismatch_ratio > 0, shape


def test_the_chunked_check_has_the_dropped_split_control():
    inst = next(i for i in HAND if i.name == "gemm_fp16_splitk_decode" and i.target == Target.SM_90)
    shape = (65, 300, 703)  # 2 row blocks x 5 column blocks of 64 at this budget
    whole = check_output(inst, shape, _split_emulation(inst))
    chunked = check_output(inst, shape, _split_emulation(inst), max_elements=64 * 703)
    assert whole[0] == chunked[0] == "verified" and whole[2] == chunked[2]
    assert chunked[2]["dropped_split"] == "rejected"


def test_the_workspace_is_nan_filled_and_passed_between_b_and_c():
    inst = next(i for i in HAND if i.name == "gemm_fp16_splitk_decode" and i.target == Target.SM_90)
    fam = family(inst).numerics
    case = fam.make_inputs(inst, (65, 127, 511), seed=0, kind="normal", device="cpu", run_target=Target.SM_90)
    (ws,) = case.workspace
    assert ws.shape == (4, 65, 127) and ws.dtype == torch.float32 and ws.isnan().all()
    seen = []
    fam.launch(lambda *args: seen.extend(args), case, "C")
    assert seen[:2] == [case.A, case.B] and seen[2] is ws and seen[3] == "C"
    assert "split_k 4: fp32 partials, one rounding" in fam.tolerance(inst, (65, 127, 511), Target.SM_90).describe()


def test_the_split_sum_is_well_inside_the_accumulation_term():
    """The K products of a split GEMM are still summed in fp32, only reassociated: split_k partials of K /
    split_k products, then their sum (a blocked sum, depth K / split_k + split_k - 1). Against a float64
    product of the same rounded inputs it stays within a quarter of the modelled 4 u_acc sqrt(K) |A|.|B|."""
    inst = next(i for i in HAND if i.name == "gemm_bf16_splitk_deep" and i.target == Target.SM_90)
    g = torch.Generator().manual_seed(0)
    for m, n, k in ((32, 32, 16384), (16, 16, 65536)):
        a = torch.randn(m, k, generator=g).bfloat16().float()
        b = (torch.randn(k, n, generator=g) / k**0.5).bfloat16().float()
        case = type("Case", (), {"A32": a, "B32": b})()
        got = _split_emulation(inst)(case, torch.zeros(m, n)).double()
        exact = a.double() @ b.double()
        tol = gemm_tolerance(inst, Target.SM_90, k)
        term = 4 * tol.u_acc * math.sqrt(k) * (a.abs().double() @ b.abs().double())
        assert ((got - exact).abs() <= 0.25 * term).all()


def test_split_k_composes_with_dynamic_m_and_transposed_b():
    from spectext import FILE

    from codegen.generate.instance import build_instances
    from codegen.generate.render import render
    from codegen.spec.load import parse_specs

    base = """\
- name: s
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nn
  shapes:
    - {m: 256, n: 256, k: 8192}
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  split_k: 4
  tail: predicated
  targets: [gfx942]
"""
    [bt] = build_instances(parse_specs(base.replace("  tail: predicated", "  tail: predicated\n  lds_layout: transposed_b"),
                                       FILE))
    # transposed_b's staging of B takes the split's K tile, and the split's copies count in the explicit schedule
    assert "_stage_b(B, B_shared, B_rows, B_cols, k_first + kk, col0)" in render(bt).text
    assert bt.pipeline_order == (0, 1, 2, 3, 4)
    [dyn] = build_instances(parse_specs(base.replace("  split_k: 4", "  split_k: 4\n  dynamic_m: {min: 1, max: 512}"),
                                        FILE))
    assert "def make_dynamic_kernel(M: str, N: int, K: int):" in render(dyn).text and dyn.launch_grids((300, 256, 8192)) == (
        (2, 3, 4), (2, -(-300 // dyn.reduce_block_m), 1))


# ---- split_k_sum fixup: the last split of each tile sums the partials (no second kernel) -----------------------

FIXUP = edit(BASE, "  split_k: 4\n", "  split_k: 4\n  split_k_sum: fixup\n")


def test_fixup_is_its_own_kernel_and_the_sum_kernel_keeps_its_name():
    kernel, fixup = files(), files(FIXUP)
    explicit = files(edit(BASE, "  split_k: 4\n", "  split_k: 4\n  split_k_sum: kernel\n"))
    assert [f.uri for f in explicit] == [f.uri for f in kernel]  # the default: the names the lockfiles hold
    assert all("split_k_sum" not in f.instance.canonical() for f in kernel)
    assert all("_s2_sk4fx_" in f.uri and '"split_k_sum":"fixup"' in f.instance.canonical() for f in fixup)
    # without a split there is nothing to sum: the plain kernel, whatever split_k_sum says
    one = files(edit(FIXUP, "split_k: 4", "split_k: 1"))
    assert [f.uri for f in one] == [f.uri for f in files(edit(BASE, "  split_k: 4\n", ""))]


def test_fixup_renders_one_kernel_with_tile_counters_and_the_same_fixed_order_sum():
    for f in files(FIXUP):
        text, inst = f.text, f.instance
        assert text.count("with T.Kernel(") == 1
        assert 'TILE_ARRIVALS: T.Tensor((T.ceildiv(M, BLOCK_M), T.ceildiv(N, BLOCK_N)), "int32"),' in text
        assert text.index("C_PART: T.Tensor") < text.index("TILE_ARRIVALS: T.Tensor") < text.index("C: T.Tensor")
        assert 'T.atomic_add(TILE_ARRIVALS[by, bx], 1, memory_order="acq_rel", return_prev=True)' in text
        assert "if arrived[0] == SPLIT_K - 1:" in text and "for s in T.serial(SPLIT_K):" in text
        assert "TILE_ARRIVALS[by, bx] = 0" in text and "REDUCE_M" not in text
        assert inst.launch_grids((256, 256, 8192)) == ((2, 2, 4),)
        assert inst.workspace_shapes((256, 256, 8192)) == ((4, 256, 256), (2, 2))
        assert inst.workspace_dtypes() == ("fp32", "int32") and inst.workspace_zeroed() == (False, True)
        assert inst.metadata(f.uri)["split_k_sum"] == "fixup" and "reduce_block" not in inst.metadata(f.uri)


@pytest.mark.parametrize("target", [Target.SM_90, Target.GFX942])
def test_lowered_fixup_counts_with_an_ordered_atomic_between_device_fences(target):
    text = edit(FIXUP, "tail: none", "tail: predicated")
    f = next(f for f in files(text) if f.instance.target == target)
    src = lower(f, (200, 250, 1100), target).source
    assert src.count("__global__ void") <= 2 and f"{f.uri}_kernel_1" not in src  # one kernel (its declaration)
    assert MATRIX_CORES.search(src) and "AtomicAddRet" in src
    # every thread fences its partial device-wide before the count, and the last split again before reading
    assert src.count("__threadfence()") == 2
    assert re.search(r"for \(int s = 0; s < 4; \+\+s\)", src) or target == Target.GFX942  # gfx942 may unroll it


def test_fixup_counters_start_at_zero_and_a_launch_that_leaves_them_set_fails():
    inst = next(f.instance for f in files(FIXUP) if f.instance.target == Target.SM_90)
    fam = family(inst).numerics
    case = fam.make_inputs(inst, (256, 256, 8192), seed=0, kind="normal", device="cpu", run_target=Target.SM_90)
    part, counters = case.workspace
    assert part.isnan().all() and counters.dtype == torch.int32 and not counters.any()
    assert fam.after_launch(inst, case) == ""
    counters[1, 0] = 4  # a last split that never set its tile's counter back
    assert "1 of 4 counters (zero on entry) left non-zero" in fam.after_launch(inst, case)
    plain = next(f.instance for f in files() if f.instance.target == Target.SM_90)
    assert fam.after_launch(plain, fam.make_inputs(plain, (256, 256, 8192), seed=0, kind="normal", device="cpu",
                                                   run_target=Target.SM_90)) == ""
