"""`tilegen build`: resource reports parsed from real compiler output, the build cache, toolchain
errors, and (where the compilers are present) every committed instance compiled for real.

The compile tests share one session fixture that builds the first shape of every committed
instance, in parallel, into a fresh cache; without the gfx942 toolchain or nvcc they are skipped
with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from toolchains import AVAILABLE, GFX942_MISSING, NVCC_MISSING
from typer.testing import CliRunner

from codegen.build import compile as build_mod
from codegen.build.cache import BuildCache, cache_key
from codegen.build.compile import BuildOptions, BuildResult, build, build_files, check_rules, read_entry
from codegen.build.doctor import doctor
from codegen.cli.console import UI
from codegen.cli.main import app
from codegen.core.errors import TilegenError
from codegen.core.events import Event
from codegen.core.files import dump_json
from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing
from codegen.families.spec import TailPolicy
from codegen.generate.pipeline import Project
from codegen.targets import amdgcn, gfx942
from codegen.targets.amdgcn import AmdKernel, parse_asm
from codegen.targets.base import Launch
from codegen.targets.gfx942 import FETCH_GFX942, find_gfx942
from codegen.targets.sm90 import find_cuda, parse_ptx, parse_ptxas, sm90_occupancy

DATA = Path(__file__).parent / "data"
PROJECT = Project()
ROOT = PROJECT.root


needs_gfx942 = pytest.mark.skipif(GFX942_MISSING is not None, reason=f"no gfx942 toolchain: {GFX942_MISSING}")
needs_nvcc = pytest.mark.skipif(NVCC_MISSING is not None, reason=f"no nvcc: {NVCC_MISSING}")


# ---- parsing real compiler output ---------------------------------------------------------------

def test_gfx942_report_of_a_specialized_tail_has_three_kernels():
    k0, k1, k2 = parse_asm((DATA / "gfx942_specialized.s").read_text())
    base = "gemm_fp16_ragged_spec_gfx942_6d2bff23_kernel"
    assert [k0.symbol, k1.symbol, k2.symbol] == [base, f"{base}_1", f"{base}_2"]
    # (symbol, NumVgprs, NumAgprs, TotalNumVgprs, NumSgprs, Occupancy, codeLenInByte)
    assert [(k.vgprs, k.agprs, k.total_vgprs, k.sgprs, k.occupancy_regs, k.code_bytes) for k in (k0, k1, k2)] == [
        (51, 92, 144, 24, 3, 4440),
        (35, 92, 128, 34, 4, 4840),
        (37, 92, 132, 28, 3, 4424),
    ]
    for k in (k0, k1, k2):
        assert (k.scratch_bytes, k.vgpr_spills, k.sgpr_spills, k.lds_static_bytes) == (0, 0, 0, 0)
        assert (k.max_threads, k.wave_lanes) == (256, 64)
        assert k.mfma == (("v_mfma_f32_16x16x16_f16", 3),)  # the excerpt keeps 3 of each kernel's MFMAs
        assert k.mfma_count == 3


def test_gfx942_report_of_a_spilling_kernel():
    (k,) = parse_asm((DATA / "gfx942_spill.s").read_text())
    assert k.symbol == "gemm_fp16_nt_gfx942_a74b01fd_kernel"
    assert (k.vgprs, k.agprs, k.total_vgprs, k.sgprs) == (64, 0, 64, 25)
    assert (k.vgpr_spills, k.sgpr_spills, k.scratch_bytes) == (231, 0, 348)
    assert (k.occupancy_regs, k.code_bytes, k.lds_static_bytes, k.max_threads) == (8, 5920, 0, 256)
    assert k.mfma == (("v_mfma_f32_16x16x16_f16", 2),)


def test_gfx942_report_rejects_what_is_not_clang_assembly():
    with pytest.raises(TilegenError, match="no .amdgpu_metadata block"):
        parse_asm("v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]\n")


def test_ptxas_report():
    base = "gemm_fp16_ragged_spec_sm90_efdcb12b_kernel"
    ks = {k.symbol: k for k in parse_ptxas((DATA / "sm90_specialized.ptxas.txt").read_text())}
    assert sorted(ks) == [base, f"{base}_1", f"{base}_2"]
    assert [(ks[s].registers, ks[s].barriers, ks[s].smem_static_bytes) for s in (base, f"{base}_1", f"{base}_2")] == [
        (168, 4, 1024), (168, 1, 1024), (168, 1, 1024)]
    for k in ks.values():
        assert (k.stack_frame_bytes, k.spill_store_bytes, k.spill_load_bytes) == (0, 0, 0)


def test_ptxas_report_with_spills_and_no_smem():
    text = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
            "ptxas info    : Function properties for k\n"
            "    40 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads\n"
            "ptxas info    : Used 255 registers, used 0 barriers, 40 bytes cumulative stack size, 400 bytes cmem[0]\n")
    (k,) = parse_ptxas(text)
    assert (k.registers, k.barriers, k.smem_static_bytes) == (255, 0, 0)
    assert (k.stack_frame_bytes, k.spill_store_bytes, k.spill_load_bytes) == (40, 24, 32)


@pytest.mark.parametrize(("regs", "threads", "smem", "expected"), [
    (32, 256, 0, (8, 64, "warps")),  # 8 warps a block: 64 warps fill the SM
    (32, 64, 0, (32, 64, "warps")),  # 2 warps a block: warps and the 32-block cap meet
    (32, 32, 0, (32, 32, "blocks")),  # 1 warp a block: the 32-block cap
    (168, 384, 1024, (1, 12, "registers")),  # 168 -> 5376 a warp (units of 256), x 12 warps: 64512 of 65536
    (128, 256, 0, (2, 16, "registers")),  # 4096 a warp x 8 = 32768: two blocks
    (40, 256, 100 * 1024, (2, 16, "shared memory")),  # 100 KiB + 1 KiB reserved: two fit in 228 KiB
    (40, 256, 161 * 1024 + 1, (1, 8, "shared memory")),  # rounded up to 128 B, plus 1 KiB: one
])
def test_sm90_occupancy(regs, threads, smem, expected):
    assert sm90_occupancy(registers=regs, threads=threads, smem_bytes=smem) == expected


def test_ptx_report_counts_wgmma_and_tma_per_entry():
    base = "gemm_fp16_ragged_spec_sm90_efdcb12b_kernel"
    ks = parse_ptx((DATA / "sm90_specialized.ptx").read_text())
    assert [(k.symbol, k.wgmma, k.tma, k.setmaxnreg, k.mma_sync) for k in ks] == [
        (base, 2, 2, 2, 0), (f"{base}_1", 2, 2, 2, 0), (f"{base}_2", 2, 2, 2, 0)]
    (pred,) = parse_ptx(".visible .entry k(\n)\n{\n\t@%p1 cp.async.bulk.tensor.2d.shared::cta.global [%r1], [%rd1];\n}\n")
    assert pred.tma == 1


@pytest.mark.parametrize(("regs", "threads", "lds", "expected"), [
    (3, 256, 0, (3, 3)),  # no LDS: registers decide
    (3, 256, 32 * 1024, (2, 2)),  # two 4-wave workgroups per CU: 8 waves over 4 SIMDs
    (4, 256, 64 * 1024, (1, 1)),  # one workgroup per CU
    (8, 128, 24 * 1024, (1, 1)),  # two 2-wave workgroups: 4 waves, one per SIMD
    (2, 1024, 16 * 1024, (2, 16)),  # 16-wave workgroups: registers decide
    (8, 256, 65 * 1024, (0, 0)),  # does not fit at all
])
def test_waves_per_simd(regs, threads, lds, expected):
    assert amdgcn.waves_per_simd(gfx942.HW, occupancy_regs=regs, threads=threads, lds_bytes=lds) == expected


# ---- build rules: spills and the occupancy floor -------------------------------------------------

def _gfx942_instance(name: str):
    return next(i for i in PROJECT.instances(targets=[Target.GFX942]) if i.name == name)


def _spilled_kernel(lds: int = 65536) -> AmdKernel:
    (asm,) = parse_asm((DATA / "gfx942_spill.s").read_text())
    waves, by_lds = amdgcn.waves_per_simd(gfx942.HW, occupancy_regs=asm.occupancy_regs, threads=256, lds_bytes=lds)
    return AmdKernel(asm=asm, launch=Launch(threads=256, grid=(32, 32, 1), dynamic_lds_bytes=lds, source="tilelang"),
                        waves_per_simd=waves, waves_per_simd_lds=by_lds)


def test_spills_fail_the_build_unless_allowed():
    inst = _gfx942_instance("gemm_fp16_nt")
    error = check_rules(inst, (_spilled_kernel(),))
    assert error == ("gemm_fp16_nt_gfx942_a74b01fd_kernel: 231 VGPR + 0 SGPR spills (348 B scratch per lane); "
                     "set allow_spills: true in specs/gemm_llm.yaml to accept [spills]")
    assert check_rules(replace(inst, allow_spills=True), (_spilled_kernel(),)) is None
    # a predicated GEMM is shown the specialized tail too
    error = check_rules(replace(inst, tail=TailPolicy.PREDICATED), (_spilled_kernel(),))
    assert "; tail: specialized runs the interior tiles unpredicated (fewer registers); or set allow_spills" in error
    # ... and, at a shape whose operand rows are not whole 16-byte vectors, staging padded
    error = check_rules(replace(inst, tail=TailPolicy.PREDICATED), (_spilled_kernel(),), (4096, 4096, 4095))
    assert ("(fewer registers); or staging: padded reads whole aligned tiles (its operands' rows are not whole "
            "16-byte vectors); or set allow_spills") in error
    assert "staging" not in check_rules(replace(inst, tail=TailPolicy.PREDICATED), (_spilled_kernel(),), (4096,) * 3)


def test_occupancy_below_the_floor_fails_the_build():
    inst = replace(_gfx942_instance("gemm_fp16_nt"), allow_spills=True, min_waves_per_simd=2)
    error = check_rules(inst, (_spilled_kernel(lds=65536),))
    assert error == ("gemm_fp16_nt_gfx942_a74b01fd_kernel: 1 waves per SIMD (registers allow 8, 65536 B of LDS "
                     "allow 1) < min_waves_per_simd=2 of specs/gemm_llm.yaml [min_waves_per_simd]")
    assert check_rules(inst, (_spilled_kernel(lds=16 * 1024),)) is None  # 4 workgroups fit: 4 waves per SIMD


# ---- the cache ----------------------------------------------------------------------------------

def _staged(cache: BuildCache, key: str, files: dict[str, str]) -> Path:
    with cache.lock(key), cache.staging(key) as stage:
        for name, text in files.items():
            (stage / name).write_text(text)
        return cache.publish(key, stage, {"test": True})


def test_a_cache_folder_that_cannot_be_written_is_one_error_before_any_build(tmp_path, monkeypatch):
    """--cache-dir naming a file (or under one): build_files refuses it in one line, before it plans or starts a
    worker (each worker would otherwise fail its kernel on the same folder)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(TilegenError, match=rf"^build cache {blocker}: cannot write {blocker}/entries: Not a directory$"):
        BuildCache(blocker).open()
    BuildCache(tmp_path / "fresh").open()  # the negative control: a folder that can be made
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["entries", "locks", "logs", "staging"]
    assert not list((tmp_path / "fresh").rglob(".probe.*"))
    monkeypatch.setattr(build_mod, "find_toolchain", lambda *a, **k: None)
    monkeypatch.setattr(build_mod, "plan", lambda *a, **k: pytest.fail("planned past a cache it cannot write"))
    f = next(f for f in SM90_FILES if f.instance.op == "rope")
    with pytest.raises(TilegenError, match="cannot write"):
        build_files([f], ROOT, BuildOptions(cache_dir=blocker / "cache"))


def test_cache_miss_publish_hit(tmp_path):
    cache = BuildCache(tmp_path)
    key = cache_key({"uri": "x", "shape": [1, 2, 3]})
    assert cache.lookup(key).path is None and cache.lookup(key).problem is None
    entry = _staged(cache, key, {"kernel.s": "asm", "launch.json": "{}"})
    assert cache.lookup(key).path == entry
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["key"] == key and sorted(manifest["artifacts"]) == ["kernel.s", "launch.json"]
    assert list((tmp_path / "staging").iterdir()) == []


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda e: (e / "kernel.s").write_text("as"), "kernel.s is 2 B, manifest says 3 B"),
    (lambda e: (e / "kernel.s").write_text("ASM"), "kernel.s does not match its sha256"),
    (lambda e: (e / "kernel.s").unlink(), "kernel.s is missing"),
    (lambda e: (e / "manifest.json").unlink(), "manifest is missing"),
    (lambda e: (e / "manifest.json").write_text('{"key": "'), "unreadable manifest (JSONDecodeError)"),
])
def test_corrupt_entry_is_detected_and_replaced(tmp_path, damage, problem):
    cache = BuildCache(tmp_path)
    key = cache_key({"uri": "y"})
    damage(_staged(cache, key, {"kernel.s": "asm"}))
    assert cache.lookup(key).path is None
    assert cache.lookup(key).problem == problem
    entry = _staged(cache, key, {"kernel.s": "asm"})  # the rebuild replaces it
    assert cache.lookup(key).path == entry and (entry / "kernel.s").read_text() == "asm"


def test_interrupted_staging_leaves_no_entry(tmp_path):
    cache = BuildCache(tmp_path)
    key = cache_key({"uri": "z"})
    with pytest.raises(KeyboardInterrupt), cache.staging(key) as stage:
        (stage / "kernel.s").write_text("half of it")
        raise KeyboardInterrupt
    assert cache.lookup(key).path is None and not cache.entry(key).exists()
    assert list((tmp_path / "staging").iterdir()) == []


def test_sweep_removes_the_staging_folders_of_killed_writers_only(tmp_path):
    """A staging folder exists while its writer holds the key's lock; one whose lock is free was left
    by a writer killed mid-build (SIGKILL: no cleanup ran)."""
    cache = BuildCache(tmp_path)
    dead, alive = cache_key({"uri": "dead"}), cache_key({"uri": "alive"})
    (tmp_path / "staging").mkdir()
    for key in (dead, alive):
        (tmp_path / "staging" / f"{key}.x1y2z3").mkdir()
        (tmp_path / "staging" / f"{key}.x1y2z3" / "kernel.hip").write_text("half")
    with cache.lock(alive):  # a writer at work (another process holds it the same way)
        cache.sweep_staging()
    assert [p.name for p in (tmp_path / "staging").iterdir()] == [f"{alive}.x1y2z3"]
    cache.sweep_staging()
    assert list((tmp_path / "staging").iterdir()) == []


def test_progress_is_one_plain_line_per_kernel_built_when_not_a_terminal():
    from io import StringIO

    from rich.console import Console

    def result(status: str, seconds: float, error: str | None = None) -> BuildResult:
        return BuildResult(uri=f"k_{status}", name="k", target=Target.GFX942, shape=(64, 128), status=status,
                           seconds=seconds, error=error)

    for terminal in (False, True):
        text = StringIO()
        console = Console(file=text, force_terminal=terminal, width=200)
        with UI(console, console) as ui:
            ui.event(Event(stage="build", kind="start", done=0, total=3, label="building 2 of 3 (rest cached)"))
            for n, r in enumerate((result("cached", 0.0), result("built", 1.25), result("failed", 0.5, "clang failed: x")), 1):
                ui.event(Event(stage="build", kind="advance", done=n, total=3,
                               label=f"{r.uri} {'x'.join(map(str, r.shape))} {r.target}", status=r.status,
                               seconds=r.seconds, error=r.error))
        lines = text.getvalue().splitlines()
        if not terminal:
            assert lines == ["building 2 of 3 (rest cached)", "[2/3] built k_built 64x128 gfx942 (1.2 s)",
                             "[3/3] failed k_failed 64x128 gfx942 (0.5 s): clang failed: x"]
        else:  # a bar that goes away; failures are printed as they happen
            assert "failed: k_failed 64x128 gfx942" in text.getvalue() and "[2/3]" not in text.getvalue()


def test_cache_key_covers_every_field():
    base = {"uri": "u", "shape": [1, 2, 3], "target": "gfx942", "tilelang": "0.1.15", "toolchain": {"flags": ["-O3"]}}
    keys = {cache_key(base)} | {cache_key(base | {k: "changed"}) for k in base}
    assert len(keys) == len(base) + 1


# ---- toolchain errors ---------------------------------------------------------------------------

def test_missing_gfx942_toolchain_is_one_line_naming_the_fetch_command(tmp_path):
    with pytest.raises(ToolchainMissing) as exc:
        find_gfx942(ROOT, env_json=tmp_path / "env.json")
    assert str(exc.value) == (f"gfx942 toolchain missing: no ROCm at /opt/rocm and no {tmp_path}/env.json; "
                              f"run `{FETCH_GFX942}` (in a tilegen checkout: `bash tools/fetch-gfx942-toolchain.sh`)")


def test_an_installed_tilegen_finds_the_toolchain_in_the_user_cache(tmp_path, monkeypatch):
    """No ROCm and no project .toolchain/: the user cache's env.json (`tilegen toolchain fetch`) is used."""
    from codegen.targets import amdgcn

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(amdgcn, "_rocm_toolchain", lambda *a: None)
    project = tmp_path / "project"
    project.mkdir()
    with pytest.raises(ToolchainMissing, match="no ROCm at /opt/rocm and no .toolchain/env.json"):
        amdgcn.find_amd(project, "gfx942")
    cached = amdgcn.user_toolchain_dir() / "env.json"
    cached.parent.mkdir(parents=True)
    cached.write_text("{}", encoding="utf-8")  # unreadable as a toolchain: the message names the file it read
    with pytest.raises(ToolchainMissing, match=str(cached)):
        amdgcn.find_amd(project, "gfx942")


def test_incomplete_gfx942_toolchain_names_what_is_missing(tmp_path):
    env = tmp_path / "env.json"
    env.write_text(json.dumps({"clang": "/nonexistent/clang++-19", "clang_version": "x", "hip_include_dir": "/nope",
                               "flags": [], "include_dirs": []}))
    with pytest.raises(ToolchainMissing, match=r"^gfx942 toolchain incomplete: /nonexistent/clang\+\+-19 not found; "
                                               r"run `tilegen toolchain fetch` \(in a tilegen checkout: "
                                               r"`bash tools/fetch-gfx942-toolchain.sh`\)$"):
        find_gfx942(ROOT, env_json=env)


def test_build_stops_before_lowering_when_the_toolchain_is_missing(tmp_path):
    opts = BuildOptions(names=("gemm_fp16_nt",), targets=(Target.GFX942,), gfx942_env=tmp_path / "env.json",
                        cache_dir=tmp_path / "cache")
    with pytest.raises(ToolchainMissing, match=r"bash tools/fetch-gfx942-toolchain.sh`\)$"):
        build(PROJECT, opts)
    assert not (tmp_path / "cache").exists()
    # a selection of other targets too: the message says how to build those alone
    with pytest.raises(ToolchainMissing, match=r"bash tools/fetch-gfx942-toolchain.sh`\); or build the other targets "
                                               r"alone: -t sm_90$"):
        build(PROJECT, replace(opts, targets=(Target.GFX942, Target.SM_90)))
    assert not (tmp_path / "cache").exists()


def test_missing_nvcc_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(ToolchainMissing, match=r"^sm_90 toolchain missing: nvcc not found \(.*/bin/nvcc is not "
                                               r"executable\); install a CUDA toolkit >= 12.0"):
        find_cuda()


def test_cli_missing_toolchain_is_one_line_and_exit_1(tmp_path, monkeypatch):
    def missing(root, *, env_json=None):
        return find_gfx942(root, env_json=tmp_path / "env.json")

    monkeypatch.setattr(gfx942, "find_gfx942", missing)
    result = CliRunner().invoke(app, ["build", "gemm_fp16_nt", "--target", "gfx942", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        (f"error: gfx942 toolchain missing: no ROCm at /opt/rocm and no {tmp_path}/env.json; run `{FETCH_GFX942}` "
        "(in a tilegen checkout: `bash tools/fetch-gfx942-toolchain.sh`)")]


def test_doctor_names_the_fetch_command_when_gfx942_is_missing(tmp_path, monkeypatch, capsys):
    from rich.console import Console

    monkeypatch.setattr(gfx942, "find_gfx942", lambda root, env_json=None: find_gfx942(root, env_json=tmp_path / "env.json"))
    code = UI(Console(width=300, file=sys.stdout), Console(stderr=True)).show_doctor(doctor(ROOT, (Target.GFX942,)))
    out = capsys.readouterr().out
    assert code == 1
    assert out.strip().splitlines()[-1] == f"not ready to build gfx942: gfx942 clang + HIP headers ({FETCH_GFX942})"


@needs_gfx942
def test_doctor_is_ready_for_gfx942():
    result = CliRunner().invoke(app, ["doctor", "--target", "gfx942"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "ready to build gfx942"


def test_write_report_needs_every_shape():
    with pytest.raises(TilegenError, match="--write-report writes the builds of every shape"):
        build(PROJECT, BuildOptions(names=("gemm_fp16_nt",), write_report=True, first_shape=True))


def test_write_report_of_named_instances_replaces_their_rows_and_keeps_the_others(tmp_path):
    """`tilegen build NAMES --write-report`: the rows of the instances built replace theirs or join, sorted as
    --all writes them; every other row stays; a report from another toolchain is refused, not mixed."""
    from types import SimpleNamespace

    from codegen.build.compile import update_reports
    from codegen.core.files import dump_json

    def row(name, uri, shape, regs):
        return {"uri": uri, "name": name, "shape": list(shape), "status": "ok", "error": "", "summary": {"registers": regs},
                "kernels": []}

    tool = {"compiler": "nvcc release 13.0", "tilelang": "0.1.15"}
    path = tmp_path / "reports" / "static" / "sm_90.json"
    path.parent.mkdir(parents=True)
    kept, old = row("a", "a_1", (8, 8), 32), row("b", "b_1", (8, 8), 40)
    path.write_text(dump_json({"target": "sm_90", "toolchain": tool, "builds": [kept, old]}))
    new, added = row("b", "b_1", (8, 8), 48), row("a", "a_2", (16, 8), 64)

    def report(toolchain):
        doc = {"target": "sm_90", "toolchain": toolchain, "builds": [added, new]}
        return SimpleNamespace(results=[SimpleNamespace(target=Target.SM_90)], document=lambda t, volatile: doc)

    assert update_reports(tmp_path, report(tool)) == (path,)
    assert json.loads(path.read_text())["builds"] == [kept, added, new]
    assert update_reports(tmp_path, report(tool)) == ()  # unchanged: not written again
    with pytest.raises(TilegenError, match="rewrite it whole"):
        update_reports(tmp_path, report(tool | {"compiler": "nvcc release 12.8"}))


# ---- the committed reports ----------------------------------------------------------------------

@pytest.mark.parametrize("target", list(Target))
def test_committed_report_covers_the_committed_instances(target):
    """reports/static/<target>.json is rewritten by `tilegen build --all --write-report`; a change
    to specs or templates that is committed without it leaves this test failing."""
    path = ROOT / "reports" / "static" / f"{target.value}.json"
    if not path.is_file():
        pytest.skip(f"{path.relative_to(ROOT)} not written yet: `tilegen build --all --write-report`")
    doc = json.loads(path.read_text())
    files = PROJECT.rendered(targets=[target])
    # one build per compile shape: a dynamic-M kernel's is ('m', n, k), once for all its M
    assert sorted((b["uri"], tuple(b["shape"])) for b in doc["builds"]) == sorted(
        (f.uri, s) for f in files for s in f.instance.compile_shapes()), "stale: run `tilegen build --all --write-report`"
    assert all(b["status"] == "ok" for b in doc["builds"])
    text = path.read_text()
    assert str(ROOT) not in text and "seconds" not in text and dump_json(doc) == text


# ---- compiling every committed instance ---------------------------------------------------------

# the hand configurations: a tuned winner is built by `tilegen build --all --write-report` (the committed report,
# test_committed_report_covers_the_committed_instances) and was verified on its GPU when it was tuned
GFX942_FILES = [f for f in PROJECT.rendered(targets=[Target.GFX942]) if f.is_hand]
SM90_FILES = [f for f in PROJECT.rendered(targets=[Target.SM_90]) if f.is_hand]


@pytest.fixture(scope="session")
def first_shape_cache(build_cache) -> Path:
    return build_cache


# the tests of the grid run in one xdist worker (`--dist loadgroup`), which builds it once
GRID = pytest.mark.xdist_group("build-grid")


@pytest.fixture(scope="session")
def first_shapes(first_shape_cache) -> dict[str, BuildResult]:
    """URI -> the build of the first shape of every committed instance whose compiler is present,
    built once, in parallel, into the run's cache (an entry another module built already is read)."""
    if not AVAILABLE:
        pytest.skip(f"no device compiler: {GFX942_MISSING}; {NVCC_MISSING}")
    files = [f for f in GFX942_FILES + SM90_FILES if f.instance.target in AVAILABLE]
    report = build_files(files, ROOT, BuildOptions(first_shape=True, cache_dir=first_shape_cache))
    return {r.uri: r for r in report.results}


def _no_mma_by_design(rendered, kernel) -> bool:
    """A kernel of a GEMM module without MMAs by design: the two staging kernels first in a module with staged
    workspaces (tf32/3xtf32: A and B rounded or split into TF32 workspaces before the main kernel; staging
    padded: A and B copied into zero-padded workspaces), and split-K's last kernel (split_k > 1, the fixed-order
    sum of its fp32 partials). TileLang names a module's kernels _kernel, _kernel_1, ... in launch order."""
    inst = rendered.instance
    symbols = [f"{rendered.uri}_kernel"] + [f"{rendered.uri}_kernel_{i}" for i in range(1, 4)]
    staged = 2 if getattr(inst, "workspace", "") else 0
    return kernel.symbol in symbols[:staged] + symbols[staged + 1:staged + 2] * (getattr(inst, "split_k", 1) > 1)


@GRID
@needs_gfx942
@pytest.mark.parametrize("rendered", GFX942_FILES, ids=lambda f: f.uri)
def test_gfx942_instance_compiles_without_spills_and_uses_mfma(first_shapes, rendered):
    r = first_shapes[rendered.uri]
    assert r.status in ("built", "cached"), f"{r.error} (log: {r.log})"
    assert r.shape == rendered.instance.compile_shape(rendered.instance.shapes[0])
    gemm = rendered.instance.op == "gemm"
    for k in r.kernels:
        if not rendered.instance.allow_spills:
            assert k.spills == 0 and k.asm.scratch_bytes == 0, k.symbol
        if gemm:  # gemv: no matrix cores; nor split-K's second kernel, the sum of the partials
            assert (k.asm.mfma_count >= 1) == (rendered.instance.uses_matrix_cores() and not _no_mma_by_design(rendered, k)), k.symbol
        assert k.launch.source == "tilelang"
        assert k.waves_per_simd >= (rendered.instance.min_waves_per_simd or 1)
    # rope keeps everything in registers; attention decode's combine kernel uses no LDS beside its split kernel
    assert (max(k.lds_bytes for k in r.kernels) > 0) == (rendered.instance.lds_bytes > 0), rendered.uri
    entry = Path(r.entry) if Path(r.entry).is_absolute() else ROOT / r.entry
    assert (entry / "kernel.co").read_bytes()[:4] == b"\x7fELF"
    # the lowered source (test_kernels leaves this (kernel, shape) to the grid): MFMA builtins where it uses them
    assert ("__builtin_amdgcn_mfma" in (entry / "kernel.hip").read_text()) == rendered.instance.uses_matrix_cores()
    # one kernel per T.Kernel the instance launches: GEMM's specialized edges, attention decode's splits +
    # combine, a split row kernel's two
    assert len(r.kernels) == len(rendered.instance.launch_grids(rendered.instance.shapes[0]))


@GRID
@needs_nvcc
@pytest.mark.parametrize("rendered", SM90_FILES, ids=lambda f: f.uri)
def test_sm90_instance_compiles_to_a_cubin(first_shapes, rendered):
    r = first_shapes[rendered.uri]
    assert r.status in ("built", "cached"), f"{r.error} (log: {r.log})"
    entry = Path(r.entry) if Path(r.entry).is_absolute() else ROOT / r.entry
    assert (entry / "kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    assert "__global__" in (entry / "kernel.cu").read_text()  # test_kernels leaves this (kernel, shape) to the grid
    for k in r.kernels:
        assert k.spills == 0, k.symbol
        assert 0 < k.ptxas.registers <= 255
        if rendered.instance.op == "gemm":  # gemv, true fp32 (CUDA-core FMA), split-K's sum and xf32 staging have none
            assert (k.ptx.wgmma + k.ptx.mma_sync >= 1) == (rendered.instance.uses_matrix_cores()
                                                           and not _no_mma_by_design(rendered, k)), k.symbol


def _warm_build_in_subprocess(cache: Path, code: str) -> subprocess.CompletedProcess:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from codegen.build.compile import BuildOptions, build_files\n"
        "from codegen.core.hardware import Target\n"
        "from codegen.generate.pipeline import Project\n"
        "if __name__ == '__main__':\n"
        f"    targets = [Target(t) for t in {[t.value for t in AVAILABLE]!r}]\n"
        "    project = Project()\n"
        "    files = [f for f in project.rendered(targets=targets) if f.is_hand]\n"
        f"    report = build_files(files, project.root, BuildOptions(first_shape=True, cache_dir=Path({str(cache)!r})))\n"
        f"{code}"
    )
    return subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)


@GRID
@pytest.mark.skipif(not AVAILABLE, reason="no device compiler")
def test_warm_rebuild_is_cached_and_never_imports_tilelang(first_shapes, first_shape_cache):
    proc = _warm_build_in_subprocess(first_shape_cache, (
        "    assert {r.status for r in report.results} == {'cached'}, [(r.uri, r.status, r.note) for r in report.results]\n"
        "    assert 'tilelang' not in sys.modules and 'tvm' not in sys.modules\n"))
    assert proc.returncode == 0, proc.stderr


@needs_gfx942
def test_cache_miss_hit_and_corrupt_entry_rebuilt(tmp_path):
    """Cold: built. Warm: cached, same report. A truncated kernel.s in an otherwise complete entry:
    detected, rebuilt (never trusted), same report again; `tilegen build` says why it rebuilt it."""
    rendered = next(f for f in GFX942_FILES if f.instance.name == "gemm_bf16_nn_unrolled")
    opts = BuildOptions(names=(rendered.uri,), first_shape=True, cache_dir=tmp_path, jobs=1)
    first = build(PROJECT, opts).results[0]
    assert first.status == "built", first.error
    warm = build(PROJECT, opts).results[0]
    assert warm.status == "cached" and warm.kernels == first.kernels and warm.entry == first.entry
    entry = Path(first.entry)
    want = json.loads((entry / "manifest.json").read_text())["artifacts"]["kernel.s"]["bytes"]
    (entry / "kernel.s").write_text((entry / "kernel.s").read_text()[: want // 2])
    have = (entry / "kernel.s").stat().st_size
    cli = CliRunner().invoke(app, ["build", rendered.uri, "--first-shape", "--cache-dir", str(tmp_path), "-j", "1",
                                   "--json"])
    assert cli.exit_code == 0, cli.output
    (again,) = json.loads(cli.stdout)["gfx942"]["builds"]
    note = f"rebuilt: the cache entry was corrupt (kernel.s is {have} B, manifest says {want} B)"
    assert again["status"] == "built" and again["note"] == note
    shape = "x".join(map(str, first.shape))
    assert f"note: {rendered.uri} {shape} gfx942: {note}" in cli.stderr.splitlines()  # on the console too
    assert build(PROJECT, opts).results[0].kernels == first.kernels
    assert read_entry(entry, rendered.instance) == first.kernels


@needs_gfx942
def test_ctrl_c_leaves_no_half_written_entry(tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C sends) mid-build: exit 130, every
    entry present verifies, no staging folder is left."""
    proc = subprocess.Popen([str(Path(sys.executable).with_name("tilegen")), "build", "--all", "--target", "gfx942",
                             "--first-shape", "--cache-dir", str(tmp_path)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a background job of a shell without job control inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - no lock
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "staging").glob("*/kernel.hip")):
        time.sleep(0.05)  # wait until a worker is mid-build (lowered, compiling)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    cache = BuildCache(tmp_path)
    for entry in (tmp_path / "entries").glob("*/*"):
        assert cache.lookup(entry.name).path == entry
    assert list((tmp_path / "staging").iterdir()) == []


def test_jobs_default_to_the_usable_cores():
    assert build_mod.default_jobs() >= 1
