#pragma once
// The stack: who stands on whose change to an installed file (add-native --over LOWER), from the
// claim to the unwind, in one room. The stack of a file is one structure, recorded on both sides:
// each upper item names its lower overlay and entry (LayerRef, with the bytes it must find and
// put back, and the file's pristine digest), and the lower records the upper entry (UpperRef in
// "layers_above") before the upper's record names it. Here: claiming files (one owner per file,
// a layer on the lower where --over names it), the two locks in their one order (StackLocks),
// checking the lower under its lock and recording both sides, judging a layer live, stale or
// vanished, and the stack of a file bottom first. Every record is read once per operation
// (ManifestCache). Revert refuses a lower under a live upper, status names each layer of a file
// in order, gc-stale unwinds top-down, fold merges a layer into the one below: all ask here.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/holds.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

// What one overlay's record says of one installed file: the entry whose change is on top there
// (the newest that records it), the SHA-256 that change left ("" where it deleted the file; none
// for an artifact, whose rebuilt bytes are not recorded), and the file's bytes before the whole
// stack ("" where it did not exist).
struct RecordedChange {
  std::string entry;
  std::optional<std::string> after;
  std::string pristine;
  bool artifact = false;
};
std::optional<RecordedChange> recorded_change(const Manifest& m, const std::string& path);

// The layer ref of the item of `e` on `path`, if that item is one.
const LayerRef* layer_of(const NativeEntry& e, const std::string& path);
// Every path an entry tracks (sources, created files, artifacts, cache dirs), absolute.
std::vector<std::string> tracked_paths(const NativeEntry& e);

// How a reference to another overlay's entry stands now.
enum class RefState {
  live,        // its overlay's record still names the entry, stacked on this file
  stale,       // its overlay is there, but no longer records that (reverted, or never recorded)
  vanished,    // no manifest there (deleted or moved)
  unreadable,  // a manifest that cannot be read: nothing can be told, so it is taken as live
};
const char* to_string(RefState s);

// An upper layer of `overlay` (from its "layers_above") and how it stands.
struct Upper {
  UpperRef ref;
  RefState state = RefState::live;
  // The entries of this overlay its layered items stand on (known where its record was read).
  std::vector<std::string> on_entries = {};
  bool blocks() const { return state == RefState::live || state == RefState::unreadable; }
};
// Every upper `m` (the record of `overlay`) names, judged against the uppers' records now.
std::vector<Upper> uppers_of(ManifestCache& cache, const Manifest& m);

// How the lower a layered item names stands: live while the lower's record still holds a change
// to `path` made by that entry (or, after a fold into it, by any of its entries).
RefState lower_state(ManifestCache& cache, const LayerRef& layer, const std::string& path);

// One layer of a file's stack: bottom first in a FileStack.
struct StackLayer {
  std::string overlay;
  std::string entry;
  RefState state = RefState::live;  // vanished: named by a layer next to it, its record gone
};
using FileStack = std::vector<StackLayer>;
// The stack of `path` as seen from `overlay` (whose record is `m`): the layers below it (its
// item's layer refs, followed down) and above it (live or vanished uppers that stack on the file,
// followed up), bottom first; just the overlay itself where nothing is stacked.
FileStack stack_of(ManifestCache& cache, const std::string& overlay, const Manifest& m, const std::string& path);
// "A [n1] < B [n2] (vanished)", bottom first.
std::string describe_stack(const FileStack& s);

// --- Claiming files -------------------------------------------------------------------------

// Takes the per-path locks of `files` (waiting for another add-native's claim to end), then,
// under the registry's lock, refuses (Error naming the holder) when another overlay whose record
// still changes one of them holds it; then records `overlay` as the holder of each. With force,
// takes the holds over without checking. The check and the hold are one step for every other
// claim while the claim lives. Every record is read once, after the path locks (through
// `records`, or a cache of the claim's own; the lower's bytes read again there, parsed only where
// they changed).
// A hold whose holder vanished or no longer lists the file is taken over silently only where the
// file still holds the original the hold recorded; elsewhere refused (Error naming the vanished
// overlay and what the file holds), or with force taken with a warning that the original bytes
// are lost (claim.warnings).
// With `over` (add-native --over LOWER): a path LOWER's record changes, and that no overlay above
// LOWER holds, is taken as a layer on LOWER: held by `overlay` with LOWER (and what was under it)
// under it, with their checksums; no --force needed. A LOWER whose record cannot be read is refused.
[[nodiscard]] HoldClaim claim_files(HoldRegistry& holds, const std::vector<HeldFile>& files, const fs::path& overlay,
                                    bool force, double lock_timeout, const std::optional<fs::path>& over = std::nullopt,
                                    ManifestCache* records = nullptr);

// Why claim_files would refuse `overlay` the path now (another overlay's change on record, or a
// vanished holder's bytes in place), or nothing; read-only, without --force. With `over`, a path
// that overlay holds on top is not taken: `overlay` would stack on it.
std::optional<std::string> why_taken(HoldRegistry& holds, ManifestCache& records, const fs::path& path,
                                     const fs::path& overlay, const std::optional<fs::path>& over = std::nullopt);

// Why no --over can take `paths` (nothing when one might): two overlays other than `overlay`
// hold some of them live, e.g. a layer above the lower holds one file, the lower alone another.
std::optional<std::string> held_by_two(HoldRegistry& holds, ManifestCache& records, const std::vector<fs::path>& paths,
                                       const fs::path& overlay);

// --- The two locks, and both sides recorded -------------------------------------------------

// The locks of a stacked operation, in the one order every verb takes them: the overlay's own
// first (at construction), then the lower's (take_lower). The lower's goes first (release_lower,
// or with the rest), so no verb ever waits for an upper while holding its lower.
class StackLocks {
 public:
  StackLocks(const fs::path& overlay, double lock_timeout) : timeout_(lock_timeout), ours_(overlay, lock_timeout) {}
  void take_lower(const fs::path& lower) { lower_.emplace(lower, timeout_); }
  void release_lower() { lower_.reset(); }
  bool holds_lower() const { return lower_.has_value(); }

 private:
  double timeout_;
  OverlayLock ours_;
  std::optional<OverlayLock> lower_;
};

// A file the claim took as a layer is still the lower's change, now that the lower's lock is held
// and its record (`lower`, nothing where it went) read again: Error naming the file otherwise.
void require_lower_records(const HoldClaim& claim, const std::optional<Manifest>& lower, const fs::path& lower_dir);

// The items of the new entry `e` of `overlay` that stack on the lower's changes become layers:
// each names the lower's entry and the file's pristine digest, and its backup must be the very
// bytes the lower's change left there. The lower records the entry ("layers_above", saved under
// its lock, which the caller holds: StackLocks) before our record (`ours`) names it. A file our
// own record already changes stacks on our change instead. Throws, nothing touched in the
// install, where a file holds other bytes than the lower's change left. The paths stacked.
std::vector<std::string> record_layers(Disk& disk, const fs::path& lower_dir, Manifest& lower, const fs::path& overlay,
                                       const Manifest& ours, NativeEntry& e);

// --- The unwind's records ---------------------------------------------------------------------

// Whether the upper `u` stands on one of `paths`.
bool stacks_on(const UpperRef& u, const std::set<std::string>& paths);
// Drops from `m` (the record of a lower, `ups` its uppers as judged) the layers above that no
// longer stand on a file it records, and the stale ones; true when any went.
bool prune_uppers(const std::vector<Upper>& ups, Manifest& m);
// A reverted layer is no longer stacked on its lower overlays: each forgets entry `e` (matched by
// its id, unique, so an upper moved since is found too), under the lower's lock (taken after the
// caller's own). A failure leaves a reference the lower judges stale, never a refusal: a warning.
void leave_lowers(Disk& disk, const NativeEntry& e, double lock_timeout);

}  // namespace overlay
