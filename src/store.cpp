#include "overlay/store.hpp"

#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string_view>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/snapshot.hpp"

namespace overlay {
namespace {
// Below this, freeing a replaced file on the spot is cheaper than a background process.
constexpr std::uint64_t kParkBytes = 16u << 20;

// Our own hidden siblings of `p` (".<name>.overlay-*"), left by an interrupted operation; never
// an aside copy, which is a backup, not a leftover.
std::vector<fs::path> leftovers_of(Disk& disk, const fs::path& p) {
  std::vector<fs::path> out;
  fs::path parent = p.parent_path();
  if (!disk.info(parent, Follow::no).exists()) return out;
  std::string prefix = hidden_stem(p.filename().string()) + ".overlay-";
  for (const auto& e : disk.list_dir(parent))
    if (e.name.rfind(prefix, 0) == 0 && !is_aside_name(e.name)) out.push_back(parent / e.name);
  return out;
}

// Leftovers of an interrupted restore of file `p` are removed, durably. A leftover is a file
// (a temp) of ours; inside a held directory it is removed through it, and a directory found
// under such a name (never made by a file's restore) is left alone.
void sweep_leftovers(Disk& disk, const At& p) {
  if (p.dir() == nullptr) {
    for (const auto& l : leftovers_of(disk, p.rel())) remove_tree_durably(disk, l);
    return;
  }
  std::string prefix = hidden_stem(p.filename()) + ".overlay-";
  bool removed = false;
  for (const auto& e : disk.list_dir(p.parent())) {
    if (e.name.rfind(prefix, 0) != 0 || is_aside_name(e.name)) continue;
    At l = p.sibling(e.name);
    if (disk.info(l, Follow::no).type == FileType::directory) continue;
    disk.remove(l);
    removed = true;
  }
  if (removed) disk.sync_dir(p.parent());
}

// Whether fi is the directory an aside record names (same device, inode and owner).
bool is_recorded_dir(const FileInfo& fi, const AsideDir& a) {
  return fi.type == FileType::directory && fi.dev == a.dev && fi.ino == a.ino && fi.uid == a.uid;
}

std::string identity_of(const FileInfo& fi) {
  if (fi.type == FileType::symlink) return "a symlink";
  if (fi.type != FileType::directory) return "not a directory";
  return "inode " + std::to_string(fi.ino) + " on device " + std::to_string(fi.dev) + ", owner uid " +
         std::to_string(fi.uid);
}

// Whether `name` is an entry id new_entry() makes: "n", decimal seconds, "-", 8 hex digits.
bool is_entry_id(const std::string& name) {
  auto only = [](std::string_view s, const char* set) {
    return !s.empty() && s.find_first_not_of(set) == std::string_view::npos;
  };
  std::size_t dash = name.find('-');
  if (name.empty() || name[0] != 'n' || dash == std::string::npos) return false;
  std::string_view secs = std::string_view(name).substr(1, dash - 1), hex = std::string_view(name).substr(dash + 1);
  return only(secs, "0123456789") && hex.size() == 8 && only(hex, "0123456789abcdef");
}

}  // namespace

std::string BackupStore::new_entry(const std::string& wanted) {
  backup_dir_created_ = disk_.make_dir(overlay_ / kBackupDirName, 0755);
  if (is_entry_id(wanted) && disk_.make_dir(entry_dir(wanted), 0700)) return wanted;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string id = "n" + std::to_string(secs) + "-" + random_hex(4);
    if (disk_.make_dir(entry_dir(id), 0700)) return id;
  }
  throw Error("cannot create a unique backup directory in " + (overlay_ / kBackupDirName).string());
}

SavedFile BackupStore::save_file(const std::string& id, const std::string& label, const At& file) {
  FileInfo fi = disk_.info(file, file.dir() != nullptr ? Follow::no : Follow::yes);
  std::string rel = std::string(kBackupDirName) + "/" + id + "/" + fit_name(label + "_" + file.filename(), 240);
  SavedFile s;
  s.backup = rel;
  s.mode = fi.mode;
  s.stamp = stamp_of(fi);
  s.owner = FileOwner{fi.uid, fi.gid};
  s.xattrs = disk_.xattrs(file);
  Copied c = copy_file_hashing(disk_, file, overlay_ / rel, fi.mode, Durable::yes);
  s.sha256 = std::move(c.sha256);
  s.cloned = c.way == CopyWay::cloned;
  // The inode itself is kept where it has other names, and where this user could not make its
  // like (another's file in a shared install, which a build may replace with one of ours): revert
  // puts that inode back, owner and all, with no chown.
  if (fi.nlink > 1 || (::geteuid() != 0 && fi.uid != ::geteuid())) {
    try {
      disk_.make_hardlink(file, overlay_ / (rel + ".inode"));
      s.same_inode = rel + ".inode";
    } catch (const DiskError& e) {
      // Another filesystem (or a mount between): revert restores the bytes to this name alone.
      spdlog::info("{} has {} names; no link to its inode kept ({})", file.full().string(), fi.nlink, e.what());
    }
  }
  return s;
}

SavedFile BackupStore::save_dir_tar(const std::string& id, const std::string& label, const At& dir) {
  std::string rel = std::string(kBackupDirName) + "/" + id + "/" + fit_name(label, 240) + ".tar";
  SavedFile s;
  s.backup = rel;
  s.mode = 0600;
  s.sha256 = snapshot_dir_to_tar(disk_, dir, overlay_ / rel);
  return s;
}

bool BackupStore::trade_for_clone(const SavedFile& saved, const At& path) {
  if (!saved.cloned) return false;
  fs::path clone = resolve(saved.backup);
  FileInfo cur = disk_.info(path, Follow::no);
  if (cur.type != FileType::regular || stamp_of(cur) != saved.stamp || cur.nlink != 1 || disk_.has_xattrs(path.full()))
    return false;
  disk_.set_owner(clone, cur.uid, cur.gid);
  disk_.set_mtime(clone, cur.mtime);  // what incremental builds compare: unchanged for them
  FileInfo ci = disk_.info(clone, Follow::no);
  if (ci.uid != cur.uid || ci.gid != cur.gid || ci.mode != cur.mode || ci.size != cur.size) return false;
  if (!disk_.exchange(clone, path)) return false;
  // Either state is one revert restores: both names hold the original bytes throughout.
  disk_.sync_dir(path.parent());
  disk_.sync_dir(clone.parent_path());
  return true;
}

PythonToolGuard BackupStore::make_python_guard(const std::string& id) {
  // The name is what that tool prints: "IsADirectoryError: [Errno 21] Is a directory: '<this>'".
  std::string base = std::string(kBackupDirName) + "/" + id + "/";
  PythonToolGuard g{(overlay_ / (base + "python-tool-guard.never-created")).string(),
                    base + "STOP--overlay_setup.py-cannot-restore-this-entry--run-overlay-revert"};
  disk_.make_dir(overlay_ / g.stop, 0700);
  return g;
}

void BackupStore::sync_entry(const std::string& id) {
  disk_.sync_dir(entry_dir(id));                      // the backup files' names
  disk_.sync_dir(overlay_ / kBackupDirName);          // the entry directory's name
  if (backup_dir_created_) disk_.sync_dir(overlay_);  // _native_backup's own name, when new
}

fs::path BackupPaths::resolve(const std::string& rel) const {
  if (!is_safe_relative(rel)) throw Error("backup path escapes the overlay: " + rel);
  fs::path p = overlay_ / rel;
  // A symlink inside the overlay could still lead out: resolve the parent and compare.
  fs::path parent = p.parent_path();
  if (!disk_.info(parent, Follow::yes).exists()) return p;  // missing: reported by the caller
  fs::path real_parent = disk_.real_path(parent);
  if (real_overlay_.empty()) real_overlay_ = disk_.real_path(overlay_);  // once per store
  const fs::path& real_overlay = real_overlay_;
  auto rel_to = real_parent.lexically_relative(real_overlay);
  if (rel_to.empty() || *rel_to.begin() == "..") throw Error("backup path escapes the overlay: " + rel);
  if (disk_.info(p, Follow::no).type == FileType::symlink) throw Error("backup is a symlink: " + rel);
  return p;
}

void BackupStore::forget(const std::string& rel) {
  fs::path p = resolve(rel);
  remove_tree(disk_, p);
  fs::path parent = p.parent_path();
  bool entry_dir = parent.parent_path().filename() == kBackupDirName;
  if (entry_dir && disk_.info(parent, Follow::no).type == FileType::directory && disk_.list_dir(parent).empty())
    disk_.remove(parent);
}

void BackupStore::drop_entry(const std::string& id) { remove_tree(disk_, entry_dir(id)); }

namespace {

// The entry directory names a record uses: its id, and the first component below the backup
// dir of every backup it names (an entry written with ids of another form keeps its own).
std::set<std::string> named_entries(const Manifest& m) {
  std::set<std::string> out;
  const std::string prefix = std::string(kBackupDirName) + "/";
  auto add = [&](const std::optional<std::string>& rel) {
    if (!rel || rel->compare(0, prefix.size(), prefix) != 0) return;
    out.insert(rel->substr(prefix.size(), rel->find('/', prefix.size()) - prefix.size()));
  };
  for (const auto& e : m.natives) {
    out.insert(e.id);
    for (const auto& s : e.sources) add(s.backup);
    for (const auto& a : e.artifacts) add(a.backup);
    for (const auto& c : e.caches) add(c.backup_tar), add(c.backup_dir);
    if (e.python_guard) add(e.python_guard->stop);
    add(e.build_log);
    for (const auto& c : e.build_changes) add(c.backup);
  }
  // A fold into this overlay not yet settled has staged the entries it moves here (fold.hpp).
  for (const auto& f : m.folds_in) out.insert(f.entries.begin(), f.entries.end());
  return out;
}

}  // namespace

std::vector<std::string> BackupStore::sweep_unnamed_entries(const Manifest& m) {
  std::vector<std::string> swept;
  fs::path dir = overlay_ / kBackupDirName;
  if (disk_.info(dir, Follow::no).type != FileType::directory) return swept;
  std::set<std::string> named = named_entries(m);
  for (const auto& e : disk_.list_dir(dir)) {
    if (!is_entry_id(e.name) || named.count(e.name) != 0) continue;
    if (disk_.info(dir / e.name, Follow::no).type != FileType::directory) continue;
    remove_tree_durably(disk_, dir / e.name);
    swept.push_back(e.name);
  }
  return swept;
}

void give_meta(Disk& disk, const At& p, const RestoredMeta& meta, const fs::path& shown) {
  FileInfo now = disk.info(p, Follow::no);
  bool owner_set = meta.owner && FileOwner{now.uid, now.gid} != *meta.owner;
  if (owner_set) {
    disk.set_owner(p, static_cast<uid_t>(meta.owner->uid), static_cast<gid_t>(meta.owner->gid));
    FileInfo after = disk.info(p, Follow::no);
    if (FileOwner{after.uid, after.gid} != *meta.owner) {
      std::string ug = std::to_string(meta.owner->uid) + ":" + std::to_string(meta.owner->gid);
      throw Error("cannot give " + shown.string() + " back to its owner " + ug +
                  " (this user may not chown it); as root: chown " + ug + " " + shown.string());
    }
  }
  // Nothing recorded and nothing there (the common case): no change to make, none to trace.
  bool xattrs_set = meta.xattrs && (!meta.xattrs->empty() || !disk.xattrs(p).empty()) && *meta.xattrs != disk.xattrs(p);
  if (xattrs_set) disk.set_xattrs(p, *meta.xattrs);
  // A chown clears setuid and setgid bits, an ACL set moves the group bits: the mode goes last.
  if (owner_set || xattrs_set || (now.mode & 07777) != (meta.mode & 07777)) disk.set_mode(p, meta.mode);
}

void give_mtime(Disk& disk, const At& p, timespec t) {
  FileInfo now = disk.info(p, Follow::no);
  if (now.mtime.tv_sec != t.tv_sec || now.mtime.tv_nsec != t.tv_nsec) disk.set_mtime(p, t);
}

namespace {

timespec restored_mtime(RestoredTime when, const FileBackup& rec) {
  if (when == RestoredTime::original && rec.stamp)
    return timespec{static_cast<time_t>(rec.stamp->mtime_ns / 1000000000),
                    static_cast<long>(rec.stamp->mtime_ns % 1000000000)};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (when == RestoredTime::previous_second) now.tv_sec -= 1;
  return now;
}

}  // namespace

bool BackupStore::restore_by_rename(const std::string& rel, const std::string& sha256, const fs::path& backup,
                                    const At& path, const FileInfo& cur, const RestoredMeta& meta, timespec mtime) {
  std::string got = hash_file(disk_, backup);  // the one read: proves the backup
  if (got != sha256) throw Error("backup " + rel + " is corrupt (sha256 " + got + ", recorded " + sha256 + ")");
  give_meta(disk_, backup, meta, path.full());
  // The mtime the caller chose (RestoredTime): fresh, so the next incremental build redoes what
  // the candidate's build produced from the patched file, or the original's own where every such
  // output is restored too (design.md, "The mtimes revert gives").
  give_mtime(disk_, backup, mtime);
  if (cur.type == FileType::regular && cur.size >= kParkBytes) park(path, true);  // freed later, elsewhere
  try {
    disk_.rename(backup, path);  // the verified inode itself goes back: nothing to re-check
  } catch (const DiskError& e) {
    // One filesystem, two mounts (a bind mount, a container's volume): st_dev is the same, yet
    // rename refuses. The caller copies instead, as across filesystems.
    if (e.code() == EXDEV) return false;
    throw;
  }
  // One fsync: a rename is one change to both directories (both names or neither), made durable
  // by the journal commit an fsync of either forces; the backup's side needs no second one.
  disk_.sync_dir(path.parent());
  return true;
}

bool BackupStore::restore_file(const FileBackup& rec, const At& path, RestoredTime when) {
  // Only a file with other names takes the link-group ways; restore_file() sweeps for the rest.
  FileInfo cur = disk_.info(path, Follow::no);
  if (rec.same_inode || cur.nlink > 1) {
    sweep_leftovers(disk_, path);
    if (auto changed = restore_link_group(rec, path, cur, when)) return *changed;
  }
  return restore_bytes(rec, path, when);
}

std::optional<bool> BackupStore::restore_link_group(const FileBackup& rec, const At& path, const FileInfo& cur,
                                                    RestoredTime when) {
  if (rec.same_inode) {
    // The original inode, kept by our link: where it still holds the original bytes it goes back
    // itself, and every other name it has is one file with this one again.
    fs::path link = resolve(*rec.same_inode);
    FileInfo li = disk_.info(link, Follow::no);
    bool other = cur.type != FileType::regular || li.ino != cur.ino || li.dev != cur.dev;
    if (li.type == FileType::regular && other && hash_file(disk_, link) == rec.sha256) {
      give_meta(disk_, link, RestoredMeta{rec.owner, rec.mode.value_or(li.mode), rec.xattrs}, path.full());
      give_mtime(disk_, link, restored_mtime(when, rec));
      try {
        disk_.rename(link, path);
        disk_.sync_dir(path.parent());
        disk_.sync_dir(link.parent_path());
        return true;
      } catch (const DiskError& e) {
        if (e.code() != EXDEV) throw;  // reached through another mount now: the bytes go back by copy
      }
    }
  }
  // The build wrote into the original inode itself: all its names hold the build's bytes.
  if (cur.type != FileType::regular || cur.nlink < 2 || !rec.stamp || cur.ino != rec.stamp->ino) return std::nullopt;
  if (hash_file(disk_, path) == rec.sha256) return false;
  write_into_inode(rec, path);
  give_mtime(disk_, path, restored_mtime(when, rec));
  return true;
}

void BackupStore::write_into_inode(const FileBackup& rec, const At& path) {
  fs::path backup = resolve(rec.backup);
  std::string got = hash_file(disk_, backup);
  if (got != rec.sha256)
    throw Error("backup " + rec.backup + " is corrupt (sha256 " + got + ", recorded " + rec.sha256 + ")");
  FileInfo cur = disk_.info(path, Follow::no);
  // Not atomic for a reader, as no write into a file is; a crash midway leaves the entry and its
  // backup on record, and the next revert writes the inode again.
  auto out = disk_.create(path, cur.mode, CreateMode::truncate);
  if (!out->copy_from(backup)) {
    auto in = disk_.open_read(backup);
    std::vector<char> buf(1 << 20);
    while (std::size_t n = in->read(buf.data(), buf.size())) out->write(buf.data(), n);
  }
  out->sync();
  out->close();
  give_meta(disk_, path,
            RestoredMeta{rec.owner ? rec.owner : std::optional<FileOwner>(FileOwner{cur.uid, cur.gid}),
                         rec.mode.value_or(cur.mode), rec.xattrs},
            path.full());
}

bool BackupStore::restore_bytes(const FileBackup& rec, const At& path, RestoredTime when) {
  const std::string& rel = rec.backup;
  const std::string& sha256 = rec.sha256;
  const std::optional<mode_t>& mode = rec.mode;
  const std::optional<FileStamp>& stamp = rec.stamp;
  sweep_leftovers(disk_, path);  // a temp of an interrupted swap or restore
  FileInfo cur = disk_.info(path, Follow::no);
  if (cur.type == FileType::directory) throw Error("a directory now stands at " + path.full().string());
  bool maybe_original = cur.type == FileType::regular && (!stamp || stamp_of(cur) == *stamp);
  if (maybe_original && hash_file(disk_, path) == sha256) {
    // The bytes are back (an earlier revert stopped at an owner it could not give): the rest too.
    if ((rec.owner && FileOwner{cur.uid, cur.gid} != *rec.owner) || (mode && (cur.mode & 07777) != (*mode & 07777)) ||
        (rec.xattrs && disk_.xattrs(path) != *rec.xattrs)) {
      give_meta(disk_, path, RestoredMeta{rec.owner, mode.value_or(cur.mode), rec.xattrs}, path.full());
      return true;
    }
    return false;
  }
  fs::path backup = resolve(rel);
  FileInfo bi = disk_.info(backup, Follow::no);
  if (!bi.exists()) {
    // Consumed by an earlier restore that was interrupted before the manifest was updated?
    if (!maybe_original && cur.type == FileType::regular && hash_file(disk_, path) == sha256) return false;
    throw Error("backup missing: " + rel);
  }
  if (bi.type != FileType::regular) throw Error("backup is not a regular file: " + rel);
  const At dir = path.parent();
  if (path.dir() == nullptr) make_dirs(disk_, path.rel().parent_path());  // a held one exists
  // The recorded owner (a build may have recreated the file as its own user), else the current.
  RestoredMeta meta{rec.owner, mode.value_or(bi.mode), rec.xattrs};
  if (!meta.owner && cur.exists()) meta.owner = FileOwner{cur.uid, cur.gid};
  if (same_mount(bi, disk_.info(dir, Follow::yes)) &&
      restore_by_rename(rel, sha256, backup, path, cur, meta, restored_mtime(when, rec)))
    return true;
  const At tmp = path.sibling(sibling_temp_path(path.full(), "overlay-restore").filename().string());
  // One read proves the backup and produces the restored bytes: the copy is hashed as written.
  std::string got = copy_file_hashing(disk_, backup, tmp, mode.value_or(bi.mode), Durable::yes).sha256;
  if (got != sha256) {
    disk_.remove(tmp);
    throw Error("backup " + rel + " is corrupt (sha256 " + got + ", recorded " + sha256 + ")");
  }
  try {
    give_meta(disk_, tmp, meta, path.full());
  } catch (const Error&) {
    disk_.remove(tmp);  // nothing went in: the path stays as it is, and the entry on record
    throw;
  }
  if (when != RestoredTime::now) disk_.set_mtime(tmp, restored_mtime(when, rec));
  disk_.rename(tmp, path);
  disk_.sync_dir(dir);
  return true;
}

bool BackupStore::move_dir_back(const std::string& rel, const At& dir) {
  fs::path moved = resolve(rel);
  FileInfo mi = disk_.info(moved, Follow::no);
  if (!mi.exists()) return false;
  if (mi.type != FileType::directory) throw Error("moved cache is not a directory: " + rel);
  FileInfo cur = disk_.info(dir, Follow::no);
  if (cur.exists() && cur.type != FileType::directory)
    throw Error("a non-directory now stands at " + dir.full().string());
  tidy_dir(dir.full());
  if (dir.dir() == nullptr) make_dirs(disk_, dir.rel().parent_path());  // a held one exists
  const At trash = dir.sibling(sibling_temp_path(dir.full(), "overlay-trash").filename().string());
  bool parked = cur.exists() && park(dir, false);
  if (cur.exists() && !parked) disk_.rename(dir, trash);
  try {
    disk_.rename(moved, dir);
  } catch (const DiskError& e) {
    if (e.code() != EXDEV) throw;
    copy_dir_back(moved, dir);  // the overlay is now reached through another mount
  }
  disk_.sync_dir(dir.parent());
  disk_.sync_dir(moved.parent_path());
  if (cur.exists() && !parked) litter_.push_back(trash.full().string());
  return true;
}

void BackupStore::copy_dir_back(const fs::path& moved, const At& dir) {
  fs::path tar = moved.parent_path() / (moved.filename().string() + ".xdev.tar");
  snapshot_dir_to_tar(disk_, moved, tar);
  const At fresh = dir.sibling(sibling_temp_path(dir.full(), "overlay-restore").filename().string());
  disk_.make_dir(fresh, 0700);
  extract_tar(disk_, tar, fresh, moved.filename().string(), "");
  disk_.sync_filesystem(fresh);  // every copied file durable before it is swapped in
  disk_.rename(fresh, dir);
  remove_tree(disk_, tar);
  remove_tree(disk_, moved);  // the record's next save no longer names it
}

void BackupStore::put_aside(const At& dir, const AsideDir& aside) {
  disk_.rename(dir, dir.sibling(fs::path(aside.path).filename().string()));  // a sibling: aside_path_of
  disk_.sync_dir(dir.parent());
}

bool BackupStore::take_back_aside(const AsideDir& aside, const At& dir) {
  // The copy is the cache's sibling (aside_path_of), so it is reached through the same directory.
  const At copy = dir.sibling(fs::path(aside.path).filename().string());
  const std::string dir_path = dir.full().string(), copy_path = copy.full().string();
  FileInfo cur = disk_.info(dir, Follow::no);
  FileInfo ai = disk_.info(copy, Follow::no);
  const At trash = dir.sibling(sibling_temp_path(dir.full(), "overlay-trash").filename().string());
  if (is_recorded_dir(cur, aside)) {
    // Back already. What stands at the aside name now is the rebuilt cache an interrupted
    // take-back exchanged out (or a stranger's tree): it is not ours to keep there.
    tidy_dir(dir_path);
    if (ai.exists()) {
      disk_.rename(copy, trash);
      disk_.sync_dir(dir.parent());
      litter_.push_back(trash.full().string());
    }
    return false;
  }
  if (!ai.exists()) {
    throw Error("aside copy missing: " + copy_path +
                (cur.exists() ? " (and " + dir_path + " is not the original cache: " + identity_of(cur) + ")" : ""));
  }
  if (!is_recorded_dir(ai, aside))
    throw Error("aside copy " + copy_path + " was replaced since add-native (now " + identity_of(ai) +
                "; recorded inode " + std::to_string(aside.ino) + " on device " + std::to_string(aside.dev) +
                ", owner uid " + std::to_string(aside.uid) + "): refusing to restore it");
  if (cur.exists() && cur.type != FileType::directory) throw Error("a non-directory now stands at " + dir_path);
  tidy_dir(dir_path);
  if (!cur.exists()) {
    disk_.rename(copy, dir);
  } else {
    if (disk_.exchange(copy, dir)) {
      disk_.rename(copy, trash);  // the copy's name now holds the rebuilt cache
    } else {
      disk_.rename(dir, trash);
      disk_.rename(copy, dir);
    }
    litter_.push_back(trash.full().string());
  }
  disk_.sync_dir(dir.parent());
  return true;
}

void BackupStore::restore_dir(const std::string& rel, const std::optional<std::string>& sha256, const At& dir) {
  fs::path tar = resolve(rel);
  FileInfo ti = disk_.info(tar, Follow::no);
  if (!ti.exists()) throw Error("backup missing: " + rel);
  if (ti.type != FileType::regular) throw Error("backup is not a regular file: " + rel);
  const fs::path path = dir.full();
  FileInfo cur = disk_.info(dir, Follow::no);
  if (cur.exists() && cur.type != FileType::directory) throw Error("a non-directory now stands at " + path.string());
  if (cur.exists() && !renamable(path, cur)) return restore_dir_in_place(tar, sha256, dir);
  tidy_dir(path);
  if (dir.dir() == nullptr) make_dirs(disk_, path.parent_path());  // a held one exists
  const At fresh = dir.sibling(sibling_temp_path(path, "overlay-restore").filename().string());
  disk_.make_dir(fresh, 0700);
  try {
    extract_tar(disk_, tar, fresh, path.filename().string(), sha256.value_or(""));
  } catch (...) {
    litter_.push_back(fresh.full().string());  // never swapped in; deleted with the rest
    throw;
  }
  disk_.sync_filesystem(fresh);  // every extracted file and directory durable before it is swapped in
  const At trash = dir.sibling(sibling_temp_path(path, "overlay-trash").filename().string());
  if (cur.exists()) disk_.rename(dir, trash);
  disk_.rename(fresh, dir);
  disk_.sync_dir(dir.parent());
  if (cur.exists()) litter_.push_back(trash.full().string());
}

bool BackupStore::renamable(const fs::path& dir, const FileInfo& di) {
  return why_not_renamable(disk_, dir, di).empty();
}

void BackupStore::empty_dir(const At& dir) {
  auto held = hold_dir(disk_, dir);
  for (const auto& e : disk_.list_dir(At(*held, ""))) remove_tree(disk_, At(*held, e.name));
  disk_.sync_dir(At(*held, ""));
}

void BackupStore::restore_dir_in_place(const fs::path& tar, const std::optional<std::string>& sha256, const At& dir) {
  check_tar(disk_, tar, sha256.value_or(""));  // proven before anything of the cache goes
  empty_dir(dir);
  extract_tar(disk_, tar, dir, dir.filename(), "");
  disk_.sync_filesystem(dir);
}

void BackupStore::discard_dir(const At& at) {
  const fs::path dir = at.full();
  FileInfo cur = disk_.info(at, Follow::no);
  if (cur.exists() && cur.type == FileType::directory && !renamable(dir, cur)) return empty_dir(at);
  tidy_dir(dir);
  if (!cur.exists()) return;
  if (cur.type != FileType::directory) throw Error("a non-directory now stands at " + dir.string());
  const At trash = at.sibling(sibling_temp_path(dir, "overlay-trash").filename().string());
  disk_.rename(at, trash);
  disk_.sync_dir(at.parent());
  litter_.push_back(trash.full().string());
}

void BackupStore::tidy(const At& p) { sweep_leftovers(disk_, p); }

void BackupStore::tidy_dir(const fs::path& dir) {
  for (const auto& l : leftovers_of(disk_, dir)) {
    if (is_litter_path(l.string())) {
      litter_.push_back(l.string());
    } else {
      remove_tree_durably(disk_, l);  // not a tree of ours (a file's temp name): small
    }
  }
}

bool BackupStore::park(const At& p, bool hard_link) {
  fs::path trash = overlay_ / "_trash";
  make_dirs(disk_, trash, 0700);
  if (!same_mount(disk_.info(trash, Follow::no), disk_.info(p, Follow::no))) return false;
  fs::path dest = trash / random_hex(8);
  try {
    if (hard_link)
      disk_.make_hardlink(p, dest);
    else
      disk_.rename(p, dest);
  } catch (const DiskError& e) {
    if (e.code() == EXDEV) return false;  // one filesystem reached through two mounts
    throw;
  }
  return true;
}

namespace {

// Closes every directory descriptor above stderr: those /proc/self/fd lists, or (no /proc) each
// number up to the limit, fstat'ed.
void close_inherited_dirs() {
  std::vector<int> fds;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    fds.push_back(std::atoi(it->path().filename().c_str()));
  if (fds.empty()) {
    long max = ::sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (max > 0 && max < 65536 ? static_cast<int>(max) : 65536); ++fd) fds.push_back(fd);
  }
  for (int fd : fds) {
    struct stat st {};
    if (fd > 2 && ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) ::close(fd);
  }
}

}  // namespace

void BackupStore::purge(const std::vector<std::string>& litter, Litter how) {
  fs::path trash = overlay_ / "_trash";
  std::vector<fs::path> doomed;
  for (const auto& l : litter) {
    if (!disk_.info(l, Follow::no).exists()) continue;
    if (how == Litter::deleted_later || is_within(l, overlay_)) {
      doomed.emplace_back(l);
      continue;
    }
    try {
      if (!park(At(fs::path(l)), false)) remove_tree(disk_, fs::path(l));  // another filesystem: here and now
      disk_.sync_dir(fs::path(l).parent_path());  // gone for good: a power cut cannot bring it back
    } catch (const std::exception& e) {
      // Still named by the record (status says so until it goes): left to the deleter below.
      spdlog::warn("cannot get {} out of the install now: {}", l, e.what());
      doomed.emplace_back(l);
    }
  }
  bool trash_full = false;
  try {
    trash_full = disk_.info(trash, Follow::no).type == FileType::directory && !disk_.list_dir(trash).empty();
  } catch (const DiskError& e) {
    if (e.code() != ENOENT) throw;  // an earlier run's deleter removed it meanwhile: nothing to purge there
  }
  if (trash_full) doomed.push_back(trash);
  if (doomed.empty()) return;
  auto remove_all = [&] {
    for (const auto& d : doomed) {
      remove_tree(disk_, d);
      // Durable, so a tree renamed into an install cannot reappear after a power cut.
      if (d != trash) disk_.sync_dir(d.parent_path());
    }
  };
  pid_t child = ::fork();
  if (child < 0) {  // no process to spare: delete here
    remove_all();
    return;
  }
  if (child == 0) {
    // The intermediate child exits at once so the caller is not kept waiting; the grandchild,
    // reparented and in its own session, deletes.
    if (::fork() == 0) {
      ::setsid();
      // The directory descriptors inherited from the caller go: a flock lives as long as any copy
      // of its descriptor, and every lock of ours is a directory's (the overlay lock, a hold's,
      // an operation's in-flight mark), so a deleter keeping one would keep the caller's run
      // looking alive after it ended (gc-stale would spare a killed add-native for as long as
      // the deletion takes). Files stay open: the disk trace's descriptor records this process.
      close_inherited_dirs();
      try {
        remove_all();
      } catch (...) {
        // A detached deleter has no one to tell (and logging after fork is not safe): what it
        // could not delete stays as litter, which the next revert or gc-stale of it removes.
      }
    }
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
}

}  // namespace overlay
