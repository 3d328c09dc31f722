# Toolchain file for a cross build of courier-executor (and courier-worker) for 64-bit ARM
# Linux on an x86-64 Debian host: clang-22 --target=aarch64-linux-gnu with lld, against the
# Debian arm64 multiarch libraries that `scripts/install-deps.sh --aarch64` installs
# (libc6-dev:arm64, libstdc++-12-dev:arm64, libllvm22:arm64, ...). The LLVM headers are the
# host's (llvm-22-dev:arm64 cannot be installed beside llvm-22-dev); the top-level
# CMakeLists.txt links the arm64 libLLVM in their place. A cross build builds only the
# executor's programs and the test plugin (docs/deploy.md, "An executor on an ARM board").
# Used by scripts/build-aarch64-executor.sh and by the host build's aarch64 tests.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER clang-22)
set(CMAKE_CXX_COMPILER clang++-22)
set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
set(CMAKE_CXX_COMPILER_TARGET aarch64-linux-gnu)
set(CMAKE_EXE_LINKER_FLAGS_INIT -fuse-ld=lld)
set(CMAKE_SHARED_LINKER_FLAGS_INIT -fuse-ld=lld)
set(CMAKE_MODULE_LINKER_FLAGS_INIT -fuse-ld=lld)

# pkg-config reads the arm64 .pc files only (libcpp-httplib-dev:arm64, libseccomp-dev:arm64,
# libssl-dev:arm64); find_library already prefers /usr/lib/aarch64-linux-gnu through
# CMAKE_LIBRARY_ARCHITECTURE.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# How ctest (and CMake's own checks) run an aarch64 program here: qemu's user-mode emulator.
# With the binfmt_misc entry install-deps.sh --aarch64 enables, the kernel does this too.
find_program(COURIER_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(COURIER_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${COURIER_QEMU_AARCH64})
endif()
