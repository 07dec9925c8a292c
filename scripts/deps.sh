#!/usr/bin/env bash
# Installs the Debian packages overlay needs to build and test, if any are missing.
# Runs apt-get as root, or through sudo.
# Usage: deps.sh [--demo|--aarch64] [EXTRA_PACKAGE...]
#   --demo: only what scripts/demo.sh builds and runs
#   --aarch64: Debian's aarch64 cross toolchain, the arm64 static archives the aarch64 binary links
#              (`cmake --preset static-aarch64`) and qemu-user-static, which runs it here; adds the
#              arm64 architecture to dpkg first (multiarch)
set -euo pipefail
SUDO=()
[[ $(id -u) -ne 0 ]] && SUDO=(sudo)
# What building the binary and running the demo (examples/cpu_smoke, a CMake + Ninja install) need.
DEMO=(g++ cmake ninja-build patch libcli11-dev nlohmann-json3-dev libarchive-dev libssl-dev libspdlog-dev)
# The static binary's libraries (CMakeLists.txt: libarchive's pkg-config Libs.private, OpenSSL's
# crypto, fmt and spdlog's CMake packages), for arm64.
AARCH64=(g++-aarch64-linux-gnu qemu-user-static)
for p in libarchive-dev libssl-dev libacl1-dev libzstd-dev liblz4-dev nettle-dev liblzma-dev libbz2-dev zlib1g-dev \
         libxml2-dev libfmt-dev libspdlog-dev; do
  AARCH64+=("$p:arm64")
done
if [[ ${1:-} == --demo ]]; then
  shift
  PKGS=("${DEMO[@]}" "$@")
elif [[ ${1:-} == --aarch64 ]]; then
  shift
  PKGS=("${AARCH64[@]}" "$@")
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "deps: adding the arm64 architecture (dpkg --add-architecture arm64)" >&2
    "${SUDO[@]}" dpkg --add-architecture arm64
  fi
else
PKGS=("${DEMO[@]}" pkg-config python3 openssl time
      help2man bash-completion dpkg-dev libgtest-dev libgmock-dev libbenchmark-dev
      # the static binary (tests/static): libarchive's static dependencies, its empty and Debian 11
      # roots (busybox-static, debootstrap), the wheel's venv
      libacl1-dev libzstd-dev liblz4-dev busybox-static debootstrap python3-venv
      # the realworld label's third-party builds: torch cpp_extension JIT, setuptools, Make, Meson
      strace make meson python3-dev python3-setuptools python3-torch libtorch-dev pybind11-dev
      # the field tests: extended attributes, ACLs and capabilities made with setfattr, setfacl, setcap
      attr acl libcap2-bin
      # the cow label: XFS (reflink) and btrfs images, loop-mounted
      xfsprogs btrfs-progs
      # the claims checker (tests/model): hypothesis stateful testing
      python3-hypothesis
      # the fleet tests (tests/fleet): a 3-node Slurm started on this host, its own munged
      slurm-wlm munge
      # upstream's own unit suites of overlay_setup.py, run against the shim (tests/upstream)
      python3-pytest
      # bench/plot.py draws bench/sweep.py's curves
      python3-matplotlib
      # the house formatters CI checks (scripts/check_format.sh): C++ and Python
      clang-format black
      "$@")
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "deps: installing ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
