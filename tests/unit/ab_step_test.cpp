// The A/B step driven through the library (issue 53): every mutating disk operation of a whole
// step (reference, apply, build, candidate, revert, clean check) fails in turn. Whatever the
// step then says, the install is never left patched behind a success: an exit 0 means the
// install is as before, and any other outcome is undone by one revert with a healthy disk.
#include "overlay/ab_step.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/native.hpp"

#include "faulty_disk.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

struct Step {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  std::vector<std::string> lines, notes;
  nlohmann::json doc = nlohmann::json::object();

  AbStepRequest request() {
    write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
    AbStepRequest r;
    r.change.overlay = t / "ov";
    r.change.targets = {in.source};
    r.change.patched_files = {t / "patched.cpp"};
    r.change.artifacts = {in.artifact};
    r.change.caches = {in.cache};
    r.change.build_cmds = {"sh -c 'echo rebuilt > lib/libk.so; mkdir -p cache/new; echo x > cache/new/f'"};
    r.change.build_cwd = in.root;
    r.change.lock_timeout = 5;
    r.change.state_dir = t / "state";
    r.cmd = {"sh", "-c", "cat " + in.source.string() + " > /dev/null"};
    r.ref = true;
    return r;
  }
  int run(Disk& disk) {
    StepOutput out{[&](const std::string& s) { lines.push_back(s); }, [&](const std::string& s) { notes.push_back(s); },
                   doc, -1, -1};
    return run_ab_step(disk, request(), out);
  }
};

}  // namespace

TEST(AbStep, ASuccessfulStepLeavesTheInstallAsItFoundIt) {
  Step s;
  EXPECT_EQ(s.run(real_disk()), 0);
  EXPECT_EQ(tree_digest(s.in.root), s.before);
  EXPECT_NE(std::find(s.lines.begin(), s.lines.end(), "FRESH_BUILD_OK (checked 1)"), s.lines.end());
  EXPECT_EQ(s.doc["clean"]["clean"], true);
  EXPECT_EQ(s.doc["cand"]["status"], 0);
  EXPECT_TRUE(fs::exists(s.doc["cand"]["stdout_log"].get<std::string>()));
}

TEST(AbStep, FaultSweepNeverLeavesThePatchBehindASuccess) {
  FaultyDisk counter(real_disk());
  {
    Step s;
    ASSERT_EQ(s.run(counter), 0) << (s.notes.empty() ? "" : s.notes.back());
  }
  long ops = counter.count();
  ASSERT_GT(ops, 20);
  int succeeded = 0, failed = 0, threw = 0;
  for (long n = 1; n <= ops; ++n) {
    Step s;
    FaultyDisk disk(real_disk());
    disk.fail_at(n, n % 2 ? ENOSPC : EIO);
    int rc = -1;
    try {
      rc = s.run(disk);
    } catch (const Error&) {
      ++threw;
    }
    if (rc == 0) {
      ++succeeded;  // a fault the step could live with (a log): the install is as before, now
      EXPECT_EQ(tree_digest(s.in.root), s.before) << "exit 0 over a changed install, fault at op " << n;
      continue;
    }
    failed += rc > 0;
    RevertOptions o;
    o.state_dir = s.t / "state";
    RevertReport r = revert_natives(real_disk(), s.t / "ov", o);
    EXPECT_TRUE(r.ok()) << "fault at op " << n << ": " << (r.problems.empty() ? "" : r.problems[0].reason);
    EXPECT_TRUE(settle_litter(s.in.root)) << "fault at op " << n;
    EXPECT_EQ(tree_digest(s.in.root), s.before) << "fault at op " << n << " (exit " << rc << ")";
  }
  std::printf("fault sweep (exec's step): %ld faults, %d steps exit 0, %d failed with a status, %d refused\n", ops,
              succeeded, failed, threw);
  EXPECT_GT(failed, 0);
}
