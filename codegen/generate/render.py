"""Instances -> RenderedFile (path + text) through Jinja; writing and checking generated/."""

from __future__ import annotations

import hashlib
import json
import pprint
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path, PurePosixPath

import jinja2

from codegen.core.errors import TilegenError
from codegen.core.files import leftover_temp_files, write_text_atomic
from codegen.families import family, ops
from codegen.families.base import POLICY_FIELDS, TEMPLATES_DIR, WORKLOAD_FIELDS
from codegen.generate.instance import KernelInstance

GENERATED_DIR = PurePosixPath("generated")
HASH_SHOWN = 12  # hex digits of the configuration and code hashes in a module's header
# Which specs asked for which kernel, on which shapes: the workloads, kept beside the kernels (a kernel's own
# module holds only what changes its code, so adding a shape or a spec rewrites this index, not a kernel).
WORKLOADS_FILE = GENERATED_DIR / "workloads.json"


@dataclass(frozen=True, kw_only=True)
class SpecRef:
    """A spec that asked for a kernel, and the shapes it asked for."""

    file: str
    name: str
    shapes: tuple[tuple[int, ...], ...]
    tuned_on: str = ""  # the device whose lockfile chose this configuration for these shapes; "": the hand one


@dataclass(frozen=True, kw_only=True)
class RenderedFile:
    """One kernel: its module (path + text, named by its configuration) and its workload -- `instance.shapes`
    is every shape any spec asked of it, `specs` the specs that asked."""

    path: PurePosixPath  # relative to the project root
    text: str  # the header line, then the body
    uri: str
    instance: KernelInstance
    specs: tuple[SpecRef, ...]
    code_sha256: str  # sha256 of the body: what the kernel's code is (codegen.generate.render.code_sha256)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    @property
    def is_hand(self) -> bool:
        """Whether some spec asks for this kernel as its hand configuration (not only a lockfile's winner)."""
        return any(not s.tuned_on for s in self.specs)

    def for_device(self, device: str) -> RenderedFile | None:
        """This kernel with only what `device` runs of it: the specs that ask for it as their hand configuration
        and those whose lockfile of `device` chose it (their shapes); None where only other devices' lockfiles
        chose it."""
        refs = tuple(s for s in self.specs if not s.tuned_on or s.tuned_on == device)
        return self._with(refs) if refs else None

    def for_spec(self, name: str) -> RenderedFile:
        """This kernel with only the shapes spec `name` asked for (its workload when selected by that name)."""
        return self.for_specs({name})

    def for_specs(self, names: set[str]) -> RenderedFile:
        """This kernel with only the shapes the specs `names` asked for."""
        return self._with(tuple(s for s in self.specs if s.name in names))  # hand configuration, tuned shapes, or both

    def _with(self, refs: tuple[SpecRef, ...]) -> RenderedFile:
        """This kernel asked for by `refs` only, at their shapes."""
        shapes = tuple(dict.fromkeys(x for r in refs for x in r.shapes))
        return replace(self, instance=replace(self.instance, shapes=shapes), specs=refs)


@cache
def _environment(search_path: tuple[Path, ...]) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(p) for p in search_path]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_file(search_path: tuple[Path, ...], name: str) -> Path:
    """The file a template name resolves to: the first folder of `search_path` that has it (as Jinja's loader)."""
    for folder in search_path:
        if (folder / name).is_file():
            return folder / name
    raise TilegenError(f"template {name} not found in {', '.join(str(p) for p in search_path)}")


def _shown(path: Path) -> str:
    """A template's path as the header shows it: templates/<family>/<file> for the built-in templates (the
    same in a checkout and in an installed wheel: codegen.families.base.templates_dir); they are never looked
    up in the project tilegen works on."""
    try:
        return path.relative_to(TEMPLATES_DIR.parent).as_posix()
    except ValueError:  # a family from another package (an entry point): its own file name
        return path.name


def comment_text(value: object) -> str:
    """`value` as it may appear inside a one-line `#` comment of generated code: printable ASCII stays,
    anything else (a newline, a carriage return, a control, format or non-ASCII character) becomes its
    backslash escape. So no string that reaches a header (a spec file name) can add a line to a module,
    whatever was validated before."""
    return "".join(ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode("ascii") for ch in str(value))


def code_sha256(body: str) -> str:
    """What a kernel's code is: the sha256 of its module without the header line (which holds the hashes and
    the specs that asked for it). A template edit that changes the rendered text changes it; one that renders
    the same text (a Jinja comment, a refactor) does not."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


# what the template receives as `header` while its body is rendered; the real header replaces it, once the
# body's hash is known. Templates place {{ header }} alone on the module's first line.
_HEADER_SLOT = "#\x00tilegen-header\x00"


def header_line(inst: KernelInstance, specs: tuple[SpecRef, ...], code: str, template: Path) -> str:
    """`# @generated by tilegen from specs/x.yaml (config sha256:..., code sha256:...) via templates/...`."""
    spec_files = ", ".join(comment_text(f) for f in sorted({s.file for s in specs}))
    return (f"# @generated by tilegen from {spec_files} (config sha256:{inst.config_sha256()[:HASH_SHOWN]}, "
            f"code sha256:{code[:HASH_SHOWN]}) via {comment_text(_shown(template))} — do not edit; "
            f"its workloads: {WORKLOADS_FILE}")


def render(inst: KernelInstance, specs: tuple[SpecRef, ...] | None = None) -> RenderedFile:
    """The module of `inst`'s kernel. Its name comes from the configuration only; its body (everything but
    the header) depends only on the configuration and the template, never on the spec's name, file or
    shapes: the body's hash (`code_sha256`) is the build cache's key material and the lockfile's code hash."""
    search_path = family(inst).template_path
    uri = inst.uri()
    if not (uri.isascii() and uri.isidentifier()):  # it is a Python name in the module; spec names are checked
        raise TilegenError(f"kernel URI {comment_text(uri)!r} is not a Python identifier")
    config = {k: v for k, v in inst.metadata(uri).items() if k not in WORKLOAD_FIELDS + POLICY_FIELDS}
    text = _environment(search_path).get_template(inst.template).render(
        header=_HEADER_SLOT,
        uri=uri,
        inst=inst,
        metadata_literal=pprint.pformat(config, sort_dicts=True, width=100),
        **inst.template_vars(),
    )
    slot, newline, body = text.partition("\n")
    template = template_file(search_path, inst.template)
    if slot != _HEADER_SLOT or not newline or _HEADER_SLOT in body:
        raise TilegenError(f"{comment_text(_shown(template))}: the template must place {{{{ header }}}} alone on "
                           "the module's first line, and nowhere else")
    specs = specs if specs is not None else (SpecRef(file=inst.spec_file, name=inst.name, shapes=inst.shapes),)
    code = code_sha256(body)
    return RenderedFile(path=inst.out_dir / f"{uri}.py", text=f"{header_line(inst, specs, code, template)}\n{body}",
                        uri=uri, instance=inst, specs=specs, code_sha256=code)


def merge_workloads(instances: list[KernelInstance], tuned: Sequence[tuple[KernelInstance, str]] = ()
                    ) -> list[tuple[KernelInstance, tuple[SpecRef, ...]]]:
    """Instances of one configuration (the same kernel name) merged into one kernel: the union of their
    shapes (in order of first appearance), every (spec file, name) that asked for it, and the strictest of
    their check policies (no spills unless every spec allows them, the highest occupancy floor, the
    tightest verify tolerance). `tuned`: (instance, device) of the configurations a lockfile chose for some
    of a spec's shapes (codegen.generate.lockfile.tuned_instances), after the hand ones."""
    groups: dict[str, list[tuple[KernelInstance, str]]] = {}
    for inst, device in [*((i, "") for i in instances), *tuned]:
        groups.setdefault(inst.uri(), []).append((inst, device))
    merged = []
    for uri, pairs in groups.items():
        same = [i for i, _ in pairs]
        first = same[0]
        if len({i.template for i in same}) > 1:  # the template must follow from the configuration (NOT_IDENTITY)
            raise TilegenError(f"{uri}: one configuration renders {' and '.join(sorted({i.template for i in same}))}: "
                               f"its family chooses a template from something that is not an instance field")
        shapes = tuple(dict.fromkeys(s for i in same for s in i.shapes))
        floors = [i.min_waves_per_simd for i in same if i.min_waves_per_simd is not None]
        kernel = replace(first, shapes=shapes, allow_spills=all(i.allow_spills for i in same),
                         min_waves_per_simd=max(floors) if floors else None,
                         verify_tolerance_scale=min(i.verify_tolerance_scale for i in same))
        refs: dict[tuple[str, str, str], list] = {}  # a lockfile's shapes of one spec: one reference
        for i, d in pairs:
            refs.setdefault((i.spec_file, i.name, d), []).extend(i.shapes)
        merged.append((kernel, tuple(SpecRef(file=f, name=n, shapes=tuple(dict.fromkeys(s)), tuned_on=d)
                                     for (f, n, d), s in refs.items())))
    return merged


def render_all(instances: list[KernelInstance], tuned: Sequence[tuple[KernelInstance, str]] = ()
               ) -> list[RenderedFile]:
    """One rendered module per distinct kernel configuration (hand and tuned), in a stable order."""
    files = [render(kernel, specs) for kernel, specs in merge_workloads(instances, tuned)]
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):  # cannot happen unless two configurations hash alike
        raise TilegenError("two kernel configurations render to the same file; their names collide")
    return sorted(files, key=lambda f: (f.instance.target.value, f.instance.op, f.uri))


def workloads_text(files: list[RenderedFile]) -> str:
    """generated/workloads.json: per kernel, its file, the specs that asked for it and its shapes."""
    rows = {f.uri: {"file": f.path.as_posix(), "target": f.instance.target.value, "op": f.instance.op,
                    "specs": [{"file": s.file, "name": s.name, "shapes": [list(x) for x in s.shapes]}
                              | ({"tuned_on": s.tuned_on} if s.tuned_on else {}) for s in f.specs],
                    "shapes": [list(s) for s in f.instance.shapes]} for f in files}
    lines = [f"  {json.dumps(uri)}: {json.dumps(row, sort_keys=True)}" for uri, row in sorted(rows.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"  # one kernel a line: a workload change is a one-line diff


@dataclass(frozen=True, kw_only=True)
class GenResult:
    written: list[PurePosixPath]
    unchanged: list[PurePosixPath]
    removed: list[PurePosixPath]  # stale modules, and temp files an interrupted write left
    tuning: tuple[str, ...] = ()  # which shapes tuned configurations serve, and which the hand one (Project.tuning_lines)


def _existing(root: Path, dirs: set[PurePosixPath]) -> set[PurePosixPath]:
    out = set()
    for d in dirs:
        for p in (root / d).glob("*.py"):
            if p.is_file() or p.is_symlink():  # a folder so named is not a module gen wrote
                out.add(PurePosixPath(p.relative_to(root).as_posix()))
    return out


def _written_dirs(files: list[RenderedFile], prune_dirs: set[PurePosixPath], index: bool) -> set[PurePosixPath]:
    """Every folder gen writes to (or prunes): where an interrupted write may have left a temp file."""
    return prune_dirs | {f.path.parent for f in files} | ({WORKLOADS_FILE.parent} if index else set())


def _leftover_temps(root: Path, dirs: set[PurePosixPath]) -> list[PurePosixPath]:
    """Temp files of an interrupted `gen` (codegen.core.files) in folders gen writes to."""
    return sorted(PurePosixPath(p.relative_to(root).as_posix()) for d in dirs for p in leftover_temp_files(root / d))


def _outputs(files: list[RenderedFile], index: bool) -> list[tuple[PurePosixPath, str]]:
    """(path, text) of every generated file: the modules, and the workload index when the whole set is generated."""
    out = [(f.path, f.text) for f in files]
    return out + [(WORKLOADS_FILE, workloads_text(files))] if index else out


def write_files(files: list[RenderedFile], root: Path, *, prune_dirs: set[PurePosixPath],
                index: bool = False) -> GenResult:
    """Write what changed; remove stale generated modules under `prune_dirs`, and the temp files an
    interrupted write left there or beside the files written; with `index` (the whole spec set), rewrite
    generated/workloads.json."""
    written, unchanged = [], []
    for path, text in _outputs(files, index):
        dest = root / path
        if dest.is_file() and dest.read_text(encoding="utf-8") == text:
            unchanged.append(path)
            continue
        write_text_atomic(dest, text)
        written.append(path)
    wanted = {f.path for f in files}
    removed = sorted(p for p in _existing(root, prune_dirs) if p not in wanted)
    removed += _leftover_temps(root, _written_dirs(files, prune_dirs, index))
    for p in removed:
        (root / p).unlink(missing_ok=True)
    return GenResult(written=written, unchanged=unchanged, removed=removed)


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    stale: list[PurePosixPath]
    missing: list[PurePosixPath]
    extra: list[PurePosixPath]
    leftover: list[PurePosixPath] = field(default_factory=list)  # temp files of an interrupted write

    @property
    def clean(self) -> bool:
        return not (self.stale or self.missing or self.extra or self.leftover)


def check_files(files: list[RenderedFile], root: Path, *, prune_dirs: set[PurePosixPath],
                index: bool = False) -> CheckResult:
    stale, missing = [], []
    for path, text in _outputs(files, index):
        dest = root / path
        if not dest.is_file():
            missing.append(path)
        elif dest.read_text(encoding="utf-8") != text:
            stale.append(path)
    wanted = {f.path for f in files}
    extra = sorted(p for p in _existing(root, prune_dirs) if p not in wanted)
    return CheckResult(stale=stale, missing=missing, extra=extra,
                       leftover=_leftover_temps(root, _written_dirs(files, prune_dirs, index)))


def target_dirs(targets, op_names=None) -> set[PurePosixPath]:
    """generated/<target>/<op> of every registered op (or of `op_names`) on `targets`."""
    op_names = ops() if op_names is None else op_names
    return {GENERATED_DIR / str(t) / op for t in targets for op in op_names}

