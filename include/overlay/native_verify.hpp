#pragma once
// verify-native: did the build really produce new artifacts? Reads only.
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

enum class ArtifactState { rebuilt, created, unchanged, missing_after_build, not_created };
struct VerifyItem {
  std::string path;
  ArtifactState state;
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
