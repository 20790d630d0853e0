"""codegen's import graph: no cycles, and data flows one way through the layers (docs/extending.md).

The graph is read with `ast` from the source, every import counted -- at module level and inside
functions alike (an import moved into a function is still a dependency). `graphlib.TopologicalSorter`
raises CycleError on a cycle. Each module belongs to one layer; a module imports only its own layer and
the layers below it.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# low to high: what each package may import is its own layer and those before it
LAYERS = (
    ("core",),       # errors, hardware facts, files, events, columns, toolchain discovery, YAML source, workers
    ("targets",),    # one module per hardware target
    ("families",),   # one folder per operator family, and what every family shares
    ("spec",),       # the project and its specs, loaded and validated
    ("generate",),   # instances, rendering, lowering, the lockfile's selection, the library entry points
    ("build",),      # compiling, the build cache, doctor, SASS
    ("run",),        # the GPU: verify, bench, profile, reports, `tilegen run`
    ("tune",),       # search and measurement
    ("ops",),        # the kernels as PyTorch ops
    ("cli",),        # the console and the typer app
    ("__main__",),   # `python -m codegen`
)


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`), by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in its source (module and function level)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    known = modules(root, package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, each module importing the next (the first repeated at the end), or None."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return exc.args[1][::-1]  # graphlib lists each node before the one that depends on it
    return None


def layer_of(module: str, package: str, layers=LAYERS) -> int | None:
    """The layer of a module: that of its subpackage (`codegen.run.verify` -> run); the package itself is
    below everything (its __init__ holds the version only)."""
    parts = module.split(".")
    if parts == [package]:
        return -1
    for i, names in enumerate(layers):
        if parts[1] in names:
            return i
    return None


def layer_violations(graph: dict[str, set[str]], package: str, layers=LAYERS) -> list[str]:
    """Each import of a higher layer, and each module in no layer, as one line."""
    out = []
    for module, deps in sorted(graph.items()):
        mine = layer_of(module, package, layers)
        if mine is None:
            out.append(f"{module}: in no layer (a module lives in one of the layer packages)")
            continue
        for dep in sorted(deps):
            theirs = layer_of(dep, package, layers)
            if theirs is not None and theirs > mine:
                out.append(f"{module} ({layers[mine][0]}) imports {dep} ({layers[theirs][0]}): a lower layer "
                           "never imports a higher one")
    return out


def test_codegen_has_no_import_cycle():
    graph = import_graph(ROOT, "codegen")
    assert len(graph) > 50  # the whole package was read
    found = cycle(graph)
    assert found is None, " imports ".join(found)


def test_codegen_layers_import_downwards_only():
    graph = import_graph(ROOT, "codegen")
    assert layer_violations(graph, "codegen") == []


def test_families_and_targets_import_no_stage():
    graph = import_graph(ROOT, "codegen")
    stages = ("spec", "generate", "build", "run", "tune", "ops", "cli")
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.split(".")[1:2] in (["families"], ["targets"])
                   for d in deps if d.split(".")[1:2] and d.split(".")[1] in stages)
    assert wrong == []
    # and the reading is not vacuous: the families do import the targets and core
    assert "codegen.targets" in graph["codegen.families.base"]


# ---- negative controls: the checks above can fail ---------------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("inner", [False, True], ids=["module_level", "function_level"])
def test_a_cycle_is_reported(tmp_path, inner):
    """pkg.core.a -> pkg.run.b -> pkg.core.a: reported, whether b's import of a sits at module level or in a
    function (and one through a relative import)."""
    back = "def f():\n    from pkg.core.a import X\n" if inner else "from pkg.core import a\n"
    root = _package(tmp_path, {
        "pkg/__init__.py": "", "pkg/core/__init__.py": "", "pkg/run/__init__.py": "",
        "pkg/core/a.py": "from ..run.b import Y\nX = 1\n",
        "pkg/run/b.py": back + "Y = 2\n",
    })
    graph = import_graph(root, "pkg")
    assert graph["pkg.core.a"] == {"pkg.run.b"}
    assert cycle(graph) in (["pkg.core.a", "pkg.run.b", "pkg.core.a"], ["pkg.run.b", "pkg.core.a", "pkg.run.b"])
    # and the same package without the way back has none
    (root / "pkg/run/b.py").write_text("Y = 2\n")
    assert cycle(import_graph(root, "pkg")) is None


def test_an_upward_import_and_a_stray_module_are_reported(tmp_path):
    root = _package(tmp_path, {
        "pkg/__init__.py": "", "pkg/core/__init__.py": "", "pkg/run/__init__.py": "",
        "pkg/core/a.py": "def f():\n    import pkg.run.b\n",
        "pkg/run/b.py": "from pkg.core.a import f\n",
        "pkg/loose.py": "",
    })
    assert layer_violations(import_graph(root, "pkg"), "pkg", layers=(("core",), ("run",))) == [
        "pkg.core.a (core) imports pkg.run.b (run): a lower layer never imports a higher one",
        "pkg.loose: in no layer (a module lives in one of the layer packages)",
    ]
