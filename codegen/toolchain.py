"""The device compilers `tilegen build` runs: where they are, their version, their exact flags.

gfx942: ROCm's clang when ROCm is installed at /opt/rocm, else the project-local toolchain that
`tools/fetch-gfx942-toolchain.sh` unpacks into .toolchain/ and describes in .toolchain/env.json.
sm_90: nvcc, found the way TileLang finds it (CUDA_HOME / CUDA_PATH, then PATH, then
/usr/local/cuda), with TileLang's include dirs and flags (tilelang/cuda/backend.py) for sm_90a.

Nothing here imports tilelang: a build's cache key is made of these fingerprints and must be
computable in milliseconds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from codegen.errors import TilegenError
from codegen.hardware import Target

FETCH_GFX942 = "bash tools/fetch-gfx942-toolchain.sh"
GET_NVCC = ("install a CUDA toolkit >= 12.0 and put its nvcc on PATH (or set CUDA_HOME): "
            "`pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl` "
            "or https://developer.nvidia.com/cuda-downloads")
ROCM_ROOT = Path("/opt/rocm")
GFX942_ARCH = "gfx942"
SM90_ARCH = "sm_90a"  # wgmma and setmaxnreg need the arch-specific "a" variant


class ToolchainMissing(TilegenError):
    """A compiler, header or library a target needs is absent; the message says how to get it."""


def _run_version(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainMissing(f"`{' '.join(cmd)}` failed: {exc}") from None
    return proc.stdout


@dataclass(frozen=True, kw_only=True)
class TileLangInstall:
    """Where the installed tilelang package keeps the headers its generated source includes."""

    version: str
    package_dir: Path

    @property
    def template_dir(self) -> Path:  # holds tl_templates/{hip,cuda}
        return self.package_dir / "src"

    @property
    def cutlass_include_dir(self) -> Path:
        return self.package_dir / "3rdparty" / "cutlass" / "include"


def find_tilelang() -> TileLangInstall:
    spec = importlib.util.find_spec("tilelang")  # locates without importing (importing takes ~2 s)
    if spec is None or spec.origin is None:
        raise ToolchainMissing("tilelang is not installed: `pip install tilelang==0.1.15` (or `pip install -e .`)")
    return TileLangInstall(version=importlib.metadata.version("tilelang"), package_dir=Path(spec.origin).parent)


@dataclass(frozen=True, kw_only=True)
class Gfx942Toolchain:
    """clang for HIP device code. source -> .s: `clang + flags + -I... -S`; .s -> code object: link."""

    origin: str  # "/opt/rocm" or ".toolchain/env.json", shown by `tilegen doctor`
    clang: str
    version: str  # clang's first --version line
    components: tuple[tuple[str, str], ...]  # (name, version) of headers and device libraries
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    arch: str = GFX942_ARCH

    def asm_command(self, src: Path, out: Path) -> list[str]:
        return [self.clang, *self.flags, *(f"-I{d}" for d in self.include_dirs), "-S", "-o", str(out), str(src)]

    def code_object_command(self, asm: Path, out: Path) -> list[str]:
        return [self.clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={self.arch}", str(asm), "-o", str(out)]

    def fingerprint(self) -> dict[str, object]:
        """Everything that changes the compiler's output; part of every gfx942 cache key."""
        return {"clang": self.clang, "version": self.version, "components": [list(c) for c in self.components],
                "flags": list(self.flags), "include_dirs": list(self.include_dirs), "arch": self.arch,
                "code_object": self.code_object_command(Path("IN"), Path("OUT"))[1:]}

    def describe(self) -> dict[str, str]:
        """Versions only (no paths): the toolchain block of a committed report."""
        return {"compiler": self.version, **dict(self.components)}


@dataclass(frozen=True, kw_only=True)
class CudaToolchain:
    """nvcc with TileLang's flags plus -arch=sm_90a, ptxas -v and a kept PTX file."""

    nvcc: str
    version: str  # "release 13.0, V13.0.88"
    include_dirs: tuple[str, ...]
    arch: str = SM90_ARCH
    # TileLang's own set (tilelang/contrib/nvcc.py + cuda/backend.py): --cubin -O3 -lineinfo -std=c++20;
    # -w silences warnings from TileLang's headers; --ptxas-options=--verbose prints the resource lines.
    flags: tuple[str, ...] = ("--cubin", "-O3", "-lineinfo", "-std=c++20", "-w", "--ptxas-options=--verbose")

    def cubin_command(self, src: Path, out: Path, keep_dir: Path) -> list[str]:
        return [self.nvcc, *self.flags, f"-arch={self.arch}", *(f"-I{d}" for d in self.include_dirs),
                "--keep", "--keep-dir", str(keep_dir), "-o", str(out), str(src)]

    def fingerprint(self) -> dict[str, object]:
        return {"nvcc": self.nvcc, "version": self.version, "flags": list(self.flags), "arch": self.arch,
                "include_dirs": list(self.include_dirs)}

    def describe(self) -> dict[str, str]:
        return {"compiler": f"nvcc {self.version}"}


Toolchain = Gfx942Toolchain | CudaToolchain


def _rocm_toolchain(rocm: Path, tilelang: TileLangInstall) -> Gfx942Toolchain | None:
    clang = rocm / "llvm" / "bin" / "clang++"
    if not (os.access(clang, os.X_OK) and (rocm / "include" / "hip" / "hip_runtime.h").is_file()):
        return None
    info = rocm / ".info" / "version"
    rocm_version = info.read_text(encoding="utf-8").strip() if info.is_file() else "unknown"
    version = _run_version([str(clang), "--version"]).splitlines()[0:1]
    return Gfx942Toolchain(
        origin=str(rocm), clang=str(clang), version=version[0] if version else "unknown",
        components=(("rocm", rocm_version),),
        flags=("-x", "hip", f"--offload-arch={GFX942_ARCH}", "--cuda-device-only", "-O3", "-std=c++17",
               f"--rocm-path={rocm}", "-include", "hip/hip_bfloat16.h"),
        include_dirs=(str(tilelang.template_dir),),
    )


def _project_toolchain(env_json: Path, shown: str) -> Gfx942Toolchain:
    fix = f"run `{FETCH_GFX942}`"
    if not env_json.is_file():
        raise ToolchainMissing(f"gfx942 toolchain missing: no ROCm at {ROCM_ROOT} and no {shown}; {fix}")
    try:
        env = json.loads(env_json.read_text(encoding="utf-8"))
        clang, flags, include_dirs = env["clang"], env["flags"], env["include_dirs"]
        version, hip_include = env["clang_version"], env["hip_include_dir"]
    except (OSError, ValueError, KeyError) as exc:
        raise ToolchainMissing(f"gfx942 toolchain: {shown} is unreadable ({type(exc).__name__}: {exc}); {fix}") from None
    missing = [p for p in (clang,) if not os.access(p, os.X_OK)]
    missing += [p for p in (f"{hip_include}/hip/hip_runtime.h", *include_dirs) if not Path(p).exists()]
    if missing:
        raise ToolchainMissing(f"gfx942 toolchain incomplete: {missing[0]} not found; {fix}")
    components = tuple((k.removesuffix("_version"), str(env[k])) for k in ("hip_version", "device_libs_version") if k in env)
    return Gfx942Toolchain(origin=shown, clang=clang, version=version, components=components,
                           flags=tuple(flags), include_dirs=tuple(include_dirs))


def find_gfx942(root: Path, *, env_json: Path | None = None, rocm: Path = ROCM_ROOT) -> Gfx942Toolchain:
    """ROCm at `rocm` when complete, else the project toolchain's env.json. An explicit `env_json`
    selects that file only (tests use a bogus one to check the missing-toolchain message)."""
    if env_json is None:
        found = _rocm_toolchain(rocm, find_tilelang())
        if found is not None:
            return found
        env_json = root / ".toolchain" / "env.json"
    try:
        shown = env_json.relative_to(root).as_posix()
    except ValueError:
        shown = str(env_json)
    return _project_toolchain(env_json, shown)


def find_nvcc() -> Path | None:
    """The nvcc TileLang would use (tilelang/env.py `_find_cuda_home`)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home) / "bin" / "nvcc"
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    try:
        for f in importlib.metadata.files("nvidia-cuda-nvcc") or []:
            if f.name == "nvcc":
                return Path(str(f.locate()))
    except importlib.metadata.PackageNotFoundError:
        pass
    default = Path("/usr/local/cuda/bin/nvcc")
    return default if default.exists() else None


def nvcc_version(nvcc: Path) -> str:
    """'release 13.0, V13.0.88' from `nvcc --version`."""
    for line in _run_version([str(nvcc), "--version"]).splitlines():
        if "release" in line:
            return line.split("tools, ", 1)[-1].strip()
    raise ToolchainMissing(f"{nvcc} --version printed no release line; {GET_NVCC}")


def find_cuda() -> CudaToolchain:
    nvcc = find_nvcc()
    if nvcc is None or not os.access(nvcc, os.X_OK):
        where = f" ({nvcc} is not executable)" if nvcc else ""
        raise ToolchainMissing(f"sm_90 toolchain missing: nvcc not found{where}; {GET_NVCC}")
    tl = find_tilelang()
    for d in (tl.template_dir / "tl_templates" / "cuda", tl.cutlass_include_dir):
        if not d.is_dir():
            raise ToolchainMissing(f"sm_90 toolchain: {d} not found (TileLang's CUDA headers); reinstall tilelang==0.1.15")
    return CudaToolchain(nvcc=str(nvcc), version=nvcc_version(nvcc),
                         include_dirs=(str(tl.template_dir), str(tl.cutlass_include_dir)))


def find_toolchain(target: Target, root: Path, *, gfx942_env: Path | None = None) -> Toolchain:
    if target == Target.GFX942:
        return find_gfx942(root, env_json=gfx942_env)
    if target == Target.SM_90:
        return find_cuda()
    raise TilegenError(f"no device compiler is known for target {target}")
