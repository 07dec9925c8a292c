#include "overlay/lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <gtest/gtest.h>

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
}

// An overlay's lock is a file only its owner can open (issue 50: any account could flock the
// 0755 directory and block root's revert); an internal lock creates no file.
TEST(OverlayLock, AnOverlaysLockIsAFileOnlyItsOwnerCanOpenAndADirectorysNone) {
  TempDir t;
  fs::create_directories(t / "ov");
  fs::create_directories(t / "mark");
  {
    OverlayLock ov(t / "ov", 1.0);
    OverlayLock mark(t / "mark", 1.0, {}, LockOn::directory);
  }
  struct stat st {};
  ASSERT_EQ(::lstat((t / "ov" / kLockFileName).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(fs::is_empty(t / "mark"));
}

namespace {
// A child process holding a flock on `dir` (opened read-only, as flock(1) does), as `uid`; returns
// its pid once it holds it.
pid_t flock_in_child(const fs::path& dir, uid_t uid) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (uid != ::geteuid() && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(3);
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(4);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  bool ok = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  ::close(ready[1]);
  return ok ? pid : -1;
}
}  // namespace

// Another account's flock on the overlay directory guards nothing of ours: not waited for. The
// owner's (a version before the lock file) is waited for.
TEST(OverlayLock, AnotherAccountsFlockOnTheDirectoryIsNotWaitedForTheOwnersIs) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a second account: nobody)";
  TempDir t;
  fs::path ov = t / "ov";
  fs::create_directories(ov);
  fs::permissions(t.path(), fs::perms(0755));
  pid_t neighbour = flock_in_child(ov, 65534);
  ASSERT_GT(neighbour, 0);
  auto start = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(OverlayLock(ov, 5.0));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "waited for another account's flock";
  ::kill(neighbour, SIGKILL);
  ::waitpid(neighbour, nullptr, 0);
  pid_t old_version = flock_in_child(ov, ::geteuid());
  ASSERT_GT(old_version, 0);
  EXPECT_THROW(OverlayLock(ov, 0.3), LockTimeout);
  ::kill(old_version, SIGKILL);
  ::waitpid(old_version, nullptr, 0);
  EXPECT_NO_THROW(OverlayLock(ov, 0.3));
}

// A Python verb's lock (the overlay directory's flock alone) makes no file, and excludes a native
// writer (lock file and directory flock) both ways; another account's flock on the directory is
// not waited for there either.
TEST(OverlayLock, APythonVerbsLockMakesNoFileAndExcludesANativeWriter) {
  TempDir t;
  fs::path ov = t / "ov";
  fs::create_directories(ov);
  {
    OverlayLock py(ov, 1.0, {}, LockOn::overlay_directory);
    EXPECT_TRUE(fs::is_empty(ov)) << "a Python overlay's lock wrote a file";
    auto blocked = [&](LockOn on) {
      pid_t pid = ::fork();
      if (pid == 0) {
        try {
          OverlayLock other(ov, 0.2, {}, on);
          ::_exit(0);
        } catch (const LockTimeout&) {
          ::_exit(7);
        }
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      return WIFEXITED(status) && WEXITSTATUS(status) == 7;
    };
    EXPECT_TRUE(blocked(LockOn::overlay)) << "a native writer ran beside a Python verb";
    EXPECT_TRUE(blocked(LockOn::overlay_directory));
  }
  OverlayLock native(ov, 1.0);
  pid_t pid = ::fork();
  if (pid == 0) {
    try {
      OverlayLock other(ov, 0.2, {}, LockOn::overlay_directory);
      ::_exit(0);
    } catch (const LockTimeout&) {
      ::_exit(7);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 7) << "a Python verb ran beside a native writer";
  if (::geteuid() != 0) return;
  fs::path other = t / "other";
  fs::create_directories(other);
  fs::permissions(t.path(), fs::perms(0755));
  pid_t neighbour = flock_in_child(other, 65534);
  ASSERT_GT(neighbour, 0);
  EXPECT_NO_THROW(OverlayLock(other, 5.0, {}, LockOn::overlay_directory));
  ::kill(neighbour, SIGKILL);
  ::waitpid(neighbour, nullptr, 0);
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
