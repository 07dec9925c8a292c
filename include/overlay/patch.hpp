#pragma once
// Applies a unified diff with GNU patch to a private copy, never to the install: a diff that
// does not apply changes nothing and leaves no .orig/.rej anywhere.
#include <filesystem>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

// A new private (0700) directory under $TMPDIR (or /tmp), removed with everything in it when
// the object dies. Never throws from its destructor: a leftover temp dir is harmless.
class PrivateDir {
 public:
  explicit PrivateDir(Disk& disk);
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  Disk& disk_;
  fs::path path_;
};

class PatchedCopy {
 public:
  // Copies `original` into a new private temporary directory and applies `diff` there.
  // Throws Error("patch does not apply to …: <patch's first complaint>") on failure.
  PatchedCopy(Disk& disk, const fs::path& original, const fs::path& diff);

  const fs::path& file() const { return file_; }

 private:
  PrivateDir dir_;
  fs::path file_;
};

}  // namespace overlay

namespace overlay {

// The files a unified diff names (one per ---/+++ header pair, hunk bodies skipped), relative,
// with `strip` leading components removed as patch -pN does. Throws Error for a rename, an
// unsafe name (absolute, ".."), or a diff that names no file.
std::vector<fs::path> diff_file_names(const std::string& diff_text, int strip);

enum class FileChange { modified, created, deleted };

// Applies a multi-file unified diff with GNU patch to private copies of the files it names
// under `root` (never to the install) and reports what it would do to each file. Throws Error
// when it does not apply, names a file it then does not touch as said, creates a file whose
// directory does not exist, or touches a file it did not name. Nothing under root changes.
class PatchedTree {
 public:
  struct Change {
    fs::path path;  // absolute, under root
    FileChange change;
    fs::path content;  // the patched bytes (modified, created)
  };
  PatchedTree(Disk& disk, const fs::path& root, const fs::path& diff, int strip);

  const std::vector<Change>& changes() const { return changes_; }

 private:
  PrivateDir dir_;
  std::vector<Change> changes_;
};

}  // namespace overlay
