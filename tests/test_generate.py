"""Rendering: deterministic output, one URI per distinct instance, a provenance header, and generated
modules that stand alone (tilelang only)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import fields, replace

import pytest
import yaml
from spectext import REPO_ROOT, errors

from codegen.core.errors import SpecError
from codegen.families.base import NOT_IDENTITY
from codegen.generate.instance import build_instances
from codegen.generate.pipeline import Project
from codegen.generate.render import render, render_all
from codegen.spec.load import parse_specs

BASE = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes: [{m: 4096, n: 4096, k: 4096}]
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256, policy: square}
  pipeline: {stages: 2}
  unroll: 1
  swizzle_panel: 0
  k_pack: 1
  tail: none
  allow_spills: false
  targets: [gfx942, sm_90]
"""

# one tunable changed at a time: each is another kernel
VARIANTS = {
    "base": [],
    "block_k": [("block_k: 32", "block_k: 64")],
    "block_m": [("block_m: 128", "block_m: 64")],
    "threads": [("threads: 256", "threads: 128")],
    "policy": [("policy: square", "policy: full_row")],
    "stages": [("stages: 2", "stages: 3")],
    "stages_1": [("stages: 2", "stages: 1")],
    "unroll": [("stages: 2", "stages: 1"), ("unroll: 1", "unroll: 2")],
    "swizzle": [("swizzle_panel: 0", "swizzle_panel: 8")],
    "k_pack": [("k_pack: 1", "k_pack: 2")],
    "tail": [("tail: none", "tail: predicated")],
    "layout": [("layout: nt", "layout: nn")],
    "lds_layout": [("layout: nt", "layout: nn"), ("k_pack: 1", "k_pack: 1\n  lds_layout: transposed_b")],
    "dtype": [("{a: fp16, b: fp16, out: fp16}", "{a: bf16, b: bf16, out: fp16}")],
    "out_dtype": [("out: fp16}", "out: fp32}")],
}
# the workload and the check policies: the same kernel
SAME_KERNEL = {
    "shape": [("k: 4096}", "k: 8192}")],
    "extra_shape": [("[{m: 4096, n: 4096, k: 4096}]", "[{m: 4096, n: 4096, k: 4096}, {m: 128, n: 128, k: 128}]")],
    "allow_spills": [("allow_spills: false", "allow_spills: true")],
    "min_waves": [("allow_spills: false", "allow_spills: false\n  min_waves_per_simd: 2")],
    "tolerance": [("allow_spills: false", "allow_spills: false\n  verify_tolerance_scale: 2.0")],
    "name": [("name: g", "name: g2")],
}


def variant(edits) -> str:
    text = BASE
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def instances_of(text: str, file: str = "specs/x.yaml"):
    return build_instances(parse_specs(text, file))


@pytest.fixture(scope="module")
def committed():
    return Project().rendered()


def test_rendering_twice_is_byte_identical(committed):
    again = Project().rendered()
    assert [(f.path, f.text) for f in again] == [(f.path, f.text) for f in committed]
    for f in committed[:3]:
        assert render(f.instance).text == f.text


def test_rendering_does_not_depend_on_the_process():
    """Another interpreter with other hash seeds renders the same bytes (no `hash()`, no set order)."""
    code = (
        "import hashlib, json\nfrom codegen.generate.pipeline import Project\n"
        "print(json.dumps({str(f.path): hashlib.sha256(f.text.encode()).hexdigest() for f in Project().rendered()}))"
    )
    here = {str(f.path): hashlib.sha256(f.text.encode()).hexdigest() for f in Project().rendered()}
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, check=True,
                             capture_output=True, text=True).stdout
        assert json.loads(out) == here


def test_committed_tree_matches_rendering():
    result = Project().check()
    assert result.clean, result


def test_committed_uris_are_distinct(committed):
    uris = [f.uri for f in committed]
    assert len(set(uris)) == len(uris)
    for f in committed:
        assert f.path.name == f"{f.uri}.py"
        assert f.uri == f"{f.instance.stem()}_{f.instance.target.value.replace('_', '')}_{f.uri[-6:]}"
        assert re.fullmatch(r"[a-z][a-z0-9_]*_[0-9a-f]{6}", f.uri), f.uri


def test_a_kernel_is_named_by_its_configuration_not_its_workload():
    """Adding a shape, renaming the spec or moving it to another file renames nothing and changes no
    code (so the build cache keeps every built shape); the workload index records them, the header names
    the spec file."""
    [a, _] = instances_of(BASE, "specs/a.yaml")
    more = variant([("shapes: [{m: 4096, n: 4096, k: 4096}]", "shapes: [{m: 4096, n: 4096, k: 4096}, {m: 512, n: 128, k: 64}]"),
                    ("name: g", "name: other_name")])
    [b, _] = instances_of(more, "specs/b.yaml")
    assert len(b.shapes) == len(a.shapes) + 1
    assert render(a).uri == render(b).uri
    assert render(a).code_sha256 == render(b).code_sha256
    assert render(a).text.split("\n", 1)[1] == render(b).text.split("\n", 1)[1]
    assert render(a).text.replace("specs/a.yaml", "specs/b.yaml", 1) == render(b).text
    assert a.stem() == "gemm_fp16_nt_128x128x32_t256_s2"


def test_two_specs_with_one_configuration_get_one_kernel():
    text = BASE + BASE.replace("name: g", "name: h").replace("{m: 4096, n: 4096, k: 4096}", "{m: 256, n: 128, k: 64}")
    files = render_all(instances_of(text))
    assert len(files) == 2  # one per target, not per spec
    for f in files:
        assert f.names == ("g", "h")
        assert f.instance.shapes == ((4096, 4096, 4096), (256, 128, 64))
        assert f.for_spec("h").instance.shapes == ((256, 128, 64),)
    # the strictest check policy of the specs that share a kernel applies
    looser = text.replace("name: h", "name: h\n  verify_tolerance_scale: 0.5").replace("allow_spills: false", "allow_spills: true", 1)
    [f, _] = render_all(instances_of(looser))
    assert f.instance.allow_spills is False and f.instance.verify_tolerance_scale == 0.5


def test_every_tunable_changes_the_uri():
    by_variant = {name: {i.target.value: i for i in instances_of(variant(edits))} for name, edits in VARIANTS.items()}
    gfx = {name: render(insts["gfx942"]).uri for name, insts in by_variant.items()}
    assert len(set(gfx.values())) == len(gfx), gfx
    # on sm_90 k_pack does not exist (the instance has k_pack=None), so that one variant is the same kernel;
    # nor does lds_layout transposed_b (sm_90 stages B as stored): that variant is the nn layout's kernel
    sm = {name: render(insts["sm_90"]).uri for name, insts in by_variant.items()}
    assert sm["k_pack"] == sm["base"] and sm["lds_layout"] == sm["layout"]
    assert by_variant["k_pack"]["sm_90"] == by_variant["base"]["sm_90"]
    del sm["k_pack"], sm["lds_layout"]
    assert len(set(sm.values())) == len(sm), sm
    # and the target itself is part of the name
    assert gfx["base"] != render(by_variant["base"]["sm_90"]).uri
    for name, edits in SAME_KERNEL.items():
        for inst in instances_of(variant(edits)):
            assert render(inst).uri == render(by_variant["base"][inst.target.value]).uri, name


def test_same_instance_same_uri_whatever_the_file():
    [a, _] = instances_of(BASE, "specs/a.yaml")
    [b, _] = instances_of("# moved\n" + BASE, "specs/b.yaml")
    assert render(a).uri == render(b).uri  # the spec file is provenance, not identity
    assert render(a).specs[0].file != render(b).specs[0].file  # ... which the workload index records


def test_the_name_is_the_configuration_and_nothing_else():
    """Every instance field but the workload, the check policies and the template file (chosen from the
    others) is in the canonical form, at its value, always; the name's hash is the form's."""
    [inst, _] = instances_of(BASE)
    data = json.loads(inst.canonical())
    # an optional part of the identity (GEMM's fused ops) is written where set only
    assert set(data) == {f.name for f in fields(inst)} - set(NOT_IDENTITY) - set(inst.OPTIONAL_IDENTITY)
    assert {"template", "name", "spec_file", "shapes", "allow_spills"}.isdisjoint(data)
    assert data["split_k"] == 1 and data["grid"] == "tiles" and data["staging"] == "none"  # defaults written too
    assert inst.uri().endswith("_" + hashlib.sha256(inst.canonical().encode()).hexdigest()[:6])
    assert replace(inst, template="another.py.j2").uri() == inst.uri()


def test_distinct_instances_never_share_a_file():
    insts = [i for edits in VARIANTS.values() for i in instances_of(variant(edits))]
    unique = {i.canonical(): i for i in insts}
    files = render_all(list(unique.values()))
    assert len({f.path for f in files}) == len(files)


HEADER = re.compile(
    r"# @generated by tilegen from (?P<specs>specs/[a-z0-9_]+\.yaml(, specs/[a-z0-9_]+\.yaml)*) "
    r"\(config sha256:(?P<config>[0-9a-f]{12}), code sha256:(?P<code>[0-9a-f]{12})\) "
    r"via templates/[a-z_]+/[a-z0-9_]+\.py\.j2 — do not edit; its workloads: generated/workloads.json"
)


def test_header_line(committed):
    for f in committed:
        first, body = f.text.split("\n", 1)
        m = HEADER.fullmatch(first)
        assert m, first
        assert f.uri.endswith("_" + m["config"][:6])  # the header's configuration hash is the URI's, longer
        assert f.instance.config_sha256().startswith(m["config"])
        assert f.code_sha256 == hashlib.sha256(body.encode()).hexdigest() and f.code_sha256.startswith(m["code"])
        assert m["specs"].split(", ") == sorted({s.file for s in f.specs})


def test_workload_index_names_every_kernel_its_specs_and_shapes(committed):
    index = json.loads((REPO_ROOT / "generated" / "workloads.json").read_text(encoding="utf-8"))
    assert set(index) == {f.uri for f in committed}
    for f in committed:
        row = index[f.uri]
        assert row["file"] == f.path.as_posix()
        assert [tuple(s) for s in row["shapes"]] == list(f.instance.shapes)
        for s in row["specs"]:
            assert (REPO_ROOT / s["file"]).is_file()
            assert s["name"] in f.names


# ---- nothing a spec holds can add a line to a generated module -------------------------------------

INJECTION = 'x\nopen("PWNED","w")\n#'
HOSTILE_FILE_NAMES = [
    f"zz_{INJECTION}.yaml",  # the file name that once put live code on line 2
    "a\rimport os\r#.yaml",  # a bare carriage return ends a Python line too
    "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg.yaml",  # what str.splitlines() splits on
    "a\u202eb.yaml",  # a right-to-left override ("trojan source")
    "a\x1b[2Jb.yaml",  # a terminal escape
    'a"b.yaml', "a'b.yaml", "a`b.yaml", "a\\b.yaml",
]


def _escaped(name: str) -> str:
    return name.encode("unicode_escape").decode("ascii")


@pytest.mark.parametrize("name", HOSTILE_FILE_NAMES, ids=_escaped)
def test_a_spec_file_name_that_could_inject_code_is_refused(tmp_path, name):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / name).write_text(BASE)
    with pytest.raises(SpecError) as exc:
        Project(root=tmp_path).rendered()
    message = str(exc.value)
    assert message.startswith(f"specs/{_escaped(name)}: spec file name holds ")
    assert message.endswith(": rename the file [file_name]")
    assert message.isascii() and message.isprintable()  # one line, whatever the name holds


@pytest.mark.parametrize("spec_file", [f"specs/{n}" for n in HOSTILE_FILE_NAMES] + ["specs/\x00.yaml", "specs/é.yaml"],
                         ids=_escaped)
def test_the_header_stays_one_comment_line_whatever_reaches_it(spec_file):
    """Past the load-time check (an instance built in code): the header escapes what it cannot print,
    so the module is the benign one but for the text of its first line, and parses to the same AST."""
    for inst in instances_of(BASE):
        benign = render(inst).text
        hostile = render(replace(inst, spec_file=spec_file)).text
        header, body = hostile.split("\n", 1)
        assert body == benign.split("\n", 1)[1]
        assert len(hostile.splitlines()) == len(benign.splitlines())
        assert header.splitlines() == [header] and header.isprintable()
        assert header.startswith("# @generated by tilegen from specs/")
        assert header.endswith(" — do not edit; its workloads: generated/workloads.json")
        assert render(replace(inst, spec_file=spec_file)).code_sha256 == render(inst).code_sha256
        assert ast.dump(ast.parse(hostile)) == ast.dump(ast.parse(benign))


def _string_leaves(value, path=()):
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _string_leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _string_leaves(v, (*path, i))


def _string_fields() -> dict[tuple[str, tuple], dict]:
    """(op, path of a string value) -> the first committed spec entry holding one there."""
    found: dict[tuple[str, tuple], dict] = {}
    for spec_file in sorted((REPO_ROOT / "specs").glob("*.yaml")):
        for entry in yaml.safe_load(spec_file.read_text()):
            for path in _string_leaves(entry):
                found.setdefault((entry["op"], path), entry)
    return found


STRING_FIELDS = _string_fields()


@pytest.mark.parametrize("field", sorted(STRING_FIELDS, key=lambda f: (f[0], [str(p) for p in f[1]])),
                         ids=lambda f: f"{f[0]}-{'.'.join(map(str, f[1]))}")
def test_no_string_in_a_spec_reaches_a_module_unchecked(field):
    """Every string value the committed specs hold is checked against a closed set or the identifier
    rule: one carrying code is refused, with one-line errors, before anything is rendered."""
    _, path = field
    entry = json.loads(json.dumps(STRING_FIELDS[field]))
    holder = entry
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = INJECTION
    assert errors(yaml.safe_dump([entry]))  # fails the test if the spec validated


def test_generated_modules_import_only_tilelang(committed):
    for f in committed:
        tree = ast.parse(f.text)
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
        assert imported == {"tilelang"}, (f.path, imported)


IMPORT_CHECK = r"""
import importlib.util, json, pathlib, sys
for blocked in ("codegen", "jinja2", "pydantic", "yaml", "typer", "rich"):
    sys.modules[blocked] = None  # any import of tilegen or its dependencies fails
rows = []
for path in sorted(pathlib.Path("generated").glob("*/*/*.py")):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shape = json.loads(pathlib.Path("generated/workloads.json").read_text())[mod.URI]["shapes"][0]
    func = mod.make_kernel(*shape)
    rows.append({"file": path.as_posix(), "uri": mod.URI, "target": mod.TARGET,
                 "metadata": mod.METADATA, "prim_func": type(func).__name__})
print(json.dumps(rows))
"""


def test_generated_modules_import_without_tilegen(committed):
    pytest.importorskip("tilelang")
    out = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=REPO_ROOT, check=True, capture_output=True,
                         text=True).stdout
    rows = {r["file"]: r for r in json.loads(out.splitlines()[-1])}
    assert set(rows) == {str(f.path) for f in committed}
    for f in committed:
        r = rows[str(f.path)]
        inst = f.instance
        assert r["uri"] == f.uri == r["metadata"]["uri"]
        assert r["target"] == dict(inst.tilelang_target)
        config = {k: v for k, v in inst.metadata(f.uri).items() if k not in ("name", "shapes", "allow_spills",
                                                                               "min_waves_per_simd")}
        assert r["metadata"] == json.loads(json.dumps(config))
        assert r["prim_func"] == "PrimFunc"
