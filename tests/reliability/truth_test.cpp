// Issue 39: what the tool prints is true in the pipeline's operating mode — agents building while
// CI runs gc-stale, overlays that gc-stale cannot act on, run dirs named after ISO timestamps,
// caches that hold the source, failed builds. Each test drives the real binary through one shape
// that made the tool print success while the claim was false, and fails on the binary before it.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Truth : ::testing::Test {
  TempDir t;
  std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};

  // add-native of `body` whose build (`cp src/kernel.cpp lib/libk.so`) first waits for `gate`
  // to exist when one is given: a build still running while the test acts.
  std::vector<std::string> add_args(const Install& in, const fs::path& ov, const std::string& body,
                                    const fs::path& gate = {}) {
    fs::path patched = t / ("patched-" + ov.filename().string() + ".cpp");
    write_file(patched, body);
    std::string wait = gate.empty() ? "" : "while [ ! -e " + gate.string() + " ]; do sleep 0.02; done; ";
    return {"add-native",
            "--overlay",
            ov.string(),
            "--target",
            in.source.string(),
            "--patched-file",
            patched.string(),
            "--artifact",
            in.artifact.string(),
            "--build-cwd",
            in.root.string(),
            "--build-cmd",
            "sh -c '" + wait + "cp src/kernel.cpp lib/libk.so'"};
  }
  Cmd overlay(const std::vector<std::string>& args) { return run_overlay(args, {}, state); }
};

bool manifest_has_native(const fs::path& ov) {
  std::error_code ec;
  if (!fs::exists(ov / "_overlay_manifest.json", ec)) return false;
  try {
    json m = json::parse(read_file(ov / "_overlay_manifest.json"));
    return m.contains("natives") && !m["natives"].empty();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

// Shape 1: CI's gc-stale while an agent's add-native (no --owner-pid) is still building. It used
// to revert the entry: the build compiled the original, verify said FRESH_BUILD_OK (checked 0).
TEST_F(Truth, GcStaleLeavesAnAddNativeInFlightAlone) {
  Install in = make_install(t / "inst");
  const std::string cand = "int kernel() { return 7; }\n";
  pid_t agent = spawn_overlay(add_args(in, t / "ov", cand, t / "go"), state);
  ASSERT_TRUE(
      until_ready_or_exited(agent, [&] { return read_file(in.source) == cand && manifest_has_native(t / "ov"); }));
  Cmd gc = overlay({"--json", "gc-stale", "--root", t.path().string()});
  EXPECT_EQ(gc.rc, 0) << gc.err;
  json j = json::parse(gc.out);
  ASSERT_EQ(j["overlays"].size(), 1u) << gc.out;
  EXPECT_EQ(j["overlays"][0]["outcome"], "skipped");
  EXPECT_EQ(j["overlays"][0]["reason"], "add-native in progress, pid " + std::to_string(agent)) << gc.out;
  EXPECT_EQ(j["reverted"], 0);
  EXPECT_EQ(read_file(in.source), cand) << "gc-stale reverted a live add-native";
  write_file(t / "go", "");
  ASSERT_EQ(wait_rc(agent), 0);
  EXPECT_EQ(read_file(in.artifact), cand) << "the build compiled something other than the candidate";
  Cmd v = overlay({"verify-native", "--overlay", (t / "ov").string()});
  EXPECT_EQ(v.out, "FRESH_BUILD_OK (checked 1)\n");
  // Ended, the run no longer owns the overlay: gc-stale reverts it now.
  Cmd gc2 = overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_EQ(gc2.rc, 0) << gc2.err;
  EXPECT_NE(gc2.out.find("gc-stale: reverted 1 stale"), std::string::npos) << gc2.out;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");
}

// The other half: an add-native killed (kill -9) mid-build is stale at once, no timeout.
TEST_F(Truth, AnAddNativeKilledMidBuildIsStaleAtOnce) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  pid_t agent = spawn_overlay(add_args(in, t / "ov", "int kernel() { return 7; }\n", t / "go"), state);
  ASSERT_TRUE(until_ready_or_exited(agent, [&] { return manifest_has_native(t / "ov"); }));
  ::kill(agent, SIGKILL);
  EXPECT_EQ(wait_rc(agent), 128 + SIGKILL);
  write_file(t / "go", "");  // the orphaned build may finish; revert puts the artifact back either way
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Cmd gc = overlay({"gc-stale", "--root", (t / "ov").string()});
  EXPECT_EQ(gc.rc, 0) << gc.err;
  EXPECT_NE(gc.out.find("gc-stale: reverted 1 stale"), std::string::npos) << gc.out << gc.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
  // No mark is left behind to make the overlay look busy.
  for (const auto& e : fs::directory_iterator(t / "ov"))
    EXPECT_EQ(e.path().filename().string().rfind(".overlay-live-", 0), std::string::npos) << e.path();
}

// The children of `pid` (its main thread's), as /proc lists them.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> kids;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t k = 0; in >> k;) kids.push_back(k);
  return kids;
}

// The same, killed in the instant the build's tracing probe has forked its child and not yet
// attached to it (strace holds the attach a second). That child execs nothing: it held a
// copy of the in-flight mark's descriptor, waited forever on a pipe it kept open itself, and
// gc-stale said "add-native in progress" for a run long dead (a CI failure of this file).
TEST_F(Truth, AnAddNativeKilledWhileProbingTracingLeavesNothingHoldingItsMark) {
  if (!have({"strace", "-V"})) GTEST_SKIP() << "strace is not installed (scripts/deps.sh installs it)";
  Install in = make_install(t / "inst");
  std::vector<std::string> argv{
      "strace",        "-f", "-o", "/dev/null", "-e", "trace=ptrace", "-e", "inject=ptrace:delay_enter=1000000:when=1",
      overlay_binary()};
  for (auto& a : add_args(in, t / "ov", "int kernel() { return 7; }\n")) argv.push_back(a);
  pid_t tracer = ::fork();
  if (tracer == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1), ::dup2(devnull, 2);
    for (const auto& kv : state) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  pid_t agent = 0, probe = 0;
  ASSERT_TRUE(until_ready_or_exited(tracer, [&] {
    auto a = children_of(tracer);
    agent = a.empty() ? 0 : a.front();
    auto p = agent ? children_of(agent) : std::vector<pid_t>{};
    probe = p.empty() ? 0 : p.front();
    return probe != 0;
  })) << "add-native never forked its probe";
  ::kill(agent, SIGKILL);
  wait_until_dead(agent);
  for (int i = 0; i < 250 && process_alive(probe); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(process_alive(probe)) << "the probe's child outlived the add-native that forked it";
  Cmd gc = overlay({"gc-stale", "--root", (t / "ov").string()});
  ::kill(tracer, SIGKILL);
  wait_rc(tracer);
  if (process_alive(probe)) ::kill(probe, SIGKILL);
  EXPECT_EQ(gc.err.find("in progress"), std::string::npos) << "a killed add-native looked alive:\n" << gc.err;
  EXPECT_NE(gc.out.find("gc-stale: reverted 1 stale"), std::string::npos) << gc.out << gc.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");
}

// Shape 2: one overlay gc-stale cannot act on (a junk manifest; one on a read-only mount) used to
// end the walk with one line and exit 1, every overlay after it left applied and unreported.
TEST_F(Truth, GcStaleWalksToTheEndReportingEachOverlay) {
  std::vector<Install> ins;
  for (const char* name : {"a", "b", "c"}) ins.push_back(make_install(t / "inst" / name));
  ASSERT_EQ(overlay(add_args(ins[0], t / "root/ov-a", "int kernel() { return 1; }\n")).rc, 0);
  ASSERT_EQ(overlay(add_args(ins[1], t / "root/ov-b", "int kernel() { return 2; }\n")).rc, 0);
  ASSERT_EQ(overlay(add_args(ins[2], t / "root/ro/ov-c", "int kernel() { return 3; }\n")).rc, 0);
  write_file(t / "root/junk/_overlay_manifest.json", "{ this is not json");
  write_file(t / "root/other/_overlay_manifest.json", "[\"another tool's list\"]");
  auto ro = ScopedMount::read_only(t / "root/ro");
  bool have_ro = ro->ok();
  Cmd gc = overlay({"--json", "gc-stale", "--root", (t / "root").string()});
  json j = json::parse(gc.out);
  std::map<std::string, std::string> outcome;
  for (const auto& o : j["overlays"])
    outcome[fs::path(o["overlay"].get<std::string>()).filename().string()] = o["outcome"];
  EXPECT_EQ(outcome["ov-a"], "reverted") << gc.out;
  EXPECT_EQ(outcome["ov-b"], "reverted") << gc.out;
  EXPECT_EQ(outcome["junk"], "skipped") << gc.out;
  EXPECT_EQ(outcome["other"], "skipped") << gc.out;
  EXPECT_EQ(j["reverted"], 2);
  EXPECT_EQ(read_file(ins[0].source), "int kernel() { return 4; }\n");
  EXPECT_EQ(read_file(ins[1].source), "int kernel() { return 4; }\n");
  if (have_ro) {
    // Its install is put back, but its record cannot be written: applied on record, a failure.
    EXPECT_EQ(outcome["ov-c"], "failed") << gc.out;
    EXPECT_EQ(gc.rc, 1) << "an overlay left applied must fail the run";
  } else {
    EXPECT_EQ(outcome["ov-c"], "reverted") << ro->why();
    EXPECT_EQ(gc.rc, 0);
  }
  // The human form: a line per overlay, the count last.
  ro.reset();
  ASSERT_EQ(overlay(add_args(ins[0], t / "root/ov-a", "int kernel() { return 1; }\n")).rc, 0);
  Cmd text = overlay({"gc-stale", "--root", (t / "root").string()});
  EXPECT_NE(text.err.find("skipped " + (t / "root/junk").string() + ": not a manifest"), std::string::npos) << text.err;
  EXPECT_NE(text.out.find("gc-stale: reverted " + (t / "root/ov-a").string()), std::string::npos) << text.out;
  EXPECT_EQ(text.out.substr(text.out.rfind("gc-stale:")), "gc-stale: reverted " + std::string(have_ro ? "2" : "1") +
                                                              " stale native overlay(s) under " +
                                                              (t / "root").string() + "\n");
}

// Shape 4: an overlay path with ':' (a run dir named after an ISO timestamp) can never sit on
// PYTHONPATH; every Python verb and exec used to accept it and the overlay was inert.
TEST_F(Truth, AnOverlayPathWithAColonIsRefusedForPythonAndExec) {
  Install in = make_install(t / "inst");
  fs::path ov = t / "runs/2026-12-03T21:55:00/ov";
  write_file(t / "pkg/fast.py", "def f():\n    return 7\n");
  write_file(t / "mod.py", "X = 7\n");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  expect_refused_unchanged(
      {{"add-rebind", "--overlay", ov.string(), "--target", "os:getcwd", "--impl-module", "fast", "--impl-attr", "f",
        "--impl-file", (t / "pkg/fast.py").string()},
       {"add-module", "--overlay", ov.string(), "--module", "json", "--patched-file", (t / "mod.py").string()},
       {"add-capture", "--overlay", ov.string(), "--target", "os:getcwd", "--out", (t / "shapes").string()},
       {"add-marker", "--overlay", ov.string(), "--target", "os:getcwd"},
       {"exec", "--overlay", ov.string(), "--target", in.source.string(), "--patched-file",
        (t / "patched.cpp").string(), "--", "true"}},
      t.path(), [&](const std::vector<std::string>& a) { return overlay(a); });
  Cmd r = overlay({"add-marker", "--overlay", ov.string(), "--target", "os:getcwd"});
  EXPECT_NE(r.err.find("contains ':'"), std::string::npos) << r.err;
  // A native entry alone never goes on PYTHONPATH: still accepted there.
  EXPECT_EQ(overlay({"add-native", "--overlay", ov.string(), "--target", in.source.string(), "--patched-file",
                     (t / "patched.cpp").string()})
                .rc,
            0);
  EXPECT_EQ(overlay({"revert", "--overlay", ov.string()}).rc, 0);
}

// Shapes 5 and 6: a cache dir that holds the target (a load_inline JIT dir holding the .cu),
// the patched file or the overlay; an artifact that is the target or the patched file. Each used to
// be accepted and print success while the source was moved away or no build was checked.
TEST_F(Truth, ACacheHoldingTheSourceOrAnArtifactThatIsTheSourceIsRefused) {
  Install in = make_install(t / "inst");
  write_file(in.cache / "kernel.cu", "__global__ void k() {}\n");
  write_file(t / "patched.cu", "__global__ void k() { /* fast */ }\n");
  write_file(in.cache / "patched.cpp", "int kernel() { return 7; }\n");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::string ov = (t / "ov").string();
  auto add = [&](const std::string& target, const std::string& patched, std::vector<std::string> more) {
    std::vector<std::string> a{"add-native", "--overlay", ov, "--target", target, "--patched-file", patched};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  expect_refused_unchanged(
      {add((in.cache / "kernel.cu").string(), (t / "patched.cu").string(), {"--invalidate-cache", in.cache.string()}),
       add(in.source.string(), (in.cache / "patched.cpp").string(), {"--invalidate-cache", in.cache.string()}),
       add(in.source.string(), (t / "patched.cpp").string(), {"--invalidate-cache", in.root.string()}),
       add(in.source.string(), (t / "patched.cpp").string(), {"--artifact", in.source.string()}),
       add(in.source.string(), (t / "patched.cpp").string(), {"--artifact", (t / "patched.cpp").string()}),
       add(in.source.string(), (t / "patched.cpp").string(),
           {"--artifact", (in.root / "src/../src/kernel.cpp").string()})},
      t.path(), [&](const std::vector<std::string>& a) { return overlay(a); });
  Cmd r = overlay(
      add((in.cache / "kernel.cu").string(), (t / "patched.cu").string(), {"--invalidate-cache", in.cache.string()}));
  EXPECT_NE(r.err.find("holds the target"), std::string::npos) << r.err;
  r = overlay(add(in.source.string(), (t / "patched.cpp").string(), {"--artifact", in.source.string()}));
  EXPECT_NE(r.err.find("is the target"), std::string::npos) << r.err;
}

// Shape 9: a failed or interrupted build used to print OVERLAY_DIR=… and the add-native summary,
// identical to a success, on stdout; overlay_setup.py prints nothing there.
TEST_F(Truth, StdoutCarriesTheSummaryOnlyOnSuccess) {
  Install in = make_install(t / "inst");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::vector<std::string> a{"add-native",
                             "--overlay",
                             (t / "ov").string(),
                             "--target",
                             in.source.string(),
                             "--patched-file",
                             (t / "patched.cpp").string(),
                             "--artifact",
                             in.artifact.string(),
                             "--build-cmd",
                             "false"};
  Cmd failed = overlay(a);
  EXPECT_NE(failed.rc, 0);
  EXPECT_EQ(failed.out, "") << "a failed build printed a success summary";
  EXPECT_NE(failed.err.find("build failed (false) rc=1"), std::string::npos) << failed.err;
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov").string()}).rc, 0);
  std::vector<std::string> j = a;
  j.insert(j.begin(), "--json");
  Cmd failed_json = overlay(j);
  json doc = json::parse(failed_json.out);
  EXPECT_FALSE(doc["ok"]);
  EXPECT_NE(doc["error"].get<std::string>().find("build failed"), std::string::npos);
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov").string()}).rc, 0);
  // apply: the same.
  write_file(t / "d.diff",
             "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { "
             "return 7; }\n");
  Cmd ap = overlay({"apply", "--overlay", (t / "ov2").string(), "--patch", (t / "d.diff").string(), "--patch-root",
                    in.root.string(), "--artifact", in.artifact.string(), "--build-cmd", "false"});
  EXPECT_NE(ap.rc, 0);
  EXPECT_EQ(ap.out, "");
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov2").string()}).rc, 0);
  // A build that succeeds prints both, as before.
  a.back() = "true";
  Cmd ok = overlay(a);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(ok.out, "OVERLAY_DIR=" + (t / "ov").string() + "\nadd-native " + in.source.string() +
                        "  (sources=1 artifacts=1 caches=0 build=yes)\n");
}

// Shape 8: the package dir reinstalled (a new inode) and the file changed to a third version.
// revert warned "the change is replaced by the original", then refused that very item.
TEST_F(Truth, RevertTellsOneStoryPerItem) {
  Install in = make_install(t / "inst");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  ASSERT_EQ(overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                     (t / "patched.cpp").string()})
                .rc,
            0);
  fs::rename(in.root / "src", in.root / "src.old");  // a reinstall: the same path, another directory
  write_file(in.source, "int kernel() { return 5; }\n");
  Cmd r = overlay({"revert", "--overlay", (t / "ov").string()});
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.find("replaced by the original"), std::string::npos) << "warned of a replacement it then refused:\n"
                                                                       << r.err;
  EXPECT_NE(r.err.find("cannot restore " + in.source.string()), std::string::npos) << r.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 5; }\n");
}

// Shape 3: the overlay dir rm -rf'd while its entry is applied. A new add-native used to back up
// the first candidate's bytes as the "original" without --force, and after its revert
// `status --check-clean` said clean over the first candidate's code.
TEST_F(Truth, AVanishedOverlaysPatchedBytesAreNeverTakenForTheOriginal) {
  Install in = make_install(t / "inst");
  const std::string orig = read_file(in.source), first = "int kernel() { return 7; }\n";
  write_file(t / "first.cpp", first);
  write_file(t / "second.cpp", "int kernel() { return 8; }\n");
  auto add = [&](const fs::path& ov, const fs::path& patched, std::vector<std::string> more = {}) {
    std::vector<std::string> a{"add-native",       "--overlay",      ov.string(),     "--target",
                               in.source.string(), "--patched-file", patched.string()};
    a.insert(a.end(), more.begin(), more.end());
    return overlay(a);
  };
  ASSERT_EQ(add(t / "ov1", t / "first.cpp").rc, 0);
  fs::remove_all(t / "ov1");  // the harness rebuilding its candidate folder
  std::string digest = tree_digest(in.root);
  Cmd refused = add(t / "ov2", t / "second.cpp");
  EXPECT_NE(refused.rc, 0);
  EXPECT_EQ(refused.out, "");
  EXPECT_NE(refused.err.find((t / "ov1").string() + ", which has vanished"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("holds that overlay's patched bytes"), std::string::npos) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  EXPECT_EQ(tree_digest(in.root), digest);
  EXPECT_FALSE(fs::exists(t / "ov2"));

  // The machine-wide view agrees, and names the vanished holder.
  Cmd all = overlay({"status", "--all", "--check-clean"});
  EXPECT_EQ(all.rc, 1) << all.out;
  EXPECT_NE(all.out.find((t / "ov1").string() + "  VANISHED"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("1 overlay(s) known to the holds registry (1 vanished), 1 not clean"), std::string::npos)
      << all.out;
  json j = json::parse(overlay({"--json", "status", "--all"}).out);
  ASSERT_EQ(j["overlays"].size(), 1u) << j.dump();
  EXPECT_EQ(j["overlays"][0]["overlay"], (t / "ov1").string());
  EXPECT_EQ(j["overlays"][0]["vanished"], true);
  EXPECT_EQ(j["overlays"][0]["clean"], false);
  EXPECT_EQ(j["orphan_holds"][0]["file"], "patched");
  Cmd which = overlay({"which", in.source.string()});
  EXPECT_EQ(which.rc, 0) << which.err;
  EXPECT_NE(which.out.find("held by overlay " + (t / "ov1").string()), std::string::npos) << which.out;

  // A third version (a hand edit) is named as one.
  write_file(in.source, "int kernel() { return 9; }\n");
  Cmd third = add(t / "ov2", t / "second.cpp");
  EXPECT_NE(third.err.find("third version"), std::string::npos) << third.err;
  write_file(in.source, first);

  // --force adopts, saying the original is lost; its revert gives back what it adopted, and the
  // hold passed back down keeps the vanished holder's checksums: the file holds that overlay's
  // candidate, and nothing calls it clean (issue 49; before, the hold lost them and it was "clean").
  Cmd forced = add(t / "ov2", t / "second.cpp", {"--force"});
  ASSERT_EQ(forced.rc, 0) << forced.err;
  EXPECT_NE(forced.err.find("the original bytes are lost"), std::string::npos) << forced.err;
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov2").string()}).rc, 0);
  EXPECT_EQ(read_file(in.source), first);
  Cmd dirty = overlay({"status", "--all", "--check-clean"});
  EXPECT_EQ(dirty.rc, 1) << "the file holds a vanished overlay's candidate, yet status called it clean:\n" << dirty.out;
  EXPECT_NE(dirty.out.find((t / "ov1").string() + ", which has vanished"), std::string::npos) << dirty.out;
  // The original put back by hand (a reinstall): clean.
  write_file(in.source, orig);
  Cmd clean = overlay({"status", "--all", "--check-clean"});
  EXPECT_EQ(clean.rc, 0) << clean.out;
}

// Shape 7, second half: an overlay mv'd after add-native and reverted from its new path used to
// leave the hold under the old path, so `status --all --check-clean` failed forever on an
// original install. And an overlay restored by hand (the file original again) is clean.
TEST_F(Truth, AMovedOverlaysRevertDropsTheHoldUnderItsOldPath) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  write_file(t / "p.cpp", "int kernel() { return 7; }\n");
  ASSERT_EQ(overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                     (t / "p.cpp").string(), "--artifact", in.artifact.string()})
                .rc,
            0);
  fs::rename(t / "ov", t / "moved");
  Cmd r = overlay({"revert", "--overlay", (t / "moved").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
  Cmd all = overlay({"--json", "status", "--all", "--check-clean"});
  EXPECT_EQ(all.rc, 0) << all.out;
  EXPECT_EQ(json::parse(all.out)["overlays"].size(), 0u) << all.out;
  EXPECT_EQ(overlay({"which", in.source.string()}).rc, 1);
  // Deleted while applied, then the file put back by hand (a reinstall): clean, and free to take.
  ASSERT_EQ(overlay({"add-native", "--overlay", (t / "ov3").string(), "--target", in.source.string(), "--patched-file",
                     (t / "p.cpp").string()})
                .rc,
            0);
  fs::remove_all(t / "ov3");
  write_file(in.source, "int kernel() { return 4; }\n");
  EXPECT_EQ(overlay({"status", "--all", "--check-clean"}).rc, 0);
  Cmd again = overlay({"add-native", "--overlay", (t / "ov4").string(), "--target", in.source.string(),
                       "--patched-file", (t / "p.cpp").string()});
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(overlay({"revert", "--overlay", (t / "ov4").string()}).rc, 0);
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");
}

// Found by the checker of claims: the overlay deleted after its build rebuilt the library, the
// source then put back (a reinstall). The library still held the candidate's code and nothing
// said so. Artifacts are held too, with their original's checksum (from the backup): the
// vanished holder is named, and a second overlay building the same library meanwhile is refused
// (its backup of the library would be the first one's build).
TEST_F(Truth, AnArtifactRebuiltByAVanishedOverlayIsNeverCalledClean) {
  Install in = make_install(t / "inst");
  const std::string original_lib = read_file(in.artifact);
  write_file(in.root / "src/other.cpp", "int other() { return 1; }\n");
  write_file(t / "other.cpp", "int other() { return 2; }\n");
  ASSERT_EQ(overlay(add_args(in, t / "ov1", "int kernel() { return 7; }\n")).rc, 0);
  // Another source, the same library: refused while ov1's build output is in it.
  Cmd second =
      overlay({"add-native", "--overlay", (t / "ov2").string(), "--target", (in.root / "src/other.cpp").string(),
               "--patched-file", (t / "other.cpp").string(), "--artifact", in.artifact.string()});
  EXPECT_NE(second.rc, 0);
  EXPECT_NE(second.err.find(in.artifact.string() + " is held by overlay " + (t / "ov1").string()), std::string::npos)
      << second.err;
  fs::remove_all(t / "ov1");
  write_file(in.source,
             "int kernel() { return 4; }\n");  // the source reinstalled; the library is still the candidate's
  Cmd all = overlay({"status", "--all", "--check-clean"});
  EXPECT_EQ(all.rc, 1) << all.out;
  EXPECT_NE(all.out.find(in.artifact.string() + ": held by overlay " + (t / "ov1").string() + ", which has vanished"),
            std::string::npos)
      << all.out;
  Cmd which = overlay({"which", in.artifact.string()});
  EXPECT_EQ(which.rc, 0) << which.err;
  // The library put back (the package reinstalled whole): clean, and free to take.
  write_file(in.artifact, original_lib, 0755);
  EXPECT_EQ(overlay({"status", "--all", "--check-clean"}).rc, 0);
  Cmd again =
      overlay({"add-native", "--overlay", (t / "ov2").string(), "--target", (in.root / "src/other.cpp").string(),
               "--patched-file", (t / "other.cpp").string(), "--artifact", in.artifact.string()});
  EXPECT_EQ(again.rc, 0) << again.err;
}

// Found by the checker of claims: the harness deletes the candidate folder and makes it again at
// the same path (build_candidate_overlay). The hold named that very path, so the check was
// skipped and the first candidate's bytes were backed up as the original.
TEST_F(Truth, AnOverlayDeletedAndMadeAgainAtTheSamePathDoesNotAdoptItsOwnPatch) {
  Install in = make_install(t / "inst");
  write_file(t / "first.cpp", "int kernel() { return 7; }\n");
  write_file(t / "second.cpp", "int kernel() { return 8; }\n");
  std::vector<std::string> a{"add-native",       "--overlay",      (t / "ov").string(),       "--target",
                             in.source.string(), "--patched-file", (t / "first.cpp").string()};
  ASSERT_EQ(overlay(a).rc, 0);
  fs::remove_all(t / "ov");
  a.back() = (t / "second.cpp").string();
  Cmd again = overlay(a);
  EXPECT_NE(again.rc, 0);
  EXPECT_NE(again.err.find("which has vanished"), std::string::npos) << again.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(overlay({"status", "--all", "--check-clean"}).rc, 1);
}

// Found by Crash.KillAnywhereThenRevertOrGcRestores: add-native deletes an invalidated cache in a
// detached grandchild, which inherited the run's descriptors, the in-flight mark's flock among
// them. Killed while that deleter still ran, the add-native looked alive: gc-stale skipped it and
// said nothing was wrong. The deleter now closes the directory descriptors it inherits.
TEST_F(Truth, AKilledAddNativeIsStaleWhileItsCacheDeleterStillRuns) {
  Install in = make_install(t / "inst");
  for (int d = 0; d < 40; ++d)
    for (int f = 0; f < 500; ++f) write_file(in.cache / ("d" + std::to_string(d)) / ("f" + std::to_string(f)), "x");
  std::string before = tree_digest(in.root);
  std::vector<std::string> args = add_args(in, t / "ov", "int kernel() { return 7; }\n", t / "go");
  for (const char* a : {"--invalidate-cache", "", "--cache-snapshot", "tar"}) args.emplace_back(a);
  args[args.size() - 3] = in.cache.string();
  // The build starts once add-native has handed the cache's trash to its deleter: killed then.
  std::string& build = args[12];
  build.replace(build.find("while"), 5, "touch " + (t / "started").string() + "; while");
  pid_t agent = spawn_overlay(args, state);
  ASSERT_TRUE(until_ready_or_exited(agent, [&] { return fs::exists(t / "started"); }));
  ::kill(agent, SIGKILL);
  EXPECT_EQ(wait_rc(agent), 128 + SIGKILL);
  Cmd gc = overlay({"gc-stale", "--root", (t / "ov").string()});
  EXPECT_EQ(gc.rc, 0) << gc.err;
  EXPECT_EQ(gc.err.find("in progress"), std::string::npos) << "a killed add-native looked alive:\n" << gc.err;
  EXPECT_NE(gc.out.find("gc-stale: reverted 1 stale"), std::string::npos) << gc.out << gc.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// Issue 63: two agents on one library. The second, refused --artifact (held by the first), drops
// the flag; its build rewrites the library from both patched sources. Reverting the first then
// put the original library back under the second's live patch, and the second's verify said
// FRESH_BUILD_OK (checked 0). The revert is refused, naming the overlay to revert first.
TEST_F(Truth, ARevertNeverRestoresAnArtifactAnotherOverlaysBuildRewrote) {
  Install in = make_install(t / "inst");
  write_file(in.root / "src/other.cpp", "int other() { return 1; }\n");
  write_file(in.artifact, read_file(in.source) + read_file(in.root / "src/other.cpp"), 0755);
  const std::string original_lib = read_file(in.artifact);
  const std::string build = "sh -c 'cat src/kernel.cpp src/other.cpp > lib/libk.so'";
  write_file(t / "k.cpp", "int kernel() { return 7; }\n");
  write_file(t / "o.cpp", "int other() { return 2; }\n");
  auto add = [&](const fs::path& ov, const fs::path& target, const fs::path& patched, bool artifact) {
    std::vector<std::string> a{
        "add-native",  "--overlay",      ov.string(),   "--target", target.string(), "--patched-file", patched.string(),
        "--build-cwd", in.root.string(), "--build-cmd", build};
    if (artifact) a.insert(a.end(), {"--artifact", in.artifact.string()});
    return overlay(a);
  };
  ASSERT_EQ(add(t / "ov1", in.source, t / "k.cpp", true).rc, 0);
  const std::string first_build = read_file(in.artifact);
  EXPECT_NE(add(t / "ov2", in.root / "src/other.cpp", t / "o.cpp", true).rc, 0);  // held by ov1
  ASSERT_EQ(add(t / "ov2", in.root / "src/other.cpp", t / "o.cpp", false).rc, 0);
  const std::string both = read_file(in.artifact);
  ASSERT_EQ(both, "int kernel() { return 7; }\nint other() { return 2; }\n");

  Cmd first = overlay({"revert", "--overlay", (t / "ov1").string()});
  EXPECT_NE(first.rc, 0);
  EXPECT_NE(first.err.find("cannot restore " + in.artifact.string() + ": rebuilt since by the build of entry"),
            std::string::npos)
      << first.err;
  EXPECT_NE(first.err.find("of overlay " + (t / "ov2").string() + ", which still holds it; revert that overlay first"),
            std::string::npos)
      << first.err;
  EXPECT_EQ(read_file(in.artifact), both);  // nothing touched
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");

  // In the order the message gives: each revert puts back what the other's build found.
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov2").string()}).rc, 0);
  EXPECT_EQ(read_file(in.artifact), first_build);
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "ov1").string()}).rc, 0);
  EXPECT_EQ(read_file(in.artifact), original_lib);
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");
  EXPECT_EQ(read_file(in.root / "src/other.cpp"), "int other() { return 1; }\n");
  Cmd all = overlay({"status", "--all", "--check-clean"});
  EXPECT_EQ(all.rc, 0) << all.out;
}

// Issue 63: an overlay whose build rebuilt an invalidated cache, deleted by the harness with the
// entry applied; the package then reinstalled (source and library original again). The cache
// still held the candidate's build, and `status --all --check-clean` said clean: the holds
// registry knew the files, never the cache. The cache dirs are noted beside the holds from the
// record to the revert; both ways of keeping the original are named with the way out, which then
// makes the install clean.
TEST_F(Truth, ACacheInvalidatedByAVanishedOverlayIsNeverCalledClean) {
  for (const char* how : {"aside", "tar"}) {
    SCOPED_TRACE(how);
    TempDir w;
    std::vector<std::string> env{"OVERLAY_STATE_DIR=" + (w / "state").string()};
    Install in = make_install(w / "inst");
    const std::string source = read_file(in.source), lib = read_file(in.artifact);
    const std::string pristine = tree_digest(in.cache);
    write_file(w / "k.cpp", "int kernel() { return 7; }\n");
    fs::path ov = w / "ov";
    auto add = [&] {
      return run_overlay({"add-native", "--overlay", ov.string(), "--target", in.source.string(), "--patched-file",
                          (w / "k.cpp").string(), "--artifact", in.artifact.string(), "--invalidate-cache",
                          in.cache.string(), "--cache-snapshot", how, "--build-cwd", in.root.string(), "--build-cmd",
                          "sh -c 'cp src/kernel.cpp lib/libk.so && mkdir -p cache && echo cand > cache/k'"},
                         {}, env);
    };
    ASSERT_EQ(add().rc, 0);
    // A revert forgets the note: nothing is left to say.
    ASSERT_EQ(run_overlay({"revert", "--overlay", ov.string()}, {}, env).rc, 0);
    EXPECT_TRUE(!fs::exists(w / "state/caches") || fs::is_empty(w / "state/caches"));
    ASSERT_TRUE(settle_litter(in.root));
    ASSERT_EQ(add().rc, 0);
    ASSERT_EQ(read_file(in.cache / "k"), "cand\n");
    fs::remove_all(ov);
    write_file(in.source, source);
    write_file(in.artifact, lib, 0755);
    Cmd s = run_overlay({"status", "--all", "--check-clean"}, {}, env);
    EXPECT_EQ(s.rc, 1) << s.out;
    EXPECT_NE(s.out.find(ov.string() + "  VANISHED (no manifest: deleted or moved)  holds 2 file(s), 1 cache dir(s)  "
                                       "NOT clean"),
              std::string::npos)
        << s.out;
    EXPECT_NE(s.out.find("cache " + in.cache.string() + ": invalidated by overlay " + ov.string() + " (entry "),
              std::string::npos)
        << s.out;
    if (std::string(how) == "aside") {
      EXPECT_NE(s.out.find("its original is kept aside at " + in.root.string() + "/.cache.overlay-aside-"),
                std::string::npos)
          << s.out;
      EXPECT_NE(s.out.find(" (moved: revert it where it is now; deleted: put it back: rm -rf " + in.cache.string() +
                           " && mv "),
                std::string::npos)
          << s.out;
      fs::path kept;
      for (const auto& e : fs::directory_iterator(in.root))
        if (e.path().filename().string().rfind(".cache.overlay-aside-", 0) == 0) kept = e.path();
      ASSERT_FALSE(kept.empty());
      fs::remove_all(in.cache);  // the way out it names
      fs::rename(kept, in.cache);
      EXPECT_EQ(tree_digest(in.cache), pristine);
    } else {
      EXPECT_NE(s.out.find(" with its original; it may hold that overlay's build (moved: revert it where it is now; "
                           "deleted: clear it: rm -rf " +
                           in.cache.string() + ")"),
                std::string::npos)
          << s.out;
      fs::remove_all(in.cache);  // the way out it names: the next run rebuilds it from the install
    }
    Cmd clean = run_overlay({"status", "--all", "--check-clean"}, {}, env);
    EXPECT_EQ(clean.rc, 0) << clean.out;
  }
}
