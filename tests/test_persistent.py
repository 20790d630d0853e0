"""GEMM persistent grid (issue 12, `grid: persistent`): min(tiles, resident) workgroups looping over the output
tiles in swizzle_panel order. Its rules with the user's coordinates, unchanged names at grid tiles, the tile order
(the module's, codegen's and tl::rasterization2DRow's agree), the residency per target, the lowered loop, the
derived shapes, on the CPU the `last_round_unwritten` control, and the gfx942 / sm_90 builds of the seed."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, REPO_ROOT, check_rule_case, edit, errors
from toolchains import missing

from codegen.build.compile import BuildOptions, build_files
from codegen.core.hardware import Target
from codegen.families.gemm.instance import PersistentSchedule
from codegen.families.gemm.numerics import gemm_derived_shapes
from codegen.families.gemm.spec import GEMM_TUNABLES
from codegen.generate.instance import build_instances
from codegen.generate.lower import load_module, lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.targets import TARGETS
from codegen.tune.search import constrain, expand

BASE = """\
- name: p
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}
  grid: persistent
  tail: none
  targets: [gfx942, sm_90]
"""

SEED = "gemm_fp16_nt_persistent"
SEED_FILES = {f.instance.target: f for f in hand_files() if SEED in f.names}


def files(text: str = BASE):
    return render_all(build_instances(parse_specs(text, FILE)))


# ---- rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("  tail: none\n", "  tail: none\n  structure: gemv\n",
     ("specs/x.yaml:8:9: grid=persistent: not with structure gemv (not supported): gemv has no output tiles to loop "
      "over [unsupported_combination]")),
    ("tail: none", "tail: specialized",
     ("specs/x.yaml:9:9: tail=specialized: not with grid persistent (not supported): the specialized interior and "
      "edge kernels each launch their own grid: use tail none or predicated [unsupported_combination]")),
    ("  tail: none\n", "  tail: none\n  split_k: 2\n",
     ("specs/x.yaml:8:9: grid=persistent: not with split_k > 1 (not supported): a persistent workgroup computes "
      "whole tiles; splitting a tile's K over workgroups (stream-K) is not built: use grid tiles "
      "[unsupported_combination]")),
    ("  tail: none\n", "  tail: predicated\n  dynamic_m: {min: 1, max: 512}\n",
     ("specs/x.yaml:8:9: grid=persistent: not with dynamic_m (not supported): the persistent grid, min(tiles, "
      "resident), is sized when the kernel is made, from M: use grid tiles [unsupported_combination]")),
    # the tile loop composes with fp32 products and with B staged N x K
    ("{a: fp16, b: fp16, out: fp16}", "{a: fp32, b: fp32, out: fp32}", None),
    ("layout: nt", "layout: nn\n  lds_layout: transposed_b", None),
    ("grid: persistent", "grid: stream_k",
     "specs/x.yaml:8:9: grid='stream_k': Input should be 'tiles' or 'persistent' [enum]"),
    ("tail: none", "tail: predicated", None),
    ("  tail: none\n", "  tail: none\n  pipeline: {stages: 1}\n  unroll: 2\n", None),
])
def test_persistent_rules(old, new, expected):
    check_rule_case(edit(BASE, old, new), expected)


def test_persistent_rules_point_into_an_override():
    # sm_90 alone keeps the tiles grid and splits K: legal; asking sm_90 alone for persistent with a split is not
    ok = edit(BASE, "  targets: [gfx942, sm_90]\n",
              "  targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n      grid: tiles\n      split_k: 2\n")
    assert {f.instance.target: (f.instance.grid, f.instance.split_k) for f in files(ok)} == {
        Target.GFX942: ("persistent", 1), Target.SM_90: ("tiles", 2)}
    text = edit(edit(BASE, "  grid: persistent\n", "  split_k: 2\n"), "  targets: [gfx942, sm_90]\n",
                "  targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n      grid: persistent\n")
    assert errors(text) == [
        ("specs/x.yaml:13:13: overrides.sm_90.grid=persistent: not with split_k > 1 (not supported): a persistent "
         "workgroup computes whole tiles; splitting a tile's K over workgroups (stream-K) is not built: use grid tiles "
         "[unsupported_combination]")]


def test_grid_is_a_search_tunable_checked_point_by_point():
    assert "grid" in GEMM_TUNABLES
    text = edit(BASE, "  grid: persistent\n", "") + "  search:\n    sm_90:\n      grid: [tiles, persistent]\n      split_k: [1, 2]\n"
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert len(part.points) == 4 and part.rejected_by_rule == {"unsupported_combination": 1}
    assert sorted((f.instance.grid, f.instance.split_k) for f in part.files.values()) == [
        ("persistent", 1), ("tiles", 1), ("tiles", 2)]


# ---- names: grid tiles is the kernel it always was ----------------------------------------------

def test_grid_tiles_is_the_plain_kernel_and_persistent_is_in_the_name():
    plain = files(edit(BASE, "  grid: persistent\n", ""))
    tiles = files(edit(BASE, "grid: persistent", "grid: tiles"))
    assert [f.uri for f in tiles] == [f.uri for f in plain] and [f.text for f in tiles] == [f.text for f in plain]
    for f in tiles:
        assert f.instance.template == "gemm.py.j2" and '"grid":"tiles"' in f.instance.canonical()
        assert "_pers" not in f.uri
    for f in files():
        assert "_pers_" in f.uri and "for r in T.serial(rounds):" in f.text
        assert f.instance.metadata(f.uri)["grid"] == "persistent"


def test_committed_tiles_kernels_have_no_tile_loop():
    for f in Project().rendered():
        if f.instance.op == "gemm" and not f.instance.persistent:
            assert "tile_coords" not in f.text and '"grid":"tiles"' in f.instance.canonical(), f.uri


# ---- the grid and the tile order ----------------------------------------------------------------

def test_residency_comes_from_the_target_record():
    gfx, sm = TARGETS[Target.GFX942], TARGETS[Target.SM_90]
    assert gfx.resident_workgroups(256, 64 * 1024) == 1 and gfx.resident_workgroups(256, 32 * 1024) == 2
    assert gfx.resident_workgroups(1024, 1024) == 2  # 16 waves of 32 wave slots
    assert sm.resident_workgroups(256, 196608) == 1 and sm.resident_workgroups(256, 98304) == 2
    by_target = {f.instance.target: f.instance for f in SEED_FILES.values()}
    assert by_target[Target.GFX942].resident_workgroups == 304 and by_target[Target.SM_90].resident_workgroups == 132
    inst = by_target[Target.GFX942]
    assert inst.launch_grids((4096, 4096, 4096)) == ((304, 1, 1),) and inst.launch_grids((256, 256, 64)) == ((4, 1, 1),)
    s = inst.persistent_schedule(4096, 4096)
    assert (s.tiles, s.workgroups, s.rounds) == (1024, 304, 4)


def rasterization_2d_row(panel_width: int, grid_x: int, grid_y: int, block: int) -> tuple[int, int]:
    """tl::rasterization2DRow (tilelang/src/tl_templates/*/threadblock_swizzle.h) for block index `block` of a
    grid_x x grid_y grid: (row_idx, col_idx), written out from the header."""
    grid = grid_x * grid_y
    panel_size = panel_width * grid_x
    offset, idx = block % panel_size, block // panel_size
    total = -(-grid // panel_size)
    stride = panel_width if idx + 1 < total else (grid - idx * panel_size) // grid_x
    col = grid_x - 1 - offset // stride if idx & 1 else offset // stride
    return offset % stride + idx * panel_width, col


@pytest.mark.parametrize("panel", [0, 1, 2, 8])
@pytest.mark.parametrize(("tiles_m", "tiles_n"), [(1, 1), (1, 7), (7, 1), (24, 34), (153, 2), (15, 17)])
def test_the_tile_order_is_the_swizzle_of_the_tiles_grid(panel, tiles_m, tiles_n):
    s = PersistentSchedule(tiles_m=tiles_m, tiles_n=tiles_n, resident=304, panel=panel)
    order = [s.tile(t) for t in range(s.tiles)]
    assert sorted(order) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]  # every tile once
    if panel:
        assert order == [rasterization_2d_row(panel, tiles_n, tiles_m, t) for t in range(s.tiles)]
    else:
        assert order == [(t // tiles_n, t % tiles_n) for t in range(s.tiles)]
    # the generated module computes the same order (it is self-contained, so it has its own copy)
    text = edit(BASE, "  grid: persistent\n", f"  grid: persistent\n  swizzle_panel: {panel}\n")
    f = files(text)[0]
    module = load_module(f)
    assert [module.tile_coords(t, tiles_m, tiles_n) for t in range(s.tiles)] == order
    grid = f.instance.persistent_schedule(tiles_m * 64 - 1, tiles_n * 64)
    assert module.schedule(tiles_m * 64 - 1, tiles_n * 64) == (tiles_m, tiles_n, grid.workgroups, grid.rounds)


@pytest.mark.parametrize("target", [Target.GFX942, Target.SM_90])
def test_lowered_kernel_loops_over_rounds_in_a_one_dimensional_grid(target):
    f = SEED_FILES[target]
    src = lower(f, (3072, 4352, 4096), target).source
    assert "blockIdx.y" not in src and "rasterization2D" not in src
    # 816 (gfx942) / 408 (sm_90) tiles over 304 / 132 workgroups: 3 / 4 rounds, the last one guarded
    rounds = {Target.GFX942: 3, Target.SM_90: 4}[target]
    assert re.search(rf"for \(int r = 0; r < {rounds}; \+\+r\)", src), src[:4000]
    assert "wgmma" in src if target == Target.SM_90 else "mfma" in src


# ---- derived shapes and numerics (CPU) ----------------------------------------------------------

@pytest.mark.parametrize("tail", ["none", "predicated"])
def test_derived_shapes_are_legal_and_take_two_rounds(tail):
    text = edit(BASE, "tail: none", f"tail: {tail}")
    for f in files(text):
        shapes = gemm_derived_shapes(f.instance)
        grown = edit(text, "    - {m: 256, n: 256, k: 256}\n", "".join(f"    - {{m: {m}, n: {n}, k: {k}}}\n" for m, n, k in shapes))
        build_instances(parse_specs(grown, FILE))
        rounds = [f.instance.persistent_schedule(m, n).rounds for m, n, _ in shapes]
        assert rounds[:-1] == [1] * (len(shapes) - 1) and rounds[-1] == 2, (f.instance.target, shapes)
        last = f.instance.persistent_schedule(*shapes[-1][:2])
        assert 0 < last.tiles - last.workgroups < last.workgroups  # the second round partial


def _persistent_emulation(inst, skip_last_round: bool = False):
    """What the kernel writes into verify's NaN-filled C: each tile's fp32 product, tile by tile in the loop's
    order; `skip_last_round`: the loop one round short."""
    def out(case, ref):
        m, n = ref.shape
        s = inst.persistent_schedule(m, n)
        c = torch.full_like(ref, float("nan"))
        stop = (s.rounds - 1) * s.workgroups if skip_last_round else s.tiles
        for t in range(stop):
            tm, tn = s.tile(t)
            rows, cols = slice(tm * inst.block_m, (tm + 1) * inst.block_m), slice(tn * inst.block_n, (tn + 1) * inst.block_n)
            c[rows, cols] = case.A32[rows] @ case.B32[:, cols]
        return c
    return out


def _small(tail: str = "predicated", panel: int = 2):
    """A persistent instance whose residency is small enough for CPU checks of several rounds."""
    text = edit(edit(BASE, "tail: none", f"tail: {tail}"), "  grid: persistent\n",
                f"  grid: persistent\n  swizzle_panel: {panel}\n")
    inst = next(f.instance for f in files(text) if f.instance.target == Target.SM_90)
    return replace(inst, resident_workgroups=5)


@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 330, 100), (64, 64, 32), (1, 1, 1)])
def test_the_loop_verifies_and_its_last_round_unwritten_is_rejected(shape):
    inst = _small()
    status, cmp, controls = check_output(inst, shape, _persistent_emulation(inst))
    assert status == "verified", (shape, cmp, controls)
    assert controls["last_round_unwritten"] == "rejected" and set(controls.values()) <= {"rejected"} | {
        v for v in controls.values() if v.startswith("n/a")}
    status, cmp, _ = check_output(inst, shape, _persistent_emulation(inst, skip_last_round=True))
    assert status == "failed" and cmp.mismatch_ratio > 0, shape


def test_the_chunked_check_has_the_last_round_control():
    inst = _small()
    shape = (330, 270, 96)  # 6 x 5 tiles of 64 over 5 workgroups: 6 rounds; chunks of 64 columns
    whole = check_output(inst, shape, _persistent_emulation(inst))
    chunked = check_output(inst, shape, _persistent_emulation(inst), max_elements=64 * 96)
    assert whole[0] == chunked[0] == "verified" and whole[2] == chunked[2]
    assert chunked[2]["last_round_unwritten"] == "rejected"
    assert check_output(inst, shape, _persistent_emulation(inst, skip_last_round=True), max_elements=64 * 96)[0] == "failed"


# ---- the real builds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [Target.GFX942, Target.SM_90])
def test_the_seed_builds_without_spills_and_holds_the_residency_it_assumes(target, build_cache):
    if (why := missing(target)) is not None:
        pytest.skip(f"no {target} toolchain: {why}")
    f = SEED_FILES[target]
    report = build_files([f], REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=2))
    hw = TARGETS[target].hw
    per_cu = f.instance.resident_workgroups // hw.compute_units
    for r in report.results:
        assert r.ok, r.error
        (k,) = r.kernels
        assert k.spills == 0
        s = f.instance.persistent_schedule(*r.shape[:2])
        assert k.launch.grid == (s.workgroups, 1, 1)
        if target == Target.SM_90:
            assert k.blocks_per_sm >= per_cu
        else:
            waves = -(-k.launch.threads // hw.wave_lanes)
            assert k.waves_per_simd * hw.simds_per_cu // waves >= per_cu

