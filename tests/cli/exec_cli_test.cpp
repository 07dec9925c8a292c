// `overlay exec` (issue 22) through the real binary on the CPU smoke install (CMake + Ninja, the
// install's own incremental build): every exit path — success, CMD fails, build fails, verify
// fails, SIGINT/SIGTERM/SIGKILL to exec mid-candidate, a CMD that ignores SIGTERM, a revert that
// cannot complete — leaves the install byte-exact (or says loudly that it could not), and two
// execs on one install serialise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Exec : ::testing::Test {
  TempDir t;
  fs::path example = source_dir() / "examples/cpu_smoke";
  fs::path install = t / "install", build = t / "install/build";
  fs::path src = t / "install/src/kernel.cpp", lib = t / "install/build/libkernel.so",
           smoke = t / "install/build/smoke";
  fs::path obj = t / "install/build/CMakeFiles/kernel.dir/src/kernel.cpp.o";  // discover names it: track it too
  std::string ov = (t / "ov").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  std::string src_sha, lib_sha;

  void SetUp() override {
    fs::create_directories(install);
    fs::copy(example / "src", install / "src", fs::copy_options::recursive);
    fs::copy_file(example / "CMakeLists.txt", install / "CMakeLists.txt");
    ASSERT_EQ(
        run({"cmake", "-S", install.string(), "-B", build.string(), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"}).rc,
        0);
    ASSERT_EQ(run({"cmake", "--build", build.string()}).rc, 0);
    src_sha = file_sha256(src), lib_sha = file_sha256(lib);
  }
  // exec's flags for the kernel swap, then `--`, then cmd.
  std::vector<std::string> args(const std::vector<std::string>& extra, const std::vector<std::string>& cmd,
                                const std::string& build_cmd = "") {
    std::vector<std::string> a = {"exec",
                                  "--overlay",
                                  ov,
                                  "--target",
                                  src.string(),
                                  "--patched-file",
                                  (example / "patched/kernel.cpp").string(),
                                  "--artifact",
                                  lib.string(),
                                  "--artifact",
                                  obj.string(),
                                  "--build-cmd",
                                  build_cmd.empty() ? "cmake --build " + build.string() : build_cmd};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  }
  Cmd exec(const std::vector<std::string>& extra, const std::vector<std::string>& cmd,
           const std::string& build_cmd = "") {
    return run_overlay(args(extra, cmd, build_cmd), t.path(), env);
  }
  void expect_restored() {
    EXPECT_EQ(file_sha256(src), src_sha);
    EXPECT_EQ(file_sha256(lib), lib_sha);
    EXPECT_EQ(run({smoke.string()}).out, "4.0\n");
    Cmd c = run_overlay({"status", "--overlay", ov, "--check-clean"}, {}, env);
    EXPECT_EQ(c.rc, 0) << c.out << c.err;
    EXPECT_EQ(json::parse(read_file(fs::path(ov) / "_overlay_manifest.json"))["natives"].size(), 0u);
  }
  // A CMD that marks it started (file F) and then sleeps: for signals mid-candidate.
  std::vector<std::string> sleeper(const std::string& f, const std::string& trap = "") {
    return {"sh", "-c",
            trap + "echo \"$$\" > " + (t / f).string() + "; sleep 30; touch " + (t / f).string() + ".ran-on"};
  }
  // Until `p` holds something, for as long as exec `pid` runs.
  bool wait_for(const fs::path& p, pid_t pid) {
    return until_ready_or_exited(pid, [&] {
      std::error_code ec;
      return fs::file_size(p, ec) > 0 && !ec;
    });
  }
  pid_t started_pid(const fs::path& p) { return static_cast<pid_t>(std::stol(read_file(p))); }
};

}  // namespace

// --ref --json: reference on the clean install, then apply, then the candidate on the patched one
// (each run's view of the install is in its log: the source's SHA-256 and the kernel's value).
TEST_F(Exec, RefThenApplyThenCandidateThenRevert) {
  std::vector<std::string> cmd = {"sh", "-c", "sha256sum " + src.string() + "; " + smoke.string()};
  Cmd r = run_overlay(
      [&] {
        auto a = args({"--ref"}, cmd);
        a.insert(a.begin(), "--json");
        return a;
      }(),
      t.path(), env);
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["command"], "exec");
  EXPECT_EQ(j["ref"]["status"], 0);
  EXPECT_EQ(j["cand"]["status"], 0);
  std::string ref_out = read_file(j["ref"]["stdout_log"].get<std::string>());
  std::string cand_out = read_file(j["cand"]["stdout_log"].get<std::string>());
  EXPECT_EQ(ref_out, src_sha + "  " + src.string() + "\n4.0\n");
  EXPECT_EQ(cand_out, file_sha256(example / "patched/kernel.cpp") + "  " + src.string() + "\n7.0\n");
  EXPECT_GT(j["ref"]["wall_s"].get<double>(), 0);
  EXPECT_EQ(j["apply"]["verify"], "FRESH_BUILD_OK (checked 2)");
  EXPECT_EQ(j["revert"]["ok"], true);
  EXPECT_EQ(j["clean"]["clean"], true);
  // The text form passes CMD's stdout through and ends clean.
  Cmd text = exec({}, {smoke.string()});
  EXPECT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("FRESH_BUILD_OK (checked 2)\n7.0\nexec: cand exit 0 in "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("exec: reverted what it applied\nexec: install clean\n"), std::string::npos) << text.out;
  expect_restored();
}

TEST_F(Exec, CandidateStatusPassesThroughAndTheInstallIsRestored) {
  Cmd r = exec({}, {"sh", "-c", "exit 7"});
  EXPECT_EQ(r.rc, 7) << r.err;
  expect_restored();
  Cmd slow = exec({"--timeout", "0.5"}, {"sleep", "30"});
  EXPECT_EQ(slow.rc, 124) << slow.err;
  EXPECT_NE(slow.out.find("exec: cand timed out, killed by signal 15"), std::string::npos) << slow.out;
  expect_restored();
  Cmd missing = exec({}, {"no-such-program-here"});
  EXPECT_EQ(missing.rc, 127) << missing.err;
  expect_restored();
}

TEST_F(Exec, AFailedBuildOrVerifyStopsBeforeTheCandidate) {
  fs::path ran = t / "ran";
  Cmd b = exec({}, {"touch", ran.string()}, "false");
  EXPECT_EQ(b.rc, 1) << b.err;
  EXPECT_NE(b.err.find("exec: build failed (false)"), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(ran));
  expect_restored();
  Cmd v = exec({}, {"touch", ran.string()}, "true");  // nothing rebuilt: FRESH_BUILD_FAIL
  EXPECT_EQ(v.rc, 1) << v.err;
  EXPECT_NE(v.out.find("FRESH_BUILD_FAIL unchanged " + lib.string()), std::string::npos) << v.out;
  EXPECT_FALSE(fs::exists(ran));
  expect_restored();
  Cmd bad = exec({}, {"true"}, "cmake --build " + build.string() + " 'unterminated");
  EXPECT_EQ(bad.rc, 1);
  expect_restored();
}

// SIGINT and SIGTERM to exec while the candidate runs: forwarded to CMD's group, then revert;
// exit 128 + the signal. A CMD that ignores SIGTERM is killed after the grace period.
TEST_F(Exec, SignalsMidCandidateRevertAndForward) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    std::string mark = "started" + std::to_string(sig);
    pid_t p = spawn_overlay(args({}, sleeper(mark)), env);
    ASSERT_TRUE(wait_for(t / mark, p)) << "the candidate never started";
    pid_t cmd = started_pid(t / mark);
    EXPECT_NE(file_sha256(src), src_sha) << "the candidate runs on the patched install";
    kill(p, sig);
    EXPECT_EQ(wait_rc(p), 128 + sig);
    EXPECT_NE(kill(cmd, 0), 0) << "CMD survived exec's revert";
    expect_restored();
  }
  auto before = std::chrono::steady_clock::now();
  pid_t p = spawn_overlay(args({}, sleeper("stubborn", "trap '' TERM; ")), env);
  ASSERT_TRUE(wait_for(t / "stubborn", p));
  kill(p, SIGTERM);
  EXPECT_EQ(wait_rc(p), 128 + SIGTERM);
  EXPECT_GE(std::chrono::steady_clock::now() - before, std::chrono::seconds(4)) << "killed before the grace period";
  EXPECT_NE(kill(started_pid(t / "stubborn"), 0), 0);
  expect_restored();
}

// SIGKILL to exec mid-candidate: its entries are owned by its dead PID, so gc-stale reverts them;
// and a second exec on the overlay reverts what a dead one left before it applies.
TEST_F(Exec, AKilledExecIsRevertedByGcStaleOrTheNextExec) {
  for (int round = 0; round < 2; ++round) {
    std::string mark = "killed" + std::to_string(round);
    pid_t p = spawn_overlay(args({}, sleeper(mark)), env);
    ASSERT_TRUE(wait_for(t / mark, p));
    pid_t cmd = started_pid(t / mark);
    kill(p, SIGKILL);
    EXPECT_EQ(wait_rc(p), 128 + SIGKILL);
    wait_until_dead(cmd);
    EXPECT_FALSE(fs::exists(t / (mark + ".ran-on"))) << "the candidate outlived a killed exec";
    EXPECT_NE(file_sha256(src), src_sha);
    if (round == 0) {
      Cmd g = run_overlay({"gc-stale", "--root", t.path().string()}, {}, env);
      EXPECT_EQ(g.rc, 0) << g.err;
      EXPECT_NE(g.out.find("gc-stale: reverted " + ov), std::string::npos) << g.out;
    } else {
      Cmd next = exec({}, {"true"});
      EXPECT_EQ(next.rc, 0) << next.err;
      EXPECT_NE(next.err.find("left applied by a dead run (pid " + std::to_string(p) + ")"), std::string::npos)
          << next.err;
    }
    expect_restored();
  }
}

// A backup tampered with during the candidate: revert cannot prove it, so exec says so and exits
// 121 — never the candidate's 0.
TEST_F(Exec, ARevertThatCannotCompleteHasItsOwnExitCode) {
  std::string tamper = "import json; m = json.load(open('" + ov +
                       "/_overlay_manifest.json')); "
                       "open('" +
                       ov + "/' + m['natives'][0]['sources'][0]['backup'], 'a').write('x')";
  Cmd r = exec({}, {"python3", "-c", tamper});
  EXPECT_EQ(r.rc, 121) << r.out << r.err;
  EXPECT_NE(r.err.find("exec: cannot restore " + src.string()), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("exec: REVERT INCOMPLETE"), std::string::npos) << r.out;
  EXPECT_EQ(json::parse(read_file(fs::path(ov) / "_overlay_manifest.json"))["natives"].size(), 1u)
      << "the entry must stay recorded";
}

// Two execs on one install (two overlays): the second waits for the first; with a short
// --lock-timeout it gives up with exit 3 and changes nothing.
TEST_F(Exec, TwoExecsOnOneInstallSerialise) {
  fs::path log = t / "order.log";
  std::string ov2 = (t / "ov2").string();
  pid_t a = spawn_overlay(
      args({}, {"sh", "-c", "echo A-start >> " + log.string() + "; sleep 1; echo A-end >> " + log.string()}), env);
  ASSERT_TRUE(wait_for(log, a));
  Cmd quick = run_overlay(
      [&] {
        auto x = args({}, {"true"});
        x[2] = ov2;
        x.insert(x.begin(), {"--lock-timeout", "0.2"});
        return x;
      }(),
      t.path(), env);
  EXPECT_EQ(quick.rc, 3) << quick.err;
  EXPECT_NE(quick.err.find("is locked by another overlay process"), std::string::npos) << quick.err;
  auto b_args = args({}, {"sh", "-c", "echo B-start >> " + log.string() + "; echo B-end >> " + log.string()});
  b_args[2] = ov2;
  Cmd b = run_overlay(b_args, t.path(), env);
  EXPECT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(wait_rc(a), 0);
  EXPECT_EQ(read_file(log), "A-start\nA-end\nB-start\nB-end\n");
  expect_restored();
}

// --keep-on-success leaves the patch applied with no owner (gc-stale leaves it); a failing
// candidate is still reverted.
TEST_F(Exec, KeepOnSuccessLeavesThePatchOwnerless) {
  Cmd fail = exec({"--keep-on-success"}, {"false"});
  EXPECT_EQ(fail.rc, 1);
  expect_restored();
  Cmd ok = exec({"--keep-on-success"}, {smoke.string()});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(run({smoke.string()}).out, "7.0\n");
  json m = json::parse(read_file(fs::path(ov) / "_overlay_manifest.json"));
  ASSERT_EQ(m["natives"].size(), 1u);
  EXPECT_FALSE(m["natives"][0].contains("owner")) << m.dump(2);
  EXPECT_EQ(m["natives"][0]["kept"], true) << m.dump(2);
  Cmd g = run_overlay({"gc-stale", "--root", t.path().string()}, {}, env);
  EXPECT_NE(g.out.find("gc-stale: reverted 0 stale"), std::string::npos) << g.out;
  EXPECT_NE(g.err.find("was kept applied on purpose (exec --keep-on-success)"), std::string::npos) << g.err;
  EXPECT_EQ(run({smoke.string()}).out, "7.0\n");
  ASSERT_EQ(run_overlay({"revert", "--overlay", ov}, {}, env).rc, 0);
  expect_restored();
}

// --engaged: a candidate that loads the rebuilt library is ENGAGED; one that never loads it is
// NOT_ENGAGED, and that is reported, not hidden.
TEST_F(Exec, EngagedJudgesTheCandidateWhileItRuns) {
  std::string load = "import ctypes, time; k = ctypes.CDLL('" + lib.string() + "'); time.sleep(1)";
  Cmd yes = run_overlay(
      [&] {
        auto a = args({"--engaged"}, {"/usr/bin/python3", "-c", load});
        a.insert(a.begin(), "--json");
        return a;
      }(),
      t.path(), env);
  ASSERT_EQ(yes.rc, 0) << yes.err;
  json j = json::parse(yes.out);
  EXPECT_EQ(j["engaged"]["engaged"], true) << j.dump(2);
  EXPECT_NE(j["engaged"]["why"].get<std::string>().find("maps the patched " + lib.string()), std::string::npos)
      << j.dump(2);
  Cmd no = exec({"--engaged"}, {"sleep", "1"});
  EXPECT_EQ(no.rc, 0);
  EXPECT_NE(no.out.find("\nNOT_ENGAGED process "), std::string::npos) << no.out;
  EXPECT_NE(no.out.find("map none of the tracked artifacts"), std::string::npos) << no.out;
  expect_restored();
}

// One diff touching the kernel and a Python module: the real python3 program sees both, and
// nothing of either is left after.
TEST_F(Exec, AMixedPythonAndNativePatchChangesAProgramAndLeavesNothing) {
  write_file(install / "py/kpkg/__init__.py", "");
  write_file(install / "py/kpkg/scale.py", "FACTOR = 1\n");
  std::string diff =
      run({"diff", "-u", "install/src/kernel.cpp", (example / "patched/kernel.cpp").string()}, t.path()).out;
  diff = "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n" + diff.substr(diff.find("@@"));
  diff += "--- a/py/kpkg/scale.py\n+++ b/py/kpkg/scale.py\n@@ -1 +1 @@\n-FACTOR = 1\n+FACTOR = 10\n";
  write_file(t / "mixed.diff", diff);
  std::string prog = "import subprocess, kpkg.scale; v = float(subprocess.check_output(['" + smoke.string() +
                     "']).decode()); print(v * kpkg.scale.FACTOR)";
  Cmd r =
      run_overlay({"exec", "--overlay", ov, "--patch", (t / "mixed.diff").string(), "--patch-root", install.string(),
                   "--python-root", (install / "py").string(), "--artifact", lib.string(), "--artifact", obj.string(),
                   "--build-cmd", "cmake --build " + build.string(), "--", "python3", "-c", prog},
                  t.path(), {env[0], "PYTHONPATH=" + (install / "py").string()});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\n70.0\n"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(install / "py/kpkg/scale.py"), "FACTOR = 1\n");
  json m = json::parse(read_file(fs::path(ov) / "_overlay_manifest.json"));
  EXPECT_EQ(m["modules"].size(), 0u) << m.dump(2);
  expect_restored();
}

TEST_F(Exec, BadInputIsOneLineAndChangesNothing) {
  Cmd no_cmd =
      run_overlay({"exec", "--overlay", ov, "--target", src.string(), "--patched-file", src.string()}, t.path(), env);
  EXPECT_EQ(no_cmd.rc, 1);
  EXPECT_EQ(no_cmd.err, "exec: no command: pass it after --, e.g. overlay exec … -- python3 bench.py\n");
  Cmd no_target = run_overlay({"exec", "--overlay", ov, "--", "true"}, t.path(), env);
  EXPECT_EQ(no_target.rc, 1);
  EXPECT_EQ(no_target.err, "exec: pass --target (as add-native) or --patch with --patch-root (as apply)\n");
  Cmd missing = exec({}, {"true"});  // fine; now a missing patched file
  EXPECT_EQ(missing.rc, 0);
  Cmd bad = run_overlay(
      {"exec", "--overlay", ov, "--target", src.string(), "--patched-file", (t / "nope.cpp").string(), "--", "true"},
      t.path(), env);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("nope.cpp"), std::string::npos) << bad.err;
  expect_restored();
}
