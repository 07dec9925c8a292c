#include "overlay/process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

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
  std::string script = "(trap '' TERM; sleep 2; touch " + (t / "survived").string() + ") & wait";
  RunResult r = run_process({"sh", "-c", script}, o);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  ::sleep(3);
  EXPECT_FALSE(fs::exists(t / "survived"));
}
