"""Static analysis of the ISA (`tilegen build`'s report): hand-written and cut amdgcn / PTX snippets in
tests/data/isa/, with negative controls (scalar loads where 16-byte ones were meant must be flagged,
16-byte loads must not), and the committed static reports carrying the analysis for every kernel."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.gemm.instance import GemmInstance
from codegen.generate.pipeline import Project
from codegen.targets.amdgcn import parse_asm
from codegen.targets.amdgcn_isa import BANK_CONFLICTS_NOT_ESTIMATED, access_bytes, analyse, vector_warnings
from codegen.targets.ptx_memory import analyse_ptx, ptx_access_bytes, ptx_vector_warnings
from codegen.targets.sm90 import parse_ptx

DATA = Path(__file__).parent / "data"
ISA = DATA / "isa"
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mnemonic, nbytes", [
    ("global_load_dwordx4", 16), ("global_load_dwordx2", 8), ("global_load_dword", 4), ("global_load_ushort", 2),
    ("global_load_ubyte", 1), ("buffer_load_dwordx4", 16), ("global_load_short_d16_hi", 2),
    ("global_store_dwordx2", 8), ("global_store_short", 2), ("ds_read_b128", 16), ("ds_read_b64", 8),
    ("ds_read_u16", 2), ("ds_read2st64_b64", 16), ("ds_read2_b32", 8), ("ds_write_b128", 16), ("ds_write_b32", 4),
])
def test_access_bytes(mnemonic, nbytes):
    assert access_bytes(mnemonic) == nbytes


def test_loop_that_waits_for_its_loads_before_the_mfmas_is_not_overlapped():
    isa = analyse((ISA / "gemm_loop_waits_before_mfma.s").read_text())
    loop = isa.main_loop
    assert isa.loops == 1 and loop.header == ".LBB0_3"
    assert loop.mfma == 2 and loop.global_loads == {"global_load_dwordx4": 2} and loop.lds_reads == {"ds_read_b128": 2}
    assert loop.waitcnt == 5 and loop.vmcnt_waits == (1, 0)
    assert loop.mfma_with_global_in_flight == 0 and loop.overlap == "not overlapped"
    assert loop.first_global_load_before_last_mfma  # issued early, yet waited for: not overlap
    assert isa.global_loads == {"global_load_dwordx4": 3} and isa.global_stores == {"global_store_dwordx2": 1}
    assert isa.to_json()["lds_bank_conflicts"] == BANK_CONFLICTS_NOT_ESTIMATED
    assert vector_warnings(isa, 16) == []


def test_loop_with_loads_in_flight_across_the_mfmas_is_overlapped():
    loop = analyse((ISA / "gemm_loop_overlapped.s").read_text()).main_loop
    assert loop.mfma == 2 and loop.mfma_with_global_in_flight == 2 and loop.overlap == "overlapped"
    assert loop.to_json()["mfma_per_global_load"] == 1.0


def test_scalar_loads_where_16_bytes_were_meant_are_flagged():
    isa = analyse((ISA / "rows_scalar_loads.s").read_text())
    assert isa.load_bytes() == {2: 4} and isa.main_loop is None
    (warning,) = vector_warnings(isa, 16)
    assert "no 16-byte global loads" in warning and "4 x global_load_ushort" in warning and "[vector_loads]" in warning


def test_16_byte_loads_are_not_flagged():
    isa = analyse((ISA / "rows_vector_loads.s").read_text())
    assert isa.load_bytes() == {16: 2} and vector_warnings(isa, 16) == []
    assert vector_warnings(isa, None) == []  # the family does not say: nothing checked


def test_mostly_narrow_loads_are_flagged_even_when_some_are_wide():
    text = (ISA / "rows_scalar_loads.s").read_text().replace(
        "global_load_ushort v1, v[2:3], off\n", "global_load_dwordx4 v[10:13], v[2:3], off\n")
    isa = analyse(text)
    assert isa.load_bytes() == {16: 1, 2: 3}
    (warning,) = vector_warnings(isa, 16)
    assert "most global loads (3 of 4) are narrower than 16 B" in warning
    mem = analyse_ptx("ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd4];\nld.global.nc.u16 %rs1, [%rd4];\n")
    assert ptx_vector_warnings(mem, 16) == []  # 1 of 2: not most


def test_narrow_loads_inside_the_main_loop_are_flagged_even_beside_wide_ones():
    text = (ISA / "gemm_loop_waits_before_mfma.s").read_text().replace(
        "global_load_dwordx4 v[22:25], v[10:11], off", "global_load_dword v22, v[10:11], off")
    (warning,) = vector_warnings(analyse(text), 16)
    assert "main loop .LBB0_3" in warning and "1 x global_load_dword" in warning


def test_real_gfx942_assembly_carries_the_analysis():
    """The excerpt keeps only 3 v_mfma per kernel (its loads are elided): parse_asm attaches the analysis."""
    for k in parse_asm((DATA / "gfx942_specialized.s").read_text()):
        j = k.isa.to_json()
        assert set(j) >= {"global_loads", "global_load_bytes", "lds_reads", "main_loop", "lds_bank_conflicts"}
        assert k.isa.global_loads == {} and k.isa.main_loop is None, k.symbol


@pytest.mark.parametrize("opcode, nbytes", [
    ("ld.global.nc.v4.u32", 16), ("ld.global.v2.f32", 8), ("ld.global.nc.u16", 2), ("st.global.v4.b32", 16),
    ("st.global.u32", 4), ("ld.global.nc.L1::no_allocate.v4.b32", 16), ("st.global.b16", 2),
])
def test_ptx_access_bytes(opcode, nbytes):
    assert ptx_access_bytes(opcode) == nbytes


def test_ptx_scalar_loads_flagged_vector_and_tma_not():
    kernels = {k.symbol: k.memory for k in parse_ptx((ISA / "rows_scalar.ptx").read_text())}
    scalar, vector, tma = kernels["rows_scalar_kernel"], kernels["rows_vector_kernel"], kernels["gemm_tma_kernel"]
    assert scalar.global_loads == {2: 2} and scalar.global_stores == {2: 1}
    (warning,) = ptx_vector_warnings(scalar, 16)
    assert "no 16-byte global loads in the PTX" in warning
    assert vector.global_loads == {16: 1} and ptx_vector_warnings(vector, 16) == []
    assert tma.tma == 1 and tma.wgmma == 1 and tma.cp_async == {16: 1} and ptx_vector_warnings(tma, 16) == []
    assert vector.to_json()["source"] == "ptx"


def test_ptx_of_real_kernels_reads_widths():
    mem = analyse_ptx((DATA / "sm90_specialized.ptx").read_text())
    assert mem.global_loads or mem.tma or mem.cp_async


@functools.cache
def _committed_instances() -> dict:
    return {f.uri: f.instance for f in Project().rendered()}


def _rows_unaligned(uri: str, shape: list[int]) -> bool:
    """A GEMM shape where A's or B's stored rows (stride k, m or n by layout) are no multiple of 16 bytes."""
    inst = _committed_instances().get(uri)
    if not isinstance(inst, GemmInstance) or inst.structure != "tiled":
        return False
    m, n, k = shape
    vec = 16 // DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    return bool((m if inst.trans_a else k) % vec or (k if inst.trans_b else n) % vec)


@pytest.mark.parametrize("target", list(Target))
def test_committed_static_report_has_the_analysis_for_every_kernel(target):
    path = ROOT / "reports" / "static" / f"{target.value}.json"
    if not path.is_file():
        pytest.skip(f"{path} not written yet")
    doc = json.loads(path.read_text())
    for b in doc["builds"]:
        assert "warnings" in b["summary"], b["uri"]
        for k in b["kernels"]:
            isa = k["isa"]
            assert "global_load_bytes" in isa and "warnings" in isa and "expected_global_load_bytes" in isa, k["symbol"]
            if target == Target.GFX942:  # the bank-conflict estimate: gfx942's record gives its 32 banks
                est = isa["lds_bank_conflicts"]
                assert est["method"].startswith("estimate:") and est["accesses"] >= est["followed"], k["symbol"]
            elif target == Target.GFX950:
                assert isa["lds_bank_conflicts"] == BANK_CONFLICTS_NOT_ESTIMATED, k["symbol"]
            # sm_90 GEMMs load through TMA; the staging kernels of `staging: padded` (expected width None: not
            # checked) and any GEMM at a shape whose operands' rows are off 16-byte boundaries load narrower by design
            if (b["uri"].startswith("gemm_") and target != Target.SM_90 and isa["expected_global_load_bytes"]
                    and not _rows_unaligned(b["uri"], b["shape"])):
                assert "16" in isa["global_load_bytes"], f"{k['symbol']}: a GEMM without dwordx4 loads"


# ---- LDS bank conflicts (an estimate: wave 0's lane addresses followed through the VALU ops) -----------

def _lds(name: str, banks: int = 32):
    return analyse((ISA / name).read_text(), banks)


def test_unpadded_column_read_is_32_way_and_its_padded_twin_conflict_free():
    est = _lds("lds_conflicting.s").lds_banks
    assert [(a.mnemonic, a.ways, a.in_main_loop) for a in est.accesses] == [
        ("ds_read_b128", 8.0, False), ("ds_read_b32", 32.0, True), ("ds_read_b32", 1.0, True)]
    j = est.to_json()
    assert j["method"].startswith("estimate:") and "32 banks of 4 B" in j["method"]
    assert (j["accesses"], j["followed"], j["conflicted"], j["worst_ways"]) == (3, 3, 2, 32.0)
    assert j["main_loop"] == {"accesses": 2, "followed": 2, "conflicted": 1, "worst_ways": 32.0}
    assert j["by_instruction"]["ds_read_b128"]["worst_ways"] == 8.0
    # the same text with 64 banks (not a gfx942 figure): 128-byte rows fall on 2 dword columns -> 16-way
    assert _lds("lds_conflicting.s", banks=64).lds_banks.accesses[1].ways == 16.0


def test_consecutive_and_swizzled_accesses_are_conflict_free_and_unknown_addresses_not_followed():
    est = _lds("lds_conflict_free.s").lds_banks
    got = [(a.mnemonic, a.ways) for a in est.accesses]
    assert got == [("ds_write_b128", 1.0), ("ds_read_b128", 1.0), ("ds_write_b32", 1.0), ("ds_read2st64_b32", 1.0),
                   ("ds_read_b128", 1.0), ("ds_read_b32", None), ("ds_read_b32", None)]
    j = est.to_json()
    assert (j["accesses"], j["followed"], j["conflicted"], j["worst_ways"]) == (7, 5, 0, 1.0)
    assert j["main_loop"] == {"accesses": 0, "followed": 0, "conflicted": 0, "worst_ways": None}  # no loop here


def test_bank_model_counts_distinct_dwords_per_bank_per_group():
    from codegen.targets.amdgcn_isa import _bank_cycles

    assert _bank_cycles([4 * i for i in range(64)], 4, 32) == (2, 2)  # two groups of 32 lanes, one cycle each
    assert _bank_cycles([0] * 64, 4, 32) == (2, 2)  # one dword for all: a broadcast, no conflict
    assert _bank_cycles([2 * i for i in range(64)], 2, 32) == (2, 2)  # u16: two lanes per dword
    assert _bank_cycles([16 * i for i in range(64)], 16, 32) == (8, 8)  # b128: 8 lanes = 128 B a group
    assert _bank_cycles([32 * i for i in range(64)], 16, 32) == (16, 8)  # b128 with 32-byte stride: 2-way
    assert _bank_cycles([128 * i for i in range(64)], 4, 32) == (64, 2)  # every lane on bank 0: 32-way


def test_no_bank_count_no_estimate():
    isa = analyse((ISA / "lds_conflicting.s").read_text())
    assert isa.lds_banks is None and isa.to_json()["lds_bank_conflicts"] == BANK_CONFLICTS_NOT_ESTIMATED


# ---- sm_90 SASS (cuobjdump -sass), when cuobjdump is present ------------------------------------------

@pytest.mark.parametrize("opcode, nbytes", [
    ("LDG.E.128", 16), ("LDG.E.128.CONSTANT", 16), ("LDG.E.64", 8), ("LDG.E", 4), ("LDG.E.U16", 2),
    ("LDG.E.S8", 1), ("STG.E.U16", 2), ("LDGSTS.E.BYPASS.LTC128B.128", 16), ("LDGSTS.E", 4),
    ("LDG.E.EL.LTC128B.U16", 2),  # LTC128B is an L2 hint, not a width
])
def test_sass_access_bytes(opcode, nbytes):
    from codegen.targets.sm90_sass import sass_access_bytes

    assert sass_access_bytes(opcode) == nbytes


def test_sass_scalar_loads_flagged_128_bit_and_tma_not():
    from codegen.targets.sm90_sass import parse_sass, sass_vector_warnings

    ks = {k.symbol: k for k in parse_sass((ISA / "sm90_cut.sass").read_text())}
    assert list(ks) == ["rows_scalar_kernel", "rows_vector_kernel", "gemm_tma_kernel"]
    scalar, vector, gemm = ks.values()
    assert scalar.global_loads == {2: 2} and scalar.global_stores == {2: 1}  # the predicated @!P0 LDG counted
    assert (scalar.local_loads, scalar.local_stores) == (1, 1)  # LDL / STL: spills or stack
    (warning,) = sass_vector_warnings(scalar, 16)
    assert "no 16-byte global loads in the SASS" in warning and "[vector_loads]" in warning
    assert vector.global_loads == {16: 2, 4: 1} and vector.global_stores == {16: 1}
    assert sass_vector_warnings(vector, 16) == []  # 1 narrow of 3: not most
    assert sass_vector_warnings(scalar, None) == []  # the family does not say: nothing checked
    assert (gemm.tma_loads, gemm.ldgsts, gemm.hgmma) == (2, {16: 1}, {"64x128x16.F32": 2})
    assert sass_vector_warnings(gemm, 16) == []
    j = gemm.to_json()
    assert j["source"] == "sass" and j["hgmma"] == 2 and j["local_loads"] == 0


def test_sass_report_refused_without_cuobjdump(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from codegen.cli.main import app
    from codegen.targets import sm90_sass

    monkeypatch.setattr(sm90_sass.shutil, "which", lambda name: None)
    monkeypatch.setattr("codegen.targets.sm90.find_nvcc", lambda: tmp_path / "nvcc")  # no cuobjdump beside it
    out = tmp_path / "sass.json"
    result = CliRunner().invoke(app, ["sass", "rmsnorm_fp16", "--out", str(out)])
    assert result.exit_code == 1 and "cuobjdump not found" in result.output and not out.exists()


def test_committed_sm90_report_reads_the_ptx_on_every_machine():
    """sm_90.json must not depend on whether cuobjdump is installed: always the PTX, one fixed sentence."""
    from codegen.targets.ptx_memory import SASS_NOT_READ

    doc = json.loads((ROOT / "reports" / "static" / "sm_90.json").read_text())
    blocks = [k["isa"] for b in doc["builds"] for k in b["kernels"]]
    assert blocks and all(i["source"] == "ptx" and i["sass"] == SASS_NOT_READ for i in blocks)


def test_attention_decode_s_combine_kernel_is_checked_at_the_width_it_loads():
    """The combine kernel after the splits loads fp32 partials combine_vec at a time (4 bytes by default, 16 with
    combine_vec 4): checked at that width, not at the 16 bytes of the main loop's tiles, so a default decode spec
    gets no vector_loads warning it did not ask for; prefill and the fixup combine have one kernel at 16."""
    from codegen.targets.base import load_widths

    files = {f.uri: f for f in Project().rendered(targets=[Target.SM_90])}

    def widths(pred):
        inst = next(f.instance for f in files.values() if f.instance.op == "attention" and pred(f.instance))
        return list(load_widths(inst, ["k_kernel", "k_kernel_1"]).values())

    assert widths(lambda i: i.variant.value == "decode" and not i.fixup and i.combine_vec is None) == [16, 4]
    assert widths(lambda i: i.variant.value == "decode" and i.combine_vec == 4) == [16, 16]
    assert widths(lambda i: i.variant.value == "prefill") == [16, 16]
