"""The library entry points the CLI calls: spec paths -> instances -> rendered files -> lowered source."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path, PurePosixPath

from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.instance import KernelInstance, build_instances
from codegen.generate.lower import LoweredKernel, lower
from codegen.generate.render import (
    WORKLOADS_FILE,
    CheckResult,
    GenResult,
    RenderedFile,
    check_files,
    render_all,
    target_dirs,
    write_files,
)
from codegen.spec.load import load_spec_files
from codegen.spec.project import ProjectConfig, confined, find_project_root, read_config


@dataclass(frozen=True, kw_only=True)
class Project:
    """The project tilegen works on (codegen.spec.project): specs, generated/, reports/ and caches under `root`."""

    root: Path = field(default_factory=lambda: find_project_root(Path.cwd()))

    @cached_property
    def config(self) -> ProjectConfig:
        return read_config(self.root)

    def path(self, relative: str | PurePosixPath) -> Path:
        """A path of the project that tilegen reads or writes on its own, refused [outside_project] when a
        symlink takes it out of the project (codegen.spec.project.confined)."""
        return confined(self.root, self.root / relative, PurePosixPath(relative).as_posix())

    @property
    def reports_dir(self) -> Path:
        return self.path("reports")

    @property
    def cache_dir(self) -> Path:
        return self.path(".cache")

    def spec_paths(self, paths: list[Path] | None) -> list[Path]:
        """`paths` as given, or the config's spec paths (each inside the project)."""
        return list(paths) if paths else [self.path(p) for p in self.config.specs]

    def _confine_outputs(self, files: list[RenderedFile], prune_dirs: set[PurePosixPath], index: bool) -> None:
        """Every file gen writes or compares, and every folder it prunes, stays inside the project; and can be
        written there -- a file where a folder belongs, or a folder where a file does, is refused before anything
        is written, so gen writes all its files or none."""
        outputs = {f.path for f in files} | ({WORKLOADS_FILE} if index else set())
        for rel in sorted(outputs | prune_dirs):
            path = self.path(rel)
            folders = [*reversed(PurePosixPath(rel).parents[:-1])] + ([PurePosixPath(rel)] if rel in prune_dirs else [])
            for folder in folders:
                if (self.root / folder).exists() and not (self.root / folder).is_dir():
                    raise TilegenError(f"cannot write {rel}: {folder} is not a folder (move it away; gen writes "
                                       f"its files under it)")
            if rel in outputs and path.is_dir():
                raise TilegenError(f"cannot write {rel}: it is a folder (move it away; gen writes a file there)")

    def instances(self, paths: list[Path] | None = None, targets: list[Target] | None = None) -> list[KernelInstance]:
        loaded = load_spec_files(self.spec_paths(paths), self.root)
        return build_instances(loaded, targets)

    def rendered(self, paths: list[Path] | None = None, targets: list[Target] | None = None) -> list[RenderedFile]:
        """Every kernel of the spec set: the hand configurations, and the configurations the committed
        lockfiles (tuned/<target>/<device>.json) chose for some shapes."""
        return self._tuned(paths, targets)[0]

    def rendered_and_entries(self, targets: list[Target] | None = None) -> tuple[list[RenderedFile], tuple]:
        """rendered(), and the fresh lockfile entries it used: (target, LockEntry, instance) each
        (codegen.generate.lockfile.CheckReport.fresh) -- what each tuned kernel measured at its shape."""
        files, report = self._tuned(None, targets)
        return files, report.fresh

    def _tuned(self, paths, targets):
        from codegen.generate.lockfile import tuned_instances

        loaded = load_spec_files(self.spec_paths(paths), self.root)
        instances = build_instances(loaded, targets)
        tuned, report = tuned_instances(self.root, loaded, targets)
        return render_all(instances, tuned), report

    def tuning_lines(self, files: list[RenderedFile], report) -> tuple[str, ...]:
        """What gen says of tuning: each shape served by a tuned configuration (and from which lockfile), each
        searched shape the hand configuration serves because no entry answers for it, and entries not used."""
        lines = []
        for f in files:
            for ref in f.specs:
                if ref.tuned_on:
                    lines += [f"{ref.name} {'x'.join(map(str, s))} on {f.instance.target.value}: tuned on {ref.tuned_on} "
                              f"-> {f.uri}" for s in ref.shapes]
        lines += [f"{m.spec} {'x'.join(map(str, m.shape))}: hand configuration ({m.file}: {m.reason})" for m in report.misses]
        # an entry of a spec outside the files asked for (`gen PATHS`) is not stale, only not looked at here
        asked = {ref.name for f in files for ref in f.specs}
        lines += [f"{m.line()}: not used, the hand configuration serves it" for m in report.stale if m.spec in asked]
        lines += [f"{line}: none of its entries is used; the hand configurations serve its shapes"
                  for line in report.invalid]
        return tuple(sorted(lines))

    def _prune_dirs(self, paths, targets) -> set[PurePosixPath]:
        # Stale files are only pruned/reported when the whole default spec set is generated.
        if paths:
            return set()
        return target_dirs(targets or list(Target))

    def generate(self, paths: list[Path] | None = None, targets: list[Target] | None = None) -> GenResult:
        files, report = self._tuned(paths, targets)
        prune, index = self._prune_dirs(paths, targets), not paths and not targets
        self._confine_outputs(files, prune, index)
        result = write_files(files, self.root, prune_dirs=prune, index=index)
        return replace(result, tuning=self.tuning_lines(files, report))

    def check(self, paths: list[Path] | None = None, targets: list[Target] | None = None) -> CheckResult:
        files = self.rendered(paths, targets)
        prune, index = self._prune_dirs(paths, targets), not paths and not targets
        self._confine_outputs(files, prune, index)
        return check_files(files, self.root, prune_dirs=prune, index=index)

    def select(self, names: list[str], *, all_: bool, targets: list[Target] | None) -> list[RenderedFile]:
        """Rendered files of the named kernels (kernel URI: every shape of it; spec name: the kernels that spec
        asked for, with its shapes only), or of all of them."""
        files = self.rendered(None, targets)
        if all_:
            return files
        if not names:
            raise TilegenError("name a kernel (spec name or URI) or pass --all")
        # by URI, once however often it is named: its whole file (named by URI), or the shapes of the specs named
        by_uri = {f.uri: f for f in files}
        chosen: dict[str, set[str] | None] = {}  # URI -> the spec names asked (None: every shape)
        for n in dict.fromkeys(names):
            if n in by_uri:
                chosen[n] = None
                continue
            hits = [f.uri for f in files if n in f.names]
            if not hits:
                raise TilegenError(self._not_found(n, targets))
            for uri in hits:
                if chosen.get(uri, set()) is not None:
                    chosen[uri] = chosen.get(uri, set()) | {n}
        return [by_uri[u] if specs is None else by_uri[u].for_specs(specs) for u, specs in chosen.items()]

    def _not_found(self, name: str, targets: list[Target] | None) -> str:
        """Why `name` selects nothing: a spec or kernel of other targets than those asked, or no such name."""
        if targets:
            elsewhere = sorted({f.instance.target.value for f in self.rendered(None, None)
                                if f.uri == name or name in f.names})
            if elsewhere:
                return (f"'{name}' has no kernel for {', '.join(t.value for t in targets)} (its targets: "
                        f"{', '.join(elsewhere)})")
        return f"no kernel named '{name}' (see `tilegen list`)"

    def lower(self, files: list[RenderedFile], *, all_shapes: bool = True) -> list[LoweredKernel]:
        out = []
        for f in files:
            shapes = f.instance.compile_shapes()  # a dynamic-M kernel: lowered once, at ('m', n, k)
            out.extend(lower(f, s, f.instance.target) for s in (shapes if all_shapes else shapes[:1]))
        return out
