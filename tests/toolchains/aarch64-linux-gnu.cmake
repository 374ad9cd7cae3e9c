# Cross build for aarch64 with Debian's g++-aarch64-linux-gnu and arm64 multiarch
# libraries (dpkg --add-architecture arm64); tests run under qemu-user.
# Used by tests/portability.sh (step aarch64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Libraries and their CMake/pkg-config files live in the multiarch folders of /usr
# (lib/aarch64-linux-gnu); header-only packages (nlohmann-json, CLI11) in /usr/share.
# Programs (pkg-config, the emulator) come from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
# Libraries unpacked outside /usr (tests/portability.sh: SentencePiece, whose Debian
# packages cannot be installed for two architectures at once).
if(DEFINED ENV{STOKER_AARCH64_EXTRA_ROOT})
  list(APPEND CMAKE_FIND_ROOT_PATH $ENV{STOKER_AARCH64_EXTRA_ROOT})
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config must read the arm64 .pc files, not the build machine's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# gtest_discover_tests and ctest run every test binary through qemu-user. No -L: the
# binaries load the multiarch libc6:arm64 (/lib/ld-linux-aarch64.so.1), which the arm64 -dev
# packages pull in. The cross toolchain's own copy under /usr/aarch64-linux-gnu is another
# glibc build: its ld.so with the multiarch libc.so.6 corrupts glibc's private state and
# the first pthread_create spins forever.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
