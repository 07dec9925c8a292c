#!/usr/bin/env python3
"""Times overlay on SPEC's workload against the physical floors measured in the same run,
interleaved round by round, and prints medians, spread, ratios next to SPEC's targets, and the
peak RSS of each step. It reports; it does not assert.

  bench/run.py --overlay build/overlay [--rounds 5] [--work DIR] [--fs here|xfs|btrfs]
               [--cache-sizes 20000,200000] [--cache-rounds 3] [workload flags, see workload.py]

The cache targets are measured on caches of 1 KiB files beside the install: moved into an overlay
on the same filesystem (the floor), renamed aside with the overlay on a tmpfs (auto's choice
across filesystems), and tarred against GNU tar in the same allocator state.

--fs xfs|btrfs makes a sparse image of that filesystem (XFS with reflink), loop-mounts it (root) and
runs there. Where the work dir's filesystem clones (cp --reflink=always works), SPEC's add-native
floor is one SHA-256 read and its target 1.2; elsewhere a durable copy and 1.3.
"""
import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import time

import trace_cost  # noqa: E402  (beside this script)
from workload import rebuild_artifact

HERE = os.path.dirname(os.path.abspath(__file__))


GNU_TIME = "/usr/bin/time"  # Debian package `time`: peak RSS of exactly the command it runs


def timed(argv, env=None, ok=(0,)):
    """Runs argv; returns (seconds, peak RSS in KiB). Fails loudly on an unexpected status.
    The time is measured here (GNU time's fork costs about as much as the floor's); the peak RSS
    comes from a second, untimed run under GNU time (a process spawned from Python would report
    Python's own RSS, inherited through vfork)."""
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if r.returncode not in ok:
        sys.exit("bench: %s exited %d" % (" ".join(argv), r.returncode))
    return dt, argv, env


def peak_rss_kib(argv, env):
    if not os.path.exists(GNU_TIME):
        return 0
    r = subprocess.run(
        [GNU_TIME, "-f", "%M"] + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        return int(r.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


class Steps:
    def __init__(self):
        self.t, self.rss = {}, {}

    def add(self, name, sample):
        self.t.setdefault(name, []).append(sample[0])
        self.last[name] = (sample[1], sample[2])

    last = {}


def wait_for_trash(trash):
    """revert frees the replaced artifact's blocks in a detached process after it returns; let
    that finish (untimed) so it does not slow the next step's measurement."""
    for _ in range(1000):
        if not os.path.isdir(trash) or not os.listdir(trash):
            return
        time.sleep(0.01)


def mount_image(fstype, work_parent, gib):
    """A fresh sparse image of `fstype`, loop-mounted; unmounted and deleted at exit."""
    import tempfile

    os.makedirs(work_parent, exist_ok=True)
    base = tempfile.mkdtemp(prefix="overlay-bench-%s-" % fstype, dir=work_parent)
    img, mnt = os.path.join(base, "fs.img"), os.path.join(base, "mnt")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(gib << 30)
    mkfs = ["mkfs.xfs", "-q", "-m", "reflink=1", img] if fstype == "xfs" else ["mkfs.btrfs", "-q", img]
    subprocess.check_call(mkfs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.check_call(["mount", "-o", "loop", img, mnt])

    def cleanup():
        subprocess.run(["umount", mnt])
        shutil.rmtree(base, ignore_errors=True)

    atexit.register(cleanup)
    return mnt


def filesystem_clones(d):
    """Whether files in d can share blocks (cp --reflink=always succeeds there)."""
    a, b = os.path.join(d, ".reflink-probe-a"), os.path.join(d, ".reflink-probe-b")
    with open(a, "wb") as f:
        f.write(b"x" * 8192)
    ok = subprocess.run(["cp", "--reflink=always", a, b], stderr=subprocess.DEVNULL).returncode == 0
    for p in (a, b):
        if os.path.exists(p):
            os.remove(p)
    return ok


def durable_ops_of(ov_bin, cycle, env, work):
    """(file fsyncs, directory fsyncs, renames) one run of the cycle makes, read from its disk trace;
    after one untraced run, so the overlay's directories exist as in every timed cycle."""
    for cmd in cycle:
        timed([ov_bin] + cmd, env, ok=(0, 2))
    trace = os.path.join(work, "cycle.trace")
    counts = [0, 0, 0]
    for cmd in cycle:
        if os.path.exists(trace):
            os.remove(trace)
        timed([ov_bin] + cmd, dict(env, OVERLAY_DISK_TRACE=trace), ok=(0, 2))
        for line in open(trace):
            f = line.rstrip("\n").split("\t")
            if f[0] == "fsync":
                counts[1 if f[2] == "dir" else 0] += 1
            elif f[0] in ("rename", "exchange"):
                counts[2] += 1
    os.remove(trace)
    return counts


def durable_ops_floor(d, counts):
    """Seconds that the same number of durable operations take by themselves, each as the protocol
    does it: a small file written and fsynced; a name changed (renamed, or created) and its
    directory fsynced."""
    files, dirs, renames = counts
    scratch = os.path.join(d, "durable-floor")
    os.makedirs(scratch, exist_ok=True)
    t0 = time.perf_counter()
    for i in range(max(files, renames)):
        fd = os.open(os.path.join(scratch, "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"x\n")
        if i < files:
            os.fsync(fd)
        os.close(fd)
    dfd = os.open(scratch, os.O_RDONLY)
    for i in range(dirs):
        if i < renames:
            os.rename(os.path.join(scratch, "f%d" % i), os.path.join(scratch, "g%d" % i))
        else:
            os.close(os.open(os.path.join(scratch, "n%d" % i), os.O_WRONLY | os.O_CREAT, 0o644))
        os.fsync(dfd)
    os.close(dfd)
    dt = time.perf_counter() - t0
    shutil.rmtree(scratch)
    return dt


def make_small_cache(d, n):
    """n files of 1 KiB in directories of 500 (the sweep's cache shape), once per size."""
    stamp = d + ".done"
    if os.path.exists(stamp):
        return
    shutil.rmtree(d, ignore_errors=True)
    payload = os.urandom(1024)
    for i in range(n):
        sub = os.path.join(d, "d%04d" % (i // 500))
        if i % 500 == 0:
            os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, "f%06d.o" % i), "wb") as f:
            f.write(payload)
    open(stamp, "w").close()


def settle_litter(parent, ov=None):
    """Waits (untimed) until the trees revert and add-native leave to their detached deleter are
    gone: the next step's measurement must not share the disk with it."""
    for _ in range(30000):
        busy = [x for x in os.listdir(parent) if ".overlay-trash-" in x or ".overlay-restore-" in x]
        trash = os.path.join(ov, "_trash") if ov else ""
        if not busy and not (trash and os.path.isdir(trash) and os.listdir(trash)):
            return
        time.sleep(0.01)


def other_filesystem_dir(work):
    """A directory on another filesystem than `work` for the cross-filesystem overlay: a fresh
    tmpfs (root), else /dev/shm when it is another filesystem; None, with the reason printed."""
    d = os.path.join(os.path.dirname(os.path.abspath(work)), "overlay-bench-tmpfs")
    os.makedirs(d, exist_ok=True)
    if os.stat(d).st_dev != os.stat(work).st_dev:
        return d  # mounted already
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", d], stderr=subprocess.DEVNULL).returncode
        == 0
    ):
        atexit.register(lambda: subprocess.run(["umount", "-l", d]))
        return d
    if os.path.isdir("/dev/shm") and os.stat("/dev/shm").st_dev != os.stat(work).st_dev:
        d = tempfile_dir("/dev/shm")
        atexit.register(lambda: shutil.rmtree(d, ignore_errors=True))
        return d
    print(
        "bench: cross-filesystem caches not measured: cannot mount a tmpfs (needs root) and /dev/shm is "
        "not another filesystem",
        file=sys.stderr,
    )
    return None


def tempfile_dir(parent):
    import tempfile

    return tempfile.mkdtemp(prefix="overlay-bench-", dir=parent)


def cache_rounds(ov_bin, env, work, sizes, rounds):
    """SPEC's cache targets: for each cache size, add-native and revert of that cache alone (a
    one-line source beside it) kept three ways, interleaved round by round: moved into an overlay
    on its filesystem (the floor of the next), renamed aside with the overlay on another
    filesystem (auto's choice there), and tarred against GNU tar (-cf + sync; -xf into a fresh
    sibling of the cache + sync, so the same allocator state as revert's)."""
    other = other_filesystem_dir(work)
    root = os.path.join(work, "caches")
    os.makedirs(root, exist_ok=True)
    patched = os.path.join(root, "k2.cu")
    with open(patched, "wb") as f:
        f.write(b"cand\n")
    t = {}

    def add(key, sample):
        t.setdefault(key, []).append(sample[0])

    for n in sizes:
        # The cache inside the source's own directory, and a build (`true`): the build watch walks
        # that directory before and after it, so whatever add-native leaves there (the cache
        # renamed aside) is in the measurement (issue 32: that walk once made aside 11.85x moved).
        cache = os.path.join(root, "n%d" % n, "cache")
        src = os.path.join(root, "n%d" % n, "k.cu")
        make_small_cache(cache, n)
        with open(src, "wb") as f:
            f.write(b"orig\n")
        build = ["--build-cmd", "true"]
        tar, floor_dir = os.path.join(work, "cache-floor.tar"), os.path.join(os.path.dirname(cache), ".floor-untar")
        ways = [("move", os.path.join(work, "ov-cache-move"), "move")]
        if other:
            ways.append(("aside", os.path.join(other, "ov-aside"), "auto"))
        for _ in range(rounds):
            for way, ov, snap in ways:
                shutil.rmtree(ov, ignore_errors=True)
                argv = [
                    "add-native",
                    "--overlay",
                    ov,
                    "--target",
                    src,
                    "--patched-file",
                    patched,
                    "--invalidate-cache",
                    cache,
                    "--cache-snapshot",
                    snap,
                ] + build
                subprocess.run(["sync"])
                add((n, way, "add-native"), timed([ov_bin] + argv, env))
                if way == "aside" and '"aside"' not in open(os.path.join(ov, "_overlay_manifest.json")).read():
                    print("bench: auto did not put the cache aside across filesystems", file=sys.stderr)
                subprocess.run(["sync"])
                add((n, way, "revert"), timed([ov_bin, "revert", "--overlay", ov], env))
                settle_litter(os.path.dirname(cache), ov)
            ov = os.path.join(work, "ov-cache-tar")
            shutil.rmtree(ov, ignore_errors=True)
            subprocess.run(["sync"])
            add((n, "floor", "tar -cf + sync"), timed(["sh", "-c", 'tar -cf "$1" -C "$0" . && sync "$1"', cache, tar]))
            subprocess.run(["sync"])
            add(
                (n, "tar", "add-native"),
                timed(
                    [
                        ov_bin,
                        "add-native",
                        "--overlay",
                        ov,
                        "--target",
                        src,
                        "--patched-file",
                        patched,
                        "--invalidate-cache",
                        cache,
                        "--cache-snapshot",
                        "tar",
                    ]
                    + build,
                    env,
                ),
            )
            settle_litter(os.path.dirname(cache), ov)
            subprocess.run(["sync"])
            add(
                (n, "floor", "tar -xf + sync"),
                timed(["sh", "-c", 'mkdir "$1" && tar -xf "$0" -C "$1" && sync', tar, floor_dir]),
            )
            shutil.rmtree(floor_dir)
            os.remove(tar)
            subprocess.run(["sync"])
            add((n, "tar", "revert"), timed([ov_bin, "revert", "--overlay", ov], env))
            settle_litter(os.path.dirname(cache), ov)
    return {k: statistics.median(v) for k, v in t.items()}, bool(other)


def print_cache_table(med, sizes, cross):
    print("\ncaches (1 KiB files), medians; targets: aside <= 1.3 x moved, tar <= 2 x GNU tar")
    print(
        "%9s | %-34s | %-34s | %-34s | %-34s"
        % (
            "files",
            "add-native aside / moved",
            "revert aside / moved",
            "add-native tar / tar -cf+sync",
            "revert tar / tar -xf+sync",
        )
    )
    for n in sizes:
        cells = []
        for way, step, floor_key in (
            ("aside", "add-native", (n, "move", "add-native")),
            ("aside", "revert", (n, "move", "revert")),
            ("tar", "add-native", (n, "floor", "tar -cf + sync")),
            ("tar", "revert", (n, "floor", "tar -xf + sync")),
        ):
            got = med.get((n, way, step))
            if got is None:
                cells.append("not measured (no other filesystem)" if way == "aside" and not cross else "-")
                continue
            cells.append("%.3f s / %.3f s = %.2f" % (got, med[floor_key], got / med[floor_key]))
        print("%9d | %-34s | %-34s | %-34s | %-34s" % tuple([n] + cells))


HELLO_SOURCE = b'#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'


def build_static_hello(work):
    """A static "hello" built in this run: the floor of a process start (SPEC: start-up). None,
    with the reason printed, where no compiler or static libc is there."""
    src, exe = os.path.join(work, "hello.c"), os.path.join(work, "hello-static")
    with open(src, "wb") as f:
        f.write(HELLO_SOURCE)
    for cc in ("cc", "gcc", "clang"):
        if (
            shutil.which(cc)
            and subprocess.run(
                [cc, "-O2", "-static", src, "-o", exe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ).returncode
            == 0
        ):
            return exe
    print("bench: start-up not measured: no C compiler with a static libc (libc6-dev)", file=sys.stderr)
    return None


def startups(ov_bin, hello, n, static_bin=None):
    """Median wall time of `overlay --version` (and of the static build's, when given) and of the
    static hello, started alternately n times each."""
    bins = {"overlay --version": ov_bin}
    if static_bin:
        bins["static overlay --version"] = static_bin
    t = {k: [] for k in ["hello"] + list(bins)}
    for _ in range(n):
        t["hello"].append(timed([hello])[0])
        for k, b in bins.items():
            t[k].append(timed([b, "--version"])[0])
    return {k: statistics.median(v) for k, v in t.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--overlay", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--static-overlay", help="the static build (cmake --preset static): its start-up is measured too")
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "overlay-bench"))
    p.add_argument("--cache-snapshot", default="auto")
    p.add_argument("--fs", choices=["here", "xfs", "btrfs"], default="here")
    p.add_argument("--image-gib", type=int, default=12)
    p.add_argument(
        "--cache-sizes",
        default="20000,200000",
        help="cache file counts (1 KiB files) for the cache targets; empty to skip",
    )
    p.add_argument("--cache-rounds", type=int, default=3)
    a, workload_flags = p.parse_known_args()
    ov_bin = os.path.abspath(a.overlay)
    if a.fs != "here":
        a.work = os.path.join(mount_image(a.fs, os.path.dirname(os.path.abspath(a.work)), a.image_gib), "work")
    subprocess.check_call([sys.executable, os.path.join(HERE, "workload.py"), "--out", a.work] + workload_flags)
    inst = os.path.join(a.work, "install")
    art, src, cache = inst + "/lib/_C.so", inst + "/src/kernel.cu", inst + "/cache"
    ov = os.path.join(a.work, "ov")
    env = dict(os.environ, OVERLAY_STATE_DIR=os.path.join(a.work, "state"))
    patched = os.path.join(a.work, "patched.cu")
    shutil.copyfile(src, patched)
    with open(patched, "ab") as f:
        f.write(b"// candidate\n")
    tiny = os.path.join(a.work, "tiny")
    os.makedirs(tiny + "/lib", exist_ok=True)
    for name, data in (("k.cu", b"orig\n"), ("k2.cu", b"cand\n"), ("lib/k.so", b"lib\n")):
        with open(os.path.join(tiny, name), "wb") as f:
            f.write(data)
    tree = os.path.join(a.work, "tree")
    for i in range(3):  # stale overlays for gc-stale to find (reverted each round, re-added below)
        os.makedirs(os.path.join(tree, "t%03d/ov%d" % (i, i)), exist_ok=True)

    s = Steps()
    copy = os.path.join(a.work, "copy.bin")
    for r in range(a.rounds):
        # Untimed syncs: each durable step starts with no other step's dirty pages to write back.
        subprocess.run(["sync"])
        s.add("floor: cp+sync", timed(["sh", "-c", 'cp "$0" "$1" && sync "$1"', art, copy]))
        os.remove(copy)
        subprocess.run(["sync"])
        s.add(
            "add-native",
            timed(
                [
                    ov_bin,
                    "add-native",
                    "--overlay",
                    ov,
                    "--target",
                    src,
                    "--patched-file",
                    patched,
                    "--artifact",
                    art,
                    "--invalidate-cache",
                    cache,
                    "--cache-snapshot",
                    a.cache_snapshot,
                ],
                env,
            ),
        )
        rebuild_artifact(art)
        s.add("floor: sha256", timed(["openssl", "dgst", "-sha256", art]))
        s.add("verify-native", timed([ov_bin, "verify-native", "--overlay", ov], env))
        s.add("revert", timed([ov_bin, "revert", "--overlay", ov], env))
        wait_for_trash(os.path.join(ov, "_trash"))
        for i in range(3):
            tgt = os.path.join(tree, "t%03d/target%d" % (i, i))
            with open(tgt, "w") as f:
                f.write("x")
            timed(
                [
                    ov_bin,
                    "add-native",
                    "--overlay",
                    os.path.join(tree, "t%03d/ov%d" % (i, i)),
                    "--target",
                    tgt,
                    "--patched-file",
                    patched,
                ],
                env,
            )
        s.add("floor: find", timed(["find", tree, "-name", "_overlay_manifest.json"]))
        s.add("gc-stale", timed([ov_bin, "gc-stale", "--root", tree], env))
        print("round %d/%d done" % (r + 1, a.rounds), file=sys.stderr)

    # The small A/B cycle on its own, after the big steps: their writeback would otherwise land in it.
    subprocess.run(["sync"])
    # Back to back, as an agent trying candidates runs them: the build rewrites the artifact (no
    # backdated artifact), so each revert restores it and the next add-native follows at once.
    build = "cp %s/k2.cu %s/lib/k.so" % (tiny, tiny)
    cycle = (
        [
            "add-native",
            "--overlay",
            tiny + "/ov",
            "--target",
            tiny + "/k.cu",
            "--patched-file",
            tiny + "/k2.cu",
            "--artifact",
            tiny + "/lib/k.so",
            "--build-cmd",
            build,
        ],
        ["verify-native", "--overlay", tiny + "/ov"],
        ["revert", "--overlay", tiny + "/ov"],
    )
    durable = durable_ops_of(ov_bin, cycle, env, a.work)
    for r in range(max(5, a.rounds)):
        t0 = time.perf_counter()
        for cmd in cycle:
            timed([ov_bin] + cmd, env)
        s.t.setdefault("A/B cycle (3 calls)", []).append(time.perf_counter() - t0)
        s.add("floor: build (cp)", timed(build.replace("/lib/k.so", "/scratch.so").split()))
        s.t.setdefault("floor: durable ops", []).append(durable_ops_floor(tiny, durable))

    cache_sizes = [int(x) for x in a.cache_sizes.split(",") if x]
    cache_med, cross = cache_rounds(ov_bin, env, a.work, cache_sizes, a.cache_rounds) if cache_sizes else ({}, False)

    # The tracer's cost on a real build (issue 61): the same build plainly and traced, in turn.
    tc = trace_cost.cmake_example(a.work, dict(os.environ))
    traced_build = (
        trace_cost.measure(ov_bin, tc[0], tc[1], dict(os.environ), tc[2], max(3, a.rounds), a.work) if tc else None
    )

    hello = build_static_hello(a.work)
    static_bin = os.path.abspath(a.static_overlay) if a.static_overlay else None
    start = startups(ov_bin, hello, max(200, 40 * a.rounds), static_bin) if hello else None

    # Peak RSS: one more untimed pass of the big steps under GNU time.
    add = [
        ov_bin,
        "add-native",
        "--overlay",
        ov,
        "--target",
        src,
        "--patched-file",
        patched,
        "--artifact",
        art,
        "--invalidate-cache",
        cache,
        "--cache-snapshot",
        a.cache_snapshot,
    ]
    s.rss["add-native"] = peak_rss_kib(add, env)
    rebuild_artifact(art)
    s.rss["verify-native"] = peak_rss_kib([ov_bin, "verify-native", "--overlay", ov], env)
    s.rss["revert"] = peak_rss_kib([ov_bin, "revert", "--overlay", ov], env)
    wait_for_trash(os.path.join(ov, "_trash"))
    s.rss["gc-stale"] = peak_rss_kib([ov_bin, "gc-stale", "--root", tree], env)
    s.rss["floor: cp+sync"] = peak_rss_kib(["cp", art, copy], None)
    os.remove(copy)
    s.rss["floor: sha256"] = peak_rss_kib(["openssl", "dgst", "-sha256", art], None)

    med = {k: statistics.median(v) for k, v in s.t.items()}
    cow = filesystem_clones(a.work)
    fstype = subprocess.run(["stat", "-f", "-c", "%T", a.work], capture_output=True, text=True).stdout.strip()
    print("\nfilesystem: %s (%s)" % (fstype, "copy-on-write: backups are clones" if cow else "no copy-on-write"))
    add_row = ("add-native", "floor: sha256", 1.2) if cow else ("add-native", "floor: cp+sync", 1.3)
    rows = [
        add_row,
        ("revert", "floor: sha256", 1.3),
        ("verify-native", "floor: sha256", 1.2),
        ("gc-stale", "floor: find", 1.2),
    ]
    print("\n%-22s %10s %18s %8s %8s %9s" % ("step", "median s", "spread (min-max)", "ratio", "target", "peak RSS"))
    for k, v in s.t.items():
        ratio = target = ""
        for step, floor, tgt in rows:
            if k == step:
                ratio, target = "%.2f" % (med[k] / med[floor]), "<= %.1f" % tgt
        rss = "%6.1f MiB" % (s.rss[k] / 1024) if s.rss.get(k) else ""
        print("%-22s %10.4f %8.4f-%-9.4f %8s %8s %9s" % (k, med[k], min(v), max(v), ratio, target, rss))
    beyond = (med["A/B cycle (3 calls)"] - med["floor: build (cp)"]) * 1000
    print(
        "%-22s %10.1f ms beyond the build, back to back (target <= 25 ms; slowest cycle %.1f ms)"
        % ("A/B cycle", beyond, max(s.t["A/B cycle (3 calls)"]) * 1000)
    )
    if start:
        h, v = start["hello"] * 1000, start["overlay --version"] * 1000
        floor = med["floor: durable ops"] * 1000
        print("%-22s %10.2f ms vs a static hello %.2f ms: %.2f x (target <= 1.5)" % ("start-up", v, h, v / h))
        if "static overlay --version" in start:
            sv = start["static overlay --version"] * 1000
            print(
                "%-22s %10.2f ms vs a static hello %.2f ms: %.2f x (the static build)"
                % ("start-up, static", sv, h, sv / h)
            )
        print(
            "%-22s %10.1f ms beyond the build vs its floor %.1f ms (its %d file fsyncs, %d directory fsyncs and %d renames"
            " timed alone %.1f ms + three `overlay --version` %.1f ms): %.2f x (target <= 1.25)"
            % (
                "A/B cycle vs floor",
                beyond,
                floor + 3 * v,
                durable[0],
                durable[1],
                durable[2],
                floor,
                3 * v,
                beyond / (floor + 3 * v),
            )
        )
    if traced_build:
        print(trace_cost.line("traced build (cmake)", *traced_build))
    if cache_sizes:
        print_cache_table(cache_med, cache_sizes, cross)
    print(
        "peak RSS over all overlay steps: %.1f MiB (target <= 32 MiB)"
        % (max(v for k, v in s.rss.items() if not k.startswith("floor")) / 1024)
    )


if __name__ == "__main__":
    main()
