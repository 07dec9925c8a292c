#pragma once
// add-native, step 7: the install's own build, traced (build_trace.hpp): every path it changed
// beyond the entry's items is recorded in the entry (what revert puts back), and what it read is
// the build store's key. A build the store holds is served instead of run. Where no build can be
// traced here, it runs watched as before (build_watch.hpp), and the store is off.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/native_apply.hpp"
#include "overlay/process.hpp"

namespace overlay {

struct BuildOutcome {
  bool ok = true;
  std::vector<std::string> failed_cmd;
  RunResult result;
  std::vector<UntrackedOutput> untracked;  // untraced: created or changed by the build, tracked by no item
  std::string watch_off;                   // untraced: why the build's dirs were not watched
  std::string log_error;                   // why the build log is incomplete ("" when it is whole)
  // Served from the build store instead of built: the record's name ("" when the build ran).
  std::string served_from;
  // The store's word on this build: "hit" (served), "miss" (store_why: the first input that
  // differed from the newest record, or that none is kept) or "off" (store_why: untraced here,
  // --rebuild, OVERLAY_BUILD_STORE_BYTES=0).
  std::string store = "off";
  std::string store_why;
  std::string store_note;               // why a build that ran was not kept, or a hit not served
  std::string untraced;                 // why the build ran untraced ("" when traced)
  std::vector<std::string> unobserved;  // what the trace could not account for
  std::size_t changes = 0;              // paths the build changed beyond the entry's items
  // What a build report says of it (add-native, apply and exec's --json "build"): {ran, ok, log,
  // rc (null when served: no command ran), served_from_store, store_note?, traced, untraced, unobserved, changes,
  // store: {state, why, record}, untracked_outputs, watch_off?, log_error?} and, when it failed, {failed_cmd,
  // timed_out, interrupted, exec_error?}. `log`: the entry's build log.
  nlohmann::json to_json(const fs::path& log) const;
};

// Runs the plan's build commands in order (stopping at the first failure), streaming output
// to stderr and appending it to the entry's log, each under the tracer, and records in the entry
// every path they changed that no item tracks (BuildChange). Where the build store holds a record
// of this very build whose every input is as it is now and the plan does not say rebuild, its
// changes are put back instead of running the commands; a traced build that ran and succeeded is
// kept there. Untraced (no ptrace here), the build's dirs are watched instead and the store is off.
BuildOutcome run_native_build(Disk& disk, const NativePlan& plan, const AppliedEntry& entry);

// What every apply says of the store: "store: hit (record R)", "store: miss (the first input that
// differed)", "store: off (why)".
std::string store_line(const BuildOutcome& b);

}  // namespace overlay
