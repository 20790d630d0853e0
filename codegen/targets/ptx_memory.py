"""Static analysis of one sm_90 kernel's global memory instructions, read from its PTX.

The SASS (`cuobjdump -sass` of the cubin) would show what ptxas finally emitted (LDG.E.128, HGMMA);
where cuobjdump is not installed -- as on the machine these reports are built on -- the PTX is read
instead and the report says `"source": "ptx"`. PTX vector widths (`ld.global.nc.v4.u32` = 16 B per
thread) carry through ptxas unchanged in practice, but that is the PTX's word, not the SASS's.

Per kernel: `ld.global` / `st.global` widths (bytes per thread), `cp.async` (Ampere-style async copies:
the copy size is the last operand) and TMA (`cp.async.bulk.tensor`: no per-thread width; counted as
wide, since one instruction moves a whole tile), `wgmma.mma_async` count. Spills are ptxas's numbers
(codegen.targets.sm90). A kernel whose global loads (ld.global or cp.async; TMA counts as wide) never
reach the width its spec meant is flagged, as on the AMD targets.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from codegen.targets.amdgcn_isa import majority_warning

_VEC_RE = re.compile(r"^v(\d)$")
_CP_SIZE_RE = re.compile(r",\s*(\d+)\s*(?:,[^,]*)?;")
TMA_BYTES = 0  # key of TMA copies in the width histogram: no per-thread width


SASS_NOT_READ = "not read: tilegen reads the PTX; cuobjdump -sass is not used (it was not installed where this was written)"


def _type_bits(token: str) -> int | None:
    if token in ("bf16", "f16"):
        return 16
    if token in ("f16x2", "bf16x2"):
        return 32
    m = re.match(r"^[bsuf](8|16|32|64|128)$", token)
    return int(m.group(1)) if m else None


def ptx_access_bytes(opcode: str) -> int | None:
    """Bytes per thread of an ld/st opcode: `ld.global.nc.v4.u32` -> 16, `st.global.u16` -> 2."""
    vec, bits = 1, None
    for tok in opcode.split("."):
        if m := _VEC_RE.match(tok):
            vec = int(m.group(1))
        elif (b := _type_bits(tok)) is not None:
            bits = b
    return None if bits is None else vec * bits // 8


@dataclass(frozen=True, kw_only=True)
class PtxMemory:
    global_loads: dict[int, int]  # bytes per thread -> static count of ld.global
    global_stores: dict[int, int]
    cp_async: dict[int, int]  # bytes per thread -> cp.async (non-bulk) count
    tma: int  # cp.async.bulk.tensor
    wgmma: int

    def widest_load(self) -> int | None:
        """The widest global->register/shared load per thread in bytes; TMA counts as 16."""
        widths = list(self.global_loads) + list(self.cp_async) + ([16] if self.tma else [])
        return max(widths, default=None)

    def to_json(self) -> dict[str, object]:
        return {
            "source": "ptx", "sass": SASS_NOT_READ,
            "global_load_bytes": {str(k): v for k, v in self.global_loads.items()},
            "global_store_bytes": {str(k): v for k, v in self.global_stores.items()},
            "cp_async_bytes": {str(k): v for k, v in self.cp_async.items()},
            "tma_copies": self.tma, "wgmma": self.wgmma,
        }


def _hist(c: Counter) -> dict[int, int]:
    return dict(sorted(c.items(), reverse=True))


def analyse_ptx(body: str) -> PtxMemory:
    """One `.entry`'s body of PTX text."""
    loads: Counter[int] = Counter()
    stores: Counter[int] = Counter()
    cp: Counter[int] = Counter()
    tma = wgmma = 0
    for line in body.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("@"):
            parts = parts[1:]
        if not parts:
            continue
        op = parts[0]
        if op.startswith("ld.global"):
            loads[ptx_access_bytes(op) or 0] += 1
        elif op.startswith("st.global"):
            stores[ptx_access_bytes(op) or 0] += 1
        elif op.startswith("cp.async.bulk.tensor"):
            tma += 1
        elif op.startswith("cp.async.") and ".shared" in op and ".global" in op and "bulk" not in op:
            m = _CP_SIZE_RE.search(line)
            cp[int(m.group(1)) if m else 0] += 1
        elif op.startswith("wgmma.mma_async"):
            wgmma += 1
    return PtxMemory(global_loads=_hist(loads), global_stores=_hist(stores), cp_async=_hist(cp), tma=tma, wgmma=wgmma)


def ptx_vector_warnings(mem: PtxMemory, expected_bytes: int | None) -> list[str]:
    if expected_bytes is None:
        return []
    widest = mem.widest_load()
    if widest is None:
        return []
    if widest >= expected_bytes:
        widths = {**mem.cp_async}
        for b, n in mem.global_loads.items():
            widths[b] = widths.get(b, 0) + n
        return majority_warning(dict(sorted(widths.items(), reverse=True)), expected_bytes)
    shown = ", ".join(f"{n} x {b} B" for b, n in {**mem.global_loads, **mem.cp_async}.items())
    return [(f"no {expected_bytes}-byte global loads in the PTX (widest {widest} B: {shown}); "
             f"the spec meant {expected_bytes}-byte loads [vector_loads]")]
