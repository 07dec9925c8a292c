#!/usr/bin/env python3
"""What the install's next load costs after a revert (issue 51), against a warm load in one run.

A torch cpp_extension JIT extension (one kernel: a .cu where CUDA is there, else a .cpp), loaded
the way a serving stack loads it: `torch.utils.cpp_extension.load`, which runs ninja in its build
dir and compiles what is out of date. Timed, in order:

  first load    the stock extension compiled into an empty JIT cache (the compile's cost)
  warm load     loaded again, nothing to compile (the floor)
  add-native    `discover`'s flags, the candidate's load as the build command
  candidate     the candidate loaded
  after revert  the stock extension loaded right after `revert`

Prints each, and after-revert / warm and first / warm. Before issue 51 a revert gave the restored
source a fresh mtime and the load after it compiled the stock kernel again (after-revert / warm
about first / warm); now it is about 1.

    bench/revert_next_build.py --overlay build/overlay [--python /usr/bin/python3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BODY = {
    "cu": "#include <torch/extension.h>\n"
    "__global__ void fill(float* p, float v) { p[threadIdx.x] = v; }\n"
    "torch::Tensor value() { auto t = torch::empty({1}, torch::dtype(torch::kFloat).device(torch::kCUDA));\n"
    "  fill<<<1, 1>>>(t.data_ptr<float>(), VALUE); return t.cpu(); }\n"
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value); }\n',
    "cpp": "#include <torch/extension.h>\n"
    "torch::Tensor value() { return torch::full({1}, VALUE); }\n"
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value); }\n',
}
LOAD = """import os, sys
import torch.utils.cpp_extension as ce
here = os.path.dirname(os.path.abspath(__file__))
m = ce.load(name='bench_ext', sources=[os.path.join(here, 'csrc', sys.argv[1])])
print(float(m.value()[0]))
"""


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(argv), r.stderr[-2000:]))
    return time.perf_counter() - t0, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--overlay", required=True, help="the overlay binary")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    probe = subprocess.run(
        [a.python, "-c", "import torch; print(int(torch.cuda.is_available()))"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        print("revert_next_build: skipped: %s has no torch" % a.python)
        return
    ext = "cu" if probe.stdout.strip() == "1" else "cpp"
    with tempfile.TemporaryDirectory(prefix="overlay-bench-jit-") as w:
        os.makedirs(os.path.join(w, "pkg", "csrc"))
        os.makedirs(os.path.join(w, "best"))
        src = os.path.join(w, "pkg", "csrc", "fill." + ext)
        with open(src, "w") as f:
            f.write("#define VALUE 4.0f\n" + BODY[ext])
        with open(os.path.join(w, "best", "fill." + ext), "w") as f:
            f.write("#define VALUE 7.0f\n" + BODY[ext])
        load = os.path.join(w, "pkg", "load.py")
        with open(load, "w") as f:
            f.write(LOAD)
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=os.path.join(w, "te"), OVERLAY_STATE_DIR=os.path.join(w, "state"))
        run_load = [a.python, load, "fill." + ext]
        first, _ = timed(run_load, env)
        warm, _ = timed(run_load, env)
        _, d = timed([a.overlay, "--json", "discover", "--target", src, "--root", w], env)
        args = json.loads(d.stdout)["candidates"][0]["add_native_args"]
        ov = os.path.join(w, "ov")
        add, _ = timed(
            [
                a.overlay,
                "add-native",
                "--overlay",
                ov,
                "--patched-file",
                os.path.join(w, "best", "fill." + ext),
                *args,
                "--build-cmd",
                " ".join(run_load),
                "--build-cwd",
                os.path.join(w, "pkg"),
            ],
            env,
        )
        cand, c = timed(run_load, env)
        _, r = timed([a.overlay, "revert", "--overlay", ov], env)
        after, s = timed(run_load, env)
        if c.stdout.strip() != "7.0" or s.stdout.strip() != "4.0":
            sys.exit("wrong values: candidate %s, after revert %s" % (c.stdout.strip(), s.stdout.strip()))
        said = [line for line in r.stderr.splitlines() if "mtimes" in line or "dated now" in line]
        print(
            "revert_next_build (%s kernel): first load %.1f s, warm load %.1f s (floor), add-native %.1f s, candidate %.1f s, "
            "after revert %.1f s" % (ext, first, warm, add, cand, after)
        )
        print(
            "revert_next_build: after-revert / warm = %.2fx; first / warm = %.2fx; revert said: %s"
            % (after / warm, first / warm, said[0] if said else "-")
        )


if __name__ == "__main__":
    main()
