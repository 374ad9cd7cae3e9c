#!/usr/bin/env bash
# Packs what bench/gpu_check.sh runs from a finished CUDA build into one tarball, with every
# shared library those files load, for a GPU machine that has the NVIDIA driver but not this
# project's build dependencies (another distribution's image, a cluster's compute node).
# There, unpack it into a checkout and run
#   STOKER_BUILD=<the build folder> STOKER_GPU_PREBUILT=1 bash bench/gpu_check.sh
# gpu_check puts <build>/bundled-libs first on LD_LIBRARY_PATH. glibc, libstdc++ and
# libgcc_s stay the host's (a second C++ runtime in one process is not a fix), so the host's
# glibc must be at least the build machine's.
#   usage: bench/gpu_bundle.sh BUILD_DIR OUT.tar.xz   (from the checkout's root)
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.xz}
out=${2:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.xz}
build=$(realpath --relative-to=. "$build")  # the tarball holds it at this path: unpack it in the checkout
[[ -x $build/stoker ]] || { echo "gpu_bundle: $build/stoker is not built" >&2; exit 1; }
compgen -G "$build/*gpu_test" >/dev/null ||
  { echo "gpu_bundle: $build has no GPU tests (configured without CUDA?)" >&2; exit 1; }

files=("$build/stoker")
for f in "$build"/*gpu_test "$build"/examples/cuda_trainer "$build"/python/stoker/_stoker*.so; do
  [[ -e $f ]] && files+=("$f")
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
libs="$stage/$build/bundled-libs"
mkdir -p "$libs"
# What each file loads, as this machine's loader resolves it; a library it cannot find is
# an error here rather than on the GPU machine.
ldd "${files[@]}" | awk '
  /not found/ { print "gpu_bundle: " $1 " not found" > "/dev/stderr"; bad = 1 }
  $2 == "=>" && $3 ~ /^\// { print $3 }
  END { exit bad }' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|libutil.so.*) ;;
    libstdc++.so.*|libgcc_s.so.*|ld-linux*|libcuda.so.*) ;;
    *) cp -L "$lib" "$libs/" ;;
  esac
done
for f in "${files[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  cp -a "$f" "$stage/$f"
done
# The Python package's pure-Python modules beside the extension.
if [[ -d $build/python/stoker ]]; then
  (cd "$build/python" && find stoker -name '*.py' -o -name '*.pyi' -o -name 'py.typed') |
    while read -r p; do mkdir -p "$stage/$build/python/$(dirname "$p")"; cp "$build/python/$p" "$stage/$build/python/$p"; done
fi
tar -C "$stage" -cf - "$build" | xz -6 -T0 >"$out"
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)): ${#files[@]} files and $(ls "$libs" | wc -l) libraries"
