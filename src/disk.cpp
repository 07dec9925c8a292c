#include "overlay/disk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "overlay/error.hpp"

namespace overlay {

const char* file_type_name(FileType t) {
  switch (t) {
    case FileType::none:
      return "none";
    case FileType::regular:
      return "file";
    case FileType::directory:
      return "dir";
    case FileType::symlink:
      return "symlink";
    case FileType::other:
      return "other";
  }
  return "other";
}

std::optional<FileType> file_type_named(std::string_view name) {
  for (FileType t : {FileType::none, FileType::regular, FileType::directory, FileType::symlink, FileType::other})
    if (name == file_type_name(t)) return t;
  return std::nullopt;
}
namespace {

[[noreturn]] void fail(const char* op, const At& at) { throw DiskError(op, at.full().string(), errno); }
[[noreturn]] void fail(const std::string& op, const At& at) { throw DiskError(op, at.full().string(), errno); }

// The descriptor and path an *at() call takes for `at`.
int fd_of(const At& at) { return at.dir() != nullptr ? at.dir()->fd() : AT_FDCWD; }
// "." names a held directory itself; an empty path stays empty (ENOENT, as before).
const char* rel_of(const At& at) { return at.dir() != nullptr && at.rel().empty() ? "." : at.rel().c_str(); }
// Inside a DirHandle nothing at the final name is followed either.
int nofollow_of(const At& at) { return at.dir() != nullptr ? O_NOFOLLOW : 0; }

// The names of p's extended attributes (reached by `path`, see xattr_path); none where the
// filesystem keeps none.
std::vector<std::string> xattr_names(const std::string& path, const At& p);

// Whether /proc/self/fd reaches this process's descriptors: not in a root without /proc (an
// empty chroot, a minimal container), where the static binary still has to work.
bool proc_fds_available() {
  static const bool available = ::access("/proc/self/fd", X_OK) == 0;
  return available;
}

// A path the l*xattr calls reach `at` by: a name inside a held directory goes through the
// directory's descriptor (/proc/self/fd/N/name), so no rename on its path redirects it; without
// /proc, by its full path (there is no *xattrat() call before Linux 6.13).
std::string xattr_path(const At& at) {
  if (at.dir() == nullptr) return at.rel().string();
  if (!proc_fds_available()) return at.full().string();
  return "/proc/self/fd/" + std::to_string(at.dir()->fd()) + (at.rel().empty() ? "" : "/" + at.rel().string());
}

std::vector<std::string> xattr_names(const std::string& path, const At& p) {
  std::string list;
  for (;;) {
    ssize_t n = ::llistxattr(path.c_str(), nullptr, 0);
    if (n < 0 && (errno == ENOTSUP || errno == ENOSYS)) return {};
    if (n < 0) fail("list extended attributes of", p);
    list.resize(static_cast<std::size_t>(n));
    ssize_t got = ::llistxattr(path.c_str(), list.data(), list.size());
    if (got < 0 && errno == ERANGE) continue;  // grew meanwhile
    if (got < 0) fail("list extended attributes of", p);
    list.resize(static_cast<std::size_t>(got));
    break;
  }
  std::vector<std::string> names;
  for (std::size_t at = 0; at < list.size();) {
    std::size_t end = list.find('\0', at);
    if (end == std::string::npos) end = list.size();
    if (end > at) names.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return names;
}

FileType type_of(mode_t m) {
  if (S_ISREG(m)) return FileType::regular;
  if (S_ISDIR(m)) return FileType::directory;
  if (S_ISLNK(m)) return FileType::symlink;
  return FileType::other;
}

class FdReader : public ReadHandle {
 public:
  FdReader(int fd, fs::path p) : fd_(fd), path_(std::move(p)) {}
  ~FdReader() override { ::close(fd_); }
  std::size_t read(char* buf, std::size_t n) override {
    for (;;) {
      ssize_t got = ::read(fd_, buf, n);
      if (got >= 0) return static_cast<std::size_t>(got);
      if (errno != EINTR) fail("read", path_);
    }
  }
  bool knows_holes() const override { return true; }
  bool next_data(std::uint64_t& start, std::uint64_t& end) override {
    off_t pos = ::lseek(fd_, 0, SEEK_CUR);
    off_t data = pos < 0 ? -1 : ::lseek(fd_, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) return false;  // only a hole from here to the end
    if (data < 0) fail("seek data", path_);
    off_t hole = ::lseek(fd_, data, SEEK_HOLE);  // the end of the file at the latest
    if (hole < 0 || ::lseek(fd_, data, SEEK_SET) < 0) fail("seek hole", path_);
    start = static_cast<std::uint64_t>(data);
    end = static_cast<std::uint64_t>(hole);
    return true;
  }

 private:
  int fd_;
  fs::path path_;
};

class FdWriter : public WriteHandle {
 public:
  FdWriter(int fd, fs::path p) : fd_(fd), path_(std::move(p)) {}
  ~FdWriter() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const char* buf, std::size_t n) override {
    while (n > 0) {
      ssize_t put = ::write(fd_, buf, n);
      if (put < 0) {
        if (errno == EINTR) continue;
        fail("write", path_);
      }
      buf += put;
      n -= static_cast<std::size_t>(put);
    }
    hole_at_end_ = false;
  }
  void skip(std::uint64_t n) override {
    if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) fail("seek", path_);
    hole_at_end_ = n > 0 || hole_at_end_;
  }
  void sync() override {
    set_length();
    if (::fsync(fd_) != 0) fail("fsync", path_);
  }
  void start_writeback() override { ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE); }
  bool clone_from(const At& src) override {
    int in = ::openat(fd_of(src), rel_of(src), O_RDONLY | O_CLOEXEC | nofollow_of(src));
    if (in < 0) fail("open", src);
    int rc = ::ioctl(fd_, FICLONE, in);
    int err = errno;
    ::close(in);
    if (rc == 0) return true;
    // The filesystem cannot share blocks (ext4, tmpfs), or not between these two files.
    if (err == EOPNOTSUPP || err == ENOTSUP || err == EXDEV || err == EINVAL || err == ENOTTY || err == ENOSYS)
      return false;
    throw DiskError("clone", src.full().string() + " -> " + path_.string(), err);
  }
  bool copy_from(const At& src) override {
    int in = ::openat(fd_of(src), rel_of(src), O_RDONLY | O_CLOEXEC | nofollow_of(src));
    if (in < 0) fail("open", src);
    constexpr std::size_t kStep = 8u << 20;  // then the disk is asked to start writing
    off64_t done = 0;
    for (;;) {
      ssize_t n = ::copy_file_range(in, nullptr, fd_, nullptr, kStep, 0);
      if (n > 0) {
        done += n;
        ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
        continue;
      }
      if (n == 0) break;
      if (errno == EINTR) continue;
      int err = errno;
      ::close(in);
      if (done == 0 && (err == EXDEV || err == EOPNOTSUPP || err == ENOTSUP || err == EINVAL || err == ENOSYS))
        return false;
      throw DiskError("copy", src.full().string() + " -> " + path_.string(), err);
    }
    ::close(in);
    return true;
  }
  void close() override {
    if (fd_ >= 0) set_length();
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) fail("close", path_);
  }

 private:
  // A hole skipped at the end makes no byte: the length is set to the position.
  void set_length() {
    if (!hole_at_end_) return;
    off_t pos = ::lseek(fd_, 0, SEEK_CUR);
    if (pos < 0 || ::ftruncate(fd_, pos) != 0) fail("truncate", path_);
    hole_at_end_ = false;
  }

  int fd_;
  fs::path path_;
  bool hole_at_end_ = false;
};

class PosixDisk : public Disk {
 public:
  FileInfo info(const At& p, Follow follow) override {
    // statx, not stat: it also says which mount the path is reached through (STATX_MNT_ID).
    struct statx st {};
    int flags = follow == Follow::yes ? 0 : AT_SYMLINK_NOFOLLOW;
    int rc = ::statx(fd_of(p), rel_of(p), flags | AT_STATX_SYNC_AS_STAT, STATX_BASIC_STATS | STATX_MNT_ID, &st);
    if (rc != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return {};
      fail("stat", p);
    }
    FileInfo fi;
    fi.type = type_of(st.stx_mode);
    fi.mode = st.stx_mode & 07777;
    fi.size = st.stx_size;
    fi.uid = st.stx_uid;
    fi.gid = st.stx_gid;
    fi.dev = makedev(st.stx_dev_major, st.stx_dev_minor);
    fi.ino = st.stx_ino;
    fi.nlink = st.stx_nlink;
    fi.blocks = st.stx_blocks;
    fi.mtime = timespec{st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec};
    fi.ctime = timespec{st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec};
    if ((st.stx_mask & STATX_MNT_ID) != 0) fi.mnt_id = st.stx_mnt_id;
    return fi;
  }

  std::unique_ptr<ReadHandle> open_read(const At& p) override {
    int fd = ::openat(fd_of(p), rel_of(p), O_RDONLY | O_CLOEXEC | nofollow_of(p));
    if (fd < 0) fail("open", p);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::make_unique<FdReader>(fd, p.full());
  }

  std::unique_ptr<WriteHandle> create(const At& p, mode_t mode, CreateMode how) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
    flags |= how == CreateMode::exclusive ? O_EXCL : O_TRUNC;
    int fd = ::openat(fd_of(p), rel_of(p), flags, 0600);
    if (fd < 0) fail("create", p);
    if (::fchmod(fd, mode & 07777) != 0) {
      int err = errno;
      ::close(fd);
      throw DiskError("chmod", p.full().string(), err);
    }
    return std::make_unique<FdWriter>(fd, p.full());
  }

  void rename(const At& from, const At& to) override {
    if (::renameat(fd_of(from), rel_of(from), fd_of(to), rel_of(to)) != 0)
      fail("rename", from.full().string() + " -> " + to.full().string());
  }

  bool exchange(const At& a, const At& b) override {
    if (::renameat2(fd_of(a), rel_of(a), fd_of(b), rel_of(b), RENAME_EXCHANGE) == 0) return true;
    if (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS || errno == EXDEV) return false;
    fail("exchange", a.full().string() + " <-> " + b.full().string());
  }

  void sync_dir(const At& dir) override {
    if (dir.dir() != nullptr && dir.rel().empty()) {  // the held directory itself
      if (::fsync(dir.dir()->fd()) != 0) fail("fsync", dir);
      return;
    }
    int fd = ::openat(fd_of(dir), rel_of(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow_of(dir));
    if (fd < 0) fail("open directory", dir);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) throw DiskError("fsync", dir.full().string(), err);
  }

  void sync_filesystem(const At& p) override {
    int fd = ::openat(fd_of(p), rel_of(p), O_RDONLY | O_CLOEXEC | nofollow_of(p));
    if (fd < 0) fail("open", p);
    int rc = ::syncfs(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) throw DiskError("syncfs", p.full().string(), err);
  }

  bool make_dir(const At& p, mode_t mode) override {
    if (::mkdirat(fd_of(p), rel_of(p), mode) == 0) return true;
    if (errno == EEXIST) {
      struct stat st {};
      if (::fstatat(fd_of(p), rel_of(p), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) return false;
      errno = EEXIST;
    }
    fail("mkdir", p);
  }

  void remove(const At& p) override {
    if (::unlinkat(fd_of(p), rel_of(p), 0) == 0) return;
    if (errno == EISDIR || errno == EPERM) {
      if (::unlinkat(fd_of(p), rel_of(p), AT_REMOVEDIR) == 0) return;
    }
    fail("remove", p);
  }

  std::vector<DirEntry> list_dir(const At& dir) override {
    int fd = ::openat(fd_of(dir), rel_of(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow_of(dir));
    if (fd < 0) fail("open directory", dir);
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      int err = errno;
      ::close(fd);
      throw DiskError("open directory", dir.full().string(), err);
    }
    std::vector<DirEntry> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      FileType t = e->d_type == DT_REG       ? FileType::regular
                   : e->d_type == DT_DIR     ? FileType::directory
                   : e->d_type == DT_LNK     ? FileType::symlink
                   : e->d_type == DT_UNKNOWN ? FileType::none
                                             : FileType::other;
      names.push_back({std::move(n), t});
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) throw DiskError("read directory", dir.full().string(), err);
    return names;
  }

  void make_symlink(const std::string& target, const At& link) override {
    if (::symlinkat(target.c_str(), fd_of(link), rel_of(link)) != 0) fail("symlink", link);
  }

  std::string read_link(const At& p) override {
    std::string buf(PATH_MAX, '\0');
    ssize_t n = ::readlinkat(fd_of(p), rel_of(p), buf.data(), buf.size());
    if (n < 0) fail("readlink", p);
    buf.resize(static_cast<std::size_t>(n));
    return buf;
  }

  void make_hardlink(const At& existing, const At& link) override {
    if (::linkat(fd_of(existing), rel_of(existing), fd_of(link), rel_of(link), 0) != 0) fail("link", link);
  }

  void set_mode(const At& p, mode_t mode) override {
    if (::fchmodat(fd_of(p), rel_of(p), mode & 07777, 0) != 0) fail("chmod", p);
  }

  void set_mtime(const At& p, timespec mtime) override {
    timespec times[2] = {mtime, mtime};
    if (::utimensat(fd_of(p), rel_of(p), times, AT_SYMLINK_NOFOLLOW) == 0) return;
    // A time of one's choosing is the owner's to set; the time now is any writer's (a member of a
    // shared install dating root's file): a time within a second of now is set as now.
    int err = errno;
    timespec clock{};
    ::clock_gettime(CLOCK_REALTIME, &clock);
    if ((err == EPERM || err == EACCES) && std::llabs(static_cast<long long>(clock.tv_sec - mtime.tv_sec)) <= 1) {
      timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
      if (::utimensat(fd_of(p), rel_of(p), now, AT_SYMLINK_NOFOLLOW) == 0) return;
    }
    errno = err;
    fail("set time", p);
  }

  void set_owner(const At& p, uid_t uid, gid_t gid) override {
    if (::fchownat(fd_of(p), rel_of(p), uid, gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) fail("chown", p);
  }

  bool can_write(const fs::path& dir) override {
    return ::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
  }

  std::uint64_t fs_type(const fs::path& p) override {
    struct statfs sf {};
    if (::statfs(p.c_str(), &sf) != 0) fail("statfs", p);
    return static_cast<std::uint64_t>(sf.f_type);
  }

  Xattrs xattrs(const At& p) override {
    std::string path = xattr_path(p);
    Xattrs out;
    for (const auto& name : xattr_names(path, p)) {
      std::string value;
      for (;;) {
        ssize_t n = ::lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
        if (n < 0 && errno == ENODATA) break;  // removed meanwhile
        if (n < 0) fail("read extended attribute " + name + " of", p);
        value.resize(static_cast<std::size_t>(n));
        ssize_t got = ::lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
        if (got < 0 && errno == ERANGE) continue;  // grew meanwhile
        if (got < 0) fail("read extended attribute " + name + " of", p);
        value.resize(static_cast<std::size_t>(got));
        out.emplace_back(name, std::move(value));
        break;
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void set_xattrs(const At& p, const Xattrs& want) override {
    std::string path = xattr_path(p);
    std::map<std::string, std::string> have;
    for (auto& [name, value] : xattrs(p)) have.emplace(name, std::move(value));
    for (const auto& had : have) {
      const std::string& name = had.first;
      if (std::none_of(want.begin(), want.end(), [&](const auto& w) { return w.first == name; }) &&
          ::lremovexattr(path.c_str(), name.c_str()) != 0 && errno != ENODATA)
        fail("remove extended attribute " + name + " of", p);
    }
    for (const auto& [name, value] : want) {
      auto it = have.find(name);
      if (it != have.end() && it->second == value) continue;
      if (::lsetxattr(path.c_str(), name.c_str(), value.data(), value.size(), 0) != 0)
        fail("set extended attribute " + name + " of", p);
    }
  }

  bool has_xattrs(const fs::path& p) override {
    ssize_t n = ::llistxattr(p.c_str(), nullptr, 0);
    if (n >= 0) return n > 0;
    if (errno == ENOTSUP || errno == ENOSYS) return false;
    fail("list extended attributes", p);
  }

  fs::path real_path(const fs::path& p) override {
    char* r = ::realpath(p.c_str(), nullptr);
    if (r == nullptr) fail("resolve", p);
    fs::path out(r);
    std::free(r);
    return out;
  }

  std::unique_ptr<DirHandle> open_dir(const At& dir) override {
    int fd = dir.dir() != nullptr
                 ? ::openat(dir.dir()->fd(), rel_of(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
                 : open_no_symlinks(dir.rel());
    if (fd < 0) fail("open directory", dir);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw DiskError("stat", dir.full().string(), err);
    }
    return std::make_unique<DirHandle>(fd, dir.full(), st.st_dev, st.st_ino);
  }

 private:
  // A directory by a path none of whose components may be a symlink; -1 with errno on failure.
  static int open_no_symlinks(const fs::path& p) {
    open_how how{};
    how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS;
    long got = ::syscall(SYS_openat2, AT_FDCWD, p.c_str(), &how, sizeof how);
    if (got >= 0 || (errno != ENOSYS && errno != E2BIG && errno != EPERM)) return static_cast<int>(got);
    // No openat2 (before Linux 5.6, or filtered by seccomp): walk, each step O_NOFOLLOW.
    int at = ::open(p.is_absolute() ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (const auto& part : p.relative_path()) {
      if (at < 0) return -1;
      if (part.empty()) continue;
      int next = ::openat(at, part.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      int err = errno;
      ::close(at);
      errno = err;
      at = next;
    }
    if (at < 0) return -1;
    // The walk held O_PATH descriptors (no read permission needed on the way); the directory
    // itself is reopened through its own descriptor, which no rename can redirect.
    int fd = ::openat(at, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    ::close(at);
    errno = err;
    return fd;
  }
};

}  // namespace

DirHandle::~DirHandle() {
  if (fd_ >= 0) ::close(fd_);
}

At::At(const DirHandle& dir, std::string name) : dir_(&dir), rel_(std::move(name)) {
  const std::string& n = rel_.native();
  if (n.find('/') != std::string::npos || n == "." || n == "..")
    throw Error("internal: not one name inside " + dir.path().string() + ": " + n);
}

At At::parent() const {
  if (dir_ != nullptr) return rel_.empty() ? At(dir_->path().parent_path()) : At(*dir_, "");
  return At(rel_.parent_path());
}

At At::sibling(std::string name) const {
  if (dir_ != nullptr && !rel_.empty()) return At(*dir_, std::move(name));
  return At(full().parent_path() / name);
}

Disk& real_disk() {
  static PosixDisk disk;
  return disk;
}

}  // namespace overlay
