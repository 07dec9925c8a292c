#pragma once
// One owner per installed file: a small registry of which overlay holds in-place changes to
// which installed file, so two candidates never stack native changes by accident.
// Registry: $OVERLAY_STATE_DIR, else $XDG_STATE_HOME/overlay, else ~/.local/state/overlay
// (else /tmp/overlay-state-<uid>); one file per held path under holds/, named by its SHA-256.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

// One overlay of a file's stack of changes and the bytes it protects: its original (what it puts
// back) and patched SHA-256 of the file ("" where it had no such bytes: a file it created, or
// deleted). Unknown (nullopt) in holds an earlier version wrote.
struct HoldLayer {
  fs::path overlay;
  std::optional<std::string> original_sha256, patched_sha256;
};

// Who holds a path: the overlay whose change is on top, and the overlays whose changes it was
// stacked on (--over, or --force; nearest first, key "under"), which hold it again, with their
// own checksums, as each above goes. The holder's original and patched SHA-256 of the file, so
// that a file whose holder vanished is never backed up again as the original without saying so.
struct Hold {
  fs::path overlay;
  std::vector<HoldLayer> under;
  std::optional<std::string> original_sha256, patched_sha256;
  // An artifact's hold, taken before its backup: its original is noted from the backup before the
  // entry is recorded, so one without an original belongs to a run that never recorded (never
  // touched) it.
  bool artifact = false;
  // The holder's directory (device, inode) when the hold was written: a rename keeps it, a copy
  // (cp -a, an archive restored, a move across filesystems) has another. Absent in older holds.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> overlay_id;
  std::string entry;  // the holder's entry that made the change ("" in older holds)
};

// A file add-native is about to change, and the SHA-256 of the bytes it will write there (none
// for a file it deletes).
struct HeldFile {
  HeldFile(fs::path p, std::optional<std::string> patched = std::nullopt,
           bool is_artifact = false)  // NOLINT: a path is a held file
      : path(std::move(p)), patched_sha256(std::move(patched)), artifact(is_artifact) {}
  fs::path path;
  std::optional<std::string> patched_sha256;
  bool artifact = false;  // a build output: its original is noted from its backup, not read here
};

// A hold whose holder no longer records a change to its file: the overlay was deleted or moved
// (vanished: no manifest there), or its record no longer lists the file.
struct OrphanHold {
  fs::path path;
  Hold hold;
  bool vanished = false;
  // What the file holds now against the hold's record: "original", "patched" (the vanished
  // holder's bytes: its original is lost with its backups), "third version", "changed" (not the
  // original, and no patched bytes on record: an artifact), or "unknown" (a hold without
  // checksums).
  std::string file_state;
  std::string describe() const;  // "overlay X, which has vanished, … the file holds its patched bytes"
};

// A cache dir an entry invalidated whose overlay vanished (no manifest: deleted or moved) with
// the entry still applied, and that no overlay the registry knows records: the vanished overlay's
// build may be what it holds. Known from the note add-native keeps beside the holds
// (caches/<entry>.json) from its record to its revert, for the overlay's own record goes with it.
struct OrphanCache {
  fs::path overlay, dir;
  std::string entry;
  std::optional<fs::path> aside;  // the original, renamed aside, still there (same device, inode)
  bool dir_there = false;
  bool existed = true;  // the dir was there before the entry (noted since "existed" was written)
  // Not clean while the original is kept aside, or while a cache whose original went with the
  // overlay (a tar, a move into it) is there: either holds that overlay's build in the original's place.
  bool dirty() const { return aside || dir_there; }
  std::string describe() const;  // "cache D: invalidated by overlay O (entry E), which has vanished; …"
};

// What a claim (claim_files, stack.hpp) took: a lock per path, held until this is destroyed (across the
// caller's record and swap, so no other add-native can judge the path free meanwhile), and the
// holder each path had before, to put back if the caller fails before recording anything.
struct HoldClaim {
  std::vector<std::unique_ptr<OverlayLock>> locks;
  std::vector<std::pair<fs::path, std::optional<Hold>>> previous;
  std::vector<std::string> warnings;  // holds of vanished overlays taken over with --force
  // The paths taken as layers on the lower overlay (--over): the lower's record must still name
  // each of them once its lock is held, or the claim was judged on a record that went meanwhile.
  std::vector<fs::path> layered;
};

// Locks on names (paths), one directory each under `dir` named by the name's SHA-256 (made
// through Disk), taken in sorted order: no deadlock between takers that share some. `what` says
// who holds one, in the wait's message. All released when the result goes.
std::vector<std::unique_ptr<OverlayLock>> lock_names(Disk& disk, const fs::path& dir, std::vector<std::string> names,
                                                     double lock_timeout, const std::string& what);

// The registry read, never written: what a verb that only reads (status, verify-native) is given,
// over a DiskReader.
class HoldIndex {
 public:
  HoldIndex(DiskReader& disk, fs::path state_dir) : disk_(disk), dir_(std::move(state_dir) / "holds") {}

  // The registry of this user (see above). Where the home-derived directory is on a network
  // filesystem (a cluster's shared home: NFS, Lustre, GPFS, CephFS, BeeGFS, SMB, 9p), it gets a
  // subdirectory per host: each node's installs are its own, and so are their holds.
  static fs::path default_state_dir();
  // `base` itself, or base/host-NAME when `fs_magic` (statfs's f_type) is a network filesystem's.
  static fs::path per_host_state_dir(const fs::path& base, long fs_magic, const std::string& host);

  // The overlay that holds `path` in place of `overlay`: the holder on top, when it is another
  // overlay whose record names a change to the path now and `overlay` is not a layer under it;
  // where the top no longer records it, the nearest layer under it that does.
  // A record of `overlay` that names the path is then a copy (archived, restored from a tarball)
  // or superseded: reverting it would write over that overlay's change. Nothing otherwise (no
  // hold, ours, or a holder that vanished or no longer records it: `overlay` may be it, moved).
  std::optional<fs::path> held_instead(const fs::path& path, const fs::path& overlay);

  // The holder, when it no longer stands where the hold names it (moved or deleted; the holder
  // still there gave the entry away, to a revert; a directory there that is not the holder is
  // another one made at its path, unless `overlay` received the entry from it by a fold), the
  // hold names entry `entry` as the one that made the change (or another entry `overlay`'s record
  // holds too: the newest of two on the file), and `overlay` is not that directory: another inode
  // than the one the hold recorded. `overlay`'s record of that entry is a copy then; the directory
  // that made the change may live on under another name. (Another entry, or another tool's,
  // changed the file after the holder let go: not a copy.)
  std::optional<fs::path> copy_of_vanished(const fs::path& path, const fs::path& overlay, const std::string& entry);

  // The overlay recorded as holding `path`, whether or not that hold is still live.
  std::optional<fs::path> holder(const fs::path& path);
  std::optional<Hold> hold_of(const fs::path& path);

  // Every overlay some hold names (each once, sorted): the overlays of this machine with native
  // changes applied, as far as this registry knows. Read-only.
  std::vector<fs::path> overlays();

  // The holds whose holder no longer records a change to their file (read-only), each judged
  // against the file as it is now.
  std::vector<OrphanHold> orphans();
  // The orphan hold on `path`, if its hold is one.
  std::optional<OrphanHold> orphan_of(const fs::path& path);

  // The noted caches of vanished overlays (see OrphanCache), by overlay then dir.
  std::vector<OrphanCache> orphan_caches();

  // Whether `holder`'s record changes `path` now (a record that cannot be read: yes, the safe side).
  bool still_holds(const fs::path& holder, const fs::path& path);
  // The nearest overlay under the holder (other than `overlay`) whose record still holds `p`.
  std::optional<fs::path> live_under(const fs::path& p, const Hold& h, const fs::path& overlay);
  // A hold whose holder is gone (or no longer lists the file) while the file is not the original
  // it recorded, judged down the layers under it: the original bytes are lost.
  std::optional<OrphanHold> lost_original(const fs::path& path, const Hold& hold);

 protected:
  fs::path hold_file(const fs::path& path) const;
  // The record of `overlay`, through `records_` where set, else read now (a reference valid
  // until the next call); throws where it cannot be read.
  const std::optional<Manifest>& record_of(const fs::path& overlay);
  // Whether `overlay`'s record names entry `entry`.
  bool records_entry(const fs::path& overlay, const std::string& entry);
  // Whether `overlay` took entry `entry` from `from` by a fold (settled or not): a hold that
  // names `from` is one the fold has not moved yet.
  bool received_by_fold(const fs::path& overlay, const fs::path& from, const std::string& entry);
  bool vanished(const fs::path& overlay);    // no manifest there (an unreadable one is not vanished)
  bool being_claimed(const fs::path& path);  // an add-native holds its path lock (claimed, not yet swapped)
  std::optional<OrphanHold> judge_orphan(const fs::path& path, const Hold& hold);

  DiskReader& disk_;
  fs::path dir_;
  ManifestCache* records_ = nullptr;
  std::optional<Manifest> scratch_;  // record_of's answer where no cache is set
};

// The registry, written: claims (stack.hpp), entries noted, holds given back, released and
// transferred, over a Disk.
class HoldRegistry : public HoldIndex {
 public:
  HoldRegistry(Disk& disk, fs::path state_dir) : HoldIndex(disk, std::move(state_dir)), writer_(disk) {}

  // The same registry, reading the overlays' records through `records` (one operation's view:
  // each record read once, e.g. the lower's for every file of a claim) instead of afresh.
  [[nodiscard]] HoldRegistry reading_through(ManifestCache& records) const {
    HoldRegistry r(writer_, dir_.parent_path());
    r.records_ = &records;
    return r;
  }

  // Names entry `id` of `overlay` in the holds `overlay` has on `paths` (written before the record
  // names the entry, once the overlay's directory exists, so its device and inode go in too), and
  // gives each path in `originals` that has none yet its original SHA-256 (artifacts, whose bytes
  // are hashed once, by their backup). One write per hold.
  void note_entry(const std::vector<fs::path>& paths, const std::map<fs::path, std::string>& originals,
                  const fs::path& overlay, const std::string& id, double lock_timeout);

  // Notes the cache dirs entry `id` of `overlay` invalidates (its record names the entry now),
  // with where each original is kept aside; dropped by forget_caches when the entry is reverted.
  void note_caches(const fs::path& overlay, const std::string& id, const std::vector<CacheItem>& caches);
  void forget_caches(const std::string& id);
  // Undoes a claim whose add-native failed before its manifest named the entry: each path
  // `overlay` still holds goes back to its previous holder, or is free again.
  void give_back(const HoldClaim& claim, const fs::path& overlay, double lock_timeout);

  // Drops the holds `overlay` has on `paths` that `recorded` — its manifest as just saved — no
  // longer records a change to (holds of other overlays stay). A path held under it (an overlay
  // it was stacked on with --force, whose change is in place again) is held by that one again.
  // A hold that names another overlay is dropped too when that one vanished and `reverted` (the
  // entry just reverted) holds the very original and patched bytes the hold recorded: the same
  // overlay, moved since its add-native.
  void release(const std::vector<fs::path>& paths, const fs::path& overlay, const Manifest& recorded,
               double lock_timeout, const NativeEntry* reverted = nullptr);

  // A fold (fold.hpp) moved `from`'s changes to each path into `into`'s entry named beside it: each
  // hold whose top is `from` is that entry's now (a merged item's entry is `into`'s own, not the
  // one folded in); where `into` was under it, `into` keeps its own original and takes `from`'s
  // patched bytes (one layer fewer). `into_id` is `into`'s directory (device, inode) as the fold
  // locked it: the holds keep it where that directory has been moved from its path meanwhile.
  void transfer(const std::vector<std::pair<fs::path, std::string>>& moved, const fs::path& from, const fs::path& into,
                std::optional<std::pair<std::uint64_t, std::uint64_t>> into_id, double lock_timeout);

  Disk& disk() const { return writer_; }
  // The primitives the stack (stack.hpp) claims files with.
  void write_hold(const fs::path& path, const Hold& hold);
  // A lock per path (a directory under <state>/hold-locks named by the path's SHA-256), taken
  // in sorted order. Before the registry's lock, which is only ever held for a moment: a second
  // claim on a path waits here until the first add-native has recorded and swapped (or failed
  // and given back).
  std::vector<std::unique_ptr<OverlayLock>> lock_paths(const std::vector<fs::path>& paths, double lock_timeout);
  // The registry's own lock, held for a moment by every writer of holds.
  [[nodiscard]] OverlayLock lock_registry(double lock_timeout);

 private:
  Disk& writer_;
};

// Whether an entry of m changes `path`: a source it swapped, a file it created, an artifact its
// build writes.
bool records_change_to(const Manifest& m, const fs::path& path);
// The SHA-256 of what stands at p now: "" when nothing does (the checksum a hold gives a file
// that did not exist), nullopt when it is not a readable regular file.
std::optional<std::string> sha_now(DiskReader& disk, const fs::path& p);

}  // namespace overlay
