// Engagement (issue 21) with real processes: a C program that dlopens the install's library and
// sleeps, started before add-native (stale), after it (patched), under a parent that does not map
// it (found through the process tree), and kept running across revert (status --check-clean then
// names it until it exits). No fake /proc: the kernel's own maps are read.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Engaged : ::testing::Test {
  TempDir t;
  fs::path inst = t / "inst";
  std::string ov = (t / "ov").string(), lib = (t / "inst/libk.so").string();
  std::vector<pid_t> started;

  void SetUp() override {
    write_file(inst / "k.c", "int kernel(void) { return 4; }\n");
    write_file(t / "best/k.c", "int kernel(void) { return 7; }\n");
    ASSERT_EQ(run({"cc", "-shared", "-fPIC", "-o", lib, "k.c"}, inst).rc, 0);
    write_file(t / "hold.c",
               "#include <dlfcn.h>\n#include <stdio.h>\n#include <unistd.h>\nint main(int c, char** v) { (void)c;"
               " if (!dlopen(v[1], RTLD_NOW)) return 2; FILE* f = fopen(v[2], \"w\"); fputs(\"ready\", f); fclose(f);"
               " sleep(300); return 0; }\n");
    ASSERT_EQ(run({"cc", "-o", (t / "hold").string(), (t / "hold.c").string(), "-ldl"}).rc, 0);
  }
  void TearDown() override {
    for (pid_t p : started) stop(p);
  }
  // Starts `hold LIB READY` (or, with a parent, `sh -c 'hold … & wait'`) and waits until it has
  // loaded the library.
  pid_t start(const std::string& name, bool under_shell = false) {
    fs::path ready = t / (name + ".ready");
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own group: stop() ends it with its children
      std::string hold = (t / "hold").string();
      if (under_shell) {
        std::string cmd = "'" + hold + "' '" + lib + "' '" + ready.string() + "' & wait";
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      } else {
        execl(hold.c_str(), "hold", lib.c_str(), ready.c_str(), static_cast<char*>(nullptr));
      }
      _exit(127);
    }
    EXPECT_TRUE(until_ready_or_exited(pid, [&] { return fs::exists(ready); })) << name << " never loaded " << lib;
    started.push_back(pid);
    return pid;
  }
  void stop(pid_t pid) {
    if (kill(pid, 0) != 0) return;
    EXPECT_TRUE(kill_group_and_wait(pid)) << "process group " << pid << " outlived SIGKILL";
  }
  Cmd engaged(pid_t pid) { return run_overlay({"engaged", "--overlay", ov, "--pid", std::to_string(pid)}); }
};

}  // namespace

TEST_F(Engaged, StaleBeforeTheBuildPatchedAfterAndStillRunningAfterRevert) {
  pid_t before = start("before");
  Cmd a = run_overlay({"add-native", "--overlay", ov, "--target", (inst / "k.c").string(), "--patched-file",
                       (t / "best/k.c").string(), "--artifact", lib, "--build-cmd", "cc -shared -fPIC -o libk.so k.c",
                       "--build-cwd", inst.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  Cmd e1 = engaged(before);
  EXPECT_EQ(e1.rc, 1);
  EXPECT_NE(e1.out.find("\nNOT_ENGAGED process " + std::to_string(before) + " maps the stale build of " + lib),
            std::string::npos)
      << e1.out;
  EXPECT_NE(e1.out.find("  stale  " + lib), std::string::npos) << e1.out;

  pid_t after = start("after");
  Cmd e2 = engaged(after);
  EXPECT_EQ(e2.rc, 0) << e2.out;
  EXPECT_NE(e2.out.find("ENGAGED process " + std::to_string(after) + " maps the patched " + lib), std::string::npos)
      << e2.out;

  // A parent that maps nothing itself: its child is found through the process tree.
  pid_t shell = start("child", true);
  Cmd e3 = engaged(shell);
  EXPECT_EQ(e3.rc, 0) << e3.out;
  EXPECT_NE(e3.out.find("(a descendant) maps the patched " + lib), std::string::npos) << e3.out;
  stop(shell);

  // A process that is gone, and the whole table without --pid.
  stop(before);
  Cmd gone = engaged(before);
  EXPECT_EQ(gone.rc, 1);
  EXPECT_EQ(gone.out, "NOT_ENGAGED process " + std::to_string(before) + " is gone\n");
  json all = json::parse(run_overlay({"--json", "engaged", "--overlay", ov}).out);
  ASSERT_EQ(all["processes"].size(), 1u) << all.dump(2);
  EXPECT_EQ(all["processes"][0]["pid"], after);
  EXPECT_EQ(all["processes"][0]["state"], "patched");

  // Revert while `after` runs: clean on disk, not clean while it lives.
  Cmd r = run_overlay({"--json", "revert", "--overlay", ov});
  ASSERT_EQ(r.rc, 0) << r.err;
  json rj = json::parse(r.out);
  ASSERT_EQ(rj["still_running"].size(), 1u) << rj.dump(2);
  EXPECT_EQ(rj["still_running"][0]["pid"], after);
  Cmd c1 = run_overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(c1.rc, 1);
  EXPECT_NE(c1.err.find("install clean on disk; process " + std::to_string(after) + " ("), std::string::npos) << c1.err;
  EXPECT_NE(c1.err.find("still runs the patched " + lib + ": restart it"), std::string::npos) << c1.err;
  Cmd e4 = engaged(after);
  EXPECT_EQ(e4.rc, 1);
  EXPECT_NE(e4.out.find("\nNOT_ENGAGED process " + std::to_string(after) + " maps " + lib + " that revert replaced\n"),
            std::string::npos)
      << e4.out;

  // Restarted: clean, and the new process runs the original.
  stop(after);
  pid_t restarted = start("restarted");
  Cmd c2 = run_overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(c2.rc, 0) << c2.out << c2.err;
  Cmd e5 = engaged(restarted);
  EXPECT_EQ(e5.rc, 1);
  EXPECT_EQ(e5.out, "NOT_ENGAGED the overlay has no entry that a process could run (none added, or all reverted)\n")
      << e5.out;
}

TEST_F(Engaged, BadInputIsOneLineAndExitOne) {
  Cmd missing = run_overlay({"engaged", "--overlay", (t / "nope").string()});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_EQ(missing.err, "engaged: overlay does not exist: " + (t / "nope").string() + "\n");
  Cmd bad_pid = run_overlay({"engaged", "--overlay", ov, "--pid", "-3"});
  EXPECT_EQ(bad_pid.rc, 2);
  EXPECT_FALSE(fs::exists(ov));
}

// gc-stale reverts an abandoned overlay on disk and says which process still runs its build.
TEST_F(Engaged, GcStaleNamesTheProcessStillRunningWhatItReverted) {
  Cmd a = run_overlay({"add-native", "--overlay", ov, "--target", (inst / "k.c").string(), "--patched-file",
                       (t / "best/k.c").string(), "--artifact", lib, "--build-cmd", "cc -shared -fPIC -o libk.so k.c",
                       "--build-cwd", inst.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  pid_t running = start("running");
  Cmd g = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_NE(g.out.find("gc-stale: reverted " + ov), std::string::npos) << g.out;
  EXPECT_NE(g.err.find("gc-stale: warning: process " + std::to_string(running) + " ("), std::string::npos) << g.err;
  EXPECT_EQ(run_overlay({"status", "--overlay", ov, "--check-clean"}).rc, 1);
  stop(running);
  EXPECT_EQ(run_overlay({"status", "--overlay", ov, "--check-clean"}).rc, 0);
}

// The machine-wide view: three overlays known to one holds registry. `which` names the overlay,
// entry and patch that changed a file (source or artifact), and nothing for an untouched one;
// `status --all` gives a line each and --check-clean fails while any is not clean.
TEST_F(Engaged, WhichAndStatusAllOverThreeOverlays) {
  std::vector<std::string> state = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  std::vector<std::string> ovs;
  for (int i = 0; i < 3; ++i) {
    fs::path dir = t / ("inst" + std::to_string(i));
    write_file(dir / "k.c", "int kernel(void) { return " + std::to_string(i) + "; }\n");
    ASSERT_EQ(run({"cc", "-shared", "-fPIC", "-o", "libk.so", "k.c"}, dir).rc, 0);
    ovs.push_back((t / ("ov" + std::to_string(i))).string());
    Cmd a = run_overlay({"add-native", "--overlay", ovs.back(), "--target", (dir / "k.c").string(), "--patched-file",
                         (t / "best/k.c").string(), "--artifact", (dir / "libk.so").string(), "--build-cmd",
                         "cc -shared -fPIC -o libk.so k.c", "--build-cwd", dir.string()},
                        {}, state);
    ASSERT_EQ(a.rc, 0) << a.err;
  }
  json m = json::parse(read_file(fs::path(ovs[1]) / "_overlay_manifest.json"));
  std::string entry = m["natives"][0]["id"];
  Cmd w = run_overlay({"which", (t / "inst1/libk.so").string()}, {}, state);
  EXPECT_EQ(w.rc, 0) << w.err;
  EXPECT_EQ(w.out,
            (t / "inst1/libk.so").string() + ": overlay " + ovs[1] + "  entry " + entry + "  (artifact, rebuilt)\n");
  Cmd ws = run_overlay({"which", (t / "inst1/k.c").string()}, {}, state);
  EXPECT_NE(ws.out.find("overlay " + ovs[1] + "  entry " + entry + "  (source, patched)"), std::string::npos) << ws.out;
  Cmd none = run_overlay({"which", (t / "hold.c").string()}, {}, state);
  EXPECT_EQ(none.rc, 1);
  EXPECT_EQ(none.err, "which: no overlay known to the holds registry changed " + (t / "hold.c").string() + "\n");

  Cmd all = run_overlay({"status", "--all", "--check-clean"}, {}, state);
  EXPECT_EQ(all.rc, 1);
  for (const auto& o : ovs) EXPECT_NE(all.out.find(o + "  native 1  python 0"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("status: 3 overlay(s) known to the holds registry, 3 not clean"), std::string::npos)
      << all.out;
  for (const auto& o : ovs) ASSERT_EQ(run_overlay({"revert", "--overlay", o}, {}, state).rc, 0);
  Cmd after = run_overlay({"status", "--all", "--check-clean"}, {}, state);
  EXPECT_EQ(after.rc, 0) << after.out << after.err;
  EXPECT_NE(after.out.find("status: 0 overlay(s) known to the holds registry, 0 not clean"), std::string::npos)
      << after.out;
  EXPECT_EQ(run_overlay({"status", "--overlay", ovs[0], "--all"}, {}, state).rc, 2);
}

// Another user's process: root finds it; a caller of a third uid cannot read its maps, and says
// how many it could not read instead of guessing. Needs root (to run both as other users).
TEST_F(Engaged, AnotherUsersProcessIsFoundByRootAndCountedOtherwise) {
  if (geteuid() != 0 || !have({"setpriv", "--version"})) GTEST_SKIP() << "needs root and setpriv (util-linux)";
  Cmd a = run_overlay({"add-native", "--overlay", ov, "--target", (inst / "k.c").string(), "--patched-file",
                       (t / "best/k.c").string(), "--artifact", lib, "--build-cmd", "cc -shared -fPIC -o libk.so k.c",
                       "--build-cwd", inst.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(run({"chmod", "-R", "a+rwX", t.path().string()}).rc, 0);  // the other users read the lib and the overlay
  fs::path ready = t / "daemon.ready";
  pid_t daemon_pid = fork();
  if (daemon_pid == 0) {
    setpgid(0, 0);
    execlp("setpriv", "setpriv", "--reuid=1", "--regid=1", "--clear-groups", (t / "hold").c_str(), lib.c_str(),
           ready.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  started.push_back(daemon_pid);
  ASSERT_TRUE(until_ready_or_exited(daemon_pid, [&] { return fs::exists(ready); }));
  Cmd as_root = run_overlay({"engaged", "--overlay", ov});
  EXPECT_NE(as_root.out.find("process " + std::to_string(daemon_pid) + " ("), std::string::npos) << as_root.out;
  EXPECT_NE(as_root.out.find("  patched  " + lib), std::string::npos) << as_root.out;
  Cmd as_nobody = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", overlay_binary(), "--json",
                       "engaged", "--overlay", ov});
  EXPECT_EQ(as_nobody.rc, 0) << as_nobody.err;
  EXPECT_EQ(as_nobody.out.find("\"pid\": " + std::to_string(daemon_pid)), std::string::npos) << as_nobody.out;
  EXPECT_NE(as_nobody.err.find(
                "process(es) could not be read (permission denied: another user's need root, or CAP_SYS_PTRACE)"),
            std::string::npos)
      << as_nobody.err;
  EXPECT_EQ(as_nobody.out.find("\"unreadable_processes\": 0"), std::string::npos) << as_nobody.out;
  // Its verdict is "could not be read", never "gone" (the process lives) nor a guess.
  Cmd verdict = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", overlay_binary(), "engaged",
                     "--overlay", ov, "--pid", std::to_string(daemon_pid)});
  EXPECT_EQ(verdict.rc, 1);
  EXPECT_NE(verdict.out.find("NOT_ENGAGED process " + std::to_string(daemon_pid) +
                             "'s maps could not be read (permission denied"),
            std::string::npos)
      << verdict.out;
}

// revert asks the kernel first (a write lease is refused while any other process has the file
// open or mapped): with no process on the artifact it reads no process's maps at all; with one,
// it scans and names it.
TEST_F(Engaged, RevertScansProcessesOnlyWhenSomeoneHasTheArtifactOpen) {
  std::vector<std::string> add = {"add-native",
                                  "--overlay",
                                  ov,
                                  "--target",
                                  (inst / "k.c").string(),
                                  "--patched-file",
                                  (t / "best/k.c").string(),
                                  "--artifact",
                                  lib,
                                  "--build-cmd",
                                  "cc -shared -fPIC -o libk.so k.c",
                                  "--build-cwd",
                                  inst.string()};
  ASSERT_EQ(run_overlay(add).rc, 0);
  json quiet = json::parse(run_overlay({"--json", "revert", "--overlay", ov}).out);
  EXPECT_EQ(quiet["processes_examined"], 0) << quiet.dump(2);
  EXPECT_EQ(quiet["still_running"].size(), 0u);
  ASSERT_EQ(run_overlay(add).rc, 0);
  pid_t user = start("user");
  json busy = json::parse(run_overlay({"--json", "revert", "--overlay", ov}).out);
  EXPECT_GT(busy["processes_examined"].get<int>(), 1) << busy.dump(2);
  ASSERT_EQ(busy["still_running"].size(), 1u) << busy.dump(2);
  EXPECT_EQ(busy["still_running"][0]["pid"], user);
}
