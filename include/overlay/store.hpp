#pragma once
// The overlay's backup area, <overlay>/_native_backup/. Each native entry gets a directory of
// its own, named by a fresh unique id, so names never collide across concurrent or repeated
// entries. Backup paths read from a manifest are resolved here and refused if they escape.
#include <optional>
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

inline constexpr const char* kBackupDirName = "_native_backup";

struct SavedFile {
  std::string backup;  // relative to the overlay
  std::string sha256;  // of the original bytes (the copy was hashed as it was written)
  mode_t mode = 0;
};

class BackupStore {
 public:
  BackupStore(Disk& disk, fs::path overlay) : disk_(disk), overlay_(std::move(overlay)) {}

  // Creates _native_backup/<id>/ with a new id (exclusive mkdir) and returns the id.
  std::string new_entry();
  // Durable copy of `file` into the entry, named "<label>_<basename>".
  SavedFile save_file(const std::string& id, const std::string& label, const fs::path& file);
  // Durable tar snapshot of `dir` into the entry, named "<label>.tar"; returns {path, sha256}.
  SavedFile save_dir_tar(const std::string& id, const std::string& label, const fs::path& dir);
  // fsync the entry directory and its parents, so every backup name in it is durable.
  void sync_entry(const std::string& id);

  // The absolute path of a manifest's backup reference; throws Error when it leaves the overlay
  // lexically or through a symlink.
  fs::path resolve(const std::string& rel) const;

  // Puts the original bytes back at `path` from backup `rel`. The backup is proven against
  // `sha256` as it is read; then it is renamed into place (or, across filesystems, copied beside
  // and renamed), so a reader never sees a torn file. Returns false when `path` already holds
  // the original bytes (nothing to do). Throws Error with the reason otherwise.
  bool restore_file(const std::string& rel, const std::string& sha256, const fs::path& path,
                    std::optional<mode_t> mode);
  // Replaces directory `dir` by the contents of tar backup `rel` (proven against sha256 when
  // recorded): extracted beside, then swapped in by rename.
  void restore_dir(const std::string& rel, const std::optional<std::string>& sha256, const fs::path& dir);
  // Removes `dir` (a cache the entry created): renamed aside first, then deleted.
  void remove_dir(const fs::path& dir);

  // Deletes one backup (missing is fine) and, for entry directories, the directory once empty.
  void forget(const std::string& rel);
  // Deletes the whole entry directory (after a failed add-native, before the manifest named it).
  void drop_entry(const std::string& id);

  const fs::path& overlay() const { return overlay_; }

 private:
  fs::path entry_dir(const std::string& id) const { return overlay_ / kBackupDirName / id; }
  Disk& disk_;
  fs::path overlay_;
};

}  // namespace overlay
