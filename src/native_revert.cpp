#include "overlay/native_revert.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "overlay/build_watch.hpp"
#include "overlay/engagement.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/pinned.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

// The holds of the state dir the options name (the default one when they name none).
HoldRegistry holds_of(Disk& disk, const RevertOptions& opts) {
  return HoldRegistry(disk, opts.state_dir.empty() ? HoldRegistry::default_state_dir() : opts.state_dir);
}

class Reverter {
 public:
  Reverter(Disk& disk, const fs::path& overlay, const RevertOptions& opts, RevertReport& report)
      : disk_(disk), store_(disk, overlay), opts_(opts), report_(report) {}

  // Restores one entry; true when every item is back at its original state. Each item is acted
  // on under the directory add-native pinned for it, or refused when that no longer stands.
  bool revert_entry(const NativeEntry& e) {
    bool ok = true;
    for (auto it = e.caches.rbegin(); it != e.caches.rend(); ++it)
      ok &= attempt(it->dir, [&] { return cache(*it, place(it->dir, it->parent)); });
    for (auto it = e.artifacts.rbegin(); it != e.artifacts.rend(); ++it)
      ok &= attempt(it->path, [&] { return artifact(*it, place(it->path, it->parent)); });
    for (auto it = e.created.rbegin(); it != e.created.rend(); ++it)
      ok &= attempt(it->path, [&] { return created(place(it->path, it->parent)); });
    for (auto it = e.sources.rbegin(); it != e.sources.rend(); ++it)
      ok &= attempt(it->install_path, [&] {
        // Where it goes first: a refusal there is the item's one story, with no warning before it
        // about a replacement that then does not happen.
        PinnedPlace at = place(it->install_path, it->parent);
        if (!opts_.dry_run) warn_if_drifted(*it);
        return file(at, *it, RestoredTime::now);
      });
    return ok;
  }

  // Why entry `e` of `m` cannot be reverted yet (nothing when it can): an entry made after it with --force (in
  // this manifest, or in the overlay that holds the path now) backed up the very bytes `e` patched
  // a source to. Reverted first, `e` would put the original back only for that entry's revert to
  // put `e`'s patch back over it, with nothing left on record to say so.
  std::optional<RevertProblem> stacked_over(const Manifest& m, const NativeEntry& e) {
    for (const auto& s : e.sources) {
      if (!s.patched_sha256) continue;
      auto stacks = [&](const NativeEntry& x) {
        return &x != &e && std::any_of(x.sources.begin(), x.sources.end(), [&](const SourceItem& y) {
                 return y.install_path == s.install_path && y.sha256 == *s.patched_sha256;
               });
      };
      for (const auto& x : m.natives)
        if (stacks(x))
          return RevertProblem{s.install_path, "patched again over this entry by entry " + x.id + " of this overlay (--force); revert that entry first"};
      auto other = holds().holder(s.install_path);
      if (!other || absolute_normal(*other) == store_.overlay()) continue;
      std::optional<Manifest> om;
      try {
        om = load_manifest(disk_, *other);
      } catch (const Error&) {
        continue;  // an unreadable record stacks nothing we can name
      }
      if (om && std::any_of(om->natives.begin(), om->natives.end(), stacks))
        return RevertProblem{s.install_path, "patched again over this entry by overlay " + other->string() + " (add-native --force); revert that overlay first"};
    }
    return std::nullopt;
  }

  void forget_backups(const NativeEntry& e) {
    std::vector<std::string> rels;
    for (const auto& s : e.sources) {
      rels.push_back(s.backup);
      if (s.same_inode) rels.push_back(*s.same_inode);
    }
    for (const auto& a : e.artifacts) {
      if (a.existed) rels.push_back(a.backup);
      if (a.same_inode) rels.push_back(*a.same_inode);
    }
    for (const auto& c : e.caches) {
      if (c.backup_tar) rels.push_back(*c.backup_tar);
      if (c.backup_dir) rels.push_back(*c.backup_dir);
    }
    if (e.python_guard) rels.push_back(e.python_guard->stop);
    for (const auto& rel : rels) {
      try {
        store_.forget(rel);
      } catch (const Error& err) {
        report_.problems.push_back({rel, std::string("cannot delete backup: ") + err.what()});
      }
    }
  }

 private:
  template <typename F>
  bool attempt(const std::string& path, F&& step) {
    try {
      report_.actions.push_back({step(), path});
      spdlog::info("{}{} {}", opts_.dry_run ? "would " : "", report_.actions.back().action, path);
      return true;
    } catch (const std::exception& err) {
      report_.problems.push_back({path, err.what()});
      return false;
    }
  }

  HoldRegistry holds() { return holds_of(disk_, opts_); }

  // A source that holds neither the bytes add-native wrote nor the original was changed since by
  // someone else: its change is about to be replaced by the original, which is said, never silent.
  void warn_if_drifted(const SourceItem& s) {
    if (!s.patched_sha256) return;
    FileInfo fi = disk_.info(s.install_path, Follow::no);
    if (fi.type != FileType::regular) return;
    std::string now = hash_file(disk_, s.install_path);
    if (now == *s.patched_sha256 || now == s.sha256) return;
    spdlog::warn("{} changed since add-native patched it (sha256 {}, neither the patched bytes nor the original): "
                 "the change is replaced by the original",
                 s.install_path, now.substr(0, 16));
  }

  // Where a file item is written: through its pinned directory, held open (a dry run only
  // reads, by path, after the same check).
  PinnedPlace place(const std::string& path, const std::optional<PinnedDir>& parent) {
    if (opts_.dry_run) return PinnedPlace{nullptr, pinned_path(disk_, path, parent)};
    return open_pinned(disk_, path, parent);
  }

  std::string file(const PinnedPlace& p, const FileBackup& rec, RestoredTime when) {
    if (opts_.dry_run) return dry_file(p.path, rec.backup, rec.sha256);
    return store_.restore_file(rec, p.at(), when) ? "restore" : "unchanged";
  }

  std::string dry_file(const std::string& path, const std::string& rel, const std::string& sha) {
    FileInfo fi = disk_.info(path, Follow::no);
    if (fi.type == FileType::regular && hash_file(disk_, path) == sha) return "unchanged";
    if (!disk_.info(store_.resolve(rel), Follow::no).exists()) throw Error("backup missing: " + rel);
    return "restore";
  }

  std::string artifact(const ArtifactItem& a, const PinnedPlace& p) {
    // A build output goes back a second older than now: the sources restored after it (now)
    // are strictly newer even in whole seconds, and an add-native right after this revert finds
    // no artifact of the current second to wait out (design.md, "No stall between cycles").
    if (a.existed) return file(p, a, RestoredTime::previous_second);
    return created(p);
  }

  // A file that did not exist before the entry: removed, whatever it holds now.
  std::string created(const PinnedPlace& p) {
    const At path = p.at();
    // A crash while the entry was creating it leaves its hidden temp sibling; nothing else would
    // ever remove that from the install.
    if (!opts_.dry_run) store_.tidy(path);
    FileInfo fi = disk_.info(path, Follow::no);
    if (!fi.exists()) return "unchanged";
    if (fi.type == FileType::directory) throw Error("a directory now stands where the entry created a file");
    if (!opts_.dry_run) remove_file_durably(disk_, path);
    return "remove";
  }

  // A cache dir: its renames made through its pinned parent, held open (a tar is still
  // extracted by path; only its final swap is made through the held directory when renamable).
  std::string cache(const CacheItem& item, const PinnedPlace& p) {
    CacheItem c = item;  // with its dir (and its aside copy, a sibling) where they are now
    c.dir = p.path.string();
    if (c.aside) c.aside->path = (p.path.parent_path() / fs::path(c.aside->path).filename()).string();
    const At at = p.at();
    if (!c.existed) {
      bool present = disk_.info(at, Follow::no).exists();
      if (!opts_.dry_run) store_.discard_dir(at);
      return present ? "remove" : "unchanged";
    }
    if (c.backup_dir) return moved_cache(c, at);
    if (c.aside) return aside_cache(c, at);
    if (opts_.dry_run) {
      if (!disk_.info(store_.resolve(*c.backup_tar), Follow::no).exists()) throw Error("backup missing: " + *c.backup_tar);
      return "restore";
    }
    store_.restore_dir(*c.backup_tar, c.sha256, at);
    return "restore";
  }

  // A cache moved into the overlay goes back by rename. No moved dir: it was never moved (a crash
  // before the move) or was moved back already; either way the cache dir must be in place.
  std::string moved_cache(const CacheItem& c, const At& at) {
    bool present = disk_.info(store_.resolve(*c.backup_dir), Follow::no).exists();
    if (!present) {
      if (disk_.info(c.dir, Follow::no).type != FileType::directory)
        throw Error("moved cache missing: " + *c.backup_dir);
      if (!opts_.dry_run) store_.tidy_dir(c.dir);  // the trash of an interrupted move back
      return "unchanged";
    }
    if (!opts_.dry_run) store_.move_dir_back(*c.backup_dir, at);
    return "restore";
  }

  // A cache renamed aside beside itself goes back by rename, once proven to be the very directory
  // recorded (device, inode, owner); refused otherwise, the entry kept.
  std::string aside_cache(const CacheItem& c, const At& at) {
    if (!opts_.dry_run) return store_.take_back_aside(*c.aside, at) ? "restore" : "unchanged";
    FileInfo di = disk_.info(c.dir, Follow::no);
    if (di.type == FileType::directory && di.ino == c.aside->ino && di.dev == c.aside->dev) return "unchanged";
    if (!disk_.info(c.aside->path, Follow::no).exists()) throw Error("aside copy missing: " + c.aside->path);
    return "restore";
  }

  Disk& disk_;
  BackupStore store_;
  const RevertOptions& opts_;
  RevertReport& report_;

 public:
  BackupStore& store() { return store_; }
};

// The litter still on disk (a purge killed, or still at work): kept on the record until gone.
std::vector<std::string> litter_left(Disk& disk, const std::vector<std::string>& litter) {
  std::vector<std::string> left;
  for (const auto& l : litter)
    if (disk.info(l, Follow::no).exists()) left.push_back(l);
  return left;
}

// Holds are a convenience for the next add-native; a failure to drop one never fails a revert
// (a stale hold is ignored once no manifest records the change).
void release_holds(Disk& disk, const RevertOptions& opts, const fs::path& overlay, const NativeEntry& e, const Manifest& now) {
  std::vector<fs::path> paths;
  for (const auto& s : e.sources) paths.emplace_back(s.install_path);
  for (const auto& c : e.created) paths.emplace_back(c.path);
  for (const auto& a : e.artifacts) paths.emplace_back(a.path);
  try {
    holds_of(disk, opts).release(paths, overlay, now, opts.lock_timeout, &e);
  } catch (const Error& err) {
    spdlog::warn("cannot release holds of {}: {}", overlay.string(), err.what());
  }
}

// Deletes the patched module files of removed Python entries (never anything outside the overlay).
void remove_module_files(Disk& disk, const fs::path& overlay, const std::vector<std::string>& files, RevertReport& report) {
  for (const auto& rel : files) {
    try {
      if (!is_safe_relative(rel)) throw Error("module file escapes the overlay: " + rel);
      if (disk.info(overlay / rel, Follow::no).exists()) remove_file_durably(disk, overlay / rel);
    } catch (const Error& err) {
      spdlog::warn("cannot delete {}: {}", rel, err.what());
    }
    ++report.modules_removed;
  }
}

// Backups no record names (an add-native killed before it saved its record, a revert killed
// after it forgot an entry) go, the overlay lock held, so no add-native is between the two.
void sweep_partial_backups(Disk& disk, const fs::path& overlay, const Manifest& m, RevertReport& report) {
  for (const auto& id : BackupStore(disk, overlay).sweep_unnamed_entries(m)) {
    spdlog::warn("removed {}: the backups of an add-native interrupted before its record", (overlay / kBackupDirName / id).string());
    report.partial_backups_swept.push_back(id);
  }
}

}  // namespace

RevertReport revert_natives(Disk& disk, const fs::path& overlay_in, const RevertOptions& opts) {
  fs::path overlay = absolute_normal(overlay_in);
  RevertReport report;
  FileInfo fi = disk.info(overlay / kManifestName, Follow::no);
  if (!fi.exists()) {
    // An add-native killed before its first record leaves backups and no manifest.
    if (!opts.dry_run && disk.info(overlay / kBackupDirName, Follow::no).type == FileType::directory) {
      OverlayLock lock(overlay, opts.lock_timeout);
      if (!disk.info(overlay / kManifestName, Follow::no).exists()) sweep_partial_backups(disk, overlay, Manifest{}, report);
    }
    return report;
  }
  std::optional<OverlayLock> lock;
  if (!opts.dry_run) lock.emplace(overlay, opts.lock_timeout);
  auto m = load_manifest(disk, overlay);
  if (!m) return report;
  report.had_manifest = true;
  if (opts.spare_if && (report.spared = opts.spare_if(*m))) return report;
  report.entries = m->natives.size();
  std::size_t litter_recorded = m->litter.size();
  if (!opts.dry_run) m->litter = litter_left(disk, m->litter);
  Reverter rev(disk, overlay, opts, report);
  // Which processes map the rebuilt artifacts now: after the revert they run replaced code.
  ProcessScan scan = opts.dry_run ? ProcessScan{} : scan_for_revert(disk, *m);
  report.processes_examined = scan.examined;
  m->running = still_running(m->running, scan);
  if (opts.only_patch && !has_patch(*m, *opts.only_patch)) {
    if (opts.missing_patch_ok) return report;
    throw Error("no entry of patch " + *opts.only_patch + " in " + overlay.string());
  }
  for (std::size_t i = m->natives.size(); i-- > 0;) {
    if (opts.only_entry && m->natives[i].id != *opts.only_entry) continue;
    if (opts.only_patch && m->natives[i].patch_id != opts.only_patch) continue;
    if (auto stacked = rev.stacked_over(*m, m->natives[i])) {
      report.problems.push_back(*stacked);  // refused before any of the entry is touched
      continue;
    }
    std::vector<RunningPatched> running = running_patched_of(disk, m->natives[i], scan);
    if (!rev.revert_entry(m->natives[i]) || opts.dry_run) continue;
    m->running.insert(m->running.end(), running.begin(), running.end());
    NativeEntry done = m->natives[i];
    m->natives.erase(m->natives.begin() + static_cast<std::ptrdiff_t>(i));
    // Trees the entry's restore renamed aside in the install are named on the record that
    // forgets the entry: nothing else would find them after a killed purge.
    for (auto& l : rev.store().take_litter()) m->litter.push_back(std::move(l));
    // A patch's Python entries leave the record in the same write as its native entry.
    std::vector<std::string> files = done.patch_id ? remove_patch_modules(*m, *done.patch_id) : std::vector<std::string>{};
    keep_untracked_of_reverted(disk, *m, done);
    save_manifest(disk, overlay, *m);  // the entry is gone from the record before its backups are
    rev.forget_backups(done);
    remove_module_files(disk, overlay, files, report);
    release_holds(disk, opts, overlay, done, *m);
    ++report.entries_reverted;
  }
  // A patch of Python files only (or whose native entry went earlier): its entries go now.
  if (opts.only_patch && !opts.dry_run && report.ok()) {
    std::vector<std::string> files = remove_patch_modules(*m, *opts.only_patch);
    if (!files.empty()) {
      save_manifest(disk, overlay, *m);
      remove_module_files(disk, overlay, files, report);
    }
  }
  if (!opts.dry_run) {
    sweep_partial_backups(disk, overlay, *m, report);
    // Litter that went since it was recorded leaves the record (when nothing else rewrote it).
    if (report.entries_reverted == 0 && m->litter.size() != litter_recorded) save_manifest(disk, overlay, *m);
    // A kept entry's trash is not on the record, but it lies beside the entry's cache dir, where
    // the next revert of that entry finds it if this purge does not finish.
    std::vector<std::string> doomed = m->litter;
    for (auto& l : rev.store().take_litter()) doomed.push_back(std::move(l));
    BackupStore(disk, overlay).purge(doomed);
  }
  report.untracked_left = still_as_built(disk, m->untracked);
  report.still_running = m->running;
  return report;
}

}  // namespace overlay
