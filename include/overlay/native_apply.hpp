#pragma once
// add-native after planning: back up everything durably, record the entry atomically, and only
// then swap sources and invalidate caches (steps 2-6 of the protocol in docs/design.md); then
// run the install's own build (step 7).
#include <map>
#include <memory>
#include <string>
#include <vector>

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
};

// Backs up every source, artifact and cache durably, records the entry in the manifest
// (atomically), and only then swaps the sources in and invalidates the caches.
AppliedEntry apply_native(Disk& disk, const NativePlan& plan);

struct BuildOutcome {
  bool ok = true;
  std::vector<std::string> failed_cmd;
  RunResult result;
  std::vector<UntrackedOutput> untracked;  // created or changed by the build, tracked by no item
  std::string watch_off;                   // why the build's dirs were not watched ("" when they were)
  std::string log_error;                   // why the build log is incomplete ("" when it is whole)
  // Served from the build store instead of built: the record's name ("" when the build ran).
  std::string served_from;
  std::string store_note;  // why a build that ran was not kept, or a record found was not served
};

// Runs the plan's build commands in order (stopping at the first failure), streaming output
// to stderr and appending it to the entry's log. Around it, pictures the build's dirs (its cwd,
// the sources' and artifacts' dirs; caches and the overlay aside) and records in the entry every
// file it created or changed that no item tracks. Where the build store holds what this very build
// made before (build_store.hpp) and the plan does not say rebuild, those outputs are put back
// instead of running the commands; a build that ran and succeeded is kept there.
BuildOutcome run_native_build(Disk& disk, const NativePlan& plan, const AppliedEntry& entry);

}  // namespace overlay
