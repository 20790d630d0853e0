"""sm_90: NVIDIA H100/H200 (Hopper). Its hardware record, CUDA toolchain (nvcc), compile command,
resource report (ptxas -v and the PTX), occupancy model, doctor checks and device match."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from codegen.core.hardware import DType, Hardware, MmaShape, Target
from codegen.core.toolchain import ToolchainMissing, find_tilelang, run_version
from codegen.targets.base import (
    Check,
    CompileError,
    DeviceMatch,
    Launch,
    ReportParseError,
    TargetSpec,
    first_output_line,
    load_widths,
    read_launches,
    run_compiler,
    smoke_check,
)
from codegen.targets.ptx_memory import PtxMemory, analyse_ptx, ptx_vector_warnings

HW = Hardware(
    target=Target.SM_90,
    product="NVIDIA H200 SXM",
    vendor="nvidia",
    tilelang_target=MappingProxyType({"kind": "cuda", "arch": "sm_90a"}),  # "a": wgmma/TMA
    wave_lanes=32,
    wave_word="warp",
    min_threads=32,
    max_threads_per_workgroup=1024,
    compute_units=132,
    lds_bytes_per_workgroup=227 * 1024,
    register_file_bytes_per_cu=256 * 1024,  # 65536 x 32-bit registers per SM
    max_registers_per_thread=255,
    simds_per_cu=4,
    lds_bytes_per_cu=228 * 1024,
    mma_shapes=MappingProxyType(
        {
            DType.FP16: (MmaShape(m=16, n=8, k=16),),
            DType.BF16: (MmaShape(m=16, n=8, k=16),),
            DType.FP32: (MmaShape(m=16, n=8, k=8),),  # tf32
            DType.FP8_E4M3: (MmaShape(m=16, n=8, k=32),),
        }
    ),
    tilelang_dtypes=MappingProxyType(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fn",
        }
    ),
    fp8_e4m3_max=448.0,  # OCP e4m3fn
    peak_dense_tflops=MappingProxyType(
        {DType.FP16: 989.4, DType.BF16: 989.4, DType.FP32: 494.7, DType.FP8_E4M3: 1978.9}
    ),
    hbm_bandwidth_tbps=4.8,
    lds_word="shared memory",
    # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (9.0): maximum x-dimension
    # of a grid of thread blocks 2^31 - 1, maximum y- or z-dimension 65535; cudaDeviceProp.maxGridSize.
    max_grid_workgroups=(2**31 - 1, 65535, 65535),
    max_grid_work_items=None,
    l2_bytes=50 << 20,  # H100 SXM and H200: 50 MB
)

# ---- toolchain ------------------------------------------------------------------------------------
# nvcc, found the way TileLang finds it (CUDA_HOME / CUDA_PATH, then PATH, then /usr/local/cuda), with
# TileLang's include dirs and flags (tilelang/cuda/backend.py) for sm_90a.

GET_NVCC = ("install a CUDA toolkit >= 12.0 and put its nvcc on PATH (or set CUDA_HOME): "
            "`pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl` "
            "or https://developer.nvidia.com/cuda-downloads")
SM90_ARCH = "sm_90a"  # wgmma and setmaxnreg need the arch-specific "a" variant


@dataclass(frozen=True, kw_only=True)
class CudaToolchain:
    """nvcc with TileLang's flags plus -arch=sm_90a, ptxas -v and a kept PTX file."""

    nvcc: str
    version: str  # "release 13.0, V13.0.88"
    include_dirs: tuple[str, ...]
    arch: str = SM90_ARCH
    # TileLang's own set (tilelang/contrib/nvcc.py + cuda/backend.py): --cubin -O3 -lineinfo -std=c++20;
    # -w silences warnings from TileLang's headers; --ptxas-options=--verbose prints the resource lines.
    flags: tuple[str, ...] = ("--cubin", "-O3", "-lineinfo", "-std=c++20", "-w", "--ptxas-options=--verbose")

    def cubin_command(self, src: Path, out: Path, keep_dir: Path) -> list[str]:
        return [self.nvcc, *self.flags, f"-arch={self.arch}", *(f"-I{d}" for d in self.include_dirs),
                "--keep", "--keep-dir", str(keep_dir), "-o", str(out), str(src)]

    def fingerprint(self) -> dict[str, object]:
        return {"nvcc": self.nvcc, "version": self.version, "flags": list(self.flags), "arch": self.arch,
                "include_dirs": list(self.include_dirs)}

    def describe(self) -> dict[str, str]:
        return {"compiler": f"nvcc {self.version}"}


def find_nvcc() -> Path | None:
    """The nvcc TileLang would use (tilelang/env.py `_find_cuda_home`)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home) / "bin" / "nvcc"
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    try:
        for f in importlib.metadata.files("nvidia-cuda-nvcc") or []:
            if f.name == "nvcc":
                return Path(str(f.locate()))
    except importlib.metadata.PackageNotFoundError:
        pass
    default = Path("/usr/local/cuda/bin/nvcc")
    return default if default.exists() else None


def nvcc_version(nvcc: Path) -> str:
    """'release 13.0, V13.0.88' from `nvcc --version`."""
    for line in run_version([str(nvcc), "--version"]).splitlines():
        if "release" in line:
            return line.split("tools, ", 1)[-1].strip()
    raise ToolchainMissing(f"{nvcc} --version printed no release line; {GET_NVCC}")


def find_cuda() -> CudaToolchain:
    nvcc = find_nvcc()
    if nvcc is None or not os.access(nvcc, os.X_OK):
        where = f" ({nvcc} is not executable)" if nvcc else ""
        raise ToolchainMissing(f"sm_90 toolchain missing: nvcc not found{where}; {GET_NVCC}")
    tl = find_tilelang()
    for d in (tl.template_dir / "tl_templates" / "cuda", tl.cutlass_include_dir):
        if not d.is_dir():
            raise ToolchainMissing(f"sm_90 toolchain: {d} not found (TileLang's CUDA headers); reinstall tilelang==0.1.15")
    return CudaToolchain(nvcc=str(nvcc), version=nvcc_version(nvcc),
                         include_dirs=(str(tl.template_dir), str(tl.cutlass_include_dir)))


def find_toolchain(root: Path, *, env_json: Path | None = None) -> CudaToolchain:
    """nvcc as TileLang finds it; `root` and `env_json` (a gfx942 toolchain description) do not apply."""
    return find_cuda()


def compile_source(tc: CudaToolchain, stage: Path, source: str, log: Path) -> None:
    """CUDA source -> kernel.cubin, with ptxas's report (nvcc.log) and the PTX (kernel.ptx), in `stage`."""
    (stage / "kernel.cu").write_text(source, encoding="utf-8")
    keep = stage / "keep"
    keep.mkdir()
    output = run_compiler(tc.cubin_command(stage / "kernel.cu", stage / "kernel.cubin", keep), log, stage)
    (stage / "nvcc.log").write_text(output, encoding="utf-8")
    ptx = keep / "kernel.ptx"
    if not ptx.is_file():
        raise CompileError("nvcc --keep left no kernel.ptx")
    os.replace(ptx, stage / "kernel.ptx")
    shutil.rmtree(keep)


# ---- resource report and occupancy ------------------------------------------------------------------
# ptxas's "Used N registers" lines and the `wgmma` / `cp.async.bulk.tensor` (TMA) instructions of each
# PTX entry. SM limits of compute capability 9.0 the occupancy model needs (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", and the occupancy calculator's allocation units).

SM90_MAX_WARPS_PER_SM = 64
SM90_MAX_BLOCKS_PER_SM = 32
SM90_REGISTERS_PER_SM = HW.register_file_bytes_per_cu // 4  # 65536 x 32-bit, from the hardware record
SM90_REGISTER_ALLOC_UNIT = 256  # registers are given to a warp in units of 256
SM90_SMEM_BYTES_PER_SM = HW.lds_bytes_per_cu  # 228 KiB
SM90_SMEM_RESERVED_PER_BLOCK = 1024  # the runtime keeps 1 KiB of each block's shared memory
SM90_SMEM_ALLOC_UNIT = 128


def sm90_occupancy(*, registers: int, threads: int, smem_bytes: int) -> tuple[int, int, str]:
    """(resident blocks per SM, resident warps per SM, what limits them: warps | blocks | registers |
    shared memory) for a kernel using `registers` per thread and `smem_bytes` of shared memory per block."""
    warps = -(-threads // HW.wave_lanes)
    regs_per_warp = -(-max(registers, 1) * HW.wave_lanes // SM90_REGISTER_ALLOC_UNIT) * SM90_REGISTER_ALLOC_UNIT
    smem = -(-smem_bytes // SM90_SMEM_ALLOC_UNIT) * SM90_SMEM_ALLOC_UNIT + SM90_SMEM_RESERVED_PER_BLOCK
    limits = {
        "warps": SM90_MAX_WARPS_PER_SM // warps,
        "blocks": SM90_MAX_BLOCKS_PER_SM,
        "registers": SM90_REGISTERS_PER_SM // (regs_per_warp * warps),
        "shared memory": SM90_SMEM_BYTES_PER_SM // smem,
    }
    limiter = min(limits, key=lambda k: limits[k])  # the first of equals, in the order above
    blocks = limits[limiter]
    return blocks, blocks * warps, limiter


@dataclass(frozen=True, kw_only=True)
class PtxasKernel:
    symbol: str
    registers: int  # per thread
    barriers: int
    smem_static_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


_PTXAS_ENTRY_RE = re.compile(r"Compiling entry function '([\w$]+)' for '(\w+)'")
_PTXAS_PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED_RE = re.compile(r"Used (\d+) registers(.*)$")


def parse_ptxas(text: str) -> list[PtxasKernel]:
    """Per-entry resources from `ptxas -v` output (via nvcc --ptxas-options=--verbose), in order."""
    out: list[PtxasKernel] = []
    symbol: str | None = None
    props: tuple[int, int, int] | None = None
    for line in text.splitlines():
        if m := _PTXAS_ENTRY_RE.search(line):
            symbol, props = m.group(1), None
        elif (m := _PTXAS_PROPS_RE.search(line)) and symbol:
            props = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _PTXAS_USED_RE.search(line)) and symbol:
            rest = m.group(2)
            barriers = re.search(r"used (\d+) barriers", rest)
            smem = re.search(r"(\d+) bytes smem", rest)
            stack, stores, loads = props or (0, 0, 0)
            out.append(PtxasKernel(symbol=symbol, registers=int(m.group(1)),
                                   barriers=int(barriers.group(1)) if barriers else 0,
                                   smem_static_bytes=int(smem.group(1)) if smem else 0,
                                   stack_frame_bytes=stack, spill_store_bytes=stores, spill_load_bytes=loads))
            symbol = None
    return out


@dataclass(frozen=True, kw_only=True)
class PtxKernel:
    symbol: str
    wgmma: int  # wgmma.mma_async instructions (Hopper warpgroup MMA)
    tma: int  # cp.async.bulk.tensor instructions (TMA copies)
    mma_sync: int  # mma.sync (Ampere-style warp MMA)
    setmaxnreg: int  # register reallocation between producer and consumer warpgroups
    memory: PtxMemory  # global access widths (codegen.targets.ptx_memory)


_PTX_ENTRY_RE = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)\s*\(", re.MULTILINE)


def _opcode(line: str) -> str:
    parts = line.split()
    if parts and parts[0].startswith("@"):  # predicated: @%p1 op ...
        parts = parts[1:]
    return parts[0] if parts else ""


def parse_ptx(text: str) -> list[PtxKernel]:
    entries = list(_PTX_ENTRY_RE.finditer(text))
    out = []
    for i, m in enumerate(entries):
        body = text[m.end(): entries[i + 1].start() if i + 1 < len(entries) else len(text)]
        instr = [_opcode(ln) for ln in body.splitlines()]
        out.append(PtxKernel(
            symbol=m.group(1),
            wgmma=sum(s.startswith("wgmma.mma_async") for s in instr),
            tma=sum(s.startswith("cp.async.bulk.tensor") for s in instr),
            mma_sync=sum(s.startswith("mma.sync") for s in instr),
            setmaxnreg=sum(s.startswith("setmaxnreg") for s in instr),
            memory=analyse_ptx(body),
        ))
    return out


@dataclass(frozen=True, kw_only=True)
class Sm90Kernel:
    ptxas: PtxasKernel
    ptx: PtxKernel
    launch: Launch
    blocks_per_sm: int  # resident blocks of one SM (sm90_occupancy)
    warps_per_sm: int
    occupancy_limiter: str
    warnings: tuple[str, ...] = ()  # static-analysis warnings (vector_loads), never build failures
    expected_load_bytes: int | None = None  # global load width per thread the spec meant; None: not checked

    @property
    def symbol(self) -> str:
        return self.ptxas.symbol

    @property
    def smem_bytes(self) -> int:
        return self.ptxas.smem_static_bytes + self.launch.dynamic_lds_bytes

    @property
    def spills(self) -> int:
        return self.ptxas.spill_store_bytes + self.ptxas.spill_load_bytes

    def spill_text(self) -> str:
        return f"{self.ptxas.spill_store_bytes} B spill stores + {self.ptxas.spill_load_bytes} B spill loads"

    def occupancy_problem(self, min_waves_per_simd: int) -> str | None:
        return None  # min_waves_per_simd is a gfx942 floor

    def to_json(self) -> dict[str, object]:
        p, x = self.ptxas, self.ptx
        return {
            "symbol": p.symbol, "threads": self.launch.threads, "grid": list(self.launch.grid),
            "registers": p.registers, "barriers": p.barriers, "stack_frame_bytes": p.stack_frame_bytes,
            "spill_store_bytes": p.spill_store_bytes, "spill_load_bytes": p.spill_load_bytes,
            "smem_static_bytes": p.smem_static_bytes, "smem_dynamic_bytes": self.launch.dynamic_lds_bytes,
            "smem_dynamic_source": self.launch.source, "smem_bytes": self.smem_bytes,
            "blocks_per_sm": self.blocks_per_sm, "warps_per_sm": self.warps_per_sm,
            "occupancy_limiter": self.occupancy_limiter,
            "wgmma": x.wgmma, "tma": x.tma, "mma_sync": x.mma_sync, "setmaxnreg": x.setmaxnreg,
            "isa": x.memory.to_json() | {"spill_bytes": self.spills, "expected_global_load_bytes": self.expected_load_bytes,
                                         "warnings": list(self.warnings)},
        }


def read_kernels(entry: Path, inst) -> tuple[Sm90Kernel, ...]:
    ptxas = parse_ptxas((entry / "nvcc.log").read_text(encoding="utf-8"))
    ptx = {k.symbol: k for k in parse_ptx((entry / "kernel.ptx").read_text(encoding="utf-8"))}
    if not ptxas or set(ptx) != {k.symbol for k in ptxas}:
        raise ReportParseError(f"ptxas reported {sorted(k.symbol for k in ptxas)}, the PTX holds {sorted(ptx)}")
    launches = read_launches(entry, inst, [k.symbol for k in ptxas], {k.symbol: inst.threads for k in ptxas})
    widths = load_widths(inst, [k.symbol for k in ptxas])
    kernels = []
    for k in ptxas:
        launch = launches[k.symbol]
        expected = widths[k.symbol]
        blocks, warps, limiter = sm90_occupancy(registers=k.registers, threads=launch.threads,
                                                smem_bytes=k.smem_static_bytes + launch.dynamic_lds_bytes)
        kernels.append(Sm90Kernel(ptxas=k, ptx=ptx[k.symbol], launch=launch, blocks_per_sm=blocks,
                                  warps_per_sm=warps, occupancy_limiter=limiter, expected_load_bytes=expected,
                                  warnings=tuple(ptx_vector_warnings(ptx[k.symbol].memory, expected))))
    return tuple(kernels)


def summarize(ks: tuple[Sm90Kernel, ...]) -> dict[str, object]:
    return {
        "kernels": len(ks), "registers": max(k.ptxas.registers for k in ks),
        "spill_bytes": sum(k.spills for k in ks), "smem_bytes": max(k.smem_bytes for k in ks),
        "warps_per_sm": min(k.warps_per_sm for k in ks),
        "wgmma": sum(k.ptx.wgmma for k in ks), "tma": sum(k.ptx.tma for k in ks),
        "mma_sync": sum(k.ptx.mma_sync for k in ks),
        "warnings": [f"{k.symbol}: {w}" for k in ks for w in k.warnings],
    }


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n} B"


def table_cells(s: dict[str, object]) -> tuple[str, str, str, str, str]:
    mma = [f"{s[k]} {k}" for k in ("wgmma", "tma", "mma_sync") if s[k]]
    return (str(s["registers"]), _bytes(s["smem_bytes"]), f"{s['warps_per_sm']} warps/SM",
            f"{s['spill_bytes']} B" if s["spill_bytes"] else "0", ", ".join(mma) or "none")


# ---- doctor ---------------------------------------------------------------------------------------

def info_checks() -> list[Check]:
    return []


def doctor_checks(root: Path) -> list[Check]:
    need = (Target.SM_90,)
    nvcc = find_nvcc()
    try:
        tc = find_cuda()
    except ToolchainMissing as exc:
        return [Check(name="nvcc", status="missing", detail=str(exc).split("; ")[0], fix=GET_NVCC, needed_by=need)]
    codes = subprocess.run([tc.nvcc, "--list-gpu-code"], check=False, capture_output=True, text=True, timeout=60)
    has_sm90 = codes.returncode == 0 and "sm_90" in codes.stdout.split()  # sm_90a comes with sm_90 (CUDA >= 12.0)
    checks = [Check(name="nvcc", status="ok" if has_sm90 else "missing",
                    detail=f"{tc.version} at {nvcc}" + ("" if has_sm90 else "; no sm_90 in --list-gpu-code"),
                    fix=None if has_sm90 else GET_NVCC, needed_by=need)]
    ptxas = Path(tc.nvcc).with_name("ptxas")
    ptxas_version = first_output_line([str(ptxas), "--version"]) if ptxas.exists() else None
    checks.append(Check(name="ptxas", status="ok" if ptxas_version else "missing",
                        detail=f"{ptxas}" if ptxas_version else f"not next to {tc.nvcc}", fix=None if ptxas_version else GET_NVCC,
                        needed_by=need))
    host = shutil.which("g++") or shutil.which("c++")
    checks.append(Check(name="host C++ compiler (nvcc's)", status="ok" if host else "missing", detail=host or "no g++ on PATH",
                        fix=None if host else "apt-get install g++", needed_by=need))
    if has_sm90 and ptxas_version and host:
        checks.append(smoke_check(Target.SM_90, suffix="cu", folder="cuda", threads=32, fix=GET_NVCC,
                                  commands=lambda src, d: [tc.cubin_command(src, d / "smoke.cubin", d)]))
    return checks


# ---- run time ---------------------------------------------------------------------------------------

def match_device(torch, props) -> DeviceMatch | str | None:
    if torch.version.cuda is None or getattr(torch.version, "hip", None):
        return None
    if (props.major, props.minor) != (9, 0):
        return f"NVIDIA GPU {props.name} is sm_{props.major}{props.minor}, not sm_90"
    return DeviceMatch(vendor=HW.vendor, runtime_version=f"CUDA {torch.version.cuda}",
                       visible_devices_env="CUDA_VISIBLE_DEVICES")


def device_environment() -> dict[str, str]:
    """Driver, clocks and power limit from nvidia-smi ({} when it cannot run)."""
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    if not q:
        return {}
    keys = ("driver", "sm_clock", "max_sm_clock", "mem_clock", "power_limit")
    return dict(zip(keys, (v.strip() for v in q.splitlines()[0].split(","))))


TARGET = TargetSpec(
    hw=HW,
    gemm_fn="T.gemm",
    supports_k_pack=False,
    explicit_pipeline_schedule=False,  # TileLang schedules num_stages itself (TMA + mbarriers)
    reduce_workspace_in_lds=False,  # warp shuffles only
    warp_specialization=True,  # T.tma_copy + mbarriers, T.dec/inc_max_nreg, T.wgmma_gemm + T.wait_wgmma
    warp_specialization_note="",
    source_suffix=".cu",
    # registers aside: sm90_occupancy at the least a warp is given (one allocation unit)
    resident_workgroups=lambda threads, smem: sm90_occupancy(registers=1, threads=threads, smem_bytes=smem)[0],
    # raw fp32 bits fed to TileLang's mma_sync<kTensorFloat32> (T.gemm of fp32 tiles): the tensor core reads
    # them as tf32, dropping the low 13 mantissa bits -- truncation, relative error < 2^-10 per operand
    mma_input_roundoff=MappingProxyType({DType.FP32: 2.0**-10}),
    mma_accumulator_roundoff=MappingProxyType({DType.FP8_E4M3: 2.0**-14}),  # Hopper fp8 wgmma keeps ~14 bits
    torch_dtypes=MappingProxyType({DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32",
                                   DType.FP8_E4M3: "float8_e4m3fn"}),
    build_cost=1,  # nvcc takes longer than clang
    find_toolchain=find_toolchain,
    compile=compile_source,
    read_kernels=read_kernels,
    summarize=summarize,
    table_cells=table_cells,
    lds_summary_key="smem_bytes",
    static_rank=None,  # sm_90 candidates are measured on the GPU (`tilegen tune` without --static)
    info_checks=info_checks,
    doctor_checks=doctor_checks,
    match_device=match_device,
    min_flush_bytes=256 << 20,
    device_environment=device_environment,
)
