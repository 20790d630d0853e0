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

LDS bank conflicts are estimated where the target's hardware record gives its LDS bank count (gfx942):
the lane addresses of each ds_read/ds_write are followed from the work-item id through the VALU ops for
wave 0 (see LDS_BANK_MODEL; an estimate, not a measurement, labelled so in the report). Where no bank count
is given (gfx950) or an address depends on values not visible in the text, the report says so.
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
    lds_banks: LdsBankEstimate | None = None  # None: no bank count for this target (not estimated)

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
            "lds_bank_conflicts": self.lds_banks.to_json() if self.lds_banks else BANK_CONFLICTS_NOT_ESTIMATED,
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


def analyse(chunk: str, lds_banks: int | None = None) -> IsaAnalysis:
    """The analysis of one kernel's text (from its `.type ... @function` to the next function); `lds_banks`:
    the target's LDS bank count (4-byte banks), None for no bank-conflict estimate."""
    items = instructions(chunk)
    ins = [i for i in items if isinstance(i, Instr)]
    loops = find_loops(items)
    main = max(loops, key=lambda s: (s.mfma, s.global_load_count + s.lds_read_count, s.instructions), default=None)
    return IsaAnalysis(
        global_loads=_count(ins, is_global_load), global_stores=_count(ins, is_global_store),
        global_atomics=_count(ins, is_global_atomic),
        lds_reads=_count(ins, is_lds_read), lds_writes=_count(ins, is_lds_write),
        loops=len(loops), main_loop=main,
        lds_banks=lds_bank_estimate(items, lds_banks, main.header if main else None) if lds_banks else None,
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


# ---- LDS bank conflicts: an estimate --------------------------------------------------------------------
# The lane addresses of a ds_read/ds_write are VGPR values; where the VALU instructions that compute them
# from the work-item id (v0 at entry) and constants are visible, they can be followed for the 64 lanes of
# wave 0. That is what this does: a straight run through the kernel text (branches ignored, a loop body once),
# every VGPR either 64 known lane values (plus, possibly, an unknown value common to all lanes: an SGPR
# or a kernel argument) or unknown. A uniform addend does not change which lanes share a bank as long as it
# is a multiple of 4 bytes; it is assumed to be. An address that depends on anything else is "not followed".

LDS_BANK_MODEL = ("estimate: wave 0's lane addresses followed through the VALU ops from the work-item id "
                  "(v0) and constants (a straight run, the first pass of a loop); {banks} banks of 4 B, lanes "
                  "served in groups that move 128 B (32 lanes up to 4 B, 16 for 8 B, 8 for 16 B), a group "
                  "takes as many cycles as the most distinct dwords one bank holds; ways = cycles / ideal")

_LANES = 64
_MASK32 = 0xFFFFFFFF
_VREG_RE = re.compile(r"^v(\d+)$")
_VRANGE_RE = re.compile(r"^v\[(\d+):(\d+)\]$")
_SREG_RE = re.compile(r"^s(\d+)$")
_OFFSET_RE = re.compile(r"\boffset(\d?):(\d+)")


@dataclass(frozen=True)
class _Val:
    lanes: tuple[int, ...]
    uniform: bool = False  # plus a value unknown here but the same in every lane


def _const(c: int) -> _Val:
    return _Val(lanes=(c & _MASK32,) * _LANES)


def _literal(tok: str) -> int | None:
    try:
        return int(tok, 0)
    except ValueError:
        return None


def _strip_suffix(m: str) -> str:
    for suf in ("_e32", "_e64"):
        if m.endswith(suf):
            return m[: -len(suf)]
    return m


def _lane_map(f, *vals: _Val) -> _Val:
    return _Val(lanes=tuple(f(*xs) & _MASK32 for xs in zip(*(v.lanes for v in vals))))


def _add(*vals: _Val) -> _Val:
    return _Val(lanes=tuple(sum(xs) & _MASK32 for xs in zip(*(v.lanes for v in vals))),
                uniform=any(v.uniform for v in vals))


def _exact(*vals: _Val) -> bool:
    return not any(v.uniform for v in vals)


def _constant(v: _Val) -> int | None:
    return v.lanes[0] if _exact(v) and len(set(v.lanes)) == 1 else None


def _valu(op: str, src: list[_Val | None]) -> _Val | None:
    """One integer VALU op on followed values; None: not followed (unknown op, unknown operand, or a
    uniform unknown going through an op that is not additive)."""
    if any(s is None for s in src):
        return None
    if op in ("v_mov_b32",) and len(src) == 1:
        return src[0]
    if op in ("v_add_u32", "v_add_co_u32", "v_add_nc_u32", "v_add_i32") and len(src) == 2:
        return _add(*src)
    if op == "v_add3_u32" and len(src) == 3:
        return _add(*src)
    if op in ("v_sub_u32", "v_sub_co_u32") and len(src) == 2:
        return _add(src[0], _lane_map(lambda x: -x, _Val(lanes=src[1].lanes))) if _exact(src[1]) else None
    if op in ("v_subrev_u32", "v_subrev_co_u32") and len(src) == 2:
        return _valu("v_sub_u32", [src[1], src[0]])
    if op == "v_lshlrev_b32" and len(src) == 2 and (k := _constant(src[0])) is not None:  # dst, shift, value
        return _Val(lanes=tuple((x << (k & 31)) & _MASK32 for x in src[1].lanes), uniform=src[1].uniform)
    if op == "v_lshl_add_u32" and len(src) == 3 and (k := _constant(src[1])) is not None:  # (a << k) + b
        return _add(_Val(lanes=tuple((x << (k & 31)) & _MASK32 for x in src[0].lanes), uniform=src[0].uniform), src[2])
    if op == "v_add_lshl_u32" and len(src) == 3 and (k := _constant(src[2])) is not None:  # (a + b) << k
        s = _add(src[0], src[1])
        return _Val(lanes=tuple((x << (k & 31)) & _MASK32 for x in s.lanes), uniform=s.uniform)
    if op in ("v_mul_u32_u24", "v_mul_lo_u32") and len(src) == 2:
        a, b = src
        if (c := _constant(a)) is not None:
            a, b = b, a
        if (c := _constant(b)) is not None:  # times a constant: a uniform addend stays uniform
            return _Val(lanes=tuple((x * c) & _MASK32 for x in a.lanes), uniform=a.uniform)
        return _lane_map(lambda x, y: x * y, a, b) if _exact(a, b) else None
    if op == "v_mad_u32_u24" and len(src) == 3:
        p = _valu("v_mul_u32_u24", src[:2])
        return None if p is None else _add(p, src[2])
    if not _exact(*src):  # bitwise ops and right shifts do not carry an unknown addend
        return None
    binary = {"v_and_b32": lambda a, b: a & b, "v_or_b32": lambda a, b: a | b, "v_xor_b32": lambda a, b: a ^ b,
              "v_lshrrev_b32": lambda k, a: a >> (k & 31), "v_ashrrev_i32": lambda k, a: a >> (k & 31)}
    ternary = {"v_or3_b32": lambda a, b, c: a | b | c, "v_lshl_or_b32": lambda a, k, b: (a << (k & 31)) | b,
               "v_and_or_b32": lambda a, b, c: (a & b) | c, "v_xad_u32": lambda a, b, c: (a ^ b) + c,
               "v_bfe_u32": lambda a, o, w: (a >> (o & 31)) & ((1 << (w & 31)) - 1),
               "v_bfi_b32": lambda m, a, b: (m & a) | (~m & b)}
    if op in binary and len(src) == 2:
        return _lane_map(binary[op], *src)
    if op in ternary and len(src) == 3:
        return _lane_map(ternary[op], *src)
    return None


def _operands(text: str) -> list[str]:
    """The comma-separated operands, modifiers (offset:N, off, ...) dropped from the last."""
    return [t.strip().split()[0] for t in text.split(",") if t.strip()]


def _dst_regs(tok: str) -> list[int]:
    if m := _VREG_RE.match(tok):
        return [int(m.group(1))]
    if m := _VRANGE_RE.match(tok):
        return list(range(int(m.group(1)), int(m.group(2)) + 1))
    return []


def _bank_cycles(addrs: list[int], nbytes: int, banks: int) -> tuple[int, int]:
    """(cycles, ideal cycles) of one access of `nbytes` per lane at these lane addresses."""
    group = max(1, min(_LANES, 128 // max(nbytes, 4)))
    cycles = ideal = 0
    for g in range(0, len(addrs), group):
        per_bank: dict[int, set[int]] = {}
        for a in addrs[g: g + group]:
            for d in range(a // 4, (a + max(nbytes, 1) - 1) // 4 + 1):  # every dword the lane touches
                per_bank.setdefault(d % banks, set()).add(d)
        cycles += max(len(s) for s in per_bank.values())
        ideal += 1
    return cycles, ideal


def _ds_parts(mnemonic: str, operands: str) -> tuple[str, list[int], int] | None:
    """(address operand, byte offsets of each access, bytes per access) of a ds_read/ds_write."""
    ops = _operands(operands)
    if not ops:
        return None
    addr = ops[1] if is_lds_read(mnemonic) and len(ops) > 1 else ops[0]
    offs = {k or "": int(v) for k, v in _OFFSET_RE.findall(operands)}
    two = "2st64_" in mnemonic or "2_" in mnemonic.split("_", 1)[1][:7]
    total = access_bytes(mnemonic)
    if total is None:
        return None
    if not two:
        return addr, [offs.get("", 0)], total
    size = total // 2
    scale = size * (64 if "st64" in mnemonic else 1)
    return addr, [offs.get("0", 0) * scale, offs.get("1", 0) * scale], size


@dataclass(frozen=True, kw_only=True)
class LdsAccess:
    mnemonic: str
    in_main_loop: bool
    ways: float | None  # None: its lane addresses were not followed


@dataclass(frozen=True, kw_only=True)
class LdsBankEstimate:
    banks: int
    accesses: tuple[LdsAccess, ...]

    def to_json(self) -> dict[str, object]:
        def part(acc: list[LdsAccess]) -> dict[str, object]:
            known = [a.ways for a in acc if a.ways is not None]
            return {"accesses": len(acc), "followed": len(known), "conflicted": sum(w > 1 for w in known),
                    "worst_ways": round(max(known), 2) if known else None}

        by = {}
        for m in sorted({a.mnemonic for a in self.accesses}):
            by[m] = part([a for a in self.accesses if a.mnemonic == m])
        return {"method": LDS_BANK_MODEL.format(banks=self.banks), **part(list(self.accesses)),
                "main_loop": part([a for a in self.accesses if a.in_main_loop]), "by_instruction": by}


def lds_bank_estimate(items: list[Instr | str], banks: int, main_header: str | None = None) -> LdsBankEstimate:
    """Every ds_read/ds_write of one kernel's instructions (codegen.targets.amdgcn_isa.instructions), with its
    estimated bank-conflict ways where its lane addresses could be followed (see LDS_BANK_MODEL)."""
    vregs: dict[int, _Val] = {0: _Val(lanes=tuple(range(_LANES)))}  # v0: the work-item id, wave 0
    sconst: dict[int, int] = {}
    loop_span = _loop_span(items, main_header)
    out = []
    for k, it in enumerate(items):
        if isinstance(it, str):
            continue
        m, ops = _strip_suffix(it.mnemonic), _operands(it.operands)

        def value(tok: str) -> _Val | None:
            if mm := _VREG_RE.match(tok):
                return vregs.get(int(mm.group(1)))
            if mm := _SREG_RE.match(tok):
                c = sconst.get(int(mm.group(1)))
                return _Val(lanes=(0,) * _LANES, uniform=True) if c is None else _const(c)
            c = _literal(tok)
            return None if c is None else _const(c)

        if is_lds_read(m) or is_lds_write(m):
            parts = _ds_parts(m, it.operands)
            ways = None
            if parts is not None and (v := value(parts[0])) is not None and _VREG_RE.match(parts[0]):
                cycles = ideal = 0
                for off in parts[1]:
                    c, i = _bank_cycles([(x + off) & _MASK32 for x in v.lanes], parts[2], banks)
                    cycles, ideal = cycles + c, ideal + i
                ways = cycles / ideal
            out.append(LdsAccess(mnemonic=m, in_main_loop=loop_span is not None and loop_span[0] < k <= loop_span[1],
                                 ways=ways))
            if is_lds_read(m) and ops:
                for r in _dst_regs(ops[0]):
                    vregs.pop(r, None)
            continue
        if not ops:
            continue
        if m.startswith("s_"):
            if mm := _SREG_RE.match(ops[0]):
                c = _literal(ops[1]) if m in ("s_mov_b32", "s_movk_i32") and len(ops) > 1 else None
                if c is None:
                    sconst.pop(int(mm.group(1)), None)
                else:
                    sconst[int(mm.group(1))] = c & _MASK32
            elif mm := re.match(r"^s\[(\d+):(\d+)\]$", ops[0]):
                for r in range(int(mm.group(1)), int(mm.group(2)) + 1):
                    sconst.pop(r, None)
            continue
        dst = _dst_regs(ops[0])
        if not dst or not m.startswith("v_"):
            for r in dst:  # a load or another writer of VGPRs: no longer followed
                vregs.pop(r, None)
            continue
        srcs = ops[1:]
        if m in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32") and srcs and not _VREG_RE.match(srcs[0]) \
                and _literal(srcs[0]) is None and srcs[0].startswith(("vcc", "s[")):
            srcs = srcs[1:]  # VOP3b: the carry-out SGPR pair comes after the destination
        res = _valu(m, [value(t) for t in srcs]) if len(dst) == 1 else None
        for r in dst:
            vregs.pop(r, None)
        if res is not None:
            vregs[dst[0]] = res
    return LdsBankEstimate(banks=banks, accesses=tuple(out))


def _loop_span(items: list[Instr | str], header: str | None) -> tuple[int, int] | None:
    """(label position, backward-branch position) of the loop whose header is `header`."""
    if header is None:
        return None
    start = next((k for k, x in enumerate(items) if x == header), None)
    if start is None:
        return None
    ends = [k for k, x in enumerate(items) if isinstance(x, Instr) and _BRANCH_RE.match(x.mnemonic) and k > start
            and x.operands.split()[:1] == [header]]
    return (start, max(ends)) if ends else None
