#!/usr/bin/env bash
# Fetch a project-local, offline gfx942 (MI300X) device-compile toolchain for
# TileLang's HIP output: system clang-19 + lld-19, plus HIP headers and ROCm
# device-library bitcode unpacked (not installed) into <repo>/.toolchain/.
# Writes .toolchain/env.json for Python. Idempotent; re-run is a quick no-op.
set -euo pipefail

CLANG_PKG=clang-19              # bookworm
LLD_PKG=lld-19                  # bookworm; clang needs lld to link code objects (-c)
HIP_PKG=libamdhip64-dev         # headers; bookworm's 5.2 / trixie's 5.7 are too old
HIP_VER=6.4.3-5                 # from Debian testing
DEVLIBS_PKG=rocm-device-libs-17 # ockl/ocml bitcode with gfx942; LLVM-17 bitcode reads in clang-19
DEVLIBS_VER=6.0+git20231212.5a852ed-2   # from Debian trixie (testing's -21 is LLVM-21 bitcode: unreadable)
ARCH=gfx942

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC="$REPO/.toolchain"
HIP_ROOT="$TC/hip/usr"
DEVLIB_DIR="$HIP_ROOT/lib/llvm-17/lib/clang/17/amdgcn/bitcode"
STUB="$TC/stub"
ENV_JSON="$TC/env.json"
CLANG=/usr/bin/clang++-19

PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
TL_SRC="$("$PY" -c 'import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec("tilelang").origin), "src"))')"  # no import: fast
[ -f "$TL_SRC/tl_templates/hip/common.h" ] || { echo "tl_templates not found under $TL_SRC" >&2; exit 1; }

summary() { echo "gfx942 toolchain ready: $("$CLANG" --version | head -1), HIP $HIP_VER, device-libs $DEVLIBS_VER -> $ENV_JSON"; }

complete() {
  [ -x "$CLANG" ] && [ -x /usr/bin/ld.lld-19 ] \
    && [ -f "$HIP_ROOT/include/hip/hip_runtime.h" ] && [ -f "$DEVLIB_DIR/oclc_isa_version_942.bc" ] \
    && [ -f "$STUB/rocwmma/rocwmma.hpp" ] && [ -f "$ENV_JSON" ] \
    && grep -q "\"$HIP_VER\"" "$ENV_JSON" && grep -q "\"$DEVLIBS_VER\"" "$ENV_JSON" \
    && grep -qF "\"$TL_SRC\"" "$ENV_JSON"
}
if complete; then summary; exit 0; fi

# 1. clang-19 + lld-19 from the system's (bookworm) apt.
if [ ! -x "$CLANG" ] || [ ! -x /usr/bin/ld.lld-19 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$CLANG_PKG" "$LLD_PKG" >/dev/null
fi

# 2. HIP headers + device libs: .debs fetched with a private apt state, unpacked locally.
if [ ! -f "$HIP_ROOT/include/hip/hip_runtime.h" ] || [ ! -f "$DEVLIB_DIR/oclc_isa_version_942.bc" ]; then
  APT="$(mktemp -d)"; trap 'rm -rf "$APT"' EXIT
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/debs"
  KEY=/usr/share/keyrings/debian-archive-keyring.gpg
  printf 'deb [signed-by=%s] http://deb.debian.org/debian %s main\n' "$KEY" testing "$KEY" trixie > "$APT/sources.list"
  APTOPT=(-o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache"
          -o Dir::State::status=/dev/null -o APT::Sandbox::User=root -qq)
  apt-get "${APTOPT[@]}" update
  (cd "$APT/debs" && apt-get "${APTOPT[@]}" download "$HIP_PKG=$HIP_VER" "$DEVLIBS_PKG=$DEVLIBS_VER")
  rm -rf "$TC/hip"; mkdir -p "$TC/hip"
  for deb in "$APT"/debs/*.deb; do dpkg -x "$deb" "$TC/hip"; done
fi

# 3. Empty rocwmma stub (TileLang's hip/common.h includes it, uses nothing).
mkdir -p "$STUB/rocwmma"; : > "$STUB/rocwmma/rocwmma.hpp"

# 4. Keep .toolchain/ out of git.
touch "$REPO/.gitignore"
grep -qxF '/.toolchain/' "$REPO/.gitignore" || echo '/.toolchain/' >> "$REPO/.gitignore"

# 5. env.json. Command: [clang] + flags + ["-I"+d for d in include_dirs] + ["-S"|"-c", "-o", out, src]
cat > "$ENV_JSON" <<EOF
{
  "arch": "$ARCH",
  "clang": "$CLANG",
  "clang_version": "$("$CLANG" --version | head -1)",
  "hip_package": "$HIP_PKG",
  "hip_version": "$HIP_VER",
  "device_libs_package": "$DEVLIBS_PKG",
  "device_libs_version": "$DEVLIBS_VER",
  "rocm_path": "$HIP_ROOT",
  "hip_include_dir": "$HIP_ROOT/include",
  "device_lib_path": "$DEVLIB_DIR",
  "include_dirs": ["$TL_SRC", "$STUB"],
  "flags": ["-x", "hip", "--offload-arch=$ARCH", "--cuda-device-only", "-O3", "-std=c++17",
            "--rocm-path=$HIP_ROOT", "--rocm-device-lib-path=$DEVLIB_DIR",
            "-include", "hip/hip_bfloat16.h"],
  "code_object_flags": ["-c", "--no-gpu-bundle-output"]
}
EOF
complete || { echo "toolchain incomplete after fetch" >&2; exit 1; }
summary
