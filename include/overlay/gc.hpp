#pragma once
// gc-stale: find every overlay under a root whose native entries are still applied and revert
// it, sparing live runs (owner alive), recent overlays (--min-age) and untrusted manifests.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct GcOptions {
  bool dry_run = false;
  std::optional<double> min_age_s;  // skip overlays whose manifest changed more recently
  double lock_timeout = 120;
};

enum class GcOutcome { reverted, would_revert, skipped, failed };

struct GcItem {
  fs::path overlay;
  GcOutcome outcome;
  std::string reason;  // why skipped or failed; for reverted, the processes still running patched code
};

struct GcReport {
  std::vector<GcItem> items;  // only overlays with native entries, and untrusted manifests
  std::size_t count(GcOutcome o) const;
};

GcReport gc_stale(Disk& disk, const fs::path& root, const GcOptions& opts);

const char* to_string(GcOutcome o);

}  // namespace overlay
