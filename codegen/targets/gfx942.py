"""gfx942: AMD Instinct MI300X (CDNA3). Its hardware record, HIP toolchain (clang), compile command,
resource report (the clang -S assembly), occupancy model, doctor checks and device match."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from codegen.hardware import DType, Hardware, MmaShape, Target
from codegen.targets.base import (
    Check,
    DeviceMatch,
    Launch,
    ReportParseError,
    TargetSpec,
    read_launches,
    run_compiler,
    smoke_check,
)
from codegen.toolchain import TileLangInstall, ToolchainMissing, find_tilelang, run_version

HW = Hardware(
    target=Target.GFX942,
    product="AMD Instinct MI300X",
    vendor="amd",
    tilelang_target=MappingProxyType({"kind": "hip", "mcpu": "gfx942"}),
    wave_lanes=64,
    wave_word="wavefront",
    min_threads=64,
    max_threads_per_workgroup=1024,
    compute_units=304,
    lds_bytes_per_workgroup=64 * 1024,
    register_file_bytes_per_cu=512 * 1024,  # 4 SIMDs x 512 VGPRs x 64 lanes x 4 B
    max_registers_per_thread=256,  # arch VGPRs (the other 256 of the unified file are AGPRs, MFMA only)
    simds_per_cu=4,
    lds_bytes_per_cu=64 * 1024,
    mma_shapes=MappingProxyType(
        {
            DType.FP16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.BF16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.FP32: (MmaShape(m=16, n=16, k=4), MmaShape(m=32, n=32, k=2)),
            DType.FP8_E4M3: (MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
        }
    ),
    tilelang_dtypes=MappingProxyType(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fnuz",
        }
    ),
    peak_dense_tflops=MappingProxyType(
        {DType.FP16: 1307.4, DType.BF16: 1307.4, DType.FP32: 163.4, DType.FP8_E4M3: 2614.9}
    ),
    hbm_bandwidth_tbps=5.3,
    lds_word="LDS",
    # ROCm clr, hipamd/src/hip_device.cpp ihipGetDeviceProperties (ROCm 6.x): maxGridSize = {INT32_MAX,
    # UINT16_MAX + 1, UINT16_MAX + 1}; and HIP's API notes (hipModuleLaunchKernel and the occupancy calls):
    # "HIP does not support kernel launch with total work items defined in dimension with size
    # gridDim x blockDim >= 2^32" -- the HSA AQL dispatch packet's grid_size_x/y/z are uint32 work-item
    # counts, not workgroup counts.
    max_grid_workgroups=(2**31 - 1, 65536, 65536),
    max_grid_work_items=2**32 - 1,
)

# ---- toolchain ------------------------------------------------------------------------------------
# ROCm's clang when ROCm is installed at /opt/rocm, else the project-local toolchain that
# `tools/fetch-gfx942-toolchain.sh` unpacks into .toolchain/ and describes in .toolchain/env.json.

FETCH_GFX942 = "bash tools/fetch-gfx942-toolchain.sh"
ROCM_ROOT = Path("/opt/rocm")
GFX942_ARCH = "gfx942"


@dataclass(frozen=True, kw_only=True)
class Gfx942Toolchain:
    """clang for HIP device code. source -> .s: `clang + flags + -I... -S`; .s -> code object: link."""

    origin: str  # "/opt/rocm" or ".toolchain/env.json", shown by `tilegen doctor`
    clang: str
    version: str  # clang's first --version line
    components: tuple[tuple[str, str], ...]  # (name, version) of headers and device libraries
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    arch: str = GFX942_ARCH

    def asm_command(self, src: Path, out: Path) -> list[str]:
        return [self.clang, *self.flags, *(f"-I{d}" for d in self.include_dirs), "-S", "-o", str(out), str(src)]

    def code_object_command(self, asm: Path, out: Path) -> list[str]:
        return [self.clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={self.arch}", str(asm), "-o", str(out)]

    def fingerprint(self) -> dict[str, object]:
        """Everything that changes the compiler's output; part of every gfx942 cache key."""
        return {"clang": self.clang, "version": self.version, "components": [list(c) for c in self.components],
                "flags": list(self.flags), "include_dirs": list(self.include_dirs), "arch": self.arch,
                "code_object": self.code_object_command(Path("IN"), Path("OUT"))[1:]}

    def describe(self) -> dict[str, str]:
        """Versions only (no paths): the toolchain block of a committed report."""
        return {"compiler": self.version, **dict(self.components)}


def _rocm_toolchain(rocm: Path, tilelang: TileLangInstall) -> Gfx942Toolchain | None:
    clang = rocm / "llvm" / "bin" / "clang++"
    if not (os.access(clang, os.X_OK) and (rocm / "include" / "hip" / "hip_runtime.h").is_file()):
        return None
    info = rocm / ".info" / "version"
    rocm_version = info.read_text(encoding="utf-8").strip() if info.is_file() else "unknown"
    version = run_version([str(clang), "--version"]).splitlines()[0:1]
    return Gfx942Toolchain(
        origin=str(rocm), clang=str(clang), version=version[0] if version else "unknown",
        components=(("rocm", rocm_version),),
        flags=("-x", "hip", f"--offload-arch={GFX942_ARCH}", "--cuda-device-only", "-O3", "-std=c++17",
               f"--rocm-path={rocm}", "-include", "hip/hip_bfloat16.h"),
        include_dirs=(str(tilelang.template_dir),),
    )


def _project_toolchain(env_json: Path, shown: str) -> Gfx942Toolchain:
    fix = f"run `{FETCH_GFX942}`"
    if not env_json.is_file():
        raise ToolchainMissing(f"gfx942 toolchain missing: no ROCm at {ROCM_ROOT} and no {shown}; {fix}")
    try:
        env = json.loads(env_json.read_text(encoding="utf-8"))
        clang, flags, include_dirs = env["clang"], env["flags"], env["include_dirs"]
        version, hip_include = env["clang_version"], env["hip_include_dir"]
    except (OSError, ValueError, KeyError) as exc:
        raise ToolchainMissing(f"gfx942 toolchain: {shown} is unreadable ({type(exc).__name__}: {exc}); {fix}") from None
    missing = [p for p in (clang,) if not os.access(p, os.X_OK)]
    missing += [p for p in (f"{hip_include}/hip/hip_runtime.h", *include_dirs) if not Path(p).exists()]
    if missing:
        raise ToolchainMissing(f"gfx942 toolchain incomplete: {missing[0]} not found; {fix}")
    components = tuple((k.removesuffix("_version"), str(env[k])) for k in ("hip_version", "device_libs_version") if k in env)
    return Gfx942Toolchain(origin=shown, clang=clang, version=version, components=components,
                           flags=tuple(flags), include_dirs=tuple(include_dirs))


def find_gfx942(root: Path, *, env_json: Path | None = None, rocm: Path = ROCM_ROOT) -> Gfx942Toolchain:
    """ROCm at `rocm` when complete, else the project toolchain's env.json. An explicit `env_json`
    selects that file only (tests use a bogus one to check the missing-toolchain message)."""
    if env_json is None:
        found = _rocm_toolchain(rocm, find_tilelang())
        if found is not None:
            return found
        env_json = root / ".toolchain" / "env.json"
    try:
        shown = env_json.relative_to(root).as_posix()
    except ValueError:
        shown = str(env_json)
    return _project_toolchain(env_json, shown)


def find_toolchain(root: Path, *, env_json: Path | None = None) -> Gfx942Toolchain:
    """The target record's discovery: find_gfx942, looked up when called."""
    return find_gfx942(root, env_json=env_json)


def compile_source(tc: Gfx942Toolchain, stage: Path, source: str, log: Path) -> None:
    """HIP source -> kernel.s (the resource report) -> kernel.co, in `stage`."""
    (stage / "kernel.hip").write_text(source, encoding="utf-8")
    run_compiler(tc.asm_command(stage / "kernel.hip", stage / "kernel.s"), log, stage)
    run_compiler(tc.code_object_command(stage / "kernel.s", stage / "kernel.co"), log, stage)


# ---- resource report ------------------------------------------------------------------------------
# clang -S: per kernel, the "; Kernel info:" comment block (NumVgprs, NumAgprs, TotalNumVgprs, NumSgprs,
# ScratchSize, Occupancy, codeLenInByte), the `amdhsa.kernels` YAML metadata (.vgpr_spill_count,
# .sgpr_spill_count, .group_segment_fixed_size, .private_segment_fixed_size, ...) and the `v_mfma_*`
# instructions of its body.

# CU geometry the occupancy model needs, from the hardware record (on CDNA3 the CU's LDS is the same
# 64 KiB as the per-workgroup limit).
GFX942_SIMDS_PER_CU = HW.simds_per_cu
GFX942_LDS_BYTES_PER_CU = HW.lds_bytes_per_cu


@dataclass(frozen=True, kw_only=True)
class Gfx942Asm:
    """One kernel of a gfx942 .s file, as the compiler reported it."""

    symbol: str
    vgprs: int  # architectural VGPRs (NumVgprs)
    agprs: int  # accumulation VGPRs (NumAgprs), where MFMA results live
    total_vgprs: int  # unified register file use (TotalNumVgprs, metadata .vgpr_count)
    sgprs: int
    scratch_bytes: int  # per lane (ScratchSize, .private_segment_fixed_size)
    vgpr_spills: int
    sgpr_spills: int
    lds_static_bytes: int  # .group_segment_fixed_size; TileLang's dynamic LDS comes on top
    occupancy_regs: int  # waves per SIMD the registers allow (clang's Occupancy: ignores dynamic LDS)
    code_bytes: int
    max_threads: int  # .max_flat_workgroup_size (__launch_bounds__)
    wave_lanes: int
    mfma: tuple[tuple[str, int], ...]  # (mnemonic, static count), sorted

    @property
    def mfma_count(self) -> int:
        return sum(n for _, n in self.mfma)


_FUNC_RE = re.compile(r"^\s*\.type\s+([\w.$]+)\s*,\s*@function", re.MULTILINE)
_INFO_RE = re.compile(r"^; (NumVgprs|NumAgprs|TotalNumVgprs|NumSgprs|ScratchSize|Occupancy|codeLenInByte)\s*[:=]\s*(\d+)", re.MULTILINE)
_MFMA_RE = re.compile(r"^\s*(v_mfma_\w+)", re.MULTILINE)
_META_RE = re.compile(r"^\s*\.amdgpu_metadata\s*$(.*?)^\s*\.end_amdgpu_metadata", re.MULTILINE | re.DOTALL)


def _int(block: dict, key: str, symbol: str) -> int:
    try:
        return int(block[key])
    except (KeyError, TypeError, ValueError):
        raise ReportParseError(f"{symbol}: no integer {key} in the compiler's report") from None


def parse_gfx942_asm(text: str) -> list[Gfx942Asm]:
    """Every kernel (a function with an amdhsa kernel descriptor) of a clang -S file, in file order."""
    meta_match = _META_RE.search(text)
    if meta_match is None:
        raise ReportParseError("no .amdgpu_metadata block: not gfx942 assembly from clang -S")
    meta = yaml.load(meta_match.group(1), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    by_name = {k[".name"]: k for k in meta.get("amdhsa.kernels", [])}
    funcs = list(_FUNC_RE.finditer(text))
    end = meta_match.start()
    kernels = []
    for i, m in enumerate(funcs):
        symbol = m.group(1)
        chunk = text[m.end(): funcs[i + 1].start() if i + 1 < len(funcs) else end]
        if symbol not in by_name:  # a device function, not a kernel
            continue
        md = by_name[symbol]
        info = {k: int(v) for k, v in _INFO_RE.findall(chunk)}
        mfma = Counter(_MFMA_RE.findall(chunk))
        kernels.append(Gfx942Asm(
            symbol=symbol,
            vgprs=_int(info, "NumVgprs", symbol), agprs=_int(info, "NumAgprs", symbol),
            total_vgprs=_int(md, ".vgpr_count", symbol), sgprs=_int(md, ".sgpr_count", symbol),
            scratch_bytes=_int(md, ".private_segment_fixed_size", symbol),
            vgpr_spills=_int(md, ".vgpr_spill_count", symbol), sgpr_spills=_int(md, ".sgpr_spill_count", symbol),
            lds_static_bytes=_int(md, ".group_segment_fixed_size", symbol),
            occupancy_regs=_int(info, "Occupancy", symbol), code_bytes=_int(info, "codeLenInByte", symbol),
            max_threads=_int(md, ".max_flat_workgroup_size", symbol), wave_lanes=_int(md, ".wavefront_size", symbol),
            mfma=tuple(sorted(mfma.items())),
        ))
        if info.get("TotalNumVgprs", kernels[-1].total_vgprs) != kernels[-1].total_vgprs:
            raise ReportParseError(f"{symbol}: TotalNumVgprs {info['TotalNumVgprs']} != metadata .vgpr_count")
    missing = sorted(set(by_name) - {k.symbol for k in kernels})
    if missing:
        raise ReportParseError(f"kernel(s) {', '.join(missing)} in the metadata but not in the assembly")
    return kernels


def gfx942_waves_per_simd(*, occupancy_regs: int, threads: int, lds_bytes: int, wave_lanes: int = 64) -> tuple[int, int]:
    """(waves per SIMD, the LDS limit alone) for a full CU: the register limit (clang's Occupancy)
    and the workgroups whose LDS fits in the CU, their waves spread over its SIMDs (at least 1
    when one workgroup fits, 0 when none does)."""
    waves_per_group = -(-threads // wave_lanes)
    if lds_bytes <= 0:
        return occupancy_regs, occupancy_regs
    groups = GFX942_LDS_BYTES_PER_CU // lds_bytes
    by_lds = max(1, groups * waves_per_group // GFX942_SIMDS_PER_CU) if groups else 0
    return min(occupancy_regs, by_lds), by_lds


@dataclass(frozen=True, kw_only=True)
class Gfx942Kernel:
    asm: Gfx942Asm
    launch: Launch
    waves_per_simd: int  # min(register limit, LDS limit) for a full CU
    waves_per_simd_lds: int

    @property
    def symbol(self) -> str:
        return self.asm.symbol

    @property
    def lds_bytes(self) -> int:
        return self.asm.lds_static_bytes + self.launch.dynamic_lds_bytes

    @property
    def spills(self) -> int:
        return self.asm.vgpr_spills + self.asm.sgpr_spills

    def spill_text(self) -> str:
        return f"{self.asm.vgpr_spills} VGPR + {self.asm.sgpr_spills} SGPR spills ({self.asm.scratch_bytes} B scratch per lane)"

    def occupancy_problem(self, min_waves_per_simd: int) -> str | None:
        if self.waves_per_simd >= min_waves_per_simd:
            return None
        return (f"{self.waves_per_simd} waves per SIMD (registers allow {self.asm.occupancy_regs}, "
                f"{self.lds_bytes} B of LDS allow {self.waves_per_simd_lds}) < min_waves_per_simd={min_waves_per_simd}")

    def to_json(self) -> dict[str, object]:
        a = self.asm
        return {
            "symbol": a.symbol, "threads": self.launch.threads, "grid": list(self.launch.grid),
            "vgprs": a.vgprs, "agprs": a.agprs, "total_vgprs": a.total_vgprs, "sgprs": a.sgprs,
            "scratch_bytes": a.scratch_bytes, "vgpr_spills": a.vgpr_spills, "sgpr_spills": a.sgpr_spills,
            "lds_static_bytes": a.lds_static_bytes, "lds_dynamic_bytes": self.launch.dynamic_lds_bytes,
            "lds_dynamic_source": self.launch.source, "lds_bytes": self.lds_bytes,
            "occupancy_regs": a.occupancy_regs, "waves_per_simd_lds": self.waves_per_simd_lds,
            "waves_per_simd": self.waves_per_simd, "mfma": dict(a.mfma), "code_bytes": a.code_bytes,
        }


def read_kernels(entry: Path, inst) -> tuple[Gfx942Kernel, ...]:
    asm = parse_gfx942_asm((entry / "kernel.s").read_text(encoding="utf-8"))
    launches = read_launches(entry, inst, [a.symbol for a in asm], {a.symbol: a.max_threads for a in asm})
    kernels = []
    for a in asm:
        launch = launches[a.symbol]
        waves, by_lds = gfx942_waves_per_simd(occupancy_regs=a.occupancy_regs, threads=launch.threads,
                                              lds_bytes=a.lds_static_bytes + launch.dynamic_lds_bytes,
                                              wave_lanes=a.wave_lanes)
        kernels.append(Gfx942Kernel(asm=a, launch=launch, waves_per_simd=waves, waves_per_simd_lds=by_lds))
    return tuple(kernels)


def summarize(ks: tuple[Gfx942Kernel, ...]) -> dict[str, object]:
    mfma: Counter[str] = Counter()
    for k in ks:
        mfma.update(dict(k.asm.mfma))
    return {
        "kernels": len(ks), "total_vgprs": max(k.asm.total_vgprs for k in ks),
        "vgprs": max(k.asm.vgprs for k in ks), "agprs": max(k.asm.agprs for k in ks),
        "sgprs": max(k.asm.sgprs for k in ks), "spills": sum(k.spills for k in ks),
        "scratch_bytes": max(k.asm.scratch_bytes for k in ks), "lds_bytes": max(k.lds_bytes for k in ks),
        "waves_per_simd": min(k.waves_per_simd for k in ks), "mfma": dict(sorted(mfma.items())),
        "code_bytes": sum(k.asm.code_bytes for k in ks),
    }


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n} B"


def table_cells(s: dict[str, object]) -> tuple[str, str, str, str, str]:
    mma = ", ".join(f"{n} {m.removeprefix('v_mfma_')}" for m, n in s["mfma"].items()) or "none"
    return (f"{s['total_vgprs']}v ({s['vgprs']}+{s['agprs']}a) {s['sgprs']}s", _bytes(s["lds_bytes"]),
            f"{s['waves_per_simd']} w/SIMD", str(s["spills"]), mma)


# ---- doctor ---------------------------------------------------------------------------------------

def info_checks() -> list[Check]:
    if not ROCM_ROOT.is_dir():
        return [Check(name="ROCm", status="info", detail=f"not installed at {ROCM_ROOT}; gfx942 builds use the project toolchain",
                      fix="optional: a ROCm install (https://rocm.docs.amd.com) is preferred over .toolchain/ when present")]
    info = ROCM_ROOT / ".info" / "version"
    version = info.read_text(encoding="utf-8").strip() if info.is_file() else "version unknown"
    return [Check(name="ROCm", status="info", detail=f"{version} at {ROCM_ROOT}")]


def doctor_checks(root: Path) -> list[Check]:
    need = (Target.GFX942,)
    try:
        tc = find_gfx942(root)
    except ToolchainMissing as exc:
        return [Check(name="gfx942 clang + HIP headers", status="missing", detail=str(exc).split("; ")[0],
                      fix=FETCH_GFX942, needed_by=need)]
    checks = [Check(name="gfx942 clang", status="ok", detail=f"{tc.version} ({tc.clang}, from {tc.origin})", needed_by=need)]
    supported = subprocess.run([tc.clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={tc.arch}", "-x", "assembler", "-c",
                                os.devnull, "-o", os.devnull], check=False, capture_output=True, timeout=60).returncode == 0
    checks.append(Check(name="clang gfx942 support", status="ok" if supported else "missing",
                        detail=f"-mcpu={tc.arch} {'accepted' if supported else 'rejected'}",
                        fix=None if supported else FETCH_GFX942, needed_by=need))
    parts = ", ".join(f"{k} {v}" for k, v in tc.components)
    checks.append(Check(name="HIP headers + device libs", status="ok", detail=f"{parts or 'ROCm'} (from {tc.origin})", needed_by=need))
    if supported:
        checks.append(smoke_check(Target.GFX942, suffix="hip", folder="hip", threads=64, fix=FETCH_GFX942,
                                  commands=lambda src, d: [tc.asm_command(src, d / "smoke.s"),
                                                           tc.code_object_command(d / "smoke.s", d / "smoke.co")]))
    return checks


# ---- run time ---------------------------------------------------------------------------------------

def match_device(torch, props) -> DeviceMatch | str | None:
    if not getattr(torch.version, "hip", None):
        return None
    arch = getattr(props, "gcnArchName", "").split(":")[0]
    if arch != GFX942_ARCH:
        return f"AMD GPU {props.name} ({arch}) is not gfx942"
    return DeviceMatch(vendor=HW.vendor, runtime_version=f"HIP {torch.version.hip}")


TARGET = TargetSpec(
    hw=HW,
    gemm_fn="rocm_gemm",
    supports_k_pack=True,  # TileLang's ROCm gemm packs MFMA ops along K
    explicit_pipeline_schedule=True,  # TileLang 0.1.15 ignores num_stages on HIP
    reduce_workspace_in_lds=True,  # seen in the lowered source: a `workspace` buffer per reduction
    source_suffix=".hip",
    mma_input_roundoff=MappingProxyType({}),  # fp16/bf16/fp8/fp32 enter the MFMA exactly
    mma_accumulator_roundoff=MappingProxyType({}),
    torch_dtypes=MappingProxyType({DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32",
                                   DType.FP8_E4M3: "float8_e4m3fnuz"}),
    build_cost=0,
    find_toolchain=find_toolchain,
    compile=compile_source,
    read_kernels=read_kernels,
    summarize=summarize,
    table_cells=table_cells,
    info_checks=info_checks,
    doctor_checks=doctor_checks,
    match_device=match_device,
    min_flush_bytes=1 << 30,  # the 256 MiB Infinity Cache is not in torch's L2_cache_size
    device_environment=dict,  # nothing beyond what torch reports
)
