#include "overlay/lock.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "overlay/error.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(OverlayLock, SecondHolderTimesOutThenSucceedsAfterRelease) {
  TempDir t;
  auto lock = std::make_unique<OverlayLock>(t.path(), 1.0);
  // flock is per open file description: a second open in this process contends like another process.
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(OverlayLock(t.path(), 0.2), LockTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  lock.reset();
  EXPECT_NO_THROW(OverlayLock(t.path(), 0.2));
  EXPECT_TRUE(fs::is_empty(t.path()));  // taking the lock creates no file
}

TEST(OverlayLock, ExcludesAnotherProcess) {
  TempDir t;
  OverlayLock lock(t.path(), 1.0);
  pid_t pid = ::fork();
  if (pid == 0) {
    try {
      OverlayLock other(t.path(), 0.1);
      ::_exit(0);
    } catch (const LockTimeout&) {
      ::_exit(7);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(OverlayLock, MissingDirIsAnError) {
  TempDir t;
  EXPECT_THROW(OverlayLock(t / "nope", 0.1), DiskError);
}
