# Cross-compiles for Linux aarch64 (Grace-Hopper, Grace-Blackwell serving nodes) on an x86-64
# Debian/Ubuntu host, with Debian's cross toolchain and the arm64 multiarch packages:
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install g++-aarch64-linux-gnu qemu-user-static libarchive-dev:arm64 libssl-dev:arm64 \
#     libacl1-dev:arm64 libzstd-dev:arm64 liblz4-dev:arm64 nettle-dev:arm64 liblzma-dev:arm64 \
#     libbz2-dev:arm64 zlib1g-dev:arm64 libxml2-dev:arm64 libfmt-dev:arm64 libspdlog-dev:arm64
# (scripts/deps.sh --aarch64 does both). Used by `cmake --preset static-aarch64`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: the arm64 libraries and their CMake packages are under /usr/lib/aarch64-linux-gnu;
# the header-only ones (nlohmann/json, CLI11) are arch-independent under /usr/share/cmake.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# The aarch64 binary runs here only under user-mode emulation (help2man's man page, try_run).
find_program(OVERLAY_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(OVERLAY_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${OVERLAY_QEMU_AARCH64})
endif()
