"""What the AMD (amdgcn, HIP) targets share, parameterised by the arch (`gfx942`, `gfx950`): the clang
toolchain and its discovery, the compile command, the resource report of clang's assembly, the occupancy
model, the doctor checks and the device match. Each AMD target module (`codegen/targets/<target>.py`)
holds its hardware record and builds its `TargetSpec` with `target_spec()` here; nothing in this module
names a particular arch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from codegen.core.hardware import DType, Hardware
from codegen.core.toolchain import TileLangInstall, ToolchainMissing, find_tilelang, run_version
from codegen.targets.amdgcn_isa import IsaAnalysis, analyse, vector_warnings
from codegen.targets.base import (
    Check,
    DeviceMatch,
    Launch,
    ReportParseError,
    TargetSpec,
    load_widths,
    read_launches,
    run_compiler,
    smoke_check,
)

# ---- toolchain ------------------------------------------------------------------------------------
# ROCm's clang when ROCm is installed at /opt/rocm, else the offline toolchain that the packaged
# script data/fetch-amd-toolchain.sh unpacks and describes in env.json -- the project's own (.toolchain/,
# what `bash tools/fetch-gfx942-toolchain.sh` makes in a checkout), else the user's (the user cache, what
# `tilegen toolchain fetch` makes for an installed tilegen): the shared HIP headers at the top level, one
# compiler (clang, device libraries, flags) per arch under "archs". An env.json written before "archs"
# existed describes its one "arch" at the top level.

FETCH_AMD = "tilegen toolchain fetch"
FETCH_AMD_CHECKOUT = "bash tools/fetch-gfx942-toolchain.sh"  # the same, for a checkout's .toolchain/
FETCH_SCRIPT = Path(__file__).resolve().parent / "data" / "fetch-amd-toolchain.sh"
ROCM_ROOT = Path("/opt/rocm")


def user_toolchain_dir() -> Path:
    """Where `tilegen toolchain fetch` puts the AMD toolchain by default: the user cache, shared by projects."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tilegen" / "toolchain"


@dataclass(frozen=True, kw_only=True)
class AmdToolchain:
    """clang for HIP device code. source -> .s: `clang + flags + -I... -S`; .s -> code object: link."""

    origin: str  # "/opt/rocm" or ".toolchain/env.json", shown by `tilegen doctor`
    clang: str
    version: str  # clang's first --version line
    components: tuple[tuple[str, str], ...]  # (name, version) of headers and device libraries
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    arch: str

    def asm_command(self, src: Path, out: Path) -> list[str]:
        return [self.clang, *self.flags, *(f"-I{d}" for d in self.include_dirs), "-S", "-o", str(out), str(src)]

    def code_object_command(self, asm: Path, out: Path) -> list[str]:
        return [self.clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={self.arch}", str(asm), "-o", str(out)]

    def fingerprint(self) -> dict[str, object]:
        """Everything that changes the compiler's output; part of every cache key of this arch."""
        return {"clang": self.clang, "version": self.version, "components": [list(c) for c in self.components],
                "flags": list(self.flags), "include_dirs": list(self.include_dirs), "arch": self.arch,
                "code_object": self.code_object_command(Path("IN"), Path("OUT"))[1:]}

    def describe(self) -> dict[str, str]:
        """Versions only (no paths): the toolchain block of a committed report."""
        return {"compiler": self.version, **dict(self.components)}


def _rocm_toolchain(rocm: Path, tilelang: TileLangInstall, arch: str) -> AmdToolchain | None:
    clang = rocm / "llvm" / "bin" / "clang++"
    if not (os.access(clang, os.X_OK) and (rocm / "include" / "hip" / "hip_runtime.h").is_file()):
        return None
    info = rocm / ".info" / "version"
    rocm_version = info.read_text(encoding="utf-8").strip() if info.is_file() else "unknown"
    version = run_version([str(clang), "--version"]).splitlines()[0:1]
    return AmdToolchain(
        origin=str(rocm), clang=str(clang), version=version[0] if version else "unknown",
        components=(("rocm", rocm_version),),
        flags=("-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-O3", "-std=c++17",
               f"--rocm-path={rocm}", "-include", "hip/hip_bfloat16.h"),
        include_dirs=(str(tilelang.template_dir),),
        arch=arch,
    )


def env_archs(env: Mapping[str, object], arch: str) -> dict[str, Mapping[str, object]]:
    """arch -> its compiler entry of an env.json; an env.json without "archs" describes one compiler at
    the top level, for its "arch" (or, without one, for the `arch` asking)."""
    if "archs" in env:
        return dict(env["archs"])
    return {str(env.get("arch", arch)): env}


def _project_toolchain(env_json: Path, shown: str, arch: str) -> AmdToolchain:
    fix = f"run `{FETCH_AMD}` (in a tilegen checkout: `{FETCH_AMD_CHECKOUT}`)"
    if not env_json.is_file():
        raise ToolchainMissing(f"{arch} toolchain missing: no ROCm at {ROCM_ROOT} and no {shown}; {fix}")
    try:
        env = json.loads(env_json.read_text(encoding="utf-8"))
        entry = env_archs(env, arch).get(arch)
        if entry is None:
            raise ToolchainMissing(f"{arch} toolchain missing: {shown} has no {arch} compiler "
                                   f"(it has {', '.join(sorted(env_archs(env, arch)))}); {fix}")
        clang, flags, version = entry["clang"], entry["flags"], entry["clang_version"]
        include_dirs, hip_include = env["include_dirs"], env["hip_include_dir"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ToolchainMissing(f"{arch} toolchain: {shown} is unreadable ({type(exc).__name__}: {exc}); {fix}") from None
    missing = [p for p in (clang,) if not os.access(p, os.X_OK)]
    missing += [p for p in (f"{hip_include}/hip/hip_runtime.h", *include_dirs) if not Path(p).exists()]
    if "device_lib_path" in entry:  # the arch's ISA bitcode: rocm-device-libs has it only from some version on
        missing += [p for p in (f"{entry['device_lib_path']}/oclc_isa_version_{arch.removeprefix('gfx')}.bc",)
                    if not Path(p).is_file()]
    if missing:
        raise ToolchainMissing(f"{arch} toolchain incomplete: {missing[0]} not found; {fix}")
    components = (("hip", str(env["hip_version"])) if "hip_version" in env else None,
                  ("device_libs", str(entry["device_libs_version"])) if "device_libs_version" in entry else None)
    return AmdToolchain(origin=shown, clang=clang, version=version, components=tuple(c for c in components if c),
                        flags=tuple(flags), include_dirs=tuple(include_dirs), arch=arch)


def find_amd(root: Path, arch: str, *, env_json: Path | None = None, rocm: Path = ROCM_ROOT) -> AmdToolchain:
    """ROCm at `rocm` when complete, else the project's .toolchain/env.json, else the user cache's. An
    explicit `env_json` selects that file only (tests use a bogus one to check the missing-toolchain message)."""
    if env_json is None:
        found = _rocm_toolchain(rocm, find_tilelang(), arch)
        if found is not None:
            return found
        env_json = root / ".toolchain" / "env.json"
        user = user_toolchain_dir() / "env.json"
        if not env_json.is_file() and user.is_file():
            env_json = user
    try:
        shown = env_json.relative_to(root).as_posix()
    except ValueError:
        shown = str(env_json)
    return _project_toolchain(env_json, shown, arch)


def compile_source(tc: AmdToolchain, stage: Path, source: str, log: Path) -> None:
    """HIP source -> kernel.s (the resource report) -> kernel.co, in `stage`."""
    (stage / "kernel.hip").write_text(source, encoding="utf-8")
    run_compiler(tc.asm_command(stage / "kernel.hip", stage / "kernel.s"), log, stage)
    run_compiler(tc.code_object_command(stage / "kernel.s", stage / "kernel.co"), log, stage)


# ---- resource report ------------------------------------------------------------------------------
# clang -S: per kernel, the "; Kernel info:" comment block (NumVgprs, NumAgprs, TotalNumVgprs, NumSgprs,
# ScratchSize, Occupancy, codeLenInByte), the `amdhsa.kernels` YAML metadata (.vgpr_spill_count,
# .sgpr_spill_count, .group_segment_fixed_size, .private_segment_fixed_size, ...) and the `v_mfma_*`
# instructions of its body. The register part of occupancy is clang's own (`Occupancy`: it knows the
# arch's VGPR granule and waves per SIMD); the LDS part is computed from the hardware record.


@dataclass(frozen=True, kw_only=True)
class AmdAsm:
    """One kernel of an amdgcn .s file, as the compiler reported it."""

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
    isa: IsaAnalysis  # memory access widths and the main loop (codegen.targets.amdgcn_isa)

    @property
    def mfma_count(self) -> int:
        return sum(n for _, n in self.mfma)


_FUNC_RE = re.compile(r"^\s*\.type\s+([\w.$]+)\s*,\s*@function", re.MULTILINE)
_INFO_RE = re.compile(r"^; (NumVgprs|NumAgprs|TotalNumVgprs|NumSgprs|ScratchSize|Occupancy|codeLenInByte)\s*[:=]\s*(\d+)", re.MULTILINE)
_MFMA_RE = re.compile(r"^\s*(v_mfma_\w+)", re.MULTILINE)
_META_RE = re.compile(r"^\s*\.amdgpu_metadata\s*$(.*?)^\s*\.end_amdgpu_metadata", re.MULTILINE | re.DOTALL)
_TARGET_RE = re.compile(r'^\s*\.amdgcn_target\s+"amdgcn-amd-amdhsa--(\w+)', re.MULTILINE)


def _int(block: dict, key: str, symbol: str) -> int:
    try:
        return int(block[key])
    except (KeyError, TypeError, ValueError):
        raise ReportParseError(f"{symbol}: no integer {key} in the compiler's report") from None


def asm_arch(text: str) -> str | None:
    """The processor an amdgcn .s file was compiled for (its `.amdgcn_target`), or None."""
    m = _TARGET_RE.search(text)
    return m.group(1) if m else None


def parse_asm(text: str, lds_banks: int | None = None) -> list[AmdAsm]:
    """Every kernel (a function with an amdhsa kernel descriptor) of a clang -S file, in file order;
    `lds_banks`: the target's LDS bank count for the bank-conflict estimate (None: none)."""
    meta_match = _META_RE.search(text)
    if meta_match is None:
        raise ReportParseError("no .amdgpu_metadata block: not amdgcn assembly from clang -S")
    meta = yaml.safe_load(meta_match.group(1)) or {}  # the compiler's own metadata (YAML 1.1, as LLVM writes it)
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
        kernels.append(AmdAsm(
            symbol=symbol,
            vgprs=_int(info, "NumVgprs", symbol), agprs=_int(info, "NumAgprs", symbol),
            total_vgprs=_int(md, ".vgpr_count", symbol), sgprs=_int(md, ".sgpr_count", symbol),
            scratch_bytes=_int(md, ".private_segment_fixed_size", symbol),
            vgpr_spills=_int(md, ".vgpr_spill_count", symbol), sgpr_spills=_int(md, ".sgpr_spill_count", symbol),
            lds_static_bytes=_int(md, ".group_segment_fixed_size", symbol),
            occupancy_regs=_int(info, "Occupancy", symbol), code_bytes=_int(info, "codeLenInByte", symbol),
            max_threads=_int(md, ".max_flat_workgroup_size", symbol), wave_lanes=_int(md, ".wavefront_size", symbol),
            mfma=tuple(sorted(mfma.items())), isa=analyse(chunk, lds_banks),
        ))
        if info.get("TotalNumVgprs", kernels[-1].total_vgprs) != kernels[-1].total_vgprs:
            raise ReportParseError(f"{symbol}: TotalNumVgprs {info['TotalNumVgprs']} != metadata .vgpr_count")
    missing = sorted(set(by_name) - {k.symbol for k in kernels})
    if missing:
        raise ReportParseError(f"kernel(s) {', '.join(missing)} in the metadata but not in the assembly")
    return kernels


def waves_per_simd(hw: Hardware, *, occupancy_regs: int, threads: int, lds_bytes: int,
                   wave_lanes: int = 64) -> tuple[int, int]:
    """(waves per SIMD, the LDS limit alone) for a full CU of `hw`: the register limit (clang's
    Occupancy) and the workgroups whose LDS fits in the CU's `lds_bytes_per_cu`, their waves spread over
    its `simds_per_cu` SIMDs (at least 1 when one workgroup fits, 0 when none does)."""
    waves_per_group = -(-threads // wave_lanes)
    if lds_bytes <= 0:
        return occupancy_regs, occupancy_regs
    groups = hw.lds_bytes_per_cu // lds_bytes
    by_lds = max(1, groups * waves_per_group // hw.simds_per_cu) if groups else 0
    return min(occupancy_regs, by_lds), by_lds


AMD_MAX_WAVES_PER_SIMD = 8  # CDNA (gfx90a, gfx942, gfx950): wave slots of one SIMD (LLVM's getMaxWavesPerEU)


def resident_workgroups(hw: Hardware, threads: int, lds_bytes: int) -> int:
    """Workgroups of `threads` and `lds_bytes` one CU holds at once, registers aside: its wave slots
    (AMD_MAX_WAVES_PER_SIMD on each of `simds_per_cu` SIMDs) and its `lds_bytes_per_cu`; 0 if none fits."""
    waves_per_group = -(-threads // hw.wave_lanes)
    by_waves = AMD_MAX_WAVES_PER_SIMD * hw.simds_per_cu // waves_per_group
    by_lds = hw.lds_bytes_per_cu // lds_bytes if lds_bytes > 0 else by_waves
    return min(by_waves, by_lds)


@dataclass(frozen=True, kw_only=True)
class AmdKernel:
    asm: AmdAsm
    launch: Launch
    waves_per_simd: int  # min(register limit, LDS limit) for a full CU
    waves_per_simd_lds: int
    warnings: tuple[str, ...] = ()  # static-analysis warnings (vector_loads), never build failures
    expected_load_bytes: int | None = None  # global load width per lane the spec meant; None: not checked

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
            "isa": a.isa.to_json() | {"expected_global_load_bytes": self.expected_load_bytes,
                                      "warnings": list(self.warnings)},
        }


def read_kernels(hw: Hardware, entry: Path, inst) -> tuple[AmdKernel, ...]:
    """The kernels of one cache entry of `hw`'s target; assembly for another processor is an error."""
    text = (entry / "kernel.s").read_text(encoding="utf-8")
    arch = asm_arch(text)
    if arch != hw.tilelang_target["mcpu"]:
        raise ReportParseError(f"kernel.s is {arch} assembly, not {hw.tilelang_target['mcpu']}")
    asm = parse_asm(text, hw.lds_banks)
    launches = read_launches(entry, inst, [a.symbol for a in asm], {a.symbol: a.max_threads for a in asm})
    widths = load_widths(inst, [a.symbol for a in asm])
    kernels = []
    for a in asm:
        launch = launches[a.symbol]
        waves, by_lds = waves_per_simd(hw, occupancy_regs=a.occupancy_regs, threads=launch.threads,
                                       lds_bytes=a.lds_static_bytes + launch.dynamic_lds_bytes, wave_lanes=a.wave_lanes)
        expected = widths[a.symbol]
        kernels.append(AmdKernel(asm=a, launch=launch, waves_per_simd=waves, waves_per_simd_lds=by_lds,
                                 expected_load_bytes=expected, warnings=tuple(vector_warnings(a.isa, expected))))
    return tuple(kernels)


def summarize(ks: tuple[AmdKernel, ...]) -> dict[str, object]:
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
        "warnings": [f"{k.symbol}: {w}" for k in ks for w in k.warnings],
    }


def static_rank(s: dict[str, object]) -> tuple:
    """Order of candidates by static figures only (`tilegen tune`, labelled "static rank, not measured"): more
    waves per SIMD first (latency hiding), then fewer VGPRs (total, AGPRs included), then less LDS, then more
    MFMA instructions (denser matrix-core code), last the fewest kernels."""
    return (-int(s["waves_per_simd"]), int(s["total_vgprs"]), int(s["lds_bytes"]), -sum(s["mfma"].values()),
            int(s["kernels"]))


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n} B"


def table_cells(s: dict[str, object]) -> tuple[str, str, str, str, str]:
    mma = ", ".join(f"{n} {m.removeprefix('v_mfma_')}" for m, n in s["mfma"].items()) or "none"
    return (f"{s['total_vgprs']}v ({s['vgprs']}+{s['agprs']}a) {s['sgprs']}s", _bytes(s["lds_bytes"]),
            f"{s['waves_per_simd']} w/SIMD", str(s["spills"]), mma)


# ---- doctor ---------------------------------------------------------------------------------------

def info_checks() -> list[Check]:
    if not ROCM_ROOT.is_dir():
        return [Check(name="ROCm", status="info", detail=f"not installed at {ROCM_ROOT}; AMD builds use the project toolchain",
                      fix="optional: a ROCm install (https://rocm.docs.amd.com) is preferred over .toolchain/ when present")]
    info = ROCM_ROOT / ".info" / "version"
    version = info.read_text(encoding="utf-8").strip() if info.is_file() else "version unknown"
    return [Check(name="ROCm", status="info", detail=f"{version} at {ROCM_ROOT}")]


def doctor_checks(hw: Hardware, find: Callable[[Path], AmdToolchain], root: Path) -> list[Check]:
    """What a build for `hw`'s target needs; `find(root)` is the target's toolchain discovery."""
    target, need = hw.target, (hw.target,)
    try:
        tc = find(root)
    except ToolchainMissing as exc:
        return [Check(name=f"{target} clang + HIP headers", status="missing", detail=str(exc).split("; ")[0],
                      fix=FETCH_AMD, needed_by=need)]
    checks = [Check(name=f"{target} clang", status="ok", detail=f"{tc.version} ({tc.clang}, from {tc.origin})", needed_by=need)]
    supported = subprocess.run([tc.clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={tc.arch}", "-x", "assembler", "-c",
                                os.devnull, "-o", os.devnull], check=False, capture_output=True, timeout=60).returncode == 0
    checks.append(Check(name=f"clang {target} support", status="ok" if supported else "missing",
                        detail=f"-mcpu={tc.arch} {'accepted' if supported else 'rejected'}",
                        fix=None if supported else FETCH_AMD, needed_by=need))
    parts = ", ".join(f"{k} {v}" for k, v in tc.components)
    checks.append(Check(name=f"{target} HIP headers + device libs", status="ok", detail=f"{parts or 'ROCm'} (from {tc.origin})",
                        needed_by=need))
    if supported:
        checks.append(smoke_check(target, suffix="hip", folder="hip", threads=hw.wave_lanes, fix=FETCH_AMD,
                                  commands=lambda src, d: [tc.asm_command(src, d / "smoke.s"),
                                                           tc.code_object_command(d / "smoke.s", d / "smoke.co")]))
    return checks


# ---- run time ---------------------------------------------------------------------------------------

def match_device(hw: Hardware, torch, props) -> DeviceMatch | str | None:
    """A ROCm torch's GPU whose gcnArchName is `hw`'s processor; another AMD processor is a reason."""
    if not getattr(torch.version, "hip", None):
        return None
    arch = getattr(props, "gcnArchName", "").split(":")[0]
    if arch != hw.tilelang_target["mcpu"]:
        return f"AMD GPU {props.name} ({arch}) is not {hw.target}"
    return DeviceMatch(vendor=hw.vendor, runtime_version=f"HIP {torch.version.hip}",
                       visible_devices_env="HIP_VISIBLE_DEVICES")


# ---- the record ------------------------------------------------------------------------------------

def target_spec(hw: Hardware, *, find_toolchain: Callable[..., AmdToolchain],
                torch_dtypes: Mapping[DType, str], min_flush_bytes: int) -> TargetSpec:
    """The TargetSpec of an AMD target: TileLang's ROCm gemm and HIP codegen, clang, this module's report.
    `find_toolchain(root, *, env_json=None)` is the target module's discovery (looked up when called, so
    a test can replace it)."""
    return TargetSpec(
        hw=hw,
        gemm_fn="rocm_gemm",
        supports_k_pack=True,  # TileLang's ROCm gemm packs MFMA ops along K
        explicit_pipeline_schedule=True,  # TileLang 0.1.15 ignores num_stages on HIP
        reduce_workspace_in_lds=True,  # seen in the lowered source: a `workspace` buffer per reduction
        warp_specialization=False,
        warp_specialization_note="it needs TMA, mbarrier transactions, setmaxnreg and asynchronous wgmma "
                                 "(Hopper instructions; the HIP backend has none of them)",
        source_suffix=".hip",
        resident_workgroups=lambda threads, lds: resident_workgroups(hw, threads, lds),
        mma_input_roundoff=MappingProxyType({}),  # fp16/bf16/fp8/fp32 enter the MFMA exactly
        mma_accumulator_roundoff=MappingProxyType({}),
        torch_dtypes=MappingProxyType(dict(torch_dtypes)),
        build_cost=0,
        find_toolchain=find_toolchain,
        compile=compile_source,
        read_kernels=lambda entry, inst: read_kernels(hw, entry, inst),
        summarize=summarize,
        table_cells=table_cells,
        lds_summary_key="lds_bytes",
        static_rank=static_rank,
        info_checks=info_checks,
        doctor_checks=lambda root: doctor_checks(hw, lambda r: find_toolchain(r), root),
        match_device=lambda torch, props: match_device(hw, torch, props),
        min_flush_bytes=min_flush_bytes,
        device_environment=dict,  # nothing beyond what torch reports
    )
