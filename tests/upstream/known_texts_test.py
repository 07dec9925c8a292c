#!/usr/bin/env python3
"""Every sitecustomize.py text this tool ever generated — each version of
share/overlay/sitecustomize.py in git's history — is one the binary knows as its own, so an
overlay an older binary wrote is upgraded by the next add-*, never kept as someone's own file
(issue 53: three texts of one day were missing and their overlays were called foreign).

    OVERLAY_BIN=build/overlay known_texts_test.py SOURCE_DIR

Skips (exit 77) outside a git checkout, or where git is missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("OVERLAY_BIN", "")
SRC = sys.argv[1] if len(sys.argv) > 1 else "."
PATH = "share/overlay/sitecustomize.py"


def git(*args):
    return subprocess.run(["git", "-C", SRC, *args], capture_output=True, text=True)


def main():
    if not BIN:
        sys.exit("set OVERLAY_BIN to the overlay binary")
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        print("known_texts: skipped: %s is not a git checkout (or git is missing): no history to read" % SRC)
        return 77
    commits = git("log", "--format=%H", "--", PATH).stdout.split()
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        print("known_texts: note: a shallow clone: only the history it holds is checked")
    with open(os.path.join(SRC, PATH)) as f:
        current = f.read()
    failures, checked = [], 0
    with tempfile.TemporaryDirectory(prefix="known-texts-") as w:
        with open(os.path.join(w, "impl.py"), "w") as f:
            f.write("def g():\n    return 2\n")
        ov = os.path.join(w, "ov")
        add = [
            BIN,
            "add-rebind",
            "--overlay",
            ov,
            "--target",
            "m:f",
            "--impl-module",
            "impl",
            "--impl-attr",
            "g",
            "--impl-file",
            os.path.join(w, "impl.py"),
        ]
        subprocess.run(add, check=True, capture_output=True)
        for c in commits:
            text = git("show", "%s:%s" % (c, PATH))
            if text.returncode != 0:
                continue  # the commit that removed it, if any
            checked += 1
            with open(os.path.join(ov, "sitecustomize.py"), "w") as f:
                f.write(text.stdout)
            status = json.loads(
                subprocess.run([BIN, "--json", "status", "--overlay", ov], capture_output=True, text=True).stdout
            )
            kind = status.get("sitecustomize")
            subprocess.run(add, check=True, capture_output=True)
            with open(os.path.join(ov, "sitecustomize.py")) as f:
                upgraded = f.read() == current
            if kind not in ("current", "generated") or not upgraded:
                failures.append("%s: %s, %s" % (c[:12], kind, "upgraded" if upgraded else "NOT upgraded by add-rebind"))
    print(
        "known_texts: %d texts of %s in git's history, %d not known as the tool's own" % (checked, PATH, len(failures))
    )
    for f in failures:
        print("  " + f)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
