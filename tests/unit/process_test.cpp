#include "overlay/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(RunProcess, NoShellAndCwd) {
  TempDir t;
  RunOptions o;
  o.cwd = t.path();
  RunResult r = run_process({"touch", "a b", "c;d"}, o);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(fs::exists(t / "a b"));
  EXPECT_TRUE(fs::exists(t / "c;d"));
}

TEST(RunProcess, ExitCodeAndCapture) {
  RunOptions o;
  o.output = Output::capture;
  RunResult r = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"}, o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.rc(), 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(RunProcess, SignalReported) {
  RunResult r = run_process({"sh", "-c", "kill -9 $$"}, {});
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_EQ(r.rc(), -9);
  EXPECT_FALSE(r.ok());
}

TEST(RunProcess, MissingProgram) {
  RunResult r = run_process({"/nonexistent/program"}, {});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.exec_error.find("No such file"), std::string::npos);
}

TEST(RunProcess, LogKeepsOutput) {
  TempDir t;
  RunOptions o;
  auto log = real_disk().create(t / "build.log", 0644, CreateMode::truncate);
  o.log = log.get();
  run_process({"sh", "-c", "echo one; echo two >&2"}, o);
  log->close();
  EXPECT_EQ(read_file(t / "build.log"), "one\ntwo\n");
}

TEST(RunProcess, TimeoutKillsWholeGroup) {
  TempDir t;
  RunOptions o;
  o.timeout_s = 0.3;
  o.kill_grace_s = 0.2;
  // A grandchild that ignores SIGTERM and would write a file later if it survived.
  std::string script = "(trap '' TERM; sleep 2; touch " + (t / "survived").string() + ") & echo $! > " +
                       (t / "child.pid").string() + "; wait";
  RunResult r = run_process({"sh", "-c", script}, o);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  wait_until_dead(std::stoi(read_file(t / "child.pid")));
  EXPECT_FALSE(fs::exists(t / "survived"));
}

// The child is started as posix_spawn would (clone with CLONE_VM | CLONE_VFORK), so what execvp
// did in a forked child is done beforehand: the program found on the child's PATH (skipping a
// non-executable match), the environment given, a script without "#!" run by /bin/sh, stdin
// /dev/null, only 0-2 open, its own process group, signal dispositions default.
TEST(RunProcess, LooksUpTheChildsPathAndPassesTheEnvironment) {
  TempDir t;
  fs::create_directories(t / "a");
  fs::create_directories(t / "b");
  write_file(t / "a/tool", "#!/bin/sh\necho wrong\n", 0644);            // not executable: skipped
  write_file(t / "b/tool", "echo right \"$GREETING\" \"$1\"\n", 0755);  // no #!: run by /bin/sh
  RunOptions o;
  o.output = Output::capture;
  o.env_set = {"PATH=" + (t / "a").string() + ":" + (t / "b").string() + ":/usr/bin:/bin", "GREETING=hi"};
  RunResult r = run_process({"tool", "arg"}, o);
  EXPECT_TRUE(r.ok()) << describe(r) << r.err;
  EXPECT_EQ(r.out, "right hi arg\n");
  EXPECT_EQ(std::getenv("GREETING"), nullptr);  // ours untouched
}

namespace {
// Descriptors above 2 that a child of ours inherits (not close-on-exec) and that name /dev/null.
int inherited_dev_nulls() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    int fd = std::stoi(e.path().filename().string());
    std::error_code ec;
    if (fd > 2 && fs::read_symlink(e.path(), ec) == "/dev/null" && !(::fcntl(fd, F_GETFD) & FD_CLOEXEC)) ++n;
  }
  return n;
}
}  // namespace

TEST(RunProcess, ChildStartsCleanInItsOwnGroup) {
  RunOptions o;
  o.output = Output::capture;
  RunResult r = run_process({"sh", "-c",
                             "ls -l /proc/self/fd | grep -c ' -> /dev/null$'; read x && echo read; "
                             "cut -d' ' -f5 /proc/$$/stat; grep SigIgn /proc/self/status"},
                            o);
  ASSERT_TRUE(r.ok()) << r.err;
  std::istringstream lines(r.out);
  std::string fds, group, ignored;
  std::getline(lines, fds);
  std::getline(lines, group);
  std::getline(lines, ignored);
  // stdin is /dev/null, and the descriptor it was opened on is not left open besides.
  EXPECT_EQ(fds, std::to_string(1 + inherited_dev_nulls()));
  EXPECT_NE(group, std::to_string(::getpgrp()));
  EXPECT_EQ(ignored, "SigIgn:\t0000000000000000");
}

TEST(RunProcess, ProgramNotOnPathIsReported) {
  RunOptions o;
  o.env_set = {"PATH=/nonexistent"};
  RunResult r = run_process({"no-such-program-anywhere"}, o);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.exec_error.find("no-such-program-anywhere: No such file"), std::string::npos) << r.exec_error;
}
