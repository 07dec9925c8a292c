#include "overlay/in_flight.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>

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
