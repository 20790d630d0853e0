"""Kernel identity is the configuration; what the code is, is recorded beside it.

Each test renders the committed spec set from an edited copy of the templates: an edit that renders the same
text (a Jinja comment, whitespace inside tags) changes no name and no code hash; an edit of the rendered text
changes the code hash of exactly the kernels that render it and no name; `tilegen tune --check` then names
the lockfile entries whose measured code changed; and the build cache keys on the code, not the header.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest
from spectext import REPO_ROOT
from typer.testing import CliRunner

from codegen.cli.main import app
from codegen.core.hardware import Target
from codegen.families import all_families
from codegen.generate import render as render_module
from codegen.generate.lockfile import read_lockfile, winner_instance
from codegen.generate.pipeline import Project
from codegen.spec.load import load_spec_files

NOTE = "# a line every kernel of gemm.py.j2 now carries"


def _committed() -> dict[str, tuple[str, str, str]]:
    """uri -> (configuration hash, code hash, body) of every committed kernel, rendered now (the body: the module
    but its header line, which names where the template was read)."""
    return {f.uri: (f.instance.config_sha256(), f.code_sha256, f.text.split("\n", 1)[1])
            for f in Project(root=REPO_ROOT).rendered()}


def _with_edited_templates(monkeypatch, tmp_path: Path, edit) -> int:
    """Render from a copy of every family's template folder (and the shared partials), each template file
    passed through `edit(name, text) -> text`. Returns how many files the edit changed."""
    from codegen.families import base

    changed = 0
    copies = {}
    for folder in sorted({fam.template_dir for fam in all_families()} | {base.SHARED_TEMPLATE_DIR}):
        dest = tmp_path / folder.relative_to(REPO_ROOT)
        dest.mkdir(parents=True)
        for src in sorted(folder.glob("*.j2")):
            text = src.read_text(encoding="utf-8")
            new = edit(src.name, text)
            changed += new != text
            (dest / src.name).write_text(new, encoding="utf-8")
        copies[folder] = dest
    real_family = render_module.family
    monkeypatch.setattr(base, "SHARED_TEMPLATE_DIR", copies[base.SHARED_TEMPLATE_DIR])
    monkeypatch.setattr(render_module, "family",
                        lambda inst: replace(real_family(inst), template_dir=copies[real_family(inst).template_dir]))
    return changed


def _refactor(name: str, text: str) -> str:
    """A Jinja comment after the first line and no spaces inside `{{ uri }}`: the same rendered text."""
    first, rest = text.split("\n", 1)
    return f"{first}\n{{# {name}: a note for whoever edits this template #}}\n{rest}".replace("{{ uri }}", "{{uri}}")


def test_a_template_refactor_that_renders_the_same_text_changes_no_name_and_no_code_hash(monkeypatch, tmp_path):
    before = _committed()
    templates = sum(1 for fam in all_families() for _ in fam.template_dir.glob("*.j2"))
    assert _with_edited_templates(monkeypatch, tmp_path, _refactor) == templates + 1  # each one, and _rows.j2
    assert _committed() == before


def test_an_edit_of_the_rendered_text_changes_the_code_hash_of_its_kernels_only_and_no_name(monkeypatch, tmp_path):
    before = _committed()
    rendered = Project(root=REPO_ROOT).rendered()
    templates = {f.uri: f.instance.template for f in rendered}
    tuned = {f.uri for f in rendered if not f.is_hand}
    # gemm.py.j2's kernels (every GEMM: its partials are included by it); nothing else
    renders_it = {u for u, t in templates.items() if t == "gemm.py.j2"}
    _with_edited_templates(monkeypatch, tmp_path, lambda name, text: text.replace(
        "{{ header }}\n", "{{ header }}\n" + NOTE + "\n", 1) if name == "gemm.py.j2" else text)
    after = _committed()
    # no kernel renamed; the tuned kernels of gemm.py.j2 are no longer emitted (their lockfile entries measured
    # other code: the hand configuration serves those shapes until they are tuned again)
    assert set(before) - set(after) == renders_it & tuned and set(after) <= set(before)
    assert renders_it & tuned, "the edit must reach a tuned kernel"
    touched = {u for u, (_, _, body) in after.items() if NOTE in body}
    assert touched == renders_it - tuned
    for uri, (config, code, _) in after.items():
        assert config == before[uri][0]
        assert (code != before[uri][1]) == (uri in touched), uri


def test_the_header_slot_must_be_the_first_line(monkeypatch, tmp_path):
    from codegen.core.errors import TilegenError

    _with_edited_templates(monkeypatch, tmp_path, lambda name, text: text.replace(
        "{{ header }}\n", "# before the header\n{{ header }}\n", 1) if name == "softmax.py.j2" else text)
    with pytest.raises(TilegenError, match=r"softmax\.py\.j2: the template must place \{\{ header \}\} alone on"):
        Project(root=REPO_ROOT).rendered()


def _tune_check() -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["--project", str(REPO_ROOT), "tune", "--check"])
    return result.exit_code, result.output.splitlines()


def test_tune_check_names_the_entries_whose_code_changed(monkeypatch, tmp_path):
    assert _tune_check()[0] == 0  # the committed lockfile answers for today's code
    _with_edited_templates(monkeypatch, tmp_path, _refactor)
    assert _tune_check()[0] == 0  # the same code: nothing is stale

    monkeypatch.undo()
    _with_edited_templates(monkeypatch, tmp_path / "b", lambda name, text: text.replace(
        "{{ header }}\n", "{{ header }}\n" + NOTE + "\n", 1) if name == "gemm.py.j2" else text)
    code, lines = _tune_check()
    assert code == 1
    stale = [line for line in lines if ": stale: " in line]
    # an entry is stale where its winner, or else its runner-up, renders gemm.py.j2
    want = []
    for path in sorted((REPO_ROOT / "tuned" / "sm_90").glob("*.json")):  # every device's lockfile
        for e in read_lockfile(path).entries:
            for role, cand in (("winner", e.winner), ("runner-up", e.runner_up)):
                if cand and _template(e.spec, cand) == "gemm.py.j2":
                    want.append((path.name, e.spec, "x".join(map(str, e.shape)), cand.uri, role))
                    break
    assert want, "the edit must reach some tuned kernel"
    got = [re.fullmatch(r"tuned/sm_90/(\S+\.json): (\S+) (\S+): stale: (\S+): code changed \(the (\S+)'s code "
                        r"sha256 [0-9a-f]{12} -> [0-9a-f]{12}\)", line).groups() for line in stale]
    assert sorted(got) == sorted(want)


@functools.cache
def _committed_specs() -> dict[str, object]:
    """The repository's specs by name, loaded once (every lockfile entry asks for one)."""
    return {ls.spec.name: ls for ls in load_spec_files(Project(root=REPO_ROOT).spec_paths(None), REPO_ROOT)}


def _template(spec: str, cand) -> str:
    """The template the candidate's configuration renders."""
    inst, why = winner_instance(_committed_specs()[spec], Target.SM_90, cand.tunables)
    assert inst is not None, why
    return inst.template


def test_the_build_cache_keys_on_the_code_not_the_header(tmp_path):
    """Two specs in two files asking for one configuration: one name, one code hash, one cache key per shape
    (the header names the spec file, and is not compiled); other code, another key."""
    from codegen.build.cache import BuildCache
    from codegen.build.compile import plan
    from codegen.generate.instance import build_instances
    from codegen.generate.render import render
    from codegen.spec.load import parse_specs

    spec = (REPO_ROOT / "specs" / "softmax.yaml").read_text(encoding="utf-8")
    a, b = (build_instances(parse_specs(spec, f"specs/{n}.yaml"), [Target.SM_90])[0] for n in ("a", "b"))
    ra, rb = render(a), render(b)
    assert ra.uri == rb.uri and ra.code_sha256 == rb.code_sha256 and ra.text != rb.text

    class Toolchain:
        def fingerprint(self):
            return {"compiler": "test"}

    def keys(files):
        return [job.key for job in plan(files, {Target.SM_90: Toolchain()}, BuildCache(root=tmp_path), first_shape=False)]

    assert keys([ra]) == keys([rb]) and len(set(keys([ra]))) == len(ra.instance.compile_shapes())
    other = replace(ra, text=ra.text + "# other code\n", code_sha256="0" * 64)
    assert set(keys([other])).isdisjoint(keys([ra]))
