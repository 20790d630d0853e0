"""The README and docs/ say what the code does: commands that exist, links that resolve, every spec field of
every family documented with its default, rules that exist, and a results page that is what the JSON gives."""

from __future__ import annotations

import importlib.util
import json
import re
import types
import typing
from enum import Enum
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from pydantic_core.core_schema import ErrorType

from codegen.cli.main import app
from codegen.families import all_families
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
MAX_README_LINE = 100


def _pages() -> list[Path]:
    return [README, ROOT / "CHANGELOG.md", ROOT / "reports" / "README.md", *sorted(DOCS.glob("*.md"))]


# ---- the README ------------------------------------------------------------------------------------------

def test_readme_is_a_page_not_a_log():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README has {len(lines)} lines (at most {MAX_README_LINES})"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > MAX_README_LINE]
    assert not long, f"README lines over {MAX_README_LINE} characters: {long}"


def test_readme_names_the_two_commands():
    readme = README.read_text()
    for command, script in (("bash tools/run.sh", "tools/run.sh"), ("bash tools/test.sh", "tools/test.sh")):
        assert f"`{command}`" in readme and (ROOT / script).is_file(), command
    assert "bash tools/test.sh" in (ROOT / ".ci" / "run").read_text()


def _split_fences(text: str) -> tuple[list[str], str]:
    """(lines inside fenced code blocks, the prose outside them)."""
    code, prose, inside = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            code.append(line)
        else:
            prose.append(line)
    return code, "\n".join(prose)


def _tilegen_invocations(text: str) -> list[str]:
    """Every `tilegen ...` the text shows: lines of its fenced code blocks and its inline code spans."""
    code, prose = _split_fences(text)
    found = [line.split("#", 1)[0].strip() for line in code if line.startswith("tilegen ")]
    found += [span for span in re.findall(r"`([^`\n]+)`", prose) if span.startswith("tilegen ")]
    return found


def _problems_of(invocation: str, root) -> list[str]:
    """Why `invocation` is not a command line of the CLI: an unknown command or an option it does not take."""
    words = [w.strip("[]") for w in invocation.replace("\\|", "|").split()[1:]]
    params = list(root.params)
    cmd = root  # typer's (vendored) click objects: a group has `commands`
    problems = []
    i = 0
    while i < len(words):  # global options, then the command (and the sub-command of a group)
        w = words[i]
        if w.startswith("-"):
            if not any(w.split("=")[0] in p.opts for p in root.params):
                break
            i += 2 if not w.startswith("--verbose") and w not in ("-v",) else 1
            continue
        if hasattr(cmd, "commands"):
            sub = cmd.commands.get(w)
            if sub is None:
                return [f"{invocation!r}: no command {w!r}"]
            cmd, params = sub, list(sub.params)
            i += 1
            continue
        break
    if hasattr(cmd, "commands"):
        return [f"{invocation!r}: {cmd.name or 'tilegen'} needs a sub-command"]
    opts = {o for p in params for o in (*p.opts, *getattr(p, "secondary_opts", ()))} | {"--help"}
    for w in words[i:]:
        if w.startswith("-") and w.split("=")[0] not in opts:
            problems.append(f"{invocation!r}: {cmd.name} has no option {w.split('=')[0]}")
    return problems


def test_readme_commands_exist():
    root = typer.main.get_command(app)
    invocations = _tilegen_invocations(README.read_text())
    assert len(invocations) >= 20
    problems = [p for inv in invocations for p in _problems_of(inv, root)]
    assert not problems, "\n".join(problems)


def test_the_command_check_can_fail():
    root = typer.main.get_command(app)
    assert _problems_of("tilegen frobnicate", root)
    assert _problems_of("tilegen tune NAME --statik", root)
    assert _problems_of("tilegen new", root)
    assert not _problems_of("tilegen -C DIR tune NAME --static -t gfx942", root)


def test_walkthrough_search_block_validates():
    """The search block the walk-through adds to `tilegen init`'s softmax spec is legal, for both targets."""
    m = re.search(r"Add a search space to `specs/softmax.yaml`.*?```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    assert m, "the walk-through lost its search block"
    starter = next(f for f in all_families() if f.name == "softmax").starters["softmax"]
    specs = parse_specs(starter + m.group(1), "specs/softmax.yaml")
    build_instances(specs)
    assert {t.value for t in specs[0].spec.search} == {"gfx942", "sm_90"}


def test_readme_example_is_in_the_generated_file():
    text = (DOCS / "spec-format.md").read_text()
    m = re.search(r"<!-- readme-example: (\S+) -->\n```python\n(.*?)```", text, re.DOTALL)
    assert m, "docs/spec-format.md lost its generated-code example"
    files = sorted(ROOT.glob(m.group(1)))
    assert len(files) == 1, files
    assert m.group(2) in files[0].read_text()


def test_no_history_in_readme_or_docs():
    """User-facing pages speak of the tool: no commit hashes, no sessions, no 'not yet' diary notes."""
    for page in (README, *sorted(DOCS.glob("*.md"))):
        text = page.read_text()
        for pattern in (r"(?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", r"\bsession\b", r"\bnot yet\b",
                        r"\bissue #?\d+"):
            hit = re.search(pattern, text, re.IGNORECASE)
            assert not hit, f"{page.relative_to(ROOT)}: {hit.group(0)!r}"


# ---- links -----------------------------------------------------------------------------------------------

def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _split_fences(page.read_text())[1], re.MULTILINE):
        out.add("".join(ch for ch in heading.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-"))
    return out


def _broken_links(page: Path) -> list[str]:
    broken = []
    text = _split_fences(page.read_text())[1]
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{page.relative_to(ROOT)}: {target}: no heading #{anchor}")
    return broken


def test_docs_links_resolve():
    """Every relative link of the README, CHANGELOG, results page and docs/ reaches a file (and heading)."""
    broken = [b for page in _pages() for b in _broken_links(page)]
    assert not broken, "\n".join(broken)


def test_the_link_check_can_fail(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n[ok](#top) [gone](missing.md) [bad](a.md#nowhere)\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        broken = _broken_links(tmp_path / "a.md")
    finally:
        ROOT = saved
    assert len(broken) == 2 and "missing.md" in broken[0] and "#nowhere" in broken[1]


# ---- every spec field of every family in its page ---------------------------------------------------------

def _model_of(annotation) -> type[BaseModel] | None:
    """The pydantic model a field holds (through Optional, Annotated and list), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is dict:
        return None  # overrides, search: per-target blocks, documented in prose
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _is_list(annotation) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    if typing.get_origin(annotation) in (typing.Annotated, typing.Union, types.UnionType):
        return any(_is_list(a) for a in typing.get_args(annotation))
    return False


def spec_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, object]]:
    """(dotted path, field info) of every field a user can write, nested models included; a list of models
    is `shapes[].m`."""
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, info))
        inner = _model_of(info.annotation)
        if inner is not None:
            out += spec_fields(inner, f"{path}[]." if _is_list(info.annotation) else f"{path}.")
    return out


# a default the model holds in another form than a user writes it
SHOWN_DEFAULTS = {("attention", "causal"): "false"}


def _shown_default(family: str, path: str, info) -> str | None:
    """How a field's default is written in its page's table: 'required', 'none', a value; None: not checked."""
    if (family, path) in SHOWN_DEFAULTS:
        return SHOWN_DEFAULTS[(family, path)]
    if info.is_required():
        return "required"
    default = info.default if info.default is not PydanticUndefined else None
    if default is None:
        return "none"
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, Enum):
        return str(default.value)
    if isinstance(default, int | float | str):
        return str(default)
    if isinstance(default, list) and all(isinstance(v, Enum) for v in default):
        return "[" + ", ".join(v.value for v in default) + "]"
    return None  # a nested model's default (pipeline): its leaves are checked


def _rules_of(model: type[BaseModel]) -> set[str]:
    """Rule names the family's own modules raise: its folder, and the shared row module for row families."""
    folder = Path(importlib.util.find_spec(model.__module__).origin).parent
    files = set(folder.glob("*.py"))
    files |= {Path(importlib.util.find_spec(c.__module__).origin) for c in model.__mro__
              if c.__module__.startswith("codegen.families.") and c.__module__ != model.__module__}
    return {r for f in files for r in re.findall(r'rule="([a-z0-9_]+)"', f.read_text())}


def field_problems(family: str, models: list[type[BaseModel]], page_text: str) -> list[str]:
    """What the family's page misses: a field, its default in the field's table row, or a rule."""
    problems = []
    rows: dict[str, str] = {}
    for m in re.finditer(r"^\| `([^`]+)` \| ([^|]*) \|", page_text, re.MULTILINE):
        rows.setdefault(m.group(1), m.group(2))  # the fields table comes first
    for model in models:
        for path, info in spec_fields(model):
            if f"`{path}`" not in page_text:
                problems.append(f"{family}: field `{path}` ({model.__name__}) is not documented")
                continue
            shown = _shown_default(family, path, info)
            if shown is not None and path in rows and shown not in rows[path]:
                problems.append(f"{family}: `{path}`'s row gives default {rows[path].strip()!r}, the model {shown!r}")
            if shown is not None and path not in rows:
                problems.append(f"{family}: `{path}` has no row in the fields table")
        for rule in sorted(_rules_of(model)):
            if f"`{rule}`" not in page_text:
                problems.append(f"{family}: rule `{rule}` is not documented")
    return problems


@pytest.mark.parametrize("family", [f.name for f in all_families()])
def test_every_spec_field_is_documented(family):
    fam = next(f for f in all_families() if f.name == family)
    page = DOCS / f"{family}.md"
    assert page.exists(), f"docs/{family}.md is missing: every family has a reference page"
    problems = field_problems(family, list(dict.fromkeys(fam.specs.values())), page.read_text())
    assert not problems, "\n".join(problems)


def test_the_field_check_can_fail():
    fam = next(f for f in all_families() if f.name == "gemm")
    text = (DOCS / "gemm.md").read_text()
    without_row = re.sub(r"^\| `split_k` \|.*\n", "", text, flags=re.MULTILINE).replace("`split_k`", "split_k")
    assert any("`split_k`" in p for p in field_problems("gemm", [*fam.specs.values()], without_row))
    wrong_default = re.sub(r"^(\| `pipeline.stages` \| )`2`", r"\1`3`", text, flags=re.MULTILINE)
    assert any("pipeline.stages" in p for p in field_problems("gemm", [*fam.specs.values()], wrong_default))
    no_rule = text.replace("`split_k_workspace`", "split_k_workspace")
    assert any("split_k_workspace" in p for p in field_problems("gemm", [*fam.specs.values()], no_rule))


def test_rules_named_in_docs_exist():
    """A rule a page names in brackets, [`rule`], is one the code has (catches renamed and removed rules)."""
    source = "\n".join(p.read_text() for p in (ROOT / "codegen").rglob("*.py"))
    # rules named by an f-string, f"{name}_target", for each quoted option name
    suffixes = set(re.findall(r'f"\{[a-z_]+\}_([a-z_]+)"', source))

    pydantic_types = set(typing.get_args(ErrorType))  # a field's type check, reported under pydantic's own name

    def known(rule: str) -> bool:
        head, _, tail = rule.rpartition("_")
        return rule in source or rule in pydantic_types or (tail in suffixes and f'"{head}"' in source)

    missing = []
    for page in sorted(DOCS.glob("*.md")):
        for group in re.findall(r"\[((?:`[a-z0-9_]+`(?:, )?)+)\]", page.read_text()):
            missing += [f"{page.name}: {r}" for r in re.findall(r"`([a-z0-9_]+)`", group) if not known(r)]
    assert not missing, "\n".join(missing)


def test_starters_point_at_their_page():
    for fam in all_families():
        for op, text in fam.starters.items():
            assert f"docs/{fam.name}.md" in text, f"the {op} starter does not point at docs/{fam.name}.md"
            assert "README" not in text


# ---- the results page ------------------------------------------------------------------------------------

def _results_page_module():
    spec = importlib.util.spec_from_file_location("results_page", ROOT / "tools" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_page_is_what_the_json_gives():
    page = _results_page_module().render(ROOT)
    assert page == (ROOT / "reports" / "README.md").read_text(), "run `python tools/results_page.py`"


def test_results_page_marks_static_and_measured():
    mod = _results_page_module()
    text = mod.render(ROOT)
    section = text.split("\n## Index\n", 1)[1].split("\n## ", 1)[0]  # the index table, not the tuned-kernels one
    index = dict(re.findall(r"^\| \[([^\]]+)\]\([^)]*\) \| ([^|]+) \|", section, re.MULTILINE))
    assert index["static/gfx942.json"].startswith("static (gfx942 ISA)")
    assert index["static/sm_90.json"].startswith("static")
    assert index["h200/bench.json"].strip() == "measured (NVIDIA H200)"
    assert index["h200/verify.json"].strip() == "measured (NVIDIA H200)"
    for rel, label in index.items():
        assert label.startswith(("static", "measured")), (rel, label)


def test_no_amd_timing_in_reports():
    """Every timed bench row is of an sm_90 kernel: no AMD timing exists to be claimed."""
    for path in (ROOT / "reports").rglob("*.json"):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "rows" in data and "copy_gbps" in data:
            timed = {r["target"] for r in data["rows"] if r["status"] == "ok"}
            assert timed <= {"sm_90"}, (path, timed)


def test_the_wheel_carries_the_docs():
    """pyproject's data-files put the README, the CHANGELOG and every docs/ page into the wheel
    (<prefix>/share/doc/tilegen/)."""
    import tomllib

    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {p.resolve() for patterns in data_files.values() for pat in patterns for p in ROOT.glob(pat)}
    for page in (README, ROOT / "CHANGELOG.md", *DOCS.glob("*.md")):
        assert page.resolve() in shipped, f"{page.relative_to(ROOT)} is not in the wheel"
