"""Dynamic M for GEMM (issue 12, `dynamic_m`): one kernel, compiled once with M symbolic, for every M of a range.

The spec rules are expect-tested in tests/test_spec_errors.py ("dynamic M"). Here: the names (dynamic_m is part of
the configuration), the rendered module (the static program plus a dynamic-M entry point), the M values verify adds, one
compile for every M (build, lower, precompile), the numerics and the negative control of the ragged row block
on the CPU, and what the lowered source shows (no GPU needed).
"""

from __future__ import annotations

import re

import pytest
from numcheck import check_output
from seeds import hand_files
from spectext import FILE

from codegen.core.hardware import Target
from codegen.families import derived_shapes
from codegen.families.gemm.numerics import DYNAMIC_VERIFY_ELEMENTS, dynamic_m_values
from codegen.generate.instance import build_instances
from codegen.generate.pipeline import Project
from codegen.generate.render import render, render_all
from codegen.run.gpu import GpuInfo, compile_tasks
from codegen.run.gpurun import plan
from codegen.spec.load import parse_specs

PROJECT = Project()
SEED = "gemm_fp16_dynamic_m"
SEED_FILES = {f.instance.target.value: f for f in hand_files(PROJECT) if SEED in f.names}

# small enough for the CPU: N = K = 256, 64-row blocks
PROBE = """\
- name: probe
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  dynamic_m: {min: 1, max: 300}
  shapes: [{m: 100, n: 256, k: 256}]
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}
  tail: predicated
  targets: [gfx942, sm_90]
"""


def probe(target: str = "sm_90", text: str = PROBE):
    [f] = [f for f in render_all(build_instances(parse_specs(text, FILE))) if f.instance.target.value == target]
    return f


def static_twin(text: str, target: str):
    """The same spec without dynamic_m: the static kernel of the same configuration."""
    return probe(target, re.sub(r"  dynamic_m: .*\n", "", text))


# ---- names --------------------------------------------------------------------------------------------


def test_the_seed_kernels_say_they_are_dynamic():
    assert sorted(SEED_FILES) == ["gfx942", "sm_90"]
    assert SEED_FILES["sm_90"].uri.startswith("gemm_fp16_nt_128x256x64_t256_s4_sw8_dynm_predicated_sm90_")
    assert SEED_FILES["gfx942"].uri.startswith("gemm_fp16_nt_128x128x64_t256_s2_sw8_kp2_dynm_predicated_gfx942_")
    for f in SEED_FILES.values():
        assert f"def {f.uri}(" in f.text  # the kernel symbol is the name
        assert f.instance.dynamic_m == (1, 8192)


def test_dynamic_m_is_part_of_the_identity():
    dyn, static = probe(), static_twin(PROBE, "sm_90")
    assert '"dynamic_m":null' in static.instance.canonical() and "make_dynamic_kernel" not in static.text
    assert '"dynamic_m":[1,300]' in dyn.instance.canonical()
    # the same stem but for `dynm`; another hash
    assert dyn.uri.rsplit("_", 1)[0] == static.uri.rsplit("_", 1)[0].replace("_predicated", "_dynm_predicated")
    assert dyn.uri.rsplit("_", 1)[1] != static.uri.rsplit("_", 1)[1]
    # the range is part of the kernel (its module states it): another range, another kernel
    assert probe(text=PROBE.replace("max: 300", "max: 301")).uri != dyn.uri


# ---- the module ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_dynamic_module_is_the_static_program_plus_a_dynamic_entry_point(target):
    dyn, static = probe(target), static_twin(PROBE, target)
    body = dyn.text[dyn.text.index("BLOCK_M, BLOCK_N, BLOCK_K"):]
    program, entry = body.split("\n\n# ---- dynamic M", 1)
    static_body = static.text[static.text.index("BLOCK_M, BLOCK_N, BLOCK_K"):]
    assert program == static_body.replace(static.uri, dyn.uri)  # the same program, at any M
    assert "M_MIN, M_MAX = 1, 300" in entry
    assert 'def make_dynamic_kernel(M: str, N: int, K: int):' in entry
    assert 'return make_kernel(T.dynamic(M, "int32"), N, K)' in entry
    assert "via templates/gemm/gemm.py.j2 " in dyn.text.splitlines()[0]  # the one GEMM template: its scheduler's entry point
    assert "'dynamic_m': {'max': 300, 'min': 1}" in dyn.text  # METADATA


def test_list_says_dynamic():
    assert probe().instance.summary()["schedule"] == "stages 2, M dynamic 1..300"


# ---- one compile for every M --------------------------------------------------------------------------


def test_one_compile_shape_for_every_m():
    f = SEED_FILES["sm_90"]
    assert f.instance.compile_shapes() == [("m", 4096, 4096)]
    assert f.instance.compile_shape((17, 4096, 4096)) == f.instance.compile_shape(("m", 4096, 4096))
    twin = static_twin(PROBE, "sm_90")
    assert twin.instance.compile_shapes(((1, 256, 256), (2, 256, 256))) == [(1, 256, 256), (2, 256, 256)]


def test_verify_plan_runs_every_m_and_compiles_once():
    gpu = GpuInfo(name="NVIDIA H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=50 << 20,
                  torch_version="x", runtime_version="y")
    f, twin = SEED_FILES["sm_90"], static_twin(PROBE, "sm_90")
    jobs, skipped = plan([f, twin], gpu, derived=True, native_only=False)
    assert not skipped
    assert [s for g, s in jobs if g is f] == [(1, 4096, 4096), (1000, 4096, 4096), (4096, 4096, 4096),
                                               (128, 4096, 4096), (129, 4096, 4096), (8192, 4096, 4096)]
    groups = compile_tasks(jobs)
    assert [len(v) for (uri, _), v in groups.items() if uri == f.uri] == [6]  # six M values, one compilation
    assert sum(uri == twin.uri for uri, _ in groups) == len([1 for g, _ in jobs if g is twin])


# ---- verification: derived M values, numerics, controls -----------------------------------------------


def test_derived_m_values_of_the_seed():
    for f in SEED_FILES.values():  # block_m 128 on both targets
        assert derived_shapes(f.instance) == [(1, 4096, 4096), (128, 4096, 4096), (129, 4096, 4096), (8192, 4096, 4096)]


def test_derived_m_values_stay_in_the_range_and_within_what_verify_affords():
    wide = probe(text=PROBE.replace("max: 300", "max: 4194240")).instance  # 65535 row blocks of 64
    top = DYNAMIC_VERIFY_ELEMENTS // (256 + 256)
    assert derived_shapes(wide) == [(1, 256, 256), (64, 256, 256), (65, 256, 256), (top, 256, 256)]
    narrow = probe(text=PROBE.replace("{min: 1, max: 300}", "{min: 100, max: 200}")).instance
    assert dynamic_m_values(narrow, 256, 256) == [100, 200]  # 64 and 65 are outside it
    one = probe(text=PROBE.replace("{min: 1, max: 300}", "{min: 100, max: 100}")).instance
    assert dynamic_m_values(one, 256, 256) == [100]


@pytest.mark.parametrize("chunked", [False, True])
def test_reference_output_verifies_at_every_derived_m_with_every_control_rejected(chunked):
    inst = probe().instance
    for shape in derived_shapes(inst):
        status, _, controls = check_output(inst, shape, lambda case, ref: ref,
                                           max_elements=4096 if chunked else None)
        assert status == "verified", (shape, controls)
        ragged = shape[0] % inst.block_m != 0
        assert controls["ragged_m_block_dropped"] == ("rejected" if ragged else
                                                      "n/a (identical to the reference for this shape)"), shape
        assert all(v.startswith(("rejected", "n/a")) for v in controls.values()), (shape, controls)
        assert controls["dropped_k_tile"] == controls["wrong_operation"] == controls["zeros"] == "rejected"


def test_a_kernel_that_drops_the_ragged_row_block_fails():
    inst = probe().instance

    def floor_grid(case, ref):  # M // block_m row blocks over a cleared C
        out = ref.clone()
        out[ref.shape[0] // inst.block_m * inst.block_m:] = 0
        return out

    status, cmp, _ = check_output(inst, (65, 256, 256), floor_grid)
    assert status == "failed" and cmp.mismatch_ratio > 0


# ---- lowering: M is a kernel argument, K is not ------------------------------------------------------


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_lowered_seed_takes_m_at_launch(target):
    pytest.importorskip("tilelang")
    from codegen.build.compile import _lower_recording_launches

    f = SEED_FILES[target]
    source, [launch] = _lower_recording_launches(f, f.instance.shapes[0])
    header = next(ln for ln in source.splitlines() if "__global__" in ln and f"{f.uri}_kernel(" in ln)
    assert header.rstrip(";{ ").endswith("int m)"), header  # M arrives with the launch
    assert re.search(r"< m\)", source)  # the stores (and AMD's loads) are checked against it
    loops = re.findall(r"for \(int k\w* = 0; k\w* < (\w+); \+\+k\w*\)", source)
    assert loops and all(n.isdigit() for n in loops), loops  # the K loop's trip count is a constant
    bx, by, bz = launch["grid"]
    assert isinstance(by, str) and "m" in by, launch  # the row blocks are an expression of m
    for m in (1, 128, 129, 1000, 8192):
        rows = eval(by, {"__builtins__": {}}, {"m": m})  # TVM's text of ceildiv(m, 128)
        assert ((bx, rows, bz),) == f.instance.launch_grids((m, 4096, 4096)), m


def test_a_static_kernel_lowers_as_before():
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    twin = static_twin(PROBE, "sm_90")
    k = lower(twin, (100, 256, 256), Target.SM_90)
    assert k.shape == (100, 256, 256) and "int m" not in k.source
    dyn = lower(probe(), (100, 256, 256), Target.SM_90)
    assert dyn.shape == ("m", 256, 256) and dyn.relpath.name == "mx256x256.cu"


def test_render_is_deterministic():
    f = probe()
    assert render(f.instance).text == f.text
