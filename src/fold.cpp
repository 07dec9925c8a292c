#include "overlay/fold.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include <spdlog/spdlog.h>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/lock.hpp"
#include "overlay/native_verify.hpp"
#include "overlay/snapshot.hpp"
#include "overlay/stack.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

fs::path state_of(const fs::path& s) { return s.empty() ? HoldRegistry::default_state_dir() : s; }

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The item of ACCEPTED's that is on top of `path` (the newest entry's): the change a fold's item
// on that file must have found there.
struct Top {
  std::size_t entry = 0;
  SourceItem* source = nullptr;
  CreatedItem* created = nullptr;
  bool found() const { return source != nullptr || created != nullptr; }
  // What that change left at the file ("" where it deleted it).
  std::string after() const {
    if (source != nullptr) return source->deleted ? std::string() : source->patched_sha256.value_or("");
    return created->sha256;
  }
};

Top top_of(std::vector<NativeEntry>& natives, const std::string& path) {
  Top t;
  for (std::size_t i = 0; i < natives.size(); ++i) {
    for (auto& s : natives[i].sources)
      if (s.install_path == path) t = {i, &s, nullptr};
    for (auto& c : natives[i].created)
      if (c.path == path) t = {i, nullptr, &c};
  }
  return t;
}

template <typename Item, typename Key>
bool tracks(const std::vector<NativeEntry>& natives, std::vector<Item> NativeEntry::*list, Key Item::*key,
            const Key& value) {
  return std::any_of(natives.begin(), natives.end(), [&](const NativeEntry& e) {
    return std::any_of((e.*list).begin(), (e.*list).end(), [&](const Item& i) { return i.*key == value; });
  });
}

// The fold worked out in memory: ACCEPTED's record as the commit writes it (less its mark).
struct FoldPlan {
  Manifest into;
  std::vector<std::string> ids;      // CAND's entries, all folded
  std::vector<std::size_t> moved;    // indices into into.natives of the entries moved whole
  std::vector<fs::path> paths;       // every file CAND held
  std::vector<std::string> carried;  // backups of CAND's build changes an entry of ACCEPTED's took
  FoldReport report;
};

// A build change of CAND's: where ACCEPTED's build changed the same path, that change keeps what
// was there before both builds and ends where CAND's build left it; where an item of ACCEPTED's
// tracks the path, that item puts it back; otherwise it is kept (returned true) for the entry
// that takes CAND's changes.
bool fold_build_change(FoldPlan& p, const BuildChange& c) {
  for (auto& e : p.into.natives)
    for (auto& mine : e.build_changes)
      if (mine.path == c.path) {
        mine.left = c.left;
        mine.stamp = c.stamp;
        p.report.outputs_merged.push_back(c.path);
        p.report.backups_dropped += c.backup.empty() ? 0 : 1;
        return false;
      }
  std::vector<std::string> tracked;
  for (const auto& e : p.into.natives) {
    auto paths = tracked_paths(e);
    tracked.insert(tracked.end(), paths.begin(), paths.end());
  }
  if (contains(tracked, c.path)) {
    p.report.backups_dropped += c.backup.empty() ? 0 : 1;
    return false;
  }
  p.report.outputs_moved.push_back(c.path);
  return true;
}

[[noreturn]] void unmet(const std::string& path, const NativeEntry& e, const std::string& found, const NativeEntry& a,
                        const std::string& left) {
  auto sha = [](const std::string& s) { return s.empty() ? std::string("none: absent") : s.substr(0, 16); };
  throw Error(path + ": entry " + e.id + " found bytes (sha256 " + sha(found) + ") that entry " + a.id +
              " of the overlay folded into did not leave there (sha256 " + sha(left) + "): not stacked on its change");
}

// One CAND source item: merged into ACCEPTED's change to the same file, or kept for the entry
// that moves whole.
void fold_source(FoldPlan& p, const NativeEntry& e, const SourceItem& s, NativeEntry& whole) {
  Top t = top_of(p.into.natives, s.install_path);
  if (!t.found()) {
    if (s.layer) throw Error(s.install_path + ": stacked on a change the overlay folded into no longer records");
    whole.sources.push_back(s);
    p.report.moved.push_back(s.install_path);
    return;
  }
  if (t.after() != s.sha256) unmet(s.install_path, e, s.sha256, p.into.natives[t.entry], t.after());
  if (t.source != nullptr) {
    t.source->deleted = s.deleted;
    t.source->patched_sha256 = s.deleted ? std::nullopt : s.patched_sha256;
  } else if (s.deleted) {  // created below, deleted here: absent before and after
    auto& c = p.into.natives[t.entry].created;
    std::erase_if(c, [&](const CreatedItem& x) { return x.path == s.install_path; });
  } else {
    t.created->sha256 = *s.patched_sha256;
  }
  p.report.merged.push_back(s.install_path);
  ++p.report.backups_dropped;
}

void fold_created(FoldPlan& p, const NativeEntry& e, const CreatedItem& c, NativeEntry& whole) {
  Top t = top_of(p.into.natives, c.path);
  if (!t.found()) {
    whole.created.push_back(c);
    p.report.moved.push_back(c.path);
    return;
  }
  if (t.source == nullptr || !t.after().empty()) unmet(c.path, e, "", p.into.natives[t.entry], t.after());
  t.source->deleted = false;  // deleted below, created again here
  t.source->patched_sha256 = c.sha256;
  p.report.merged.push_back(c.path);
}

FoldPlan plan_fold(const fs::path& into, const Manifest& cm, const Manifest& am) {
  FoldPlan p;
  p.into = am;
  for (const auto& e : cm.natives) {
    p.ids.push_back(e.id);
    for (const auto& path : tracked_paths(e))
      if (const LayerRef* l = layer_of(e, path); l && l->overlay != into.string())
        throw Error(path + ": stacked on overlay " + l->overlay + ", not on " + into.string() +
                    ": fold it into that one");
    NativeEntry whole = e;
    whole.sources.clear(), whole.created.clear(), whole.artifacts.clear(), whole.caches.clear();
    whole.python_guard.reset();
    std::optional<std::size_t> receiver;  // the entry of ACCEPTED's that took the first merged file
    auto merged_into = [&](const std::string& path) {
      if (!receiver) receiver = top_of(p.into.natives, path).entry;
    };
    for (const auto& s : e.sources) {
      if (top_of(p.into.natives, s.install_path).found()) merged_into(s.install_path);
      fold_source(p, e, s, whole);
      p.paths.emplace_back(s.install_path);
    }
    for (const auto& c : e.created) {
      if (top_of(p.into.natives, c.path).found()) merged_into(c.path);
      fold_created(p, e, c, whole);
      p.paths.emplace_back(c.path);
    }
    for (const auto& a : e.artifacts) {
      p.paths.emplace_back(a.path);
      // ACCEPTED's own item keeps the artifact's original; CAND's backup is ACCEPTED's build.
      if (tracks(p.into.natives, &NativeEntry::artifacts, &ArtifactItem::path, a.path)) {
        p.report.backups_dropped += a.existed ? 1 : 0;
        p.report.merged.push_back(a.path);  // a shared library both builds rebuilt: still tracked, by ACCEPTED
        continue;
      }
      if (a.layer) throw Error(a.path + ": stacked on an artifact the overlay folded into no longer tracks");
      whole.artifacts.push_back(a);
    }
    for (const auto& c : e.caches) {
      if (tracks(p.into.natives, &NativeEntry::caches, &CacheItem::dir, c.dir)) {
        ++p.report.backups_dropped;  // ACCEPTED keeps the cache as it was before its own change
        continue;
      }
      if (c.layer) throw Error(c.dir + ": stacked on a cache the overlay folded into no longer tracks");
      whole.caches.push_back(c);
    }
    whole.build_changes.clear();
    for (const auto& c : e.build_changes)
      if (fold_build_change(p, c)) whole.build_changes.push_back(c);
    if (!whole.sources.empty() || !whole.created.empty() || !whole.artifacts.empty() || !whole.caches.empty()) {
      p.moved.push_back(p.into.natives.size());
      p.report.moved_entries.push_back(e.id);
      p.into.natives.push_back(std::move(whole));
    } else if (receiver) {
      // Nothing moves whole: the build that made what is installed now is named where the files
      // went, and what only it changed is that entry's to put back.
      NativeEntry& r = p.into.natives[*receiver];
      for (const auto& cmd : e.build_cmds)
        if (std::find(r.build_cmds.begin(), r.build_cmds.end(), cmd) == r.build_cmds.end()) r.build_cmds.push_back(cmd);
      r.untracked.insert(r.untracked.end(), e.untracked.begin(), e.untracked.end());
      for (const auto& c : whole.build_changes) {
        r.build_changes.push_back(c);
        if (!c.backup.empty()) p.carried.push_back(c.backup);
      }
      r.build_unobserved.insert(r.build_unobserved.end(), e.build_unobserved.begin(), e.build_unobserved.end());
      if (!e.build_traced) r.build_traced = false;  // what its build changed is not all on record
    }
  }
  // CAND is no longer a layer on ACCEPTED: its changes are ACCEPTED's own.
  std::erase_if(p.into.layers_above, [&](const UpperRef& u) { return contains(p.ids, u.entry); });
  p.report.entries = p.ids;
  return p;
}

// What must hold before a fold: something to fold, nothing in flight on either side, nothing
// stacked on CAND, no patch whose Python half would stay behind.
void check_foldable(Disk& disk, const fs::path& from, const fs::path& into, const Manifest& cm) {
  if (cm.natives.empty()) throw Error("nothing to fold: " + from.string() + " has no native entry");
  for (const auto& ov : {from, into})
    if (disk.info(ov, Follow::no).type == FileType::directory)
      if (std::string busy = describe_live(live_operations(disk, ov)); !busy.empty())
        throw Error("an operation is in flight on " + ov.string() + " (" + busy + "): fold once it has ended");
  ManifestCache cache(disk);
  for (const auto& u : uppers_of(cache, cm))
    if (u.blocks())
      throw Error("layer " + u.ref.overlay + " [" + u.ref.entry + "] is stacked on " + from.string() +
                  ": revert it, or fold it into " + from.string() + ", first");
  // A candidate whose build did not rebuild what it tracks is not the change it claims to be: once
  // folded, the accepted overlay's verify (which compares with the pristine artifacts) would call
  // it fresh (found by a probe: FRESH_BUILD_OK over the old accepted build).
  for (const auto& e : cm.natives)
    if (e.build_failed)
      throw Error("the candidate's build failed (entry " + e.id + ": " + *e.build_failed +
                  "); fold accepts a built candidate only: rebuild it, or revert it");
  VerifyReport v = verify_native(disk, from);
  for (const auto& i : v.items)
    if (i.state != ArtifactState::rebuilt && i.state != ArtifactState::created)
      throw Error(std::string("the candidate was not built: FRESH_BUILD_FAIL ") + to_string(i.state) + " " + i.path +
                  " (verify-native --overlay " + from.string() +
                  "); fold accepts a verified candidate only: rebuild it, or revert it");
  Manifest python_part = cm;
  python_part.natives.clear();
  for (const auto& e : cm.natives)
    if (e.patch_id && has_patch(python_part, *e.patch_id))
      throw Error("patch " + *e.patch_id + " of " + from.string() +
                  " has Python entries too: fold moves native entries only (revert the patch, or keep it there)");
}

// The backups of an entry that moves whole, as CAND's record names them.
std::vector<std::string> backup_files(const NativeEntry& e) {
  std::vector<std::string> out;
  auto add = [&](const std::optional<std::string>& rel) {
    if (rel && !rel->empty()) out.push_back(*rel);
  };
  for (const auto& s : e.sources) add(s.backup), add(s.same_inode);
  for (const auto& a : e.artifacts)
    if (a.existed) add(a.backup), add(a.same_inode);
  for (const auto& c : e.caches) add(c.backup_tar);
  for (const auto& c : e.build_changes) add(c.backup);
  add(e.build_log);
  return out;
}

// The directories of `rel` below `base`, made where missing; never `base` itself. ACCEPTED moved
// away mid-fold (a harness's mv), `mkdir -p` made a new one at its path that the commit then wrote
// a record into, naming backups the new one lacks: this fails instead (ENOENT), before the commit.
void make_dirs_below(Disk& disk, const fs::path& base, const fs::path& rel, mode_t mode) {
  fs::path p = base;
  for (const auto& part : rel) {
    p /= part;
    if (disk.info(p, Follow::no).type != FileType::directory) disk.make_dir(p, mode);
  }
}

// ACCEPTED's directory, as the fold found it under its lock, and held open. Every write of the fold
// into it is made only while that very directory (device and inode) still stands at its path; its
// record is written through the held directory, so a move between that check and the write (or
// the write's directory sync) cannot split the fold: the record lands, whole and durable, in the
// overlay that was checked, wherever it went.
class PinnedOverlay {
 public:
  const fs::path path;

  PinnedOverlay(Disk& disk, const fs::path& into)
      : path(into), at_lock_(disk.info(into, Follow::yes)), dir_(disk.open_dir(disk.real_path(into))) {
    if (dir_->dev() != at_lock_.dev || dir_->ino() != at_lock_.ino) moved(disk, "its mark");
  }

  std::pair<std::uint64_t, std::uint64_t> id() const { return {at_lock_.dev, at_lock_.ino}; }
  // By the directory it names (an ACCEPTED given as a symlink to its directory is that directory).
  bool stands(Disk& disk) const {
    FileInfo now = disk.info(path, Follow::yes);
    return now.type == FileType::directory && now.dev == at_lock_.dev && now.ino == at_lock_.ino;
  }
  void still_there(Disk& disk, const char* before) const {
    if (!stands(disk)) moved(disk, before);
  }
  // The fold's mark, then its commit, into ACCEPTED's record. The commit returns false where
  // ACCEPTED left its path after the check: the fold then stands in the moved overlay.
  void save_mark(Disk& disk, const Manifest& m) const {
    still_there(disk, "its mark");
    save_manifest(disk, *dir_, m);
  }
  bool save_commit(Disk& disk, const Manifest& m) const {
    still_there(disk, "its commit");
    save_manifest(disk, *dir_, m);
    return stands(disk);
  }

 private:
  [[noreturn]] void moved(Disk& disk, const char* before) const {
    throw Error(path.string() + " was moved or replaced while the fold ran (" +
                (disk.info(path, Follow::no).exists() ? "another directory stands there" : "nothing stands there") +
                "), before " + before +
                ": nothing is folded; the candidate's next verb and the moved overlay's settle it");
  }

  FileInfo at_lock_;
  std::unique_ptr<DirHandle> dir_;
};

// A backup of CAND's given the same name in ACCEPTED: a second name for the same inode where
// both share a filesystem, else a durable copy.
void link_or_copy(Disk& disk, const fs::path& src, const fs::path& into, const std::string& rel) {
  const fs::path dest = into / rel;
  FileInfo si = disk.info(src, Follow::no);
  if (si.type != FileType::regular) return;  // a build log never written, say: nothing to carry
  make_dirs_below(disk, into, fs::path(rel).parent_path(), 0700);
  if (disk.info(dest, Follow::no).exists()) disk.remove(dest);  // an interrupted stage's
  try {
    disk.make_hardlink(src, dest);
    return;
  } catch (const DiskError& e) {
    if (e.code() != EXDEV) throw;
  }
  copy_file_hashing(disk, src, dest, si.mode, Durable::yes);
}

// Stages the entries that move whole in ACCEPTED (CAND keeps every backup until the commit):
// files linked, moved cache dirs renamed (across filesystems: kept as a tar instead), the guard
// against overlay_setup.py made again; then every name made durable.
void stage(Disk& disk, const fs::path& from, const PinnedOverlay& pinned, FoldPlan& p) {
  const fs::path& into = pinned.path;
  pinned.still_there(disk, "staging");
  BackupStore src(disk, from), dst(disk, into);
  make_dirs_below(disk, into, kBackupDirName, 0755);
  for (const auto& rel : p.carried) link_or_copy(disk, src.resolve(rel), into, rel);
  for (std::size_t i : p.moved) {
    NativeEntry& e = p.into.natives[i];
    make_dirs_below(disk, into, fs::path(kBackupDirName) / e.id, 0700);
    for (const auto& rel : backup_files(e)) link_or_copy(disk, src.resolve(rel), into, rel);
    for (std::size_t k = 0; k < e.caches.size(); ++k) {
      CacheItem& c = e.caches[k];
      if (!c.backup_dir) continue;
      fs::path moved = src.resolve(*c.backup_dir), dest = into / *c.backup_dir;
      if (disk.info(moved, Follow::no).type != FileType::directory) continue;  // never moved (a crash before)
      try {
        disk.rename(moved, dest);
        disk.sync_dir(moved.parent_path());
      } catch (const DiskError& err) {
        if (err.code() != EXDEV) throw;
        SavedFile t = dst.save_dir_tar(e.id, "cache_" + std::to_string(k), At(moved));
        c.backup_dir.reset();
        c.backup_tar = t.backup;
        c.sha256 = t.sha256;
      }
    }
    bool guard = !e.created.empty() || std::any_of(e.caches.begin(), e.caches.end(),
                                                   [](const CacheItem& c) { return c.backup_dir || c.aside; });
    if (guard) e.python_guard = dst.make_python_guard(e.id);
    dst.sync_entry(e.id);
  }
}

// CAND lets go of the entries the fold committed into ACCEPTED (`into_record`): they leave its
// record, then their backups go. A merged cache kept aside beside the install's cache dir holds
// ACCEPTED's build of it: renamed to a trash sibling first (named by the record that drops the
// entry, deleted after it); one ACCEPTED now holds (moved whole) stays where it is.
void let_go(Disk& disk, const fs::path& from, Manifest& cm, const FoldMark& mark, const Manifest& into_record) {
  BackupStore store(disk, from);
  std::vector<NativeEntry> gone;
  for (const auto& e : cm.natives)
    if (contains(mark.entries, e.id)) gone.push_back(e);
  // Kept only where ACCEPTED's record names that very aside copy (the entry moved whole): a cache
  // ACCEPTED tracks itself was merged, and CAND's copy of it is ACCEPTED's build (found by a
  // probe: it stayed in the install after the final revert, and check-clean said clean).
  auto kept_by_into = [&](const AsideDir& a) {
    return std::any_of(into_record.natives.begin(), into_record.natives.end(), [&](const NativeEntry& x) {
      return std::any_of(x.caches.begin(), x.caches.end(),
                         [&](const CacheItem& i) { return i.aside && i.aside->path == a.path; });
    });
  };
  // discard_dir also takes, as litter, the trash sibling a kill left before its record named it
  // (the copy then gone from its aside name): found by name, never left in the install.
  for (const auto& e : gone)
    for (const auto& c : e.caches)
      if (c.aside && !kept_by_into(*c.aside)) {
        FileType t = disk.info(c.aside->path, Follow::no).type;
        if (t == FileType::directory || t == FileType::none) store.discard_dir(At(c.aside->path));
      }
  std::erase_if(cm.natives, [&](const NativeEntry& e) { return contains(mark.entries, e.id); });
  cm.fold_out.reset();
  for (auto& l : store.take_litter()) cm.litter.push_back(std::move(l));
  save_manifest(disk, from, cm);
  for (const auto& e : gone) {
    fs::path dir = from / kBackupDirName / e.id;
    if (disk.info(dir, Follow::no).type == FileType::directory) remove_tree(disk, dir);
  }
  store.purge(cm.litter, Litter::out_of_install);
}

// ACCEPTED forgets the fold's mark (its record already holds what the fold moved).
void clear_mark(Disk& disk, const fs::path& into, const std::string& fold) {
  auto am = load_manifest(disk, into);
  if (!am || std::erase_if(am->folds_in, [&](const FoldMark& f) { return f.fold == fold; }) == 0) return;
  save_manifest(disk, into, *am);
}

// The moved cache dirs an uncommitted fold staged in ACCEPTED go back to CAND, whose record still
// names them (the original of each cache: never removed with the staged entry dirs).
void give_back_caches(Disk& disk, const fs::path& from, const fs::path& into, const Manifest& cm,
                      const FoldMark& mark) {
  for (const auto& e : cm.natives) {
    if (!contains(mark.entries, e.id)) continue;
    for (const auto& c : e.caches) {
      if (!c.backup_dir) continue;
      fs::path staged = into / *c.backup_dir, home = from / *c.backup_dir;
      if (disk.info(staged, Follow::no).type == FileType::directory && !disk.info(home, Follow::no).exists()) {
        disk.rename(staged, home);
        disk.sync_dir(home.parent_path());
      }
    }
  }
}

// An uncommitted fold undone on ACCEPTED's side: the moved cache dirs staged there go back to
// CAND, then the staged entry dirs go, then the mark.
void unstage(Disk& disk, const fs::path& from, const fs::path& into, const Manifest& cm, Manifest& am,
             const FoldMark& mark) {
  give_back_caches(disk, from, into, cm, mark);
  std::erase_if(am.folds_in, [&](const FoldMark& f) { return f.fold == mark.fold; });
  for (const auto& id : mark.entries)
    if (std::none_of(am.natives.begin(), am.natives.end(), [&](const NativeEntry& e) { return e.id == id; }))
      if (disk.info(into / kBackupDirName / id, Follow::no).type == FileType::directory)
        remove_tree(disk, into / kBackupDirName / id);
  save_manifest(disk, into, am);
}

// The holds of `paths` follow the fold, each naming the newest entry of ACCEPTED's committed record
// that tracks its path (a merged item is ACCEPTED's own entry's: a copy is told by it).
void move_holds(Disk& disk, const fs::path& state_dir, const std::vector<fs::path>& paths, const fs::path& from,
                const fs::path& into, const Manifest& into_record, const std::vector<std::string>& folded,
                double lock_timeout, std::optional<std::pair<std::uint64_t, std::uint64_t>> into_id = std::nullopt) {
  std::map<std::string, std::string> entry_of;
  for (const auto& e : into_record.natives)
    for (const auto& p : tracked_paths(e)) entry_of[p] = e.id;
  std::vector<std::pair<fs::path, std::string>> moved;
  for (const auto& p : paths) moved.emplace_back(p, entry_of[p.string()]);
  try {
    HoldRegistry reg(disk, state_of(state_dir));
    reg.transfer(moved, from, into, into_id, lock_timeout);
    // An entry merged into ACCEPTED's is no more: its note of the caches it invalidated goes (one
    // moved whole keeps its id and its note, which ACCEPTED's revert of it drops).
    for (const auto& id : folded)
      if (std::none_of(into_record.natives.begin(), into_record.natives.end(),
                       [&](const NativeEntry& e) { return e.id == id; }))
        reg.forget_caches(id);
  } catch (const Error& e) {
    spdlog::warn("holds of the fold not moved: {}", e.what());
  }
}

std::string new_fold_id() {
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return "f" + std::to_string(secs) + "-" + random_hex(4);
}

}  // namespace

bool settle_folds_in(Disk& disk, const fs::path& into, Manifest& m) {
  bool changed = false;
  for (std::size_t i = m.folds_in.size(); i-- > 0;) {
    const FoldMark mark = m.folds_in[i];
    std::optional<Manifest> cm;
    try {
      cm = load_manifest(disk, mark.overlay);
    } catch (const Error&) {
      continue;  // cannot tell what the other side holds: the mark stays
    }
    if (cm && cm->fold_out && cm->fold_out->fold == mark.fold) continue;  // the other side settles it
    // The other side let go (or vanished): a committed mark has done its work; a pending one's
    // staged entry dirs are nobody's (the other side undid the fold, or is gone with its record),
    // but for the cache dirs staging moved out of CAND, which its record still names: ACCEPTED
    // moved mid-fold, CAND undid its side without finding them here.
    if (!mark.committed && cm) give_back_caches(disk, mark.overlay, into, *cm, mark);
    if (!mark.committed)
      for (const auto& id : mark.entries)
        if (std::none_of(m.natives.begin(), m.natives.end(), [&](const NativeEntry& e) { return e.id == id; }) &&
            disk.info(into / kBackupDirName / id, Follow::no).type == FileType::directory)
          remove_tree(disk, into / kBackupDirName / id);
    m.folds_in.erase(m.folds_in.begin() + static_cast<std::ptrdiff_t>(i));
    changed = true;
  }
  return changed;
}

bool settle_fold_out(Disk& disk, const fs::path& from, Manifest& m, double lock_timeout, const fs::path& state_dir) {
  FoldMark out = *m.fold_out;
  fs::path into = out.overlay;
  std::optional<OverlayLock> lock;
  if (disk.info(into, Follow::no).type == FileType::directory) lock.emplace(into, lock_timeout);
  std::optional<Manifest> am;
  try {
    am = load_manifest(disk, into);
  } catch (const Error& e) {
    throw Error("a fold of " + from.string() + " into " + into.string() +
                " was interrupted, and that overlay's record cannot be read (" + e.what() +
                "): repair it, then run this again");
  }
  auto mark =
      am ? std::find_if(am->folds_in.begin(), am->folds_in.end(), [&](const FoldMark& f) { return f.fold == out.fold; })
         : std::vector<FoldMark>::iterator();
  if (am && mark != am->folds_in.end() && mark->committed) {
    spdlog::warn("finishing fold {} of {} into {} (interrupted after it committed)", out.fold, from.string(),
                 into.string());
    std::vector<fs::path> paths;
    for (const auto& e : m.natives)
      if (contains(out.entries, e.id))
        for (const auto& p : tracked_paths(e)) paths.emplace_back(p);
    move_holds(disk, state_dir, paths, from, into, *am, out.entries, lock_timeout);
    let_go(disk, from, m, out, *am);
    clear_mark(disk, into, out.fold);
    return true;
  }
  spdlog::warn("undoing fold {} of {} into {} (interrupted before it committed)", out.fold, from.string(),
               into.string());
  if (am && mark != am->folds_in.end()) {
    const FoldMark pending = *mark;  // unstage() erases it from the record
    unstage(disk, from, into, m, *am, pending);
  }
  m.fold_out.reset();
  save_manifest(disk, from, m);
  return false;
}

namespace {

// The fold asked for again to settle one a kill interrupted (as docs/cli.md says to): CAND has no
// entry left, and this run finished the fold or ACCEPTED still holds its committed mark. Done, not
// a failure: a harness must not record the accepted candidate as failed.
std::optional<FoldReport> fold_done(const fs::path& from, const Manifest& cm, const Manifest& am,
                                    const std::optional<FoldMark>& finished_now) {
  if (!cm.natives.empty()) return std::nullopt;
  FoldReport r;
  r.finished_interrupted = true;
  if (finished_now) {
    r.fold_id = finished_now->fold;
    r.entries = finished_now->entries;
    return r;
  }
  for (const auto& mark : am.folds_in)
    if (mark.committed && absolute_normal(mark.overlay) == from) {
      r.fold_id = mark.fold;
      r.entries = mark.entries;
      return r;
    }
  return std::nullopt;  // a fold that ended long ago leaves no mark: nothing to fold, as before
}

}  // namespace

FoldReport fold_overlay(Disk& disk, const FoldRequest& req) {
  fs::path from = absolute_normal(req.from), into = absolute_normal(req.into);
  // ACCEPTED named by a symlink (`latest -> acc-7`) is its directory: records and layers name that.
  if (disk.info(into, Follow::no).type == FileType::symlink && disk.info(into, Follow::yes).type == FileType::directory)
    into = disk.real_path(into);
  if (from == into) throw Error("--from and --into name the same overlay: " + from.string());
  FileInfo fi = disk.info(from, Follow::yes), ii = disk.info(into, Follow::yes);
  if (!fi.exists()) throw Error("overlay does not exist: " + from.string());
  if (fi.type != FileType::directory) throw Error("overlay is not a directory: " + from.string());
  if (ii.exists() && ii.type != FileType::directory) throw Error("overlay is not a directory: " + into.string());
  // One directory by two names (a symlink, a bind mount): its lock would be waited for by itself.
  if (ii.exists() && ii.dev == fi.dev && ii.ino == fi.ino)
    throw Error("--from and --into name the same overlay: " + into.string() + " is " + from.string());
  if (!load_manifest(disk, from)) throw Error("nothing to fold: no manifest in " + from.string());
  if (ii.exists()) load_manifest(disk, into);  // a malformed record is refused before any lock
  // CAND first, then ACCEPTED: an upper layer's lock, then its lower's (StackLocks).
  StackLocks locks(from, req.lock_timeout);
  auto cm = load_manifest(disk, from);
  if (!cm) throw Error("nothing to fold: no manifest in " + from.string());
  std::optional<FoldMark> interrupted = cm->fold_out;
  bool finished = interrupted && !req.dry_run && settle_fold_out(disk, from, *cm, req.lock_timeout, req.state_dir) &&
                  absolute_normal(interrupted->overlay) == into;
  if (disk.info(into, Follow::yes).exists()) locks.take_lower(into);
  Manifest am = load_manifest(disk, into).value_or(Manifest{});
  std::optional<FoldReport> done = fold_done(from, *cm, am, finished ? interrupted : std::nullopt);
  if (!req.dry_run && locks.holds_lower() && settle_folds_in(disk, into, am)) save_manifest(disk, into, am);
  if (done) return *done;
  check_foldable(disk, from, into, *cm);
  FoldPlan p = plan_fold(into, *cm, am);
  if (req.dry_run) return p.report;
  if (!locks.holds_lower()) {  // made only once every check passed: a refused fold leaves no ACCEPTED behind
    make_dirs(disk, into);
    locks.take_lower(into);
    if (load_manifest(disk, into))
      throw Error(into.string() + " was made by another process meanwhile: run the fold again");
  }
  const PinnedOverlay pinned(disk, into);
  for (std::size_t i : p.moved) p.into.natives[i].folded_from = from.string();
  std::string fold = new_fold_id();
  // 1. CAND says where its entries are going; 2. ACCEPTED shields what will be staged in it.
  cm->fold_out = FoldMark{into.string(), fold, p.ids, false};
  save_manifest(disk, from, *cm);
  std::vector<std::string> staged;
  for (std::size_t i : p.moved) staged.push_back(p.into.natives[i].id);
  am.folds_in.push_back(FoldMark{from.string(), fold, staged, false});
  pinned.save_mark(disk, am);
  // 3. Stage; 4. commit: ACCEPTED's record holds the fold (the point of no return).
  try {
    stage(disk, from, pinned, p);
  } catch (const DiskError&) {
    pinned.still_there(disk, "its commit");  // a move mid-stage is told as the move it is
    throw;
  }
  p.into.folds_in = am.folds_in;
  p.into.folds_in.back().committed = true;
  const bool in_place = pinned.save_commit(disk, p.into);
  // 5. The holds follow, while ACCEPTED's mark still names CAND (a copy is told from the fold's
  // receiver by it); 6. CAND lets go; 7. the mark goes.
  move_holds(disk, req.state_dir, p.paths, from, into, p.into, p.ids, req.lock_timeout, pinned.id());
  FoldMark out = *cm->fold_out;
  let_go(disk, from, *cm, out, p.into);
  if (in_place && pinned.stands(disk)) clear_mark(disk, into, fold);  // moved: its next verb drops it
  if (!in_place)
    spdlog::warn(
        "{} was moved while the fold committed: the fold is done in that overlay where it went (its next "
        "verb drops the fold's mark there); revert or status it at its new path",
        into.string());
  p.report.fold_id = fold;
  return p.report;
}

}  // namespace overlay
