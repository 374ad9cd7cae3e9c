#!/usr/bin/env bash
# Portability checks that CI need not run: each is a step, run as
#   bash tests/portability.sh STEP      (or `all`; `list` names them)
# Every step prints its time and PASS or FAIL. Steps needing a Debian root build it
# once with debootstrap and keep it under $STOKER_PORTABILITY_CACHE
# (default /var/cache/stoker-portability), so reruns start in seconds. Needs root.
set -euo pipefail
ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${STOKER_PORTABILITY_CACHE:-/var/cache/stoker-portability}"
MIRROR="${STOKER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# A minimal Debian 12 root with python3, numpy and torch, and none of stoker's
# libraries but those python3-torch depends on (step_wheel sets those aside): what a
# user who trains with Debian's torch has. Built once, reused: a step works in a venv
# under its /tmp and removes it.
wheel_root() {
  local root="$CACHE/bookworm-wheel"
  if [[ ! -f "$root/.stoker-ready" ]]; then
    command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; return 1; }
    rm -rf "$root"; mkdir -p "$CACHE"
    debootstrap --variant=minbase --include=python3,python3-numpy,python3-torch,python3-venv \
      bookworm "$root" "$MIRROR" >&2
    chroot "$root" apt-get clean
    touch "$root/.stoker-ready"
  fi
  echo "$root"
}

# Runs "$@" in chroot $1 with /proc, /sys and /dev mounted for the duration.
in_root() {
  local root=$1; shift
  mount -t proc proc "$root/proc"; mount --rbind /sys "$root/sys"; mount --rbind /dev "$root/dev"
  local rc=0
  chroot "$root" "$@" || rc=$?
  umount -R "$root/dev"; umount -R "$root/sys"; umount "$root/proc"
  return $rc
}

# The wheel in a bare Debian 12 root: installs into a venv there, imports, packs a
# sample dataset with the wheel's `stoker` command, loads it, and ldd on the extension
# must find every library in the wheel or among glibc and the GCC runtime.
# STOKER_WHEEL=path takes a built wheel; else one is assembled from the CMake build
# tree ${STOKER_BUILD_DIR:-build} (built with the stoker_cli and stoker_python targets).
step_wheel() {
  local root work wheel
  root=$(wheel_root)
  work=$(mktemp -d "$root/tmp/stoker-wheel.XXXXXX")
  trap "rm -rf '$work'" RETURN
  if [[ -n "${STOKER_WHEEL:-}" ]]; then
    cp "$STOKER_WHEEL" "$work/"
  else
    (cd "$ROOT_DIR" && STOKER_CMAKE_BUILD_DIR="$(realpath "${STOKER_BUILD_DIR:-build}")" \
      STOKER_SETUPTOOLS_BUILD_BASE="$work/setuptools" \
      /usr/bin/python3 -m pip wheel --no-build-isolation --no-deps --no-index -q -w "$work" .)
    rm -rf "$work/setuptools"
  fi
  wheel=$(basename "$(ls "$work"/stoker-*.whl)")
  cat >"$work/check.sh" <<'EOS'
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv --system-site-packages venv
venv/bin/python -m pip install --no-index --no-deps -q "$1"
export PATH=$PWD/venv/bin:$PATH
# Debian's python3-torch brings some of stoker's libraries along (curl, archive, jpeg,
# webp, numa, ...). Set them aside while stoker works alone (the CLI, and a numpy
# Loader), so the wheel is shown to need none of them; back before torch is imported.
libs=/usr/lib/$(uname -m)-linux-gnu
aside=/var/tmp/stoker-aside
restore() { if [[ -d $aside ]]; then mv $aside/* $libs/ 2>/dev/null || true; rmdir $aside; fi; }
restore; trap restore EXIT; mkdir $aside
for l in liburing libturbojpeg libjpeg libspng libwebp libsharpyuv libnuma libcurl libarchive \
         libnghttp2 libxml2 libicuuc libicudata libssh2 librtmp libpsl libldap liblber libbrotlidec; do
  mv $libs/$l[.-]*so* $aside/ 2>/dev/null || true
done
echo "set aside from the root:" $(cd $aside && ls | grep -vE '\.so\.[0-9]+\.')
stoker --version
stoker sample imagefolder images --images 48 --classes 3 --seed 2 >/dev/null
stoker pack imagefolder images ds >/dev/null
stoker verify ds >/dev/null
python -c '
import stoker
n = sum(len(b["label"]) for b in stoker.Loader("ds", batch_size=16, transform="eval", size=64, numpy=True))
assert n == 48, n
print(f"stoker {stoker.__version__}: packed, verified and loaded {n} samples without torch")'
ext=$(ls venv/lib/python3*/site-packages/stoker/_stoker*.so)
ldd $ext
if ldd $ext | grep -vE '=> /tmp/.*/stoker\.libs/|^\s*(lib(c|m|dl|pthread|rt|resolv|stdc\+\+|gcc_s)\.so\.[0-9]+ => /|linux-vdso|/.*ld-linux)'; then
  echo "the lines above are not the wheel's libraries, glibc or the GCC runtime" >&2; exit 1
fi
restore
python - <<'EOP'
import torch, stoker
n = 0
for b in stoker.Loader("ds", batch_size=16, transform="eval", size=64):
    assert b["image"].shape[1:] == (64, 64, 3) and b["image"].dtype == torch.uint8, b["image"].shape
    n += len(b["label"])
assert n == 48, n
print(f"stoker {stoker.__version__} loaded {n} samples as torch {torch.__version__} tensors")
EOP
EOS
  in_root "$root" /bin/bash "/tmp/$(basename "$work")/check.sh" "$wheel"
}

# --- Debian 13 (trixie: GCC 14, Python 3.13, newer liburing, curl, libarchive) --------
# A minimal trixie root (debootstrap, kept under $CACHE), the build dependencies
# installed inside it, then the Release build and its CPU tests there (C++ and Python).
TRIXIE_PKGS=(build-essential cmake ninja-build pkg-config liburing-dev libturbojpeg0-dev
  libjpeg62-turbo-dev libspng-dev libwebp-dev libzstd-dev libnuma-dev libarchive-dev
  libcurl4-openssl-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  nlohmann-json3-dev pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  python3-pil curl nginx-light patchelf python3-venv python3-pip python3-setuptools python3-wheel
  libpcre2-dev libsentencepiece-dev python3-sentencepiece libavformat-dev libavcodec-dev
  libswscale-dev libswresample-dev libavutil-dev ffmpeg python3-av python3-prometheus-client tmux)

trixie_root() {
  local root="$CACHE/trixie"
  if [[ ! -f "$root/.stoker-ready" ]]; then
    command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; return 1; }
    if [[ ! -x "$root/usr/bin/apt-get" ]]; then
      rm -rf "$root"; mkdir -p "$CACHE"
      debootstrap --variant=minbase trixie "$root" "$MIRROR" >&2
    fi
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends ${TRIXIE_PKGS[*]} >/dev/null && apt-get clean" >&2
    touch "$root/.stoker-ready"
  fi
  echo "$root"
}

step_debian13() {
  local root src
  root=$(trixie_root)
  src="$root/src/stoker"
  rm -rf "$src"; mkdir -p "$src"
  # The working tree as it is: tracked and untracked files that git does not ignore.
  (cd "$ROOT_DIR" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$src"
  cat >"$src/check.sh" <<EOS
set -euo pipefail
cd /src/stoker
g++ --version | head -1; python3 --version
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKER_ENABLE_CUDA=OFF >/dev/null
cmake --build build -j$(nproc) >/dev/null
ctest --test-dir build --output-on-failure -j$(nproc) --timeout 600 -L cpu | tail -25
EOS
  in_root "$root" /bin/bash /src/stoker/check.sh
}

# --- Clang on Debian 12: the Release build of everything and every CPU test ------------
# (CI's ASan+UBSan tree is clang too; this is the optimised build users would make.)
step_clang() {
  cd "$ROOT_DIR"
  CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSTOKER_ENABLE_CUDA=OFF >/dev/null
  cmake --build build-clang -j"$(nproc)" >/dev/null
  ctest --test-dir build-clang --output-on-failure -j"$(nproc)" --timeout 600 -L cpu | tail -25
}

ROOT=$ROOT_DIR
JOBS=${STOKER_JOBS:-$(nproc)}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}

# Installs the Debian packages named that are not installed yet (apt-get update first,
# once per run, only when something is missing).
APT_UPDATED=0
install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$APT_UPDATED" = 0 ]; then
    apt-get update -q >/dev/null || return 1
    APT_UPDATED=1
  fi
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
}

# ---- aarch64: cross build with Debian's g++-aarch64-linux-gnu, Release tests under qemu-user
# Covers the whole library, the CLI, every C++ test suite and the benchmarks, built for
# aarch64 (the NEON and ARMv8 CRC32C paths included) and run under qemu-aarch64 (which
# emulates a CPU with NEON and CRC32). Not covered: CUDA, the Python module, and the
# install_and_find_package test (it configures a host project against the install).
# Tests that run the CLI run it through the emulator (STOKER_TEST_TOOL); binfmt_misc is
# not needed.
AARCH64_BUILD=${STOKER_AARCH64_BUILD:-build-aarch64}
AARCH64_EMULATOR=qemu-aarch64  # no -L: see tests/toolchains/aarch64-linux-gnu.cmake
step_aarch64() {
  cd "$ROOT"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64 && APT_UPDATED=0 || return 1
  fi
  install_packages cmake ninja-build ccache pkg-config g++-aarch64-linux-gnu qemu-user \
    nlohmann-json3-dev libcli11-dev \
    liburing-dev:arm64 libturbojpeg0-dev:arm64 libjpeg62-turbo-dev:arm64 libspng-dev:arm64 \
    libwebp-dev:arm64 libzstd-dev:arm64 libnuma-dev:arm64 libarchive-dev:arm64 \
    libcurl4-openssl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libbenchmark-dev:arm64 \
    libpcre2-dev:arm64 libc6:arm64 ||
    return 1
  # Debian's SentencePiece packages are not multi-arch: installing the arm64 ones would
  # remove the build machine's. Their files are unpacked under the cache instead, where
  # the toolchain file looks (STOKER_AARCH64_EXTRA_ROOT) and the emulated tests load them.
  local extra="$CACHE/arm64-sentencepiece"
  if [[ ! -f "$extra/.stoker-ready" ]]; then
    local debs; debs=$(mktemp -d)
    (cd "$debs" && apt-get download -q libsentencepiece0:arm64 libsentencepiece-dev:arm64 >/dev/null) || return 1
    rm -rf "$extra"; mkdir -p "$extra"
    for d in "$debs"/*.deb; do dpkg -x "$d" "$extra"; done
    rm -rf "$debs"; touch "$extra/.stoker-ready"
  fi
  export STOKER_AARCH64_EXTRA_ROOT="$extra"
  # Every emulated run (test discovery in the build, then ctest) finds them.
  export QEMU_SET_ENV="LD_LIBRARY_PATH=$extra/usr/lib/aarch64-linux-gnu"
  cmake -S . -B "$AARCH64_BUILD" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/tests/toolchains/aarch64-linux-gnu.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DSTOKER_ENABLE_CUDA=OFF -DSTOKER_BUILD_PYTHON=OFF \
    -DSTOKER_BUILD_BENCH=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null || return 1
  echo "building $AARCH64_BUILD"
  cmake --build "$AARCH64_BUILD" -j"$JOBS" >"$AARCH64_BUILD/build.log" 2>&1 ||
    { tail -40 "$AARCH64_BUILD/build.log"; return 1; }
  file -b "$AARCH64_BUILD/stoker" | grep -q "ARM aarch64" || { echo "not an aarch64 binary"; return 1; }
  # Tests that check the host kernel through a door qemu-user does not emulate: left out,
  # and said so.
  local excluded=(
    'Refusals/RefusedUring\.'  # refuses io_uring with a seccomp filter: qemu-user refuses the filter (the pread fallback itself runs in every io test: qemu has no io_uring)
    'SlabStartsOnAHugePageBoundaryAndIsWhollyUsable'  # these two read THPeligible
    'LargeSlotsGoOnHugePagesSmallOnesArePageAligned'  # from /proc/self/smaps: qemu-user's smaps is not the guest's
    'RealPipeline\.ThrottledCopyStreamIsCopyBound'  # needs a loader faster than its 0.4 MB/s copy stream: emulated decode is slower, so the verdict is rightly decode
    'CliCommands\.BenchCompare'  # bench compare's harness is the host's python3, which runs build/stoker itself: that needs binfmt_misc, not registered here
    'Soak\.TwentyEpochsKeepRssFlat'  # the process's RSS under qemu-user includes the emulator's translation cache, which grows as code is first run (16 MiB over the epochs here)
  )
  echo "left out under qemu-user: ${excluded[*]}"
  local pattern="^install_and_find_package\$"
  for e in "${excluded[@]}"; do pattern+="|$e"; done
  # The emulator is about 10-30x slower than the host: the per-test limit is widened.
  STOKER_TEST_TOOL="$AARCH64_EMULATOR $ROOT/$AARCH64_BUILD/stoker" \
    ctest --test-dir "$AARCH64_BUILD" -L cpu -E "$pattern" \
    --output-on-failure -j"$JOBS" --timeout 900 ${STOKER_CTEST_ARGS:-}
}

STEPS=(wheel debian13 clang aarch64)
run_step() {
  local start rc
  start=$(date +%s)
  # In a subshell of its own, so that `set -e` still stops the step at its first failure
  # (bash ignores it inside a function called from `cmd || ...`).
  set +e; (set -e; "step_$1"); rc=$?; set -e
  printf '%-10s %4ss  %s\n' "$1" "$(($(date +%s) - start))" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)"
  return $rc
}

case "${1:-}" in
  --root-only) wheel_root ;;
  list) printf '%s\n' "${STEPS[@]}" ;;
  all) rc=0; for s in "${STEPS[@]}"; do run_step "$s" || rc=1; done; exit $rc ;;
  *) [[ " ${STEPS[*]} " == *" ${1:-} "* ]] || { echo "usage: $0 all|list|${STEPS[*]// /|}" >&2; exit 2; }
     run_step "$1" ;;
esac
