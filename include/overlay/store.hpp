#pragma once
// The overlay's backup area, <overlay>/_native_backup/. Each native entry gets a directory of
// its own, named by a fresh unique id, so names never collide across concurrent or repeated
// entries. Backup paths read from a manifest are resolved here and refused if they escape.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

inline constexpr const char* kBackupDirName = "_native_backup";

// What save_file made: the record of the backed-up file, and how its copy was made.
struct SavedFile : FileBackup {
  bool cloned = false;  // the backup shares the original's blocks (copy-on-write)
};

// The mtime a restored file gets: now (a source the next build must redo from), a second back (a
// build output, older than any source restored after it), or the original's own, as recorded in
// its stamp (revert leaves the build's view as it was before the apply; now where none is recorded).
enum class RestoredTime { now, previous_second, original };

// What a restored file is given besides its bytes (owner first: chown clears setuid, setgid and
// security.capability; then the extended attributes; the mode last).
struct RestoredMeta {
  std::optional<FileOwner> owner;  // none: left as it comes
  mode_t mode = 0;
  std::optional<Xattrs> xattrs;  // none (a record without them): left as they come
};

// Gives `p` the recorded owner, extended attributes and mode, in the one order that keeps each,
// and none it has already: a member of a shared install (root's files, group-writable) may put
// root's inode back but never chown or chmod it, not even to what it is. An owner that could not
// be given is never passed over: it throws, naming `shown` and the command that gives it.
void give_meta(Disk& disk, const At& p, const RestoredMeta& meta, const fs::path& shown);
// Gives `p` the mtime `t` where it has another (setting a time of one's choosing means owning it).
void give_mtime(Disk& disk, const At& p, timespec t);

// Where purge() leaves litter trees in the install until its detached deleter gets to them.
enum class Litter { deleted_later, out_of_install };

// The overlay's backup area, read: where a recorded backup is, never outside the overlay. What
// a verb that only reads (status) is given, over a DiskReader.
class BackupPaths {
 public:
  BackupPaths(DiskReader& disk, fs::path overlay) : disk_(disk), overlay_(std::move(overlay)) {}
  // The absolute path of a manifest's backup reference; throws Error when it leaves the overlay
  // lexically or through a symlink.
  fs::path resolve(const std::string& rel) const;

 private:
  DiskReader& disk_;
  fs::path overlay_;
  mutable fs::path real_overlay_;  // the overlay's real path, resolved on first use
};

class BackupStore {
 public:
  BackupStore(Disk& disk, fs::path overlay) : disk_(disk), overlay_(std::move(overlay)), paths_(disk_, overlay_) {}

  // Creates _native_backup/<id>/ with a new id (exclusive mkdir) and returns the id: `wanted`
  // where it is one of our ids and its directory does not exist yet (replay keeps a bundle's ids).
  std::string new_entry(const std::string& wanted = {});
  // Durable copy of `file` into the entry, named "<label>_<basename>".
  SavedFile save_file(const std::string& id, const std::string& label, const At& file);
  // Durable tar snapshot of `dir` into the entry, named "<label>.tar"; returns {path, sha256}.
  SavedFile save_dir_tar(const std::string& id, const std::string& label, const At& dir);
  // For a backup that is a clone of `path` (saved.cloned), once the record names it: the clone and
  // the original change places in one atomic exchange, so the install holds the clone (same bytes,
  // mode, owner, times) and the backup is the original inode itself. Its pages are then the ones
  // just read to hash it, so revert's proving read is a cached one, and revert puts back the very
  // inode. Only where nothing but the inode would differ: the file unchanged since it was saved,
  // one name, no extended attributes (a clone has none) and an owner this process can give the
  // clone. Returns false, nothing changed, otherwise or where the filesystem cannot exchange.
  bool trade_for_clone(const SavedFile& saved, const At& path);
  // Creates the entry's guard against overlay_setup.py's revert (see PythonToolGuard).
  PythonToolGuard make_python_guard(const std::string& id);
  // fsync the entry directory and its parents, so every backup name in it is durable.
  void sync_entry(const std::string& id);

  // As BackupPaths::resolve.
  fs::path resolve(const std::string& rel) const { return paths_.resolve(rel); }
  const BackupPaths& paths() const { return paths_; }

  // Puts the original bytes back at `path` from backup `rel`. The backup is proven against
  // `sha256` by one read; then, on the same filesystem, it is renamed into place (O(1), the
  // backup is consumed); across filesystems it is copied beside `path` while hashed and renamed.
  // A reader never sees a torn file. Returns false when `path` already holds the original bytes
  // (judged by `stamp` first, so a rebuilt file is not read at all). Throws Error otherwise.
  // The restored file's mtime: `now` (a source: newer than anything the candidate's build made
  // of the patched one), or `previous_second` (a build output: older, in whole seconds, than a
  // source swapped in right after, so the next add-native need not wait out the second).
  // `path` may be a name inside a directory held open (At): every step in the install is then
  // made through that directory, which no swap on its path can redirect (issue 24).
  // A hard-linked original (rec.same_inode) goes back as the very inode where it still holds the
  // original bytes; where the build wrote into the original inode itself (all its names then
  // hold the build's bytes) the original bytes are written back into that inode, in place.
  // Of `rec`, what it lacks (an item overlay_setup.py wrote has no mode, stamp, owner or
  // attributes) is left as the backup's or the current file's.
  bool restore_file(const FileBackup& rec, const At& path, RestoredTime when = RestoredTime::now);
  // Renames a directory an earlier version moved into the entry (`--cache-snapshot move` before
  // issue 62) back over `dir` (whatever stands there is parked). Returns false when there is
  // nothing to move back (moved back already).
  bool move_dir_back(const std::string& rel, const At& dir);
  // Renames cache dir `dir` to its aside sibling `aside.path` (same parent, so the same
  // filesystem: O(1) at any file count), then fsyncs the parent. The rename is the invalidation.
  void put_aside(const At& dir, const AsideDir& aside);
  // Puts an aside copy back at `dir`; returns false when `dir` already is the recorded directory
  // (never put aside, or back already: whatever an interrupted take-back left at the aside name
  // becomes litter). Refuses, changing nothing, an aside copy whose type, device, inode or owner
  // differ from the record: a planted or replaced tree is never restored into the install. A tree
  // standing at `dir` (the rebuilt cache) is swapped out in one atomic exchange, so `dir` never
  // goes missing, and renamed to a trash sibling that becomes litter.
  bool take_back_aside(const AsideDir& aside, const At& dir);
  // Replaces directory `dir` by the contents of tar backup `rel` (proven against sha256 when
  // recorded): extracted beside, then swapped in by rename. Where `dir` cannot be renamed (its
  // parent is not writable, or it is a mount point) it is emptied and extracted in place instead.
  void restore_dir(const std::string& rel, const std::optional<std::string>& sha256, const At& dir);
  // Renames `dir` (a cache the entry created, or one invalidated) to a trash sibling that becomes
  // litter, and fsyncs the parent: once this returns the name is gone; the tree goes later.
  // Where `dir` cannot be renamed, its contents are deleted in place, durably.
  void discard_dir(const At& dir);

  // Trees renamed aside inside the install by the calls above (trash and half-restored siblings
  // of cache dirs, ours or left by an interrupted run), to be deleted by purge() instead of on
  // the spot: deleting a 20,000-file cache costs as much as the rest of the revert. The caller
  // records them (Manifest::litter) before purging, so a killed deleter leaves nothing unnamed.
  std::vector<std::string> take_litter() { return std::exchange(litter_, {}); }

  // Bytes the revert replaces (a rebuilt artifact, a rebuilt cache dir) are parked in
  // <overlay>/_trash/ on the same filesystem instead of being freed on the spot (freeing a large
  // file's blocks costs as much as reading it); purge() then deletes them, and every `litter`
  // tree still there, in a detached process, so the caller does not wait. Leftovers of a killed
  // purge go with the next one. Deleting what another purge deletes at once is harmless.
  // With Litter::out_of_install (revert), every litter tree outside the overlay is out of the
  // install when this returns: moved into <overlay>/_trash/ in one rename where they share a
  // filesystem, else deleted here (a revert must not return, nor status call the install clean,
  // while a rebuilt cache lies beside the original).
  void purge(const std::vector<std::string>& litter = {}, Litter how = Litter::deleted_later);

  // Removes our hidden siblings of file `p` (".<name>.overlay-*") left by an interrupted operation.
  void tidy(const At& p);
  // The same for directory `dir`, whose siblings may be whole trees: they become litter.
  void tidy_dir(const fs::path& dir);

  // Deletes one backup, file or moved directory (missing is fine) and, for entry directories,
  // the directory once empty.
  void forget(const std::string& rel);
  // Deletes the whole entry directory (after a failed add-native, before the manifest named it).
  void drop_entry(const std::string& id);
  // Deletes every entry directory of ours ("n<seconds>-<hex>") that no entry of `m` names: what
  // an add-native killed before its record was saved, or a revert killed after forgetting an
  // entry, left. Only with the overlay lock held (an add-native holds it from new_entry() until its
  // record names the entry). overlay_setup.py's backups (plain files) are never touched. Returns
  // the names deleted.
  std::vector<std::string> sweep_unnamed_entries(const Manifest& m);

  const fs::path& overlay() const { return overlay_; }

 private:
  fs::path entry_dir(const std::string& id) const { return overlay_ / kBackupDirName / id; }
  Disk& disk_;
  fs::path overlay_;
  BackupPaths paths_;
  bool backup_dir_created_ = false;
  std::vector<std::string> litter_;
  // Moves `p` (whose filesystem is the overlay's) into _trash/, or returns false.
  bool park(const At& p, bool hard_link);
  // restore_file's fast way: the verified backup inode renamed over `path`. False, with the
  // install unchanged, where rename says EXDEV (one filesystem seen through two mounts).
  bool restore_by_rename(const std::string& rel, const std::string& sha256, const fs::path& backup, const At& path,
                         const FileInfo& cur, const RestoredMeta& meta, timespec mtime);
  // move_dir_back where rename says EXDEV: `moved` copied (through a tar in the overlay) into a
  // fresh sibling of `dir`, made durable, renamed into place; then `moved` is deleted.
  void copy_dir_back(const fs::path& moved, const At& dir);
  // restore_file for a hard-link group (see there); false where neither way applies.
  // Returns nothing where neither way applies, else whether anything was changed.
  std::optional<bool> restore_link_group(const FileBackup& rec, const At& path, const FileInfo& cur, RestoredTime when);
  // The original bytes written back into the inode at `path` (every name of it sees them).
  void write_into_inode(const FileBackup& rec, const At& path);
  // restore_file once no link-group way applied: the bytes proven and put back at `path`.
  bool restore_bytes(const FileBackup& rec, const At& path, RestoredTime when);
  // Whether directory `dir` (as `di`) can be renamed within its parent: a writable parent on the
  // same filesystem (a mount point cannot be renamed).
  bool renamable(const fs::path& dir, const FileInfo& di);
  void empty_dir(const At& dir);
  void restore_dir_in_place(const fs::path& tar, const std::optional<std::string>& sha256, const At& dir);
};

}  // namespace overlay
