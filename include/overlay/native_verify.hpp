#pragma once
// verify-native: did the build really produce new artifacts? Reads only.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/disk.hpp"

namespace overlay {

// redirected: a directory on the artifact's path was swapped since add-native (pinned.hpp); it
// is judged nowhere else.
// superseded: another overlay holds the artifact now (its record names a change to it, and this
// overlay is not a layer under it): what is there is that overlay's build, not this entry's.
enum class ArtifactState { rebuilt, created, unchanged, missing_after_build, not_created, redirected, superseded };
struct VerifyItem {
  std::string path;
  ArtifactState state;
  std::string why;  // redirected: what changed; superseded: who holds it
};
struct VerifyReport {
  std::vector<VerifyItem> items;
  bool ok() const;
  // What `verify-native --json` says of it: {result, artifacts: [{path, state, why?}], error?};
  // the caller adds the overlay.
  nlohmann::json to_json() const;
};
// Compares each tracked artifact with its state before the entry was applied.
// Throws Error when the overlay has no manifest.
VerifyReport verify_native(DiskReader& disk, const fs::path& overlay);
const char* to_string(ArtifactState s);
// What verify-native prints: a FRESH_BUILD_FAIL line per artifact not rebuilt, then the verdict
// token, FRESH_BUILD_OK or FRESH_BUILD_FAIL, with the count checked (always the last line).
std::vector<std::string> verify_lines(const VerifyReport& r);

}  // namespace overlay
