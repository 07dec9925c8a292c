#pragma once
// A Disk that forwards to the real one and fails the Nth mutating operation with a chosen errno:
// the way tests prove every step of a protocol leaves a recoverable state.
#include <cerrno>
#include <functional>

#include "overlay/disk.hpp"
#include "overlay/error.hpp"

namespace overlay::test {

class FaultyDisk : public Disk {
 public:
  explicit FaultyDisk(Disk& inner) : inner_(inner) {}
  // Fail the n-th (1-based) mutating operation from now on with `err`; 0 disables.
  void fail_at(long n, int err = EIO) {
    fail_at_ = n;
    err_ = err;
    count_ = 0;
  }
  long count() const { return count_; }
  // Run before each mutating operation: another process's step put at an exact point.
  std::function<void(const char* op, const fs::path& path)> before_op;
  bool fired() const { return fired_; }

  FileInfo info(const At& p, Follow f) override { return inner_.info(p, f); }
  std::unique_ptr<ReadHandle> open_read(const At& p) override { return inner_.open_read(p); }
  std::unique_ptr<WriteHandle> create(const At& p, mode_t m, CreateMode how) override {
    tick("create", p);
    return std::make_unique<Writer>(*this, inner_.create(p, m, how), p.full());
  }
  void rename(const At& a, const At& b) override {
    tick("rename", a);
    inner_.rename(a, b);
  }
  bool exchange(const At& a, const At& b) override {
    tick("exchange", a);
    return inner_.exchange(a, b);
  }
  void sync_dir(const At& d) override {
    tick("fsync", d);
    inner_.sync_dir(d);
  }
  void sync_filesystem(const At& p) override {
    tick("syncfs", p);
    inner_.sync_filesystem(p);
  }
  bool make_dir(const At& p, mode_t m) override {
    tick("mkdir", p);
    return inner_.make_dir(p, m);
  }
  void remove(const At& p) override {
    tick("remove", p);
    inner_.remove(p);
  }
  std::vector<DirEntry> list_dir(const At& d) override { return inner_.list_dir(d); }
  void make_symlink(const std::string& t, const At& l) override {
    tick("symlink", l);
    inner_.make_symlink(t, l);
  }
  std::string read_link(const At& p) override { return inner_.read_link(p); }
  void make_hardlink(const At& e, const At& l) override {
    tick("link", l);
    inner_.make_hardlink(e, l);
  }
  void set_mode(const At& p, mode_t m) override {
    tick("chmod", p);
    inner_.set_mode(p, m);
  }
  void set_mtime(const At& p, timespec t) override {
    tick("utime", p);
    inner_.set_mtime(p, t);
  }
  void set_owner(const At& p, uid_t u, gid_t g) override {
    tick("chown", p);
    inner_.set_owner(p, u, g);
  }
  fs::path real_path(const fs::path& p) override { return inner_.real_path(p); }
  bool has_xattrs(const fs::path& p) override { return inner_.has_xattrs(p); }
  Xattrs xattrs(const At& p) override { return inner_.xattrs(p); }
  void set_xattrs(const At& p, const Xattrs& w) override {
    tick("xattr", p);
    inner_.set_xattrs(p, w);
  }
  bool can_write(const fs::path& dir) override { return inner_.can_write(dir); }
  std::uint64_t fs_type(const fs::path& p) override { return inner_.fs_type(p); }
  std::unique_ptr<DirHandle> open_dir(const At& dir) override { return inner_.open_dir(dir); }

 private:
  class Writer : public WriteHandle {
   public:
    Writer(FaultyDisk& d, std::unique_ptr<WriteHandle> w, fs::path p) : d_(d), w_(std::move(w)), p_(std::move(p)) {}
    void write(const char* b, std::size_t n) override {
      d_.tick("write", p_);
      w_->write(b, n);
    }
    void skip(std::uint64_t n) override {
      d_.tick("write", p_);
      w_->skip(n);
    }
    void sync() override {
      d_.tick("fsync", p_);
      w_->sync();
    }
    bool clone_from(const At& src) override {
      d_.tick("clone", p_);
      return w_->clone_from(src);
    }
    bool copy_from(const At& src) override {
      d_.tick("copy", p_);
      return w_->copy_from(src);
    }
    void close() override { w_->close(); }

   private:
    FaultyDisk& d_;
    std::unique_ptr<WriteHandle> w_;
    fs::path p_;
  };

  void tick(const char* op, const At& p) {
    if (before_op) before_op(op, p.full());
    if (fail_at_ > 0 && ++count_ == fail_at_) {
      fired_ = true;
      throw DiskError(op, p.full().string(), err_);
    }
    if (fail_at_ == 0) ++count_;
  }

  Disk& inner_;
  long fail_at_ = 0, count_ = 0;
  int err_ = EIO;
  bool fired_ = false;
};

}  // namespace overlay::test
