#include "overlay/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"

namespace overlay {

OverlayLock::OverlayLock(const fs::path& overlay_dir, double timeout_s, const std::string& what) {
  fd_ = ::open(overlay_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw DiskError("open overlay", overlay_dir.string(), errno);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd_);
      throw DiskError("lock overlay", overlay_dir.string(), err);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd_);
      throw LockTimeout((what.empty() ? "overlay " + overlay_dir.string() : what) + " is locked by another overlay process (waited " +
                        std::to_string(timeout_s) + " s; see --lock-timeout)");
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(50)) pause *= 2;
  }
}

OverlayLock::~OverlayLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

std::vector<std::unique_ptr<OverlayLock>> lock_install_paths(const fs::path& state_dir, std::vector<std::string> paths,
                                                             double timeout_s) {
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  fs::path dir = state_dir / "exec-locks";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DiskError("create", dir.string(), ec.value());
  std::vector<std::unique_ptr<OverlayLock>> held;
  for (const auto& p : paths) {
    fs::path lock = dir / sha256_hex(p);
    if (::mkdir(lock.c_str(), 0700) != 0 && errno != EEXIST) throw DiskError("mkdir", lock.string(), errno);
    held.push_back(std::make_unique<OverlayLock>(lock, timeout_s, p + " (a run of overlay exec on it)"));
  }
  return held;
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
