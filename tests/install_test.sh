#!/usr/bin/env bash
# Installs the build in $1 to a scratch prefix and builds examples/ against it with
# find_package(stoker), as a user's project would; then runs the example on a dataset.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/build" --target cpp_trainer -j2 >/dev/null
"$tmp/prefix/bin/stoker" sample imagefolder "$tmp/images" --images 40 --classes 4 --seed 3 >/dev/null
"$tmp/prefix/bin/stoker" pack imagefolder "$tmp/images" "$tmp/ds" >/dev/null
LD_LIBRARY_PATH="$(dirname "$(find "$tmp/prefix" -name "libstoker.so*" | head -1)"):${LD_LIBRARY_PATH:-}" "$tmp/build/cpp_trainer" "$tmp/ds" --epochs 1 --threads 2
echo "install + find_package(stoker) + example: OK"
