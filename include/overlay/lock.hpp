#pragma once
// An exclusive lock on an overlay directory (flock on the directory itself, so taking it
// creates no file). Held for every read-modify-write of the manifest.
#include <filesystem>

namespace overlay {

namespace fs = std::filesystem;

class OverlayLock {
 public:
  // Waits at most timeout_s seconds for the lock; throws LockTimeout after that.
  OverlayLock(const fs::path& overlay_dir, double timeout_s);
  ~OverlayLock();
  OverlayLock(const OverlayLock&) = delete;
  OverlayLock& operator=(const OverlayLock&) = delete;

 private:
  int fd_ = -1;
};

// The wait used when the caller gives none: $OVERLAY_LOCK_TIMEOUT seconds, else 120.
double default_lock_timeout();

}  // namespace overlay
