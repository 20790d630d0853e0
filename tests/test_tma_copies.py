"""sm_90's TMA copy options of the tiled GEMM (issue 12, `b_eviction`, `epilogue`): their rules with the user's
coordinates, unchanged names at the defaults, the shared-memory budget of the C tile, the hint and the TMA store in
the lowered CUDA and the PTX, on the CPU the `epilogue_box_unstored` control, and the sm_90 build of the seed.

b_eviction is a cache hint: it changes which lines L2 lets go first, never a result, so it has no numeric control;
what is tested is that it reaches the generated code (CUDA source and PTX)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from numcheck import check_output
from spectext import FILE, REPO_ROOT, check_rule_case, edit, errors

from codegen.build.compile import BuildOptions, build_files
from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing
from codegen.families.gemm.instance import EPILOGUE_BOX_BYTES
from codegen.families.gemm.spec import GEMM_TUNABLES
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.targets import TARGETS
from codegen.tune.search import constrain, expand

BASE = """\
- name: t
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  b_eviction: first
  epilogue: shared
  tail: none
  targets: [gfx942, sm_90]
"""

SEED = "gemm_fp16_nt_tma"
SEED_FILE = next(f for f in Project().rendered() if SEED in f.names)
EVICT_FIRST_POLICY = 0x12F0000000000000  # tl::CacheHintSm90::EVICT_FIRST, the 64-bit L2 cache policy operand
EVICT_NORMAL_POLICY = 0x1000000000000000


def files(text: str = BASE):
    return render_all(build_instances(parse_specs(text, FILE)))


def sm90(text: str = BASE):
    return next(f for f in files(text) if f.instance.target == Target.SM_90)


# ---- rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("  targets: [gfx942, sm_90]\n", "  targets: [gfx942, sm_90]\n  overrides:\n    gfx942:\n      b_eviction: last\n",
     ("specs/x.yaml:14:19: overrides.gfx942.b_eviction=last: b_eviction last is an L2 hint on TMA loads, only for "
      "sm_90, not gfx942 [b_eviction_target]")),
    ("targets: [gfx942, sm_90]", "targets: [gfx942, gfx950]",
     ("specs/x.yaml:9:13: epilogue=shared: epilogue shared is C through shared memory to TMA stores, only for sm_90, "
      "and no such target here uses this value [epilogue_target]")),
    ("  tail: none\n", "  tail: none\n  split_k: 2\n",
     ("specs/x.yaml:9:13: epilogue=shared: not with split_k > 1 (not supported): split-K stores fp32 partials to its "
      "workspace, and the shared C tile holds the output dtype: use epilogue direct [unsupported_combination]")),
    # the copy hint and the shared epilogue compose with the other traits (tests/test_gemm_traits.py lowers each pair)
    ("  epilogue: shared\n  tail: none\n", "  tail: none\n  split_k: 2\n", None),
    ("  tail: none\n", "  tail: none\n  grid: persistent\n", None),
    ("  tail: none\n", "  tail: predicated\n  dynamic_m: {min: 1, max: 512}\n", None),
    ("{a: fp16, b: fp16, out: fp16}", ("{a: fp32, b: fp32, out: fp32}\n  overrides: {gfx942: {tiling: {block_m: 64, "
                                       "block_n: 64, block_k: 32, threads: 256}}}"), None),
    ("  tail: none\n", "  tail: none\n  structure: gemv\n",
     ("specs/x.yaml:8:15: b_eviction=first: not with structure gemv (not supported): gemv has no tiles through shared "
      "memory [unsupported_combination]")),
    ("{m: 256, n: 256, k: 256}", "{m: 256, n: 256, k: 4100}",
     ("specs/x.yaml:6:7: shapes[0]: B's rows are k=4100 fp16 elements (8200 B), not a multiple of 16 B: TileLang "
      "loads B without TMA there, and b_eviction first would not reach the code [b_eviction_tma]")),
    ("{m: 256, n: 256, k: 256}", "{m: 256, n: 4100, k: 256}",
     ("specs/x.yaml:6:7: shapes[0]: C's rows are n=4100 fp16 elements (8200 B), not a multiple of 16 B: TileLang "
      "stores the shared C tile without TMA there (use epilogue: direct) [epilogue_tma]")),
    ("layout: nt", "layout: nn",  # nn: B is K x N, its rows are n
     None),
    ("b_eviction: first", "b_eviction: sometimes",
     "specs/x.yaml:8:15: b_eviction='sometimes': Input should be 'normal', 'first' or 'last' [enum]"),
    ("epilogue: shared", "epilogue: tma",
     "specs/x.yaml:9:13: epilogue='tma': Input should be 'direct' or 'shared' [enum]"),
    ("tail: none", "tail: predicated", None),
    ("tail: none", "tail: specialized", None),
    ("  tail: none\n", "  tail: none\n  pipeline: {stages: 1}\n  unroll: 2\n", None),
])
def test_tma_copy_rules(old, new, expected):
    check_rule_case(edit(BASE, old, new), expected)


def test_b_eviction_tma_reads_the_rows_of_b_as_stored():
    # nn: B is K x N, so its rows are n (4100 * 2 B); k = 4100 is fine there
    text = edit(edit(edit(BASE, "layout: nt", "layout: nn"), "{m: 256, n: 256, k: 256}", "{m: 256, n: 4100, k: 4104}"),
                "tail: none", "tail: predicated")
    found = errors(edit(text, "  epilogue: shared\n", ""))
    assert found == [("specs/x.yaml:6:7: shapes[0]: B's rows are n=4100 fp16 elements (8200 B), not a multiple of 16 "
                      "B: TileLang loads B without TMA there, and b_eviction first would not reach the code "
                      "[b_eviction_tma]")]


def test_the_c_tile_counts_against_shared_memory_where_it_is_the_larger():
    # 128x256x32, 2 stages: A+B 48 KiB; the fp16 C tile 64 KiB takes the pipeline's bytes, so 64 KiB in all
    text = edit(BASE, "block_n: 128, block_k: 64", "block_n: 256, block_k: 32")
    inst = sm90(text).instance
    assert inst.lds_bytes == 128 * 256 * 2
    assert sm90(edit(text, "  epilogue: shared\n", "")).instance.lds_bytes == (128 + 256) * 32 * 2 * 2
    assert sm90().instance.lds_bytes == (128 + 128) * 64 * 2 * 2  # the pipeline the larger: the C tile adds nothing
    big = edit(edit(BASE, "out: fp16", "out: fp32"), "tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}",
               "tiling: {block_m: 256, block_n: 256, block_k: 16, threads: 256}\n  pipeline: {stages: 1}")
    assert ("specs/x.yaml:7:11: tiling: the epilogue's 256x256 fp32 C tile (epilogue shared; it reuses the smaller "
            "pipeline buffers) needs 262144 B (256 KiB) of shared memory, over the 232448 B (227 KiB) per workgroup on "
            "sm_90 [lds_budget]") in errors(big)
    assert files(edit(big, "  epilogue: shared\n", ""))  # without the C tile it fits


# ---- names: the defaults are one kernel, the options are in the name ----------------------------------

def test_the_defaults_are_the_plain_kernel_and_the_options_are_in_the_name():
    bare = edit(edit(BASE, "  b_eviction: first\n", ""), "  epilogue: shared\n", "")
    explicit = edit(edit(BASE, "b_eviction: first", "b_eviction: normal"), "epilogue: shared", "epilogue: direct")
    plain, spelled = files(bare), files(explicit)
    assert [f.uri for f in plain] == [f.uri for f in spelled] and [f.text for f in plain] == [f.text for f in spelled]
    for f in spelled:
        canonical = f.instance.canonical()
        assert f.instance.template == "gemm.py.j2" and '"b_eviction":"normal"' in canonical
        assert '"epilogue":"direct"' in canonical
    by_target = {f.instance.target: f for f in files()}
    # gfx942 has no TMA: the top-level options are sm_90's, and the gfx942 kernel is the plain one
    assert by_target[Target.GFX942].uri == next(f.uri for f in plain if f.instance.target == Target.GFX942)
    tma = by_target[Target.SM_90]
    assert tma.instance.tma_options and "_evf_epis_sm90_" in tma.uri
    assert tma.instance.metadata(tma.uri)["b_eviction"] == "first" and tma.instance.metadata(tma.uri)["epilogue"] == "shared"
    assert "_evl_sm90_" in sm90(edit(edit(BASE, "first", "last"), "  epilogue: shared\n", "")).uri
    only_epilogue = sm90(edit(BASE, "  b_eviction: first\n", "")).uri
    assert "_epis_sm90_" in only_epilogue and "_ev" not in only_epilogue


def test_committed_kernels_without_the_options_have_no_copy_option_code():
    for f in Project().rendered():
        if f.instance.op == "gemm" and not getattr(f.instance, "tma_options", False):
            canonical = f.instance.canonical()
            assert '"b_eviction":"normal"' in canonical and '"epilogue":"direct"' in canonical, f.uri
            assert "B_EVICTION" not in f.text and "C_shared" not in f.text, f.uri
    assert SEED_FILE.instance.tma_options and SEED_FILE.instance.target == Target.SM_90
    assert 'B_EVICTION = "evict_first"' in SEED_FILE.text and "C_shared = T.alloc_shared" in SEED_FILE.text


def test_the_options_are_search_tunables_checked_point_by_point():
    assert {"b_eviction", "epilogue"} <= set(GEMM_TUNABLES)
    text = (edit(edit(BASE, "  b_eviction: first\n", ""), "  epilogue: shared\n", "")
            + "  search:\n    sm_90:\n      b_eviction: [normal, first]\n      epilogue: [direct, shared]\n"
              "      split_k: [1, 2]\n")
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert len(part.points) == 8 and part.rejected_by_rule == {"unsupported_combination": 2}  # shared x split_k
    assert sorted((f.instance.b_eviction, f.instance.epilogue, f.instance.split_k) for f in part.files.values()) == [
        ("first", "direct", 1), ("first", "direct", 2), ("first", "shared", 1), ("normal", "direct", 1),
        ("normal", "direct", 2), ("normal", "shared", 1)]


# ---- the lowered CUDA: the hint and the TMA store ---------------------------------------------------

def _tma_loads(src: str) -> list[str]:
    return [line for line in src.splitlines() if "tl::tma_load" in line]


def test_the_seed_hint_reaches_every_load_of_b_and_only_b():
    inst = SEED_FILE.instance
    src = lower(SEED_FILE, inst.shapes[0], Target.SM_90).source
    loads = _tma_loads(src)
    b_loads = [line for line in loads if "B_desc" in line]
    a_loads = [line for line in loads if "A_desc" in line]
    assert b_loads and a_loads and len(a_loads) + len(b_loads) == len(loads)
    assert all("tl::tma_load<tl::CacheHintSm90::EVICT_FIRST>(B_desc" in line for line in b_loads)
    assert not any("CacheHint" in line for line in a_loads)
    # the shared epilogue: the accumulator into the C tile (stmatrix), one TMA store per box, no direct store to C
    assert "ptx_stmatrix" in src and "tma_store_arrive" in src
    stores = [line for line in src.splitlines() if "tl::tma_store(C_desc" in line]
    assert len(stores) == 1 and inst.block_n == inst.epilogue_box_n  # 64 fp16 columns: one box a tile
    assert not re.search(r"\bC\[", src) and "(C + " not in src


@pytest.mark.parametrize(("eviction", "policy"), [("last", "EVICT_LAST"), ("normal", None)])
def test_each_priority_reaches_the_loads(eviction, policy):
    f = sm90(edit(BASE, "b_eviction: first", f"b_eviction: {eviction}"))
    src = lower(f, (256, 256, 256), Target.SM_90).source
    b_loads = [line for line in _tma_loads(src) if "B_desc" in line]
    assert b_loads and all((f"<tl::CacheHintSm90::{policy}>" in line) if policy else ("CacheHint" not in line)
                           for line in b_loads)


def test_a_tile_wider_than_a_box_is_stored_box_by_box():
    # 128 fp16 columns = two 128-byte boxes: a loop of 2 TMA stores, the second 64 columns on
    f = sm90()
    assert f.instance.epilogue_box_n == EPILOGUE_BOX_BYTES // 2 == 64
    src = lower(f, (256, 256, 256), Target.SM_90).source
    (store,) = [line for line in src.splitlines() if "tl::tma_store(C_desc" in line]
    loop = src[:src.index(store)].rsplit("for (", 1)[1].split(")", 1)[0]
    var = re.match(r"int (\w+) = 0; \1 < 2;", loop)
    assert var and f"({var.group(1)} * 64)" in store, (loop, store)


@pytest.mark.parametrize("tail", ["predicated", "specialized"])
def test_ragged_shapes_keep_the_hint_and_the_tma_store(tail):
    f = sm90(edit(BASE, "tail: none", f"tail: {tail}"))
    src = lower(f, (200, 328, 264), Target.SM_90).source  # rows of 328 / 264 fp16: multiples of 16 B
    assert "tl::tma_load<tl::CacheHintSm90::EVICT_FIRST>(B_desc" in src and "tl::tma_store(C_desc" in src


# ---- the negative control (CPU) -------------------------------------------------------------------

def _epilogue_emulation(inst, skip_last_box: bool = False):
    """What the kernel writes into verify's NaN-filled C: every tile's product, box by box; `skip_last_box`:
    the store loop one box short."""
    def out(case, ref):
        n = ref.shape[1]
        c = torch.full_like(ref, float("nan"))
        for c0 in range(0, n, inst.block_n):
            stop = inst.block_n - inst.epilogue_box_n if skip_last_box else inst.block_n
            c[:, c0:c0 + stop] = ref[:, c0:c0 + stop]
        return c
    return out


@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 330, 100), (1, 1, 1), (128, 127, 64)])
def test_the_shared_epilogue_verifies_and_its_unstored_box_is_rejected(shape):
    inst = sm90(edit(BASE, "tail: none", "tail: predicated")).instance
    status, cmp, controls = check_output(inst, shape, _epilogue_emulation(inst))
    assert status == "verified", (shape, cmp, controls)
    expect = "rejected" if shape[1] > inst.block_n - inst.epilogue_box_n else "n/a"
    assert controls["epilogue_box_unstored"].startswith(expect), controls
    if expect == "rejected":
        assert check_output(inst, shape, _epilogue_emulation(inst, skip_last_box=True))[0] == "failed"


def test_the_chunked_check_has_the_epilogue_control():
    inst = sm90().instance
    shape = (256, 384, 128)
    chunked = check_output(inst, shape, _epilogue_emulation(inst), max_elements=64 * 128)
    assert chunked[0] == "verified" and chunked[2]["epilogue_box_unstored"] == "rejected"
    bad = check_output(inst, shape, _epilogue_emulation(inst, skip_last_box=True), max_elements=64 * 128)
    assert bad[0] == "failed"


def test_only_the_shared_epilogue_has_the_control():
    inst = sm90(edit(BASE, "  epilogue: shared\n", "")).instance
    _, _, controls = check_output(inst, (128, 128, 64), _epilogue_emulation(inst))
    assert "epilogue_box_unstored" not in controls


# ---- the real builds ----------------------------------------------------------------------------------

def _sm90_toolchain() -> None:
    try:
        TARGETS[Target.SM_90].find_toolchain(REPO_ROOT)
    except ToolchainMissing as exc:
        pytest.skip(f"no sm_90 toolchain: {exc}")


def test_the_seed_builds_without_spills_and_its_ptx_carries_the_hint(build_cache):
    _sm90_toolchain()
    report = build_files([SEED_FILE], REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=2, first_shape=True))
    (r,) = report.results
    assert r.ok, r.error
    (k,) = r.kernels
    assert k.spills == 0
    assert k.launch.dynamic_lds_bytes == SEED_FILE.instance.lds_bytes  # the C tile in the pipeline's bytes
    ptx = next(Path(r.entry if Path(r.entry).is_absolute() else REPO_ROOT / r.entry).glob("*.ptx")).read_text()
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\S*\.L2::cache_hint .*?, (%rd\d+);", ptx)
    policies = dict(re.findall(r"mov\.u64\s+(%rd\d+), (\d+);", ptx))
    values = [int(policies[reg]) for reg in loads]
    # every K step loads A (normal) and B (evict first): as many of each
    assert values.count(EVICT_FIRST_POLICY) == values.count(EVICT_NORMAL_POLICY) == len(values) // 2 > 0
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)) == 1  # the C tile's store
    assert not re.search(r"^\s*st\.global", ptx, re.MULTILINE)


def test_a_c_tile_larger_than_the_pipeline_takes_its_bytes(build_cache):
    _sm90_toolchain()
    f = sm90(edit(edit(BASE, "block_n: 128, block_k: 64", "block_n: 256, block_k: 32"), "  b_eviction: first\n", ""))
    report = build_files([f], REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=2))
    (r,) = report.results
    assert r.ok, r.error
    (k,) = r.kernels
    assert k.launch.dynamic_lds_bytes == f.instance.lds_bytes == 128 * 256 * 2 and k.spills == 0
