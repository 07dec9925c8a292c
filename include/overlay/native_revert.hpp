#pragma once
// revert: restore every native entry byte-exact, newest first; each backup proven before use,
// each item idempotent, the entry dropped from the manifest before its backups (docs/design.md,
// "The protocol of revert" and the crash table).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

struct RevertOptions {
  bool dry_run = false;
  double lock_timeout = 120;
  fs::path state_dir;                     // the hold registry; empty: HoldRegistry::default_state_dir()
  std::optional<std::string> only_entry;  // revert just this entry id (--revert-on-failure)
  std::optional<std::string> only_patch;  // revert just the entries of this patch (`apply`)
  // gc-stale: asked under the overlay lock, with the manifest as it is then; a reason it gives
  // (a live owner, an operation in flight) leaves the overlay untouched (RevertReport::spared).
  // Asked there, not before the lock, so no add-native can record an entry between the two.
  std::function<std::optional<std::string>(const Manifest&)> spare_if;
  // With only_patch: a patch with no entry here is nothing to do, not an error (a fleet's
  // rollback, on a node that failed before it recorded one).
  bool missing_patch_ok = false;
  // --with-layers: the layers stacked on this overlay's changes (stack.hpp) are reverted first,
  // top-down; without it, a live layer above refuses the revert before anything changes.
  bool with_layers = false;
  std::vector<std::string> unwinding = {};  // the overlays whose unwind led here (a cycle stops)
  // --adopt: this overlay is taken as the one that made its changes though its directory is not
  // the one the holds recorded (a copy whose original is gone for good). A live holder still refuses.
  bool adopt = false;
};
struct RevertProblem {
  std::string path;
  std::string reason;
};
struct RevertAction {
  std::string action;  // restore | remove | unchanged
  std::string path;
};
struct RevertReport {
  bool had_manifest = false;
  std::optional<std::string> spared;  // why spare_if left the overlay as it was
  std::size_t entries = 0;            // native entries found
  std::size_t entries_reverted = 0;   // fully restored and removed from the manifest
  std::size_t modules_removed = 0;    // Python entries removed with their patch
  std::vector<RevertAction> actions;
  std::vector<RevertProblem> problems;
  // Files the reverted builds created or changed that no entry tracked, still as built: they may
  // hold patched code until the install's next build regenerates them.
  std::vector<UntrackedOutput> untracked_left;
  // Processes that still map an artifact this or an earlier revert replaced: they run the
  // patched code until restarted.
  std::vector<RunningPatched> still_running;
  // Processes whose maps revert read to find those; 0 when the kernel said no other process had a
  // tracked artifact open (no scan needed) or on a dry run.
  std::size_t processes_examined = 0;
  // Entry directories of backups no record named (an interrupted add-native's), deleted.
  std::vector<std::string> partial_backups_swept;
  // Live layers stacked on the entries asked for ("OVERLAY [ENTRY]"): the revert was refused
  // before anything changed (each also a problem).
  std::vector<std::string> blocked_by;
  // --with-layers: the upper layers reverted first, top-down ("OVERLAY [ENTRY]").
  std::vector<std::string> layers_reverted;
  // What the stack made of the revert, each a line: an upper layer that vanished (its bytes gave
  // way to the originals), a lower one that vanished or was reverted under this one.
  std::vector<std::string> notes;
  // Per entry reverted: whether its sources and build outputs got their original mtimes back
  // (the install's build has nothing to redo), or why they were dated now instead.
  struct Times {
    std::string entry;
    bool original = false;
    std::string why_fresh;  // "" when original
    // With original times: untracked outputs the build rewrote that hold none of the patched code
    // (a thin archive, a relinked executable), still as it left them, so newer than the restored
    // files: where one is an input of a restored artifact the build relinks it (nothing compiles).
    std::vector<std::string> rewritten;
    // With original times: a file the build read that changed since (by hand, by another build):
    // the install's next build has that to redo, whatever the revert put back.
    std::string changed_since;
  };
  std::vector<Times> times;
  bool ok() const { return problems.empty(); }
  // What `revert --json` says of it (docs/cli.md: had_manifest, entries, actions, problems,
  // untracked_outputs, still_running, layers, notes, mtimes …); the caller adds what it asked.
  nlohmann::json to_json() const;
};

// Restores every native entry, newest first (caches, then artifacts, then sources), checking
// each backup against its recorded SHA-256 before use. An item that cannot be restored is
// reported and keeps its entry; the rest are still restored. Python entries are left alone,
// except those of a patch (`apply`) whose native entry is reverted: a patch goes as one unit.
// With only_patch, every entry of that patch goes, a patch of Python files only included.
RevertReport revert_natives(Disk& disk, const fs::path& overlay, const RevertOptions& opts);

// Why entry `e` of `overlay` must not be reverted: a file it names is held by another overlay
// whose record names a change to it now (HoldRegistry::held_instead), so this record is a copy of
// that overlay's (archived, restored from a tarball) or was superseded; reverting it would put its
// backups over that overlay's live change (issue 50: gc-stale did, exit 0). Nothing when none is.
// Also, unless `copies` is adopt: the holder's directory no longer records the file where the
// hold names it (moved, or deleted) and `overlay` is another directory than the one that made the
// change (HoldRegistry::copy_of_vanished): a copy, left alone, since the original may live on
// under another name (found by the claims checker: an archived copy of a moved overlay reverted
// the moved one's live change).
enum class Copies { refuse, adopt };
std::optional<RevertProblem> held_elsewhere(Disk& disk, const fs::path& overlay, const NativeEntry& e,
                                            const fs::path& state_dir = {}, Copies copies = Copies::refuse);

}  // namespace overlay
