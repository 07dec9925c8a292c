#pragma once
// The overlay's backup area, <overlay>/_native_backup/. Each native entry gets a directory of
// its own, named by a fresh unique id, so names never collide across concurrent or repeated
// entries. Backup paths read from a manifest are resolved here and refused if they escape.
#include <optional>
#include <string>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

inline constexpr const char* kBackupDirName = "_native_backup";

struct SavedFile {
  std::string backup;  // relative to the overlay
  std::string sha256;  // of the original bytes (the copy was hashed as it was written)
  mode_t mode = 0;
  FileStamp stamp;     // the original's size, inode and mtime
  bool cloned = false; // the backup shares the original's blocks (copy-on-write)
};

enum class RestoredTime { now, previous_second };

class BackupStore {
 public:
  BackupStore(Disk& disk, fs::path overlay) : disk_(disk), overlay_(std::move(overlay)) {}

  // Creates _native_backup/<id>/ with a new id (exclusive mkdir) and returns the id.
  std::string new_entry();
  // Durable copy of `file` into the entry, named "<label>_<basename>".
  SavedFile save_file(const std::string& id, const std::string& label, const fs::path& file);
  // Durable tar snapshot of `dir` into the entry, named "<label>.tar"; returns {path, sha256}.
  SavedFile save_dir_tar(const std::string& id, const std::string& label, const fs::path& dir);
  // For a backup that is a clone of `path` (saved.cloned), once the record names it: the clone and
  // the original change places in one atomic exchange, so the install holds the clone (same bytes,
  // mode, owner, times) and the backup is the original inode itself. Its pages are then the ones
  // just read to hash it, so revert's proving read is a cached one, and revert puts back the very
  // inode. Only where nothing but the inode would differ: the file unchanged since it was saved,
  // one name, no extended attributes (a clone has none) and an owner this process can give the
  // clone. Returns false, nothing changed, otherwise or where the filesystem cannot exchange.
  bool trade_for_clone(const SavedFile& saved, const fs::path& path);
  // Creates the entry's guard against overlay_setup.py's revert (see PythonToolGuard).
  PythonToolGuard make_python_guard(const std::string& id);
  // fsync the entry directory and its parents, so every backup name in it is durable.
  void sync_entry(const std::string& id);

  // The absolute path of a manifest's backup reference; throws Error when it leaves the overlay
  // lexically or through a symlink.
  fs::path resolve(const std::string& rel) const;

  // Puts the original bytes back at `path` from backup `rel`. The backup is proven against
  // `sha256` by one read; then, on the same filesystem, it is renamed into place (O(1), the
  // backup is consumed); across filesystems it is copied beside `path` while hashed and renamed.
  // A reader never sees a torn file. Returns false when `path` already holds the original bytes
  // (judged by `stamp` first, so a rebuilt file is not read at all). Throws Error otherwise.
  // The restored file's mtime: `now` (a source: newer than anything the candidate's build made
  // of the patched one), or `previous_second` (a build output: older, in whole seconds, than a
  // source swapped in right after, so the next add-native need not wait out the second).
  bool restore_file(const std::string& rel, const std::string& sha256, const fs::path& path,
                    std::optional<mode_t> mode, const std::optional<FileStamp>& stamp,
                    RestoredTime when = RestoredTime::now);
  // Moves directory `dir` into the entry as "<label>.dir" (same filesystem: one rename, every
  // inode attribute kept). Returns the backup's relative path; nothing is moved yet.
  std::string moved_dir_name(const std::string& id, const std::string& label) const;
  void move_dir_in(const fs::path& dir, const std::string& rel);
  // Renames a moved-in directory back over `dir` (whatever stands there is removed). Returns
  // false when there is nothing to move back (never moved, or moved back already).
  bool move_dir_back(const std::string& rel, const fs::path& dir);
  // Replaces directory `dir` by the contents of tar backup `rel` (proven against sha256 when
  // recorded): extracted beside, then swapped in by rename.
  void restore_dir(const std::string& rel, const std::optional<std::string>& sha256, const fs::path& dir);
  // Removes `dir` (a cache the entry created): renamed aside first, then deleted.
  void remove_dir(const fs::path& dir);

  // Bytes the revert replaces (a rebuilt artifact, a rebuilt cache dir) are parked in
  // <overlay>/_trash/ on the same filesystem instead of being freed on the spot (freeing a large
  // file's blocks costs as much as reading it); purge_trash() then deletes them in a detached
  // process, so the caller does not wait. Leftovers of a killed purge go with the next one.
  void purge_trash();

  // Removes our hidden siblings of `p` (".<name>.overlay-*") left by an interrupted operation.
  void tidy(const fs::path& p);

  // Deletes one backup, file or moved directory (missing is fine) and, for entry directories,
  // the directory once empty.
  void forget(const std::string& rel);
  // Deletes the whole entry directory (after a failed add-native, before the manifest named it).
  void drop_entry(const std::string& id);

  const fs::path& overlay() const { return overlay_; }

 private:
  fs::path entry_dir(const std::string& id) const { return overlay_ / kBackupDirName / id; }
  Disk& disk_;
  fs::path overlay_;
  bool backup_dir_created_ = false;
  // Moves `p` (whose filesystem is the overlay's) into _trash/, or returns false.
  bool park(const fs::path& p, bool hard_link);
};

}  // namespace overlay
