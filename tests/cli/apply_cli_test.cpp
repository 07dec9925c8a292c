// `overlay apply`: one diff touching a Python wrapper and the C++ kernel behind it, on a small
// CMake + Ninja install with a Python package in front; real python3, real GNU patch, real build.
#include <iostream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> with_json(std::vector<std::string> a) {
  a.insert(a.begin(), "--json");
  return a;
}

struct Apply : ::testing::Test {
  TempDir t;
  fs::path inst = t / "inst", build = inst / "build", ov = t / "ov";
  std::string ops_py, kernel_cpp;

  Apply() {
    kernel_cpp = "extern \"C\" int kernel() { return 4; }\n";
    ops_py = "import ctypes\n_lib = ctypes.CDLL(\"" + (build / "libkernel.so").string() +
             "\")\n\n"
             "def value():\n    return (\"orig\", _lib.kernel())\n";
    write_file(inst / "CMakeLists.txt",
               "cmake_minimum_required(VERSION 3.16)\nproject(k CXX)\nadd_library(kernel SHARED csrc/kernel.cpp)\n");
    write_file(inst / "csrc/kernel.cpp", kernel_cpp);
    write_file(inst / "pkg/__init__.py", "");
    write_file(inst / "pkg/ops.py", ops_py);
    write_file(inst / "README.txt", "docs\n");
    if (run({"cmake", "-S", inst.string(), "-B", build.string(), "-G", "Ninja"}).rc != 0 ||
        run({"cmake", "--build", build.string()}).rc != 0)
      throw std::runtime_error("cannot build the fixture");
  }

  // A git-style diff (a/ b/ prefixes) of `rel` from its installed text to `patched`.
  std::string diff_of(const std::string& rel, const std::string& patched) {
    write_file(t / "new" / rel, patched);
    Cmd d = run({"diff", "-u", "--label", "a/" + rel, "--label", "b/" + rel, (inst / rel).string(),
                 (t / "new" / rel).string()});
    return d.out;
  }
  fs::path write_diff(const std::string& name, const std::string& text) {
    write_file(t / name, text);
    return t / name;
  }
  fs::path mixed_diff() {
    std::string py = ops_py;
    py.replace(py.find("\"orig\""), 6, "\"new\"");
    return write_diff("mixed.diff", diff_of("pkg/ops.py", py) +
                                        diff_of("csrc/kernel.cpp", "extern \"C\" int kernel() { return 7; }\n"));
  }
  std::vector<std::string> apply_args(const fs::path& diff, const std::vector<std::string>& more = {}) {
    std::vector<std::string> a = {"apply",
                                  "--overlay",
                                  ov.string(),
                                  "--patch",
                                  diff.string(),
                                  "--patch-root",
                                  inst.string(),
                                  "--artifact",
                                  (build / "libkernel.so").string(),
                                  "--build-cmd",
                                  "cmake --build " + build.string()};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  // What a Python process computes, with the overlay on PYTHONPATH or not.
  std::string value(bool with_overlay) {
    std::string path = (with_overlay ? ov.string() + ":" : std::string()) + inst.string();
    Cmd c = run({"python3", "-c", "import pkg.ops; print(pkg.ops.value())"}, t.path(), {"PYTHONPATH=" + path});
    return c.rc == 0 ? trim(c.out) : "error: " + c.err;
  }
  // The install as it matters: sources, the Python package, the built library.
  std::string install_digest() {
    return tree_digest(inst / "csrc") + tree_digest(inst / "pkg") + file_sha256(build / "libkernel.so") +
           read_file(inst / "README.txt");
  }
  json manifest() { return json::parse(read_file(ov / "_overlay_manifest.json")); }
};

}  // namespace

TEST_F(Apply, RoutesPerFileAndRevertsByPatchId) {
  std::string before = install_digest();
  ASSERT_EQ(value(false), "('orig', 4)");
  Cmd a = run_overlay(with_json(apply_args(mixed_diff())));
  ASSERT_EQ(a.rc, 0) << a.err;
  json doc = json::parse(a.out);
  std::cout << "APPLY --json:\n" << doc.dump(2) << std::endl;
  std::string id = doc["patch_id"];
  EXPECT_EQ(doc["python"][0]["module"], "pkg.ops");
  EXPECT_EQ(doc["native"]["files"],
            json::parse("[{\"path\": \"" + (inst / "csrc/kernel.cpp").string() + "\", \"change\": \"modify\"}]"));
  EXPECT_EQ(doc["native"]["build"]["ok"], true);
  json m = manifest();
  ASSERT_EQ(m["natives"].size(), 1u);
  ASSERT_EQ(m["modules"].size(), 1u);
  EXPECT_EQ(m["natives"][0]["patch_id"], id);
  EXPECT_EQ(m["modules"][0]["patch_id"], id);
  // Python is non-invasive: only a process with the overlay sees the new wrapper; the kernel is
  // rebuilt in place, so every process sees 7.
  EXPECT_EQ(value(true), "('new', 7)");
  EXPECT_EQ(value(false), "('orig', 7)");
  EXPECT_EQ(read_file(inst / "pkg/ops.py"), ops_py);  // the installed .py is untouched
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", ov.string()}).rc, 0);
  Cmd st = run_overlay({"status", "--overlay", ov.string()});
  std::cout << "STATUS:\n" << st.out << std::endl;
  EXPECT_NE(st.out.find("patch " + id + ": 1 native, 1 python (revert --patch-id " + id + ")"), std::string::npos)
      << st.out;
  EXPECT_EQ(json::parse(run_overlay({"--json", "status", "--overlay", ov.string()}).out)["patches"][0]["python"],
            json({"pkg.ops"}));

  Cmd r = run_overlay({"revert", "--overlay", ov.string(), "--patch-id", id});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "revert: removed patch " + id + " (1 native, 1 python) from " + ov.string() + "\n");
  EXPECT_EQ(install_digest(), before);
  m = manifest();
  EXPECT_TRUE(m["natives"].empty());
  EXPECT_TRUE(m["modules"].empty());
  EXPECT_FALSE(fs::exists(ov / "_patched/pkg.ops.py"));
  EXPECT_EQ(value(true), "('orig', 4)");
  Cmd again = run_overlay({"revert", "--overlay", ov.string(), "--patch-id", id});
  EXPECT_EQ(again.rc, 1);
  EXPECT_NE(again.err.find("no entry of patch " + id), std::string::npos) << again.err;
}

TEST_F(Apply, FailingBuildWithRevertOnFailureLeavesNothing) {
  std::string before = install_digest();
  auto args = apply_args(mixed_diff(), {"--revert-on-failure", "--build-cmd", "sh -c 'exit 3'"});
  Cmd a = run_overlay(args);
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("apply: build failed (sh -c 'exit 3') rc=3"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("no entry of it is left"), std::string::npos) << a.err;
  EXPECT_EQ(install_digest(), before);
  json m = manifest();
  EXPECT_TRUE(m["natives"].empty());
  EXPECT_TRUE(m["modules"].empty());
  EXPECT_FALSE(fs::exists(ov / "_patched/pkg.ops.py"));
  EXPECT_TRUE(fs::is_empty(ov / "_native_backup"));
}

TEST_F(Apply, PlainRevertAndGcTakeThePatchWhole) {
  for (std::string how : {"revert", "gc-stale"}) {
    std::string before = install_digest();
    ASSERT_EQ(run_overlay(apply_args(mixed_diff())).rc, 0);
    Cmd r = how == "revert" ? run_overlay({"revert", "--overlay", ov.string()})
                            : run_overlay({"gc-stale", "--root", t.path().string()});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(install_digest(), before) << how;
    EXPECT_TRUE(manifest()["modules"].empty()) << how << ": the patch's Python part went with its native part";
  }
}

TEST_F(Apply, PythonOnlyPatch) {
  std::string py = ops_py;
  py.replace(py.find("\"orig\""), 6, "\"py-only\"");
  fs::path d = write_diff("py.diff", diff_of("pkg/ops.py", py));
  Cmd a = run_overlay({"apply", "--overlay", ov.string(), "--patch", d.string(), "--patch-root", inst.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.out.find("(native=0 python=1 build=no)"), std::string::npos) << a.out;
  EXPECT_EQ(value(true), "('py-only', 4)");
  std::string id = manifest()["modules"][0]["patch_id"];
  EXPECT_TRUE(manifest()["natives"].empty());
  ASSERT_EQ(run_overlay({"revert", "--overlay", ov.string(), "--patch-id", id}).rc, 0);
  EXPECT_TRUE(manifest()["modules"].empty());
  EXPECT_EQ(value(true), "('orig', 4)");
}

TEST_F(Apply, RefusedBeforeAnythingChanges) {
  fs::path mixed = mixed_diff();
  fs::path txt = write_diff("txt.diff", read_file(mixed) + diff_of("README.txt", "new docs\n"));
  fs::path bad = write_diff(
      "bad.diff", "--- a/csrc/kernel.cpp\n+++ b/csrc/kernel.cpp\n@@ -1 +1 @@\n-int nothing_like_this();\n+int x();\n");
  expect_refused_unchanged(
      {apply_args(txt),
       with(apply_args(mixed), {"--python-root", (inst / "csrc").string()}),
       apply_args(bad),
       {"apply", "--overlay", ov.string(), "--patch", mixed.string()},
       {"apply", "--overlay", ov.string(), "--patch-root", inst.string(), "--patch", (t / "missing.diff").string()}},
      t.path(), [](const std::vector<std::string>& args) { return run_overlay(args); });
  EXPECT_NE(
      run_overlay(apply_args(txt)).err.find("neither a compiled source nor Python: " + (inst / "README.txt").string()),
      std::string::npos);
  EXPECT_NE(run_overlay(with(apply_args(mixed), {"--python-root", (inst / "csrc").string()}))
                .err.find(".py file outside --python-root"),
            std::string::npos);
  // A module that already has an overlay entry: refused too, the overlay as it was.
  write_file(t / "other.py", "def value():\n    return 'x'\n");
  ASSERT_EQ(run_overlay({"add-module", "--overlay", ov.string(), "--module", "pkg.ops", "--patched-file",
                         (t / "other.py").string()})
                .rc,
            0);
  expect_refused_unchanged({apply_args(mixed)}, t.path(),
                           [](const std::vector<std::string>& args) { return run_overlay(args); });
}
