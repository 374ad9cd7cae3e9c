#!/usr/bin/env bash
# The wheel, checked as a user gets it, in seconds: assembled from the already-built
# CMake tree in $1 (setup.py's STOKER_CMAKE_BUILD_DIR; no second build), installed
# into a fresh venv of Debian's python3 (torch and numpy from the system), then with
# the venv's python and the installed `stoker` command:
#   - one version: CMakeLists.txt's project(VERSION) = the wheel's = stoker.__version__
#     = `stoker --version`;
#   - `stoker sample` + `stoker pack` a small image dataset, and the README's install
#     example (its python block, run as written) loads it;
#   - ldd of the extension, libstoker and the CLI finds every library in the wheel's
#     stoker.libs/ or among the host's glibc and GCC runtime, and nothing links libtorch.
set -euo pipefail
build=$(cd "$1" && pwd)
cuda=OFF
readelf -d "$build/libstoker.so" 2>/dev/null | grep -q 'NEEDED.*\[libcudart' && cuda=ON
src=$(cd "$(dirname "$0")/.." && pwd)
python=${STOKER_WHEEL_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "wheel_test: $*" >&2; exit 1; }

version=$(sed -nE 's/^project\(stoker VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
[[ -n "$version" ]] || fail "no project(stoker VERSION ...) in CMakeLists.txt"

# setuptools' scratch space in $tmp, so the source tree only gains its egg-info.
(cd "$src" && STOKER_CMAKE_BUILD_DIR="$build" STOKER_SETUPTOOLS_BUILD_BASE="$tmp/setuptools" \
  "$python" -m pip wheel --no-build-isolation --no-deps --no-index -q -w "$tmp/dist" .) >"$tmp/wheel.log" 2>&1 \
  || { cat "$tmp/wheel.log"; fail "building the wheel failed"; }
wheel=$(ls "$tmp"/dist/stoker-*.whl)
[[ "$(basename "$wheel")" == stoker-"$version"-* ]] || fail "wheel $(basename "$wheel") is not version $version"

"$python" -m venv --system-site-packages --without-pip "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --no-index --no-deps -q "$wheel"
py="$tmp/venv/bin/python"
site=$(realpath "$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")")
[[ -d "$site/stoker.libs" ]] || fail "the wheel installed no stoker.libs/"
export PATH="$tmp/venv/bin:$PATH"
[[ "$(command -v stoker)" == "$tmp/venv/bin/stoker" ]] || fail "no stoker command in the venv"

[[ "$(stoker --version)" == *"$version"* ]] || fail "stoker --version: $(stoker --version), expected $version"
[[ "$("$py" -c 'import stoker; print(stoker.__version__)')" == "$version" ]] || fail "stoker.__version__ is not $version"
[[ "$("$py" -c 'import importlib.metadata as m; print(m.version("stoker"))')" == "$version" ]] \
  || fail "the installed distribution's version is not $version"

# Where the libraries come from: the wheel's copies, or the host's glibc / GCC runtime.
# LD_LIBRARY_PATH cleared: the RUNPATHs alone must be enough.
elves=("$site"/stoker/_stoker*.so "$site"/stoker/bin/stoker "$site"/stoker.libs/libstoker-*.so*)
[[ ${#elves[@]} -eq 3 && -e "${elves[2]}" ]] || fail "missing extension, CLI or libstoker: ${elves[*]}"
host='^(lib(c|m|dl|pthread|rt|resolv|stdc\+\+|gcc_s)\.so\.[0-9]+ => /|linux-vdso\.so|/.*ld-linux)'
for f in "${elves[@]}"; do
  env -u LD_LIBRARY_PATH ldd "$f" >"$tmp/ldd.txt" || fail "ldd $f failed"
  while read -r line; do
    [[ "$line" != *"not found"* ]] || fail "$f: $line"
    [[ "$line" =~ $host ]] && continue
    where=$(realpath -m "$(awk '{print $3}' <<<"$line")")
    [[ "$where" == "$site/stoker.libs/"* ]] || fail "$f loads a library from outside the wheel: $line"
  done <"$tmp/ldd.txt"
done
for f in "${elves[@]}" "$site"/stoker.libs/*; do
  if readelf -d "$f" | grep -E 'NEEDED.*\[lib(torch|c10)'; then fail "$f links torch"; fi
  # A wheel from a CUDA build carries its CUDA runtime like any other library (checked
  # above); one from a CPU-only build must not need it.
  if [[ $cuda != ON ]] && readelf -d "$f" | grep -E 'NEEDED.*\[libcudart'; then fail "$f of a CPU-only build links CUDA"; fi
done
# Each bundled copy's soname is hash-suffixed, so it cannot be taken for another copy
# of the same library already in the process.
for f in "$site"/stoker.libs/*; do
  [[ "$(basename "$f")" =~ ^lib.+-[0-9a-f]{8}\.so ]] || fail "$f: not a hash-suffixed name"
  [[ "$(patchelf --print-soname "$f")" == "$(basename "$f")" ]] || fail "$f: soname is not its file name"
done

# The README's install example, as written, on a dataset the installed command packs.
cd "$tmp"
stoker sample imagefolder out/images --images 48 --classes 3 --seed 1 >/dev/null
stoker pack imagefolder out/images out/ds >/dev/null
sed -n '/^## Install into your own environment/,/^## /p' "$src/README.md" \
  | sed -n '/^```python$/,/^```$/p' | sed '1d;$d' >example.py
[[ -s example.py ]] || fail "README: no python block under '## Install into your own environment'"
"$py" example.py
echo "wheel $(basename "$wheel"): $(ls "$site/stoker.libs" | wc -l) bundled libraries; version, ldd and example: OK"
