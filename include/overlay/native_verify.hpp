#pragma once
// verify-native: did the build really produce new artifacts? Reads only.
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

// redirected: a directory on the artifact's path was swapped since add-native (pinned.hpp); it
// is judged nowhere else.
enum class ArtifactState { rebuilt, created, unchanged, missing_after_build, not_created, redirected };
struct VerifyItem {
  std::string path;
  ArtifactState state;
  std::string why;  // redirected: what changed
};
struct VerifyReport {
  std::vector<VerifyItem> items;
  bool ok() const;
};
// Compares each tracked artifact with its state before the entry was applied.
// Throws Error when the overlay has no manifest.
VerifyReport verify_native(Disk& disk, const fs::path& overlay);
const char* to_string(ArtifactState s);

}  // namespace overlay
