"""tilegen's one build step beyond pyproject.toml: the Jinja templates into the wheel.

The templates live at the repository's top level (templates/<family>/*.py.j2, shared partials in
templates/_shared/); a wheel carries the same tree inside the package, as codegen/templates/, where
codegen.families.base.templates_dir finds it (in a checkout or an editable install it finds templates/
beside the package). MANIFEST.in puts templates/ into the sdist, so a wheel built from it has them too.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATES = Path(__file__).resolve().parent / "templates"
IN_PACKAGE = Path("codegen") / "templates"  # where the wheel carries them, relative to its root


class BuildPyWithTemplates(build_py):
    """build_py, then templates/ copied to <build_lib>/codegen/templates/ (not for an editable install,
    which reads the checkout's templates/)."""

    def _templates(self) -> list[tuple[Path, Path]]:
        if not TEMPLATES.is_dir():
            raise SystemExit(f"{TEMPLATES}: missing; tilegen's wheel is built from a checkout or its sdist")
        return [(src, Path(self.build_lib) / IN_PACKAGE / src.relative_to(TEMPLATES))
                for src in sorted(TEMPLATES.rglob("*.j2"))]

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for src, dest in self._templates():
            self.mkpath(str(dest.parent))
            self.copy_file(str(src), str(dest))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [] if self.editable_mode else [str(dest) for _, dest in self._templates()]
        return super().get_outputs(include_bytecode) + extra


setup(cmdclass={"build_py": BuildPyWithTemplates})
