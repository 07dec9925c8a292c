// The pipeline as it calls the tool today (issue 30), through the real binary and a real python3:
// upstream's hook contracts (its own capture_shapes.py and seam_trace.py, Debian's torch), the
// newer verbs (add-marker, add-hook, add-installer, merge), a sitecustomize.py someone wrote,
// chaining, the ROCm probe guard and the overlay_setup.py shim run by path and imported.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

// Debian's interpreter: it has python3-torch (the python3 on PATH may be another one).
const char* kTorchPython = "/usr/bin/python3";

fs::path upstream(const std::string& name) { return shared_reference() / "upstream" / name; }

int count_of(const std::string& s, const std::string& needle) {
  int n = 0;
  for (auto p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

struct Pipeline : ::testing::Test {
  TempDir t;
  std::string site = (t / "site").string();
  std::string ov = (t / "ov").string();

  Pipeline() {
    write_file(t / "site/pkg/__init__.py", "");
    write_file(t / "site/pkg/sub.py", "def value():\n    return 'original'\n");
    write_file(
        t / "site/pkg/ops.py",
        "import math\n\ndef add(a, b):\n    return a + b\n\ndef scale(x, k):\n    return x * k\n\nsq = math.sqrt\n");
    write_file(t / "sub_patched.py", "def value():\n    return 'patched'\n");
    write_file(t / "fast_ops.py", "def fast_add(a, b):\n    return ('fast', a + b)\n");
  }
  std::vector<std::string> env_with(const std::string& o, const std::vector<std::string>& more = {}) {
    std::vector<std::string> e = {"PYTHONPATH=" + o + ":" + site};
    e.insert(e.end(), more.begin(), more.end());
    return e;
  }
  Cmd ov_cmd(const std::vector<std::string>& args) { return run_overlay(args, t.path(), {"PYTHONPATH=" + site}); }
  Cmd py(const std::string& code, const std::vector<std::string>& env, const char* python = "python3") {
    return run({python, "-c", code}, t.path(), env);
  }
  json manifest(const std::string& o) { return json::parse(read_file(fs::path(o) / "_overlay_manifest.json")); }
  bool have_torch() { return have({kTorchPython, "-c", "import torch"}); }
};

}  // namespace

TEST_F(Pipeline, CheckSaysOverlayActiveForAPatchedModule) {
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream/overlay_setup.v3.py");
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  Cmd c = run_overlay({"check", "--module", "pkg.sub"}, t.path(), env_with(ov));
  EXPECT_EQ(c.out, "pkg.sub -> " + ov + "/_patched/pkg.sub.py\nOVERLAY_ACTIVE\n") << c.err;
  // The upstream tool, asked the same question under the same PYTHONPATH, says the same.
  Cmd up = run({"python3", upstream("overlay_setup.v3.py").string(), "check", "--module", "pkg.sub"}, t.path(),
               env_with(ov));
  EXPECT_EQ(up.out, c.out) << up.err;
}

TEST_F(Pipeline, SummaryAndStartupLinesAreUpstreams) {
  Cmd r = ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops", "--impl-attr",
                  "fast_add", "--impl-file", (t / "fast_ops.py").string()});
  EXPECT_EQ(r.out, "OVERLAY_DIR=" + ov + "\nadd-rebind pkg.ops:add -> fast_ops.fast_add\nlaunch with: PYTHONPATH=" +
                       ov + ":$PYTHONPATH\n");
  Cmd c = ov_cmd(
      {"add-capture", "--overlay", ov, "--target", "pkg.ops:scale", "--out", (t / "cap").string(), "--max", "3"});
  EXPECT_EQ(c.out, "OVERLAY_DIR=" + ov + "\nadd-capture pkg.ops:scale -> " + (t / "cap").string() +
                       "\nlaunch with: PYTHONPATH=" + ov + ":$PYTHONPATH\n");
  Cmd m = ov_cmd({"add-marker", "--overlay", ov, "--target", "pkg.ops:add"});
  EXPECT_EQ(m.out, "OVERLAY_DIR=" + ov + "\nadd-marker pkg.ops:add\nlaunch with: PYTHONPATH=" + ov + ":$PYTHONPATH\n")
      << m.err;
  EXPECT_EQ(manifest(ov)["markers"], json::parse(R"([{"target": "pkg.ops:add"}])"));
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  // Workers are counted by these lines (grep '[overlay] injected module': N hits = N workers).
  Cmd p = py("import pkg.sub, pkg.ops\nprint(pkg.sub.value(), pkg.ops.add(1, 2))", env_with(ov));
  EXPECT_EQ(p.out, "patched ('fast', 3)\n") << p.err;
  EXPECT_EQ(count_of(p.err, "[overlay] injected module pkg.sub <- " + ov + "/_patched/pkg.sub.py\n"), 1) << p.err;
  EXPECT_EQ(count_of(p.err, "[overlay] rebound pkg.ops:add -> fast_ops.fast_add\n"), 1) << p.err;
}

TEST_F(Pipeline, UpstreamCaptureHookIsCalledAsItDefinesIt) {
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream/capture_shapes.py");
  if (!have_torch()) GTEST_SKIP() << kTorchPython << " has no torch (Debian's python3-torch)";
  Cmd a = ov_cmd({"add-capture", "--overlay", ov, "--target", "pkg.ops:scale", "--out", (t / "cap").string(), "--max",
                  "2", "--capture-file", upstream("capture_shapes.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  Cmd p = py("import torch, pkg.ops\nfor n in (2, 3, 2, 600):\n    pkg.ops.scale(torch.ones(n, 4), 2.0)\nprint('ok')",
             env_with(ov), kTorchPython);
  ASSERT_EQ(p.out, "ok\n") << p.err;
  EXPECT_EQ(p.err.find("FAILED"), std::string::npos) << p.err;
  json meta = json::parse(read_file(t / "cap/meta.json"));
  EXPECT_EQ(meta["target"], "pkg.ops:scale");
  EXPECT_EQ(meta["total_calls_observed"], 4);
  EXPECT_EQ(meta["num_distinct_shapes"], 3);
  EXPECT_EQ(meta["regimes_covered"], json::parse(R"(["decode", "prefill"])"));
  EXPECT_TRUE(fs::exists(t / "cap/reference_io.pt"));
}

TEST_F(Pipeline, DefaultCaptureHookWritesWhatThePipelineReads) {
  if (!have_torch()) GTEST_SKIP() << kTorchPython << " has no torch (Debian's python3-torch)";
  ASSERT_EQ(
      ov_cmd({"add-capture", "--overlay", ov, "--target", "pkg.ops:scale", "--out", (t / "cap").string(), "--max", "2"})
          .rc,
      0);
  // Calls 3 and 4 come while a (simulated) CUDA graph is captured: counted and sequenced only.
  Cmd p =
      py("import torch, pkg.ops\n"
         "pkg.ops.scale(torch.ones(2, 4), 2.0)\npkg.ops.scale(torch.ones(2, 4), 2.0)\n"
         "torch.cuda.is_current_stream_capturing = lambda: True\n"
         "pkg.ops.scale(torch.ones(5, 4), 2.0)\npkg.ops.scale(torch.ones(7, 4), 2.0)\n"
         "torch.cuda.is_current_stream_capturing = lambda: False\n"
         "pkg.ops.scale(torch.ones(700, 4), 3.0)\nprint('ok')",
         env_with(ov), kTorchPython);
  ASSERT_EQ(p.out, "ok\n") << p.err;
  json meta = json::parse(read_file(t / "cap/meta.json"));
  for (const char* k :
       {"target", "num_cases", "cases", "shape_counts", "regimes_covered", "call_sequence", "graph_replayed",
        "in_graph_calls", "total_calls_observed", "reference_io", "reference_io_sha256", "oracle_complete"})
    EXPECT_TRUE(meta.contains(k)) << k;
  EXPECT_EQ(meta["total_calls_observed"], 5);
  EXPECT_EQ(meta["in_graph_calls"], 2);
  EXPECT_EQ(meta["graph_replayed"], true);
  EXPECT_EQ(meta["num_cases"], 2);  // (2,4) eager, (700,4) eager: the graph-time shapes never snapshotted
  EXPECT_EQ(meta["cases"][0]["input_shapes"], json::parse("[[2, 4]]"));
  EXPECT_EQ(meta["cases"][1]["regime"], "prefill");
  EXPECT_EQ(meta["shape_counts"][0]["count"], 2);
  EXPECT_EQ(meta["call_sequence"].size(), 5u);
  EXPECT_EQ(meta["call_sequence"][2]["in_graph"], true);
  // The oracle loads with torch and holds the eager inputs.
  Cmd load = py("import torch\nd = torch.load('" + (t / "cap/reference_io.pt").string() +
                    "')\nprint(d['target'], len(d['records']), list(d['records'][0]['args'][0]['data'].shape))",
                {}, kTorchPython);
  EXPECT_EQ(load.out, "pkg.ops:scale 2 [2, 4]\n") << load.err;
  EXPECT_EQ(meta["reference_io_sha256"], file_sha256(t / "cap/reference_io.pt"));
}

TEST_F(Pipeline, SeveralProcessesCaptureIntoFoldersOfTheirOwn) {
  ASSERT_EQ(ov_cmd({"add-capture", "--overlay", ov, "--target", "pkg.ops:add", "--out", (t / "cap").string()}).rc, 0);
  // The parent holds the out dir while a child captures too; then CAPTURE_PROCESS_UNIQUE=1.
  Cmd p =
      py("import subprocess, sys, pkg.ops\npkg.ops.add(1, 2)\n"
         "subprocess.check_call([sys.executable, '-c', 'import pkg.ops; pkg.ops.add(3, 4)'])\nprint('ok')",
         env_with(ov, {"RANK=0"}));
  ASSERT_EQ(p.out, "ok\n") << p.err;
  EXPECT_EQ(json::parse(read_file(t / "cap/meta.json"))["total_calls_observed"], 1);
  int folders = 0;
  for (const auto& d : fs::directory_iterator(t / "cap"))
    if (d.path().filename().string().rfind("capture.pid-", 0) == 0) {
      ++folders;
      EXPECT_NE(d.path().filename().string().find(".rank-0"), std::string::npos);
      EXPECT_EQ(json::parse(read_file(d.path() / "meta.json"))["cases"][0]["sig"], "3|4");
    }
  EXPECT_EQ(folders, 1);
  EXPECT_FALSE(fs::exists(t / "cap/.capture.owner"));  // released at exit
  // CAPTURE_TARGET / CAPTURE_OUT install the hook at import, with no manifest entry.
  fs::create_directories(t / "hooks");
  fs::copy_file(source_dir() / "share/overlay/capture_shapes.py", t / "hooks/capture_shapes.py");
  Cmd env = py("import capture_shapes, pkg.ops\npkg.ops.add(5, 6)\nprint('ok')",
               {"PYTHONPATH=" + (t / "hooks").string() + ":" + site, "CAPTURE_TARGET=pkg.ops:add",
                "CAPTURE_OUT=" + (t / "envcap").string(), "CAPTURE_MAX=1"});
  ASSERT_EQ(env.out, "ok\n") << env.err;
  EXPECT_EQ(json::parse(read_file(t / "envcap/meta.json"))["cases"][0]["sig"], "5|6");
}

TEST_F(Pipeline, MarkersWithUpstreamAndDefaultHookInATorchProfile) {
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream/seam_trace.py");
  if (!have_torch()) GTEST_SKIP() << kTorchPython << " has no torch (Debian's python3-torch)";
  std::string trace =
      "import torch, pkg.ops\nwith torch.profiler.profile() as prof:\n    pkg.ops.add(1, 2)\n"
      "print(sorted({e.name for e in prof.events() if e.name.startswith('GEAK_TARGET::')}))";
  for (std::string hook : {std::string(), upstream("seam_trace.py").string()}) {
    SCOPED_TRACE(hook.empty() ? "default seam_trace.py" : hook);
    fs::remove_all(ov);
    std::vector<std::string> args = {"add-marker", "--overlay", ov, "--target", "pkg.ops:add"};
    if (!hook.empty()) args.insert(args.end(), {"--marker-file", hook});
    ASSERT_EQ(ov_cmd(args).rc, 0);
    Cmd p = py(trace, env_with(ov), kTorchPython);
    EXPECT_EQ(p.out, "['GEAK_TARGET::pkg.ops:add']\n") << p.err;
    // A builtin cannot be marked safely: one line says so, the interpreter carries on.
    ASSERT_EQ(ov_cmd({"add-marker", "--overlay", ov, "--target", "pkg.ops:sq"}).rc, 0);
    Cmd b = py("import pkg.ops\nprint(pkg.ops.sq(4.0))", env_with(ov), kTorchPython);
    EXPECT_EQ(b.out, "2.0\n");
    EXPECT_EQ(
        count_of(
            b.err,
            "[overlay] seam marker install FAILED pkg.ops:sq: RuntimeError: cannot safely mark non-Python callable"),
        1)
        << b.err;
  }
}

TEST_F(Pipeline, CaptureIsInnermostUnderAMarker) {
  ASSERT_EQ(ov_cmd({"add-marker", "--overlay", ov, "--target", "pkg.ops:add"}).rc, 0);
  ASSERT_EQ(ov_cmd({"add-capture", "--overlay", ov, "--target", "pkg.ops:add", "--out", (t / "cap").string()}).rc, 0);
  Cmd p =
      py("import pkg.ops\nf = pkg.ops.add\nprint(f(1, 2), f.__wrapped__.__code__.co_name, "
         "f.__wrapped__.__wrapped__.__code__.co_name)",
         env_with(ov));
  EXPECT_EQ(p.out, "3 captured add\n") << p.err;  // marker(capture(add))
  EXPECT_LT(p.err.find("[overlay] capturing pkg.ops:add"), p.err.find("[overlay] marked pkg.ops:add")) << p.err;
}

TEST_F(Pipeline, HandWrittenSitecustomizeIsKept) {
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  std::string mine = "import sys\nsys.stderr.write('mine ran\\n')\n";
  write_file(t / "ov/sitecustomize.py", mine);
  std::string manifest_before = read_file(t / "ov/_overlay_manifest.json");
  Cmd a = ov_cmd({"add-marker", "--overlay", ov, "--target", "pkg.ops:scale"});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(read_file(t / "ov/sitecustomize.py"), mine);
  EXPECT_EQ(a.err, "add-marker: kept " + ov +
                       "/sitecustomize.py: not generated by overlay or overlay_setup.py, it may not apply this entry "
                       "(--force replaces it)\n");
  EXPECT_NE(read_file(t / "ov/_overlay_manifest.json"), manifest_before);  // the entry is recorded all the same
  Cmd s = run_overlay({"status", "--overlay", ov});
  EXPECT_NE(s.out.find("sitecustomize " + ov + "/sitecustomize.py  foreign"), std::string::npos) << s.out;
  Cmd sj = run_overlay({"--json", "status", "--overlay", ov});
  EXPECT_EQ(json::parse(sj.out)["sitecustomize"], "foreign");
  // A generated one (upstream v3's) is regenerated; --force replaces the hand-written one.
  ASSERT_EQ(ov_cmd({"add-marker", "--overlay", ov, "--target", "pkg.ops:scale", "--force"}).rc, 0);
  EXPECT_EQ(read_file(t / "ov/sitecustomize.py"), run_overlay({"sitecustomize-text"}).out);
  EXPECT_EQ(py("import pkg.ops\nprint(pkg.ops.add(1, 2))", env_with(ov)).out, "('fast', 3)\n");
}

TEST_F(Pipeline, ChainsTheNextSitecustomizeAfterItsOwnEntryOnce) {
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  // A: a profiling adapter that chains the next sitecustomize after itself, as the pipeline's does.
  write_file(t / "A/sitecustomize.py",
             "import importlib.util, os, sys\nsys.stderr.write('A ran\\n')\n"
             "me = os.path.dirname(os.path.realpath(__file__))\n"
             "paths = [os.path.realpath(p or os.getcwd()) for p in sys.path]\n"
             "for p in paths[paths.index(me) + 1:]:\n"
             "    f = os.path.join(p, 'sitecustomize.py')\n"
             "    if os.path.isfile(f):\n"
             "        s = importlib.util.spec_from_file_location('_a_next', f)\n"
             "        m = importlib.util.module_from_spec(s)\n"
             "        s.loader.exec_module(m)\n"
             "        break\n");
  write_file(t / "C/sitecustomize.py", "import sys\nsys.stderr.write('C ran\\n')\n");
  std::string a = (t / "A").string(), c = (t / "C").string();
  Cmd p = py("import pkg.ops\nprint(pkg.ops.add(1, 2))", {"PYTHONPATH=" + a + ":" + ov + ":" + c + ":" + site});
  EXPECT_EQ(p.out, "('fast', 3)\n") << p.err;
  EXPECT_EQ(count_of(p.err, "A ran"), 1) << p.err;
  EXPECT_EQ(count_of(p.err, "C ran"), 1) << p.err;
  EXPECT_EQ(p.err.find("RecursionError"), std::string::npos);
  // The overlay twice on the path: applied once; one before it is never run again.
  Cmd twice =
      py("import pkg.ops\nprint(pkg.ops.add(1, 2))", {"PYTHONPATH=" + ov + ":" + c + ":" + ov + ":" + a + ":" + site});
  EXPECT_EQ(twice.out, "('fast', 3)\n") << twice.err;
  EXPECT_EQ(count_of(twice.err, "[overlay] rebound"), 1) << twice.err;
  EXPECT_EQ(count_of(twice.err, "C ran"), 1) << twice.err;
  EXPECT_EQ(count_of(twice.err, "A ran"), 0) << twice.err;
  // Reached through a symlink and past a file on the path (a zip's place): the same overlay is
  // told by its file, not its spelling, and a path entry that is a file holds no sitecustomize.
  fs::create_directory_symlink(ov, t / "ov-link");
  write_file(t / "not-a-dir.zip", "PK");
  Cmd linked =
      py("import pkg.ops\nprint(pkg.ops.add(1, 2))", {"PYTHONPATH=" + ov + ":" + (t / "not-a-dir.zip").string() + ":" +
                                                      (t / "ov-link").string() + ":" + c + ":" + site});
  EXPECT_EQ(linked.out, "('fast', 3)\n") << linked.err;
  EXPECT_EQ(count_of(linked.err, "[overlay] rebound"), 1) << linked.err;
  EXPECT_EQ(count_of(linked.err, "C ran"), 1) << linked.err;
  EXPECT_EQ(linked.err.find("failed"), std::string::npos) << linked.err;
}

TEST_F(Pipeline, ProbeProcessesDoNotApplyTheOverlay) {
  // gpulib's import runs a probe (a Python script), as torch/aiter do on ROCm; an installer imports
  // gpulib at start-up. Were the overlay applied inside the probe, it would import gpulib there
  // again, start another probe, and so on (bounded here at 5 levels).
  write_file(t / "site/gpulib.py",
             "import os, subprocess, sys\n"
             "with open(os.environ['PROBE_LOG'], 'a') as f:\n    f.write('import %d\\n' % os.getpid())\n"
             "depth = int(os.environ.get('PROBE_DEPTH', '0'))\n"
             "if depth < 5:\n"
             "    env = dict(os.environ, PROBE_DEPTH=str(depth + 1))\n"
             "    subprocess.check_call([sys.executable, os.environ['PROBE']], env=env)\n"
             "def install():\n    pass\n");
  ASSERT_EQ(ov_cmd({"add-installer", "--overlay", ov, "--id", "gpulib", "--module", "gpulib"}).rc, 0);
  for (std::string probe : {"rocm_agent_enumerator", "gpu_query.py"}) {
    SCOPED_TRACE(probe);  // a probe by name, and one the re-entrancy guard catches
    write_file(t / probe, "import sys\nsys.stdout.write('gfx942\\n')\n", 0755);
    fs::path log = t / ("log-" + probe);
    std::vector<std::string> env = env_with(ov, {"PROBE=" + (t / probe).string(), "PROBE_LOG=" + log.string()});
    Cmd p =
        py("import subprocess, sys\nprint('main', flush=True)\n"
           "subprocess.check_call([sys.executable, '-c', 'import sys; sys.stdout.write(\"worker\\\\n\")'])",
           env);
    EXPECT_EQ(p.out, "gfx942\nmain\ngfx942\nworker\n") << p.err;           // one probe each, not a chain
    EXPECT_EQ(count_of(read_file(log), "import "), 2) << read_file(log);   // the main process and the later worker
    EXPECT_EQ(count_of(p.err, "[overlay] installed gpulib"), 2) << p.err;  // both applied it
  }
}

TEST_F(Pipeline, HooksRunRightAfterTheirModuleImports) {
  write_file(t / "annotate.py",
             "import sys\ncalls = []\ndef install():\n    calls.append(sys.modules['pkg.ops'].add(2, 2))\n"
             "def broken():\n    raise ValueError('no runner')\n");
  Cmd a = ov_cmd({"add-hook", "--overlay", ov, "--module", "pkg.ops", "--impl-module", "annotate", "--impl-file",
                  (t / "annotate.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, "OVERLAY_DIR=" + ov +
                       "\nadd-hook after import pkg.ops -> annotate.install()\nlaunch with: PYTHONPATH=" + ov +
                       ":$PYTHONPATH\n");
  EXPECT_EQ(manifest(ov)["hooks"],
            json::parse(R"([{"module": "pkg.ops", "impl_module": "annotate", "impl_attr": "install"}])"));
  Cmd before = py("import sys, annotate\nprint(annotate.calls, 'pkg.ops' in sys.modules)", env_with(ov));
  EXPECT_EQ(before.out, "[] False\n") << before.err;  // nothing imported eagerly
  Cmd p = py("import pkg.ops, annotate\nimport pkg.ops\nprint(annotate.calls)", env_with(ov));
  EXPECT_EQ(p.out, "[4]\n") << p.err;
  ASSERT_EQ(
      ov_cmd({"add-hook", "--overlay", ov, "--module", "pkg.sub", "--impl-module", "annotate", "--impl-attr", "broken"})
          .rc,
      0);
  Cmd f = py("import pkg.sub\nprint(pkg.sub.value())", env_with(ov));
  EXPECT_EQ(f.out, "original\n");
  EXPECT_EQ(count_of(f.err, "[overlay] hook annotate.broken on pkg.sub FAILED: ValueError: no runner"), 1) << f.err;
}

TEST_F(Pipeline, InstallersRunFirstAndARequiredFailureEndsTheProcess) {
  write_file(t / "ov_pkg.py",
             "import sys\ndef install():\n    sys.stderr.write('installer saw pkg.ops imported: %s\\n' % ('pkg.ops' in "
             "sys.modules))\n"
             "def explode():\n    raise RuntimeError('no GPU arch')\n");
  fs::create_directories(ov);
  fs::copy_file(t / "ov_pkg.py", t / "ov/ov_pkg.py");
  Cmd a = ov_cmd({"add-installer", "--overlay", ov, "--id", "fused", "--module", "ov_pkg", "--target", "pkg.ops:add",
                  "--kernel", "k1"});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, "OVERLAY_DIR=" + ov + "\n");
  EXPECT_EQ(manifest(ov)["installers"],
            json::parse(R"([{"id": "fused", "module": "ov_pkg", "callable": "install", "required": true,
                                                         "targets": ["pkg.ops:add"], "kernels": ["k1"]}])"));
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  Cmd p = py("import pkg.ops\nprint(pkg.ops.add(1, 1))", env_with(ov));
  EXPECT_EQ(p.out, "('fast', 2)\n") << p.err;
  EXPECT_LT(p.err.find("installer saw pkg.ops imported: False"), p.err.find("[overlay] rebound")) << p.err;
  // The same id again: the same definition is accepted, another one refused with nothing changed.
  EXPECT_EQ(ov_cmd({"add-installer", "--overlay", ov, "--id", "fused", "--module", "ov_pkg", "--target", "pkg.ops:add",
                    "--kernel", "k1"})
                .rc,
            0);
  expect_refused_unchanged(
      {{"add-installer", "--overlay", ov, "--id", "fused", "--module", "ov_pkg", "--callable", "explode"},
       {"add-installer", "--overlay", ov, "--id", "x", "--module", "not a module"},
       {"add-installer", "--overlay", ov, "--id", "x", "--module", "m", "--target", "bad target"}},
      t.path(), [&](const std::vector<std::string>& args) { return ov_cmd(args); });
  TempDir t2;
  std::string ov2 = (t2 / "ov").string();
  fs::create_directories(ov2);
  fs::copy_file(t / "ov_pkg.py", t2 / "ov/ov_pkg.py");
  ASSERT_EQ(
      ov_cmd({"add-installer", "--overlay", ov2, "--id", "boom", "--module", "ov_pkg", "--callable", "explode"}).rc, 0);
  Cmd f = py("print('server started')", env_with(ov2));
  EXPECT_EQ(f.rc, 70);
  EXPECT_EQ(f.out, "");
  EXPECT_EQ(count_of(f.err, "\n"), 1) << f.err;
  EXPECT_EQ(f.err,
            "[overlay] installer FAILED boom (ov_pkg.explode): RuntimeError: no GPU arch; required: exiting with "
            "status 70\n");
}

TEST_F(Pipeline, MergeComposesTwoOverlaysOrRefusesAConflict) {
  std::string base = (t / "base").string(), inc = (t / "inc").string(), out = (t / "out").string();
  ASSERT_EQ(ov_cmd({"add-module", "--overlay", base, "--module", "pkg.sub", "--patched-file",
                    (t / "sub_patched.py").string()})
                .rc,
            0);
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", inc, "--from", base, "--target", "pkg.ops:add", "--impl-module",
                    "fast_ops", "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  std::string inputs_inc = tree_digest(t / "inc");
  Cmd m = run_overlay({"merge", "--overlay", out, "--from", base, "--with", inc});
  ASSERT_EQ(m.rc, 0) << m.err;
  EXPECT_EQ(m.out, "OVERLAY_DIR=" + out + "\n");
  EXPECT_EQ(manifest(out)["modules"].size(), 1u);
  EXPECT_EQ(manifest(out)["rebinds"].size(), 1u);
  Cmd p = py("import pkg.sub, pkg.ops\nprint(pkg.sub.value(), pkg.ops.add(1, 2))", env_with(out));
  EXPECT_EQ(p.out, "patched ('fast', 3)\n") << p.err;
  // A conflict: one line naming both overlays, nothing written.
  write_file(t / "fast2.py", "def fast_add(a, b):\n    return 'other'\n");
  std::string other = (t / "other").string();
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", other, "--target", "pkg.ops:add", "--impl-module", "fast2",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast2.py").string()})
                .rc,
            0);
  std::string before = tree_digest(t.path());
  Cmd c = run_overlay({"merge", "--overlay", (t / "out2").string(), "--from", inc, "--with", other});
  EXPECT_EQ(c.rc, 1);
  EXPECT_EQ(count_of(c.err, "\n"), 1) << c.err;
  EXPECT_NE(c.err.find("conflicting rebinds entry for pkg.ops:add"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find(inc), std::string::npos);
  EXPECT_NE(c.err.find(other), std::string::npos);
  EXPECT_EQ(tree_digest(t.path()), before);
  // A file of both with other bytes is a conflict too.
  write_file(t / "other_ops/fast_ops.py", "def fast_add(a, b):\n    return 'changed'\n");
  std::string third = (t / "third").string();
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", third, "--target", "pkg.ops:scale", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "other_ops/fast_ops.py").string()})
                .rc,
            0);
  Cmd f = run_overlay({"merge", "--overlay", (t / "out3").string(), "--from", inc, "--with", third});
  EXPECT_EQ(f.rc, 1);
  EXPECT_NE(f.err.find("conflicting overlay file fast_ops.py"), std::string::npos) << f.err;
  EXPECT_FALSE(fs::exists(t / "out3"));
  // A module an installer declares as its serving site, rebound by the other overlay: a conflict.
  std::string owner = (t / "owner").string();
  ASSERT_EQ(
      ov_cmd({"add-installer", "--overlay", owner, "--id", "fused", "--module", "fused", "--target", "pkg.ops"}).rc, 0);
  Cmd site_conflict = run_overlay({"merge", "--overlay", (t / "out4").string(), "--from", owner, "--with", inc});
  EXPECT_EQ(site_conflict.rc, 1);
  EXPECT_NE(site_conflict.err.find("conflicting overlay target: pkg.ops:add"), std::string::npos) << site_conflict.err;
  EXPECT_FALSE(fs::exists(t / "out4"));
  EXPECT_EQ(tree_digest(t / "inc"), inputs_inc);
}

TEST_F(Pipeline, MergeAgreesWithUpstreamV7OnItsOverlays) {
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream/overlay_setup.v7.py");
  std::string up = upstream("overlay_setup.v7.py").string();
  std::string base = (t / "base").string(), inc = (t / "inc").string();
  ASSERT_EQ(run({"python3", up, "add-module", "--overlay", base, "--module", "pkg.sub", "--patched-file",
                 (t / "sub_patched.py").string()},
                t.path(), {"PYTHONPATH=" + site})
                .rc,
            0);
  ASSERT_EQ(run({"python3", up, "add-rebind", "--overlay", inc, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                 "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()},
                t.path(), {"PYTHONPATH=" + site})
                .rc,
            0);
  Cmd theirs =
      run({"python3", up, "merge", "--overlay", (t / "theirs").string(), "--from", base, "--with", inc}, t.path());
  ASSERT_EQ(theirs.rc, 0) << theirs.err;
  Cmd ours = run_overlay({"merge", "--overlay", (t / "ours").string(), "--from", base, "--with", inc});
  ASSERT_EQ(ours.rc, 0) << ours.err;
  for (const char* k : {"modules", "rebinds"})
    EXPECT_EQ(manifest((t / "ours").string())[k], manifest((t / "theirs").string())[k]) << k;
  EXPECT_EQ(read_file(t / "ours/_patched/pkg.sub.py"), read_file(t / "theirs/_patched/pkg.sub.py"));
  EXPECT_EQ(read_file(t / "ours/fast_ops.py"), read_file(t / "theirs/fast_ops.py"));
  for (const char* out : {"ours", "theirs"}) {
    Cmd p = py("import pkg.sub, pkg.ops\nprint(pkg.sub.value(), pkg.ops.add(1, 2))", env_with((t / out).string()));
    EXPECT_EQ(p.out, "patched ('fast', 3)\n") << out << ": " << p.err;
  }
}

TEST_F(Pipeline, AnUnknownSectionIsNamedAtStartupAndByStatus) {
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  json m = manifest(ov);
  m["semantic_captures"] = json::parse(R"([{"target": "pkg.ops:add"}])");
  write_file(t / "ov/_overlay_manifest.json", m.dump(2));
  Cmd p = py("import pkg.ops\nprint(pkg.ops.add(1, 2))", env_with(ov));
  EXPECT_EQ(p.out, "('fast', 3)\n");
  EXPECT_EQ(
      count_of(p.err,
               "[overlay] manifest section 'semantic_captures' (1 entries) is not applied by this version of overlay"),
      1)
      << p.err;
  Cmd s = run_overlay({"status", "--overlay", ov});
  EXPECT_NE(s.out.find("section semantic_captures  NOT APPLIED"), std::string::npos) << s.out;
}

TEST_F(Pipeline, ShimRunByPathImportedAndCopied) {
  fs::path task = t / "task";
  fs::create_directories(task);
  fs::copy_file(source_dir() / "share/overlay/overlay_setup.py", task / "overlay_setup.py");
  std::vector<std::string> env = {"PYTHONPATH=" + site, std::string("OVERLAY_BIN=") + overlay_binary()};
  std::vector<std::string> args = {"add-rebind",
                                   "--overlay",
                                   ov,
                                   "--target",
                                   "pkg.ops:add",
                                   "--impl-module",
                                   "fast_ops",
                                   "--impl-attr",
                                   "fast_add",
                                   "--impl-file",
                                   (t / "fast_ops.py").string()};
  std::vector<std::string> by_path = {"python3", (task / "overlay_setup.py").string()};
  by_path.insert(by_path.end(), args.begin(), args.end());
  Cmd shim = run(by_path, t.path(), env);
  fs::remove_all(ov);
  Cmd direct = run_overlay(args, t.path(), {"PYTHONPATH=" + site});
  EXPECT_EQ(shim.rc, direct.rc);
  EXPECT_EQ(shim.out, direct.out);
  EXPECT_EQ(shim.err, direct.err);
  // A refusal: the same line and status.
  Cmd bad = run({"python3", (task / "overlay_setup.py").string(), "add-rebind", "--overlay", ov, "--target", "nocolon",
                 "--impl-module", "m", "--impl-attr", "a"},
                t.path(), env);
  Cmd bad_direct =
      run_overlay({"add-rebind", "--overlay", ov, "--target", "nocolon", "--impl-module", "m", "--impl-attr", "a"});
  EXPECT_EQ(bad.rc, bad_direct.rc);
  EXPECT_NE(bad.rc, 0);
  EXPECT_EQ(bad.err, bad_direct.err);
  // Imported: _ensure_overlay, SITECUSTOMIZE, module_file, pkg_root, main.
  std::string fresh = (t / "fresh").string();
  Cmd imp = run({"python3", "-c",
                 "import sys; sys.path.insert(0, '" + task.string() +
                     "')\nimport overlay_setup as o\n"
                     "man = o._ensure_overlay('" +
                     fresh +
                     "')\nprint(man)\n"
                     "print(open('" +
                     fresh +
                     "/sitecustomize.py').read() == o.SITECUSTOMIZE)\n"
                     "print(o.module_file('pkg.sub'))\nprint(o.pkg_root('pkg'))\n"
                     "o.main(['add-module', '--overlay', '" +
                     fresh + "', '--module', 'pkg.sub', '--patched-file', '" + (t / "sub_patched.py").string() +
                     "'])\n"
                     "try:\n    o.main(['check'])\nexcept SystemExit as e:\n    print('exit', e.code)\n"},
                t.path(), env);
  EXPECT_EQ(imp.out, fresh + "/_overlay_manifest.json\nTrue\n" + site + "/pkg/sub.py\n" + site +
                         "/pkg\nOVERLAY_DIR=" + fresh + "\nadd-module pkg.sub -> " + fresh +
                         "/_patched/pkg.sub.py\nlaunch with: PYTHONPATH=" + fresh + ":$PYTHONPATH\nexit 2\n")
      << imp.err;
  // _ensure_overlay(dir, base) seeds from base as upstream's does.
  std::string seeded = (t / "seeded").string();
  Cmd seed = run({"python3", "-c",
                  "import sys; sys.path.insert(0, '" + task.string() +
                      "')\nimport overlay_setup as o\no._ensure_overlay('" + seeded + "', '" + fresh + "')"},
                 t.path(), env);
  ASSERT_EQ(seed.rc, 0) << seed.err;
  EXPECT_EQ(manifest(seeded)["modules"], manifest(fresh)["modules"]);
  EXPECT_TRUE(fs::exists(t / "seeded/_patched/pkg.sub.py"));
  // No binary to run: one line, non-zero.
  Cmd none = run({"python3", (task / "overlay_setup.py").string(), "check", "--module", "pkg"}, t.path(),
                 {"OVERLAY_BIN=/nonexistent/overlay"});
  EXPECT_NE(none.rc, 0);
  EXPECT_EQ(count_of(none.err, "\n"), 1) << none.err;
}

TEST_F(Pipeline, ThePipelinesCommandLinesThroughTheShim) {
  OVERLAY_REQUIRE_SHARED_REFERENCE("upstream/capture_shapes.py");
  // As the role documents and the harness run them: the shim copied into the task folder, run by
  // path; upstream's capture hook from the skill's scripts; a marker; _ensure_overlay by import;
  // then N workers, counted by the start-up line.
  fs::path task = t / "task", skill = t / "skill/scripts";
  fs::create_directories(task);
  fs::create_directories(skill);
  fs::copy_file(source_dir() / "share/overlay/overlay_setup.py", task / "overlay_setup.py");
  fs::copy_file(upstream("capture_shapes.py"), skill / "capture_shapes.py");
  fs::copy_file(upstream("seam_trace.py"), skill / "seam_trace.py");
  write_file(
      t / "harness.sh",
      "set -eu\n"
      "python3 \"$TASK/overlay_setup.py\" add-module --overlay \"$OV\" --module pkg.sub --patched-file "
      "\"$TASK/../sub_patched.py\"\n"
      "python3 \"$TASK/overlay_setup.py\" add-rebind --overlay \"$OV\" --target pkg.ops:add --impl-module fast_ops "
      "--impl-attr fast_add --impl-file \"$TASK/../fast_ops.py\"\n"
      "python3 \"$TASK/overlay_setup.py\" add-capture --overlay \"$OV\" --target pkg.ops:scale --out \"$TASK/cap\" "
      "--max 5 "
      "--capture-file \"$SKILL_DIR/scripts/capture_shapes.py\"\n"
      "python3 \"$TASK/overlay_setup.py\" add-marker --overlay \"$OV\" --target pkg.ops:add --marker-file "
      "\"$SKILL_DIR/scripts/seam_trace.py\"\n"
      "cd \"$TASK\" && python3 -c \"import overlay_setup as o; o._ensure_overlay('$OV')\"\n"
      "for w in 1 2 3; do PYTHONPATH=\"$OV:$SITE\" python3 -c 'import pkg.sub, pkg.ops; pkg.ops.add(1, 2)' "
      "2>>\"$TASK/workers.log\"; done\n"
      "grep -c '\\[overlay\\] injected module' \"$TASK/workers.log\"\n");
  Cmd h = run({"bash", (t / "harness.sh").string()}, t.path(),
              {"TASK=" + task.string(), "OV=" + ov, "SITE=" + site, "SKILL_DIR=" + (t / "skill").string(),
               "PYTHONPATH=" + site, std::string("OVERLAY_BIN=") + overlay_binary()});
  ASSERT_EQ(h.rc, 0) << h.err;
  EXPECT_EQ(h.out.substr(h.out.rfind("OVERLAY_DIR=")),
            "OVERLAY_DIR=" + ov + "\nadd-marker pkg.ops:add\nlaunch with: PYTHONPATH=" + ov + ":$PYTHONPATH\n3\n");
  std::string log = read_file(task / "workers.log");
  EXPECT_EQ(count_of(log, "[overlay] injected module pkg.sub <- "), 3) << log;
  EXPECT_EQ(count_of(log, "[overlay] rebound pkg.ops:add -> fast_ops.fast_add"), 3) << log;
  EXPECT_EQ(count_of(log, "[seam_trace] marked pkg.ops:add"), 3) << log;
  EXPECT_EQ(log.find("FAILED"), std::string::npos) << log;
  json m = manifest(ov);
  EXPECT_EQ(m["captures"][0]["out"], (task / "cap").string());
  EXPECT_EQ(read_file(t / "ov/capture_shapes.py"), read_file(upstream("capture_shapes.py")));
}
