"""Static analysis of one amdgcn kernel's instructions (clang -S), for `tilegen build`'s report.

What is read, per kernel: global (global_/buffer_/flat_) load and store widths, LDS instruction widths,
the loops (a backward branch `s_cbranch_* .LBBx_y` / `s_branch .LBBx_y` to a label above it) and, for the
main loop (the one with most MFMAs, then most memory instructions), per iteration: MFMAs, global and LDS
loads, `s_waitcnt`s, and whether global loads are in flight while MFMAs issue.

The overlap is a model of the vmcnt counter run straight through the loop body twice (the second pass
starting with what the first left outstanding, i.e. loads carried over from the previous iteration):
each global load/store adds one, `s_waitcnt vmcnt(N)` lowers the count to N, and an MFMA issued while the
count is > 0 overlaps memory. Branches inside the body are ignored (both sides counted). On gfx9 vmcnt
counts stores as well as loads; the model does the same.

LDS bank conflicts are NOT estimated: LDS addresses are VGPR values computed at run time, which the
instruction text does not show per lane. The report says so instead of guessing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

BANK_CONFLICTS_NOT_ESTIMATED = ("not estimated: LDS addresses are per-lane VGPR values computed at run time; "
                                "the instruction text does not show them")

_INSTR_RE = re.compile(r"^\s+([a-z][a-z0-9_]*)\b(.*)$")
_LABEL_RE = re.compile(r"^(\.LBB\d+_\d+):")
_BRANCH_RE = re.compile(r"^s_(?:cbranch_\w+|branch)$")
_VMCNT_RE = re.compile(r"vmcnt\((\d+)\)")

_GLOBAL_PREFIXES = ("global_", "buffer_", "flat_")


def _suffix_bytes(suffix: str) -> int | None:
    """Bytes of one lane's access from a mnemonic's width suffix (dwordx4, dword, ushort, b128, u16, ...)."""
    if m := re.search(r"dwordx(\d)", suffix):
        return 4 * int(m.group(1))
    if "dword" in suffix:
        return 4
    if re.search(r"(?:^|_)(?:short|ushort|sshort|u16|i16|b16)(?:_|$)", suffix):
        return 2
    if re.search(r"(?:^|_)(?:byte|ubyte|sbyte|u8|i8|b8)(?:_|$)", suffix):
        return 1
    if m := re.search(r"(?:^|_)b(\d+)(?:_|$)", suffix):
        return int(m.group(1)) // 8
    return None


def access_bytes(mnemonic: str) -> int | None:
    """Bytes one lane moves with a global/buffer/flat or LDS load/store (read2/write2: two accesses)."""
    for kind in ("load", "store", "read", "write"):
        for sep in (f"_{kind}2st64_", f"_{kind}2_", f"_{kind}_"):
            if sep in mnemonic:
                n = _suffix_bytes(mnemonic.split(sep, 1)[1])
                return None if n is None else n * (2 if "2" in sep else 1)
    return None


def is_global_load(m: str) -> bool:
    return m.startswith(_GLOBAL_PREFIXES) and "_load_" in m


def is_global_store(m: str) -> bool:
    return m.startswith(_GLOBAL_PREFIXES) and "_store_" in m


def is_global_atomic(m: str) -> bool:
    return m.startswith(_GLOBAL_PREFIXES) and "_atomic" in m


def is_lds_read(m: str) -> bool:
    return m.startswith("ds_read")


def is_lds_write(m: str) -> bool:
    return m.startswith("ds_write")


def is_mfma(m: str) -> bool:
    return m.startswith(("v_mfma_", "v_smfmac_"))


@dataclass(frozen=True, kw_only=True)
class Instr:
    mnemonic: str
    operands: str


@dataclass(frozen=True, kw_only=True)
class LoopStats:
    """One loop's body (from its header label to the backward branch), counted once per iteration."""

    header: str
    instructions: int
    mfma: int
    global_loads: dict[str, int]
    global_stores: dict[str, int]
    lds_reads: dict[str, int]
    lds_writes: dict[str, int]
    waitcnt: int  # s_waitcnt instructions in the body
    vmcnt_waits: tuple[int, ...]  # the N of each s_waitcnt vmcnt(N), in order
    mfma_with_global_in_flight: int  # MFMAs issued while the vmcnt model has global accesses outstanding
    first_global_load_before_last_mfma: bool

    @property
    def global_load_count(self) -> int:
        return sum(self.global_loads.values())

    @property
    def lds_read_count(self) -> int:
        return sum(self.lds_reads.values())

    @property
    def overlap(self) -> str:
        """'overlapped', 'not overlapped' or 'no global loads' in the loop."""
        if not self.global_load_count:
            return "no global loads"
        if not self.mfma:
            return "no MFMA"
        return "overlapped" if self.mfma_with_global_in_flight else "not overlapped"

    def to_json(self) -> dict[str, object]:
        return {
            "header": self.header, "instructions": self.instructions, "mfma": self.mfma,
            "global_loads": self.global_loads, "global_stores": self.global_stores,
            "lds_reads": self.lds_reads, "lds_writes": self.lds_writes,
            "mfma_per_global_load": round(self.mfma / self.global_load_count, 3) if self.global_load_count else None,
            "mfma_per_lds_read": round(self.mfma / self.lds_read_count, 3) if self.lds_read_count else None,
            "waitcnt": self.waitcnt, "vmcnt_waits": list(self.vmcnt_waits),
            "mfma_with_global_in_flight": self.mfma_with_global_in_flight,
            "global_loads_before_last_mfma": self.first_global_load_before_last_mfma,
            "overlap": self.overlap,
        }


@dataclass(frozen=True, kw_only=True)
class IsaAnalysis:
    """What one kernel's instructions say about its memory accesses and main loop."""

    global_loads: dict[str, int]  # mnemonic -> static count
    global_stores: dict[str, int]
    global_atomics: dict[str, int]
    lds_reads: dict[str, int]
    lds_writes: dict[str, int]
    loops: int
    main_loop: LoopStats | None

    def load_bytes(self) -> dict[int, int]:
        """Bytes per lane -> static count of global loads."""
        return _by_bytes(self.global_loads)

    def store_bytes(self) -> dict[int, int]:
        return _by_bytes(self.global_stores)

    def to_json(self) -> dict[str, object]:
        return {
            "global_loads": self.global_loads, "global_stores": self.global_stores,
            "global_atomics": self.global_atomics,
            "global_load_bytes": {str(k): v for k, v in self.load_bytes().items()},
            "global_store_bytes": {str(k): v for k, v in self.store_bytes().items()},
            "lds_reads": self.lds_reads, "lds_writes": self.lds_writes,
            "lds_bank_conflicts": BANK_CONFLICTS_NOT_ESTIMATED,
            "loops": self.loops, "main_loop": self.main_loop.to_json() if self.main_loop else None,
        }


def _by_bytes(counts: dict[str, int]) -> dict[int, int]:
    out: Counter[int] = Counter()
    for m, n in counts.items():
        out[access_bytes(m) or 0] += n
    return dict(sorted(out.items(), reverse=True))


def instructions(chunk: str) -> list[Instr | str]:
    """A kernel's body as instructions and label names (str), in order; comments and directives dropped."""
    out: list[Instr | str] = []
    for line in chunk.splitlines():
        if m := _LABEL_RE.match(line):
            out.append(m.group(1))
            continue
        if m := _INSTR_RE.match(line.split(";", 1)[0]):
            out.append(Instr(mnemonic=m.group(1), operands=m.group(2).strip()))
    return out


def _count(ins: list[Instr], pred) -> dict[str, int]:
    return dict(sorted(Counter(i.mnemonic for i in ins if pred(i.mnemonic)).items()))


def _in_flight_mfma(body: list[Instr]) -> int:
    outstanding = 0
    counted = 0
    for pass_ in range(2):
        for i in body:
            m = i.mnemonic
            if is_global_load(m) or is_global_store(m) or is_global_atomic(m):
                outstanding += 1
            elif m == "s_waitcnt" and (w := _VMCNT_RE.search(i.operands)):
                outstanding = min(outstanding, int(w.group(1)))
            elif is_mfma(m) and pass_ == 1 and outstanding > 0:
                counted += 1
    return counted


def loop_stats(header: str, body: list[Instr]) -> LoopStats:
    mfma_at = [k for k, i in enumerate(body) if is_mfma(i.mnemonic)]
    load_at = [k for k, i in enumerate(body) if is_global_load(i.mnemonic)]
    waits = [i for i in body if i.mnemonic == "s_waitcnt"]
    return LoopStats(
        header=header, instructions=len(body), mfma=len(mfma_at),
        global_loads=_count(body, is_global_load), global_stores=_count(body, is_global_store),
        lds_reads=_count(body, is_lds_read), lds_writes=_count(body, is_lds_write),
        waitcnt=len(waits), vmcnt_waits=tuple(int(w.group(1)) for i in waits if (w := _VMCNT_RE.search(i.operands))),
        mfma_with_global_in_flight=_in_flight_mfma(body),
        first_global_load_before_last_mfma=bool(load_at and mfma_at and load_at[0] < mfma_at[-1]),
    )


def find_loops(items: list[Instr | str]) -> list[LoopStats]:
    """Every backward branch's loop: the instructions from its target label to the branch."""
    where = {x: k for k, x in enumerate(items) if isinstance(x, str)}
    loops = []
    for k, x in enumerate(items):
        if isinstance(x, Instr) and _BRANCH_RE.match(x.mnemonic):
            target = x.operands.split()[0] if x.operands else ""
            start = where.get(target)
            if start is not None and start < k:
                body = [i for i in items[start + 1: k + 1] if isinstance(i, Instr)]
                loops.append(loop_stats(target, body))
    return loops


def analyse(chunk: str) -> IsaAnalysis:
    """The analysis of one kernel's text (from its `.type ... @function` to the next function)."""
    items = instructions(chunk)
    ins = [i for i in items if isinstance(i, Instr)]
    loops = find_loops(items)
    main = max(loops, key=lambda s: (s.mfma, s.global_load_count + s.lds_read_count, s.instructions), default=None)
    return IsaAnalysis(
        global_loads=_count(ins, is_global_load), global_stores=_count(ins, is_global_store),
        global_atomics=_count(ins, is_global_atomic),
        lds_reads=_count(ins, is_lds_read), lds_writes=_count(ins, is_lds_write),
        loops=len(loops), main_loop=main,
    )


def majority_warning(widths: dict[int, int], expected_bytes: int) -> list[str]:
    """Static load counts by bytes per lane: a warning when most loads are narrower than expected."""
    narrow = sum(n for b, n in widths.items() if b < expected_bytes)
    total = sum(widths.values())
    if 2 * narrow <= total:
        return []
    shown = ", ".join(f"{n} x {b} B" for b, n in widths.items())
    return [f"most global loads ({narrow} of {total}) are narrower than {expected_bytes} B ({shown}) [vector_loads]"]


def vector_warnings(isa: IsaAnalysis, expected_bytes: int | None) -> list[str]:
    """Where the spec meant `expected_bytes`-wide global loads per lane: a kernel whose global loads never
    reach that width, most of whose loads are narrower, or whose main loop has narrower ones. Warnings,
    never build failures."""
    if expected_bytes is None or not isa.global_loads:
        return []
    widths = isa.load_bytes()
    widest = max(widths)
    out = []
    if widest < expected_bytes:
        shown = ", ".join(f"{n} x {m}" for m, n in isa.global_loads.items())
        out.append(f"no {expected_bytes}-byte global loads (widest {widest} B: {shown}); "
                   f"the spec meant {expected_bytes}-byte loads [vector_loads]")
    else:
        out += majority_warning(widths, expected_bytes)
    loop = isa.main_loop
    if loop is not None and loop.global_loads:
        narrow = {m: n for m, n in loop.global_loads.items() if (access_bytes(m) or 0) < expected_bytes}
        if narrow:
            shown = ", ".join(f"{n} x {m}" for m, n in narrow.items())
            out.append(f"main loop {loop.header} has global loads narrower than {expected_bytes} B ({shown}) "
                       f"[vector_loads]")
    return out
