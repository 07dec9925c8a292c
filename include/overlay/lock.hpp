#pragma once
// An exclusive lock on an overlay directory, held for every read-modify-write of the manifest.
// An overlay's lock is a flock on O/.overlay-lock, a file only the overlay's owner (and root) can
// open: a lock any local account could take (the directory itself, 0755) would let it block root's
// revert and gc-stale. Versions before this one flock the directory: that lock is taken too, and
// waited for while a process of the overlay's owner holds it; held by another account, it is
// named in a warning and not waited for. The Python verbs take that directory flock alone
// (LockOn::overlay_directory), so a Python overlay holds no lock file. Internal locks (the state
// dir's, in-flight marks: 0700 directories no other account can open) flock the directory itself.
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace overlay {

namespace fs = std::filesystem;

// What is flocked: an overlay's lock file (above), or the directory itself; or, for the Python
// verbs, an overlay's directory alone under the same rule as the lock file's companion flock
// (waited for while its owner's or root's process holds it, named and not waited for when another
// account's does). Native writers take the lock file and that flock, so Python and native writers
// exclude each other, and an overlay that never held a native entry holds no lock file: upstream's
// overlays hold only their own names, and tools list them.
enum class LockOn { overlay, directory, overlay_directory };

class OverlayLock {
 public:
  // Waits at most timeout_s seconds for the lock; throws LockTimeout after that (saying what was
  // locked: "overlay DIR" unless `what` names it otherwise).
  OverlayLock(const fs::path& dir, double timeout_s, const std::string& what = {}, LockOn on = LockOn::overlay);
  ~OverlayLock();
  OverlayLock(const OverlayLock&) = delete;
  OverlayLock& operator=(const OverlayLock&) = delete;

 private:
  int fd_ = -1;
  int dir_fd_ = -1;  // an overlay's directory, flocked for versions before the lock file
};

// The name of an overlay's lock file.
inline constexpr const char* kLockFileName = ".overlay-lock";

// The process holding a flock on the file or directory `fd` refers to, as /proc/locks names it
// in this PID namespace (nothing where none does, or it cannot be told).
std::optional<pid_t> flock_holder(int fd);

// The wait used when the caller gives none: $OVERLAY_LOCK_TIMEOUT seconds, else 120.
double default_lock_timeout();

}  // namespace overlay
