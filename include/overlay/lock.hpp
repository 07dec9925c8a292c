#pragma once
// An exclusive lock on an overlay directory (flock on the directory itself, so taking it
// creates no file). Held for every read-modify-write of the manifest.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace overlay {

namespace fs = std::filesystem;

class OverlayLock {
 public:
  // Waits at most timeout_s seconds for the lock; throws LockTimeout after that (saying what was
  // locked: "overlay DIR" unless `what` names it otherwise).
  OverlayLock(const fs::path& overlay_dir, double timeout_s, const std::string& what = {});
  ~OverlayLock();
  OverlayLock(const OverlayLock&) = delete;
  OverlayLock& operator=(const OverlayLock&) = delete;

 private:
  int fd_ = -1;
};

// Locks that serialise whole runs on an install (`exec`): one directory per path under
// `state_dir`/exec-locks, named by the SHA-256 of the path, taken in sorted order (no deadlock
// between runs that share some paths); all released when the result is destroyed.
std::vector<std::unique_ptr<OverlayLock>> lock_install_paths(const fs::path& state_dir, std::vector<std::string> paths,
                                                             double timeout_s);

// The wait used when the caller gives none: $OVERLAY_LOCK_TIMEOUT seconds, else 120.
double default_lock_timeout();

}  // namespace overlay
