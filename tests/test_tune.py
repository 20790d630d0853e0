"""`tilegen tune`: the search block's errors (expect-style), expansion, the partition by named rules, pruning
from build reports, the static rank, and the lockfile's stale/miss detection. No GPU; one tiny real build."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from spectext import FILE, REPO_ROOT, edit, errors

from codegen.build.compile import BuildOptions, BuildReport, BuildResult
from codegen.core.errors import SpecError, TilegenError
from codegen.core.hardware import Target
from codegen.generate.lockfile import (
    Candidate,
    LockEntry,
    LockFile,
    check_lockfiles,
    hand_hash,
    lock_path,
    read_lockfile,
    write_lockfile,
)
from codegen.spec.load import parse_specs
from codegen.tune.measure import parse_budget
from codegen.tune.search import (
    STATIC_LABEL,
    constrain,
    expand,
    hand_values,
    prune,
    static_rank,
    tune_static,
    write_report,
)

BASE = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 256}
  targets: [gfx942, sm_90]
  search:
    gfx942:
      tiling: {block_m: [64, 128], block_k: [32, 256]}
      pipeline: {stages: [1, 2]}
"""
# lds_budget on gfx942 (64 KiB): 64x64x256 fp16 at 2 stages is 128 KiB; 128x64x256 at 1 and 2 stages too.
CACHE = Path("/work/cache-build")


def loaded(text: str = BASE):
    (ls,) = parse_specs(text, FILE)
    return ls


# ---- the search block ------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("block_m: [64, 128]", "blockm: [64]",
     "specs/x.yaml:11:16: search.gfx942.tiling.blockm: unknown key (did you mean 'block_m'?) [unknown_key]"),
    ("block_m: [64, 128]", "block_m: []",
     ("specs/x.yaml:11:25: search.gfx942.tiling.block_m: an empty list of values: give at least one, or leave the "
     "tunable out [empty_search]")),
    ("block_m: [64, 128]", "block_m: [64, '128']",
     "specs/x.yaml:11:30: search.gfx942.tiling.block_m[1]='128': Input should be a valid integer [int_type]"),
    ("block_m: [64, 128]", "block_m: [64, 0]",
     "specs/x.yaml:11:30: search.gfx942.tiling.block_m[1]=0: Input should be greater than 0 [greater_than]"),
    ("stages: [1, 2]", "stages: [1, 9]",
     "specs/x.yaml:12:30: search.gfx942.pipeline.stages[1]=9: Input should be less than or equal to 8 [less_than_equal]"),
    ("stages: [1, 2]", "stages: [2, 2]",
     "specs/x.yaml:12:26: search.gfx942.pipeline.stages: value 2 is listed twice [duplicate_value]"),
    ("      pipeline: {stages: [1, 2]}\n", "      layout: [nn, nt]\n",
     # layout is not a tunable (it changes the result); the nearest search key is offered
     "specs/x.yaml:12:7: search.gfx942.layout: unknown key (did you mean 'lds_layout'?) [unknown_key]"),
    ("    gfx942:\n", "    gfx950:\n", "specs/x.yaml:10:5: search.gfx950: gfx950 is not in targets [search_target]"),
])
def test_search_block_errors(old, new, expected):
    assert errors(edit(BASE, old, new)) == [expected]


def test_row_family_search_values_use_the_family_types():
    text = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  shapes: [{rows: 8, cols: 1024}]
  threads: 128
  targets: [sm_90]
  search:
    sm_90: {vector: [4, 3], variant: [online, fast]}
"""
    assert errors(text) == [
        "specs/x.yaml:8:25: search.sm_90.vector[1]=3: Input should be 1, 2, 4 or 8 [literal_error]",
        "specs/x.yaml:8:47: search.sm_90.variant[1]='fast': Input should be 'online' or 'two_pass' [enum]",
    ]


def test_gen_ignores_the_search_block():
    from codegen.generate.instance import build_instances
    from codegen.generate.render import render_all

    without = BASE[: BASE.index("  search:")]
    a = render_all(build_instances(parse_specs(BASE, FILE)))
    b = render_all(build_instances(parse_specs(without, FILE)))
    assert [(f.uri, f.text) for f in a] == [(f.uri, f.text) for f in b]


# ---- expand and constrain --------------------------------------------------------------------------

def test_expansion_is_the_ordered_product():
    points = list(expand(loaded().spec, Target.GFX942))
    assert len(points) == 8
    assert points[0] == (("tiling.block_m", 64), ("tiling.block_k", 32), ("pipeline.stages", 1))
    assert points[-1] == (("tiling.block_m", 128), ("tiling.block_k", 256), ("pipeline.stages", 2))
    assert points == list(expand(loaded().spec, Target.GFX942))  # deterministic
    assert hand_values(loaded().spec, Target.GFX942) == (("tiling.block_m", 64), ("tiling.block_k", 32),
                                                         ("pipeline.stages", 2))
    with pytest.raises(TilegenError, match=r"no `search.sm_90` block"):
        expand(loaded().spec, Target.SM_90)


UNION = BASE.replace("""    gfx942:
      tiling: {block_m: [64, 128], block_k: [32, 256]}
      pipeline: {stages: [1, 2]}
""", """    gfx942:  # two blocks: a small-tile space and a deeper pipeline of the large tile
      - tiling: {block_m: [64, 128], block_k: [32, 256]}
      - tiling: {block_m: [128]}
        pipeline: {stages: [1, 2]}
        unroll: [1, 2]
""")


def test_a_list_of_blocks_searches_the_union_of_their_spaces():
    """Block after block, each a cartesian product; every point sets every tunable any block lists, those its
    block leaves out at the hand configuration's value; a point of the second block that is the same kernel as
    one of the first is marked so, not built twice."""
    spec = loaded(UNION).spec
    points = list(expand(spec, Target.GFX942))
    hand = (("tiling.block_m", 64), ("tiling.block_k", 32), ("pipeline.stages", 2), ("unroll", 1))
    assert hand_values(spec, Target.GFX942) == hand
    assert len(points) == 4 + 4
    assert points[0] == (("tiling.block_m", 64), ("tiling.block_k", 32), ("pipeline.stages", 2), ("unroll", 1))
    assert points[4] == (("tiling.block_m", 128), ("tiling.block_k", 32), ("pipeline.stages", 1), ("unroll", 1))
    assert points[-1] == (("tiling.block_m", 128), ("tiling.block_k", 32), ("pipeline.stages", 2), ("unroll", 2))
    from codegen.tune.search import check_space, space_of, space_size

    assert space_size(spec, Target.GFX942) == 8
    # the values the points take: a block's lists, and the hand's where a block leaves a tunable out
    assert space_of(spec, Target.GFX942) == [("tiling.block_m", [64, 128]), ("tiling.block_k", [32, 256]),
                                             ("pipeline.stages", [1, 2]), ("unroll", [1, 2])]
    assert space_of(loaded(UNION.replace("unroll: [1, 2]", "unroll: [2, 4]")).spec, Target.GFX942)[-1] == (
        "unroll", [2, 4, 1])
    part = constrain(loaded(UNION), Target.GFX942, points)
    # (128, 32, stages 2, unroll 1) is in both blocks: once a kernel, then the same kernel
    dup = [p for p in part.points if p.values == points[2]]
    assert dup and dup[0].same_as is None
    later = [p for p in part.points if p.index >= 4 and p.values == points[2]]
    assert later and later[0].same_as == dup[0].uri
    # a winner of the second block comes back as its kernel (the lockfile's check of an entry)
    from codegen.generate.lockfile import winner_instance
    from codegen.generate.render import render

    second = next(p for p in part.points if p.index >= 4 and p.survived)
    inst, why = winner_instance(loaded(UNION), Target.GFX942, second.tunables())
    assert why == "" and render(inst).uri == second.uri
    assert check_space(loaded(UNION), Target.GFX942, max_points=8) == 8
    with pytest.raises(SpecError, match=r"8 points \(2 tiling.block_m x 2 tiling.block_k \+ 1 tiling.block_m x 2 "
                                        r"pipeline.stages x 2 unroll\) is over the limit of 7"):
        check_space(loaded(UNION), Target.GFX942, max_points=7)


def test_a_list_of_blocks_has_its_own_space_hash():
    """One block hashes as it always did (lockfile entries stay fresh); a list hashes as the set of its blocks:
    neither their order nor the union merged into one block gives the same hash."""
    from codegen.generate.lockfile import canonical_space, space_sha256

    one = space_sha256(loaded(), Target.GFX942)
    assert one == canonical_space({"tiling.block_m": [64, 128], "tiling.block_k": [32, 256], "pipeline.stages": [1, 2]})
    two = space_sha256(loaded(UNION), Target.GFX942)
    swapped = UNION.replace("      - tiling: {block_m: [64, 128], block_k: [32, 256]}\n", "").replace(
        "        unroll: [1, 2]\n", "        unroll: [1, 2]\n      - tiling: {block_m: [64, 128], block_k: [32, 256]}\n")
    assert two != one and space_sha256(loaded(swapped), Target.GFX942) == two
    merged = canonical_space({"tiling.block_m": [64, 128], "tiling.block_k": [32, 256], "pipeline.stages": [1, 2],
                              "unroll": [1, 2]})
    assert two != merged


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("      - tiling: {block_m: [128]}\n", "      - tiling: {blockm: [128]}\n",
     "specs/x.yaml:12:18: search.gfx942[1].tiling.blockm: unknown key (did you mean 'block_m'?) [unknown_key]"),
    ("""      - tiling: {block_m: [64, 128], block_k: [32, 256]}
      - tiling: {block_m: [128]}
        pipeline: {stages: [1, 2]}
        unroll: [1, 2]
""", "      []\n", ("specs/x.yaml:11:7: search.gfx942: an empty list of blocks: give at least one, or leave the "
     "target out [empty_search]")),
    ("      - tiling: {block_m: [128]}\n", "      - 7\n      - tiling: {block_m: [128]}\n",
     "specs/x.yaml:12:9: search.gfx942[1]=7: must be a mapping [model_type]"),
    ("      - tiling: {block_m: [128]}\n        pipeline: {stages: [1, 2]}\n        unroll: [1, 2]\n",
     "      - tiling: {}\n",
     "specs/x.yaml:12:9: search.gfx942[1]: a block that lists no tunable: give at least one, or leave it out [empty_search]"),
    ("""      - tiling: {block_m: [64, 128], block_k: [32, 256]}
      - tiling: {block_m: [128]}
        pipeline: {stages: [1, 2]}
        unroll: [1, 2]
""", "      {}\n", "specs/x.yaml:11:7: search.gfx942: a block that lists no tunable: give at least one, or leave it out [empty_search]"),
])
def test_a_list_of_blocks_reports_each_block_s_errors_once(old, new, expected):
    assert errors(edit(UNION, old, new)) == [expected]


def test_overrides_are_the_base_of_the_target_space():
    text = BASE + "  overrides:\n    gfx942:\n      tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256}\n"
    points = expand(loaded(text).spec, Target.GFX942)
    part = constrain(loaded(text), Target.GFX942, points)
    assert part.hand.uri.startswith("gemm_fp16_nt_128x128x32_t256_s2_gfx942_")  # the override's tiling
    assert all(p.uri.split("_")[3].split("x")[1] == "128" for p in part.points if p.uri)  # its block_n kept


def test_rule_partition_counts_every_point_under_its_rules():
    part = constrain(loaded(), Target.GFX942, expand(loaded().spec, Target.GFX942))
    assert len(part.points) == 8
    assert part.rejected_by_rule == {"lds_budget": 3}
    rejected = [p.values for p in part.points if p.rules]
    assert (("tiling.block_m", 64), ("tiling.block_k", 256), ("pipeline.stages", 2)) in rejected
    assert all(p.rules == ("lds_budget",) for p in part.points if p.rules)
    same = [p for p in part.points if p.same_as]
    assert [p.values for p in same] == [(("tiling.block_m", 64), ("tiling.block_k", 32), ("pipeline.stages", 2))]
    assert same[0].same_as == part.hand.uri
    assert len(part.files) == 5  # the hand configuration and four other legal kernels
    fates = sum(bool(p.rules) + bool(p.same_as) for p in part.points) + len(part.files) - 1
    assert fates == len(part.points)  # nothing silently dropped


# ---- prune and rank --------------------------------------------------------------------------------

class _Kernel:
    """What the AMD target's summarize and the build rules read of a kernel."""

    symbol = "main_kernel"
    warnings: tuple[str, ...] = ()  # the static analysis found nothing

    def __init__(self, *, spills: int, waves: int, lds: int):
        self.spills, self.waves_per_simd, self.lds_bytes = spills, waves, lds
        self.asm = SimpleNamespace(total_vgprs=64, vgprs=64, agprs=0, sgprs=16, scratch_bytes=0, code_bytes=1000,
                                   mfma=(("v_mfma_f32_16x16x16_f16", 64),))

    def spill_text(self):
        return f"{self.spills} VGPR spills"

    def occupancy_problem(self, floor):
        return f"{self.waves_per_simd} waves per SIMD < {floor}" if self.waves_per_simd < floor else None


def _waves(uri: str) -> int:
    return 2 + len(uri) % 3


def _fake_build(spills_uri: str, failed_uri: str, lds: dict[str, int]):
    def build(files, root, opts, on_event=None):
        results = []
        for f in files:
            k = _Kernel(spills=8 if f.uri == spills_uri else 0, waves=_waves(f.uri), lds=lds.get(f.uri, 8192))
            base = {"uri": f.uri, "name": f.instance.name, "target": f.instance.target, "shape": f.instance.shapes[0]}
            if f.uri == failed_uri:
                results.append(BuildResult(**base, status="failed", error="clang: error: boom"))
            else:
                results.append(BuildResult(**base, status="built", kernels=(k,)))
        return BuildReport(results=tuple(results), toolchains={}, wall_s=0.0, jobs=1)

    return build


def test_pruning_reads_the_kernels():
    part = constrain(loaded(), Target.GFX942, expand(loaded().spec, Target.GFX942))
    uris = sorted(u for u in part.files if u != part.hand.uri)
    build = _fake_build(spills_uri=uris[0], failed_uri=uris[1], lds={uris[2]: 70000})
    pruned, _ = prune(part, Path.cwd(), BuildOptions(), build=build)
    by_uri = {p.uri: p for p in pruned.points if p.uri and not p.same_as}
    assert by_uri[uris[0]].pruned == ("spills",)
    assert by_uri[uris[1]].pruned == ("build_failed",)
    assert by_uri[uris[1]].detail == "clang: error: boom"
    assert by_uri[uris[2]].pruned == ("lds_exceeded",)
    assert not by_uri[uris[3]].pruned
    ranked = static_rank(pruned)
    assert [p.uri for p in ranked] == sorted([pruned.hand.uri, uris[3]],
                                             key=lambda u: (-_waves(u), u))  # more waves first
    assert [p.rank for p in ranked] == [1, 2]


def test_min_waves_per_simd_prunes():
    text = edit(BASE, "  targets: [gfx942, sm_90]\n", "  targets: [gfx942, sm_90]\n  min_waves_per_simd: 3\n")
    part = constrain(loaded(text), Target.GFX942, expand(loaded(text).spec, Target.GFX942))
    build = _fake_build(spills_uri="", failed_uri="", lds={})
    pruned, _ = prune(part, Path.cwd(), BuildOptions(), build=build)
    for p in pruned.points:
        if p.uri and not p.same_as:
            assert (p.pruned == ("min_waves_per_simd",)) == (_waves(p.uri) < 3)


@pytest.mark.skipif(not CACHE.is_dir(), reason="the shared warm build cache is not here")
def test_static_tune_builds_for_real_and_ranks(tmp_path):
    result = tune_static(loaded(), Target.GFX942, REPO_ROOT, BuildOptions(cache_dir=CACHE, jobs=2))
    doc = result.document()
    assert doc["counts"] == {"expanded": 8, "rejected": 3, "same_kernel": 1, "pruned": 0, "survivors": 4}
    assert doc["selection"] == STATIC_LABEL
    assert [r["rank"] for r in doc["ranked"]] == [1, 2, 3, 4, 5]
    assert all(r["resources"]["spills"] == 0 for r in doc["ranked"])
    waves = [r["resources"]["waves_per_simd"] for r in doc["ranked"]]
    assert waves == sorted(waves, reverse=True)
    assert "time" not in json.dumps(doc)  # no timing is written without measuring
    assert STATIC_LABEL in result.markdown()


def test_a_static_tune_never_replaces_the_measured_report(tmp_path):
    """`tune --static` on a machine without a GPU writes <spec>_<target>_static; the report a GPU measured stays."""
    measured = tmp_path / "reports" / "tune" / "g_gfx942.json"
    measured.parent.mkdir(parents=True)
    measured.write_text('{"selection": "measured"}')
    result = tune_static(loaded(), Target.GFX942, tmp_path, BuildOptions(),
                         build=_fake_build(spills_uri="", failed_uri="", lds={}))
    written = write_report(tmp_path, result)
    assert sorted(p.name for p in written) == ["g_gfx942_static.json", "g_gfx942_static.md"]
    assert json.loads(written[0].read_text())["selection"] == STATIC_LABEL
    assert measured.read_text() == '{"selection": "measured"}'


# ---- lockfile --------------------------------------------------------------------------------------

SM90 = BASE + "    sm_90:\n      pipeline: {stages: [2, 3]}\n"


def _entry(ls, **kw) -> LockEntry:
    base = {"spec": "g", "hand_hash": hand_hash(ls, Target.SM_90), "shape": (256, 256, 256), "device": "NVIDIA H200",
                "versions": {"tilelang": "0.1.15", "torch": "2.8.0", "runtime": "CUDA 12.8", "driver": "570.1"},
                "winner": _candidate(ls, 3, 0.01), "runner_up": _candidate(ls, 2, 0.02), "strategy": "test"}
    return LockEntry(**(base | kw))


def _candidate(ls, stages: int, time_ms: float) -> Candidate:
    """The lockfile candidate of the spec's sm_90 kernel at `stages`: its name and code hash as rendered today."""
    from codegen.tune.search import constrain as c

    part = c(ls, Target.SM_90, [(("pipeline.stages", stages),)])
    rendered = part.files[part.points[0].uri]
    return Candidate(uri=rendered.uri, tunables={"pipeline.stages": stages}, time_ms=time_ms,
                     code_sha256=rendered.code_sha256)


def test_lockfile_round_trip_and_clean_check(tmp_path):
    ls = loaded(SM90)
    e = _entry(ls)
    path = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    assert path == tmp_path / "tuned" / "sm_90" / "NVIDIA_H200.json"
    assert write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(e,)))
    assert not write_lockfile(path, read_lockfile(path))  # same content: not rewritten
    assert read_lockfile(path).entries == (e,)
    report = check_lockfiles(tmp_path, [ls], {"tilelang": "0.1.15", "torch": "2.8.0"}, [Target.SM_90])
    assert report.clean and report.entries == 1
    assert report.not_compared == ("driver", "runtime")


def test_lockfile_stale_and_misses(tmp_path):
    ls = loaded(SM90)
    good, second = _candidate(ls, 3, 0.01), _candidate(ls, 2, 0.02)
    entries = (
        _entry(ls, winner=good),  # versions differ below: stale
        _entry(ls, winner=good, hand_hash="0" * 64),  # another hand configuration
        _entry(ls, winner=good, shape=(512, 512, 512)),  # shape gone
        _entry(ls, spec="gone", winner=good),
    )
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=entries))
    # one entry per (spec, hand hash, shape) in a lockfile: each drifted candidate goes into another device's
    for device, drifted in (
        ("NVIDIA H100", {"winner": replace(good, uri="gemm_old_name")}),  # the winner's configuration changed
        ("NVIDIA B200", {"winner": replace(good, code_sha256="0" * 64)}),  # its code changed
        ("NVIDIA GH200", {"runner_up": replace(second, code_sha256="1" * 64)}),  # the runner-up's code changed
    ):
        write_lockfile(lock_path(tmp_path, Target.SM_90, device),
                       LockFile(target=Target.SM_90, device=device, entries=(_entry(ls, device=device, **drifted),)))
    report = check_lockfiles(tmp_path, [ls], {"tilelang": "0.1.16", "torch": "2.8.0"})
    lines = sorted(f.line() for f in report.stale)
    assert lines == sorted([
        "tuned/sm_90/NVIDIA_H200.json: g 256x256x256: stale: versions changed: tilelang 0.1.15 -> 0.1.16",
        "tuned/sm_90/NVIDIA_H200.json: g 256x256x256: stale: the spec's hand configuration changed",
        "tuned/sm_90/NVIDIA_H200.json: g 512x512x512: stale: the shape is no longer in the spec",
        (f"tuned/sm_90/NVIDIA_H100.json: g 256x256x256: stale: the winner's kernel is now {good.uri}, not "
        "gemm_old_name (its configuration changed)"),
        (f"tuned/sm_90/NVIDIA_B200.json: g 256x256x256: stale: {good.uri}: code changed (the winner's code sha256 "
         f"000000000000 -> {good.code_sha256[:12]})"),
        (f"tuned/sm_90/NVIDIA_GH200.json: g 256x256x256: stale: {second.uri}: code changed (the runner-up's code "
         f"sha256 111111111111 -> {second.code_sha256[:12]})"),
        "tuned/sm_90/NVIDIA_H200.json: gone 256x256x256: stale: no spec named gone for sm_90",
    ])
    assert report.invalid == ()
    # the sm_90 entry for (g, 256^3) exists, so no sm_90 miss; gfx942 has a search block and no lockfile
    assert [f.line() for f in report.misses] == ["tuned/gfx942: g 256x256x256: miss: no lockfile for this target"]
    assert not report.clean


def test_lockfile_gpu_versions_compared_only_on_their_device(tmp_path):
    ls = loaded(SM90)
    e = _entry(ls)
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(e,)))
    cpu = check_lockfiles(tmp_path, [ls], {"tilelang": "0.1.15"}, [Target.SM_90])  # a CPU machine: torch 2.13 here
    assert cpu.clean and cpu.not_compared == ("driver", "runtime", "torch")
    other = check_lockfiles(tmp_path, [ls], {"tilelang": "0.1.15"}, [Target.SM_90],
                            device_versions=("NVIDIA H100", {"torch": "2.9.0", "runtime": "CUDA 13.0", "driver": "580"}))
    assert other.clean and other.not_compared == ("driver", "runtime", "torch")
    same = check_lockfiles(tmp_path, [ls], {"tilelang": "0.1.15"}, [Target.SM_90],
                           device_versions=("NVIDIA H200", {"torch": "2.8.0", "runtime": "CUDA 12.8", "driver": "580.1"}))
    assert [f.line() for f in same.stale] == [
        "tuned/sm_90/NVIDIA_H200.json: g 256x256x256: stale: versions changed: driver 570.1 -> 580.1"]
    assert same.not_compared == ()


def test_lockfile_refuses_another_device_and_a_bad_file(tmp_path):
    ls = loaded(SM90)
    lock = LockFile(target=Target.SM_90, device="NVIDIA H100")
    with pytest.raises(TilegenError, match="measured on NVIDIA H200 cannot go into NVIDIA H100's lockfile"):
        lock.merged([_entry(ls)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 9}')
    with pytest.raises(TilegenError, match=r"bad.json: format=9: this tilegen reads format 1 \[lockfile_format\]"):
        read_lockfile(bad)


def test_budget_parsing():
    assert parse_budget("20m") == 1200 and parse_budget("90s") == 90 and parse_budget("1.5h") == 5400
    with pytest.raises(TilegenError, match="--budget 'soon'"):
        parse_budget("soon")


# ---- measured selection, with verify and bench replaced (no GPU here) --------------------------------

def test_measured_selection_never_selects_a_failed_candidate(monkeypatch, tmp_path):
    from codegen.run import gpurun
    from codegen.tune.measure import STRATEGY, measure
    from codegen.tune.search import TuneResult

    text = edit(SM90, "    - {m: 256, n: 256, k: 256}\n", "    - {m: 256, n: 256, k: 256}\n    - {m: 512, n: 256, k: 256}\n")
    ls = loaded(text)
    points = [(("pipeline.stages", s),) for s in (2, 3, 4)] + [(("tiling.block_m", 128), ("pipeline.stages", 3))]
    part = constrain(ls, Target.SM_90, points)
    result = TuneResult(spec_name="g", spec_file=FILE, target=Target.SM_90, loaded=ls,
                        space=(("pipeline.stages", (2, 3, 4)),), part=part, ranked=None)
    uris = sorted(result.part.files)
    fastest = next(p.uri for p in part.points if p.values == (("pipeline.stages", 4),))
    second = next(p.uri for p in part.points if p.values == (("pipeline.stages", 3),))
    bad = next(p.uri for p in part.points if len(p.values) == 2)  # the fastest of all, but fails verification
    ms = {fastest: 1.0, second: 1.5, bad: 0.5, part.hand.uri: 2.0}
    assert set(ms) == set(uris)
    rounds = []

    def verify_all(files, gpu, **kw):
        return gpurun.VerifyReport(gpu={}, cases=[
            {"uri": f.uri, "shape": list(s), "status": "failed" if f.uri == bad else "verified", "seed": seed,
             "seconds": 0.25, "error": "max error 3e-1" if f.uri == bad else ""}
            for f in files for s in [*f.instance.shapes, (129, 127, 33)] for seed in ((0,) if s[0] != 129 else (0, 1))])

    def bench_all(files, gpu, **kw):
        rounds.append(sorted(f.uri for f in files))
        assert kw["baselines_for"] == {part.hand.uri}  # torch timed once per shape, beside the hand configuration
        rows = [{"uri": f.uri, "shape": s, "status": "ok", "error": "", "kernel": {"median_ms": ms[f.uri] * s[0] / 256},
                 "baselines": {"torch": {"median_ms": 1.2}}} for f in files for s in f.instance.shapes]
        return gpurun.BenchReport(gpu={}, copy_gbps=1.0, flush_bytes=1, rows=rows)

    monkeypatch.setattr(gpurun, "verify_all", verify_all)
    monkeypatch.setattr(gpurun, "bench_all", bench_all)
    gpu = SimpleNamespace(name="NVIDIA H200", run_target=Target.SM_90, torch_version="2.8.0", runtime_version="CUDA 12.8",
                          devices=("0",))
    monkeypatch.setenv("TILEGEN_GIT_COMMIT", "0123abc")
    doc, entries = measure(result, gpu, budget_s=600, jobs=1, timeout_s=10)
    assert [d["uri"] for d in doc["not_selectable"]] == [bad]
    # the report says where it was measured, and how, in the keys the results page reads
    env = replace(result, measured=doc).document()["environment"]
    assert env["device"] == "NVIDIA H200" and env["git_commit"] == "0123abc" and env["command"]
    assert "environment" not in result.document()  # a static report measured nothing
    # where the time went: verifying, then each bench round
    assert 0 <= doc["verify_s"] <= doc["wall_s"] and all(r["seconds"] >= 0 for r in doc["rounds"])
    # verification's part: 4 kernels at 2 spec shapes and one edge shape, the edge one with two seeds
    assert {k: v for k, v in doc["verify"].items() if k not in ("seconds", "compile_s")} == {
        "compiles": 0, "cases": 12, "edge_cases": 4, "launches": 16, "case_s": 4.0}
    # three verified candidates: halving keeps the better half (fastest) and the hand configuration, no fewer
    assert rounds == [sorted([fastest, second, part.hand.uri])]
    assert [e.shape for e in entries] == [(256, 256, 256), (512, 256, 256)]
    assert all(e.winner.uri == fastest and e.runner_up.uri == second for e in entries)
    assert entries[0].winner.tunables == {"pipeline.stages": 4} and entries[0].strategy == STRATEGY
    from codegen.generate.lockfile import space_sha256
    assert all(e.space_sha256 == space_sha256(ls, Target.SM_90) for e in entries)  # the spec's space it chose from
    assert doc["shapes"][0]["speedup_vs_hand"] == 2.0
    assert entries[0].hand_hash == hand_hash(ls, Target.SM_90)
    assert doc["shapes"][0]["speedup_vs_baselines"] == {"torch": 1.2}  # torch 1.2 ms, the winner 1.0 ms
    assert sorted(doc["candidates"]) == sorted([fastest, second, part.hand.uri])  # the failed one was never timed
    md = replace(result, measured=doc).markdown()
    assert f"| 256x256x256 | `{fastest}` | 1.0000 | `{second}` | 1.5000 | 2.0000 | 1.2000 | 2.000x | 1.200x |" in md
    assert f"- not selectable: `{bad}`" in md
    from codegen.tune.search import plot_candidates

    assert plot_candidates(doc, tmp_path / "p.png") and (tmp_path / "p.png").stat().st_size > 1000
    with pytest.raises(TilegenError, match="sm_90 kernels are measured on a sm_90 GPU"):
        measure(result, SimpleNamespace(**{**gpu.__dict__, "run_target": Target.GFX942}), budget_s=1, jobs=1,
                timeout_s=1)


# ---- gen and bench use the lockfile -----------------------------------------------------------------------

def test_gen_emits_the_tuned_configuration_of_each_fresh_entry(tmp_path):
    from codegen.generate.instance import build_instances
    from codegen.generate.lockfile import tuned_instances
    from codegen.generate.render import render_all, workloads_text
    from codegen.run.gpurun import tuning_lines

    text = edit(SM90, "    - {m: 256, n: 256, k: 256}\n", "    - {m: 256, n: 256, k: 256}\n    - {m: 512, n: 256, k: 256}\n")
    ls = loaded(text)
    good = _candidate(ls, 3, 0.01)
    path = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(_entry(ls, winner=good),)))
    tuned, report = tuned_instances(tmp_path, [ls], [Target.SM_90])
    assert [(i.shapes, d) for i, d in tuned] == [(((256, 256, 256),), "NVIDIA H200")]
    files = render_all(build_instances([ls], [Target.SM_90]), tuned)
    by_uri = {f.uri: f for f in files}
    assert by_uri[good.uri].specs[0].tuned_on == "NVIDIA H200" and by_uri[good.uri].instance.shapes == ((256, 256, 256),)
    hand = next(f for f in files if f.uri != good.uri)
    assert hand.instance.shapes == ((256, 256, 256), (512, 256, 256))  # the hand kernel still serves every shape
    assert '"tuned_on": "NVIDIA H200"' in workloads_text(files)
    # the gfx942 search block has no lockfile, and the second sm_90 shape has no entry: both are misses
    assert sorted(m.reason for m in report.misses) == ["miss: not tuned on NVIDIA H200"]
    assert by_uri[good.uri].for_spec("g").instance.shapes == ((256, 256, 256),)

    rows = [{"uri": u, "shape": list(s), "status": "ok", "kernel": {"median_ms": ms}}
            for u, s, ms in ((good.uri, (256, 256, 256), 0.01), (hand.uri, (256, 256, 256), 0.02),
                             (hand.uri, (512, 256, 256), 0.03))]
    assert tuning_lines(files, rows, "NVIDIA H200") == [
        f"g 256x256x256 (sm_90): tuned {good.uri} 0.0100 ms vs hand {hand.uri} 0.0200 ms, x2.000",
        f"g 512x256x256 (sm_90): hand configuration {hand.uri} 0.0300 ms (no lockfile entry)",
    ]
    assert "(tuned on NVIDIA H200, timed here on NVIDIA H100)" in tuning_lines(files, rows, "NVIDIA H100")[0]

    # a stale entry (another tilelang) is not used: only the hand configuration is generated
    stale = _entry(ls, winner=good, versions={"tilelang": "0.0.1"})
    write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(stale,)))
    tuned, report = tuned_instances(tmp_path, [ls], [Target.SM_90])
    assert tuned == [] and [f.reason for f in report.stale] == ["stale: versions changed: tilelang 0.0.1 -> 0.1.15"]


def test_a_top_level_amd_only_value_does_not_break_the_sm90_hand_configuration():
    """k_pack: 2 at top level is for the spec's AMD target; tuning sm_90 alone must not refuse it (the H200 tune
    of gemm_fp16_splitk_narrow failed with "the hand configuration breaks k_pack_target on sm_90")."""
    text = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 1024}
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  k_pack: 2
  targets: [gfx942, sm_90]
  search:
    sm_90:
      pipeline: {stages: [2, 3]}
"""
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert len(part.files) == 2 and not part.rejected_by_rule  # stages 2 (the hand configuration) and 3


def test_measured_rounds_time_torch_once_and_never_start_a_round_past_the_budget(monkeypatch):
    """Halving over 8 candidates: torch's baselines are asked for in the first round only, and a round whose
    estimated time (the last round's, scaled by the candidates left) would overrun the budget -- counted from the
    start of verification -- is not started."""
    from codegen.run import gpurun
    from codegen.tune import measure as tune_measure
    from codegen.tune.measure import measure
    from codegen.tune.search import TuneResult

    ls = loaded(SM90)
    points = [(("pipeline.stages", s), ("swizzle_panel", w)) for s in (2, 3, 4) for w in (4, 8, 16)]
    part = constrain(ls, Target.SM_90, points)
    result = TuneResult(spec_name="g", spec_file=FILE, target=Target.SM_90, loaded=ls,
                        space=(("pipeline.stages", (2, 3, 4)), ("swizzle_panel", (4, 8, 16))), part=part, ranked=None)
    uris = sorted(result.part.files)
    ms = {u: 1.0 + i / 10 for i, u in enumerate(uris)}
    clock = [0.0]
    monkeypatch.setattr(tune_measure.time, "monotonic", lambda: clock[0])
    asked, sessions = [], []

    verify_s = [0.0]

    def verify_all(files, gpu, **kw):
        sessions.append(kw["session"])
        clock[0] += verify_s[0]
        return gpurun.VerifyReport(gpu={}, cases=[{"uri": f.uri, "shape": list(s), "status": "verified", "error": ""}
                                                  for f in files for s in f.instance.shapes])

    def bench_all(files, gpu, **kw):
        asked.append((len(files), set(kw["baselines_for"])))
        sessions.append(kw["session"])
        clock[0] += 10.0 * len(files)  # 10 s a candidate
        rows = [{"uri": f.uri, "shape": s, "status": "ok", "error": "", "kernel": {"median_ms": ms[f.uri]},
                 "baselines": {"torch": {"median_ms": 1.2}} if f.uri in kw["baselines_for"] else {}}
                for f in files for s in f.instance.shapes]
        return gpurun.BenchReport(gpu={}, copy_gbps=1.0, flush_bytes=1, rows=rows)

    monkeypatch.setattr(gpurun, "verify_all", verify_all)
    monkeypatch.setattr(gpurun, "bench_all", bench_all)
    gpu = SimpleNamespace(name="NVIDIA H200", run_target=Target.SM_90, torch_version="2.8.0", runtime_version="CUDA 12.8",
                          devices=("0",))
    n = len(uris)
    assert n >= 8
    doc, _ = measure(result, gpu, budget_s=10_000, jobs=1, timeout_s=10)
    assert asked[0] == (n, {part.hand.uri}) and all(b == set() for _, b in asked[1:]) and len(asked) > 2
    # verification and every round in one session (its workers and what they compiled)
    assert len(sessions) == len(asked) + 1 and len({id(x) for x in sessions}) == 1
    assert doc["shapes"][0]["speedup_vs_baselines"]  # the first round's torch figures are kept
    # a budget that holds the first round and not the second: one round, not two
    asked.clear()
    first_s = 10.0 * n
    measure(result, gpu, budget_s=first_s + 10.0 * (n // 2) - 1, jobs=1, timeout_s=10)
    assert len(asked) == 1
    # verification is part of the budget: one that holds the two rounds only without it runs one
    asked.clear()
    measure(result, gpu, budget_s=first_s + 10.0 * (n // 2) + 1, jobs=1, timeout_s=10)
    assert len(asked) > 1
    asked.clear()
    verify_s[0] = 5.0
    measure(result, gpu, budget_s=first_s + 10.0 * (n // 2) + 1, jobs=1, timeout_s=10)
    assert len(asked) == 1
