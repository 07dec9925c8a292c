#!/usr/bin/env python3
"""Creates SPEC's performance workload: an install with one large artifact, a JIT cache dir of
many files and a source file; plus a tree with many files and a few overlays for gc-stale.
Sizes are flags; SPEC's workload is the default."""
import argparse
import os
import shutil


def write(path, size, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    block = bytes((i * 131 + seed) & 0xFF for i in range(1 << 16))
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


def rebuild_artifact(path):
    """Stands in for the caller's build (outside any timing): a new artifact, one byte different,
    written whole and renamed over the old one, as a linker writes its output. Synced, so its
    writeback does not land in the next measurement."""
    tmp = path + ".build-tmp"
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        first = src.read(1)
        dst.write(bytes([(first[0] + 1) & 0xFF]))
        shutil.copyfileobj(src, dst, 8 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    os.rename(tmp, path)


def make_install(root, artifact_mib, cache_files, cache_kib, source_kib):
    write(os.path.join(root, "src/kernel.cu"), source_kib << 10, 1)
    write(os.path.join(root, "lib/_C.so"), artifact_mib << 20, 2)
    for i in range(cache_files):
        write(os.path.join(root, "cache/d%03d/e%05d.bin" % (i % 200, i)), cache_kib << 10, i & 0xFF)


def make_tree(root, files):
    for i in range(files):
        d = os.path.join(root, "t%03d/u%03d" % (i % 300, (i // 300) % 100))
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "f%06d" % i), "wb").close()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--artifact-mib", type=int, default=512)
    p.add_argument("--cache-files", type=int, default=20000)
    p.add_argument("--cache-kib", type=int, default=16)
    p.add_argument("--source-kib", type=int, default=150)
    p.add_argument("--tree-files", type=int, default=300000)
    a = p.parse_args()
    stamp = os.path.join(a.out, "workload.done")
    want = repr(vars(a))
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    make_install(os.path.join(a.out, "install"), a.artifact_mib, a.cache_files, a.cache_kib, a.source_kib)
    make_tree(os.path.join(a.out, "tree"), a.tree_files)
    open(stamp, "w").write(want)


if __name__ == "__main__":
    main()
