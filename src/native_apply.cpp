#include "overlay/native_apply.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "overlay/build_store.hpp"
#include "overlay/build_watch.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/pinned.hpp"
#include "overlay/stack.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

constexpr const char* kLogDirName = "_logs";

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// An artifact whose backup is a clone of it: traded for the clone once the entry is recorded.
struct ClonedArtifact {
  fs::path path;
  SavedFile saved;
};

// The directories add-native acts in, each opened once without following a symlink (by the real
// path its pin records) and held until the swaps are made: the directory pinned is the one
// backed up from and changed, whatever is swapped on its path meanwhile (issue 24).
class HeldDirs {
 public:
  HeldDirs(Disk& disk, const NativePlan& plan) : disk_(disk), plan_(plan) {}

  // The pin of tracked path p, its directory held from now on. Inside one of the entry's cache
  // dirs, which the build is expected to fill again: that cache dir's parent (pinned.hpp).
  std::optional<PinnedDir> pin(const fs::path& p) {
    for (const auto& c : plan_.caches) {
      auto rel = p.lexically_relative(c);
      if (!rel.empty() && *rel.begin() != ".." && rel != ".") return pin_below(disk_, c, p);
    }
    fs::path parent = p.parent_path();
    if (auto it = held_.find(parent); it != held_.end()) return it->second.pin;
    if (disk_.info(parent, Follow::yes).type != FileType::directory) return std::nullopt;
    fs::path real = disk_.real_path(parent);
    std::unique_ptr<DirHandle> dir;
    try {
      dir = disk_.open_dir(real);
    } catch (const DiskError& err) {
      throw Error("the directory of " + p.string() + " changed while add-native read it (" + err.what() + ")");
    }
    PinnedDir pin{real.string(), static_cast<std::uint64_t>(dir->dev()), static_cast<std::uint64_t>(dir->ino()), {}};
    held_.emplace(parent, Held{pin, std::move(dir)});
    return pin;
  }

  // Where p is acted on: by its name inside its held directory, or by path when none is held.
  At at(const fs::path& p) const {
    auto it = held_.find(p.parent_path());
    return it != held_.end() ? At(*it->second.dir, p.filename().string()) : At(p);
  }

 private:
  struct Held {
    PinnedDir pin;
    std::unique_ptr<DirHandle> dir;
  };
  Disk& disk_;
  const NativePlan& plan_;
  std::map<fs::path, Held> held_;
};

// Durable backups of everything the entry will touch; the entry describing them is returned.
NativeEntry back_up(Disk& disk, BackupStore& store, const NativePlan& plan, const std::string& id,
                    std::vector<ClonedArtifact>& cloned, HeldDirs& held) {
  NativeEntry e;
  e.id = id;
  for (const auto& swap : plan.swaps) {
    if (swap.kind == SwapKind::create) {
      e.created.push_back(
          CreatedItem{swap.target.string(), swap.content_sha256, held.pin(swap.target), std::nullopt, json::object()});
      continue;
    }
    auto pin = held.pin(swap.target);
    SavedFile s = store.save_file(id, "src_" + std::to_string(e.sources.size()), held.at(swap.target));
    spdlog::info("backed up {} -> {}", swap.target.string(), s.backup);
    SourceItem item;
    static_cast<FileBackup&>(item) = s;
    item.install_path = swap.target.string();
    if (swap.kind == SwapKind::modify) item.patched_sha256 = swap.content_sha256;
    item.deleted = swap.kind == SwapKind::remove;
    item.parent = std::move(pin);
    e.sources.push_back(std::move(item));
  }
  for (std::size_t k = 0; k < plan.artifacts.size(); ++k) {
    ArtifactItem a;
    a.path = plan.artifacts[k].string();
    a.parent = held.pin(plan.artifacts[k]);
    a.existed = disk.info(held.at(plan.artifacts[k]), Follow::no).type == FileType::regular;
    if (a.existed) {
      SavedFile s = store.save_file(id, "art_" + std::to_string(k), held.at(plan.artifacts[k]));
      spdlog::info("backed up {} -> {}", a.path, s.backup);
      static_cast<FileBackup&>(a) = s;
      if (s.cloned) cloned.push_back({plan.artifacts[k], s});
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
    c.parent = held.pin(plan.caches[k]);
    FileInfo ci = disk.info(held.at(plan.caches[k]), Follow::no);
    c.existed = ci.type == FileType::directory;
    if (c.existed && plan.cache_ways[k] == CacheWay::aside) {
      // Renamed after the record; the identity it has now is the one revert will accept back.
      c.aside = AsideDir{aside_path_of(plan.caches[k], id).string(), static_cast<std::uint64_t>(ci.dev),
                         static_cast<std::uint64_t>(ci.ino), static_cast<std::uint64_t>(ci.uid)};
    } else if (c.existed) {
      SavedFile s = store.save_dir_tar(id, "cache_" + std::to_string(k), held.at(plan.caches[k]));
      spdlog::info("snapshot {} -> {}", c.dir, s.backup);
      c.backup_tar = s.backup;
      c.sha256 = s.sha256;
    }
    e.caches.push_back(std::move(c));
  }
  bool aside = std::any_of(e.caches.begin(), e.caches.end(), [](const CacheItem& c) { return c.aside.has_value(); });
  if (aside || !e.created.empty()) e.python_guard = store.make_python_guard(id);
  e.build_cmds = plan.build_cmds;
  e.build_cwd = plan.build_cwd.string();
  e.build_cwd_defaulted = plan.build_cwd_defaulted && !plan.build_cmds.empty();
  e.owner = plan.owner;
  e.created_at = now_seconds();
  e.build_log = std::string(kLogDirName) + "/" + id + ".build.log";
  store.sync_entry(id);
  return e;
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

// A failed add-native's holds go back to what they were; a failure doing so is reported, never
// put in place of the error that made the add-native fail.
void give_back_claim(HoldRegistry& holds, const HoldClaim& claim, const NativePlan& plan) {
  try {
    holds.give_back(claim, plan.overlay, plan.lock_timeout);
  } catch (const Error& e) {
    spdlog::warn("could not give back the holds of the failed add-native: {}", e.what());
  }
}

// The artifacts' original checksums, from their backups, into their holds ("" for one that did
// not exist), before the record: an artifact hold without one is then known never recorded. A
// failure here fails the add-native before anything is touched.
void note_artifact_originals(HoldRegistry& holds, const NativePlan& plan, const NativeEntry& e) {
  std::map<fs::path, std::string> originals;
  for (const auto& a : e.artifacts) originals.emplace(a.path, a.existed ? a.sha256 : "");
  std::vector<fs::path> paths;
  for (const auto& s : e.sources) paths.emplace_back(s.install_path);
  for (const auto& c : e.created) paths.emplace_back(c.path);
  for (const auto& a : e.artifacts) paths.emplace_back(a.path);
  holds.note_entry(paths, originals, plan.overlay, e.id, plan.lock_timeout);
}

}  // namespace

AppliedEntry apply_native(Disk& disk, const NativePlan& plan) {
  std::vector<HeldFile> targets;
  for (const auto& s : plan.swaps)
    targets.emplace_back(s.target, s.kind == SwapKind::remove ? std::optional<std::string>() : s.content_sha256);
  // Artifacts are held too: a second overlay's backup of one would be this one's build, and a
  // vanished holder's rebuilt library must not pass for the original.
  for (const auto& a : plan.artifacts) targets.emplace_back(a, std::nullopt, true);
  // Refused here (nothing touched yet) when another overlay still holds a target; from here to
  // the end of the swap no other add-native can take one of them (the claim's locks).
  HoldRegistry holds(disk, plan.state_dir);
  ManifestCache own_records(disk);
  ManifestCache& records = plan.records ? *plan.records : own_records;
  HoldClaim claim = claim_files(holds, targets, plan.overlay, plan.force, plan.lock_timeout, plan.over, &records);
  for (const auto& w : claim.warnings) spdlog::warn("{}", w);
  std::optional<StackLocks> locks;
  BackupStore store(disk, plan.overlay);
  HeldDirs held(disk, plan);
  std::vector<ClonedArtifact> cloned;
  Manifest m;
  std::string id;
  std::shared_ptr<InFlight> in_flight;
  std::vector<std::string> layered;
  try {
    make_dirs(disk, plan.overlay);
    locks.emplace(plan.overlay, plan.lock_timeout);
    // Marked under the lock gc-stale judges under, before the record: no entry of ours is ever
    // on record without its operation marked live.
    in_flight = std::make_shared<InFlight>(disk, plan.overlay, plan.op);
    m = records.reread(plan.overlay).value_or(Manifest{});
    // --over: the lower's lock (StackLocks: ours first, then the lower's), held from before the
    // backups read its change until our record names the entry.
    std::optional<Manifest> lower;
    if (plan.over && disk.info(*plan.over / kManifestName, Follow::no).exists()) {
      locks->take_lower(*plan.over);
      lower = records.reread(*plan.over);
    }
    if (plan.over) require_lower_records(claim, lower, *plan.over);
    bool taken = plan.entry_id && std::any_of(m.natives.begin(), m.natives.end(),
                                              [&](const NativeEntry& n) { return n.id == *plan.entry_id; });
    id = store.new_entry(plan.entry_id && !taken ? *plan.entry_id : std::string());
    NativeEntry e = back_up(disk, store, plan, id, cloned, held);
    if (lower) layered = record_layers(disk, *plan.over, *lower, plan.overlay, m, e);
    // overlay_setup.py knows no layers: reverted in the wrong order (the lower first), a layer's
    // revert would put the lower's bytes back over the pristine install. It stops at the guard.
    if (!layered.empty() && !e.python_guard) {
      e.python_guard = store.make_python_guard(id);
      store.sync_entry(id);
    }
    m.natives.push_back(std::move(e));
    m.natives.back().patch_id = plan.patch_id;
    if (plan.record_with) plan.record_with(m);
    note_artifact_originals(holds, plan, m.natives.back());
    m.untracked = still_as_built(disk, m.untracked);  // a later build regenerated the rest
    std::erase_if(m.litter, [&](const std::string& l) { return !disk.info(l, Follow::no).exists(); });
    make_dirs(disk, plan.overlay / kLogDirName);
    save_manifest(disk, plan.overlay, m);  // from here on, revert can undo everything below
    records.put(plan.overlay, m);
    if (lower) records.put(*plan.over, *lower);
    locks->release_lower();
  } catch (...) {
    // The install is untouched. Leave no half-made backups and no hold behind, unless the
    // manifest rename went through (only the directory fsync after it failed): then the record
    // needs them.
    if (id.empty() || !manifest_names(disk, plan.overlay, id)) {
      if (!id.empty()) store.drop_entry(id);
      give_back_claim(holds, claim, plan);
    }
    throw;
  }
  spdlog::info("recorded entry {} in {}", id, (plan.overlay / kManifestName).string());
  const NativeEntry& e = m.natives.back();
  // Before any cache is touched: an overlay deleted with the entry applied takes its record along.
  holds.note_caches(plan.overlay, e.id, e.caches);
  for (const auto& c : cloned)
    if (store.trade_for_clone(c.saved, held.at(c.path)))
      spdlog::info("{} is now its clone; the backup is the original", c.path.string());
  wait_past_artifact_second(disk, plan.artifacts);
  std::size_t src = 0;
  for (const auto& swap : plan.swaps) {
    if (swap.kind == SwapKind::create) {
      replace_file_atomically(disk, swap.content, held.at(swap.target), swap.content_mode);
    } else if (swap.kind == SwapKind::remove) {
      remove_file_durably(disk, held.at(swap.target));
    } else {
      // Not fsynced: whatever a power cut leaves here (original, patched, or the name with its
      // bytes lost), revert puts the original back from its durable backup.
      replace_file_atomically(disk, swap.content, held.at(swap.target), *e.sources[src].mode, Durable::no);
    }
    if (swap.kind != SwapKind::create) ++src;
    spdlog::info("{} {}", to_string(swap.kind), swap.target.string());
  }
  for (std::size_t k = 0; k < plan.caches.size(); ++k) {
    const CacheItem& c = e.caches[k];
    if (c.aside) {
      store.put_aside(held.at(plan.caches[k]), *c.aside);  // so is the rename aside
      spdlog::info("renamed cache {} aside -> {}", c.dir, c.aside->path);
    } else {
      // Renamed to a trash sibling first, so the build never sees a half-deleted cache; the tree
      // is deleted by a detached process (revert sweeps what a killed one leaves, as the entry's).
      store.discard_dir(held.at(plan.caches[k]));
      spdlog::info("invalidated cache {}", c.dir);
    }
  }
  store.purge(store.take_litter());
  AppliedEntry applied{id,
                       plan.overlay / *e.build_log,
                       e.sources.size() + e.created.size(),
                       e.artifacts.size(),
                       e.caches.size(),
                       in_flight,
                       layered,
                       {}};
  auto pin = [&](const std::string& path, const std::optional<PinnedDir>& p) {
    if (p) applied.pins.emplace(path, *p);
  };
  for (const auto& s : e.sources) pin(s.install_path, s.parent);
  for (const auto& c : e.created) pin(c.path, c.parent);
  for (const auto& a : e.artifacts) pin(a.path, a.parent);
  for (const auto& c : e.caches) pin(c.dir, c.parent);
  return applied;
}

nlohmann::json AppliedEntry::to_json(const NativePlan& plan) const {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& s : plan.swaps)
    files.push_back({{"path", s.target.string()}, {"change", overlay::to_string(s.kind)}});
  nlohmann::json j = {{"entry", id},
                      {"files", files},
                      {"counts", {{"sources", sources}, {"artifacts", artifacts}, {"caches", caches}}}};
  if (plan.over) j["over"] = {{"overlay", plan.over->string()}, {"layered", layered}};
  return j;
}

}  // namespace overlay
