#include "overlay/disk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "overlay/error.hpp"

namespace overlay {
namespace {

[[noreturn]] void fail(const char* op, const fs::path& p) { throw DiskError(op, p.string(), errno); }

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
  }
  void sync() override {
    if (::fsync(fd_) != 0) fail("fsync", path_);
  }
  void start_writeback() override { ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE); }
  bool clone_from(const fs::path& src) override {
    int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) fail("open", src);
    int rc = ::ioctl(fd_, FICLONE, in);
    int err = errno;
    ::close(in);
    if (rc == 0) return true;
    // The filesystem cannot share blocks (ext4, tmpfs), or not between these two files.
    if (err == EOPNOTSUPP || err == ENOTSUP || err == EXDEV || err == EINVAL || err == ENOTTY || err == ENOSYS) return false;
    throw DiskError("clone", src.string() + " -> " + path_.string(), err);
  }
  bool copy_from(const fs::path& src) override {
    int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
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
      if (done == 0 && (err == EXDEV || err == EOPNOTSUPP || err == ENOTSUP || err == EINVAL || err == ENOSYS)) return false;
      throw DiskError("copy", src.string() + " -> " + path_.string(), err);
    }
    ::close(in);
    return true;
  }
  void close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) fail("close", path_);
  }

 private:
  int fd_;
  fs::path path_;
};

class PosixDisk : public Disk {
 public:
  FileInfo info(const fs::path& p, Follow follow) override {
    struct stat st {};
    int rc = follow == Follow::yes ? ::stat(p.c_str(), &st) : ::lstat(p.c_str(), &st);
    if (rc != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return {};
      fail("stat", p);
    }
    FileInfo fi;
    fi.type = type_of(st.st_mode);
    fi.mode = st.st_mode & 07777;
    fi.size = static_cast<std::uint64_t>(st.st_size);
    fi.uid = st.st_uid;
    fi.gid = st.st_gid;
    fi.dev = st.st_dev;
    fi.ino = st.st_ino;
    fi.nlink = static_cast<std::uint64_t>(st.st_nlink);
    fi.mtime = st.st_mtim;
    fi.ctime = st.st_ctim;
    return fi;
  }

  std::unique_ptr<ReadHandle> open_read(const fs::path& p) override {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("open", p);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::make_unique<FdReader>(fd, p);
  }

  std::unique_ptr<WriteHandle> create(const fs::path& p, mode_t mode, CreateMode how) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
    flags |= how == CreateMode::exclusive ? O_EXCL : O_TRUNC;
    int fd = ::open(p.c_str(), flags, 0600);
    if (fd < 0) fail("create", p);
    if (::fchmod(fd, mode & 07777) != 0) {
      int err = errno;
      ::close(fd);
      throw DiskError("chmod", p.string(), err);
    }
    return std::make_unique<FdWriter>(fd, p);
  }

  void rename(const fs::path& from, const fs::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) fail("rename", from.string() + " -> " + to.string());
  }

  bool exchange(const fs::path& a, const fs::path& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
    if (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS) return false;
    fail("exchange", a.string() + " <-> " + b.string());
  }

  void sync_dir(const fs::path& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("open directory", dir);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) throw DiskError("fsync", dir.string(), err);
  }

  void sync_filesystem(const fs::path& p) override {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("open", p);
    int rc = ::syncfs(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) throw DiskError("syncfs", p.string(), err);
  }

  bool make_dir(const fs::path& p, mode_t mode) override {
    if (::mkdir(p.c_str(), mode) == 0) return true;
    if (errno == EEXIST) {
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
      errno = EEXIST;
    }
    fail("mkdir", p);
  }

  void remove(const fs::path& p) override {
    if (::unlink(p.c_str()) == 0) return;
    if (errno == EISDIR || errno == EPERM) {
      if (::rmdir(p.c_str()) == 0) return;
    }
    fail("remove", p);
  }

  std::vector<DirEntry> list_dir(const fs::path& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) fail("open directory", dir);
    std::vector<DirEntry> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      FileType t = e->d_type == DT_REG   ? FileType::regular
                   : e->d_type == DT_DIR ? FileType::directory
                   : e->d_type == DT_LNK ? FileType::symlink
                   : e->d_type == DT_UNKNOWN ? FileType::none
                                             : FileType::other;
      names.push_back({std::move(n), t});
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) throw DiskError("read directory", dir.string(), err);
    return names;
  }

  void make_symlink(const std::string& target, const fs::path& link) override {
    if (::symlink(target.c_str(), link.c_str()) != 0) fail("symlink", link);
  }

  std::string read_link(const fs::path& p) override {
    std::string buf(PATH_MAX, '\0');
    ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size());
    if (n < 0) fail("readlink", p);
    buf.resize(static_cast<std::size_t>(n));
    return buf;
  }

  void make_hardlink(const fs::path& existing, const fs::path& link) override {
    if (::link(existing.c_str(), link.c_str()) != 0) fail("link", link);
  }

  void set_mode(const fs::path& p, mode_t mode) override {
    if (::chmod(p.c_str(), mode & 07777) != 0) fail("chmod", p);
  }

  void set_mtime(const fs::path& p, timespec mtime) override {
    timespec times[2] = {mtime, mtime};
    if (::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) fail("set time", p);
  }

  void set_owner(const fs::path& p, uid_t uid, gid_t gid) override {
    if (::lchown(p.c_str(), uid, gid) != 0 && errno != EPERM) fail("chown", p);
  }

  bool can_write(const fs::path& dir) override {
    return ::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
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
};

}  // namespace

Disk& real_disk() {
  static PosixDisk disk;
  return disk;
}

}  // namespace overlay
