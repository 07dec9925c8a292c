#!/usr/bin/env python3
"""Draws bench/sweep.py's CSV as PNG plots (matplotlib, Debian's python3-matplotlib: run it with
/usr/bin/python3 where python3 is another interpreter).

  /usr/bin/python3 bench/plot.py bench-results/sweep.csv docs/img
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "overlay": "-o",
    "overlay (move)": "-o",
    "overlay (aside)": "-D",
    "overlay (tar)": "-s",
    "overlay_setup.py": "--^",
    "floor": ":x",
}


def series(rows, axis, step_filter):
    out = {}
    for r in rows:
        if r["axis"] != axis or not step_filter(r):
            continue
        label = r["tool"] if r["tool"] != "floor" else "floor: " + r["step"]
        out.setdefault((label, r["tool"]), []).append((int(r["x"]), float(r["seconds"])))
    return out


def plot(rows, axis, step, floors, xlabel, path):
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    data = series(rows, axis, lambda r: r["step"] == step or (r["tool"] == "floor" and r["step"] in floors))
    for (label, tool), pts in sorted(data.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], STYLE.get(tool, "-"), label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds (wall)")
    ax.set_title("%s: time against %s" % (step, xlabel))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print("plot:", path)


def plot_rss(rows, path):
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for axis, label in (("size", "artifact MiB"), ("cache", "cache files")):
        pts = sorted(
            (int(r["x"]), int(r["peak_rss_kib"]) / 1024)
            for r in rows
            if r["axis"] == axis
            and r["tool"].startswith("overlay")
            and r["tool"] != "overlay_setup.py"
            and r["step"] == "add-native"
            and int(r["peak_rss_kib"]) > 0
        )
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label="add-native peak RSS vs " + label)
    ax.set_xscale("log")
    ax.set_ylim(0, 40)
    ax.axhline(32, color="r", linestyle=":", label="SPEC limit 32 MiB")
    ax.set_ylabel("MiB")
    ax.set_title("overlay's peak memory stays flat")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print("plot:", path)


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with open(src) as f:
        rows = list(csv.DictReader(f))
    for step in ("add-native", "revert", "verify-native"):
        plot(
            rows,
            "size",
            step,
            ("cp+sync", "sha256"),
            "artifact size (MiB)",
            os.path.join(out, "sweep-size-%s.png" % step),
        )
        plot(
            rows,
            "cache",
            step,
            ("tar+sync", "untar+sync", "find"),
            "cache files",
            os.path.join(out, "sweep-cache-%s.png" % step),
        )
    plot_rss(rows, os.path.join(out, "sweep-peak-rss.png"))


if __name__ == "__main__":
    main()
