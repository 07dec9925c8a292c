#!/usr/bin/env python3
"""How cost grows: times add-native, verify-native and revert of overlay — and of the tool it
replaces, overlay_setup.py — against the floors measured in the same run, over artifact sizes and
cache file counts (the cache moved into the overlay, renamed aside beside itself, and tarred);
records overlay's peak RSS at each point. Writes a CSV; bench/plot.py draws it.

  bench/sweep.py --overlay build/overlay [--reference ../shared/reference/overlay_setup.py]
                 [--sizes-mib 64,256,1024,4096] [--cache-files 1000,10000,50000,200000]
                 [--work DIR] [--csv bench-results/sweep.csv]

Sizes: the artifact is written with distinct 1 MiB blocks (no filesystem can dedupe or compress
it). Cache files are 1 KiB each, in directories of 500. Each point is measured once (a sweep shows
a shape; bench/run.py gives medians at SPEC's point). It reports; it does not assert.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import time

from workload import rebuild_artifact

GNU_TIME = "/usr/bin/time"


def run_timed(argv, env=None, cwd=None):
    """Wall seconds and peak RSS (KiB, from GNU time's own measure of exactly argv)."""
    cmd = [GNU_TIME, "-f", "%M"] + argv if os.path.exists(GNU_TIME) else argv
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode not in (0, 2):  # verify-native says FRESH_BUILD_FAIL with 2 when nothing was rebuilt
        sys.exit("sweep: %s exited %d: %s" % (" ".join(argv), r.returncode, r.stderr[-500:]))
    rss = 0
    if cmd[0] == GNU_TIME:
        try:
            rss = int(r.stderr.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    return dt, rss


def write_artifact(path, mib):
    block = bytearray(os.urandom(1 << 20))
    with open(path, "wb") as f:
        for i in range(mib):
            block[0:8] = i.to_bytes(8, "little")
            f.write(block)
    os.utime(path, (time.time() - 3600, time.time() - 3600))  # built an hour ago


def make_cache(d, n):
    payload = os.urandom(1024)
    for i in range(n):
        sub = os.path.join(d, "d%04d" % (i // 500))
        if i % 500 == 0:
            os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, "f%06d.o" % i), "wb") as f:
            f.write(payload)


def settle(ov, inst):
    """Waits (untimed) for the detached deletions a revert or add-native leaves: the replaced
    artifact in the overlay's _trash, the replaced cache trees beside the cache dir."""
    trash = os.path.join(ov, "_trash")
    for _ in range(6000):
        litter = [n for n in os.listdir(inst) if ".overlay-trash-" in n or ".overlay-restore-" in n]
        if not litter and (not os.path.isdir(trash) or not os.listdir(trash)):
            return
        time.sleep(0.01)


class Sweep:
    def __init__(self, a):
        self.a, self.rows = a, []
        self.env = dict(os.environ, OVERLAY_STATE_DIR=os.path.join(a.work, "state"))

    def record(self, axis, x, tool, step, seconds, rss=0):
        self.rows.append(
            {"axis": axis, "x": x, "tool": tool, "step": step, "seconds": "%.4f" % seconds, "peak_rss_kib": rss}
        )
        print(
            "%-6s %8s %-16s %-14s %9.3f s %s"
            % (axis, x, tool, step, seconds, ("%6.1f MiB" % (rss / 1024)) if rss else ""),
            flush=True,
        )

    def tools(self):
        yield "overlay", [self.a.overlay]
        if self.a.reference and os.path.exists(self.a.reference):
            yield "overlay_setup.py", [sys.executable, self.a.reference]

    def cycle(self, axis, x, inst, tool, argv, extra, snapshot):
        """add-native, (the build's change), verify-native, revert: one entry, timed step by step."""
        ov = os.path.join(self.a.work, "ov")
        shutil.rmtree(ov, ignore_errors=True)
        add = (
            argv
            + ["add-native", "--overlay", ov, "--target", inst + "/src/k.cu", "--patched-file", self.patched]
            + extra
        )
        if snapshot:
            add += ["--cache-snapshot", snapshot]
        # Built long ago, as an install's artifact is (the previous cycle's revert gave it a fresh
        # mtime, and add-native waits out the second a tracked artifact was written in).
        art = inst + "/lib/_C.so"
        os.utime(art, (time.time() - 3600, time.time() - 3600))
        subprocess.run(["sync"])
        name = tool
        t, rss = run_timed(add, self.env)
        self.record(axis, x, name, "add-native", t, rss if tool == "overlay" else 0)
        settle(ov, inst)  # a tarred cache's detached deletion, untimed
        rebuild_artifact(inst + "/lib/_C.so")
        t, rss = run_timed(argv + ["verify-native", "--overlay", ov], self.env)
        self.record(axis, x, name, "verify-native", t, rss if tool == "overlay" else 0)
        t, rss = run_timed(argv + ["revert", "--overlay", ov], self.env)
        self.record(axis, x, name, "revert", t, rss if tool == "overlay" else 0)
        settle(ov, inst)

    def new_install(self):
        inst = os.path.join(self.a.work, "install")
        shutil.rmtree(inst, ignore_errors=True)
        os.makedirs(inst + "/src")
        os.makedirs(inst + "/lib")
        with open(inst + "/src/k.cu", "w") as f:
            f.write("// kernel\n" * 15000)  # ≈ 150 KiB, SPEC's source
        self.patched = os.path.join(self.a.work, "patched.cu")
        shutil.copyfile(inst + "/src/k.cu", self.patched)
        with open(self.patched, "a") as f:
            f.write("// candidate\n")
        return inst

    def floor(self, axis, x, name, script, src):
        """A durable write of src to a scratch file by a standard tool (sh -c script src out)."""
        out = os.path.join(self.a.work, "floor.out")
        subprocess.run(["sync"])
        t, _ = run_timed(["sh", "-c", script, src, out])
        self.record(axis, x, "floor", name, t)
        os.remove(out)

    def artifact_sizes(self):
        for mib in self.a.sizes_mib:
            inst = self.new_install()
            art = inst + "/lib/_C.so"
            write_artifact(art, mib)
            self.floor("size", mib, "cp+sync", 'cp "$0" "$1" && sync "$1"', art)
            t, _ = run_timed(["openssl", "dgst", "-sha256", art])
            self.record("size", mib, "floor", "sha256", t)
            for tool, argv in self.tools():
                self.cycle("size", mib, inst, tool, argv, ["--artifact", art], None)
            shutil.rmtree(inst)

    def untar_floor(self, n, cache):
        """GNU tar extracting the cache beside itself (the directory a revert extracts into, so
        the same allocator state), then sync."""
        tar = os.path.join(self.a.work, "floor.tar")
        subprocess.check_call(["tar", "-cf", tar, "-C", cache, "."])
        dest = os.path.join(os.path.dirname(cache), ".floor-untar")
        subprocess.run(["sync"])
        t, _ = run_timed(["sh", "-c", 'mkdir "$1" && tar -xf "$0" -C "$1" && sync', tar, dest])
        self.record("cache", n, "floor", "untar+sync", t)
        shutil.rmtree(dest)
        os.remove(tar)

    def cache_counts(self):
        for n in self.a.cache_files:
            inst = self.new_install()
            write_artifact(inst + "/lib/_C.so", 1)
            cache = inst + "/cache"
            make_cache(cache, n)
            self.floor("cache", n, "tar+sync", 'tar -cf "$1" -C "$0" . && sync "$1"', cache)
            t, _ = run_timed(["find", cache, "-name", "nothing"])
            self.record("cache", n, "floor", "find", t)
            extra = ["--artifact", inst + "/lib/_C.so", "--invalidate-cache", cache]
            for snap in ("move", "aside", "tar"):
                self.cycle("cache", n, inst, "overlay (%s)" % snap, [self.a.overlay], extra, snap)
            if self.a.reference and os.path.exists(self.a.reference):
                self.cycle("cache", n, inst, "overlay_setup.py", [sys.executable, self.a.reference], extra, None)
            # Last: its deletion of n files would slow every file created near it for minutes
            # (ext4 scans recently deleted inodes when it allocates one), ours included.
            self.untar_floor(n, cache)
            shutil.rmtree(inst)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--overlay", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--reference", default=os.path.join(here, "..", "..", "shared", "reference", "overlay_setup.py"))
    p.add_argument("--sizes-mib", default="64,256,1024,4096")
    p.add_argument("--cache-files", default="1000,10000,50000,200000")
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "overlay-sweep"))
    p.add_argument("--csv", default=os.path.join("bench-results", "sweep.csv"))
    a = p.parse_args()
    a.overlay = os.path.abspath(a.overlay)
    a.reference = os.path.abspath(a.reference) if a.reference else ""
    a.sizes_mib = [int(x) for x in a.sizes_mib.split(",") if x]
    a.cache_files = [int(x) for x in a.cache_files.split(",") if x]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    if not os.path.exists(a.reference):
        print("sweep: %s not found: overlay_setup.py left out" % a.reference, file=sys.stderr)
    s = Sweep(a)
    s.artifact_sizes()
    s.cache_counts()
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["axis", "x", "tool", "step", "seconds", "peak_rss_kib"])
        w.writeheader()
        w.writerows(s.rows)
    shutil.rmtree(a.work, ignore_errors=True)
    print("sweep: %d rows -> %s" % (len(s.rows), a.csv))


if __name__ == "__main__":
    main()
