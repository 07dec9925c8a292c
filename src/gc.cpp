#include "overlay/gc.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/liveness.hpp"
#include "overlay/manifest.hpp"
#include "overlay/native.hpp"
#include "overlay/stack.hpp"
#include "overlay/store.hpp"
#include "overlay/trust.hpp"

namespace overlay {
namespace {

// Why a manifest must not be trusted, or "" when it may be.
std::string distrust(const FileInfo& manifest, const FileInfo& dir) {
  uid_t me = ::geteuid();
  for (const FileInfo* fi : {&manifest, &dir}) {
    const char* what = fi == &manifest ? "manifest" : "overlay directory";
    if (fi->mode & 022) return std::string(what) + " is group- or world-writable";
    if (fi->uid != me && fi->uid != 0)
      return std::string(what) + " is owned by another user (uid " + std::to_string(fi->uid) + ")";
  }
  return "";
}

std::optional<std::string> live_owner(const Manifest& m) {
  for (const auto& e : m.natives) {
    Liveness l = e.owner ? owner_liveness(*e.owner) : Liveness::gone;
    if (l == Liveness::alive) return "owner " + describe_owner(*e.owner) + " is still running";
    if (l == Liveness::unseen)
      return "owner " + describe_owner(*e.owner) +
             " cannot be seen from here (another host or PID namespace): left alone, run gc-stale where it can be";
    if (e.kept)
      return "entry " + e.id + " was kept applied on purpose (exec --keep-on-success): revert it with `overlay revert`";
  }
  return std::nullopt;
}

// Why the overlay must be left alone now: an operation in flight on it (add-native building,
// exec, revert), or an entry's owner alive or kept on purpose.
std::optional<std::string> why_live(Disk& disk, const fs::path& overlay, const Manifest& m) {
  std::string busy = describe_live(live_operations(disk, overlay));
  if (!busy.empty()) return busy;
  return live_owner(m);
}

double age_seconds(const FileInfo& fi) {
  using namespace std::chrono;
  double now = duration<double>(system_clock::now().time_since_epoch()).count();
  return now - (static_cast<double>(fi.mtime.tv_sec) + static_cast<double>(fi.mtime.tv_nsec) / 1e9);
}

RevertOptions gc_revert_options(Disk& disk, const fs::path& overlay, const GcOptions& opts) {
  RevertOptions o;
  o.lock_timeout = opts.lock_timeout;
  o.spare_if = [&disk, overlay](const Manifest& m) { return why_live(disk, overlay, m); };
  return o;
}

GcItem consider(Disk& disk, const fs::path& overlay, const FileInfo& mfi, const GcOptions& opts, bool& relevant) {
  relevant = true;
  std::string why = swappable_ancestor(disk, overlay);
  if (why.empty()) why = distrust(mfi, disk.info(overlay, Follow::no));
  if (!why.empty()) return {overlay, GcOutcome::skipped, why};
  std::optional<Manifest> m;
  try {
    m = load_manifest(disk, overlay);
  } catch (const Error& e) {
    // Junk, or another tool's file under our name: reported, and no reason to fail the walk.
    return {overlay, GcOutcome::skipped, std::string("not a manifest overlay can read: ") + e.what()};
  }
  if (!m || m->natives.empty()) {
    relevant = false;
    // Only litter left (a revert's detached deleter was killed), or backups no record names (an
    // add-native killed before its record): deleted, nothing to report.
    bool backups = disk.info(overlay / kBackupDirName, Follow::no).type == FileType::directory;
    if ((backups || (m && !m->litter.empty())) && !opts.dry_run && !(m && why_live(disk, overlay, *m)))
      revert_natives(disk, overlay, gc_revert_options(disk, overlay, opts));
    return {overlay, GcOutcome::skipped, "no native entries"};
  }
  if (auto live = why_live(disk, overlay, *m)) return {overlay, GcOutcome::skipped, *live};
  // An archived or restored copy of another overlay (or a superseded record): left alone, said so.
  for (const auto& e : m->natives)
    if (auto copy = held_elsewhere(disk, overlay, e))
      return {overlay, GcOutcome::skipped, copy->path + " is " + copy->reason};
  if (opts.min_age_s && age_seconds(mfi) < *opts.min_age_s)
    return {overlay, GcOutcome::skipped, "changed less than --min-age ago"};
  if (opts.dry_run) return {overlay, GcOutcome::would_revert, ""};
  RevertReport r = revert_natives(disk, overlay, gc_revert_options(disk, overlay, opts));
  if (r.spared) return {overlay, GcOutcome::skipped, *r.spared};  // became live before the lock was ours
  // Its entries went before the lock was ours (a fold took them, a revert finished): nothing was
  // reverted here (found by a probe: "reverted" printed for a candidate a fold had just taken).
  if (r.entries == 0 && r.problems.empty())
    return {overlay, GcOutcome::skipped, "no native entries by the time it was locked"};
  if (!r.blocked_by.empty()) {
    std::string who;
    for (const auto& b : r.blocked_by) who += (who.empty() ? "" : ", ") + b;
    return {overlay, GcOutcome::skipped, "a layer stacked on it is still applied (" + who + "): it goes first"};
  }
  if (r.ok()) {
    // Reverted on disk; a process that still maps a replaced artifact runs the patched code.
    std::string still;
    for (const auto& x : r.still_running)
      still += (still.empty() ? "" : "; ") + ("process " + std::to_string(x.pid) + " (" + x.cmdline.substr(0, 60) +
                                              ") still runs the patched " + x.path + ": restart it");
    return {overlay, GcOutcome::reverted, still};
  }
  std::string reason;
  for (const auto& p : r.problems) reason += (reason.empty() ? "" : "; ") + p.path + ": " + p.reason;
  return {overlay, GcOutcome::failed, reason};
}

// One overlay's verdict, whatever goes wrong with it: an overlay that cannot be locked, read or
// written (a read-only mount, a lock held past --lock-timeout) is reported and the walk goes on.
GcItem consider_one(Disk& disk, const fs::path& overlay, const FileInfo& mfi, const GcOptions& opts, bool& relevant) {
  try {
    return consider(disk, overlay, mfi, opts, relevant);
  } catch (const std::exception& e) {
    relevant = true;
    return {overlay, GcOutcome::failed, e.what()};
  }
}

// How many layers an overlay stands on (0: none), by its items' layer refs; a cycle stops at 8.
std::size_t layer_depth(ManifestCache& cache, const std::string& overlay, int guard) {
  const auto& m = cache.get(overlay);
  if (!m || guard > 8) return 0;
  std::set<std::string> lowers;
  for (const auto& e : m->natives)
    for (const auto& p : tracked_paths(e))
      if (const LayerRef* l = layer_of(e, p)) lowers.insert(l->overlay);
  std::size_t d = 0;
  for (const auto& l : lowers) d = std::max(d, 1 + layer_depth(cache, l, guard + 1));
  return d;
}

}  // namespace

std::size_t GcReport::count(GcOutcome o) const {
  return static_cast<std::size_t>(
      std::count_if(items.begin(), items.end(), [o](const GcItem& i) { return i.outcome == o; }));
}

const char* to_string(GcOutcome o) {
  switch (o) {
    case GcOutcome::reverted:
      return "reverted";
    case GcOutcome::would_revert:
      return "would-revert";
    case GcOutcome::skipped:
      return "skipped";
    case GcOutcome::failed:
      return "failed";
  }
  return "?";
}

GcReport gc_stale(Disk& disk, const fs::path& root_in, const GcOptions& opts) {
  fs::path root = absolute_normal(root_in);
  FileInfo ri = disk.info(root, Follow::yes);
  if (!ri.exists()) throw Error("root does not exist: " + root.string());
  if (ri.type != FileType::directory) throw Error("root is not a directory: " + root.string());
  // Walked from its real path, so that an overlay below has no symlink above it unless one was
  // swapped in meanwhile (which swappable_ancestor then refuses).
  root = disk.real_path(root);
  std::vector<std::pair<fs::path, FileInfo>> found;
  std::set<fs::path> with_backups;  // overlays by their backup dir: a first add-native killed early has no manifest
  auto visit = [&](const fs::path& rel, FileType type) {
    if (type == FileType::directory && rel.filename() == kBackupDirName) with_backups.insert(root / rel.parent_path());
    if (type == FileType::directory && (rel.filename() == kBackupDirName || rel.filename() == "_trash"))
      return WalkStep::skip;
    if (type == FileType::regular && rel.filename() == kManifestName)
      found.emplace_back(root / rel, disk.info(root / rel, Follow::no));
    return WalkStep::descend;
  };
  GcReport report;
  walk_tree(disk, root, visit, [&](const fs::path& dir, const std::string& why) {
    report.items.push_back({dir, GcOutcome::skipped, "cannot search: " + why});
  });
  for (const auto& [path, fi] : found) with_backups.erase(path.parent_path());
  for (const auto& ov : with_backups)
    found.emplace_back(ov / kManifestName, disk.info(ov / kBackupDirName, Follow::no));
  // Layers top-down: an overlay stacked on others (add-native --over) before those under it, so
  // a dead run's candidate goes before the accepted changes it stands on.
  ManifestCache cache(disk);
  std::map<std::string, std::size_t> depth;
  for (const auto& [path, fi] : found)
    depth[path.parent_path().string()] = layer_depth(cache, path.parent_path().string(), 0);
  std::stable_sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    return depth[a.first.parent_path().string()] > depth[b.first.parent_path().string()];
  });
  for (const auto& [path, fi] : found) {
    bool relevant = false;
    GcItem item = consider_one(disk, path.parent_path(), fi, opts, relevant);
    if (relevant) report.items.push_back(std::move(item));
  }
  return report;
}

}  // namespace overlay
