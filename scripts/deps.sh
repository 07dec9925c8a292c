#!/usr/bin/env bash
# Installs the Debian packages overlay needs to build and test, if any are missing.
# Runs apt-get as root, or through sudo.
set -euo pipefail
PKGS=(g++ cmake ninja-build pkg-config patch python3 openssl time
      help2man bash-completion dpkg-dev libcli11-dev nlohmann-json3-dev libarchive-dev libssl-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev
      # the realworld label's third-party builds: torch cpp_extension JIT, setuptools, Make, Meson
      strace make meson python3-dev python3-setuptools python3-torch libtorch-dev pybind11-dev
      # the field tests: extended attributes, ACLs and capabilities made with setfattr, setfacl, setcap
      attr acl libcap2-bin
      # the cow label: XFS (reflink) and btrfs images, loop-mounted
      xfsprogs btrfs-progs
      # bench/plot.py draws bench/sweep.py's curves
      python3-matplotlib
      "$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
SUDO=()
[[ $(id -u) -ne 0 ]] && SUDO=(sudo)
echo "deps: installing ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
