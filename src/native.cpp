#include "overlay/native.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/patch.hpp"
#include "overlay/store.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

constexpr const char* kLogDirName = "_logs";

// An existing, readable regular file (symlinks resolved); `what` names it in errors.
fs::path existing_file(Disk& disk, const fs::path& p, const std::string& what) {
  FileInfo fi = disk.info(p, Follow::yes);
  if (!fi.exists()) throw Error(what + " does not exist: " + p.string());
  if (fi.type == FileType::directory) throw Error(what + " is a directory: " + p.string());
  if (fi.type != FileType::regular) throw Error(what + " is not a regular file: " + p.string());
  try {
    disk.open_read(p);
  } catch (const DiskError& e) {
    throw Error(what + " is not readable: " + p.string() + " (" + std::strerror(e.code()) + ")");
  }
  return disk.real_path(p);
}

bool inside(const fs::path& child, const fs::path& parent) {
  auto rel = child.lexically_relative(parent);
  return !rel.empty() && *rel.begin() != "..";
}

void check_overlay_dir(Disk& disk, const fs::path& overlay) {
  FileInfo fi = disk.info(overlay, Follow::yes);
  if (fi.exists() && fi.type != FileType::directory) throw Error("overlay is not a directory: " + overlay.string());
  if (fi.exists()) load_manifest(disk, overlay);  // a malformed manifest is refused up front
}

std::vector<fs::path> checked_artifacts(Disk& disk, const AddNativeRequest& req) {
  std::vector<fs::path> out;
  for (const auto& a : req.artifacts) {
    fs::path p = absolute_normal(a);
    FileInfo fi = disk.info(p, Follow::no);
    if (fi.type == FileType::directory) throw Error("artifact is a directory: " + p.string());
    if (fi.exists() && fi.type != FileType::regular) throw Error("artifact is not a regular file: " + p.string());
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

std::vector<fs::path> checked_caches(Disk& disk, const AddNativeRequest& req, const fs::path& overlay) {
  std::vector<fs::path> out;
  for (const auto& c : req.caches) {
    fs::path p = absolute_normal(c);
    FileInfo fi = disk.info(p, Follow::no);
    if (fi.exists() && fi.type != FileType::directory) throw Error("cache dir is not a directory: " + p.string());
    if (p == p.root_path() || p == overlay || inside(overlay, p) || inside(p, overlay))
      throw Error("cache dir overlaps the overlay or the root: " + p.string());
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// p, once checked to be an existing directory (symlinks followed); `what` names it in errors.
fs::path existing_dir(Disk& disk, const fs::path& p, const std::string& what) {
  FileInfo fi = disk.info(p, Follow::yes);
  if (!fi.exists()) throw Error(what + " does not exist: " + p.string());
  if (fi.type != FileType::directory) throw Error(what + " is not a directory: " + p.string());
  return p;
}

NativePlan::Swap tree_swap(Disk& disk, const PatchedTree::Change& c) {
  NativePlan::Swap s;
  switch (c.change) {
    case FileChange::modified: s.kind = SwapKind::modify; break;
    case FileChange::created: s.kind = SwapKind::create; break;
    case FileChange::deleted: s.kind = SwapKind::remove; break;
  }
  s.target = s.kind == SwapKind::create ? disk.real_path(c.path.parent_path()) / c.path.filename()
                                        : existing_file(disk, c.path, "file the diff changes");
  if (s.kind == SwapKind::remove) return s;
  s.content = c.content;
  s.content_mode = disk.info(c.content, Follow::no).mode;
  s.content_sha256 = hash_file(disk, s.content);
  return s;
}

// --patch-root: every file the diff names, modified, created or deleted as one entry.
std::vector<NativePlan::Swap> tree_swaps(Disk& disk, const AddNativeRequest& req, NativePlan& plan) {
  if (!req.patch) throw Error("--patch-root needs --patch");
  if (!req.targets.empty() || !req.patched_files.empty())
    throw Error("--patch-root takes no --target or --patched-file: the diff names the files");
  fs::path root = disk.real_path(existing_dir(disk, absolute_normal(*req.patch_root), "patch root"));
  fs::path diff = existing_file(disk, absolute_normal(*req.patch), "patch file");
  plan.patched_tree = std::make_shared<PatchedTree>(disk, root, diff, req.strip);
  std::vector<NativePlan::Swap> swaps;
  for (const auto& c : plan.patched_tree->changes()) {
    NativePlan::Swap s = tree_swap(disk, c);
    if (inside(s.target, plan.overlay)) throw Error("file the diff changes lies inside the overlay: " + s.target.string());
    for (const auto& other : swaps)
      if (other.target == s.target) throw Error("diff reaches one file by two names: " + s.target.string());
    swaps.push_back(std::move(s));
  }
  return swaps;
}

std::vector<NativePlan::Swap> checked_swaps(Disk& disk, const AddNativeRequest& req, NativePlan& plan) {
  if (req.patch_root) return tree_swaps(disk, req, plan);
  if (req.targets.empty()) throw Error("no --target given (or --patch with --patch-root)");
  if (req.patch && (req.targets.size() != 1 || !req.patched_files.empty()))
    throw Error("--patch takes exactly one --target and no --patched-file");
  if (!req.patch && req.patched_files.size() != req.targets.size())
    throw Error("each --target needs one --patched-file (or give --patch)");
  std::vector<NativePlan::Swap> swaps;
  for (std::size_t i = 0; i < req.targets.size(); ++i) {
    NativePlan::Swap s;
    s.target = existing_file(disk, absolute_normal(req.targets[i]), "target source");
    for (const auto& other : swaps)
      if (other.target == s.target) throw Error("target given twice: " + s.target.string());
    if (req.patch) {
      fs::path diff = existing_file(disk, absolute_normal(*req.patch), "patch file");
      auto copy = std::make_shared<PatchedCopy>(disk, s.target, diff);
      s.content = copy->file();
      plan.patched.push_back(copy);
    } else {
      s.content = existing_file(disk, absolute_normal(req.patched_files[i]), "patched file");
    }
    if (inside(s.target, plan.overlay)) throw Error("target source lies inside the overlay: " + s.target.string());
    s.content_sha256 = hash_file(disk, s.content);
    swaps.push_back(std::move(s));
  }
  return swaps;
}

std::vector<std::vector<std::string>> checked_build(Disk& disk, const AddNativeRequest& req, fs::path& cwd) {
  std::vector<std::vector<std::string>> cmds;
  for (const auto& line : req.build_cmds) {
    auto argv = split_words(line);
    if (argv.empty()) throw Error("--build-cmd is empty");
    cmds.push_back(std::move(argv));
  }
  cwd = existing_dir(disk, absolute_normal(req.build_cwd.value_or(fs::current_path())), "build cwd");
  return cmds;
}

// The filesystem an overlay will live on: its own, or that of its nearest existing ancestor.
dev_t overlay_device(Disk& disk, fs::path p) {
  for (;;) {
    FileInfo fi = disk.info(p, Follow::yes);
    if (fi.exists() || p == p.root_path() || p.empty()) return fi.dev;
    p = p.parent_path();
  }
}

std::vector<bool> move_decisions(Disk& disk, const std::vector<fs::path>& caches, const fs::path& overlay, CacheSnapshot how) {
  std::vector<bool> out;
  dev_t ov = overlay_device(disk, overlay);
  for (const auto& c : caches) {
    FileInfo ci = disk.info(c, Follow::no);
    bool same_fs = ci.exists() && ci.dev == ov;
    if (how == CacheSnapshot::move && ci.exists() && !same_fs)
      throw Error("--cache-snapshot move: cache dir and overlay are on different filesystems: " + c.string());
    out.push_back(how == CacheSnapshot::move || (how == CacheSnapshot::automatic && same_fs));
  }
  return out;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Durable backups of everything the entry will touch; the entry describing them is returned.
NativeEntry back_up(Disk& disk, BackupStore& store, const NativePlan& plan, const std::string& id) {
  NativeEntry e;
  e.id = id;
  for (const auto& swap : plan.swaps) {
    if (swap.kind == SwapKind::create) {
      e.created.push_back(CreatedItem{swap.target.string(), swap.content_sha256, json::object()});
      continue;
    }
    SavedFile s = store.save_file(id, "src_" + std::to_string(e.sources.size()), swap.target);
    spdlog::info("backed up {} -> {}", swap.target.string(), s.backup);
    SourceItem item;
    item.install_path = swap.target.string();
    item.backup = s.backup;
    item.sha256 = s.sha256;
    if (swap.kind == SwapKind::modify) item.patched_sha256 = swap.content_sha256;
    item.deleted = swap.kind == SwapKind::remove;
    item.mode = s.mode;
    item.stamp = s.stamp;
    e.sources.push_back(std::move(item));
  }
  for (std::size_t k = 0; k < plan.artifacts.size(); ++k) {
    ArtifactItem a;
    a.path = plan.artifacts[k].string();
    a.existed = disk.info(plan.artifacts[k], Follow::no).type == FileType::regular;
    if (a.existed) {
      SavedFile s = store.save_file(id, "art_" + std::to_string(k), plan.artifacts[k]);
      spdlog::info("backed up {} -> {}", a.path, s.backup);
      a.backup = s.backup;
      a.sha256 = s.sha256;
      a.mode = s.mode;
      a.stamp = s.stamp;
      if (!e.verify_artifact) {
        e.verify_artifact = a.path;
        e.verify_pre_sha256 = a.sha256;
      }
    }
    e.artifacts.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < plan.caches.size(); ++k) {
    CacheItem c;
    c.dir = plan.caches[k].string();
    c.existed = disk.info(plan.caches[k], Follow::no).type == FileType::directory;
    if (c.existed && plan.move_cache[k]) {
      c.backup_dir = store.moved_dir_name(id, "cache_" + std::to_string(k));  // moved after the record
    } else if (c.existed) {
      SavedFile s = store.save_dir_tar(id, "cache_" + std::to_string(k), plan.caches[k]);
      spdlog::info("snapshot {} -> {}", c.dir, s.backup);
      c.backup_tar = s.backup;
      c.sha256 = s.sha256;
    }
    e.caches.push_back(std::move(c));
  }
  bool moved = std::any_of(e.caches.begin(), e.caches.end(), [](const CacheItem& c) { return c.backup_dir.has_value(); });
  if (moved || !e.created.empty()) e.python_guard = store.make_python_guard(id);
  e.build_cmds = plan.build_cmds;
  e.build_cwd = plan.build_cwd.string();
  e.owner = plan.owner;
  e.created_at = now_seconds();
  e.build_log = std::string(kLogDirName) + "/" + id + ".build.log";
  store.sync_entry(id);
  return e;
}

// The cache is renamed aside first, so the build never sees a half-deleted cache.
void invalidate_cache(Disk& disk, const fs::path& dir) {
  if (disk.info(dir, Follow::no).type != FileType::directory) return;
  fs::path trash = sibling_temp_path(dir, "overlay-trash");
  disk.rename(dir, trash);
  disk.sync_dir(dir.parent_path());
  remove_tree(disk, trash);
}

// Builds that compare whole-second mtimes (setuptools' build_ext, through distutils' newer())
// skip a source written in the same second as the artifact they last built, and the candidate
// silently runs the old code. When a tracked artifact was written in the current second, wait
// for the next one (at most ~1 s, only then), so every swapped source is strictly newer.
// File times come from the kernel's coarse clock, so that is the clock compared against.
void wait_past_artifact_second(Disk& disk, const std::vector<fs::path>& artifacts) {
  time_t newest = 0;
  for (const auto& a : artifacts) {
    FileInfo fi = disk.info(a, Follow::no);
    if (fi.exists()) newest = std::max(newest, fi.mtime.tv_sec);
  }
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  if (newest < now.tv_sec || newest > now.tv_sec + 1) return;  // older, or clock skew: no wait helps
  spdlog::info("an artifact was written this second: waiting for the next before swapping sources");
  while (now.tv_sec <= newest) {
    timespec nap{0, 1000000000L - now.tv_nsec + 2000000L};
    if (nap.tv_nsec >= 1000000000L) nap = {0, 999999999L};
    ::nanosleep(&nap, nullptr);
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  }
}

bool manifest_names(Disk& disk, const fs::path& overlay, const std::string& id) {
  try {
    auto m = load_manifest(disk, overlay);
    return m && std::any_of(m->natives.begin(), m->natives.end(), [&](const NativeEntry& e) { return e.id == id; });
  } catch (const Error&) {
    return true;  // cannot tell: keeping backups is the safe side
  }
}

}  // namespace

NativePlan plan_add_native(Disk& disk, const AddNativeRequest& req) {
  NativePlan plan;
  plan.overlay = absolute_normal(req.overlay);
  plan.lock_timeout = req.lock_timeout;
  plan.build_timeout = req.build_timeout;
  plan.force = req.force;
  plan.state_dir = req.state_dir.empty() ? HoldRegistry::default_state_dir() : req.state_dir;
  check_overlay_dir(disk, plan.overlay);
  plan.artifacts = checked_artifacts(disk, req);
  plan.caches = checked_caches(disk, req, plan.overlay);
  plan.move_cache = move_decisions(disk, plan.caches, plan.overlay, req.cache_snapshot);
  plan.build_cmds = checked_build(disk, req, plan.build_cwd);
  if (req.owner_pid) {
    auto ticks = process_start_ticks(*req.owner_pid);
    if (!ticks) throw Error("owner pid " + std::to_string(*req.owner_pid) + " is not a running process");
    plan.owner = Owner{*req.owner_pid, *ticks};
  }
  plan.swaps = checked_swaps(disk, req, plan);
  return plan;
}

AppliedEntry apply_native(Disk& disk, const NativePlan& plan) {
  std::vector<fs::path> targets;
  for (const auto& s : plan.swaps) targets.push_back(s.target);
  // Refused here (nothing touched yet) when another overlay still holds a target.
  HoldRegistry(disk, plan.state_dir).acquire(targets, plan.overlay, plan.force, plan.lock_timeout);
  make_dirs(disk, plan.overlay);
  OverlayLock lock(plan.overlay, plan.lock_timeout);
  Manifest m = load_manifest(disk, plan.overlay).value_or(Manifest{});
  BackupStore store(disk, plan.overlay);
  std::string id = store.new_entry();
  try {
    m.natives.push_back(back_up(disk, store, plan, id));
    make_dirs(disk, plan.overlay / kLogDirName);
    save_manifest(disk, plan.overlay, m);  // from here on, revert can undo everything below
  } catch (...) {
    // The install is untouched. Leave no half-made backups behind, unless the manifest rename
    // went through (only the directory fsync after it failed): then the record needs them.
    if (!manifest_names(disk, plan.overlay, id)) store.drop_entry(id);
    throw;
  }
  spdlog::info("recorded entry {} in {}", id, (plan.overlay / kManifestName).string());
  const NativeEntry& e = m.natives.back();
  wait_past_artifact_second(disk, plan.artifacts);
  std::size_t src = 0;
  for (const auto& swap : plan.swaps) {
    if (swap.kind == SwapKind::create) {
      replace_file_atomically(disk, swap.content, swap.target, swap.content_mode);
    } else if (swap.kind == SwapKind::remove) {
      remove_file_durably(disk, swap.target);
    } else {
      replace_file_atomically(disk, swap.content, swap.target, *e.sources[src].mode);
    }
    if (swap.kind != SwapKind::create) ++src;
    spdlog::info("{} {}", to_string(swap.kind), swap.target.string());
  }
  for (std::size_t k = 0; k < plan.caches.size(); ++k) {
    const CacheItem& c = e.caches[k];
    if (c.backup_dir) {
      store.move_dir_in(plan.caches[k], *c.backup_dir);  // the move is the invalidation
      spdlog::info("moved cache {} -> {}", c.dir, *c.backup_dir);
    } else {
      invalidate_cache(disk, plan.caches[k]);
      spdlog::info("invalidated cache {}", c.dir);
    }
  }
  return {id, plan.overlay / *e.build_log, e.sources.size() + e.created.size(), e.artifacts.size(), e.caches.size()};
}

BuildOutcome run_native_build(const NativePlan& plan, const AppliedEntry& entry) {
  BuildOutcome out;
  for (const auto& argv : plan.build_cmds) {
    RunOptions opts;
    opts.cwd = plan.build_cwd;
    opts.log_path = entry.log_path;
    opts.timeout_s = plan.build_timeout;
    out.result = run_process(argv, opts);
    if (!out.result.ok()) {
      out.ok = false;
      out.failed_cmd = argv;
      return out;
    }
  }
  return out;
}

const char* to_string(SwapKind k) {
  switch (k) {
    case SwapKind::modify: return "modify";
    case SwapKind::create: return "create";
    case SwapKind::remove: return "delete";
  }
  return "?";
}

bool VerifyReport::ok() const {
  return std::all_of(items.begin(), items.end(), [](const VerifyItem& i) {
    return i.state == ArtifactState::rebuilt || i.state == ArtifactState::created;
  });
}

const char* to_string(ArtifactState s) {
  switch (s) {
    case ArtifactState::rebuilt: return "rebuilt";
    case ArtifactState::created: return "created";
    case ArtifactState::unchanged: return "unchanged";
    case ArtifactState::missing_after_build: return "missing-after-build";
    case ArtifactState::not_created: return "not-created";
  }
  return "?";
}

VerifyReport verify_native(Disk& disk, const fs::path& overlay_in) {
  fs::path overlay = absolute_normal(overlay_in);
  auto m = load_manifest(disk, overlay);
  if (!m) throw Error("no manifest in " + overlay.string());
  VerifyReport r;
  for (const auto& e : m->natives) {
    for (const auto& a : e.artifacts) {
      FileInfo fi = disk.info(a.path, Follow::no);
      ArtifactState st;
      // A different size is a different file: no need to read it.
      bool same_size = !a.stamp || fi.size == a.stamp->size;
      if (a.existed)
        st = !fi.exists() ? ArtifactState::missing_after_build
             : (fi.type == FileType::regular && same_size && hash_file(disk, a.path) == *a.sha256) ? ArtifactState::unchanged
                                                                                                     : ArtifactState::rebuilt;
      else
        st = fi.exists() ? ArtifactState::created : ArtifactState::not_created;
      r.items.push_back({a.path, st});
    }
  }
  return r;
}

namespace {

class Reverter {
 public:
  Reverter(Disk& disk, const fs::path& overlay, const RevertOptions& opts, RevertReport& report)
      : disk_(disk), store_(disk, overlay), opts_(opts), report_(report) {}

  // Restores one entry; true when every item is back at its original state.
  bool revert_entry(const NativeEntry& e) {
    bool ok = true;
    for (auto it = e.caches.rbegin(); it != e.caches.rend(); ++it)
      ok &= attempt(it->dir, [&] { return cache(*it); });
    for (auto it = e.artifacts.rbegin(); it != e.artifacts.rend(); ++it)
      ok &= attempt(it->path, [&] { return artifact(*it); });
    for (auto it = e.created.rbegin(); it != e.created.rend(); ++it)
      ok &= attempt(it->path, [&] { return created(it->path); });
    for (auto it = e.sources.rbegin(); it != e.sources.rend(); ++it)
      ok &= attempt(it->install_path, [&] { return file(it->install_path, it->backup, it->sha256, it->mode, it->stamp); });
    return ok;
  }

  void forget_backups(const NativeEntry& e) {
    std::vector<std::string> rels;
    for (const auto& s : e.sources) rels.push_back(s.backup);
    for (const auto& a : e.artifacts)
      if (a.backup) rels.push_back(*a.backup);
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

  std::string file(const std::string& path, const std::string& rel, const std::string& sha,
                   std::optional<mode_t> mode, const std::optional<FileStamp>& stamp) {
    if (opts_.dry_run) return dry_file(path, rel, sha);
    return store_.restore_file(rel, sha, path, mode, stamp) ? "restore" : "unchanged";
  }

  std::string dry_file(const std::string& path, const std::string& rel, const std::string& sha) {
    FileInfo fi = disk_.info(path, Follow::no);
    if (fi.type == FileType::regular && hash_file(disk_, path) == sha) return "unchanged";
    if (!disk_.info(store_.resolve(rel), Follow::no).exists()) throw Error("backup missing: " + rel);
    return "restore";
  }

  std::string artifact(const ArtifactItem& a) {
    if (a.existed) return file(a.path, *a.backup, *a.sha256, a.mode, a.stamp);
    return created(a.path);
  }

  // A file that did not exist before the entry: removed, whatever it holds now.
  std::string created(const std::string& path) {
    FileInfo fi = disk_.info(path, Follow::no);
    if (!fi.exists()) return "unchanged";
    if (fi.type == FileType::directory) throw Error("a directory now stands where the entry created a file");
    if (!opts_.dry_run) remove_file_durably(disk_, path);
    return "remove";
  }

  std::string cache(const CacheItem& c) {
    if (!c.existed) {
      bool present = disk_.info(c.dir, Follow::no).exists();
      if (!opts_.dry_run) store_.remove_dir(c.dir);
      return present ? "remove" : "unchanged";
    }
    if (c.backup_dir) return moved_cache(c);
    if (opts_.dry_run) {
      if (!disk_.info(store_.resolve(*c.backup_tar), Follow::no).exists()) throw Error("backup missing: " + *c.backup_tar);
      return "restore";
    }
    store_.restore_dir(*c.backup_tar, c.sha256, c.dir);
    return "restore";
  }

  // A cache moved into the overlay goes back by rename. No moved dir: it was never moved (a crash
  // before the move) or was moved back already; either way the cache dir must be in place.
  std::string moved_cache(const CacheItem& c) {
    bool present = disk_.info(store_.resolve(*c.backup_dir), Follow::no).exists();
    if (!present) {
      if (disk_.info(c.dir, Follow::no).type != FileType::directory)
        throw Error("moved cache missing: " + *c.backup_dir);
      if (!opts_.dry_run) store_.tidy(c.dir);  // the trash of an interrupted move back
      return "unchanged";
    }
    if (!opts_.dry_run) store_.move_dir_back(*c.backup_dir, c.dir);
    return "restore";
  }

  Disk& disk_;
  BackupStore store_;
  const RevertOptions& opts_;
  RevertReport& report_;
};

// Holds are a convenience for the next add-native; a failure to drop one never fails a revert
// (a stale hold is ignored once no manifest records the change).
void release_holds(Disk& disk, const RevertOptions& opts, const fs::path& overlay, const NativeEntry& e) {
  std::vector<fs::path> paths;
  for (const auto& s : e.sources) paths.emplace_back(s.install_path);
  for (const auto& c : e.created) paths.emplace_back(c.path);
  try {
    HoldRegistry(disk, opts.state_dir.empty() ? HoldRegistry::default_state_dir() : opts.state_dir)
        .release(paths, overlay, opts.lock_timeout);
  } catch (const Error& err) {
    spdlog::warn("cannot release holds of {}: {}", overlay.string(), err.what());
  }
}

}  // namespace

RevertReport revert_natives(Disk& disk, const fs::path& overlay_in, const RevertOptions& opts) {
  fs::path overlay = absolute_normal(overlay_in);
  RevertReport report;
  FileInfo fi = disk.info(overlay / kManifestName, Follow::no);
  if (!fi.exists()) return report;
  std::optional<OverlayLock> lock;
  if (!opts.dry_run) lock.emplace(overlay, opts.lock_timeout);
  auto m = load_manifest(disk, overlay);
  if (!m) return report;
  report.had_manifest = true;
  report.entries = m->natives.size();
  Reverter rev(disk, overlay, opts, report);
  for (std::size_t i = m->natives.size(); i-- > 0;) {
    if (opts.only_entry && m->natives[i].id != *opts.only_entry) continue;
    if (!rev.revert_entry(m->natives[i]) || opts.dry_run) continue;
    NativeEntry done = m->natives[i];
    m->natives.erase(m->natives.begin() + static_cast<std::ptrdiff_t>(i));
    save_manifest(disk, overlay, *m);  // the entry is gone from the record before its backups are
    rev.forget_backups(done);
    release_holds(disk, opts, overlay, done);
    ++report.entries_reverted;
  }
  if (!opts.dry_run) BackupStore(disk, overlay).purge_trash();
  return report;
}

}  // namespace overlay
