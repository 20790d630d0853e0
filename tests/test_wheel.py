"""tilegen as an installed tool: build the wheel, install it (not editable) into a fresh venv, and run
`tilegen init` / validate / gen / gen --check / lower / build in a folder outside this repository.

The fresh venv borrows the test venv's installed dependencies (tilelang, torch, ...) through a `.pth`
line naming that venv's site-packages: a path line, so the test venv's own editable-install hook is not
run and `codegen` can only come from the wheel (asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from spectext import REPO_ROOT

# the wheel and its venv are made once: the module's tests in one xdist worker
pytestmark = pytest.mark.xdist_group("wheel")


def _run(cmd, *, cwd, env, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], check=False, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, tilegen, temp folder) of a fresh venv holding the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                             check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, tracked):
        if (REPO_ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((REPO_ROOT / rel).read_bytes())
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", src],
         cwd=tmp, env=os.environ)
    wheels = list((tmp / "dist").glob("tilegen-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp,
                     env=os.environ).strip())
    (site / "_tilegen_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheels[0]], cwd=tmp, env=os.environ)
    where = _run([python, "-c", "import codegen; print(codegen.__file__)"], cwd=tmp, env=os.environ)
    assert Path(where.strip()).is_relative_to(env_dir), where  # the wheel's codegen, not this checkout's
    return python, env_dir / "bin" / "tilegen", tmp


TEMPLATES = {p.relative_to(REPO_ROOT / "templates").as_posix(): p.read_bytes()
             for p in sorted((REPO_ROOT / "templates").rglob("*.j2"))}


def _templates_dir(python, tmp) -> Path:
    code = "from codegen.families.base import templates_dir; print(templates_dir())"
    return Path(_run([python, "-c", code], cwd=tmp, env=os.environ).strip())


def test_wheel_ships_the_templates_inside_the_package(installed):
    """templates/ of the checkout (every family's and the shared partials) is in the wheel as codegen/templates/,
    byte for byte, and that copy is what the installed package finds."""
    python, _, tmp = installed
    found = _templates_dir(python, tmp)
    package = Path(_run([python, "-c", "import codegen; print(codegen.__file__)"], cwd=tmp, env=os.environ).strip())
    assert found == package.parent / "templates" and not found.is_relative_to(REPO_ROOT)
    assert {p.relative_to(found).as_posix(): p.read_bytes() for p in sorted(found.rglob("*.j2"))} == TEMPLATES
    assert len(TEMPLATES) > 5 and "_shared/_rows.j2" in TEMPLATES and "gemm/gemm.py.j2" in TEMPLATES


def test_wheel_names_its_documentation(installed):
    """The installed wheel's metadata carries the project URLs, the documentation among them."""
    python, _, tmp = installed
    code = ("import importlib.metadata as m, json; d = m.distribution('tilegen'); "
            "print(json.dumps([str(d.locate_file('')), d.metadata.get_all('Project-URL')]))")
    where, urls = json.loads(_run([python, "-c", code], cwd=tmp, env=os.environ))
    assert Path(where).is_relative_to(tmp / "venv"), where  # the wheel's metadata, not the checkout's
    assert "Documentation, https://github.com/tilegen/tilegen/tree/main/docs" in urls
    assert "Homepage, https://github.com/tilegen/tilegen" in urls


def test_installed_tilegen_renders_from_its_own_templates(installed, tmp_path):
    """A line added to the installed copy of softmax.py.j2 appears in every softmax kernel `tilegen gen` writes,
    and in none of the others: the installed tool reads its own templates, whatever checkout is near."""
    python, tilegen, tmp = installed
    template = _templates_dir(python, tmp) / "softmax" / "softmax.py.j2"
    original = template.read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([tilegen, "init", "kernels"], cwd=tmp_path, env=env)
    project = tmp_path / "kernels"
    note = "# rendered from the installed wheel's template"
    try:
        template.write_bytes(original.replace(b"{{ header }}\n", ("{{ header }}\n" + note + "\n").encode(), 1))
        _run([tilegen, "gen"], cwd=project, env=env)
    finally:
        template.write_bytes(original)
    kernels = sorted((project / "generated").rglob("*.py"))
    softmax = [k for k in kernels if k.parent.name == "softmax"]
    assert softmax and len(softmax) < len(kernels)
    for k in kernels:
        lines = k.read_text(encoding="utf-8").splitlines()
        assert (lines[1] == note) == (k in softmax), k
        assert " via templates/" in lines[0], lines[0]


def test_installed_tilegen_works_in_a_project_of_its_own(installed, tmp_path):
    _, tilegen, _ = installed
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "TILELANG_CACHE_DIR": str(home / ".cache" / "tilelang")}
    env.pop("PYTHONPATH", None)
    _run([tilegen, "init", "kernels"], cwd=work, env=env)
    project = work / "kernels"
    for args in (["validate"], ["gen"], ["gen", "--check"], ["lower", "softmax_fp16", "--first-shape"]):
        _run([tilegen, *args], cwd=project, env=env)
    assert list((project / "generated" / "gfx942").rglob("*.py"))
    assert list((project / "build" / "lowered" / "sm_90").rglob("*.cu"))
    if (REPO_ROOT / ".toolchain" / "env.json").is_file():  # CI has one (tools/setup.sh): apt and Debian reachable
        # the installed tool fetches the AMD toolchain into the user cache, where every project finds it
        _run([tilegen, "toolchain", "fetch"], cwd=project, env=env)
        assert (home / ".cache" / "tilegen" / "toolchain" / "env.json").is_file()
        out = _run([tilegen, "build", "softmax_fp16", "-t", "gfx942"], cwd=project / "specs", env=env)
        assert "softmax_fp16_two_pass_t128_v8_gfx942_" in out and " built " in out, out
        assert list((project / ".cache" / "build").rglob("*.s"))
    assert _tree(work) == {"kernels"} | {f"kernels/{p}" for p in _tree(project)}  # nothing beside the project
    assert {p.split("/")[0] for p in _tree(home)} <= {".cache", ".tilelang"}  # and only caches in the home
