#pragma once
// The one door to the filesystem. Every file operation of the library goes through a Disk,
// so tests can substitute a fake or a fault-injecting one (see FaultyDisk in the tests).
// Every method throws DiskError (op, path, errno) on failure; nothing is swallowed.
#include <sys/types.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace overlay {

namespace fs = std::filesystem;

enum class FileType { none, regular, directory, symlink, other };
// A file type's name as records write it: "none" (nothing there), "file", "dir", "symlink", "other".
const char* file_type_name(FileType t);
// The type such a name names; nullopt for any other string.
std::optional<FileType> file_type_named(std::string_view name);

struct FileInfo {
  FileType type = FileType::none;
  mode_t mode = 0;  // permission bits only (07777)
  std::uint64_t size = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t nlink = 1;   // names the inode has
  std::uint64_t blocks = 0;  // 512-byte blocks allocated: fewer than the size needs is a file with holes
  timespec mtime{};
  timespec ctime{};
  std::uint64_t mnt_id = 0;  // the mount it was reached through (statx); 0 where unknown
  bool exists() const { return type != FileType::none; }
};

// A time as nanoseconds since the epoch: how records store an mtime or ctime.
inline std::int64_t ns_of(const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec; }

// Whether a rename can go from one to the other: one filesystem reached through one mount. A
// bind mount or a container volume shares st_dev with its source, yet rename across it fails
// with EXDEV.
inline bool same_mount(const FileInfo& a, const FileInfo& b) {
  return a.dev == b.dev && (a.mnt_id == 0 || b.mnt_id == 0 || a.mnt_id == b.mnt_id);
}

// A directory held open, reached without following a symlink anywhere on its path (issue 24):
// what is done through it (At) happens in that very directory, whatever is renamed or swapped
// for a symlink on its path afterwards. Move-only; closes its descriptor.
class DirHandle {
 public:
  DirHandle(int fd, fs::path path, dev_t dev, ino_t ino) : fd_(fd), path_(std::move(path)), dev_(dev), ino_(ino) {}
  DirHandle(const DirHandle&) = delete;
  DirHandle& operator=(const DirHandle&) = delete;
  ~DirHandle();
  int fd() const { return fd_; }
  const fs::path& path() const { return path_; }  // the path it was opened by (messages, traces)
  dev_t dev() const { return dev_; }
  ino_t ino() const { return ino_; }

 private:
  int fd_;
  fs::path path_;
  dev_t dev_;
  ino_t ino_;
};

// Where an operation acts: a path, resolved by the kernel as usual, or one name inside a
// DirHandle's directory (the *at() system calls), which no rename on the directory's path can
// redirect. Every path converts to an At, so path-based callers are unchanged.
class At {
 public:
  template <typename P>
  requires std::constructible_from<fs::path, const P&> At(const P& p)
      : rel_(p) {}  // NOLINT(google-explicit-constructor): a path is a place
  // `name` is one component ("" for the directory itself): a longer relative path could meet a
  // symlink on the way.
  At(const DirHandle& dir, std::string name);
  const DirHandle* dir() const { return dir_; }
  const fs::path& rel() const { return rel_; }  // the path, or the name inside dir()
  fs::path full() const { return dir_ != nullptr ? (rel_.empty() ? dir_->path() : dir_->path() / rel_) : rel_; }
  At parent() const;                   // the directory holding it
  At sibling(std::string name) const;  // another name in that directory
  std::string filename() const { return full().filename().string(); }

 private:
  const DirHandle* dir_ = nullptr;
  fs::path rel_;
};

class ReadHandle {
 public:
  virtual ~ReadHandle() = default;
  // Reads up to n bytes; returns 0 at end of file.
  virtual std::size_t read(char* buf, std::size_t n) = 0;
  // Whether next_data() can tell holes from data (SEEK_DATA/SEEK_HOLE).
  virtual bool knows_holes() const { return false; }
  // From the read position: the next run of data [start, end) (what lies before start is a hole,
  // reading as zeros), with the read position moved to start. False when only a hole is left.
  virtual bool next_data(std::uint64_t& start, std::uint64_t& end) {
    (void)start, (void)end;
    return false;
  }
};

class WriteHandle {
 public:
  virtual ~WriteHandle() = default;
  // Writes all n bytes (retrying short writes).
  virtual void write(const char* buf, std::size_t n) = 0;
  // Moves the write position n bytes on, leaving a hole that reads as zeros (the file is as long
  // as its position once synced or closed). Here: writes the zeros, which is the same to a reader.
  virtual void skip(std::uint64_t n) {
    static const std::vector<char> zeros(1 << 16, '\0');
    for (std::uint64_t left = n; left > 0;) {
      std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(left, zeros.size()));
      write(zeros.data(), k);
      left -= k;
    }
  }
  // fsync: the bytes written so far are durable when this returns.
  virtual void sync() = 0;
  // A hint: start writing the bytes written so far to disk now, without waiting, so a later
  // sync() has little left to do (sync_file_range). Never needed for correctness.
  virtual void start_writeback() {}
  // Makes this file, still empty, share the blocks of `src` (ioctl FICLONE): O(1) on
  // copy-on-write filesystems (XFS with reflink, btrfs). Returns false, with nothing changed,
  // where the filesystem cannot (EOPNOTSUPP, EXDEV, EINVAL, ENOTTY); other failures throw. Like
  // written bytes, the shared blocks are durable only after sync().
  virtual bool clone_from(const At& src) {
    (void)src;
    return false;
  }
  // Copies all of `src` into this file, still empty, inside the kernel (copy_file_range: no
  // bytes through user space), asking the disk to start writing as it goes. Returns false, with
  // nothing changed, where the kernel cannot (EXDEV, EOPNOTSUPP, EINVAL, ENOSYS); other failures
  // throw. Durable only after sync().
  virtual bool copy_from(const At& src) {
    (void)src;
    return false;
  }
  virtual void close() = 0;
};

// A file's extended attributes (name, raw value), sorted by name: every namespace this process
// can read — user., trusted. (root), security. (SELinux label, capabilities), and POSIX ACLs as
// system.posix_acl_access / system.posix_acl_default.
using Xattrs = std::vector<std::pair<std::string, std::string>>;

// A directory entry with the type readdir reported (FileType::none when it did not say).
struct DirEntry {
  std::string name;
  FileType type = FileType::none;
};

enum class CreateMode { exclusive, truncate };
enum class Follow { no, yes };

// The reading half of the disk (ninja's FileReader beside its DiskInterface): what a verb that
// only reads is given (discover, status, verify-native), so that it cannot change the disk by
// mistake. Disk adds every call that changes it.
class DiskReader {
 public:
  virtual ~DiskReader() = default;
  // lstat (Follow::no) or stat (Follow::yes); a missing path gives type none, not an error.
  virtual FileInfo info(const At& p, Follow follow) = 0;
  virtual std::unique_ptr<ReadHandle> open_read(const At& p) = 0;
  // The entries of a directory ("." and ".." left out), typed from readdir's d_type: walking a
  // tree needs no stat per entry, as find does not.
  virtual std::vector<DirEntry> list_dir(const At& dir) = 0;
  virtual std::string read_link(const At& p) = 0;
  virtual fs::path real_path(const fs::path& p) = 0;
  // Opens directory `dir` following no symlink anywhere on its path (openat2 RESOLVE_NO_SYMLINKS,
  // or an O_NOFOLLOW walk from "/" where the kernel lacks it): a symlink on the way fails with
  // ELOOP or ENOTDIR. An At inside a DirHandle opens that one name, never a symlink.
  virtual std::unique_ptr<DirHandle> open_dir(const At& dir) = 0;
  // Whether this process may create and rename entries in directory `dir` (faccessat W_OK with
  // the effective ids): false for a read-only mount, or a directory the user cannot write.
  virtual bool can_write(const fs::path& dir) = 0;
  // Whether the file carries extended attributes (SELinux label, ACL, capabilities...), which a
  // copy or clone of its bytes would not; false where the filesystem has none.
  virtual bool has_xattrs(const fs::path& p) = 0;
  // The extended attributes of p, never following a final symlink; empty where the filesystem
  // keeps none (ENOTSUP).
  virtual Xattrs xattrs(const At& p) = 0;
  // The filesystem type of the one holding p (statfs f_type: kOverlayfsMagic, ...).
  virtual std::uint64_t fs_type(const fs::path& p) = 0;
};

class Disk : public DiskReader {
 public:
  // Creates a regular file with exactly `mode` (umask ignored); never follows a final symlink.
  virtual std::unique_ptr<WriteHandle> create(const At& p, mode_t mode, CreateMode how) = 0;
  virtual void rename(const At& from, const At& to) = 0;
  // Atomically swaps what the two names refer to (renameat2 RENAME_EXCHANGE): after a crash,
  // either both names are swapped or neither. Returns false, with nothing changed, where the
  // filesystem cannot (EINVAL, EOPNOTSUPP, ENOSYS) or the names are on two mounts (EXDEV); other
  // failures throw.
  virtual bool exchange(const At& a, const At& b) = 0;
  // fsync of a directory, making renames and creations inside it durable.
  virtual void sync_dir(const At& dir) = 0;
  // syncfs: everything written so far on the filesystem holding p is durable. One call instead
  // of an fsync per file when many files were written (a restored cache dir).
  virtual void sync_filesystem(const At& p) = 0;
  // Returns false when the directory already existed.
  virtual bool make_dir(const At& p, mode_t mode) = 0;
  // Removes a file, a symlink or an empty directory.
  virtual void remove(const At& p) = 0;
  virtual void make_symlink(const std::string& target, const At& link) = 0;
  virtual void make_hardlink(const At& existing, const At& link) = 0;
  virtual void set_mode(const At& p, mode_t mode) = 0;
  // Sets modification (and access) time without following a final symlink.
  virtual void set_mtime(const At& p, timespec mtime) = 0;
  // Best effort chown (lchown); fails only when permitted and it still fails.
  virtual void set_owner(const At& p, uid_t uid, gid_t gid) = 0;
  // Makes p's extended attributes exactly `want` (each set, every other one removed), never
  // following a final symlink. What this process may not set (security.capability without
  // CAP_SETFCAP, any where the filesystem keeps none) throws.
  virtual void set_xattrs(const At& p, const Xattrs& want) = 0;
};

// statfs's f_type of overlayfs (a container's root): rename(2) of a directory that comes from a
// lower layer fails there with EXDEV, whatever the mounts.
inline constexpr std::uint64_t kOverlayfsMagic = 0x794c7630;

// The process-wide disk backed by POSIX system calls.
Disk& real_disk();

}  // namespace overlay
