#!/usr/bin/env bash
# debian11_root.sh CACHE: makes CACHE/debian11, a Debian 11 root (glibc 2.31) with python3 and its
# standard library, by debootstrap from Debian's archive, unless it is there already. Under a
# lock, so CI can start it in the background during the release build (scripts/test.sh) and the
# static test waits for that run rather than starting a second one.
set -euo pipefail
CACHE=$1
mkdir -p "$CACHE"
exec 9>"$CACHE/debian11.lock"
flock 9
BASE=$CACHE/debian11
[[ -f $BASE/usr/lib/python3.9/json/__init__.py ]] && exit 0
command -v debootstrap >/dev/null || { echo "no debootstrap (apt-get install debootstrap)" >&2; exit 3; }
rm -rf "$BASE.new"
debootstrap --variant=minbase --include=python3 bullseye "$BASE.new" http://deb.debian.org/debian \
  >"$CACHE/debootstrap.log" 2>&1 || { tail -5 "$CACHE/debootstrap.log" >&2; echo "debootstrap bullseye failed" >&2; exit 1; }
rm -rf "$BASE" && mv "$BASE.new" "$BASE"
