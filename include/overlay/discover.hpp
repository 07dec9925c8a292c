#pragma once
// `discover`: which of the install's own builds compile a source file, and what each rebuilds.
// Read-only: it reads files, and runs only read-only queries (`ninja -t query|deps`, `make -n`,
// an interpreter asked what it can import); it never builds, never writes, never takes an
// overlay lock. One file per build system under src/discover/, behind this one entry.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct DiscoverRequest {
  fs::path target;                    // the source file (may be reached through symlinks)
  fs::path root = "/";                // the walk up from the file stops here
  std::vector<fs::path> cache_roots;  // JIT cache roots searched besides the default ones
  bool default_cache_roots = true;    // $TORCH_EXTENSIONS_DIR (else ~/.cache/torch_extensions), aiter's
};

using Argv = std::vector<std::string>;

struct BuildCandidate {
  // ninja | cmake | make | meson | setuptools | torch-setup | meson-python | scikit-build |
  // torch-jit | aiter-jit | aiter-cpp-itfs | config
  std::string kind;
  std::vector<Argv> build_cmds;  // run in order; empty: the build happens on the next load
  fs::path build_cwd;
  std::vector<fs::path> artifacts;  // built files whose bytes change with the target
  std::vector<fs::path> caches;     // dirs to pass to --invalidate-cache
  std::vector<std::string> evidence;
  std::int64_t built_at_ns = 0;  // newest artifact's mtime: the most recently built ranks first
  bool live = false;             // a running process maps one of its artifacts
  // The flags to append to `add-native --overlay O --patched-file F`.
  std::vector<std::string> add_native_args(const fs::path& target) const;
};

struct DiscoverReport {
  fs::path target;                         // absolute, as given
  std::vector<BuildCandidate> candidates;  // best first: live, then newest, then fewest artifacts
  std::vector<std::string> searched;       // every place looked at
};

// Throws Error when the target is missing or not a regular file.
DiscoverReport discover(DiskReader& disk, const DiscoverRequest& req);

}  // namespace overlay
