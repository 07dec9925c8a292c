// Two-way compatibility with the real overlay_setup.py (SPEC: "Compatibility with
// overlay_setup.py"), run from ../shared/reference/ beside the checkout:
//   1. whatever it leaves applied, finished or SIGKILLed at any step, `overlay revert` and
//      `overlay gc-stale` restore byte-exact;
//   2. on whatever `overlay` writes, its `revert` and `gc-stale` either restore byte-exact or stop,
//      before changing anything of the entry they cannot restore, so `overlay revert` finishes.
// Every check compares the whole install tree (paths, types, modes, link targets, bytes). Each case
// prints one "MATRIX |" line: shape | direction | outcome.
#include <cstdlib>
#include <functional>
#include <iostream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

fs::path reference_script() {
  if (const char* env = std::getenv("OVERLAY_REFERENCE_SCRIPT"); env && *env) return env;
  return shared_reference() / "overlay_setup.py";
}

// OVERLAY_REFERENCE_SCRIPT names another copy; otherwise it is shared/reference's, and a clone
// without it skips (fails in CI, OVERLAY_REQUIRE_SHARED).
#define REQUIRE_REFERENCE()                                                                                     \
  if (std::getenv("OVERLAY_REFERENCE_SCRIPT") == nullptr) OVERLAY_REQUIRE_SHARED_REFERENCE("overlay_setup.py"); \
  if (!fs::is_regular_file(reference_script())) FAIL() << "overlay_setup.py not found at " << reference_script()

// Failed checks so far in the running test: a case failed when this grew during it.
int failures() {
  const auto* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
  return n;
}

void matrix(const std::string& shape, const std::string& direction, const std::string& outcome, int failures_before) {
  std::cout << "MATRIX | " << shape << " | " << direction << " | "
            << (failures() > failures_before ? "FAILED" : outcome) << std::endl;
}

// A build the tools run as the install's own: rewrites each file argument and recreates each
// directory argument (a trailing "/") with a new object in it. Split alike by shlex and by overlay.
std::string build_cmd(const std::vector<std::string>& items) {
  std::string cmd =
      "sh -c 'for f in \"$@\"; do case $f in */) mkdir -p \"$f\" && echo rebuilt > \"$f/k.o\";; "
      "*) printf rebuilt > \"$f\";; esac; done' sh";
  for (const auto& i : items) cmd += " " + i;
  return cmd;
}

struct Interop : ::testing::Test {
  TempDir t;
  fs::path inst = t / "inst", ovs = t / "ovs", ov = t / "ovs/ov", p = t / "p";
  std::string original;

  Interop() {
    write_file(inst / "src/kernel.cpp", "int kernel() { return 4; }\n");
    write_file(inst / "src/extra.cpp", "int extra() { return 1; }\n");
    write_file(inst / "src/old.cpp", "old\n", 0640);
    // Over 1 MiB: backed up by the kernel's copy, or on a copy-on-write filesystem (ctest -L cow)
    // by a clone that trades places with it.
    write_file(inst / "lib/libk.so", std::string((1u << 20) + 100000, 'A') + "original library\n", 0755);
    write_file(inst / "cache/a/b/deep.bin", "deep entry\n");
    write_file(inst / "cache/tool.sh", "#!/bin/sh\necho hi\n", 0755);
    write_file(inst / "cache/ro.txt", "read only\n", 0444);
    write_file(inst / "cache/ext.so", "original extension\n", 0755);
    write_file(inst / "cache/priv/key", "k\n", 0600);
    fs::create_directories(inst / "cache/empty");
    fs::create_symlink("a/b/deep.bin", inst / "cache/link");
    fs::create_symlink("/nonexistent/target", inst / "cache/dangling");
    fs::permissions(inst / "cache/priv", fs::perms(0700));
    fs::permissions(inst / "cache", fs::perms(0751));
    write_file(inst / "cache2/x.o", "x\n");
    write_file(p / "kernel.cpp", "int kernel() { return 7; }\n");
    write_file(p / "extra.cpp", "int extra() { return 2; }\n");
    write_file(
        p / "kernel.diff",
        "--- a/kernel.cpp\n+++ b/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { return 7; }\n");
    write_file(p / "multi.diff",
               "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { "
               "return 7; }\n"
               "--- a/src/old.cpp\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"
               "--- /dev/null\n+++ b/src/new.cpp\n@@ -0,0 +1 @@\n+new\n");
    write_file(p / "delete.diff",
               "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { "
               "return 7; }\n"
               "--- a/src/old.cpp\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n");
    fs::create_directories(ovs);
    original = tree_digest(inst);
  }

  std::string in(const std::string& rel) const { return (inst / rel).string(); }
  std::string pf(const std::string& rel) const { return (p / rel).string(); }

  // add-native flags for one entry (absolute paths; cwd of the build is the install).
  std::vector<std::string> entry(const std::string& target, const std::string& patched,
                                 const std::vector<std::string>& artifacts, const std::vector<std::string>& caches,
                                 const std::vector<std::string>& built) {
    std::vector<std::string> a = {"--overlay", ov.string(), "--target", in(target)};
    if (patched.size() > 5 && patched.substr(patched.size() - 5) == ".diff")
      a.insert(a.end(), {"--patch", pf(patched)});
    else
      a.insert(a.end(), {"--patched-file", pf(patched)});
    for (const auto& x : artifacts) a.insert(a.end(), {"--artifact", in(x)});
    for (const auto& c : caches) a.insert(a.end(), {"--invalidate-cache", in(c)});
    if (!built.empty()) a.insert(a.end(), {"--build-cmd", build_cmd(built), "--build-cwd", inst.string()});
    return a;
  }

  Cmd py_tool(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {"python3", reference_script().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, t.path(), env);
  }
  Cmd py_add(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), "add-native");
    return py_tool(args, env);
  }
  Cmd ov_add(std::vector<std::string> args) {
    args.insert(args.begin(), "add-native");
    return run_overlay(args, t.path());
  }
  json manifest() { return json::parse(read_file(ov / "_overlay_manifest.json")); }
};

// ---- direction 1: overlay_setup.py writes, overlay reverts ----

struct PyShape {
  std::string name;
  std::function<std::vector<std::vector<std::string>>(Interop&)> adds;
};

std::vector<PyShape> python_shapes() {
  return {
      {"tar cache + existing artifact",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{
             f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"})};
       }},
      {"new artifact + missing cache dir",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{
             f.entry("src/kernel.cpp", "kernel.cpp", {"lib/new.so"}, {"jit"}, {"lib/new.so", "jit/"})};
       }},
      {"--patch + two caches",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{
             f.entry("src/kernel.cpp", "kernel.diff", {}, {"cache", "cache2"}, {"cache/", "cache2/"})};
       }},
      {"artifact inside its cache",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{
             f.entry("src/kernel.cpp", "kernel.cpp", {"cache/ext.so"}, {"cache"}, {"cache/", "cache/ext.so"})};
       }},
      {"two entries",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{
             f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
             f.entry("src/extra.cpp", "extra.cpp", {"lib/libk.so", "lib/new.so"}, {"cache2", "jit"},
                     {"lib/libk.so", "lib/new.so", "cache2/", "jit/"})};
       }},
      {"no artifact, no cache, no build",
       [](Interop& f) {
         return std::vector<std::vector<std::string>>{f.entry("src/kernel.cpp", "kernel.cpp", {}, {}, {})};
       }},
  };
}

TEST_F(Interop, PythonToolEntriesRevertedByOverlay) {
  REQUIRE_REFERENCE();
  for (const auto& shape : python_shapes()) {
    for (std::string how : {"revert", "gc-stale"}) {
      SCOPED_TRACE(shape.name + " / overlay " + how);
      int f0 = failures();
      fs::remove_all(ov);
      for (const auto& add : shape.adds(*this)) {
        Cmd a = py_add(add);
        ASSERT_EQ(a.rc, 0) << a.err;
      }
      ASSERT_NE(tree_digest(inst), original);
      Cmd r = how == "revert" ? run_overlay({"revert", "--overlay", ov.string()})
                              : run_overlay({"gc-stale", "--root", ovs.string()});
      EXPECT_EQ(r.rc, 0) << r.out << r.err;
      EXPECT_EQ(tree_digest(inst), original);
      EXPECT_TRUE(manifest()["natives"].empty());
      EXPECT_EQ(run_overlay({"status", "--overlay", ov.string(), "--check-clean"}).rc, 0);
      matrix(shape.name, "overlay_setup.py add-native -> overlay " + how, "restored", f0);
    }
    // Both tools' revert agree: the Python tool's own revert of the same shape ends where ours does.
    fs::remove_all(ov);
    for (const auto& add : shape.adds(*this)) ASSERT_EQ(py_add(add).rc, 0);
    ASSERT_EQ(py_tool({"revert", "--overlay", ov.string()}).rc, 0);
    EXPECT_EQ(tree_digest(inst), original) << shape.name << ": overlay_setup.py's own revert";
  }
}

// A real SIGKILL before each step the Python tool takes (and a torn manifest write), then
// overlay revert (odd steps) or gc-stale (even steps).
TEST_F(Interop, PythonToolKilledAtEveryStep) {
  REQUIRE_REFERENCE();
  fs::path driver = source_dir() / "tests/interop/kill_at.py";
  std::vector<std::string> add = {"add-native"};
  auto args = entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"});
  add.insert(add.end(), args.begin(), args.end());
  auto run_killed = [&](int n, bool torn) {
    std::vector<std::string> argv = {"python3", driver.string(), reference_script().string()};
    argv.insert(argv.end(), add.begin(), add.end());
    return run(argv, t.path(),
               {"KILL_AT=" + std::to_string(n), std::string("KILL_TORN=") + (torn ? "1" : "0"),
                "KILL_LOG=" + (t / "steps").string()});
  };
  Cmd full = run_killed(0, false);
  ASSERT_EQ(full.rc, 0) << full.err;
  std::vector<std::string> steps;
  {
    std::string s = read_file(t / "steps"), line;
    for (char c : s)
      if (c == '\n')
        steps.push_back(line), line.clear();
      else
        line += c;
  }
  ASSERT_GE(steps.size(), 7u);  // copy2 x2, json.dump x2, tar members, copy2 (swap), rmtree, build
  ASSERT_EQ(py_tool({"revert", "--overlay", ov.string()}).rc, 0);
  ASSERT_EQ(tree_digest(inst), original);
  int cases = 0;
  for (std::size_t n = 1; n <= steps.size(); ++n) {
    for (bool torn : {false, true}) {
      if (torn && steps[n - 1] != "json.dump") continue;
      std::string name = "killed before step " + std::to_string(n) + " (" + steps[n - 1] +
                         (torn ? ", manifest half-written" : "") + ")";
      SCOPED_TRACE(name);
      int f0 = failures();
      fs::remove_all(ov);
      fs::remove(t / "steps");
      Cmd k = run_killed(static_cast<int>(n), torn);
      ASSERT_EQ(k.rc, 128 + 9) << k.err;
      bool parses = true;
      try {
        manifest();
      } catch (const std::exception&) {
        parses = false;  // the Python tool writes its manifest in place: a kill can tear it
      }
      std::string how = n % 2 ? "revert" : "gc-stale";
      Cmd r = how == "revert" ? run_overlay({"revert", "--overlay", ov.string()})
                              : run_overlay({"gc-stale", "--root", ovs.string()});
      // Whatever the state, the install comes back; a torn manifest can only be one written
      // before the install was touched, and it is reported, never guessed at.
      EXPECT_EQ(tree_digest(inst), original);
      if (parses) {
        EXPECT_EQ(r.rc, 0) << r.out << r.err;
        if (fs::exists(ov / "_overlay_manifest.json")) {
          EXPECT_TRUE(manifest()["natives"].empty());
        }
      } else if (how == "revert") {
        EXPECT_NE(r.rc, 0);
        EXPECT_NE(r.err.find("manifest"), std::string::npos) << r.err;
      }
      matrix("overlay_setup.py add-native " + name, "overlay " + how,
             parses ? "restored" : "install untouched; torn manifest reported", f0);
      ++cases;
    }
  }
  EXPECT_GE(cases, 9);
}

// The build the Python tool runs kills the tool after writing half its outputs.
TEST_F(Interop, PythonToolKilledByItsBuild) {
  REQUIRE_REFERENCE();
  for (std::string how : {"revert", "gc-stale"}) {
    int f0 = failures();
    fs::remove_all(ov);
    auto args = entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so", "cache/ext.so"}, {"cache", "cache2"}, {});
    args.insert(
        args.end(),
        {"--build-cmd", "sh -c 'printf half > lib/libk.so; mkdir -p cache; echo o > cache/k.o; kill -9 $PPID; sleep 5'",
         "--build-cwd", inst.string()});
    Cmd a = py_add(args);
    ASSERT_EQ(a.rc, 128 + 9) << a.err;
    Cmd r = how == "revert" ? run_overlay({"revert", "--overlay", ov.string()})
                            : run_overlay({"gc-stale", "--root", ovs.string()});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(tree_digest(inst), original) << how;
    matrix("overlay_setup.py add-native killed by its own build", "overlay " + how, "restored", f0);
  }
}

// ---- direction 2: overlay writes, overlay_setup.py reverts ----

struct OvShape {
  std::string name;
  std::function<std::vector<std::vector<std::string>>(Interop&)> adds;
  bool python_restores;  // else: it stops before the entry, and overlay revert finishes
};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<OvShape> overlay_shapes() {
  using V = std::vector<std::vector<std::string>>;
  const std::vector<std::string> tar = {"--cache-snapshot", "tar"}, move = {"--cache-snapshot", "move"};
  const std::vector<std::string> aside = {"--cache-snapshot", "aside"};
  return {
      {"tar cache + existing artifact",
       [=](Interop& f) {
         return V{
             with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}), tar)};
       },
       true},
      {"--cache-snapshot move (renamed aside since issue 62)",
       [=](Interop& f) {
         return V{with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
                       move)};
       },
       false},
      {"auto cache (renamed aside)",
       [=](Interop& f) {
         return V{f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"})};
       },
       false},
      {"cache renamed aside (what auto picks across filesystems)",
       [=](Interop& f) {
         return V{with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
                       aside)};
       },
       false},
      {"new artifact + missing cache dir",
       [=](Interop& f) {
         return V{f.entry("src/kernel.cpp", "kernel.cpp", {"lib/new.so"}, {"jit"}, {"lib/new.so", "jit/"})};
       },
       true},
      {"several targets, tar caches",
       [=](Interop& f) {
         auto a = f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache", "cache2"},
                          {"lib/libk.so", "cache/", "cache2/"});
         return V{with(with(a, {"--target", f.in("src/extra.cpp"), "--patched-file", f.pf("extra.cpp")}), tar)};
       },
       true},
      {"diff creating and deleting files",
       [=](Interop& f) {
         return V{{"--overlay", f.ov.string(), "--patch", f.pf("multi.diff"), "--patch-root", f.inst.string(),
                   "--invalidate-cache", f.in("cache"), "--cache-snapshot", "tar"}};
       },
       false},
      {"diff deleting a file, tar cache",
       [=](Interop& f) {
         return V{{"--overlay", f.ov.string(), "--patch", f.pf("delete.diff"), "--patch-root", f.inst.string(),
                   "--invalidate-cache", f.in("cache"), "--cache-snapshot", "tar"}};
       },
       true},
      {"artifact inside its cache, tar",
       [=](Interop& f) {
         return V{with(f.entry("src/kernel.cpp", "kernel.cpp", {"cache/ext.so"}, {"cache"}, {"cache/", "cache/ext.so"}),
                       tar)};
       },
       true},
      {"artifact inside its cache, moved",
       [=](Interop& f) {
         return V{with(f.entry("src/kernel.cpp", "kernel.cpp", {"cache/ext.so"}, {"cache"}, {"cache/", "cache/ext.so"}),
                       move)};
       },
       false},
      {"artifact inside its cache, aside",
       [=](Interop& f) {
         return V{with(f.entry("src/kernel.cpp", "kernel.cpp", {"cache/ext.so"}, {"cache"}, {"cache/", "cache/ext.so"}),
                       aside)};
       },
       false},
      {"two entries, older aside, newer tar",
       [=](Interop& f) {
         return V{
             with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
                  aside),
             with(f.entry("src/extra.cpp", "extra.cpp", {"lib/libk.so"}, {"cache2"}, {"lib/libk.so", "cache2/"}), tar)};
       },
       false},
      {"two entries, both tar",
       [=](Interop& f) {
         return V{
             with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}), tar),
             with(f.entry("src/extra.cpp", "extra.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}), tar)};
       },
       true},
      {"two entries, older moved, newer tar",
       [=](Interop& f) {
         return V{
             with(f.entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}), move),
             with(f.entry("src/extra.cpp", "extra.cpp", {"lib/libk.so"}, {"cache2"}, {"lib/libk.so", "cache2/"}), tar)};
       },
       false},
  };
}

// Issue 49: a layer (add-native --over) is guarded against overlay_setup.py, which knows no
// layers. Whatever order its revert or gc-stale meets the two overlays in, it restores the lower
// one byte-exact or stops at the layer's guard, and `overlay revert` finishes: the install ends
// original, never with the lower's bytes put back over it.
TEST_F(Interop, LayeredOverlaysRevertedByPythonTool) {
  REQUIRE_REFERENCE();
  fs::path low = ovs / "low";
  write_file(p / "kernel8.cpp", "int kernel() { return 8; }\n");
  for (std::string how : {"revert upper", "revert lower", "gc-stale"}) {
    SCOPED_TRACE(how);
    int f0 = failures();
    fs::remove_all(ov);
    fs::remove_all(low);
    auto lower = with(entry("src/kernel.cpp", "kernel.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
                      {"--cache-snapshot", "tar"});
    lower[1] = low.string();
    ASSERT_EQ(ov_add(lower).rc, 0);
    std::string accepted = tree_digest(inst);
    Cmd up = ov_add(with(entry("src/kernel.cpp", "kernel8.cpp", {"lib/libk.so"}, {"cache"}, {"lib/libk.so", "cache/"}),
                         {"--cache-snapshot", "tar", "--over", low.string()}));
    ASSERT_EQ(up.rc, 0) << up.err;
    EXPECT_TRUE(manifest()["natives"][0]["caches"][0].value("python_tool_guard", false)) << manifest();
    std::string stacked = tree_digest(inst);
    Cmd py = how == "revert upper"   ? py_tool({"revert", "--overlay", ov.string()})
             : how == "revert lower" ? py_tool({"revert", "--overlay", low.string()})
                                     : py_tool({"gc-stale", "--root", ovs.string()});
    if (how == "revert upper") {
      EXPECT_NE(py.rc, 0);
      EXPECT_NE(py.err.find("STOP--overlay_setup.py-cannot-restore-this-entry"), std::string::npos) << py.err;
      EXPECT_EQ(tree_digest(inst), stacked);
    } else if (how == "revert lower") {
      EXPECT_EQ(py.rc, 0) << py.err;
      EXPECT_EQ(tree_digest(inst), original);  // the lower's backups are the pristine bytes
    }
    // overlay finishes, in whatever state the tool left: the layer first, then the lower.
    Cmd r = run_overlay({"revert", "--overlay", ov.string()});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(tree_digest(inst), stacked);
    EXPECT_TRUE(tree_digest(inst) == accepted || tree_digest(inst) == original);
    EXPECT_EQ(run_overlay({"revert", "--overlay", low.string()}).rc, 0);
    EXPECT_EQ(tree_digest(inst), original);
    matrix(
        "layer (--over) on a tar-cache entry", "overlay add-native --over -> overlay_setup.py " + how,
        how == "revert lower" ? "restored (lower), then overlay revert" : "stopped at the layer, then overlay revert",
        f0);
  }
}

TEST_F(Interop, OverlayEntriesRevertedByPythonTool) {
  REQUIRE_REFERENCE();
  for (const auto& shape : overlay_shapes()) {
    for (std::string how : {"revert", "gc-stale"}) {
      SCOPED_TRACE(shape.name + " / overlay_setup.py " + how);
      int f0 = failures();
      fs::remove_all(ov);
      for (const auto& add : shape.adds(*this)) {
        Cmd a = ov_add(add);
        ASSERT_EQ(a.rc, 0) << a.err;
      }
      std::string applied = tree_digest(inst);
      ASSERT_NE(applied, original);
      json before = manifest();
      Cmd py = how == "revert" ? py_tool({"revert", "--overlay", ov.string()})
                               : py_tool({"gc-stale", "--root", ovs.string()});
      std::string outcome;
      if (shape.python_restores) {
        EXPECT_EQ(py.rc, 0) << py.err;
        EXPECT_EQ(tree_digest(inst), original);
        EXPECT_TRUE(manifest()["natives"].empty());
        outcome = "restored";
      } else {
        // It stopped, said why, cleared nothing, and deleted no cache it could not put back.
        EXPECT_NE(py.rc, 0);
        EXPECT_NE(py.err.find("STOP--overlay_setup.py-cannot-restore-this-entry--run-overlay-revert"),
                  std::string::npos)
            << py.err;
        EXPECT_EQ(py.out.find("revert: restored"), std::string::npos) << py.out;
        EXPECT_EQ(manifest(), before);
        for (const auto& e : before["natives"])
          for (const auto& c : e["caches"])
            if (c.contains("backup_dir")) {
              EXPECT_TRUE(fs::is_directory(ov / c["backup_dir"].get<std::string>())) << c;
            } else if (c.contains("aside")) {
              EXPECT_TRUE(fs::is_directory(c["aside"]["path"].get<std::string>())) << c;  // never deleted by it
            }
        if (before["natives"].back()["caches"][0].value("python_tool_guard", false)) {
          EXPECT_EQ(tree_digest(inst), applied) << "the guarded entry is the newest: nothing may have changed";
        }
        Cmd r = run_overlay({"revert", "--overlay", ov.string()});
        EXPECT_EQ(r.rc, 0) << r.err;
        EXPECT_EQ(tree_digest(inst), original);
        outcome = "refused-then-finished (overlay revert)";
      }
      // Nothing of ours is left behind once overlay has had its say.
      EXPECT_EQ(run_overlay({"revert", "--overlay", ov.string()}).rc, 0);
      EXPECT_EQ(tree_digest(inst), original);
      matrix(shape.name, "overlay add-native -> overlay_setup.py " + how, outcome, f0);
    }
  }
}

}  // namespace
