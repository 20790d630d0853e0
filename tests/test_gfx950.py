"""gfx950 (MI355X), the third target: one module (codegen/targets/gfx950.py) on the AMD pieces it shares
with gfx942 (codegen/targets/amdgcn.py). Its record, the rules read through it, lowering of one instance
per family, a real build to gfx950 ISA, how a GPU is recognised as one and what `tilegen verify -t gfx950`
runs on the H200 (the logic check), and that no code outside a target module branches on a target name."""

from __future__ import annotations

import ast
import json
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from toolchains import missing

from codegen.build.compile import BuildOptions, build
from codegen.core.hardware import DType, Target
from codegen.core.toolchain import ToolchainMissing
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.run.gpu import GpuInfo, NoGpu, detect_gpu, run_label
from codegen.run.gpurun import plan
from codegen.spec.load import parse_specs
from codegen.targets import _MODULES, HARDWARE, TARGETS, amdgcn, gfx950, torch_dtype
from tests.spectext import edit, errors

ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project()
HW = HARDWARE[Target.GFX950]


GFX950_MISSING = missing(Target.GFX950)
needs_gfx950 = pytest.mark.skipif(GFX950_MISSING is not None, reason=f"no gfx950 toolchain: {GFX950_MISSING}")


# ---- the record -------------------------------------------------------------------------------------

def test_hardware_record():
    assert (HW.product, HW.vendor, HW.compute_units, HW.wave_lanes) == ("AMD Instinct MI355X", "amd", 256, 64)
    assert HW.lds_bytes_per_workgroup == HW.lds_bytes_per_cu == 160 * 1024
    assert HW.register_file_bytes_per_cu == 4 * 512 * 64 * 4 and HW.max_registers_per_thread == 256
    assert dict(HW.tilelang_target) == {"kind": "hip", "mcpu": "gfx950"}
    assert str(HW.mma_shapes[DType.FP16][0]) == "16x16x16" and str(HW.mma_shapes[DType.FP8_E4M3][0]) == "16x16x32"
    assert HW.peak_dense_tflops[DType.FP8_E4M3] == 2 * HW.peak_dense_tflops[DType.FP16] == 5033.2
    assert HW.hbm_bandwidth_tbps == 8.0


def test_fp8_is_ocp_on_gfx950_and_fnuz_on_gfx942():
    assert HW.tilelang_dtypes[DType.FP8_E4M3] == "float8_e4m3fn"
    assert HARDWARE[Target.GFX942].tilelang_dtypes[DType.FP8_E4M3] == "float8_e4m3fnuz"
    torch = pytest.importorskip("torch")
    assert torch_dtype("fp8_e4m3", Target.GFX950) == torch.float8_e4m3fn


def test_what_families_read_is_the_amd_record():
    spec, amd = TARGETS[Target.GFX950], TARGETS[Target.GFX942]
    for field in ("gemm_fn", "supports_k_pack", "explicit_pipeline_schedule", "reduce_workspace_in_lds", "source_suffix"):
        assert getattr(spec, field) == getattr(amd, field), field


# ---- rules, read through the record ------------------------------------------------------------------

GEMM = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 1024, n: 1024, k: 1024}
  tiling: {block_m: 256, block_n: 256, block_k: 64, threads: 256}
  pipeline: {stages: 2}
  targets: [gfx950]
"""


def test_lds_budget_is_160_kib_on_gfx950_and_64_on_gfx942():
    [inst] = build_instances(parse_specs(GEMM, "specs/x.yaml"))  # 2 x (256x64 + 256x64) x 2 B = 128 KiB
    assert (inst.target, inst.lds_bytes) == (Target.GFX950, 128 * 1024)
    assert errors(edit(GEMM, "[gfx950]", "[gfx942, gfx950]")) == [
        ("specs/x.yaml:7:11: tiling: 256x256x64 tiles x 2 stage(s) need 131072 B (128 KiB) of LDS, "
        "over the 65536 B (64 KiB) per workgroup on gfx942 [lds_budget]")]
    assert errors(edit(GEMM, "{stages: 2}", "{stages: 3}")) == [
        ("specs/x.yaml:7:11: tiling: 256x256x64 tiles x 3 stage(s) need 196608 B (192 KiB) of LDS, "
        "over the 163840 B (160 KiB) per workgroup on gfx950 [lds_budget]")]


def test_the_wavefront_rule_names_gfx950():
    assert errors(edit(GEMM, "threads: 256", "threads: 96")) == [
        "specs/x.yaml:7:62: tiling.threads=96: must be a multiple of the 64-lane wavefront on gfx950 [wave_multiple]"]


def test_fp8_needs_k_major_operands_on_gfx950():
    text = edit(edit(GEMM, "{a: fp16, b: fp16, out: fp16}", "{a: fp8_e4m3, b: fp8_e4m3, out: bf16}"), "layout: nt", "layout: nn")
    assert errors(text) == [
        "specs/x.yaml:4:11: layout=nn: fp8 matrix cores on gfx950 need K-major operands: use layout nt [dtype_supported]"]


def test_the_attention_seed_needs_its_gfx950_override():
    text = (ROOT / "specs" / "attention.yaml").read_text()
    start = text.index("- name: attn_fp16_d128_causal\n")
    seed = text[start: text.index("\n# grouped", start)]
    seed = seed[: seed.index("  overrides:")] + "\n"
    assert errors(edit(seed, "[gfx942, gfx950, sm_90]", "[gfx950]")) == [
        ("specs/x.yaml:8:11: tiling: Q 128x128 + (K + V) 128x128 x 2 stage(s) + reduction workspaces need 165888 B "
        "(162 KiB) of LDS, over the 163840 B (160 KiB) per workgroup on gfx950 [lds_budget]")]


# ---- lowering: one instance per family ----------------------------------------------------------------

FILES = {f.instance.name: f for f in PROJECT.rendered(targets=[Target.GFX950])}

LOWER = [
    ("gemm_fp16_nt", (256, 256, 256), "__builtin_amdgcn_mfma_f32_16x16x32_f16"),  # k_pack 2: gfx950's K=32 MFMA
    ("gemm_bf16_nn", (256, 256, 256), "__builtin_amdgcn_mfma_f32_16x16x32_bf16"),  # k_pack 2, lds_layout transposed_b
    ("gemm_fp8_nt", (256, 256, 256), "__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8"),
    ("attn_fp16_d128_causal", (1, 2, 2, 256, 256), "__builtin_amdgcn_mfma_f32_16x16x16f16"),
    ("softmax_fp16_online", (4, 4096), "__global__"),
    ("rmsnorm_fp16", (4, 4096), "__global__"),
]


def test_the_seeds_cover_every_family():
    assert {f.instance.op for f in FILES.values()} == {"gemm", "attention", "softmax", "rmsnorm"}
    assert {name for name, _, _ in LOWER} <= set(FILES)


@pytest.mark.parametrize(("name", "shape", "marker"), LOWER, ids=[n for n, _, _ in LOWER])
def test_lowers_to_hip_for_gfx950(name, shape, marker):
    kernel = lower(FILES[name], shape, Target.GFX950)
    assert kernel.relpath.suffix == ".hip" and marker in kernel.source
    if name == "gemm_fp8_nt":
        assert "fp8_e4_t" in kernel.source or "float8_e4m3fn" in FILES[name].text


# ---- a real build ------------------------------------------------------------------------------------

@needs_gfx950
def test_builds_to_gfx950_isa_with_its_resources(tmp_path):
    [r] = build(PROJECT, BuildOptions(names=(FILES["gemm_fp16_nt"].uri,), targets=(Target.GFX950,), first_shape=True,
                                       cache_dir=tmp_path, jobs=1)).results
    assert r.status == "built", f"{r.error} (log: {r.log})"
    [k] = r.kernels
    entry = Path(r.entry)
    assert amdgcn.asm_arch((entry / "kernel.s").read_text()) == "gfx950"
    co = (entry / "kernel.co").read_bytes()
    assert co[:4] == b"\x7fELF" and struct.unpack_from("<I", co, 0x30)[0] & 0xFF == 0x4F  # EF_AMDGPU_MACH_AMDGCN_GFX950
    assert dict(k.asm.mfma) == {"v_mfma_f32_16x16x32_f16": 128} and k.spills == 0
    assert k.lds_bytes == 96 * 1024  # 256x64 + 128x64 fp16, double-buffered: more than gfx942 could hold
    assert k.waves_per_simd_lds == 1 and k.waves_per_simd == min(1, k.asm.occupancy_regs)  # one 4-wave group per CU
    assert r.summary()["mfma"] == {"v_mfma_f32_16x16x32_f16": 128}


def test_assembly_for_another_processor_is_refused(tmp_path):
    (tmp_path / "kernel.s").write_text('\t.amdgcn_target "amdgcn-amd-amdhsa--gfx942"\n')
    with pytest.raises(amdgcn.ReportParseError, match="kernel.s is gfx942 assembly, not gfx950"):
        TARGETS[Target.GFX950].read_kernels(tmp_path, None)


def test_committed_report_is_gfx950_isa():
    doc = json.loads((ROOT / "reports" / "static" / "gfx950.json").read_text())
    assert doc["target"] == "gfx950" and doc["toolchain"]["compiler"].startswith("Debian clang version 22.")
    mfma = {m for b in doc["builds"] for m in b["summary"]["mfma"]}
    # one per input dtype; the bf16 seed (gemm_bf16_nn, k_pack 2) uses gfx950's K=32 bf16 MFMA
    assert {"v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_fp8_fp8", "v_mfma_f32_16x16x32_bf16"} <= mfma


# ---- toolchain discovery --------------------------------------------------------------------------------

def test_an_env_json_without_gfx950_says_to_fetch_it(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"arch": "gfx942", "clang": "/usr/bin/clang++-19", "flags": []}))
    with pytest.raises(ToolchainMissing) as exc:
        gfx950.find_gfx950(ROOT, env_json=tmp_path / "env.json")
    assert str(exc.value) == (f"gfx950 toolchain missing: {tmp_path}/env.json has no gfx950 compiler (it has gfx942); "
                              "run `tilegen toolchain fetch` (in a tilegen checkout: `bash tools/fetch-gfx942-toolchain.sh`)")


def test_an_env_json_whose_device_libs_lack_the_isa_bitcode_is_incomplete(tmp_path):
    clang = tmp_path / "clang++-22"
    clang.write_text("#!/bin/sh\n")
    clang.chmod(0o755)
    (tmp_path / "include" / "hip").mkdir(parents=True)
    (tmp_path / "include" / "hip" / "hip_runtime.h").write_text("")
    env = {"hip_include_dir": str(tmp_path / "include"), "include_dirs": [], "hip_version": "6.4.3-5",
           "archs": {"gfx950": {"clang": str(clang), "clang_version": "x", "flags": [],
                                "device_lib_path": str(tmp_path / "bitcode"), "device_libs_version": "17"}}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    with pytest.raises(ToolchainMissing, match=r"^gfx950 toolchain incomplete: .*/bitcode/oclc_isa_version_950.bc not found"):
        gfx950.find_gfx950(ROOT, env_json=tmp_path / "env.json")
    (tmp_path / "bitcode").mkdir()
    (tmp_path / "bitcode" / "oclc_isa_version_950.bc").write_bytes(b"")
    tc = gfx950.find_gfx950(ROOT, env_json=tmp_path / "env.json")
    assert (tc.arch, tc.components) == ("gfx950", (("hip", "6.4.3-5"), ("device_libs", "17")))
    assert tc.code_object_command(Path("a.s"), Path("a.co"))[1:4] == ["-target", "amdgcn-amd-amdhsa", "-mcpu=gfx950"]


# ---- run time: recognising the GPU, and what verify runs where ----------------------------------------------

def _fake_rocm_gpu(monkeypatch, arch: str) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "hip", "6.4.43483", raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    props = SimpleNamespace(name="AMD Instinct", gcnArchName=f"{arch}:sramecc+:xnack-", L2_cache_size=4 << 20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_an_amd_gpu_is_the_target_of_its_arch(monkeypatch, arch):
    _fake_rocm_gpu(monkeypatch, arch)
    gpu = detect_gpu()
    assert (gpu.run_target.value, gpu.vendor, gpu.runtime_version) == (arch, "amd", "HIP 6.4.43483")


def test_an_amd_gpu_of_no_target_is_refused_with_a_reason(monkeypatch):
    _fake_rocm_gpu(monkeypatch, "gfx90a")
    with pytest.raises(NoGpu, match=r"AMD GPU AMD Instinct \(gfx90a\) is not gfx942"):
        detect_gpu()


H200 = GpuInfo(name="NVIDIA H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=60 << 20,
               torch_version="2.x", runtime_version="CUDA 12.8")


def test_verify_runs_the_gfx950_programs_on_the_h200_as_a_logic_check():
    """`tilegen verify NAME -t gfx950` on the H200: every gfx950 program, fp8 included (OCP e4m3 is CUDA's
    e4m3fn), is compiled for sm_90 and run, labelled a logic check; bench measures none of them."""
    files = PROJECT.select([], all_=True, targets=[Target.GFX950])
    jobs, skipped = plan(files, H200, derived=False, native_only=False)
    assert skipped == [] and {f.instance.name for f, _ in jobs} == set(FILES)
    assert run_label(Target.GFX950, Target.SM_90) == (
        "logic check: the gfx950 program run on sm_90, not gfx950 performance")
    _, not_benched = plan(files, H200, derived=False, native_only=True)
    assert len(not_benched) == len(files)
    fp8_942 = PROJECT.select(["gemm_fp8_nt"], all_=False, targets=[Target.GFX942])
    assert [reason for _, reason in plan(fp8_942, H200, derived=False, native_only=False)[1]] == [
        "float8_e4m3fnuz has no sm_90 type (TileLang's CUDA codegen rejects it)"]


# ---- no target name outside the target modules ------------------------------------------------------------

TARGET_WORDS = {t.value for t in Target} | {t.name for t in Target}


def _target_modules() -> set[str]:
    return {f"codegen/targets/{m.__name__.rsplit('.', 1)[1]}.py" for m in _MODULES}


def _code_uses_of_target_names(path: Path) -> list[str]:
    """`Target.X` attributes and string constants naming a target, outside docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Target" \
                and node.attr in TARGET_WORDS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: Target.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and node.value in TARGET_WORDS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def _family_table_keys(path: Path) -> set[int]:
    """The lines of a family's target table (`codegen/families/<family>/targets.py`) where a target names a key
    of a dict literal: one record per target, data rather than a branch (each family's test checks that
    every target has its record, so a new target without one fails there, never silently)."""
    if not (path.parent.parent.name == "families" and path.name == "targets.py"):
        return set()
    return {k.lineno for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Dict)
            for k in n.keys if isinstance(k, ast.Attribute) and isinstance(k.value, ast.Name) and k.value.id == "Target"}


def test_no_code_outside_a_target_module_names_a_target():
    """An `if target == "gfx942" ... else` outside codegen/targets/<target>.py would silently give the next
    target gfx942's answer; names are allowed in the target modules, the enum and as data (the default
    `targets` of a spec model, which is what a user gets without writing the field; the keys of a family's
    target table)."""
    owners = {"codegen/core/hardware.py"} | _target_modules()
    assert owners >= {"codegen/targets/gfx942.py", "codegen/targets/gfx950.py", "codegen/targets/sm90.py"}
    uses = []
    for path in sorted((ROOT / "codegen").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() not in owners:
            keys = _family_table_keys(path)
            uses += [u for u in _code_uses_of_target_names(path) if int(u.split(":")[1]) not in keys]

    def is_default_targets(use: str) -> bool:  # `targets: Annotated[list[Target], ...] = [Target.GFX942]`
        file, line = use.split(":")[:2]
        return "targets: Annotated[list[Target]" in (ROOT / file).read_text().splitlines()[int(line) - 1]

    assert [u for u in uses if not is_default_targets(u)] == []
