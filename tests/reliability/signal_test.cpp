// SIGINT during the build is forwarded to the build's whole process group; overlay exits 130
// and the entry stays revertable.
#include <signal.h>

#include <chrono>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay::test;

TEST(Signals, InterruptDuringBuildForwardedAndRevertable) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  // The build records the SIGINT it receives; its background grandchild (which, started by a
  // non-interactive shell, ignores SIGINT) records its PID and must not survive either.
  std::string script = "trap 'echo int > " + (t / "build-got-int").string() +
                       "; exit 130' INT; "
                       "(sleep 3; touch " +
                       (t / "grandchild-ran").string() + ") & echo $! > " + (t / "grandchild.pid").string() +
                       "; "
                       "echo x > " +
                       in.artifact.string() + "; touch " + (t / "started").string() + "; wait";
  pid_t pid = spawn_overlay(AddNativeArgs(t / "ov")
                                .target(in.source, t / "patched.cpp")
                                .artifact(in.artifact)
                                .cache(in.cache)
                                .build("sh -c \"" + script + "\""),
                            {"OVERLAY_STATE_DIR=" + (t / "state").string()});
  ASSERT_TRUE(until_ready_or_exited(pid, [&] { return fs::exists(t / "started"); }));
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_rc(pid), 130);
  EXPECT_TRUE(fs::exists(t / "build-got-int")) << "overlay returned before its build ended";
  wait_until_dead(std::stoi(read_file(t / "grandchild.pid")));
  EXPECT_FALSE(fs::exists(t / "grandchild-ran")) << "the build's grandchild survived";
  Cmd r =
      run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, {"OVERLAY_STATE_DIR=" + (t / "state").string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST(Signals, BuildTimeoutKillsGroupAndStaysRevertable) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::string script = "(trap '' TERM; sleep 3; touch " + (t / "survivor").string() + ") & echo $! > " +
                       (t / "child.pid").string() + "; sleep 30";
  auto start = std::chrono::steady_clock::now();
  Cmd a = run_overlay(AddNativeArgs(t / "ov")
                          .target(in.source, t / "patched.cpp")
                          .flag("--build-timeout", "0.5")
                          .build("sh -c \"" + script + "\""),
                      {}, {"OVERLAY_STATE_DIR=" + (t / "state").string()});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25)) << "it waited for the build's 30 s";
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("(timed out)"), std::string::npos) << a.err;
  wait_until_dead(std::stoi(read_file(t / "child.pid")));
  EXPECT_FALSE(fs::exists(t / "survivor"));
  EXPECT_EQ(
      run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, {"OVERLAY_STATE_DIR=" + (t / "state").string()}).rc,
      0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST(Signals, TimedOutBuildWithRevertOnFailureLeavesOriginalAndNoSurvivor) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  // The child's pid goes where the tracer records nothing (the state dir): revert puts back every
  // other file the build made, wherever it is (issue 74).
  std::string script = "echo half > " + in.artifact.string() + "; (trap '' TERM; sleep 3; touch " +
                       (t / "survivor").string() + ") & echo $! > " + (t / "state/child.pid").string() + "; sleep 30";
  Cmd a = run_overlay(AddNativeArgs(t / "ov")
                          .target(in.source, t / "patched.cpp")
                          .artifact(in.artifact)
                          .cache(in.cache)
                          .flag("--build-timeout", "0.5")
                          .flag("--revert-on-failure")
                          .build("sh -c \"" + script + "\""),
                      {}, {"OVERLAY_STATE_DIR=" + (t / "state").string()});
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("(timed out)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("--revert-on-failure: entry"), std::string::npos) << a.err;
  EXPECT_EQ(tree_digest(in.root), before) << "reverted before add-native returned";
  wait_until_dead(std::stoi(read_file(t / "state/child.pid")));
  EXPECT_FALSE(fs::exists(t / "survivor"));
}

// A build must not outlive an overlay killed with -9 (PR_SET_PDEATHSIG, set by the child between
// its clone and execve): the build's shell dies with it, so the step it had left never runs.
TEST(Signals, BuildDiesWithAKilledOverlay) {
  TempDir t;
  Install in = make_install(t / "inst");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::string script = "echo $$ > " + (t / "build.pid").string() + "; sleep 2; touch " + (t / "finished").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  pid_t pid = spawn_overlay(
      AddNativeArgs(t / "ov").target(in.source, t / "patched.cpp").build("sh -c \"" + script + "\""), env);
  // Until the pid is written, not merely the file created (the shell opens it, then writes).
  auto written = [&] {
    return fs::exists(t / "build.pid") && read_file(t / "build.pid").find('\n') != std::string::npos;
  };
  ASSERT_TRUE(until_ready_or_exited(pid, written));
  ::kill(pid, SIGKILL);
  wait_rc(pid);
  wait_until_dead(std::stoi(read_file(t / "build.pid")));
  EXPECT_FALSE(fs::exists(t / "finished")) << "the build ran on after overlay was killed";
  EXPECT_EQ(run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env).rc, 0);
}
