#pragma once
// An operation in flight owns its overlay: while an InFlight lives, gc-stale leaves the overlay
// alone, whether or not the run named an --owner-pid. The mark is a directory in the overlay,
// .overlay-live-<op>.<token>-<pid>, flocked by its maker for as long as the operation runs. The kernel
// drops a flock the instant its holder dies (kill -9 included), so a crashed operation is stale
// at once, with no timeout, whatever PID namespace it ran in and whatever process later reuses
// its PID: a mark is live exactly while its lock is held, and its name only says who to blame.
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

class OverlayLock;

// Marks `overlay` (an existing directory) live for operation `op` until destroyed. The mark is
// made under a temporary name and locked before it takes its own, so a mark seen by its name is
// locked for as long as its maker runs.
class InFlight {
 public:
  InFlight(Disk& disk, const fs::path& overlay, const std::string& op);
  ~InFlight();
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Disk& disk_;
  fs::path mark_;
  std::unique_ptr<OverlayLock> lock_;
};

struct LiveOperation {
  std::string op;  // add-native, apply, exec, revert
  pid_t pid = 0;
  bool ours = false;  // marked by this process (an exec reverting its own entry)
};

// The operations in flight on `overlay` now (their marks locked by a running process). Marks a
// dead operation left behind are removed (best effort: an overlay that cannot be written keeps
// them, and they are still not live).
std::vector<LiveOperation> live_operations(Disk& disk, const fs::path& overlay);

// "add-native in progress, pid P" for the first of `ops`; "" when there is none.
std::string describe_live(const std::vector<LiveOperation>& ops);

}  // namespace overlay
