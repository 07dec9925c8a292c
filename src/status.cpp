#include "overlay/status.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "overlay/build_changes.hpp"
#include "overlay/build_watch.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/liveness.hpp"
#include "overlay/manifest.hpp"
#include "overlay/pinned.hpp"
#include "overlay/python/entries.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/python/verbs.hpp"
#include "overlay/stack.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

// The state of a file that should hold `original` bytes before the entry and `written` after.
FileState file_state(DiskReader& disk, const std::string& path, const std::string& original,
                     const std::optional<std::string>& written) {
  FileInfo fi = disk.info(path, Follow::no);
  if (fi.type != FileType::regular) return FileState::missing;
  std::string sha = hash_file(disk, path);
  if (sha == original) return FileState::original;
  if (written && sha == *written) return FileState::patched;
  return FileState::drifted;
}

FileState source_state(DiskReader& disk, const SourceItem& s) {
  if (!s.deleted) return file_state(disk, s.install_path, s.sha256, s.patched_sha256);
  FileInfo fi = disk.info(s.install_path, Follow::no);
  if (!fi.exists()) return FileState::patched;  // deleted, as the diff says
  return fi.type == FileType::regular && hash_file(disk, s.install_path) == s.sha256 ? FileState::original
                                                                                     : FileState::drifted;
}

std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m));
  return b;
}

// How source `s`, at `path` now, differs in metadata from the original as recorded; "" when not.
std::string metadata_drift(DiskReader& disk, const fs::path& path, const SourceItem& s) {
  FileInfo fi = disk.info(path, Follow::no);
  if (fi.type != FileType::regular) return "";
  std::vector<std::string> what;
  if (s.mode && fi.mode != *s.mode) what.push_back("mode " + octal(fi.mode) + " (recorded " + octal(*s.mode) + ")");
  if (s.owner && (fi.uid != s.owner->uid || fi.gid != s.owner->gid))
    what.push_back("owner " + std::to_string(fi.uid) + ":" + std::to_string(fi.gid) + " (recorded " +
                   std::to_string(s.owner->uid) + ":" + std::to_string(s.owner->gid) + ")");
  if (s.xattrs) {
    Xattrs now = disk.xattrs(path);
    std::vector<std::string> names;
    for (const auto& x : now)
      if (std::find(s.xattrs->begin(), s.xattrs->end(), x) == s.xattrs->end()) names.push_back(x.first);
    for (const auto& x : *s.xattrs)
      if (std::none_of(now.begin(), now.end(), [&](const auto& n) { return n.first == x.first; }))
        names.push_back(x.first);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    if (!names.empty()) what.push_back("extended attributes differ (" + list + ")");
  }
  std::string out;
  for (const auto& w : what) out += (out.empty() ? "" : "; ") + w;
  return out;
}

FileState created_state(DiskReader& disk, const CreatedItem& c) {
  FileInfo fi = disk.info(c.path, Follow::no);
  if (!fi.exists()) return FileState::original;  // absent, as before the entry
  return fi.type == FileType::regular && hash_file(disk, c.path) == c.sha256 ? FileState::patched : FileState::drifted;
}

FileState artifact_state(DiskReader& disk, const ArtifactItem& a) {
  FileInfo fi = disk.info(a.path, Follow::no);
  if (!a.existed) return fi.exists() ? FileState::rebuilt : FileState::original;
  if (fi.type != FileType::regular) return FileState::missing;
  // A different size is a different file: no need to read it.
  if (a.stamp && fi.size != a.stamp->size) return FileState::rebuilt;
  return hash_file(disk, a.path) == a.sha256 ? FileState::original : FileState::rebuilt;
}

// A cache renamed aside: original when the recorded directory stands at its path again; its
// aside copy is judged by the identity revert will demand.
TrackedFile aside_cache_state(DiskReader& disk, const CacheItem& c) {
  const AsideDir& a = *c.aside;
  TrackedFile t{TrackedKind::cache, c.dir, FileState::original, a.path, ""};
  auto recorded = [&](const FileInfo& fi) {
    return fi.type == FileType::directory && fi.dev == a.dev && fi.ino == a.ino && fi.uid == a.uid;
  };
  FileInfo di = disk.info(c.dir, Follow::no), ai = disk.info(a.path, Follow::no);
  if (recorded(di)) return t;
  if (!ai.exists()) {
    t.state = FileState::missing;
    t.note = "aside copy missing";
  } else if (!recorded(ai)) {
    t.state = FileState::drifted;
    t.note = "aside copy replaced since add-native: revert refuses it";
  } else {
    t.state = di.exists() ? FileState::rebuilt : FileState::invalidated;
  }
  return t;
}

FileState cache_state(DiskReader& disk, const BackupPaths& store, const CacheItem& c) {
  bool present = disk.info(c.dir, Follow::no).exists();
  if (!c.existed) return present ? FileState::rebuilt : FileState::original;
  // A moved cache whose move never happened (or was undone) is still the original dir.
  if (c.backup_dir && !disk.info(store.resolve(*c.backup_dir), Follow::no).exists())
    return present ? FileState::original : FileState::missing;
  return present ? FileState::rebuilt : FileState::invalidated;
}

std::uint64_t tree_bytes(DiskReader& disk, const fs::path& root) {
  std::uint64_t total = 0;
  walk_tree(
      disk, root,
      [&](const fs::path& rel, FileType type) {
        if (type == FileType::regular) total += disk.info(root / rel, Follow::no).size;
        return WalkStep::descend;
      },
      [](const fs::path&, const std::string&) {});
  return total;
}

std::uint64_t backup_bytes(DiskReader& disk, const BackupPaths& store, const std::optional<std::string>& rel) {
  if (!rel) return 0;
  FileInfo fi = disk.info(store.resolve(*rel), Follow::no);
  if (fi.type == FileType::directory) return tree_bytes(disk, store.resolve(*rel));
  return fi.type == FileType::regular ? fi.size : 0;
}

// A tracked path judged where it lives now (under the directory add-native pinned for it), or
// `redirected`, with what changed, when that directory no longer stands there.
template <typename Item, typename State>
TrackedFile judge(DiskReader& disk, TrackedKind kind, const Item& item, std::string Item::*path, State state) {
  TrackedFile t{kind, item.*path, FileState::original};
  std::string why = item.parent ? why_redirected(disk, *item.parent) : "";
  if (!why.empty()) {
    t.state = FileState::redirected;
    t.note = why;
    return t;
  }
  Item here = item;
  here.*path = pinned_path(disk, item.*path, item.parent).string();
  t.state = state(disk, here);
  return t;
}

TrackedFile judge_cache(DiskReader& disk, const BackupPaths& store, const CacheItem& c) {
  std::string why = c.parent ? why_redirected(disk, *c.parent) : "";
  if (!why.empty()) return TrackedFile{TrackedKind::cache, c.dir, FileState::redirected, "", why};
  CacheItem here = c;
  here.dir = pinned_path(disk, c.dir, c.parent).string();
  if (here.aside) here.aside->path = (fs::path(here.dir).parent_path() / fs::path(c.aside->path).filename()).string();
  TrackedFile t = here.aside ? aside_cache_state(disk, here)
                             : TrackedFile{TrackedKind::cache, c.dir, cache_state(disk, store, here)};
  t.path = c.dir;
  return t;
}

// The stack around this overlay's files (stack.hpp): read once per status.
struct LayerView {
  LayerView(DiskReader& disk, const Manifest& manifest, const fs::path& ov)
      : cache(disk), m(manifest), overlay(ov.string()) {
    uppers = uppers_of(cache, m);
  }
  ManifestCache cache;
  const Manifest& m;
  std::string overlay;
  std::vector<Upper> uppers;
};

bool holds_pristine(DiskReader& disk, const std::string& path, const std::string& pristine) {
  FileInfo fi = disk.info(path, Follow::no);
  if (pristine.empty()) return !fi.exists();
  return fi.type == FileType::regular && hash_file(disk, path) == pristine;
}

// A tracked file judged with its layers. A layered item whose file holds the pristine bytes is
// original (the layer below was reverted under it); one holding the bytes of a lower layer that
// no longer records them is stranded (that layer's original went with it). A file a layer above
// changed again is covered, never drifted: its bytes are that layer's, on top of this entry's.
void judge_layers(DiskReader& disk, LayerView& v, const std::optional<LayerRef>& layer, TrackedFile& t) {
  if (t.state == FileState::redirected) return;
  if (FileStack st = stack_of(v.cache, v.overlay, v.m, t.path); st.size() > 1) t.layers = std::move(st);
  if (layer && t.state != FileState::patched) {
    RefState ls = lower_state(v.cache, *layer, t.path);
    bool gone = ls == RefState::stale || ls == RefState::vanished;
    if (gone && t.state == FileState::original) {
      t.state = FileState::stranded;
      t.note = "the bytes of layer " + layer->overlay + " [" + layer->entry + "], which " +
               (ls == RefState::vanished ? "has vanished" : "no longer records them") +
               ": the pristine original is not here";
      return;
    }
    if (gone && t.state != FileState::original && t.state != FileState::invalidated &&
        holds_pristine(disk, t.path, layer->pristine_sha256)) {
      t.state = FileState::original;
      t.note = "the layer below (" + layer->overlay + ") was reverted under this one: pristine";
      return;
    }
  }
  if (t.state != FileState::drifted && t.state != FileState::rebuilt && t.state != FileState::missing) return;
  for (const auto& u : v.uppers) {
    if (u.state == RefState::stale || std::find(u.ref.paths.begin(), u.ref.paths.end(), t.path) == u.ref.paths.end())
      continue;
    t.state = FileState::covered;
    t.note =
        "under layer " + u.ref.overlay + " [" + u.ref.entry + "]" +
        (u.state == RefState::vanished ? ", which has vanished: revert this overlay to put the original back" : "");
    return;
  }
}

// A later entry of this overlay that patched the source again over this entry's bytes (the old
// way to accept: revert the candidate, add the accepted file again): this entry's source is
// covered by it, not drifted by a foreign edit.
const NativeEntry* patched_again(const Manifest& m, const NativeEntry& e, const SourceItem& s) {
  bool after = false;
  for (const auto& x : m.natives) {
    if (&x == &e) {
      after = true;
      continue;
    }
    if (after && s.patched_sha256 && std::any_of(x.sources.begin(), x.sources.end(), [&](const SourceItem& y) {
          return y.install_path == s.install_path && y.sha256 == *s.patched_sha256;
        }))
      return &x;
  }
  return nullptr;
}

NativeStatus native_status(DiskReader& disk, const BackupPaths& store, const fs::path& overlay, const NativeEntry& e,
                           LayerView& view) {
  NativeStatus st;
  st.id = e.id;
  st.patch_id = e.patch_id;
  st.owner = e.owner;
  st.owner_liveness = e.owner ? owner_liveness(*e.owner) : Liveness::gone;
  st.owner_alive = st.owner_liveness != Liveness::gone;
  st.created_at = e.created_at;
  if (e.build_log) st.build_log = (overlay / *e.build_log).string();
  for (const auto& s : e.sources) {
    TrackedFile t =
        judge(disk, s.deleted ? TrackedKind::deleted : TrackedKind::source, s, &SourceItem::install_path, source_state);
    if (!s.deleted && (t.state == FileState::patched || t.state == FileState::original))
      t.metadata = metadata_drift(disk, pinned_path(disk, s.install_path, s.parent), s);
    judge_layers(disk, view, s.layer, t);
    if (t.state == FileState::drifted)
      if (const NativeEntry* x = patched_again(view.m, e, s)) {
        t.state = FileState::covered;
        t.note = "patched again by entry " + x->id + " of this overlay";
      }
    st.files.push_back(std::move(t));
    st.snapshot_bytes += backup_bytes(disk, store, s.backup);
  }
  for (const auto& c : e.created) {
    st.files.push_back(judge(disk, TrackedKind::created, c, &CreatedItem::path, created_state));
    judge_layers(disk, view, c.layer, st.files.back());
  }
  for (const auto& a : e.artifacts) {
    st.files.push_back(judge(disk, TrackedKind::artifact, a, &ArtifactItem::path, artifact_state));
    judge_layers(disk, view, a.layer, st.files.back());
    if (a.existed) st.snapshot_bytes += backup_bytes(disk, store, a.backup);
  }
  for (const auto& c : e.caches) {
    st.files.push_back(judge_cache(disk, store, c));
    st.snapshot_bytes += backup_bytes(disk, store, c.backup_tar) + backup_bytes(disk, store, c.backup_dir);
  }
  return st;
}

// Per entry key ("module:M", "rebind:T->IM.IA", "capture:T"): processes applied, calls counted.
struct Usage {
  std::size_t processes = 0, running = 0;
  std::optional<std::uint64_t> calls;
};

bool is_record_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && fs::path(name).extension() == ".json";
}

// Counts the live records (_stats/live/) that have no final record of the same name yet: processes
// still running, and processes killed before they could write one (they applied all the same).
void count_live_records(DiskReader& disk, const fs::path& dir, const std::set<std::string>& finals,
                        const std::optional<OverlayIdentity>& mine, std::map<std::string, Usage>& usage) {
  if (disk.info(dir, Follow::no).type != FileType::directory) return;
  for (const auto& e : disk.list_dir(dir)) {
    if (!is_record_name(e.name) || finals.count(e.name)) continue;
    std::optional<PythonUse> u;
    try {
      u = parse_live_record(read_small_file(disk, dir / e.name, 1 << 20));
    } catch (const std::exception&) {
      continue;  // its process exited meanwhile: its final record was read, or will be next time
    }
    if (!u || !u->overlay || u->overlay != mine) continue;  // another overlay's, copied along
    auto p = read_process(disk, u->pid);
    bool alive = p && p->start_ticks == u->start_ticks;
    for (const auto& k : u->applied) {
      ++usage[k].processes;
      if (alive) ++usage[k].running;
    }
  }
}

// Sums the records of _stats/ (one per process; unreadable ones are skipped, and so are those
// made under another overlay, which a copy of it carries along).
std::map<std::string, Usage> python_usage(DiskReader& disk, const fs::path& overlay) {
  std::map<std::string, Usage> usage;
  fs::path dir = overlay / kStatsDirName;
  if (disk.info(dir, Follow::no).type != FileType::directory) return usage;
  std::optional<OverlayIdentity> mine = overlay_identity(disk, overlay);
  std::set<std::string> finals;
  for (const auto& e : disk.list_dir(dir)) {
    if (!is_record_name(e.name)) continue;
    finals.insert(e.name);
    json rec;
    try {
      rec = parse_json_bytes(read_small_file(disk, dir / e.name, 1 << 20));
    } catch (const std::exception&) {
      continue;
    }
    if (!rec.is_object() || !mine || record_identity(rec) != mine) continue;
    if (auto a = rec.find("applied"); a != rec.end() && a->is_array())
      for (const auto& k : *a)
        if (k.is_string()) ++usage[k.get<std::string>()].processes;
    if (auto c = rec.find("calls"); c != rec.end() && c->is_object())
      for (const auto& [k, n] : c->items())
        if (n.is_number_unsigned()) {
          auto& u = usage[k];
          u.calls = u.calls.value_or(0) + n.get<std::uint64_t>();
        }
  }
  count_live_records(disk, overlay / kLiveStatsDirName, finals, mine, usage);
  return usage;
}

}  // namespace

std::vector<PythonStatus> python_entries_status(DiskReader& disk, const fs::path& overlay, const Manifest& manifest) {
  std::vector<PythonStatus> out;
  auto usage = python_usage(disk, overlay);
  for (const PyEntry& e : python_entries(manifest.doc)) {
    PythonStatus p;
    p.kind = e.kind;
    p.name = e.name;
    p.detail = e.detail;
    p.patch_id = e.patch_id;
    if (e.file) {
      p.detail = (overlay / *e.file).string();
      p.present = is_safe_relative(*e.file) && disk.info(overlay / *e.file, Follow::no).type == FileType::regular;
    }
    if (e.count_calls) p.calls = 0;
    if (e.distribution.is_object()) {
      try {
        p.made_against = e.distribution.get<Distribution>();
        p.installed_now = installed_instead(disk, *p.made_against);
      } catch (const nlohmann::json::exception& err) {  // a hand-edited record: nothing to compare
        spdlog::debug("{} {}: unreadable distribution record: {}", e.kind, e.name, err.what());
      }
    }
    if (auto it = usage.find(e.key); it != usage.end()) {
      p.applied_processes = it->second.processes;
      p.running_processes = it->second.running;
      if (p.calls && it->second.calls) p.calls = *it->second.calls;
    }
    out.push_back(std::move(p));
  }
  return out;
}

const char* to_string(TrackedKind k) {
  switch (k) {
    case TrackedKind::source:
      return "source";
    case TrackedKind::created:
      return "created";
    case TrackedKind::deleted:
      return "deleted";
    case TrackedKind::artifact:
      return "artifact";
    case TrackedKind::cache:
      return "cache";
  }
  return "?";
}

const char* to_string(FileState s) {
  switch (s) {
    case FileState::original:
      return "original";
    case FileState::patched:
      return "patched";
    case FileState::rebuilt:
      return "rebuilt";
    case FileState::invalidated:
      return "invalidated";
    case FileState::drifted:
      return "drifted";
    case FileState::missing:
      return "missing";
    case FileState::redirected:
      return "redirected";
    case FileState::covered:
      return "covered";
    case FileState::stranded:
      return "stranded";
  }
  return "?";
}

std::size_t StatusReport::not_original() const {
  std::size_t n = 0;
  for (const auto& e : natives)
    n += static_cast<std::size_t>(std::count_if(e.files.begin(), e.files.end(),
                                                [](const TrackedFile& f) { return f.state != FileState::original; }));
  return n;
}

std::size_t StatusReport::build_not_back() const {
  std::size_t n = 0;
  for (const auto& e : natives) n += e.build_not_back.size();
  return n;
}

std::size_t StatusReport::untracked_as_built() const {
  std::size_t n = untracked_left.size();
  for (const auto& e : natives)
    n += std::count_if(e.untracked.begin(), e.untracked.end(),
                       [](const UntrackedOutput& u) { return u.clear_reason.empty(); });
  return n;
}

std::size_t StatusReport::running_reverted() const {
  return static_cast<std::size_t>(
      std::count_if(engagement.uses.begin(), engagement.uses.end(), [](const ArtifactUse& u) { return u.reverted; }));
}

StatusReport overlay_status(DiskReader& disk, const fs::path& overlay_in, Absent absent) {
  StatusReport r;
  r.overlay = absolute_normal(overlay_in);
  FileInfo fi = disk.info(r.overlay, Follow::yes);
  if (!fi.exists() && absent == Absent::nothing_recorded && !disk.info(r.overlay, Follow::no).exists()) {
    r.exists = false;
    return r;
  }
  if (!fi.exists()) throw Error("overlay does not exist: " + r.overlay.string());
  if (fi.type != FileType::directory) throw Error("overlay is not a directory: " + r.overlay.string());
  auto m = load_manifest(disk, r.overlay);
  if (!m) return r;
  r.has_manifest = true;
  BackupPaths store(disk, r.overlay);
  LayerView view(disk, *m, r.overlay);
  for (const auto& e : m->natives) {
    r.natives.push_back(native_status(disk, store, r.overlay, e, view));
    r.natives.back().untracked = still_as_built(disk, e.untracked);
    r.natives.back().served_from = e.served_from;
    r.natives.back().build_failed = e.build_failed;
    r.natives.back().build_traced = e.build_traced;
    r.natives.back().build_changes = e.build_changes.size();
    r.natives.back().build_not_back = changes_not_as_before(disk, e.build_changes);
    r.natives.back().build_unobserved = e.build_unobserved;
    r.natives.back().build_untraced = e.build_untraced;
    r.natives.back().why_fresh_times = why_fresh_times(disk, e, r.overlay);
  }
  r.untracked_left = still_as_built(disk, m->untracked);
  r.fold_out = m->fold_out;
  for (const auto& l : m->litter)
    if (!is_within(fs::path(l), r.overlay) && disk.info(l, Follow::no).exists()) r.litter_left.push_back(l);
  r.engagement = judge_engagement(disk, *m, scan_for_artifacts(disk, *m));
  r.engagement.python = live_python_uses(disk, r.overlay);
  r.pythons = python_entries_status(disk, r.overlay, *m);
  r.unapplied_sections = unapplied_sections(m->doc);
  if (!r.pythons.empty()) {
    r.sitecustomize = classify_sitecustomize(disk, r.overlay);
    if (r.sitecustomize == SitecustomizeKind::generated)
      r.sitecustomize_by = sitecustomize_generator(read_small_file(disk, r.overlay / "sitecustomize.py", 1 << 20));
  }
  return r;
}

std::vector<WhichHit> which_changed(DiskReader& disk, const std::vector<fs::path>& overlays, const fs::path& path_in) {
  std::vector<std::string> names = {absolute_normal(path_in).string()};
  best_effort("the path is matched by its spelling alone",
              [&] { names.push_back(disk.real_path(names.front()).string()); });
  auto is_it = [&](const std::string& p) { return std::find(names.begin(), names.end(), p) != names.end(); };
  std::vector<WhichHit> hits;
  for (const auto& ov : overlays) {
    StatusReport r;
    try {
      r = overlay_status(disk, ov);
    } catch (const std::exception&) {
      continue;  // gone or unreadable: it changes nothing we could name
    }
    for (const auto& e : r.natives) {
      for (const auto& f : e.files)
        if (is_it(f.path))
          hits.push_back({r.overlay, e.id, e.patch_id, to_string(f.kind), to_string(f.state), f.layers});
      for (const auto& u : e.untracked)
        if (is_it(u.path)) hits.push_back({r.overlay, e.id, e.patch_id, "untracked output", u.change});
    }
    for (const auto& u : r.untracked_left)
      if (is_it(u.path))
        hits.push_back({r.overlay, u.entry, std::nullopt, "untracked output", u.change + " (entry reverted)"});
  }
  return hits;
}

// ---- JSON (status, engaged and which print these)

namespace {

// The owner's JSON form (overlay/owner.hpp), with `alive` (true while the owner may still be at
// work, unseen too) and `liveness`.
nlohmann::json owner_json(const Owner& o, Liveness l) {
  nlohmann::json j = o;
  j["alive"] = l != Liveness::gone;
  j["liveness"] = to_string(l);
  return j;
}

nlohmann::json distribution_json(const PythonStatus& p) {
  if (!p.made_against) return nullptr;
  nlohmann::json j = *p.made_against;
  j["changed"] = p.installed_now.has_value();
  j["installed_now"] = !p.installed_now           ? nlohmann::json(p.made_against->version)
                       : p.installed_now->empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json(*p.installed_now);
  return j;
}

}  // namespace

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

PatchGroups patch_groups(const StatusReport& r) {
  PatchGroups groups;
  auto group = [&](const std::string& id) -> auto& {
    for (auto& g : groups)
      if (g.first == id) return g.second;
    groups.push_back({id, {}});
    return groups.back().second;
  };
  for (const auto& e : r.natives)
    if (e.patch_id) group(*e.patch_id).first.push_back(e.id);
  for (const auto& p : r.pythons)
    if (p.patch_id) group(*p.patch_id).second.push_back(p.name);
  return groups;
}

const char* sitecustomize_word(SitecustomizeKind k) {
  switch (k) {
    case SitecustomizeKind::absent:
      return "absent";
    case SitecustomizeKind::current:
      return "current";
    case SitecustomizeKind::generated:
      return "generated";
    case SitecustomizeKind::foreign:
      return "foreign";
  }
  return "?";
}

nlohmann::json python_entries_json(const std::vector<PythonStatus>& pythons) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : pythons)
    a.push_back({{"kind", p.kind},
                 {"name", p.name},
                 {"detail", p.detail},
                 {"present", p.present},
                 {"applied_processes", p.applied_processes},
                 {"running_processes", p.running_processes},
                 {"calls", p.calls ? nlohmann::json(*p.calls) : nlohmann::json(nullptr)},
                 {"patch_id", p.patch_id ? nlohmann::json(*p.patch_id) : nlohmann::json(nullptr)},
                 {"distribution", distribution_json(p)}});
  return a;
}

// A file's stack, bottom first: [{overlay, entry, state}].
nlohmann::json layers_json(const FileStack& stack) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : stack) a.push_back({{"overlay", l.overlay}, {"entry", l.entry}, {"state", to_string(l.state)}});
  return a;
}

nlohmann::json StatusReport::to_json() const {
  const StatusReport& r = *this;
  nlohmann::json j = {{"overlay", r.overlay.string()},
                      {"exists", r.exists},
                      {"has_manifest", r.has_manifest},
                      {"clean", r.clean()},
                      {"not_original", r.not_original()},
                      {"build_not_back", r.build_not_back()},
                      {"untracked_outputs", untracked_json(r.untracked_left)},
                      {"litter", r.litter_left},
                      {"processes", processes_json(r.engagement)},
                      {"unreadable_processes", r.engagement.unreadable}};
  j["natives"] = nlohmann::json::array();
  for (const auto& e : r.natives) {
    nlohmann::json n = {{"id", e.id}, {"snapshot_bytes", e.snapshot_bytes}};
    n["owner"] = e.owner ? owner_json(*e.owner, e.owner_liveness) : nlohmann::json(nullptr);
    n["created_at"] = e.created_at ? nlohmann::json(*e.created_at) : nlohmann::json(nullptr);
    n["age_s"] = e.created_at ? nlohmann::json(seconds_now() - *e.created_at) : nlohmann::json(nullptr);
    n["build_log"] = e.build_log ? nlohmann::json(*e.build_log) : nlohmann::json(nullptr);
    n["patch_id"] = e.patch_id ? nlohmann::json(*e.patch_id) : nlohmann::json(nullptr);
    n["served_from_store"] = e.served_from ? nlohmann::json(*e.served_from) : nlohmann::json(nullptr);
    n["build_failed"] = e.build_failed ? nlohmann::json(*e.build_failed) : nlohmann::json(nullptr);
    n["build"] = {{"traced", e.build_traced},
                  {"changes", e.build_changes},
                  {"not_back", e.build_not_back},
                  {"unobserved", e.build_unobserved},
                  {"untraced", e.build_untraced ? nlohmann::json(*e.build_untraced) : nlohmann::json(nullptr)}};
    n["revert_mtimes"] = e.why_fresh_times.empty() ? nlohmann::json({{"rule", "original"}})
                                                   : nlohmann::json({{"rule", "fresh"}, {"why", e.why_fresh_times}});
    n["files"] = nlohmann::json::array();
    for (const auto& f : e.files) {
      nlohmann::json fj = {{"kind", to_string(f.kind)}, {"path", f.path}, {"state", to_string(f.state)}};
      if (!f.aside.empty()) fj["aside"] = f.aside;
      if (!f.note.empty()) fj["note"] = f.note;
      if (!f.metadata.empty()) fj["metadata_drift"] = f.metadata;
      if (!f.layers.empty()) fj["layers"] = layers_json(f.layers);
      n["files"].push_back(std::move(fj));
    }
    n["untracked_outputs"] = untracked_json(e.untracked);
    j["natives"].push_back(std::move(n));
  }
  j["fold_out"] =
      r.fold_out
          ? nlohmann::json{{"into", r.fold_out->overlay}, {"fold", r.fold_out->fold}, {"entries", r.fold_out->entries}}
          : nlohmann::json(nullptr);
  j["python"] = python_entries_json(r.pythons);
  j["sitecustomize"] =
      r.pythons.empty() ? nlohmann::json(nullptr) : nlohmann::json(sitecustomize_word(r.sitecustomize));
  if (!r.sitecustomize_by.empty()) j["sitecustomize_by"] = r.sitecustomize_by;
  j["unapplied_sections"] = r.unapplied_sections;
  j["python_processes"] = python_processes_json(r.engagement);
  j["patches"] = nlohmann::json::array();
  for (const auto& [id, parts] : patch_groups(r))
    j["patches"].push_back({{"id", id}, {"natives", parts.first}, {"python", parts.second}});
  return j;
}

}  // namespace overlay
