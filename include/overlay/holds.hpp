#pragma once
// One owner per installed file: a small registry of which overlay holds in-place changes to
// which installed file, so two candidates never stack native changes by accident.
// Registry: $OVERLAY_STATE_DIR, else $XDG_STATE_HOME/overlay, else ~/.local/state/overlay
// (else /tmp/overlay-state-<uid>); one file per held path under holds/, named by its SHA-256.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct Manifest;

class HoldRegistry {
 public:
  HoldRegistry(Disk& disk, fs::path state_dir) : disk_(disk), dir_(std::move(state_dir) / "holds") {}

  // The registry of this user (see above).
  static fs::path default_state_dir();

  // Under the registry's lock: refuses (Error naming the holder) when another overlay whose
  // manifest still records a native change to one of `paths` holds it; then records `overlay`
  // as the holder of each. With force, takes the holds over without checking.
  void acquire(const std::vector<fs::path>& paths, const fs::path& overlay, bool force, double lock_timeout);

  // Drops the holds `overlay` has on `paths` that `recorded` — its manifest as just saved — no
  // longer records a change to (holds of other overlays stay).
  void release(const std::vector<fs::path>& paths, const fs::path& overlay, const Manifest& recorded, double lock_timeout);

  // The overlay recorded as holding `path`, whether or not that hold is still live.
  std::optional<fs::path> holder(const fs::path& path);

  // Every overlay some hold names (each once, sorted): the overlays of this machine with native
  // changes applied, as far as this registry knows. Read-only.
  std::vector<fs::path> overlays();

 private:
  fs::path hold_file(const fs::path& path) const;
  bool still_holds(const fs::path& holder, const fs::path& path);

  Disk& disk_;
  fs::path dir_;
};

}  // namespace overlay
