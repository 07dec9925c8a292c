"""Runs overlay_setup.py (or any script) with a real SIGKILL timed into its N-th step.

A step is a call that writes: shutil.copy2 (backups, the patched source), tarfile member writes
(cache snapshots), json.dump (the manifest), shutil.rmtree (cache invalidation) and
subprocess.run (the build). KILL_AT=N kills the process just before step N (0: never);
KILL_TORN=1 makes a json.dump step write half its text first (a torn manifest). KILL_LOG names a
file that gets one line per step reached, so a full run lists every step there is.

usage: KILL_AT=N python3 kill_at.py overlay_setup.py add-native ...
"""
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tarfile

KILL_AT = int(os.environ.get("KILL_AT", "0"))
TORN = os.environ.get("KILL_TORN") == "1"
LOG = os.environ.get("KILL_LOG")
count = 0


def reached(name):
    global count
    count += 1
    if LOG:
        with open(LOG, "a") as f:
            f.write(name + "\n")
    return count == KILL_AT


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def wrap(owner, attr, name):
    real = getattr(owner, attr)

    def step(*args, **kwargs):
        if reached(name):
            die()
        return real(*args, **kwargs)

    setattr(owner, attr, step)


real_dump = json.dump


def dump(obj, fp, **kwargs):
    if reached("json.dump"):
        if TORN:
            text = json.dumps(obj, **kwargs)
            fp.write(text[: len(text) // 2])
            fp.flush()
        die()
    return real_dump(obj, fp, **kwargs)


wrap(shutil, "copy2", "copy2")
wrap(shutil, "rmtree", "rmtree")
wrap(tarfile.TarFile, "addfile", "tar-member")
wrap(subprocess, "run", "build")
json.dump = dump

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
