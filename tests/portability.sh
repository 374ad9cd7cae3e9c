#!/usr/bin/env bash
# Portability checks that CI does not run: each a step, a shell function step_NAME.
#   bash tests/portability.sh STEP...   run the named steps (e.g. aarch64)
#   bash tests/portability.sh all       run every step
#   bash tests/portability.sh list      name the steps
# Each step installs what it needs (Debian packages, idempotently), prints its time and
# PASS or FAIL; the script exits non-zero when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
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
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64 && APT_UPDATED=0 || return 1
  fi
  install_packages cmake ninja-build ccache pkg-config g++-aarch64-linux-gnu qemu-user \
    nlohmann-json3-dev libcli11-dev \
    liburing-dev:arm64 libturbojpeg0-dev:arm64 libjpeg62-turbo-dev:arm64 libspng-dev:arm64 \
    libwebp-dev:arm64 libzstd-dev:arm64 libnuma-dev:arm64 libarchive-dev:arm64 \
    libcurl4-openssl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libbenchmark-dev:arm64 \
    libc6:arm64 ||
    return 1
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
    'CliCommands\.BenchCompare'  # bench compare's harness is the host's python3, which runs build/stoker itself: that needs binfmt_misc, not registered here
  )
  echo "left out under qemu-user: ${excluded[*]}"
  local pattern="^install_and_find_package\$"
  for e in "${excluded[@]}"; do pattern+="|$e"; done
  # The emulator is about 10-30x slower than the host: the per-test limit is widened.
  STOKER_TEST_TOOL="$AARCH64_EMULATOR $ROOT/$AARCH64_BUILD/stoker" \
    ctest --test-dir "$AARCH64_BUILD" -L cpu -E "$pattern" \
    --output-on-failure -j"$JOBS" --timeout 900 ${STOKER_CTEST_ARGS:-}
}

# ---- dispatcher ---------------------------------------------------------------------
steps() { declare -F | awk '{print $3}' | sed -n 's/^step_//p'; }
[ $# -eq 0 ] && { echo "usage: $0 STEP... | all | list (steps: $(steps | tr '\n' ' '))"; exit 2; }
[ "$1" = list ] && { steps; exit 0; }
[ "$1" = all ] && set -- $(steps)
failed=()
for s in "$@"; do
  if ! declare -F "step_$s" >/dev/null; then
    echo "no step '$s' (steps: $(steps | tr '\n' ' '))"
    exit 2
  fi
  echo "== $s"
  start=$SECONDS
  if ( "step_$s" ); then result=PASS; else result=FAIL; failed+=("$s"); fi
  echo "== $s: $result in $((SECONDS - start)) s"
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
