#pragma once
// `merge`: a fresh overlay holding the union of two complete overlays' Python entries and files
// (the pipeline composes accepted kernels this way: two overlays on PYTHONPATH do not compound).
// An entry of both for the same module/target/id that differs, a file of both with other bytes,
// or a serving site two entries claim is a conflict: nothing is written. Native entries are never
// merged: in-place changes belong to the overlay that made them.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct MergeRequest {
  fs::path output;                 // absent or an empty directory
  std::optional<fs::path> base;    // --from (may be left out)
  std::vector<fs::path> incoming;  // --with, one or more, merged in order
};

struct MergeResult {
  fs::path output;                 // absolute
  std::vector<std::string> notes;  // e.g. native entries left out
};

MergeResult merge_overlays(Disk& disk, const MergeRequest& req);

}  // namespace overlay
