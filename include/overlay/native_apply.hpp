#pragma once
// add-native after planning: back up everything durably, record the entry atomically, and only
// then swap sources and invalidate caches (steps 2-6 of the protocol in docs/design.md); then
// run the install's own build (step 7).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/in_flight.hpp"
#include "overlay/manifest.hpp"
#include "overlay/native_plan.hpp"
#include "overlay/process.hpp"

namespace overlay {

struct AppliedEntry {
  std::string id;
  fs::path log_path;
  std::size_t sources = 0, artifacts = 0, caches = 0;
  // The overlay is marked live (plan.op) from before the entry is recorded until the last copy of
  // this goes: keep it through the build, so gc-stale never reverts an entry still being built.
  std::shared_ptr<InFlight> in_flight;
  // --over: the files taken as layers on the lower overlay's changes (none: a plain add).
  std::vector<std::string> layered;
  // The directory pinned for each tracked path (manifest.hpp's PinnedDir), by path.
  std::map<std::string, PinnedDir> pins;
  // What add-native and apply --json say of the entry `plan` made: {entry, files: [{path,
  // change}], counts: {sources, artifacts, caches}, over?: {overlay, layered}}.
  nlohmann::json to_json(const NativePlan& plan) const;
};

// Backs up every source, artifact and cache durably, records the entry in the manifest
// (atomically), and only then swaps the sources in and invalidates the caches.
AppliedEntry apply_native(Disk& disk, const NativePlan& plan);

}  // namespace overlay
