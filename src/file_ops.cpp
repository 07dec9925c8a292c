#include "overlay/file_ops.hpp"

#include <sys/random.h>

#include <cerrno>
#include <vector>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"

namespace overlay {

std::string replace_file_atomically(Disk& disk, const fs::path& src, const At& dest, mode_t mode, Durable durable) {
  const At tmp = dest.sibling(sibling_temp_path(dest.full(), "overlay-new").filename().string());
  FileInfo old = disk.info(dest, Follow::no);
  std::string sha;
  try {
    sha = copy_file_hashing(disk, src, tmp, mode, durable).sha256;
    if (old.exists()) {
      // The file it replaces keeps its owner, extended attributes (an SELinux label, an ACL) and
      // mode; the mode last, for chown clears setuid and setgid bits.
      disk.set_owner(tmp, old.uid, old.gid);
      Xattrs kept = disk.xattrs(dest);
      if (!kept.empty() || !disk.xattrs(tmp).empty())
        disk.set_xattrs(tmp, kept);                       // a default ACL may have given tmp some
      if ((mode & 06000) != 0) disk.set_mode(tmp, mode);  // the bits chown cleared
    }
    disk.rename(tmp, dest);
  } catch (...) {
    best_effort("a temp file is left beside its destination", [&] { disk.remove(tmp); });
    throw;
  }
  if (durable == Durable::yes) disk.sync_dir(dest.parent());
  return sha;
}

void write_file_atomically(Disk& disk, const At& dest, const std::string& data, mode_t mode, NameDurable name) {
  const At lock = dest.sibling(dest.filename() + ".lock");
  {
    auto out = disk.create(lock, mode, CreateMode::truncate);
    out->write(data.data(), data.size());
    out->sync();
    out->close();
  }
  disk.rename(lock, dest);
  if (name == NameDurable::yes) disk.sync_dir(dest.parent());
}

std::string read_small_file(DiskReader& disk, const fs::path& p, std::size_t max_bytes) {
  auto in = disk.open_read(p);
  std::string data;
  // Read in steps that grow with what came: a manifest of 2 KiB costs one small buffer, not a
  // zeroed 64 KiB one (page faults and a memset per read, in every invocation).
  std::size_t step = 4096;
  for (;;) {
    std::size_t have = data.size();
    data.resize(have + step);
    std::size_t n = in->read(data.data() + have, step);
    data.resize(have + n);
    if (data.size() > max_bytes) throw Error(p.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
    if (n == 0) return data;
    step = std::min<std::size_t>(step * 2, 1 << 20);
  }
}

void remove_file_durably(Disk& disk, const At& p) {
  disk.remove(p);
  disk.sync_dir(p.parent());
}

namespace {

// Removes `at` and, when a directory, everything below it, each directory entered through a
// descriptor opened without following a symlink: a directory swapped for a symlink while the
// tree is deleted makes the open fail, never the deletion go through the link (the rm -rf race).
void remove_tree_at(Disk& disk, const At& at) try {
  FileInfo fi = disk.info(at, Follow::no);
  if (!fi.exists()) return;
  if (fi.type == FileType::directory) {
    std::unique_ptr<DirHandle> dir;
    try {
      dir = disk.open_dir(at);
    } catch (const DiskError& e) {
      if (e.code() != EACCES) throw;
      disk.set_mode(at, fi.mode | 0700);  // ours but unreadable (a tree a build made 0500)
      dir = disk.open_dir(at);
    }
    if ((fi.mode & 0700) != 0700) disk.set_mode(At(*dir, ""), fi.mode | 0700);
    for (const auto& e : disk.list_dir(At(*dir, ""))) remove_tree_at(disk, At(*dir, e.name));
  }
  disk.remove(at);
} catch (const DiskError& e) {
  if (e.code() != ENOENT) throw;  // gone meanwhile (another purge deleting the same tree): done
}

}  // namespace

std::unique_ptr<DirHandle> hold_dir(Disk& disk, const At& at) {
  if (at.dir() != nullptr) return disk.open_dir(at);
  return disk.open_dir(disk.real_path(at.rel().empty() ? fs::path(".") : at.rel()));
}

void remove_tree(Disk& disk, const At& p) {
  if (p.dir() != nullptr) return remove_tree_at(disk, p);
  try {
    FileInfo fi = disk.info(p, Follow::no);
    if (!fi.exists()) return;
    if (fi.type != FileType::directory) return disk.remove(p);
    // The tree's parent by its real path (a symlink above it is followed once, as given), held.
    const fs::path& path = p.rel();
    auto parent = hold_dir(disk, path.has_parent_path() ? path.parent_path() : fs::path("."));
    remove_tree_at(disk, At(*parent, path.filename().string()));
  } catch (const DiskError& e) {
    if (e.code() != ENOENT) throw;  // gone meanwhile (another purge deleting the same tree): done
  }
}

void remove_tree_durably(Disk& disk, const fs::path& p) {
  if (!disk.info(p, Follow::no).exists()) return;
  remove_tree(disk, p);
  disk.sync_dir(p.parent_path());
}

void make_dirs(Disk& disk, const fs::path& p, mode_t mode) {
  if (p.empty()) return;
  FileInfo fi = disk.info(p, Follow::yes);
  if (fi.type == FileType::directory) return;
  bool has_parent = p.has_parent_path() && p.parent_path() != p;
  if (has_parent) make_dirs(disk, p.parent_path(), mode);
  // A new directory's name lives in its parent: without this fsync a power cut may lose it, and
  // with it everything made durable inside (an overlay's manifest and backups).
  if (disk.make_dir(p, mode) && has_parent) disk.sync_dir(p.parent_path());
}

namespace {
using Visit = std::function<WalkStep(const fs::path&, FileType)>;
using OnError = std::function<void(const fs::path&, const std::string&)>;

void walk_rec(DiskReader& disk, const fs::path& root, const fs::path& rel, const Visit& visit,
              const OnError& on_error) {
  fs::path dir = rel.empty() ? root : root / rel;
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(dir);
  } catch (const DiskError& e) {
    if (!on_error) throw;
    on_error(dir, e.what());
    return;
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  for (const auto& e : entries) {
    fs::path child = rel.empty() ? fs::path(e.name) : rel / e.name;
    FileType type = e.type != FileType::none ? e.type : disk.info(root / child, Follow::no).type;
    if (type == FileType::none) continue;  // vanished while walking
    WalkStep step = visit(child, type);
    if (type == FileType::directory && step == WalkStep::descend) walk_rec(disk, root, child, visit, on_error);
  }
}
}  // namespace

void walk_tree(DiskReader& disk, const fs::path& root, const Visit& visit, const OnError& on_error) {
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

std::string why_not_renamable(DiskReader& disk, const fs::path& dir, const FileInfo& di) {
  fs::path parent = dir.parent_path();
  if (!disk.can_write(parent)) return "its parent " + parent.string() + " is not writable";
  if (!same_mount(disk.info(parent, Follow::no), di)) return "it is a mount point";
  if (disk.fs_type(dir) == kOverlayfsMagic)
    return "it is on overlayfs, which cannot rename a directory of a lower layer";
  return "";
}

std::string fit_name(const std::string& name, std::size_t room) {
  if (name.size() <= room) return name;
  std::string digest = sha256_hex(name).substr(0, 16);
  return name.substr(0, room - digest.size() - 1) + "~" + digest;
}

std::string hidden_stem(const std::string& name) { return "." + fit_name(name, kStemRoom); }

bool is_own_sibling_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '.') return false;
  for (const char* tag : {".overlay-aside-", ".overlay-new-", ".overlay-restore-", ".overlay-trash-"}) {
    auto at = name.find(tag, 1);
    if (at != std::string::npos && at + std::char_traits<char>::length(tag) < name.size()) return true;
  }
  return false;
}

fs::path sibling_temp_path(const fs::path& p, const std::string& tag) {
  std::string name = hidden_stem(p.filename().string());
  name.append(".").append(tag).append("-").append(random_hex(6));
  return p.parent_path() / name;
}

fs::path absolute_normal(const fs::path& p) {
  fs::path n = fs::absolute(p).lexically_normal();
  if (!n.has_filename() && n != n.root_path()) n = n.parent_path();  // drop a trailing '/'
  return n;
}

bool is_within(const fs::path& p, const fs::path& dir) {
  fs::path rel = absolute_normal(p).lexically_relative(absolute_normal(dir));
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace overlay
