#include "overlay/file_ops.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"

namespace overlay {
namespace {
constexpr std::size_t kChunk = 1 << 20;
}

std::string copy_file_hashing(Disk& disk, const fs::path& src, const fs::path& dest, mode_t mode,
                              Durable durable) {
  auto in = disk.open_read(src);
  auto out = disk.create(dest, mode, CreateMode::exclusive);
  Sha256 h;
  std::vector<char> buf(kChunk);
  for (;;) {
    std::size_t n = in->read(buf.data(), buf.size());
    if (n == 0) break;
    h.update(buf.data(), n);
    out->write(buf.data(), n);
  }
  if (durable == Durable::yes) out->sync();
  out->close();
  return h.finish_hex();
}

std::string hash_file(Disk& disk, const fs::path& p) {
  auto in = disk.open_read(p);
  Sha256 h;
  std::vector<char> buf(kChunk);
  while (std::size_t n = in->read(buf.data(), buf.size())) h.update(buf.data(), n);
  return h.finish_hex();
}

std::string replace_file_atomically(Disk& disk, const fs::path& src, const fs::path& dest,
                                    mode_t mode) {
  fs::path tmp = sibling_temp_path(dest, "overlay-new");
  FileInfo old = disk.info(dest, Follow::no);
  std::string sha;
  try {
    sha = copy_file_hashing(disk, src, tmp, mode, Durable::yes);
    if (old.exists()) disk.set_owner(tmp, old.uid, old.gid);
    disk.rename(tmp, dest);
  } catch (...) {
    try {
      disk.remove(tmp);
    } catch (const Error&) {
    }
    throw;
  }
  disk.sync_dir(dest.parent_path());
  return sha;
}

void write_file_atomically(Disk& disk, const fs::path& dest, const std::string& data, mode_t mode) {
  fs::path lock = dest;
  lock += ".lock";
  {
    auto out = disk.create(lock, mode, CreateMode::truncate);
    out->write(data.data(), data.size());
    out->sync();
    out->close();
  }
  disk.rename(lock, dest);
  disk.sync_dir(dest.parent_path());
}

std::string read_small_file(Disk& disk, const fs::path& p, std::size_t max_bytes) {
  auto in = disk.open_read(p);
  std::string data;
  std::vector<char> buf(64 * 1024);
  while (std::size_t n = in->read(buf.data(), buf.size())) {
    data.append(buf.data(), n);
    if (data.size() > max_bytes)
      throw Error(p.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  return data;
}

void remove_tree(Disk& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::no);
  if (!fi.exists()) return;
  if (fi.type == FileType::directory) {
    if ((fi.mode & 0700) != 0700) disk.set_mode(p, fi.mode | 0700);
    for (const auto& name : disk.list_dir(p)) remove_tree(disk, p / name);
  }
  disk.remove(p);
}

void make_dirs(Disk& disk, const fs::path& p, mode_t mode) {
  if (p.empty()) return;
  FileInfo fi = disk.info(p, Follow::yes);
  if (fi.type == FileType::directory) return;
  if (p.has_parent_path() && p.parent_path() != p) make_dirs(disk, p.parent_path(), mode);
  disk.make_dir(p, mode);
}

namespace {
using Visit = std::function<WalkStep(const fs::path&, const FileInfo&)>;
using OnError = std::function<void(const fs::path&, const std::string&)>;

void walk_rec(Disk& disk, const fs::path& root, const fs::path& rel, const Visit& visit, const OnError& on_error) {
  fs::path dir = rel.empty() ? root : root / rel;
  std::vector<std::string> names;
  try {
    names = disk.list_dir(dir);
  } catch (const DiskError& e) {
    if (!on_error) throw;
    on_error(dir, e.what());
    return;
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    fs::path child = rel.empty() ? fs::path(name) : rel / name;
    FileInfo fi = disk.info(root / child, Follow::no);
    if (!fi.exists()) continue;  // vanished while walking
    WalkStep step = visit(child, fi);
    if (fi.type == FileType::directory && step == WalkStep::descend) walk_rec(disk, root, child, visit, on_error);
  }
}
}  // namespace

void walk_tree(Disk& disk, const fs::path& root, const Visit& visit, const OnError& on_error) {
  walk_rec(disk, root, fs::path(), visit, on_error);
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw DiskError("getrandom", "", errno);
    }
    got += static_cast<std::size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xf]);
  }
  return out;
}

fs::path sibling_temp_path(const fs::path& p, const std::string& tag) {
  std::string name = ".";
  name.append(p.filename().string()).append(".").append(tag).append("-").append(random_hex(6));
  return p.parent_path() / name;
}

fs::path absolute_normal(const fs::path& p) {
  fs::path n = fs::absolute(p).lexically_normal();
  if (!n.has_filename() && n != n.root_path()) n = n.parent_path();  // drop a trailing '/'
  return n;
}

}  // namespace overlay
