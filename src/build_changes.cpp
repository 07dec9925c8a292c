#include "overlay/build_changes.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/ninja_logs.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

std::string mode_octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

constexpr std::size_t kMaxNinjaLog = std::size_t{1} << 30;  // Ninja recompacts far below this

timespec to_timespec(std::int64_t ns) {
  return {static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
}

// As the build left it: only the build could have made it so. Its size and mtime, not its inode:
// an upper layer's revert (or a fold's) puts the same bytes and mtime back in a new inode.
bool as_left(const BuildChange& c, const FileInfo& now) {
  if (now.type != c.left) return false;
  FileStamp st = stamp_of(now);
  return c.left != FileType::regular || (st.size == c.stamp.size && st.mtime_ns == c.stamp.mtime_ns);
}

// As it was before the build, by its stamp, mode and owner (put back already, by an earlier revert
// that was cut short). A file's bytes are proven when it is put back: restore_file reads them.
bool as_before(const BuildChange& c, const FileInfo& now) {
  if (now.type != c.was) return false;
  if (c.was == FileType::none) return true;
  bool meta = now.mode == c.mode && now.uid == c.owner.uid && now.gid == c.owner.gid;
  if (c.was == FileType::regular) return meta && now.size == c.before.size && ns_of(now.mtime) == c.before.mtime_ns;
  return (c.was == FileType::symlink || meta) && ns_of(now.mtime) == c.before.mtime_ns;
}

FileInfo look(DiskReader& disk, const std::string& path) { return disk.info(path, Follow::no); }

// Where a change is made: by its name inside its parent, opened with no symlink followed.
struct Place {
  std::unique_ptr<DirHandle> dir;
  std::string name;
  At at() const { return At(*dir, name); }
};
Place place_of(Disk& disk, const std::string& path) {
  fs::path p(path);
  return Place{disk.open_dir(At(p.parent_path())), p.filename().string()};
}

// A directory's owner and mode, then its mtime. Returns what could not be given and is no
// build's input ("" when all was): the mtime of a directory this user does not own (a member of a
// shared install), which no build of Make's or Ninja's reads.
std::string give_dir_meta(Disk& disk, const BuildChange& c) {
  Place pl = place_of(disk, c.path);
  give_meta(disk, pl.at(), RestoredMeta{c.owner, c.mode, std::nullopt}, c.path);
  try {
    give_mtime(disk, pl.at(), to_timespec(c.before.mtime_ns));
  } catch (const DiskError& e) {
    if (e.code() != EPERM) throw;
    return "its mtime stays the build's: setting it is its owner's (uid " + std::to_string(c.owner.uid) + ")";
  }
  return "";
}

// A file put back: its bytes from the backup (proven against their digest; left where they are
// already those), then its mode, owner and mtime where they are not the ones before the build.
std::string put_back_file(Disk& disk, BackupStore& store, const BuildChange& c, const FileInfo& now) {
  Place pl = place_of(disk, c.path);
  if (now.exists() && now.type != FileType::regular) disk.remove(pl.at());  // a directory only where empty
  FileBackup rec;
  rec.backup = c.backup;
  rec.sha256 = c.sha256;
  rec.mode = c.mode;
  rec.stamp = c.before;
  rec.owner = c.owner;
  rec.xattrs = c.xattrs;
  if (store.restore_file(rec, pl.at(), RestoredTime::original)) return "restore";
  FileInfo fi = disk.info(pl.at(), Follow::no);
  if (as_before(c, fi) && (!c.xattrs || disk.xattrs(pl.at()) == *c.xattrs)) return "unchanged";
  give_meta(disk, pl.at(), RestoredMeta{c.owner, c.mode, c.xattrs}, c.path);
  give_mtime(disk, pl.at(), to_timespec(c.before.mtime_ns));
  return "restore";
}

std::string put_back_symlink(Disk& disk, const BuildChange& c, const FileInfo& now) {
  Place pl = place_of(disk, c.path);
  if (now.exists()) disk.remove(pl.at());  // a directory only where empty
  disk.make_symlink(c.target, pl.at());
  FileInfo made = disk.info(pl.at(), Follow::no);
  if (FileOwner{made.uid, made.gid} != c.owner)
    disk.set_owner(pl.at(), static_cast<uid_t>(c.owner.uid), static_cast<gid_t>(c.owner.gid));
  disk.set_mtime(pl.at(), to_timespec(c.before.mtime_ns));
  return "restore";
}

// Now as it was before the build: put back, or found so.
bool now_as_before(const ChangeRestored& r) {
  return r.problem.empty() && !r.left && (r.action == "restore" || r.action == "remove" || r.action == "unchanged");
}

// Ninja's log rewritten in its own inode (its owner and mode kept: another account's Ninja appends
// to it). Cut short by a crash, it holds fewer records: Ninja then only does more work.
void rewrite_in_place(Disk& disk, const fs::path& log, const std::string& bytes) {
  auto out = disk.create(At(log), look(disk, log.string()).mode & 07777, CreateMode::truncate);
  out->write(bytes.data(), bytes.size());
  out->sync();
  out->close();
}

// Ninja trusts its logs over the files (ninja_logs.hpp): an output put back to its bytes from
// before the build, while a log keeps a later build's record of it, is never remade though its
// input changed since — a restat rule's generated header stayed stale in every build after (seed
// 502486540 of the claims checker). Where the revert could not put a log back with the outputs
// (another build wrote it since), their records go from it as it is now, so that Ninja remakes
// them. A log this cannot read record by record, or kept apart from build.ninja (`builddir`: its
// names are then not relative to its directory), goes whole: Ninja starts over.
void forget_in_ninja_logs(Disk& disk, std::vector<ChangeRestored>& out, bool dry_run,
                          const std::vector<fs::path>& items) {
  // Names as the kernel resolves their directories (a build dir reached through a symlink names
  // its outputs both ways), each directory resolved once; one it cannot resolve stays as named.
  std::map<fs::path, fs::path> real_dirs;
  Spelling real = [&](const fs::path& p) {
    auto [it, fresh] = real_dirs.try_emplace(p.parent_path(), p.parent_path());
    if (fresh)
      best_effort("a directory named as it was, not as the kernel resolves it", [&] {
        if (look(disk, it->first.string()).type != FileType::none) it->second = disk.real_path(it->first);
      });
    return it->second / p.filename();
  };
  std::set<fs::path> back;
  std::vector<fs::path> logs;
  for (const auto& r : out) {
    fs::path p = fs::path(r.path).lexically_normal();
    if (is_ninja_log(p)) {
      if (!now_as_before(r) && look(disk, r.path).type == FileType::regular) logs.push_back(p);
    } else if (now_as_before(r)) {
      back.insert(real(p));
    }
  }
  for (const auto& p : items) back.insert(real(p.lexically_normal()));
  if (back.empty()) return;
  for (const auto& log : logs) try {
      std::optional<NinjaLogEdit> edit;
      if (look(disk, (log.parent_path() / "build.ninja").string()).type == FileType::regular)
        edit = without_records(log, read_small_file(disk, log, kMaxNinjaLog), back, real);
      if (edit && edit->dropped == 0) continue;
      if (!dry_run && edit) rewrite_in_place(disk, log, edit->bytes);
      if (!dry_run && !edit) disk.remove(At(log));
      out.push_back({log.string(), edit ? "forget" : "discard", "", false, ""});
    } catch (const std::exception& e) {
      out.push_back({log.string(), "", std::string("may still vouch for outputs put back: ") + e.what(), false, ""});
    }
}

}  // namespace

std::vector<BuildChange> build_changes_of(Disk& disk, const std::vector<TracedChange>& changes, const fs::path& backups,
                                          const std::string& backups_rel) {
  std::vector<BuildChange> out;
  for (const auto& t : changes) {
    if (t.tracked) continue;
    FileInfo now = look(disk, t.path);
    if (t.before.type == FileType::none && !now.exists()) continue;  // a temporary: made and removed
    BuildChange c;
    c.path = t.path;
    c.was = t.before.type;
    c.left = now.type;
    if (c.was == FileType::other) continue;  // a fifo or socket the build replaced: nothing to keep
    if (c.was == FileType::regular) {
      if (t.backup.empty()) continue;  // not kept (the trace says why, and revert then dates now)
      c.backup = backups_rel + "/" + t.backup;
      c.sha256 = t.sha256.empty() ? hash_file(disk, backups / t.backup) : t.sha256;  // a linked one: hashed now
    }
    c.target = t.target;
    c.xattrs = t.xattrs;
    c.mode = t.before.mode;
    c.owner = FileOwner{t.before.uid, t.before.gid};
    c.before = FileStamp{t.before.size, t.before.ino, t.before.mtime_ns};
    if (now.type == FileType::regular) c.stamp = stamp_of(now);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<std::string> changes_not_as_before(DiskReader& disk, const std::vector<BuildChange>& changes) {
  std::vector<std::string> out;
  for (const auto& c : changes) {
    FileInfo now;
    try {
      now = look(disk, c.path);
    } catch (const Error& e) {
      out.push_back(c.path + ": cannot be looked at (" + e.what() + ")");
      continue;
    }
    std::string how;
    if (now.type != c.was)
      how = std::string("was ") + file_type_name(c.was) + ", now " + file_type_name(now.type);
    else if (c.was == FileType::none)
      continue;
    else if (FileOwner{now.uid, now.gid} != c.owner)
      how = "its owner is " + std::to_string(now.uid) + ":" + std::to_string(now.gid) + ", was " +
            std::to_string(c.owner.uid) + ":" + std::to_string(c.owner.gid);
    else if (c.was != FileType::symlink && (now.mode & 07777) != (c.mode & 07777))
      how = "its mode is " + mode_octal(now.mode & 07777) + ", was " + mode_octal(c.mode & 07777);
    else if (c.was == FileType::regular && now.size != c.before.size)
      how = "its size is " + std::to_string(now.size) + ", was " + std::to_string(c.before.size);
    else if (ns_of(now.mtime) != c.before.mtime_ns)
      how = "its mtime differs from the one before the build";
    else if (c.was == FileType::regular && c.xattrs && disk.xattrs(At(fs::path(c.path))) != *c.xattrs)
      how = "its extended attributes (ACL, labels) differ";
    else
      continue;
    out.push_back(c.path + ": " + how);
  }
  return out;
}

std::string why_not_restorable(DiskReader& disk, const BackupPaths& store, const std::vector<BuildChange>& changes) {
  for (const auto& c : changes) {
    FileInfo now;
    try {
      now = look(disk, c.path);
    } catch (const Error& e) {
      return c.path + " cannot be looked at (" + e.what() + ")";
    }
    if (as_before(c, now)) continue;
    if (!as_left(c, now)) return c.path + " changed since the build, by another build or by hand";
    if (c.was == FileType::regular) {
      try {
        if (disk.info(store.resolve(c.backup), Follow::no).type != FileType::regular)
          return "the bytes " + c.path + " had before the build are missing from the overlay";
      } catch (const Error& e) {
        return "the bytes " + c.path + " had before the build cannot be used (" + e.what() + ")";
      }
    }
  }
  return "";
}

std::vector<ChangeRestored> restore_build_changes(Disk& disk, BackupStore& store,
                                                  const std::vector<BuildChange>& changes, bool dry_run,
                                                  const std::vector<fs::path>& items) {
  std::vector<ChangeRestored> out;
  std::vector<const BuildChange*> todo;
  for (const auto& c : changes) {
    FileInfo now;
    try {
      now = look(disk, c.path);
    } catch (const Error& e) {
      out.push_back({c.path, "", std::string("cannot be looked at: ") + e.what(), false, ""});
      continue;
    }
    if (as_before(c, now) && c.was != FileType::directory && c.was != FileType::regular) {
      out.push_back({c.path, "unchanged", "", false, ""});
    } else if (!as_left(c, now) && !as_before(c, now)) {
      out.push_back({c.path, "", "changed since the build, by another build or by hand: left as it is", true, ""});
    } else {
      todo.push_back(&c);
    }
  }
  auto attempt = [&](const BuildChange& c, const auto& step) {
    if (dry_run) {
      out.push_back({c.path, c.was == FileType::none ? "remove" : "restore", "", false, ""});
      return;
    }
    try {
      out.push_back({c.path, step(), "", false, ""});
    } catch (const std::exception& e) {
      out.push_back({c.path, "", e.what(), false, ""});
    }
  };
  // What was a file, symlink or nothing before: put back (a file by its proven bytes, a symlink by
  // its target) or removed.
  auto put_back = [&](const BuildChange& c) {
    FileInfo now = look(disk, c.path);
    if (c.was == FileType::regular) return put_back_file(disk, store, c, now);
    if (c.was == FileType::symlink) return put_back_symlink(disk, c, now);
    if (now.exists()) disk.remove(place_of(disk, c.path).at());  // a directory only where empty
    return std::string(now.exists() ? "remove" : "unchanged");
  };
  std::sort(todo.begin(), todo.end(), [](const BuildChange* a, const BuildChange* b) { return a->path < b->path; });
  // 1. Directories the build removed, parents first, so what was inside them can go back.
  for (const BuildChange* c : todo)
    if (c->was == FileType::directory && c->left != FileType::directory)
      attempt(*c, [&] {
        FileInfo now = look(disk, c->path);
        if (now.type == FileType::directory) return std::string("unchanged");  // made again already
        Place pl = place_of(disk, c->path);
        if (now.exists()) disk.remove(pl.at());
        disk.make_dir(pl.at(), c->mode);
        return std::string("restore");
      });
  // 2. Files and symlinks (and what the build made of them), children before their parents.
  for (auto it = todo.rbegin(); it != todo.rend(); ++it)
    if ((*it)->was != FileType::directory && (*it)->left != FileType::directory)
      attempt(**it, [&] { return put_back(**it); });
  // 3. Directories the build made, deepest first — where it made one in place of a file or a
  // symlink, that goes back once the directory is gone; one made where nothing was and holding what
  // the build did not make (a run's `out/bench.json`) stays with it: every original is back.
  for (auto it = todo.rbegin(); it != todo.rend(); ++it)
    if ((*it)->was != FileType::directory && (*it)->left == FileType::directory)
      attempt(**it, [&] {
        FileInfo now = look(disk, (*it)->path);
        if (now.type == FileType::directory && (*it)->was == FileType::none && !disk.list_dir((*it)->path).empty())
          return std::string("keep");
        if (now.type == FileType::directory) disk.remove(place_of(disk, (*it)->path).at());
        return (*it)->was == FileType::none ? std::string("remove") : put_back(**it);
      });
  // 4. The mode, owner and mtime of directories that were there, once nothing below them changes.
  if (!dry_run)
    for (auto it = todo.rbegin(); it != todo.rend(); ++it)
      if ((*it)->was == FileType::directory) try {
          if (std::string kept = give_dir_meta(disk, **it); !kept.empty())
            out.push_back({(*it)->path, "restore", "", false, kept});
        } catch (const std::exception& e) {
          out.push_back(
              {(*it)->path, "", std::string("its mode and mtime could not be put back: ") + e.what(), false, ""});
        }
  // 5. Ninja's log, where it could not go back with the outputs.
  forget_in_ninja_logs(disk, out, dry_run, items);
  return out;
}

std::string input_changed_since(Disk& disk, const fs::path& build_dir) {
  if (disk.info(build_dir, Follow::no).type != FileType::directory) return "";
  std::vector<BuildTrace> traces;
  for (const auto& f : disk.list_dir(build_dir)) {
    const std::string suffix = "trace.json";
    if (f.name.size() < suffix.size() || f.name.compare(f.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    try {
      traces.push_back(read_trace(disk, build_dir / f.name));
    } catch (const Error& e) {
      (void)e;  // a trace never written whole: the build's inputs are not known, nothing is claimed of them
      return "";
    }
  }
  for (const auto& t : traces)
    for (const auto& i : t.inputs) {
      // The entry's own items (its swapped sources, its artifacts) are what the revert put back.
      if (i.tracked || i.before.type == FileType::directory ||
          (i.looked & (kLookedMeta | kLookedContent | kLookedExec)) == 0)
        continue;
      FileInfo now = disk.info(i.path, i.follow);
      bool same = now.type == i.before.type && (now.type != FileType::regular ||
                                                (now.size == i.before.size && ns_of(now.mtime) == i.before.mtime_ns));
      if (!same) return i.path;
    }
  return "";
}

std::vector<std::string> backups_of(const std::vector<BuildChange>& changes) {
  std::vector<std::string> out;
  for (const auto& c : changes)
    if (!c.backup.empty()) out.push_back(c.backup);
  return out;
}

}  // namespace overlay
