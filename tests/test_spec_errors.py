"""Expect tests of spec error text: a small YAML string in, the exact one-line messages out.

Every message is `file:LINE:COL: field.path=value: what is wrong [rule]`; the line and column are
where the user has to look. Rules that need a target run in `build_instances`, so every helper
goes through both stages, as `tilegen validate` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from spectext import FILE, edit, errors

from codegen.core.errors import SpecErrors
from codegen.generate.instance import build_instances
from codegen.spec.load import load_spec_files, parse_specs

# Line numbers in the expected messages refer to this text (block style keeps the columns short).
BASE = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling:
    block_m: 128
    block_n: 128
    block_k: 32
    threads: 256
  pipeline:
    stages: 2
  tail: none
  targets: [gfx942]
"""




def test_base_spec_is_valid():
    [inst] = build_instances(parse_specs(BASE, FILE))
    assert (inst.name, inst.target.value, inst.stages) == ("g", "gfx942", 2)


# ---- YAML ---------------------------------------------------------------------------------------


def test_yaml_syntax_error_points_at_the_problem_and_where_it_started():
    text = "- name: g\n  op: gemm\n  dtypes: {a: fp16, b: fp16\n  layout: nt\n"
    assert errors(text) == [
        ("specs/x.yaml:4:9: YAML syntax error: expected ',' or '}', but got ':' "
         "(while parsing a flow mapping started at line 3, column 11) [yaml]")
    ]


def test_yaml_bad_indentation():
    text = "- name: g\n  op: gemm\n   layout: nt\n"
    assert errors(text) == ["specs/x.yaml:3:10: YAML syntax error: mapping values are not allowed here [yaml]"]


def test_duplicate_key():
    text = edit(BASE, "  tail: none\n", "  tail: none\n  layout: nn\n")
    assert errors(text) == ["specs/x.yaml:15:3: layout: duplicate key (first at line 4, column 3) [duplicate_key]"]


def test_duplicate_nested_key():
    text = edit(BASE, "    stages: 2\n", "    stages: 2\n    stages: 3\n")
    assert errors(text) == [
        "specs/x.yaml:14:5: pipeline.stages: duplicate key (first at line 13, column 5) [duplicate_key]"
    ]


def test_duplicate_key_in_flow_mapping():
    text = edit(BASE, "{m: 256, n: 256, k: 256}", "{m: 256, n: 256, m: 512}")
    assert errors(text) == [
        "specs/x.yaml:6:24: shapes[0].m: duplicate key (first at line 6, column 8) [duplicate_key]"
    ]


def test_merge_keys_are_refused():
    text = edit(BASE, "  tail: none\n", "  <<: {tail: none}\n")
    assert errors(text) == ["specs/x.yaml:14:3: YAML merge keys ('<<') are not supported [yaml]"]


def test_python_tags_are_refused_not_constructed():
    text = edit(BASE, "name: g", "name: !!python/object/apply:os.system [echo]")
    assert errors(text) == [
        "specs/x.yaml:1:9: name: YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not supported [yaml]"
    ]


def test_yaml_1_1_booleans_and_octals_are_not_surprises():
    # PyYAML's YAML 1.1 reads `yes` as true and `010` as 8; specs use the YAML 1.2 core schema.
    assert errors(edit(BASE, "  tail: none\n", "  tail: none\n  allow_spills: yes\n")) == [
        "specs/x.yaml:15:17: allow_spills='yes': Input should be a valid boolean [bool_type]"
    ]
    [spec] = parse_specs(edit(BASE, "{m: 256, n: 256, k: 256}", "{m: 256, n: 256, k: 0256}"), FILE)
    assert spec.spec.shapes[0].k == 256
    # YAML 1.1's digit separators are strings in 1.2 (no `0x_` reaching int() either); 0x and 0o are 1.2's
    for written in ("2_56", "0x_", "0x1_0"):
        assert errors(edit(BASE, "k: 256}", f"k: {written}}}")) == [
            f"specs/x.yaml:6:27: shapes[0].k='{written}': Input should be a valid integer [int_type]"]
    [spec] = parse_specs(edit(BASE, "{m: 256, n: 256, k: 256}", "{m: 0x100, n: 0o400, k: 256}"), FILE)
    assert (spec.spec.shapes[0].m, spec.spec.shapes[0].n) == (256, 256)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "specs/x.yaml:1:1: spec file is empty [empty_file]"),
        ("# only a comment\n", "specs/x.yaml:1:1: spec file is empty [empty_file]"),
        ("[]\n", "specs/x.yaml:1:1: spec file holds an empty list [empty_file]"),
        ("42\n", "specs/x.yaml:1:1: a spec file holds a mapping or a list of mappings [top_level]"),
    ],
    ids=["empty", "comment-only", "empty-list", "scalar"],
)
def test_empty_or_shapeless_file(text, message):
    assert errors(text) == [message]


# ---- fields -------------------------------------------------------------------------------------


def test_unknown_key_suggests_the_known_one():
    text = edit(BASE, "    stages: 2\n", "    num_stage: 2\n")
    assert errors(text) == ["specs/x.yaml:13:5: pipeline.num_stage: unknown key (did you mean 'stages'?) [unknown_key]"]


def test_unknown_key_in_flow_mapping_and_override():
    text = BASE.replace("[gfx942]", "[gfx942, sm_90]") + "  overrides:\n    sm_90:\n      pipeline: {num_stages: 3}\n"
    assert errors(text) == [
        "specs/x.yaml:18:18: overrides.sm_90.pipeline.num_stages: unknown key (did you mean 'stages'?) [unknown_key]"
    ]


def test_unknown_top_level_key_without_a_close_match():
    text = edit(BASE, "  tail: none\n", "  tail: none\n  frobnicate: 1\n")
    assert errors(text) == ["specs/x.yaml:15:3: frobnicate: unknown key [unknown_key]"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("threads: 256", "threads: '256'", "specs/x.yaml:11:14: tiling.threads='256': Input should be a valid integer [int_type]"),
        ("threads: 256", "threads: true", "specs/x.yaml:11:14: tiling.threads=true: Input should be a valid integer [int_type]"),
        ("threads: 256", "threads: 256.0", "specs/x.yaml:11:14: tiling.threads=256.0: Input should be a valid integer [int_type]"),
        ("threads: 256", "threads:", "specs/x.yaml:11:13: tiling.threads=null: Input should be a valid integer [int_type]"),
        ("stages: 2", "stages: two", "specs/x.yaml:13:13: pipeline.stages='two': Input should be a valid integer [int_type]"),
        ("k: 256}", "k: 2.5e2}", "specs/x.yaml:6:27: shapes[0].k=250.0: Input should be a valid integer [int_type]"),
        ("    stages: 2\n", "    stages: 2\n  unroll: yes\n",
         "specs/x.yaml:14:11: unroll='yes': Input should be a valid integer [int_type]"),
        ("  tail: none\n", "  tail: none\n  verify_tolerance_scale: true\n",
         "specs/x.yaml:15:27: verify_tolerance_scale=true: Input should be a valid number [float_type]"),
        ("  tail: none\n", "  tail: none\n  verify_tolerance_scale: '2'\n",
         "specs/x.yaml:15:27: verify_tolerance_scale='2': Input should be a valid number [float_type]"),
    ],
    ids=["str-for-int", "bool-for-int", "float-for-int", "null-for-int", "word-for-int", "float-shape", "yes-for-int",
         "bool-for-float", "str-for-float"],
)
def test_wrong_types(old, new, message):
    assert errors(edit(BASE, old, new)) == [message]


def test_scalar_where_a_mapping_belongs():
    text = edit(BASE, "  tiling:\n    block_m: 128\n    block_n: 128\n    block_k: 32\n    threads: 256\n", "  tiling: 5\n")
    assert errors(text) == ["specs/x.yaml:7:11: tiling=5: must be a mapping [model_type]"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("block_m: 128", "block_m: 0", "specs/x.yaml:8:14: tiling.block_m=0: Input should be greater than 0 [greater_than]"),
        ("block_k: 32", "block_k: -32", "specs/x.yaml:10:14: tiling.block_k=-32: Input should be greater than 0 [greater_than]"),
        ("{m: 256,", "{m: -1,", "specs/x.yaml:6:11: shapes[0].m=-1: Input should be greater than 0 [greater_than]"),
        ("k: 256}", "k: 0}", "specs/x.yaml:6:27: shapes[0].k=0: Input should be greater than 0 [greater_than]"),
        ("stages: 2", "stages: -1", "specs/x.yaml:13:13: pipeline.stages=-1: Input should be greater than or equal to 0 [greater_than_equal]"),
        ("stages: 2", "stages: 9", "specs/x.yaml:13:13: pipeline.stages=9: Input should be less than or equal to 8 [less_than_equal]"),
    ],
    ids=["block_m-0", "block_k-negative", "m-negative", "k-0", "stages-negative", "stages-9"],
)
def test_sizes_out_of_range(old, new, message):
    assert errors(edit(BASE, old, new)) == [message]


def test_unroll_is_bounded_where_it_is_written_and_in_a_search_list():
    """A typo of unroll: 4096 would compile the K step 4096 times (minutes and gigabytes): refused, at its line."""
    text = edit(edit(BASE, "  tail: none\n", "  unroll: 65\n  tail: none\n"), "stages: 2", "stages: 1")
    assert errors(text) == [("specs/x.yaml:14:11: unroll=65: at most 64: the loop body is compiled that many times over "
                            "(larger factors only grow the kernel and its compile time) [unroll_limit]")]
    assert errors(edit(text, "unroll: 65", "unroll: 64")) == [
        "specs/x.yaml:14:11: unroll=64: shapes[0].k=256 is not a multiple of block_k*unroll=2048 [unroll_divides]"]


def test_min_waves_per_simd_needs_an_amd_target():
    """An occupancy floor in waves per SIMD exists on gfx942/gfx950 only: on an sm_90-only spec it would be ignored."""
    text = edit(BASE, "  tail: none\n", "  tail: none\n  min_waves_per_simd: 2\n")
    assert build_instances(parse_specs(text, FILE))  # gfx942: the floor build checks
    assert errors(edit(text, "targets: [gfx942]", "targets: [sm_90]")) == [
        ("specs/x.yaml:15:23: min_waves_per_simd=2: an occupancy floor of the AMD targets (waves per SIMD); none of "
         "sm_90 has one [min_waves_per_simd_target]")]


def test_missing_field_points_at_its_mapping():
    text = edit(BASE, "{m: 256, n: 256, k: 256}", "{m: 256, n: 256}")
    assert errors(text) == ["specs/x.yaml:6:7: shapes[0].k: required field is missing [missing]"]


def test_a_partial_override_says_an_override_replaces_the_whole_field():
    text = edit(BASE, "  targets: [gfx942]\n", "  targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n"
                "      tiling: {block_m: 128, block_n: 128, threads: 256}\n")
    assert errors(text) == [("specs/x.yaml:18:15: overrides.sm_90.tiling.block_k: required field is missing (an override "
                             "replaces the whole `tiling`: give every key of it) [missing]")]


def test_missing_or_unknown_op():
    assert errors(edit(BASE, "  op: gemm\n", "")) == [
        "specs/x.yaml:1:3: op: required field is missing (one of: attention, gemm, layernorm, rmsnorm, rope, softmax) [missing]"
    ]
    assert errors(edit(BASE, "op: gemm", "op: conv2d")) == [
        "specs/x.yaml:2:7: op='conv2d': unknown operator (known: attention, gemm, layernorm, rmsnorm, rope, softmax) [op]"
    ]


NAME_RULE = "must be a lower-case identifier: a letter, then letters, digits or '_' (at most 48 characters) [identifier]"


@pytest.mark.parametrize(
    ("name", "shown", "why"),
    [
        ("../x", "'../x'", NAME_RULE),
        ("a/b", "'a/b'", NAME_RULE),
        ("import os", "'import os'", NAME_RULE),
        ("Gemm", "'Gemm'", NAME_RULE),
        ("''", "''", NAME_RULE),
        ("g" * 49, "'" + "g" * 36 + "...", NAME_RULE),
        ("class", "'class'", "is a Python keyword [identifier]"),
        ("match", "'match'", "is a Python keyword [identifier]"),
        ("12", "12", "Input should be a valid string [string_type]"),
    ],
    ids=["dotdot", "slash", "space", "upper", "empty", "too-long", "keyword", "soft-keyword", "int"],
)
def test_names_that_cannot_be_files_or_symbols(name, shown, why):
    assert errors(edit(BASE, "name: g", f"name: {name}")) == [f"specs/x.yaml:1:9: name={shown}: {why}"]


def test_unknown_dtype():
    assert errors(edit(BASE, "a: fp16,", "a: fp4,")) == [
        "specs/x.yaml:3:15: dtypes.a='fp4': Input should be 'fp16', 'bf16', 'fp32' or 'fp8_e4m3' [enum]"
    ]


def test_unknown_target_and_unknown_override_target():
    assert errors(edit(BASE, "[gfx942]", "[gfx942, gfx90a]")) == [
        "specs/x.yaml:15:21: targets[1]='gfx90a': Input should be 'gfx942', 'gfx950' or 'sm_90' [enum]"
    ]
    text = BASE + "  overrides:\n    sm_100:\n      pipeline: {stages: 3}\n"
    assert errors(text) == ["specs/x.yaml:17:5: overrides.sm_100: Input should be 'gfx942', 'gfx950' or 'sm_90' [enum]"]


def test_every_error_of_a_file_is_reported_at_once():
    text = edit(edit(BASE, "block_m: 128", "block_m: 0"), "stages: 2", "num_stage: 2") + BASE.replace("name: g", "name: ../h")
    assert errors(text) == [
        "specs/x.yaml:8:14: tiling.block_m=0: Input should be greater than 0 [greater_than]",
        "specs/x.yaml:13:5: pipeline.num_stage: unknown key (did you mean 'stages'?) [unknown_key]",
        f"specs/x.yaml:16:9: name='../h': {NAME_RULE}",
    ]


# ---- per-target rules ---------------------------------------------------------------------------


def test_threads_not_a_wavefront_multiple_on_gfx942():
    assert errors(edit(BASE, "threads: 256", "threads: 96")) == [
        "specs/x.yaml:11:14: tiling.threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]"
    ]


def test_threads_96_is_three_warps_on_sm_90():
    # a legal warp count on sm_90, but 3 warps cannot split the block's MMA tiles; gfx942 still reports its own rule
    text = edit(edit(BASE, "threads: 256", "threads: 96"), "[gfx942]", "[gfx942, sm_90]")
    assert errors(text) == [
        "specs/x.yaml:11:14: tiling.threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]",
        ("specs/x.yaml:11:14: tiling.threads=96: 3 warps cannot share the 128 16x8x16 MMA tiles of a 128x128 block "
         "evenly on sm_90 [mma_shape]"),
    ]


def test_too_many_threads():
    assert errors(edit(BASE, "threads: 256", "threads: 2048")) == [
        "specs/x.yaml:11:14: tiling.threads=2048: exceeds 1024 threads per workgroup on gfx942 [wave_multiple]"
    ]


def test_lds_overflow_names_the_bytes_and_the_budget():
    text = edit(edit(edit(BASE, "block_m: 128", "block_m: 256"), "block_n: 128", "block_n: 256"), "block_k: 32", "block_k: 64")
    assert errors(text) == [
        ("specs/x.yaml:8:5: tiling: 256x256x64 tiles x 2 stage(s) need 131072 B (128 KiB) of LDS, "
         "over the 65536 B (64 KiB) per workgroup on gfx942 [lds_budget]")
    ]
    # the same tiles single-buffered fit exactly: 64 KiB
    build_instances(parse_specs(edit(text, "stages: 2", "stages: 1"), FILE))


def test_shared_memory_overflow_on_sm_90_comes_from_the_override():
    text = edit(BASE, "[gfx942]", "[gfx942, sm_90]") + (
        "  overrides:\n    sm_90:\n      tiling: {block_m: 256, block_n: 256, block_k: 128, threads: 256}\n"
        "      pipeline: {stages: 4}\n"
    )
    assert errors(text) == [
        ("specs/x.yaml:18:15: overrides.sm_90.tiling: 256x256x128 tiles x 4 stage(s) need 524288 B (512 KiB) of "
         "shared memory, over the 232448 B (227 KiB) per workgroup on sm_90 [lds_budget]")
    ]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("block_m: 128", "block_m: 120",
         "specs/x.yaml:8:14: tiling.block_m=120: must be a multiple of 16 (the fp16 MMA tile 16x16x16 on gfx942) [mma_shape]"),
        ("block_n: 128", "block_n: 136",
         "specs/x.yaml:9:14: tiling.block_n=136: must be a multiple of 16 (the fp16 MMA tile 16x16x16 on gfx942) [mma_shape]"),
        ("block_k: 32", "block_k: 24",
         "specs/x.yaml:10:14: tiling.block_k=24: must be a multiple of 16 (the fp16 MMA tile 16x16x16 on gfx942) [mma_shape]"),
    ],
    ids=["block_m", "block_n", "block_k"],
)
def test_block_not_a_multiple_of_the_mma_tile(old, new, message):
    # tail: predicated, so the ragged-shape rule stays quiet and only the MMA rule speaks
    assert errors(edit(edit(BASE, "tail: none", "tail: predicated"), old, new)) == [message]


def test_k_pack_doubles_the_k_granule():
    text = edit(edit(BASE, "  tail: none\n", "  tail: none\n  k_pack: 2\n"), "block_k: 32", "block_k: 16")
    assert errors(text) == [
        ("specs/x.yaml:10:14: tiling.block_k=16: must be a multiple of 32 (the fp16 MMA tile 16x16x16 on gfx942 "
         "times k_pack=2) [mma_shape]")
    ]


def test_waves_must_split_the_mma_tiles_evenly():
    assert errors(edit(BASE, "threads: 256", "threads: 192")) == [
        ("specs/x.yaml:11:14: tiling.threads=192: 3 wavefronts cannot share the 64 16x16x16 MMA tiles of a 128x128 "
         "block evenly on gfx942 [mma_shape]")
    ]


def test_fp8_needs_layout_nt():
    text = edit(edit(BASE, "{a: fp16, b: fp16, out: fp16}", "{a: fp8_e4m3, b: fp8_e4m3, out: bf16}"), "layout: nt", "layout: nn")
    assert errors(text) == [
        "specs/x.yaml:4:11: layout=nn: fp8 matrix cores on gfx942 need K-major operands: use layout nt [dtype_supported]"
    ]
    build_instances(parse_specs(edit(text, "layout: nn", "layout: nt"), FILE))


@pytest.mark.parametrize(
    ("dtypes", "message"),
    [
        ("{a: fp16, b: bf16, out: fp16}",
         "specs/x.yaml:3:24: dtypes.b=bf16: must equal dtypes.a (fp16): mixed-input MMA is not supported [dtype_supported]"),
        ("{a: fp16, b: fp16, out: fp16, accumulate: fp16}",
         "specs/x.yaml:3:53: dtypes.accumulate=fp16: the accumulator must be fp32 [dtype_supported]"),
    ],
    ids=["mixed", "fp16-accumulator"],
)
def test_unsupported_dtype_combinations_are_reported_once_for_all_targets(dtypes, message):
    text = edit(edit(BASE, "{a: fp16, b: fp16, out: fp16}", dtypes), "[gfx942]", "[gfx942, sm_90]")
    assert errors(text) == [message]


def test_ragged_shape_without_tail_policy():
    text = edit(BASE, "{m: 256, n: 256, k: 256}", "{m: 1000, n: 256, k: 1000}")
    assert errors(text) == [
        ("specs/x.yaml:6:7: shapes[0]: m=1000 is not a multiple of block_m=128, k=1000 is not a multiple of "
         "block_k=32: set tail: predicated or specialized [tail_policy]")
    ]
    for tail in ("predicated", "specialized"):
        build_instances(parse_specs(edit(text, "tail: none", f"tail: {tail}"), FILE))


def test_ragged_only_for_an_overridden_block_names_the_target():
    text = edit(edit(BASE, "[gfx942]", "[gfx942, sm_90]"), "{m: 256, n: 256, k: 256}", "{m: 256, n: 384, k: 256}")
    text += "  overrides:\n    sm_90:\n      tiling: {block_m: 128, block_n: 256, block_k: 32, threads: 256}\n"
    assert errors(text) == [
        ("specs/x.yaml:6:7: shapes[0]: n=384 is not a multiple of block_n=256 on sm_90: set tail: predicated or "
         "specialized [tail_policy]")
    ]


def test_unroll_needs_an_unpipelined_loop():
    text = edit(BASE, "  tail: none\n", "  tail: none\n  unroll: 4\n")
    assert errors(text) == [
        ("specs/x.yaml:15:11: unroll=4: a pipelined K loop is scheduled by stages; unroll needs pipeline.stages <= 1 "
         "[unroll_pipeline]")
    ]


def test_override_for_a_target_not_in_targets():
    text = BASE + "  overrides:\n    sm_90:\n      pipeline: {stages: 3}\n"
    assert errors(text) == ["specs/x.yaml:17:5: overrides.sm_90: sm_90 is not in targets [override_target]"]


def test_k_pack_override_on_sm_90():
    text = edit(BASE, "[gfx942]", "[gfx942, sm_90]") + "  overrides:\n    sm_90:\n      k_pack: 2\n"
    assert errors(text) == [
        "specs/x.yaml:18:15: overrides.sm_90.k_pack=2: k_pack exists only for the ROCm MFMA gemm (gfx942, gfx950), not sm_90 [k_pack_target]"
    ]


def test_override_errors_point_into_the_override():
    text = edit(BASE, "[gfx942]", "[gfx942, sm_90]") + (
        "  overrides:\n    gfx942:\n      tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 96}\n"
    )
    assert errors(text) == [
        ("specs/x.yaml:18:66: overrides.gfx942.tiling.threads=96: must be a multiple of the 64-lane wavefront on "
         "gfx942 [wave_multiple]")
    ]


def test_target_listed_twice():
    assert errors(edit(BASE, "[gfx942]", "[gfx942, sm_90, gfx942]")) == [
        "specs/x.yaml:15:28: targets[2]=gfx942: listed twice [duplicate_target]"
    ]


def test_duplicate_name_in_one_file():
    assert errors(BASE + BASE) == [
        "specs/x.yaml:16:9: name='g': duplicate name (first defined at specs/x.yaml:1:9) [duplicate_name]"
    ]


def test_duplicate_name_across_two_files(tmp_path: Path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text(BASE)
    (specs / "b.yaml").write_text("# the same kernel again\n" + BASE)
    loaded = load_spec_files([specs], tmp_path)
    with pytest.raises(SpecErrors) as exc:
        build_instances(loaded)
    assert [str(e) for e in exc.value.errors] == [
        "specs/b.yaml:2:9: name='g': duplicate name (first defined at specs/a.yaml:1:9) [duplicate_name]"
    ]


def test_errors_from_several_files_are_collected(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(edit(BASE, "threads: 256", "threads: '256'"))
    (tmp_path / "b.yaml").write_text("")
    with pytest.raises(SpecErrors) as exc:
        load_spec_files([tmp_path], tmp_path)
    assert [str(e) for e in exc.value.errors] == [
        "a.yaml:11:14: tiling.threads='256': Input should be a valid integer [int_type]",
        "b.yaml:1:1: spec file is empty [empty_file]",
    ]


# ---- dynamic M (issue 12): one kernel for every M of a range -----------------------------------------

DYNAMIC = """\
- name: d
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  dynamic_m: {min: 1, max: 8192}
  shapes:
    - {m: 1000, n: 4096, k: 4096}
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  tail: predicated
  targets: [gfx942, sm_90]
"""


def test_dynamic_base_spec_is_valid():
    insts = build_instances(parse_specs(DYNAMIC, FILE))
    assert [(i.target.value, i.dynamic_m, i.compile_shapes()) for i in insts] == [
        ("gfx942", (1, 8192), [("m", 4096, 4096)]), ("sm_90", (1, 8192), [("m", 4096, 4096)])]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("{min: 1, max: 8192}", "{min: 9000, max: 8192}",
     "specs/x.yaml:5:20: dynamic_m.min=9000: is over dynamic_m.max=8192: the range is empty [dynamic_m_range]"),
    ("{m: 1000,", "{m: 9000,",
     "specs/x.yaml:7:11: shapes[0].m=9000: is outside dynamic_m [1, 8192], the rows the kernel serves [dynamic_m_range]"),
    ("{min: 1, max: 8192}", "{min: 0, max: 8192}",
     "specs/x.yaml:5:20: dynamic_m.min=0: Input should be greater than 0 [greater_than]"),
    ("{min: 1, max: 8192}", "{min: 1, max: 2147483648}",
     ("specs/x.yaml:5:28: dynamic_m.max=2147483648: must be at most 2147483647 (2**31 - 1): TileLang sizes are int32 "
      "[int32]")),
    ("{min: 1, max: 8192}", "{min: 1}", "specs/x.yaml:5:14: dynamic_m.max: required field is missing [missing]"),
    ("{min: 1, max: 8192}", "8192", "specs/x.yaml:5:14: dynamic_m=8192: must be a mapping [model_type]"),
    ("tail: predicated", "tail: specialized",
     ("specs/x.yaml:9:9: tail=specialized: not with dynamic_m (not supported): the edge kernels split at "
      "M // block_m, which a symbolic M does not fix: use tail predicated [unsupported_combination]")),
    # the grid at the range's largest M: 65536 row blocks of 128 are one over sm_90's grid y, not gfx942's
    ("{min: 1, max: 8192}", "{min: 1, max: 8388481}",
     "specs/x.yaml:5:28: dynamic_m.max: grid y = 65536 exceeds sm_90's limit 65535 [grid_limit]"),
    # N and K are static: there is no dynamic_n, and a shape's sizes are integers
    ("  dynamic_m: {min: 1, max: 8192}", "  dynamic_n: {min: 1, max: 8192}",
     "specs/x.yaml:5:3: dynamic_n: unknown key (did you mean 'dynamic_m'?) [unknown_key]"),
    ("{m: 1000,", "{m: dynamic,", "specs/x.yaml:7:11: shapes[0].m='dynamic': Input should be a valid integer [int_type]"),
    ("  targets: [gfx942, sm_90]\n", "  targets: [gfx942, sm_90]\n  search:\n    sm_90:\n      pipeline: {stages: [2, 3]}\n",
     ("specs/x.yaml:12:5: search: a dynamic-M spec is one kernel for every M, and tuning picks a kernel per shape: "
      "remove search or dynamic_m [dynamic_m_search]")),
])
def test_dynamic_m_rule(old, new, expected):
    assert errors(edit(DYNAMIC, old, new)) == [expected]


def test_dynamic_m_range_largest_legal_grid():
    assert build_instances(parse_specs(edit(DYNAMIC, "max: 8192", "max: 8388480"), FILE))  # 65535 row blocks


def test_dynamic_m_with_no_tail_policy_is_refused_beside_the_ragged_shape():
    assert errors(edit(DYNAMIC, "tail: predicated", "tail: none")) == [
        ("specs/x.yaml:9:9: tail=none: not with dynamic_m (not supported): a dynamic M leaves the last row block "
         "ragged: loads and stores along M must be bounds-checked (tail predicated) [unsupported_combination]"),
        ("specs/x.yaml:7:7: shapes[0]: m=1000 is not a multiple of block_m=128: set tail: predicated or specialized "
         "[tail_policy]"),
    ]


def test_dynamic_m_needs_the_tiled_structure():
    gemv = edit(edit(DYNAMIC, "{block_m: 128, block_n: 128, block_k: 64, threads: 256}",
                     "{block_m: 16, block_n: 8, block_k: 256, threads: 256}\n  structure: gemv"),
                "{min: 1, max: 8192}", "{min: 1, max: 16}").replace("m: 1000", "m: 16")
    assert errors(gemv) == [
        ("specs/x.yaml:5:14: dynamic_m: not with structure gemv (not supported): gemv keeps every row of A in "
         "registers: at most block_m <= 16 rows, known when it is compiled [unsupported_combination]")]


def test_dynamic_m_composes_with_fp32_inputs_and_a_transposed_b_layout():
    fp32 = edit(edit(DYNAMIC, "{a: fp16, b: fp16, out: fp16}", "{a: fp32, b: fp32, out: fp32}"),
                "block_k: 64", "block_k: 32").replace("[gfx942, sm_90]", "[gfx942]")
    [inst] = build_instances(parse_specs(fp32, FILE))
    assert inst.dynamic_m == (1, 8192) and inst.precision == "ieee" and inst.compile_shapes() == [("m", 4096, 4096)]
    nn = edit(edit(DYNAMIC, "layout: nt", "layout: nn"), "  tail: predicated", "  tail: predicated\n  lds_layout: transposed_b")
    by_target = {i.target.value: i for i in build_instances(parse_specs(nn, FILE))}
    assert by_target["gfx942"].transposed_b and not by_target["sm_90"].transposed_b  # sm_90 stays natural
