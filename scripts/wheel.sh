#!/usr/bin/env bash
# Builds dist/overlay-<version>-py3-none-manylinux_2_17_<arch>.whl offline, with Python's standard
# library only: the static binary as the wheel's script `overlay` (stripped) and the overlay_setup
# shim as a top-level module, so that
#     python3 -m venv v && v/bin/pip install --no-index dist/overlay-*.whl
# puts `overlay` on the venv's PATH and makes `python3 -m overlay_setup …` and `import overlay_setup`
# work. The tag is honest because nothing in the wheel is linked dynamically (checked here).
# Usage: scripts/wheel.sh [STATIC_BINARY [DIST_DIR]]
#   default binary: build-static/overlay, built with `cmake --preset static` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build-static/overlay}
DIST=${2:-dist}
if [[ $# -eq 0 && ! -x $BIN ]]; then
  cmake --preset static >/dev/null
  cmake --build --preset static
fi
[[ -x $BIN ]] || { echo "wheel: no binary at $BIN" >&2; exit 1; }
[[ $(file -L "$BIN") == *"statically linked"* ]] || { echo "wheel: $BIN is not statically linked (cmake --preset static)" >&2; exit 1; }
if [[ $(readelf -d "$BIN" 2>&1) == *NEEDED* ]]; then echo "wheel: $BIN has NEEDED entries" >&2; exit 1; fi
case $(file -L "$BIN") in
  *x86-64*) ARCH=x86_64 ;;
  *aarch64*) ARCH=aarch64 ;;
  *) echo "wheel: unknown architecture: $(file -L "$BIN")" >&2; exit 1 ;;
esac
STRIP=strip
[[ $ARCH == aarch64 && $(uname -m) != aarch64 ]] && STRIP=aarch64-linux-gnu-strip
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$STRIP" -o "$WORK/overlay" "$BIN"
VERSION=$(sed -n 's/^project(overlay VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
mkdir -p "$DIST"
python3 - "$WORK/overlay" share/overlay/overlay_setup.py LICENSE "$VERSION" "$ARCH" "$DIST" <<'PY'
import base64, hashlib, os, sys, zipfile

binary, shim, license_file, version, arch, dist = sys.argv[1:]
tag = "py3-none-manylinux_2_17_" + arch
name = "overlay-%s-%s.whl" % (version, tag)
info = "overlay-%s.dist-info" % version
data = "overlay-%s.data" % version
metadata = "\n".join([
    "Metadata-Version: 2.1",
    "Name: overlay",
    "Version: " + version,
    "Summary: deploy an optimised kernel into a live install in place and restore every byte",
    "License: see LICENSE",
    "Requires-Python: >=3.8",
    "", ""])
wheel = "\n".join(["Wheel-Version: 1.0", "Generator: overlay scripts/wheel.sh", "Root-Is-Purelib: false",
                   "Tag: " + tag, "", ""])
files = [  # (name in the wheel, bytes, mode)
    ("overlay_setup.py", open(shim, "rb").read(), 0o644),
    (data + "/scripts/overlay", open(binary, "rb").read(), 0o755),
    (info + "/METADATA", metadata.encode(), 0o644),
    (info + "/WHEEL", wheel.encode(), 0o644),
    (info + "/top_level.txt", b"overlay_setup\n", 0o644),
    (info + "/LICENSE", open(license_file, "rb").read(), 0o644),
]
record = []
for path, body, _ in files:
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    record.append("%s,sha256=%s,%d" % (path, digest, len(body)))
record.append(info + "/RECORD,,")
files.append((info + "/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
out = os.path.join(dist, name)
with zipfile.ZipFile(out + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for path, body, mode in files:
        zi = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible
        zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, body)
os.replace(out + ".tmp", out)
print(out)
PY
