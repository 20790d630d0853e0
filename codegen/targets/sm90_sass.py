"""sm_90 SASS analysis: what ptxas finally emitted, from `cuobjdump -sass` of a built cubin.

Per kernel (a `Function : <symbol>` block of cuobjdump's listing): global loads and stores by bytes per
thread (LDG.E.128 = 16, .64 = 8, plain LDG.E = 4, .U16/.S16 = 2, .U8/.S8 = 1; cache hints such as
LTC128B or CONSTANT are not widths), LDGSTS (cp.async) by bytes, TMA copies (UTMALDG / UTMASTG), HGMMA
count and shapes, and local-memory traffic (LDL / STL: register spills or stack arrays). A kernel whose
global loads never reach the width its spec meant, or most of whose loads are narrower, is flagged
[vector_loads], as from the PTX.

Where this is used, and why not in reports/static/sm_90.json: cuobjdump is on some machines and not on
others (not on the one these reports are built on), and the committed static report must be the same
wherever it is rebuilt. So sm_90.json is always read from the PTX (`"source": "ptx"`), and the SASS is a
separate, explicitly asked-for report: `tilegen sass NAME|--all [--out FILE]` (refused, with how to get
cuobjdump, where it is missing), which records the nvcc it compiled with. This module only reads listings;
the build stage builds the cubins it reads (codegen.build.sass.run_sass).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from codegen.core.errors import TilegenError
from codegen.core.toolchain import ToolchainMissing
from codegen.targets.amdgcn_isa import majority_warning

GET_CUOBJDUMP = ("cuobjdump not found next to nvcc or on PATH: it ships with the CUDA toolkit (the "
                 "cuda-cuobjdump package, or `pip install nvidia-cuda-cuobjdump`); put it on PATH")

_FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_INSTR_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)")
_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def sass_access_bytes(opcode: str) -> int:
    """Bytes per thread of an LDG/STG/LDGSTS opcode: `LDG.E.128.CONSTANT` -> 16, `LDG.E` -> 4."""
    widths = [_WIDTH[t] for t in opcode.split(".")[1:] if t in _WIDTH]
    return widths[-1] if widths else 4


@dataclass(frozen=True, kw_only=True)
class SassKernel:
    symbol: str
    global_loads: dict[int, int]  # bytes per thread -> static count of LDG
    global_stores: dict[int, int]  # STG
    ldgsts: dict[int, int]  # LDGSTS (cp.async global -> shared)
    tma_loads: int  # UTMALDG
    tma_stores: int  # UTMASTG
    hgmma: dict[str, int]  # HGMMA shape (64x128x16.F32...) -> count
    local_loads: int  # LDL
    local_stores: int  # STL

    def widest_load(self) -> int | None:
        widths = list(self.global_loads) + list(self.ldgsts) + ([16] if self.tma_loads else [])
        return max(widths, default=None)

    def to_json(self) -> dict[str, object]:
        return {"symbol": self.symbol, "source": "sass",
                "global_load_bytes": {str(k): v for k, v in self.global_loads.items()},
                "global_store_bytes": {str(k): v for k, v in self.global_stores.items()},
                "ldgsts_bytes": {str(k): v for k, v in self.ldgsts.items()},
                "tma_loads": self.tma_loads, "tma_stores": self.tma_stores,
                "hgmma": sum(self.hgmma.values()), "hgmma_shapes": self.hgmma,
                "local_loads": self.local_loads, "local_stores": self.local_stores}


def _hist(c: Counter) -> dict:
    return dict(sorted(c.items(), reverse=True))


def parse_sass(text: str) -> list[SassKernel]:
    """Every `Function :` block of a `cuobjdump -sass` listing, in order."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := _FUNC_RE.match(line):
            blocks.append((m.group(1), []))
        elif blocks and (m := _INSTR_RE.match(line)):
            blocks[-1][1].append(m.group(1))
    out = []
    for symbol, ops in blocks:
        loads: Counter[int] = Counter()
        stores: Counter[int] = Counter()
        cp: Counter[int] = Counter()
        hgmma: Counter[str] = Counter()
        n = Counter()
        for op in ops:
            head = op.split(".", 1)[0]
            if head == "LDG":
                loads[sass_access_bytes(op)] += 1
            elif head == "STG":
                stores[sass_access_bytes(op)] += 1
            elif head == "LDGSTS":
                cp[sass_access_bytes(op)] += 1
            elif head == "HGMMA":
                hgmma[op.split(".", 1)[1] if "." in op else ""] += 1
            elif head in ("UTMALDG", "UTMASTG", "LDL", "STL"):
                n[head] += 1
        out.append(SassKernel(symbol=symbol, global_loads=_hist(loads), global_stores=_hist(stores), ldgsts=_hist(cp),
                              tma_loads=n["UTMALDG"], tma_stores=n["UTMASTG"], hgmma=dict(sorted(hgmma.items())),
                              local_loads=n["LDL"], local_stores=n["STL"]))
    return out


def sass_vector_warnings(k: SassKernel, expected_bytes: int | None) -> list[str]:
    """As ptx_memory.ptx_vector_warnings, on what ptxas emitted."""
    if expected_bytes is None:
        return []
    widest = k.widest_load()
    if widest is None:
        return []
    widths = Counter(k.ldgsts)
    widths.update(k.global_loads)
    if widest >= expected_bytes:
        return majority_warning(_hist(widths), expected_bytes)
    shown = ", ".join(f"{n} x {b} B" for b, n in _hist(widths).items())
    return [(f"no {expected_bytes}-byte global loads in the SASS (widest {widest} B: {shown}); "
             f"the spec meant {expected_bytes}-byte loads [vector_loads]")]


def find_cuobjdump(nvcc: str | None) -> str:
    """cuobjdump next to the nvcc that built the cubins, else on PATH; ToolchainMissing otherwise."""
    if nvcc:
        beside = Path(nvcc).with_name("cuobjdump")
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    found = shutil.which("cuobjdump")
    if found is None:
        raise ToolchainMissing(GET_CUOBJDUMP)
    return found


def cuobjdump_sass(cuobjdump: str, cubin: Path) -> str:
    proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        last = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-2:]
        raise TilegenError(f"cuobjdump -sass {cubin.name} failed (exit {proc.returncode}): {' | '.join(last)}")
    return proc.stdout
