#!/usr/bin/env bash
# Fetch a project-local, offline AMD device-compile toolchain for TileLang's HIP output, one compiler
# per AMD target (the name is historical: gfx942 came first):
#   gfx942 (MI300X): system clang-19 + lld-19 (bookworm) with rocm-device-libs-17 bitcode;
#   gfx950 (MI355X): system clang-22 + lld-22 (bookworm-security; clang-19 rejects -mcpu=gfx950) with
#                    rocm-device-libs-21 bitcode (the first Debian device libs with oclc_isa_version_950).
# HIP headers (shared) and the device-library bitcode are unpacked (not installed) into DEST.
# Writes DEST/env.json for Python (codegen/targets/amdgcn.py). Idempotent; re-run is a quick no-op.
#   fetch-amd-toolchain.sh DEST     (PYTHON: the interpreter whose tilelang the toolchain serves)
# Shipped inside the tilegen package: `tilegen toolchain fetch` runs it (default DEST: the user cache);
# a checkout's `bash tools/fetch-gfx942-toolchain.sh` runs it for <repo>/.toolchain.
# apt-get waits for a package-manager lock another process holds, up to APT_LOCK_TIMEOUT_S (apt-wait.sh).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DEST" >&2; exit 2; }
# shellcheck source=apt-wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"

HIP_PKG=libamdhip64-dev         # headers; bookworm's 5.2 / trixie's 5.7 are too old
HIP_VER=6.4.3-5                 # from Debian testing
# per arch: clang package, lld package, device-libs package, its version, its LLVM bitcode dir, extra flags
GFX942_CLANG=19; GFX942_DEVLIBS=rocm-device-libs-17; GFX942_DEVLIBS_VER=6.0+git20231212.5a852ed-2  # trixie (LLVM-17 bitcode)
GFX950_CLANG=22; GFX950_DEVLIBS=rocm-device-libs-21; GFX950_DEVLIBS_VER=7.0.2+dfsg-3               # testing (LLVM-21 bitcode)
# HIP 6.4's headers read __AMDGCN_WAVEFRONT_SIZE, which clang 22 no longer defines (gfx9 is wave64 only)
GFX950_EXTRA='"-D__AMDGCN_WAVEFRONT_SIZE=64", '

mkdir -p "$1"
TC="$(cd "$1" && pwd)"
HIP_ROOT="$TC/hip/usr"
devlib_dir() { echo "$HIP_ROOT/lib/llvm-$1/lib/clang/$1/amdgcn/bitcode"; }
GFX942_DEVLIB_DIR="$(devlib_dir 17)"
GFX950_DEVLIB_DIR="$(devlib_dir 21)"
STUB="$TC/stub"
ENV_JSON="$TC/env.json"

PY="${PYTHON:-python3}"
TL_SRC="$("$PY" -c 'import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec("tilelang").origin), "src"))')"  # no import: fast
[ -f "$TL_SRC/tl_templates/hip/common.h" ] || { echo "tl_templates not found under $TL_SRC" >&2; exit 1; }

clang_of() { echo "/usr/bin/clang++-$1"; }
summary() {
  echo "AMD toolchain ready: gfx942 $("$(clang_of $GFX942_CLANG)" --version | head -1), device-libs $GFX942_DEVLIBS_VER;" \
       "gfx950 $("$(clang_of $GFX950_CLANG)" --version | head -1), device-libs $GFX950_DEVLIBS_VER; HIP $HIP_VER -> $ENV_JSON"
}

complete() {
  for v in $GFX942_CLANG $GFX950_CLANG; do [ -x "$(clang_of "$v")" ] && [ -x "/usr/bin/ld.lld-$v" ] || return 1; done
  [ -f "$HIP_ROOT/include/hip/hip_runtime.h" ] && [ -f "$GFX942_DEVLIB_DIR/oclc_isa_version_942.bc" ] \
    && [ -f "$GFX950_DEVLIB_DIR/oclc_isa_version_950.bc" ] \
    && [ -f "$STUB/rocwmma/rocwmma.hpp" ] && [ -f "$ENV_JSON" ] && grep -q '"archs"' "$ENV_JSON" \
    && grep -q "\"$HIP_VER\"" "$ENV_JSON" && grep -q "\"$GFX942_DEVLIBS_VER\"" "$ENV_JSON" \
    && grep -q "\"$GFX950_DEVLIBS_VER\"" "$ENV_JSON" && grep -qF "\"$TL_SRC\"" "$ENV_JSON"
}
if complete; then summary; exit 0; fi

# 1. clang + lld of each arch from the system's (bookworm) apt: clang-19 from bookworm, clang-22 from
#    bookworm-security (both in a stock bookworm sources list).
need=()
for v in $GFX942_CLANG $GFX950_CLANG; do
  [ -x "$(clang_of "$v")" ] && [ -x "/usr/bin/ld.lld-$v" ] || need+=("clang-$v" "lld-$v")
done
if [ ${#need[@]} -gt 0 ]; then
  apt_get update -qq
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 2. HIP headers + device libs: .debs fetched with a private apt state, unpacked locally.
if [ ! -f "$HIP_ROOT/include/hip/hip_runtime.h" ] || [ ! -f "$GFX942_DEVLIB_DIR/oclc_isa_version_942.bc" ] \
   || [ ! -f "$GFX950_DEVLIB_DIR/oclc_isa_version_950.bc" ]; then
  APT="$(mktemp -d)"; trap 'rm -rf "$APT"' EXIT
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/debs"
  KEY=/usr/share/keyrings/debian-archive-keyring.gpg
  printf 'deb [signed-by=%s] http://deb.debian.org/debian %s main\n' "$KEY" testing "$KEY" trixie > "$APT/sources.list"
  APTOPT=(-o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache"
          -o Dir::State::status=/dev/null -o APT::Sandbox::User=root -qq)
  apt_get "${APTOPT[@]}" update
  (cd "$APT/debs" && apt_get "${APTOPT[@]}" download "$HIP_PKG=$HIP_VER" "$GFX942_DEVLIBS=$GFX942_DEVLIBS_VER" \
                                                      "$GFX950_DEVLIBS=$GFX950_DEVLIBS_VER")
  rm -rf "$TC/hip"; mkdir -p "$TC/hip"
  for deb in "$APT"/debs/*.deb; do dpkg -x "$deb" "$TC/hip"; done
fi

# 3. Empty rocwmma stub (TileLang's hip/common.h includes it, uses nothing).
mkdir -p "$STUB/rocwmma"; : > "$STUB/rocwmma/rocwmma.hpp"

# 4. env.json. Command of an arch: [clang] + flags + ["-I"+d for d in include_dirs] + ["-S"|"-c", "-o", out, src]
arch_entry() {  # arch, clang version, device-libs package, its version, its bitcode dir, extra flags
  local clang; clang="$(clang_of "$2")"
  cat <<ENTRY
    "$1": {
      "clang": "$clang",
      "clang_version": "$("$clang" --version | head -1)",
      "device_libs_package": "$3",
      "device_libs_version": "$4",
      "device_lib_path": "$5",
      "flags": ["-x", "hip", "--offload-arch=$1", "--cuda-device-only", "-O3", "-std=c++17",
                "--rocm-path=$HIP_ROOT", "--rocm-device-lib-path=$5", $6
                "-include", "hip/hip_bfloat16.h"]
    }
ENTRY
}
cat > "$ENV_JSON" <<EOF
{
  "hip_package": "$HIP_PKG",
  "hip_version": "$HIP_VER",
  "rocm_path": "$HIP_ROOT",
  "hip_include_dir": "$HIP_ROOT/include",
  "include_dirs": ["$TL_SRC", "$STUB"],
  "code_object_flags": ["-c", "--no-gpu-bundle-output"],
  "archs": {
$(arch_entry gfx942 "$GFX942_CLANG" "$GFX942_DEVLIBS" "$GFX942_DEVLIBS_VER" "$GFX942_DEVLIB_DIR" ""),
$(arch_entry gfx950 "$GFX950_CLANG" "$GFX950_DEVLIBS" "$GFX950_DEVLIBS_VER" "$GFX950_DEVLIB_DIR" "$GFX950_EXTRA")
  }
}
EOF
"$PY" -c 'import json, sys; json.load(open(sys.argv[1]))' "$ENV_JSON" || { echo "$ENV_JSON is not valid JSON" >&2; exit 1; }
complete || { echo "toolchain incomplete after fetch" >&2; exit 1; }
summary
