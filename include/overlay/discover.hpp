#pragma once
// `discover`: which of the install's own builds compile a source file, and what each rebuilds.
// Read-only: it reads files, and runs only read-only queries (`ninja -t query|deps`, `make -n`);
// it never builds, never writes, never takes an overlay lock.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct DiscoverRequest {
  fs::path target;                   // the source file (may be reached through symlinks)
  fs::path root = "/";               // the walk up from the file stops here
  std::vector<fs::path> cache_roots; // JIT cache roots searched besides the default ones
  bool default_cache_roots = true;   // $TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions
};

struct BuildCandidate {
  std::string kind;  // ninja | cmake | make | torch-jit | setuptools | config
  std::optional<std::vector<std::string>> build_cmd;  // null: the build happens on import
  fs::path build_cwd;
  std::vector<fs::path> artifacts;  // built files that depend on the target
  std::vector<fs::path> caches;     // dirs to pass to --invalidate-cache
  std::vector<std::string> evidence;
  // The flags to append to `add-native --overlay O --patched-file F`.
  std::vector<std::string> add_native_args(const fs::path& target) const;
};

struct DiscoverReport {
  fs::path target;  // absolute, as given
  std::vector<BuildCandidate> candidates;  // best (rebuilds least) first
  std::vector<std::string> searched;       // every place looked at
};

// Throws Error when the target is missing or not a regular file.
DiscoverReport discover(Disk& disk, const DiscoverRequest& req);

}  // namespace overlay
