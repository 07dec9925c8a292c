// Engagement of Python entries (issue 21) with real interpreters: a server process that runs the
// overlay's generated sitecustomize.py records, while it runs, which entries applied in it
// (_stats/live/), so `engaged --pid` judges a live server; one started without the overlay, one
// that has not imported the module yet, one started before an entry was added, one whose entry
// failed, and a parent whose child interpreter applied are each told apart. No fake /proc.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

// A server: imports pkg.ops and calls it 3 times ("import"), or not ("idle"), or starts a child
// interpreter that does ("parent"); writes READY, then exits normally once QUIT exists.
constexpr const char* kServer = R"(import os, subprocess, sys, time
ready, mode = sys.argv[1], sys.argv[2]
child = None
if mode == "import":
    import pkg.ops
    for i in range(3):
        pkg.ops.add(i, 1)
elif mode == "parent":
    child = subprocess.Popen([sys.executable, sys.argv[0], ready + ".child", "import"])
    while not os.path.exists(ready + ".child"):
        time.sleep(0.01)
open(ready, "w").write("ready")
while not os.path.exists(ready + ".quit"):
    time.sleep(0.02)
if child:
    open(ready + ".child.quit", "w").write("")
    child.wait()
)";

struct EngagedPython : ::testing::Test {
  TempDir t;
  std::string ov = (t / "ov").string(), site = (t / "site").string();
  std::vector<pid_t> started;

  void SetUp() override {
    write_file(t / "site/pkg/__init__.py", "");
    write_file(t / "site/pkg/ops.py", "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n");
    write_file(t / "fast_ops.py", "def fast_add(a, b):\n    return ('fast', a + b)\n");
    write_file(t / "server.py", kServer);
    ASSERT_EQ(rebind("add").rc, 0);
  }
  void TearDown() override {
    for (pid_t p : started)
      if (kill(p, 0) == 0) {
        kill(-p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
  }
  Cmd rebind(const std::string& attr, const std::string& impl = "fast_add") {
    return run_overlay({"add-rebind", "--overlay", ov, "--target", "pkg.ops:" + attr, "--impl-module", "fast_ops",
                        "--impl-attr", impl, "--impl-file", (t / "fast_ops.py").string(), "--count-calls"},
                       {}, {"PYTHONPATH=" + site});
  }
  // Starts `python3 server.py READY MODE`, with the overlay first on PYTHONPATH or without it.
  pid_t start(const std::string& name, const std::string& mode, bool with_overlay = true) {
    std::string ready = (t / (name + ".ready")).string();
    std::string pythonpath = "PYTHONPATH=" + (with_overlay ? ov + ":" : std::string()) + site;
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      execlp("env", "env", pythonpath.c_str(), "python3", (t / "server.py").c_str(), ready.c_str(), mode.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    started.push_back(pid);
    EXPECT_TRUE(until_ready_or_exited(pid, [&] { return fs::exists(ready); })) << name << " never started";
    return pid;
  }
  // Asks a server to exit normally (its atexit writes the final record) and waits for it.
  void quit(const std::string& name, pid_t pid) {
    write_file(t / (name + ".ready.quit"), "");
    waitpid(pid, nullptr, 0);
  }
  Cmd engaged(pid_t pid) { return run_overlay({"engaged", "--overlay", ov, "--pid", std::to_string(pid)}); }
  json python_entry(std::size_t i) {
    return json::parse(run_overlay({"--json", "status", "--overlay", ov}).out)["python"][i];
  }
};

std::string key(const std::string& attr, const std::string& impl = "fast_add") {
  return "rebind:pkg.ops:" + attr + "->fast_ops." + impl;
}

}  // namespace

TEST_F(EngagedPython, ALiveServerIsJudgedByWhatAppliedInIt) {
  pid_t plain = start("plain", "import", false);
  Cmd e0 = engaged(plain);
  EXPECT_EQ(e0.rc, 1);
  EXPECT_NE(e0.out.find("NOT_ENGAGED process " + std::to_string(plain) +
                        " and its 0 descendant(s) did not run the overlay's Python entries"),
            std::string::npos)
      << e0.out;
  // What would reach a process started without the overlay's environment is named, until the
  // overlay holds the worker modules.
  const std::string hint =
      "a TP worker started without the overlay's environment applies it through the worker modules: overlay "
      "add-worker-modules --overlay " +
      ov;
  EXPECT_NE(e0.out.find(hint), std::string::npos) << e0.out;
  ASSERT_EQ(run_overlay({"add-worker-modules", "--overlay", ov}).rc, 0);
  Cmd again = engaged(plain);
  EXPECT_EQ(again.rc, 1);
  EXPECT_EQ(again.out.find("add-worker-modules"), std::string::npos) << again.out;

  pid_t idle = start("idle", "idle");
  Cmd e1 = engaged(idle);
  EXPECT_EQ(e1.rc, 1);
  EXPECT_NE(e1.out.find("NOT_ENGAGED Python entry " + key("add") + " has not applied in process " +
                        std::to_string(idle) + " (its module is not imported yet)"),
            std::string::npos)
      << e1.out;
  EXPECT_NE(e1.out.find("    pending  " + key("add")), std::string::npos) << e1.out;

  pid_t user = start("user", "import");
  Cmd e2 = engaged(user);
  EXPECT_EQ(e2.rc, 0) << e2.out << e2.err;
  EXPECT_NE(e2.out.find("ENGAGED process " + std::to_string(user) + " applied 1 Python entry\n"), std::string::npos)
      << e2.out;
  EXPECT_NE(e2.out.find("    applied  " + key("add")), std::string::npos) << e2.out;
  json p = python_entry(0);
  EXPECT_EQ(p["applied_processes"], 1) << p;
  EXPECT_EQ(p["running_processes"], 1) << p;
  EXPECT_EQ(p["calls"], 0) << p;  // a running process's calls land when it exits

  // A parent that never imports the module: the child interpreter it started applied it.
  pid_t parent = start("parent", "parent");
  Cmd e3 = engaged(parent);
  EXPECT_EQ(e3.rc, 0) << e3.out;
  EXPECT_NE(e3.out.find(" (a descendant) applied 1 Python entry"), std::string::npos) << e3.out;
  json all = json::parse(run_overlay({"--json", "engaged", "--overlay", ov}).out);
  EXPECT_EQ(all["python_processes"].size(), 4u) << all.dump(2);  // idle, user, parent, its child
  EXPECT_EQ(all["python"][0]["running_processes"], 2) << all.dump(2);

  // An entry added after the server started: it cannot have applied there.
  ASSERT_EQ(rebind("mul", "fast_add").rc, 0);
  Cmd e4 = engaged(user);
  EXPECT_EQ(e4.rc, 1);
  EXPECT_NE(e4.out.find("NOT_ENGAGED Python entry " + key("mul") + " has not applied in process " +
                        std::to_string(user) + " (added after it started: restart it)"),
            std::string::npos)
      << e4.out;

  // Exited normally: its live record became its final record, counted once, with its calls.
  quit("user", user);
  EXPECT_EQ(engaged(user).out, "NOT_ENGAGED process " + std::to_string(user) + " is gone\n");
  p = python_entry(0);
  EXPECT_EQ(p["applied_processes"], 2) << p;  // user (exited) + parent's child (running)
  EXPECT_EQ(p["running_processes"], 1) << p;
  EXPECT_EQ(p["calls"], 3) << p;
  // Killed with -9: no final record, but it did apply; counted, not running.
  EXPECT_TRUE(kill_group_and_wait(parent));
  p = python_entry(0);
  EXPECT_EQ(p["applied_processes"], 2) << p;
  EXPECT_EQ(p["running_processes"], 0) << p;
  Cmd s = run_overlay({"status", "--overlay", ov});
  EXPECT_NE(s.out.find("rebind pkg.ops:add -> fast_ops.fast_add  applied in 2 process(es), 3 call(s)\n"),
            std::string::npos)
      << s.out;
}

// An entry that fails where it applies makes the process NOT_ENGAGED, naming the entry.
TEST_F(EngagedPython, AFailedEntryIsNotEngaged) {
  ASSERT_EQ(rebind("nope").rc, 0);  // pkg.ops has no attribute nope: fails on import
  pid_t user = start("user", "import");
  Cmd e = engaged(user);
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.out.find("NOT_ENGAGED process " + std::to_string(user) + ": " + key("nope") + " FAILED"),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("    FAILED   " + key("nope")), std::string::npos) << e.out;
  quit("user", user);
  EXPECT_FALSE(fs::exists(t / "ov/_stats/live") && !fs::is_empty(t / "ov/_stats/live"))
      << "an exited process's live record stays";
}

// A copy of an overlay (the pipeline seeds candidates with `cp -r "$CURRENT"/. "$CAND"/`) takes
// its records along; no process ran the copy, so it is engaged in none and applied in none, while
// the overlay copied stays engaged, and a moved one keeps its records (issue 74: the copy said
// ENGAGED for the server running the original, and "applied in 2 process(es)").
TEST_F(EngagedPython, ACopyOfAnOverlayCarriesNoEngagement) {
  pid_t server = start("server", "import");
  pid_t done = start("done", "import");
  quit("done", done);  // a final record as well as a live one
  ASSERT_EQ(engaged(server).rc, 0) << engaged(server).out;
  std::string cand = (t / "cand").string();
  Cmd cp = run({"cp", "-r", ov, cand});
  ASSERT_EQ(cp.rc, 0) << cp.err;
  ASSERT_TRUE(fs::exists(t / "cand/_stats/live")) << "the copy took the records along";
  Cmd e = run_overlay({"engaged", "--overlay", cand, "--pid", std::to_string(server)});
  EXPECT_EQ(e.rc, 1) << e.out;
  EXPECT_EQ(e.out.find("NOT_ENGAGED"), 0u) << e.out;
  json s = json::parse(run_overlay({"--json", "status", "--overlay", cand}).out)["python"][0];
  EXPECT_EQ(s["applied_processes"], 0) << s;
  EXPECT_EQ(s["running_processes"], 0) << s;
  EXPECT_EQ(python_entry(0)["applied_processes"], 2) << python_entry(0);
  EXPECT_EQ(engaged(server).rc, 0);
  // Moved, not copied: its own still.
  std::string moved = (t / "moved").string();
  fs::rename(ov, moved);
  Cmd m = run_overlay({"engaged", "--overlay", moved, "--pid", std::to_string(server)});
  EXPECT_EQ(m.rc, 0) << m.out;
  EXPECT_NE(m.out.find("\nENGAGED process " + std::to_string(server)), std::string::npos) << m.out;
  fs::rename(moved, ov);
  quit("server", server);
}
