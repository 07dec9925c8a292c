#include "overlay/recording_disk.hpp"

#include <cstdio>

namespace overlay {
namespace {
std::string read_all(Disk& disk, const At& p) {
  auto in = disk.open_read(p);
  std::string out;
  char buf[65536];
  while (std::size_t n = in->read(buf, sizeof buf)) out.append(buf, n);
  return out;
}
}  // namespace

// A write handle whose writes, syncs and close are recorded in order, with their offsets.
class RecordingWriter : public WriteHandle {
 public:
  RecordingWriter(RecordingDisk& d, std::unique_ptr<WriteHandle> w, std::string path)
      : d_(d), w_(std::move(w)), path_(std::move(path)) {}
  void write(const char* buf, std::size_t n) override {
    w_->write(buf, n);
    DiskOp op{"write", path_, {}, offset_, n, {}, 0};
    if (d_.data_ == RecordData::bytes) op.data.assign(buf, n);
    offset_ += n;
    d_.record(std::move(op));
  }
  void skip(std::uint64_t n) override {
    w_->skip(n);
    // To a replay a hole is the zeros it reads as.
    DiskOp op{"write", path_, {}, offset_, n, {}, 0};
    if (d_.data_ == RecordData::bytes) op.data.assign(n, '\0');
    offset_ += n;
    d_.record(std::move(op));
  }
  void sync() override {
    w_->sync();
    d_.record({"fsync", path_, {}, 0, 0, {}, 0});
  }
  void start_writeback() override { w_->start_writeback(); }
  bool clone_from(const At& src) override { return w_->clone_from(src) && filled_from("clone", src); }
  bool copy_from(const At& src) override { return w_->copy_from(src) && filled_from("copy", src); }
  void close() override {
    w_->close();
    d_.record({"close", path_, {}, 0, 0, {}, 0});
  }

 private:
  // Recorded as the bytes the file now holds: to a replay, a clone or a kernel copy is a write.
  bool filled_from(const char* how, const At& src) {
    DiskOp op{how, path_, src.full().string(), 0, d_.inner_.info(src, Follow::yes).size, {}, 0};
    if (d_.data_ == RecordData::bytes) op.data = read_all(d_.inner_, src);
    offset_ = op.size;
    d_.record(std::move(op));
    return true;
  }

  RecordingDisk& d_;
  std::unique_ptr<WriteHandle> w_;
  std::string path_;
  std::uint64_t offset_ = 0;
};

std::string to_line(const DiskOp& op) {
  char mode[16];
  std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(op.mode));
  std::string line = op.op + "\t" + op.path + "\t" + op.path2 + "\t" + std::to_string(op.offset) + "\t" +
                     std::to_string(op.size) + "\t" + mode;
  if (op.data.empty()) return line;
  static const char kHex[] = "0123456789abcdef";
  line.reserve(line.size() + 1 + 2 * op.data.size());
  line += '\t';
  for (unsigned char c : op.data) {
    line += kHex[c >> 4];
    line += kHex[c & 15];
  }
  return line;
}

RecordingDisk::RecordingDisk(Disk& inner, RecordData data, std::function<void(const DiskOp&)> sink)
    : inner_(inner), data_(data), sink_(std::move(sink)) {}

std::vector<DiskOp> RecordingDisk::ops() const {
  std::lock_guard<std::mutex> g(mu_);
  return ops_;
}

void RecordingDisk::record(DiskOp op) {
  std::lock_guard<std::mutex> g(mu_);
  if (sink_) sink_(op);
  ops_.push_back(std::move(op));
}

// Each call is recorded once it returned: a failed call changed nothing to replay.
std::unique_ptr<WriteHandle> RecordingDisk::create(const At& p, mode_t mode, CreateMode how) {
  auto w = inner_.create(p, mode, how);
  record({"create", p.full().string(), how == CreateMode::truncate ? "truncate" : "exclusive", 0, 0, {}, mode});
  return std::make_unique<RecordingWriter>(*this, std::move(w), p.full().string());
}

void RecordingDisk::rename(const At& from, const At& to) {
  inner_.rename(from, to);
  record({"rename", from.full().string(), to.full().string(), 0, 0, {}, 0});
}

bool RecordingDisk::exchange(const At& a, const At& b) {
  if (!inner_.exchange(a, b)) return false;
  record({"exchange", a.full().string(), b.full().string(), 0, 0, {}, 0});
  return true;
}

void RecordingDisk::sync_dir(const At& dir) {
  inner_.sync_dir(dir);
  record({"fsync", dir.full().string(), "dir", 0, 0, {}, 0});
}

void RecordingDisk::sync_filesystem(const At& p) {
  inner_.sync_filesystem(p);
  record({"syncfs", p.full().string(), {}, 0, 0, {}, 0});
}

bool RecordingDisk::make_dir(const At& p, mode_t mode) {
  bool made = inner_.make_dir(p, mode);
  if (made) record({"mkdir", p.full().string(), {}, 0, 0, {}, mode});
  return made;
}

void RecordingDisk::remove(const At& p) {
  inner_.remove(p);
  record({"remove", p.full().string(), {}, 0, 0, {}, 0});
}

void RecordingDisk::make_symlink(const std::string& target, const At& link) {
  inner_.make_symlink(target, link);
  record({"symlink", link.full().string(), target, 0, 0, {}, 0});
}

void RecordingDisk::make_hardlink(const At& existing, const At& link) {
  inner_.make_hardlink(existing, link);
  record({"link", link.full().string(), existing.full().string(), 0, 0, {}, 0});
}

void RecordingDisk::set_xattrs(const At& p, const Xattrs& want) {
  inner_.set_xattrs(p, want);
  record({"xattr", p.full().string(), {}, 0, want.size(), {}, 0});
}

void RecordingDisk::set_mode(const At& p, mode_t mode) {
  inner_.set_mode(p, mode);
  record({"chmod", p.full().string(), {}, 0, 0, {}, mode});
}

void RecordingDisk::set_mtime(const At& p, timespec mtime) {
  inner_.set_mtime(p, mtime);
  record({"utime",
          p.full().string(),
          {},
          static_cast<std::uint64_t>(mtime.tv_sec),
          static_cast<std::uint64_t>(mtime.tv_nsec),
          {},
          0});
}

void RecordingDisk::set_owner(const At& p, uid_t uid, gid_t gid) {
  inner_.set_owner(p, uid, gid);
  record({"chown", p.full().string(), std::to_string(uid) + ":" + std::to_string(gid), 0, 0, {}, 0});
}

}  // namespace overlay
