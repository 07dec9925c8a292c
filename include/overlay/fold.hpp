#pragma once
// fold: one overlay's native entries become another's, with no build (the install already holds
// the candidate's build). The optimisation loop's "accept": `fold --from CAND --into ACCEPTED`.
//
// Where CAND stacked a change on ACCEPTED's (a layer, or the same file in a chain of digests),
// ACCEPTED's item keeps its pristine backup and takes CAND's patched digest; CAND's backup of
// ACCEPTED's bytes goes. Every other item moves with its entry (same id, same backups, linked
// into ACCEPTED). CAND is left with no native entry.
//
// Crash-safe as one step, across two directories: CAND records where its entries are going
// ("fold_out") before ACCEPTED records the fold as pending (which shields the backups staged into
// it from its sweep); ACCEPTED's record that holds the merged entries (the fold "committed") is
// the one point of no return. Whatever a kill -9 or a power cut leaves, the next verb on CAND
// (revert, gc-stale, add-native, fold) settles it from CAND's record and ACCEPTED's: committed, the
// fold is finished; not, it is undone. Never is a file left without its original on record.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

struct FoldRequest {
  fs::path from, into;
  double lock_timeout = 120;
  fs::path state_dir;  // the hold registry; empty: HoldRegistry::default_state_dir()
  bool dry_run = false;
};

struct FoldReport {
  std::string fold_id;                     // empty on a dry run
  std::vector<std::string> entries;        // CAND's entries folded
  std::vector<std::string> merged;         // files whose change joined an entry of ACCEPTED's
  std::vector<std::string> moved;          // files whose item moved with its entry
  std::vector<std::string> moved_entries;  // entry ids now in ACCEPTED, whole
  std::size_t backups_dropped = 0;         // CAND's backups of ACCEPTED's bytes, let go
  // Build outputs both builds changed: ACCEPTED's record keeps what was there before its own build
  // and now ends where CAND's build left it (traced builds, build_changes.hpp).
  std::vector<std::string> outputs_merged;
  std::vector<std::string> outputs_moved;  // build outputs only CAND's build changed, now ACCEPTED's
  // An interrupted fold of CAND into ACCEPTED that this run finished, and nothing was left to fold:
  // the fold asked for is done (fold_id names it, entries are its entries), exit 0.
  bool finished_interrupted = false;
};

// Checks everything first (refusing, nothing changed: no entry to fold, an operation in flight in
// either overlay, a layer stacked on CAND, CAND stacked on a third overlay, a chain of digests
// that does not meet, a patch whose Python entries would be split), then folds. Throws Error.
FoldReport fold_overlay(Disk& disk, const FoldRequest& req);

// A fold a crash interrupted, seen from the overlay it folded from (record `m`, which has
// "fold_out"): finished where the other side committed it, undone otherwise; `m` is updated and
// saved. The caller holds `from`'s lock; this takes the other side's. True when it was finished.
bool settle_fold_out(Disk& disk, const fs::path& from, Manifest& m, double lock_timeout, const fs::path& state_dir);

// The marks of folds into this overlay (record `m`) whose other side has settled them (or
// vanished): dropped, with the backups a pending one staged and nothing records; true when `m`
// changed (the caller saves it). The caller holds this overlay's lock.
bool settle_folds_in(Disk& disk, const fs::path& into, Manifest& m);

}  // namespace overlay
