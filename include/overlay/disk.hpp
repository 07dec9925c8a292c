#pragma once
// The one door to the filesystem. Every file operation of the library goes through a Disk,
// so tests can substitute a fake or a fault-injecting one (see FaultyDisk in the tests).
// Every method throws DiskError (op, path, errno) on failure; nothing is swallowed.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace overlay {

namespace fs = std::filesystem;

enum class FileType { none, regular, directory, symlink, other };

struct FileInfo {
  FileType type = FileType::none;
  mode_t mode = 0;  // permission bits only (07777)
  std::uint64_t size = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t nlink = 1;  // names the inode has
  timespec mtime{};
  timespec ctime{};
  bool exists() const { return type != FileType::none; }
};

class ReadHandle {
 public:
  virtual ~ReadHandle() = default;
  // Reads up to n bytes; returns 0 at end of file.
  virtual std::size_t read(char* buf, std::size_t n) = 0;
};

class WriteHandle {
 public:
  virtual ~WriteHandle() = default;
  // Writes all n bytes (retrying short writes).
  virtual void write(const char* buf, std::size_t n) = 0;
  // fsync: the bytes written so far are durable when this returns.
  virtual void sync() = 0;
  // A hint: start writing the bytes written so far to disk now, without waiting, so a later
  // sync() has little left to do (sync_file_range). Never needed for correctness.
  virtual void start_writeback() {}
  // Makes this file, still empty, share the blocks of `src` (ioctl FICLONE): O(1) on
  // copy-on-write filesystems (XFS with reflink, btrfs). Returns false, with nothing changed,
  // where the filesystem cannot (EOPNOTSUPP, EXDEV, EINVAL, ENOTTY); other failures throw. Like
  // written bytes, the shared blocks are durable only after sync().
  virtual bool clone_from(const fs::path& src) {
    (void)src;
    return false;
  }
  // Copies all of `src` into this file, still empty, inside the kernel (copy_file_range: no
  // bytes through user space), asking the disk to start writing as it goes. Returns false, with
  // nothing changed, where the kernel cannot (EXDEV, EOPNOTSUPP, EINVAL, ENOSYS); other failures
  // throw. Durable only after sync().
  virtual bool copy_from(const fs::path& src) {
    (void)src;
    return false;
  }
  virtual void close() = 0;
};

// A directory entry with the type readdir reported (FileType::none when it did not say).
struct DirEntry {
  std::string name;
  FileType type = FileType::none;
};

enum class CreateMode { exclusive, truncate };
enum class Follow { no, yes };

class Disk {
 public:
  virtual ~Disk() = default;
  // lstat (Follow::no) or stat (Follow::yes); a missing path gives type none, not an error.
  virtual FileInfo info(const fs::path& p, Follow follow) = 0;
  virtual std::unique_ptr<ReadHandle> open_read(const fs::path& p) = 0;
  // Creates a regular file with exactly `mode` (umask ignored); never follows a final symlink.
  virtual std::unique_ptr<WriteHandle> create(const fs::path& p, mode_t mode, CreateMode how) = 0;
  virtual void rename(const fs::path& from, const fs::path& to) = 0;
  // Atomically swaps what the two names refer to (renameat2 RENAME_EXCHANGE): after a crash,
  // either both names are swapped or neither. Returns false, with nothing changed, where the
  // filesystem cannot (EINVAL, EOPNOTSUPP, ENOSYS); other failures throw.
  virtual bool exchange(const fs::path& a, const fs::path& b) = 0;
  // fsync of a directory, making renames and creations inside it durable.
  virtual void sync_dir(const fs::path& dir) = 0;
  // syncfs: everything written so far on the filesystem holding p is durable. One call instead
  // of an fsync per file when many files were written (a restored cache dir).
  virtual void sync_filesystem(const fs::path& p) = 0;
  // Returns false when the directory already existed.
  virtual bool make_dir(const fs::path& p, mode_t mode) = 0;
  // Removes a file, a symlink or an empty directory.
  virtual void remove(const fs::path& p) = 0;
  // The entries of a directory ("." and ".." left out), typed from readdir's d_type: walking a
  // tree needs no stat per entry, as find does not.
  virtual std::vector<DirEntry> list_dir(const fs::path& dir) = 0;
  virtual void make_symlink(const std::string& target, const fs::path& link) = 0;
  virtual std::string read_link(const fs::path& p) = 0;
  virtual void make_hardlink(const fs::path& existing, const fs::path& link) = 0;
  virtual void set_mode(const fs::path& p, mode_t mode) = 0;
  // Sets modification (and access) time without following a final symlink.
  virtual void set_mtime(const fs::path& p, timespec mtime) = 0;
  // Best effort chown (lchown); fails only when permitted and it still fails.
  virtual void set_owner(const fs::path& p, uid_t uid, gid_t gid) = 0;
  virtual fs::path real_path(const fs::path& p) = 0;
  // Whether this process may create and rename entries in directory `dir` (faccessat W_OK with
  // the effective ids): false for a read-only mount, or a directory the user cannot write.
  virtual bool can_write(const fs::path& dir) = 0;
  // Whether the file carries extended attributes (SELinux label, ACL, capabilities...), which a
  // copy or clone of its bytes would not; false where the filesystem has none.
  virtual bool has_xattrs(const fs::path& p) = 0;
};

// The process-wide disk backed by POSIX system calls.
Disk& real_disk();

}  // namespace overlay
