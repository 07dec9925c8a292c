#pragma once
// Layers: overlays stacked on one another's in-place changes (add-native --over LOWER). The stack
// of a file is one structure, recorded on both sides: each upper item names its lower overlay and
// entry (LayerRef, with the bytes it must find and put back, and the file's pristine digest), and
// the lower records the upper entry (UpperRef in "layers_above") before the upper's record names
// it. Every verb reads it from here: revert refuses a lower under a live upper, status names each
// layer of a file in order, gc-stale unwinds top-down, fold merges a layer into the one below.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

// Manifests read once per operation (a stack is walked from several sides). A missing manifest is
// nullopt; an unreadable one is remembered as such (`unreadable`) and also nullopt.
class ManifestCache {
 public:
  explicit ManifestCache(Disk& disk) : disk_(disk) {}
  const std::optional<Manifest>& get(const std::string& overlay);
  bool unreadable(const std::string& overlay);
  // Replaces what is cached for `overlay` (after the caller saved it).
  void put(const std::string& overlay, const Manifest& m) { cache_[overlay] = {m, false}; }

 private:
  Disk& disk_;
  std::map<std::string, std::pair<std::optional<Manifest>, bool>> cache_;
};

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

}  // namespace overlay
