#include "overlay/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"

namespace overlay {

namespace {

using Clock = std::chrono::steady_clock;

// Takes an exclusive flock on fd, retrying until `deadline`; false at the deadline. Throws on an
// error other than contention.
bool flock_by(int fd, Clock::time_point deadline, const fs::path& path) {
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) throw DiskError("lock overlay", path.string(), err);
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(50)) pause *= 2;
  }
  return true;
}

std::string waited(const fs::path& dir, double timeout_s, const std::string& what) {
  return (what.empty() ? "overlay " + dir.string() : what) + " is locked by another overlay process (waited " +
         std::to_string(timeout_s) + " s; see --lock-timeout)";
}

// The owner of a running process (its /proc entry's), or nothing.
std::optional<uid_t> uid_of(pid_t pid) {
  struct stat st {};
  if (pid <= 0 || ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return std::nullopt;
  return st.st_uid;
}

// O/.overlay-lock, opened for the flock (made, 0600 and the overlay's owner's, the first time);
// -1 where this process cannot (a reader of another account's overlay, a read-only filesystem):
// then the directory is what it locks, as before.
int open_lock_file(const fs::path& dir, struct stat& dir_st) {
  int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw DiskError("open overlay", dir.string(), errno);
  int fd =
      ::fstat(dfd, &dir_st) == 0 ? ::openat(dfd, kLockFileName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
  int err = errno;
  ::close(dfd);
  if (fd < 0) {
    if (err == EACCES || err == EPERM || err == EROFS) return -1;
    throw DiskError("open lock file", (dir / kLockFileName).string(), err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error((dir / kLockFileName).string() + " is not a regular file: remove it");
  }
  // Made by root in another account's overlay: that account's, so that it can lock it too.
  if (st.st_uid != dir_st.st_uid && ::geteuid() == 0 && st.st_uid == 0 &&
      ::fchown(fd, dir_st.st_uid, dir_st.st_gid) == 0)
    st.st_uid = dir_st.st_uid;
  if (st.st_uid != dir_st.st_uid && st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error((dir / kLockFileName).string() + " belongs to uid " + std::to_string(st.st_uid) +
                ", not to the overlay's owner (uid " + std::to_string(dir_st.st_uid) + "): remove it");
  }
  return fd;
}

}  // namespace

std::optional<pid_t> flock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%lu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    // "N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END"; "N: -> …" lines are waiters.
    std::istringstream in(line);
    std::string id, type, mode, access, pid, dev;
    if (!(in >> id >> type) || type != "FLOCK" || !(in >> mode >> access >> pid >> dev) || dev != want) continue;
    try {
      long p = std::stol(pid);
      return p > 0 ? std::optional<pid_t>(static_cast<pid_t>(p)) : std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

OverlayLock::OverlayLock(const fs::path& dir, double timeout_s, const std::string& what, LockOn on) {
  // Capped at a year: a larger wait would overflow the clock's range.
  Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(std::min(timeout_s, 3.2e7)));
  struct stat dir_st {};
  if (on == LockOn::overlay) fd_ = open_lock_file(dir, dir_st);
  if (on == LockOn::overlay_directory) {
    dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0 || ::fstat(dir_fd_, &dir_st) != 0) {
      int err = errno;
      if (dir_fd_ >= 0) ::close(dir_fd_);
      throw DiskError("open overlay", dir.string(), err);
    }
  } else if (fd_ < 0) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) throw DiskError("open overlay", dir.string(), errno);
  } else {
    // The directory too, for versions before the lock file: waited for while the overlay's owner
    // (or root) holds it; another account's flock guards nothing of ours and is only named.
    dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  try {
    if (fd_ >= 0 && !flock_by(fd_, deadline, dir)) throw LockTimeout(waited(dir, timeout_s, what));
    while (dir_fd_ >= 0 && !flock_by(dir_fd_, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)), dir)) {
      pid_t pid = flock_holder(dir_fd_).value_or(0);
      auto owner = uid_of(pid);
      if (pid > 0 && !owner && Clock::now() < deadline) continue;  // it ended meanwhile
      uid_t uid = owner.value_or(static_cast<uid_t>(-1));
      if (uid != dir_st.st_uid && uid != ::geteuid() && uid != 0) {
        spdlog::warn("{} is flocked by {}, an account that does not own it: not waited for{}", dir.string(),
                     pid > 0 ? "pid " + std::to_string(pid) + " (uid " + std::to_string(uid) + ")"
                             : std::string("a process this one cannot see"),
                     on == LockOn::overlay_directory
                         ? std::string()
                         : " (the overlay's lock is " + (dir / kLockFileName).string() + ")");
        ::close(dir_fd_);
        dir_fd_ = -1;
      } else if (Clock::now() >= deadline) {
        throw LockTimeout(
            waited(dir, timeout_s, what) + "; the directory's flock is held by pid " + std::to_string(pid) +
            (on == LockOn::overlay_directory ? std::string() : " (an overlay from before the lock file?)"));
      }
    }
  } catch (...) {
    ::close(fd_);
    if (dir_fd_ >= 0) ::close(dir_fd_);
    throw;
  }
}

OverlayLock::~OverlayLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

double default_lock_timeout() {
  if (const char* v = std::getenv("OVERLAY_LOCK_TIMEOUT")) {
    char* end = nullptr;
    double d = std::strtod(v, &end);
    if (end != v && *end == '\0' && d >= 0) return d;
  }
  return 120.0;
}

}  // namespace overlay
