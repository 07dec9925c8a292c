#include "overlay/in_flight.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>

#include <gtest/gtest.h>

#include "overlay/lock.hpp"

#include "test_util.hpp"

using namespace overlay;
using overlay::test::TempDir;

TEST(InFlight, AMarkIsLiveWhileItsMakerHoldsIt) {
  TempDir t;
  EXPECT_TRUE(live_operations(real_disk(), t.path()).empty());
  {
    InFlight mark(real_disk(), t.path(), "add-native");
    auto live = live_operations(real_disk(), t.path());
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].op, "add-native");
    EXPECT_EQ(live[0].pid, ::getpid());
    EXPECT_EQ(describe_live(live), "add-native in progress, pid " + std::to_string(::getpid()));
  }
  EXPECT_TRUE(live_operations(real_disk(), t.path()).empty());
  EXPECT_TRUE(fs::is_empty(t.path())) << "the mark outlived its operation";
}

// kill -9: the kernel drops the flock with the process, so the mark is stale at once, whatever
// its name says, and the first look removes it.
TEST(InFlight, AKilledMakersMarkIsStaleAtOnceAndSwept) {
  TempDir t;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    InFlight mark(real_disk(), t.path(), "revert");
    char c = 'x';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  auto live = live_operations(real_disk(), t.path());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].pid, child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(live_operations(real_disk(), t.path()).empty());
  EXPECT_TRUE(fs::is_empty(t.path())) << "the dead run's mark was not swept";
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(InFlight, OnlyItsOwnNamesAreMarks) {
  TempDir t;
  fs::create_directories(t / ".overlay-live-add-native-notapid");
  fs::create_directories(t / ".overlay-live.tmp-exec-1");  // a maker killed before its rename
  overlay::test::write_file(t / ".overlay-live-exec-1", "a file, not a mark");
  EXPECT_TRUE(live_operations(real_disk(), t.path()).empty());
  EXPECT_TRUE(fs::exists(t / ".overlay-live-exec-1"));  // not ours to remove
}

// Two operations with one pid (two containers' pid 2 on one overlay; here, one process): each
// mark is its own, and the end of one leaves the other live (issue 50: the second's mark was
// renamed over the first's and removed with it, and gc-stale reverted the first mid-build).
TEST(InFlight, TwoMarksOfOnePidAreTwoMarks) {
  TempDir t;
  auto first = std::make_unique<InFlight>(real_disk(), t.path(), "add-native");
  {
    InFlight second(real_disk(), t.path(), "add-native");
    EXPECT_EQ(live_operations(real_disk(), t.path()).size(), 2u);
  }
  auto live = live_operations(real_disk(), t.path());
  ASSERT_EQ(live.size(), 1u) << "the end of one took the other's mark with it";
  EXPECT_EQ(live[0].op, "add-native");
  first.reset();
  EXPECT_TRUE(fs::is_empty(t.path()));
}

// An earlier version's mark ("<op>-<pid>") is still read; ours keep the pid last, where an earlier
// version reads it.
TEST(InFlight, MarksOfEarlierVersionsAreRead) {
  TempDir t;
  fs::create_directories(t / ".overlay-live-revert-12345");
  OverlayLock held(t / ".overlay-live-revert-12345", 0, "test", LockOn::directory);
  auto live = live_operations(real_disk(), t.path());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].op, "revert");
  EXPECT_EQ(live[0].pid, 12345);
  InFlight ours(real_disk(), t.path(), "exec");
  bool pid_last = false;
  for (const auto& e : fs::directory_iterator(t.path())) {
    std::string n = e.path().filename().string();
    if (n.rfind(".overlay-live-exec.", 0) == 0)
      pid_last = n.size() > 6 && n.substr(n.rfind('-') + 1) == std::to_string(::getpid());
  }
  EXPECT_TRUE(pid_last);
}
