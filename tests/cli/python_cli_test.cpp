// Python overlays through the real binary and a real python3 running the generated sitecustomize.py.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Py : ::testing::Test {
  TempDir t;
  std::string site = (t / "site").string();
  std::string ov = (t / "ov").string();

  Py() {
    write_file(t / "site/pkg/__init__.py", "");
    write_file(t / "site/pkg/sub.py", "def value():\n    return 'original'\n");
    write_file(t / "site/pkg/ops.py",
               "def add(a, b):\n    return a + b\n\nclass K:\n    def m(self):\n        return 'orig-m'\n");
    write_file(t / "sub_patched.py", "def value():\n    return 'patched'\n");
    write_file(t / "fast_ops.py",
               "def fast_add(a, b):\n    return ('fast', a + b)\n\ndef fast_m(self):\n    return 'fast-m'\n");
  }
  // The runtime's cache (bytecode, start-up plans: never under the overlay) of this test alone.
  std::string cache = (t / "cache").string();
  fs::path cached(const std::string& kind) const {
    if (fs::is_directory(fs::path(cache) / "runtime"))
      for (const auto& e : fs::directory_iterator(fs::path(cache) / "runtime"))
        if (e.path().filename().string().rfind(kind + ".", 0) == 0) return e.path();
    return {};
  }
  std::vector<std::string> env_without() { return {"PYTHONPATH=" + site, "OVERLAY_CACHE_DIR=" + cache}; }
  // add-rebind of pkg.ops:add to fast_ops.fast_add, its impl file copied in.
  std::vector<std::string> add_fast_add() const {
    return {"add-rebind",
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
  }
  std::vector<std::string> env_with(const std::string& o) {
    return {"PYTHONPATH=" + o + ":" + site, "OVERLAY_CACHE_DIR=" + cache};
  }
  Cmd ov_cmd(const std::vector<std::string>& args) { return run_overlay(args, t.path(), env_without()); }
  Cmd py(const std::string& code, const std::vector<std::string>& env) {
    return run({"python3", "-c", code}, t.path(), env);
  }
  json manifest(const std::string& o) { return json::parse(read_file(fs::path(o) / "_overlay_manifest.json")); }
};

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_F(Py, AddModulePrintsCompatibleTokens) {
  Cmd a =
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, "OVERLAY_DIR=" + ov + "\nadd-module pkg.sub -> " + ov +
                       "/_patched/pkg.sub.py\nlaunch with: PYTHONPATH=" + ov + ":$PYTHONPATH\n");
  EXPECT_EQ(read_file(t / "ov/_patched/pkg.sub.py"), read_file(t / "sub_patched.py"));
  EXPECT_EQ(manifest(ov)["modules"], json::parse(R"([{"module": "pkg.sub", "file": "_patched/pkg.sub.py"}])"));
  EXPECT_TRUE(fs::exists(t / "ov/sitecustomize.py"));
}

// A package's __init__.py is never swapped whole (it would lose the package's submodules): each
// way of naming it is refused with one line naming the file, and nothing is written, not even
// the overlay's directory. An existing overlay keeps its bytes.
TEST_F(Py, APackageInitializerIsRefusedAndNothingIsWritten) {
  write_file(t / "init_patched/__init__.py", "X = 2\n");
  write_file(t / "fix.diff", "--- a/__init__.py\n+++ b/__init__.py\n@@ -0,0 +1 @@\n+X = 2\n");
  const std::string init = (t / "site/pkg/__init__.py").string();
  std::vector<std::vector<std::string>> ways = {
      {"add-module", "--overlay", ov, "--module", "pkg"},  // the installed module, located by python3
      {"add-module", "--overlay", ov, "--module", "pkg", "--src-file", init},
      {"add-module", "--overlay", ov, "--module", "pkg", "--src-file", init, "--patch", (t / "fix.diff").string()},
      {"add-module", "--overlay", ov, "--module", "pkg", "--patched-file", (t / "init_patched/__init__.py").string()},
      {"copy-subtree", "--overlay", ov, "--module", "pkg", "--package", "pkg", "--subpath", "__init__.py"}};
  for (const auto& args : ways) {
    Cmd c = ov_cmd(args);
    EXPECT_EQ(c.rc, 1) << args.back();
    EXPECT_NE(c.err.find("is a package __init__.py"), std::string::npos) << c.err;
    EXPECT_EQ(lines(c.err), 1) << c.err;
    EXPECT_FALSE(fs::exists(ov)) << "written for " << args.back();
  }
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  std::string before = tree_digest(ov);
  for (const auto& args : ways) EXPECT_EQ(ov_cmd(args).rc, 1);
  EXPECT_EQ(tree_digest(ov), before);
}

// The worker modules are written on request only (upstream's overlays hold none, and tools list
// an overlay's names): once asked for, every later write keeps them at this binary's text, and
// --from and merge carry the request.
TEST_F(Py, WorkerModulesAreWrittenOnRequestAndKeptCurrent) {
  auto names = [](const fs::path& dir) {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
    std::sort(n.begin(), n.end());
    return n;
  };
  // Upstream's names only: no worker modules, no lock file (Python verbs flock the directory), no
  // __pycache__ where processes write their own bytecode.
  const std::vector<std::string> plain = {"_overlay_manifest.json", "fast_ops.py", "sitecustomize.py"};
  const std::vector<std::string> rebind = add_fast_add();
  std::vector<std::string> bytecode_on = env_without();
  bytecode_on.push_back("PYTHONDONTWRITEBYTECODE=");  // empty is unset, for Python and for the tool
  ASSERT_EQ(run_overlay(rebind, t.path(), bytecode_on).rc, 0);
  EXPECT_EQ(names(ov), plain);
  std::string manifest_bytes = read_file(t / "ov/_overlay_manifest.json");
  Cmd w = ov_cmd({"add-worker-modules", "--overlay", ov});
  ASSERT_EQ(w.rc, 0) << w.err;
  EXPECT_NE(w.out.find("add-worker-modules -> " + ov + "/_overlay_worker_ext.py, " + ov + "/_overlay_apply.py\n"),
            std::string::npos)
      << w.out;
  EXPECT_NE(w.out.find("--worker-extension-cls _overlay_worker_ext.OverlayWorkerExtension"), std::string::npos)
      << w.out;
  EXPECT_EQ(read_file(t / "ov/_overlay_manifest.json"), manifest_bytes) << "no entry is added";
  const fs::path share = fs::path(OVERLAY_SOURCE_DIR) / "share/overlay";
  for (const char* n : {"_overlay_worker_ext.py", "_overlay_apply.py"})
    EXPECT_EQ(read_file(t / "ov" / n), read_file(share / n)) << n;
  // An older text of one of them is brought current by the next add-*.
  write_file(t / "ov/_overlay_apply.py", "# an older binary's text\n");
  ASSERT_EQ(ov_cmd(rebind).rc, 0);
  EXPECT_EQ(read_file(t / "ov/_overlay_apply.py"), read_file(share / "_overlay_apply.py"));
  // Carried by --from and by merge; an overlay that never asked holds none.
  std::string seeded = (t / "seeded").string(), merged = (t / "merged").string(), other = (t / "other").string();
  ASSERT_EQ(ov_cmd({"add-marker", "--overlay", seeded, "--from", ov, "--target", "pkg.ops:add"}).rc, 0);
  EXPECT_TRUE(fs::exists(fs::path(seeded) / "_overlay_worker_ext.py"));
  ASSERT_EQ(ov_cmd({"add-marker", "--overlay", other, "--target", "pkg.ops:add"}).rc, 0);
  EXPECT_FALSE(fs::exists(fs::path(other) / "_overlay_worker_ext.py"));
  ASSERT_EQ(ov_cmd({"merge", "--overlay", merged, "--with", other}).rc, 0);
  EXPECT_FALSE(fs::exists(fs::path(merged) / "_overlay_worker_ext.py"));
  fs::remove_all(merged);
  ASSERT_EQ(ov_cmd({"merge", "--overlay", merged, "--with", other, "--with", ov}).rc, 0);
  EXPECT_TRUE(fs::exists(fs::path(merged) / "_overlay_apply.py"));
  // And what they are for: a process whose environment lacks the overlay applies it on import.
  Cmd late = py("import sys; sys.path.insert(0, " + json(ov).dump() +
                    "); import _overlay_worker_ext; import pkg.ops; print(pkg.ops.add(1, 2))",
                env_without());
  EXPECT_EQ(late.out, "('fast', 3)\n") << late.err;
}

TEST_F(Py, ModuleInjectedThroughBothImportForms) {
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  Cmd on =
      py("from pkg import sub\nimport pkg.sub\nimport pkg\nprint(sub.value(), pkg.sub.value(), pkg.sub is sub, "
         "getattr(sub, '__overlay_injected__', False))",
         env_with(ov));
  EXPECT_EQ(on.out, "patched patched True True\n") << on.err;
  EXPECT_NE(on.err.find("[overlay] injected module pkg.sub <- " + ov + "/_patched/pkg.sub.py"), std::string::npos);
  Cmd off = py("from pkg import sub\nprint(sub.value())", env_without());
  EXPECT_EQ(off.out, "original\n");
  EXPECT_EQ(off.err, "");
}

TEST_F(Py, RebindTakesEffectAndDisappearsOffPythonpath) {
  Cmd a = ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops", "--impl-attr",
                  "fast_add", "--impl-file", (t / "fast_ops.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.out.find("add-rebind pkg.ops:add -> fast_ops.fast_add"), std::string::npos);
  ASSERT_EQ(ov_cmd({"monkeypatch", "--overlay", ov, "--target", "pkg.ops:K.m", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_m"})
                .rc,
            0);
  Cmd on = py("from pkg.ops import add, K\nprint(add(1, 2), K().m())", env_with(ov));
  EXPECT_EQ(on.out, "('fast', 3) fast-m\n") << on.err;
  EXPECT_NE(on.err.find("[overlay] rebound pkg.ops:add -> fast_ops.fast_add"), std::string::npos);
  EXPECT_EQ(py("from pkg.ops import add, K\nprint(add(1, 2), K().m())", env_without()).out, "3 orig-m\n");
  EXPECT_EQ(manifest(ov)["rebinds"].size(), 2u);
  // Same target again replaces the entry.
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_m"})
                .rc,
            0);
  EXPECT_EQ(manifest(ov)["rebinds"].size(), 2u);
}

TEST_F(Py, PatchFindsInstalledFileAndPatchesOverlayCopyOnly) {
  write_file(
      t / "sub.diff",
      "--- a/sub.py\n+++ b/sub.py\n@@ -1,2 +1,2 @@\n def value():\n-    return 'original'\n+    return 'from-diff'\n");
  std::string before = tree_digest(t / "site");
  Cmd a = ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patch", (t / "sub.diff").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(tree_digest(t / "site"), before);
  EXPECT_EQ(py("from pkg import sub; print(sub.value())", env_with(ov)).out, "from-diff\n");
  // --src-file names the source explicitly.
  write_file(t / "other.py", "def value():\n    return 'original'\n");
  ASSERT_EQ(ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patch", (t / "sub.diff").string(),
                    "--src-file", (t / "other.py").string()})
                .rc,
            0);
  EXPECT_EQ(manifest(ov)["modules"].size(), 1u);
}

TEST_F(Py, LegacyCopySubtreeFlags) {
  Cmd a = ov_cmd({"copy-subtree", "--overlay", ov, "--package", "pkg", "--subpath", "sub.py", "--patched-file",
                  (t / "sub_patched.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(manifest(ov)["modules"][0]["module"], "pkg.sub");
  EXPECT_EQ(py("import pkg.sub; print(pkg.sub.value())", env_with(ov)).out, "patched\n");
}

TEST_F(Py, CheckAndPathOnly) {
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  Cmd c = run_overlay({"check", "--module", "pkg.sub"}, t.path(), env_with(ov));
  EXPECT_EQ(c.out, "pkg.sub -> " + ov + "/_patched/pkg.sub.py\nOVERLAY_ACTIVE\n") << c.err;
  c = run_overlay({"check", "--module", "pkg.ops"}, t.path(), env_with(ov));
  EXPECT_EQ(c.out, "pkg.ops -> " + site + "/pkg/ops.py\nINSTALL (overlay not shadowing this module)\n");
  c = run_overlay({"check", "--module", "pkg.sub", "--path-only"}, t.path(), env_without());
  EXPECT_EQ(c.out, site + "/pkg/sub.py\n");
  // A module file placed directly in an overlay (not under _patched/) shadows the install too.
  write_file(t / "ov/shadowed.py", "x = 1\n");
  c = run_overlay({"check", "--module", "shadowed"}, t.path(), env_with(ov));
  EXPECT_EQ(c.out, "shadowed -> " + ov + "/shadowed.py\nINJECTED\n");
  // Issue 62: located as upstream's script does (its own directory first, never the caller's):
  // a shadowed.py where the caller stands is not the module.
  write_file(t / "cwd/shadowed.py", "x = 2\n");
  c = run_overlay({"check", "--module", "shadowed"}, t / "cwd", env_with(ov));
  EXPECT_EQ(c.out, "shadowed -> " + ov + "/shadowed.py\nINJECTED\n") << c.err;
  Cmd missing = run_overlay({"check", "--module", "no.such.module"}, t.path(), env_without());
  EXPECT_EQ(missing.rc, 1);
  EXPECT_EQ(lines(missing.err), 1) << missing.err;
}

TEST_F(Py, BrokenEntriesLogButInterpreterRuns) {
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:nope", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.sub:value", "--impl-module", "missing_impl",
                    "--impl-attr", "f"})
                .rc,
            0);
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.gone", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  fs::remove(t / "ov/_patched/pkg.gone.py");
  Cmd r = py("import pkg.ops, pkg.sub\nprint('still running', pkg.ops.add(1, 1), pkg.sub.value())", env_with(ov));
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "still running 2 original\n");
  EXPECT_NE(r.err.find("[overlay] rebind FAILED pkg.ops:nope: AttributeError"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[overlay] rebind FAILED pkg.sub:value: impl module missing_impl is not importable"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[overlay] module inject FAILED pkg.gone: patched file missing"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("never applied"), std::string::npos) << r.err;  // failed ones are not also "never applied"
  // A corrupt manifest: still runs, says so.
  write_file(t / "ov/_overlay_manifest.json", "{broken");
  Cmd c = py("print('ok')", env_with(ov));
  EXPECT_EQ(c.out, "ok\n");
  EXPECT_NE(c.err.find("[overlay] cannot read manifest"), std::string::npos);
}

TEST_F(Py, DefaultCaptureHookWritesRecords) {
  Cmd a =
      ov_cmd({"add-capture", "--overlay", ov, "--target", "pkg.ops:add", "--out", (t / "cap").string(), "--max", "2"});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(read_file(t / "ov/capture_shapes.py"), read_file(source_dir() / "share/overlay/capture_shapes.py"));
  std::string code =
      "class T:\n    def __init__(s, shape): s.shape = shape; s.dtype = 'float16'\n"
      "    def __add__(s, o): return T(s.shape)\n"
      "import pkg.ops\nfor i in range(4): pkg.ops.add(T((2, 3)), T((2, 3)))\nprint('done')";
  Cmd r = py(code, env_with(ov));
  EXPECT_EQ(r.out, "done\n") << r.err;
  // Without torch, array-likes (a .shape and a .dtype) are described; no oracle file.
  json meta = json::parse(read_file(t / "cap/meta.json"));
  EXPECT_EQ(meta["target"], "pkg.ops:add");
  EXPECT_EQ(meta["total_calls_observed"], 4);
  ASSERT_EQ(meta["num_cases"], 1);  // one distinct signature
  EXPECT_EQ(meta["cases"][0]["input_shapes"], json::parse("[[2, 3], [2, 3]]"));
  EXPECT_EQ(meta["cases"][0]["input_dtypes"], json::parse(R"(["float16"])"));
  EXPECT_EQ(meta["shape_counts"][0]["count"], 4);
}

TEST_F(Py, FromComposesLiveStackPlusOneEntry) {
  std::string live = (t / "live").string(), cand = (t / "cand").string();
  ASSERT_EQ(ov_cmd({"add-module", "--overlay", live, "--module", "pkg.sub", "--patched-file",
                    (t / "sub_patched.py").string()})
                .rc,
            0);
  write_file(t / "live_native/k.cpp", "orig\n");
  write_file(t / "k2.cpp", "new\n");
  ASSERT_EQ(ov_cmd({"add-native", "--overlay", live, "--target", (t / "live_native/k.cpp").string(), "--patched-file",
                    (t / "k2.cpp").string()})
                .rc,
            0);
  Cmd a = ov_cmd({"add-rebind", "--overlay", cand, "--from", live, "--target", "pkg.ops:add", "--impl-module",
                  "fast_ops", "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  json m = manifest(cand);
  EXPECT_EQ(m["modules"].size(), 1u);
  EXPECT_EQ(m["rebinds"].size(), 1u);
  EXPECT_TRUE(m["natives"].empty());
  EXPECT_FALSE(fs::exists(t / "cand/_native_backup"));
  EXPECT_EQ(py("from pkg import sub, ops\nprint(sub.value(), ops.add(1, 2))", env_with(cand)).out,
            "patched ('fast', 3)\n");
  EXPECT_EQ(py("from pkg import sub, ops\nprint(sub.value(), ops.add(1, 2))", env_with(live)).out, "patched 3\n");
  EXPECT_EQ(ov_cmd({"revert", "--overlay", live}).rc, 0);
}

TEST_F(Py, MixedPythonAndNativeRoundTrip) {
  write_file(t / "inst/k.cpp", "orig\n");
  write_file(t / "k2.cpp", "new\n");
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  ASSERT_EQ(ov_cmd({"add-native", "--overlay", ov, "--target", (t / "inst/k.cpp").string(), "--patched-file",
                    (t / "k2.cpp").string()})
                .rc,
            0);
  json m = manifest(ov);
  EXPECT_EQ(m["modules"].size(), 1u);
  EXPECT_EQ(m["natives"].size(), 1u);
  ASSERT_EQ(ov_cmd({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(read_file(t / "inst/k.cpp"), "orig\n");
  m = manifest(ov);
  EXPECT_EQ(m["modules"].size(), 1u);
  EXPECT_TRUE(m["natives"].empty());
  EXPECT_EQ(py("from pkg import sub; print(sub.value())", env_with(ov)).out, "patched\n");
}

TEST_F(Py, SitecustomizeRegeneratedManifestKept) {
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  std::string ours = read_file(t / "ov/sitecustomize.py");
  // An older generation (this tool's format 1, from git history) is regenerated.
  Cmd old = run({"git", "-C", source_dir().string(), "show", "8f4c862:share/overlay/sitecustomize.py"});
  if (old.rc != 0) GTEST_SKIP() << "no git history here: " << old.err;
  write_file(t / "ov/sitecustomize.py", old.out);
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  EXPECT_EQ(read_file(t / "ov/sitecustomize.py"), ours);
  EXPECT_EQ(manifest(ov)["modules"].size(), 1u);
  EXPECT_EQ(manifest(ov)["rebinds"].size(), 1u);
}

TEST_F(Py, BadInputChangesNothing) {
  write_file(t / "bad.diff", "--- a/sub.py\n+++ b/sub.py\n@@ -1 +1 @@\n-nothing like this\n+x\n");
  std::string p = (t / "sub_patched.py").string();
  std::vector<std::vector<std::string>> cases = {
      {"add-module", "--overlay", ov, "--module", "pkg..sub", "--patched-file", p},
      {"add-module", "--overlay", ov, "--module", "9pkg", "--patched-file", p},
      {"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "missing.py").string()},
      {"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "site").string()},
      {"add-module", "--overlay", ov},
      {"add-module", "--overlay", ov, "--package", "pkg"},
      {"add-module", "--overlay", ov, "--module", "pkg.nothere"},
      {"add-module", "--overlay", ov, "--module", "pkg.nothere", "--patch", (t / "bad.diff").string()},
      {"add-module", "--overlay", ov, "--module", "pkg.sub", "--patch", (t / "bad.diff").string()},
      {"add-module", "--overlay", ov, "--module", "pkg.sub", "--src-file", (t / "missing.py").string()},
      {"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", p, "--from", p},
      {"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops", "--impl-attr", "fast_add",
       "--impl-dir", (t / "missing").string()},
      {"add-rebind", "--overlay", ov, "--target", "pkg.ops.add", "--impl-module", "fast_ops", "--impl-attr",
       "fast_add"},
      {"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops", "--impl-attr", "fast_add",
       "--impl-file", (t / "missing.py").string()},
      {"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast-ops", "--impl-attr",
       "fast_add"},
      {"add-capture", "--overlay", ov, "--target", "pkg.ops", "--out", (t / "cap").string()},
      {"add-capture", "--overlay", ov, "--target", "pkg.ops:add", "--out", (t / "cap").string(), "--max", "0"},
      {"add-capture", "--overlay", ov, "--target", "pkg.ops:add", "--out", (t / "cap").string(), "--capture-file",
       (t / "nope.py").string()},
      {"check", "--module", "bad name"},
  };
  expect_refused_unchanged(cases, t.path(), [&](const std::vector<std::string>& c) { return ov_cmd(c); });
}

// Issue 11, item 4: an entry whose module is never imported is reported at exit, and one that
// cannot apply at all is reported at start-up, before the program runs.
TEST_F(Py, NeverSilentlyInert) {
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()})
                .rc,
            0);
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkgg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add"})
                .rc,
            0);
  ASSERT_EQ(
      ov_cmd({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()})
          .rc,
      0);
  Cmd r = py("import sys\nsys.stderr.write('program start\\n')\nprint('ran')", env_with(ov));
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "ran\n");
  auto at = [&](const std::string& s) { return r.err.find(s); };
  ASSERT_NE(at("[overlay] rebind FAILED pkgg.ops:add: target package pkgg is not importable"), std::string::npos)
      << r.err;
  EXPECT_LT(at("rebind FAILED pkgg.ops:add"), at("program start")) << r.err;
  // It imported none of the targets (a helper process): nothing said at exit (issue 40).
  EXPECT_EQ(at("never applied"), std::string::npos) << r.err;
  // It imported one: what did not apply in it is said at exit.
  Cmd partial = py("import pkg.ops\nimport sys\nsys.stderr.write('program end\\n')", env_with(ov));
  EXPECT_GT(partial.err.find("[overlay] module pkg.sub never applied: module never imported"),
            partial.err.find("program end"))
      << partial.err;
  EXPECT_EQ(partial.err.find("pkg.ops:add never applied"), std::string::npos) << partial.err;
  EXPECT_EQ(partial.err.find("pkgg.ops:add never applied"), std::string::npos) << partial.err;
  // Imported: applied, and nothing said at exit.
  Cmd used = py("import pkg.ops, pkg.sub\nprint(pkg.ops.add(1, 2), pkg.sub.value())", env_with(ov));
  EXPECT_EQ(used.out, "('fast', 3) patched\n") << used.err;
  EXPECT_EQ(used.err.find("pkg.ops:add never applied"), std::string::npos) << used.err;
  EXPECT_EQ(used.err.find("pkg.sub never applied"), std::string::npos) << used.err;
}

// --count-calls: the wrapper keeps name, docstring and signature; two processes calling the
// rebound function 3 times each give calls 6 in 2 processes, in status text and --json.
TEST_F(Py, CountCallsAcrossProcesses) {
  write_file(t / "fast_ops.py", "def fast_add(a, b=2):\n    \"\"\"fast doc\"\"\"\n    return ('fast', a + b)\n");
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string(), "--count-calls"})
                .rc,
            0);
  EXPECT_EQ(manifest(ov)["rebinds"][0]["count_calls"], true);
  Cmd before = ov_cmd({"--json", "status", "--overlay", ov});
  ASSERT_EQ(before.rc, 0) << before.err;
  EXPECT_EQ(json::parse(before.out)["python"][0]["calls"], 0);
  EXPECT_EQ(json::parse(before.out)["python"][0]["applied_processes"], 0);
  std::string code =
      "import inspect, pkg.ops\n"
      "for i in range(3): pkg.ops.add(i)\n"
      "f = pkg.ops.add\n"
      "print(f.__name__, f.__doc__, inspect.signature(f))\n";
  for (int i = 0; i < 2; ++i) {
    Cmd r = py(code, env_with(ov));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "fast_add fast doc (a, b=2)\n");
  }
  py("import pkg.sub", env_with(ov));  // a third process that never imports pkg.ops: not counted
  Cmd s = ov_cmd({"--json", "status", "--overlay", ov});
  ASSERT_EQ(s.rc, 0) << s.err;
  json p = json::parse(s.out)["python"][0];
  EXPECT_EQ(p["calls"], 6) << p;
  EXPECT_EQ(p["applied_processes"], 2) << p;
  Cmd text = ov_cmd({"status", "--overlay", ov});
  EXPECT_NE(text.out.find("rebind pkg.ops:add -> fast_ops.fast_add  applied in 2 process(es), 6 call(s)"),
            std::string::npos)
      << text.out;
  // Without --count-calls: applied counted, calls null.
  ASSERT_EQ(ov_cmd({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                    "--impl-attr", "fast_add"})
                .rc,
            0);
  py("import pkg.ops\npkg.ops.add(1)", env_with(ov));
  json q = json::parse(ov_cmd({"--json", "status", "--overlay", ov}).out)["python"][0];
  EXPECT_TRUE(q["calls"].is_null()) << q;
  EXPECT_EQ(q["applied_processes"], 3) << q;
}

// Where bytecode writing is off (PYTHONDONTWRITEBYTECODE=1, as in many serving images, the tool's
// environment included) no process compiles the runtime: the tool wrote its bytecode when it wrote
// the overlay (issue 51), into the runtime's cache, never under the overlay (issue 62: a
// source-proving launch refuses any .pyc there). Where it is on, the tool writes none (the first
// process does); OVERLAY_PRECOMPILE=1 asks, =0 refuses.
TEST_F(Py, NoProcessCompilesTheRuntimeWhereBytecodeWritingIsOff) {
  const std::vector<std::string> rebind = add_fast_add();
  std::vector<std::string> off = env_without(), bytecode_on = env_without();
  off.push_back("PYTHONDONTWRITEBYTECODE=1");
  bytecode_on.push_back("PYTHONDONTWRITEBYTECODE=");  // empty is unset, for Python and for the tool
  ASSERT_EQ(run_overlay(rebind, t.path(), bytecode_on).rc, 0);
  EXPECT_TRUE(cached("code").empty()) << "compiled where processes compile their own";
  std::vector<std::string> asked = bytecode_on;
  asked.push_back("OVERLAY_PRECOMPILE=1");
  ASSERT_EQ(run_overlay(rebind, t.path(), asked).rc, 0);
  EXPECT_FALSE(cached("code").empty());
  fs::remove_all(fs::path(cache) / "runtime");
  off.push_back("OVERLAY_PRECOMPILE=0");
  ASSERT_EQ(run_overlay(rebind, t.path(), off).rc, 0);
  EXPECT_TRUE(cached("code").empty());
  off.pop_back();
  ASSERT_EQ(run_overlay(rebind, t.path(), off).rc, 0);
  EXPECT_FALSE(fs::exists(t / "ov/__pycache__")) << "bytecode under the overlay";
  // No process compiles the runtime (a bootstrap counts compile() calls of its text while it runs
  // the overlay's sitecustomize.py); one with an empty cache does, as a check that this can fail.
  std::vector<std::string> env = env_with(ov);
  env.push_back("PYTHONDONTWRITEBYTECODE=1");
  write_file(t / "boot/sitecustomize.py",
             "import builtins, sys\nfrom importlib.machinery import PathFinder\n"
             "from importlib.util import module_from_spec\n"
             "n = [0]\nreal = builtins.compile\n"
             // The runtime's own text compiled (not the file holding it as a literal).
             "def counted(src, *a, **k):\n"
             "    b = src if isinstance(src, bytes) else str(src).encode()\n"
             "    n[0] += b'def _overlay_main' in b and b'_OVERLAY_RUNTIME = r' not in b\n"
             "    return real(src, *a, **k)\n"
             "builtins.compile = counted\n"
             "spec = PathFinder.find_spec('sitecustomize', sys.path[1:])\n"
             "m = module_from_spec(spec)\nsys.modules['sitecustomize'] = m\n"
             "spec.loader.exec_module(m)\nbuiltins.compile = real\nprint('compiles', n[0])\n");
  std::vector<std::string> booted = env;
  booted[0] = "PYTHONPATH=" + (t / "boot").string() + ":" + ov + ":" + site;
  Cmd on = run({"python3", "-c", "from pkg.ops import add\nprint(add(1, 2))"}, t.path(), booted);
  EXPECT_EQ(on.out, "compiles 0\n('fast', 3)\n") << on.err;
  std::vector<std::string> empty_cache = booted;
  empty_cache.push_back("OVERLAY_CACHE_DIR=" + (t / "empty-cache").string());
  EXPECT_EQ(run({"python3", "-c", "pass"}, t.path(), empty_cache).out, "compiles 1\n");
  // The start-up plan for this manifest is there too: a process that cannot parse JSON at all
  // still applies it.
  EXPECT_FALSE(cached("plan").empty());
  // A second add changes the manifest: the plan follows it.
  ASSERT_EQ(run_overlay({"add-rebind", "--overlay", ov, "--target", "pkg.ops:K.m", "--impl-module", "fast_ops",
                         "--impl-attr", "fast_m"},
                        t.path(), off)
                .rc,
            0);
  EXPECT_EQ(py("from pkg.ops import add, K\nprint(add(1, 2), K().m())", env).out, "('fast', 3) fast-m\n");
  EXPECT_FALSE(fs::exists(t / "ov/__pycache__")) << "bytecode under the overlay";
}

// A process without the json module (Debian's python3-minimal, slim images: neither json nor its
// C scanner _json) applies the overlay, with the start-up plan the tool wrote and without it.
TEST_F(Py, AProcessWithoutAJsonModuleAppliesTheOverlay) {
  std::vector<std::string> tool_env = env_without();
  tool_env.push_back("PYTHONDONTWRITEBYTECODE=1");  // the tool writes the plan
  ASSERT_EQ(run_overlay({"add-rebind", "--overlay", ov, "--target", "pkg.ops:add", "--impl-module", "fast_ops",
                         "--impl-attr", "fast_add", "--impl-file", (t / "fast_ops.py").string()},
                        t.path(), tool_env)
                .rc,
            0);
  write_file(t / "nojson/json/__init__.py", "raise ImportError(\"No module named 'json'\")\n");
  write_file(t / "nojson/_json.py", "raise ImportError(\"No module named '_json'\")\n");
  std::vector<std::string> env = {"PYTHONPATH=" + (t / "nojson").string() + ":" + ov + ":" + site,
                                  "PYTHONDONTWRITEBYTECODE=1"};
  const std::string code =
      "from pkg.ops import add\nprint(add(1, 2))\ntry:\n    import json\nexcept ImportError:\n    print('no json')\n";
  Cmd with_plan = py(code, env);
  EXPECT_EQ(with_plan.out, "('fast', 3)\nno json\n") << with_plan.err;
  fs::remove(cached("plan"));
  Cmd parsed = py(code, env);
  EXPECT_EQ(parsed.out, "('fast', 3)\nno json\n") << parsed.err;
  EXPECT_EQ(parsed.err.find("cannot read manifest"), std::string::npos) << parsed.err;
  // Its parse is json's: a manifest with escapes, nesting and numbers reads the same.
  json m = manifest(ov);
  m["note"] = {{"text", "caf\u00e9 \"q\" \\ \n \U0001F600"}, {"n", {1, -2.5, 3e2, true, false, nullptr}}};
  write_file(t / "ov/_overlay_manifest.json", m.dump(2));
  Cmd again = py(code, env);
  EXPECT_EQ(again.out, "('fast', 3)\nno json\n") << again.err;
}
