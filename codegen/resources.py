"""Resource reports read from compiler output: gfx942 assembly, ptxas -v and PTX.

gfx942 (clang -S): per kernel, the "; Kernel info:" comment block (NumVgprs, NumAgprs,
TotalNumVgprs, NumSgprs, ScratchSize, Occupancy, codeLenInByte), the `amdhsa.kernels` YAML metadata
(.vgpr_spill_count, .sgpr_spill_count, .group_segment_fixed_size, .private_segment_fixed_size, ...)
and the `v_mfma_*` instructions of its body. sm_90: ptxas's "Used N registers" lines and the
`wgmma` / `cp.async.bulk.tensor` (TMA) instructions of each PTX entry.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import yaml

from codegen.errors import TilegenError
from codegen.hardware import GFX942, SM_90


class ReportParseError(TilegenError):
    pass


# ---- gfx942 -------------------------------------------------------------------------------------

# CU geometry the occupancy model needs. Not (yet) fields of codegen/hardware.py's record, whose
# lds_bytes_per_workgroup is the per-workgroup limit; on CDNA3 the CU's LDS is the same 64 KiB.
GFX942_SIMDS_PER_CU = GFX942.simds_per_cu  # from the hardware table
GFX942_LDS_BYTES_PER_CU = GFX942.lds_bytes_per_cu


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


# ---- sm_90 --------------------------------------------------------------------------------------

# SM limits of compute capability 9.0 the occupancy model needs (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", and the occupancy calculator's allocation units).
SM90_MAX_WARPS_PER_SM = 64
SM90_MAX_BLOCKS_PER_SM = 32
SM90_REGISTERS_PER_SM = SM_90.register_file_bytes_per_cu // 4  # 65536 x 32-bit, from the hardware table
SM90_REGISTER_ALLOC_UNIT = 256  # registers are given to a warp in units of 256
SM90_SMEM_BYTES_PER_SM = SM_90.lds_bytes_per_cu  # 228 KiB
SM90_SMEM_RESERVED_PER_BLOCK = 1024  # the runtime keeps 1 KiB of each block's shared memory
SM90_SMEM_ALLOC_UNIT = 128


def sm90_occupancy(*, registers: int, threads: int, smem_bytes: int) -> tuple[int, int, str]:
    """(resident blocks per SM, resident warps per SM, what limits them: warps | blocks | registers |
    shared memory) for a kernel using `registers` per thread and `smem_bytes` of shared memory per block."""
    warps = -(-threads // SM_90.wave_lanes)
    regs_per_warp = -(-max(registers, 1) * SM_90.wave_lanes // SM90_REGISTER_ALLOC_UNIT) * SM90_REGISTER_ALLOC_UNIT
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
        ))
    return out
