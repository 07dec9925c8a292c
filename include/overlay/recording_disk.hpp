#pragma once
// A Disk that forwards every call to another one and records each operation that changes the
// filesystem (or makes a change durable), with its arguments and, on request, the bytes written:
// the trace a crash-state explorer replays, and the proof that nothing of ours bypasses Disk.
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct DiskOp {
  // create, write, clone or copy (a file given src's blocks, or src's bytes by the kernel: path2
  // the source, size its length, data its bytes), fsync (a file or a directory), syncfs, close, rename, exchange,
  // mkdir, remove, symlink, link, chmod, utime, chown, xattr (a file's extended attributes set)
  std::string op;
  std::string path;
  std::string path2;         // rename, exchange: the other name; symlink: the target; link: the existing file
  std::uint64_t offset = 0;  // write: where in the file; utime: seconds
  std::uint64_t size = 0;    // write: how many bytes; utime: nanoseconds
  std::string data;          // write: the bytes, when recorded (RecordData::bytes)
  mode_t mode = 0;           // create, mkdir, chmod
};

// One tab-separated line: op, path, path2, offset, size, mode (octal), and — only when bytes were
// recorded — the bytes in lower-case hex as a seventh field. Paths are written as they are (the
// trace is for tests, whose paths hold no tab or newline).
std::string to_line(const DiskOp& op);

enum class RecordData { sizes, bytes };

class RecordingDisk : public Disk {
 public:
  // Each op is kept (ops()) and, when given, passed to `sink` as it happens. Thread-safe.
  RecordingDisk(Disk& inner, RecordData data, std::function<void(const DiskOp&)> sink = {});
  std::vector<DiskOp> ops() const;

  FileInfo info(const At& p, Follow f) override { return inner_.info(p, f); }
  std::unique_ptr<ReadHandle> open_read(const At& p) override { return inner_.open_read(p); }
  std::unique_ptr<WriteHandle> create(const At& p, mode_t mode, CreateMode how) override;
  void rename(const At& from, const At& to) override;
  bool exchange(const At& a, const At& b) override;
  void sync_dir(const At& dir) override;
  void sync_filesystem(const At& p) override;
  bool make_dir(const At& p, mode_t mode) override;
  void remove(const At& p) override;
  std::vector<DirEntry> list_dir(const At& dir) override { return inner_.list_dir(dir); }
  void make_symlink(const std::string& target, const At& link) override;
  std::string read_link(const At& p) override { return inner_.read_link(p); }
  void make_hardlink(const At& existing, const At& link) override;
  void set_mode(const At& p, mode_t mode) override;
  void set_mtime(const At& p, timespec mtime) override;
  void set_owner(const At& p, uid_t uid, gid_t gid) override;
  fs::path real_path(const fs::path& p) override { return inner_.real_path(p); }
  bool has_xattrs(const fs::path& p) override { return inner_.has_xattrs(p); }
  Xattrs xattrs(const At& p) override { return inner_.xattrs(p); }
  void set_xattrs(const At& p, const Xattrs& want) override;
  bool can_write(const fs::path& dir) override { return inner_.can_write(dir); }
  std::uint64_t fs_type(const fs::path& p) override { return inner_.fs_type(p); }
  std::unique_ptr<DirHandle> open_dir(const At& dir) override { return inner_.open_dir(dir); }

  void record(DiskOp op);  // for the write handles

 private:
  Disk& inner_;
  RecordData data_;
  std::function<void(const DiskOp&)> sink_;
  mutable std::mutex mu_;
  std::vector<DiskOp> ops_;
  friend class RecordingWriter;
};

}  // namespace overlay
