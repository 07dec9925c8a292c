#include "overlay/engagement.hpp"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/python/entries.hpp"

namespace overlay {
namespace {

// The spellings maps may use for an artifact: its path as recorded and as it really is.
std::vector<std::string> spellings(DiskReader& disk, const std::string& path) {
  std::vector<std::string> s = {path};
  try {
    std::string real = disk.real_path(path).string();
    if (real != path) s.push_back(real);
  } catch (const std::exception& e) {
    note_ignored("the path is matched by its spelling alone", e.what());
  }
  return s;
}

bool names(const std::vector<std::string>& spellings, const std::string& path) {
  return std::find(spellings.begin(), spellings.end(), path) != spellings.end();
}

// Whether the file at the artifact's path now is a rebuild (its stamp differs from the original's).
bool rebuilt(const ArtifactItem& a, const FileInfo& now) {
  return now.exists() && (!a.existed || !a.stamp || stamp_of(now) != *a.stamp);
}

}  // namespace

nlohmann::json python_processes_json(const EngagementReport& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& u : r.python)
    a.push_back({{"pid", u.pid},
                 {"start_ticks", u.start_ticks},
                 {"cmdline", u.cmdline},
                 {"applied", u.applied},
                 {"failed", u.failed},
                 {"pending", u.pending}});
  return a;
}

ArtifactUse still_running_use(const RunningPatched& x) {
  return {static_cast<pid_t>(x.pid), x.start_ticks, x.cmdline, x.path, x.entry, MapState::patched, true};
}

nlohmann::json processes_json(const EngagementReport& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& u : r.uses)
    a.push_back({{"pid", u.pid},
                 {"start_ticks", u.start_ticks},
                 {"cmdline", u.cmdline},
                 {"artifact", u.artifact},
                 {"entry", u.entry},
                 {"state", to_string(u.state)},
                 {"reverted", u.reverted}});
  return a;
}

const char* to_string(MapState s) {
  switch (s) {
    case MapState::patched:
      return "patched";
    case MapState::stale:
      return "stale";
    case MapState::original:
      return "original";
  }
  return "?";
}

std::vector<std::string> tracked_artifact_paths(DiskReader& disk, const Manifest& m) {
  std::vector<std::string> out;
  for (const auto& e : m.natives)
    for (const auto& a : e.artifacts)
      for (const auto& s : spellings(disk, a.path)) out.push_back(s);
  for (const auto& r : m.running) out.push_back(r.path);
  return out;
}

ProcessScan scan_for_artifacts(DiskReader& disk, const Manifest& m) {
  std::vector<std::string> paths = tracked_artifact_paths(disk, m);
  if (paths.empty()) return {};
  try {
    return scan_processes(disk, paths);
  } catch (const std::exception&) {
    return {};
  }
}

ProcessScan scan_for_revert(DiskReader& disk, const Manifest& m) {
  bool mapped_maybe = !m.running.empty();
  for (const auto& e : m.natives)
    for (const auto& a : e.artifacts)
      if (!mapped_maybe && probe_open_elsewhere(a.path) != Openness::nowhere) mapped_maybe = true;
  return mapped_maybe ? scan_for_artifacts(disk, m) : ProcessScan{};
}

EngagementReport judge_engagement(DiskReader& disk, const Manifest& m, const ProcessScan& scan) {
  EngagementReport r;
  r.unreadable = scan.unreadable;
  for (const auto& e : m.natives) {
    for (const auto& a : e.artifacts) {
      auto names_a = spellings(disk, a.path);
      FileInfo now = disk.info(a.path, Follow::yes);
      for (const auto& p : scan.processes)
        for (const auto& f : p.files) {
          if (!names(names_a, f.path)) continue;
          bool current = now.exists() && !f.deleted && f.dev == now.dev && f.ino == now.ino;
          MapState st = !current ? MapState::stale : rebuilt(a, now) ? MapState::patched : MapState::original;
          r.uses.push_back({p.pid, p.start_ticks, p.cmdline, a.path, e.id, st, false});
        }
    }
  }
  for (const auto& x : still_running(m.running, scan))
    r.uses.push_back({static_cast<pid_t>(x.pid), x.start_ticks, x.cmdline, x.path, x.entry, MapState::patched, true});
  return r;
}

std::vector<RunningPatched> running_patched_of(DiskReader& disk, const NativeEntry& e, const ProcessScan& scan) {
  std::vector<RunningPatched> out;
  for (const auto& a : e.artifacts) {
    FileInfo now = disk.info(a.path, Follow::yes);
    if (!rebuilt(a, now)) continue;
    auto names_a = spellings(disk, a.path);
    for (const auto& p : scan.processes)
      for (const auto& f : p.files)
        if (names(names_a, f.path) && !f.deleted && f.dev == now.dev && f.ino == now.ino)
          out.push_back({a.path, static_cast<std::uint64_t>(f.dev), static_cast<std::uint64_t>(f.ino), p.pid,
                         p.start_ticks, p.cmdline, e.id});
  }
  return out;
}

std::vector<RunningPatched> still_running(const std::vector<RunningPatched>& recorded, const ProcessScan& scan) {
  std::vector<RunningPatched> out;
  for (const auto& x : recorded) {
    const ProcessInfo* p = scan.find(static_cast<pid_t>(x.pid));
    if (p == nullptr || p->start_ticks != x.start_ticks) continue;
    bool maps = std::any_of(p->files.begin(), p->files.end(), [&](const MappedFile& f) {
      return static_cast<std::uint64_t>(f.dev) == x.dev && static_cast<std::uint64_t>(f.ino) == x.ino &&
             f.path == x.path;
    });
    if (maps) out.push_back(x);
  }
  return out;
}

std::optional<OverlayIdentity> overlay_identity(DiskReader& disk, const fs::path& overlay) {
  FileInfo fi = disk.info(overlay, Follow::yes);
  if (fi.type != FileType::directory) return std::nullopt;
  return OverlayIdentity{static_cast<std::uint64_t>(fi.dev), static_cast<std::uint64_t>(fi.ino)};
}

std::optional<OverlayIdentity> record_identity(const nlohmann::json& record) {
  auto it = record.find("overlay");
  if (it == record.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned())
    return std::nullopt;
  return OverlayIdentity{(*it)[0].get<std::uint64_t>(), (*it)[1].get<std::uint64_t>()};
}

std::optional<PythonUse> parse_live_record(const std::string& text) {
  // The whole record on its first line; then, one per line, what applied or failed since (a
  // line not yet ended is still being appended: left for the next look).
  std::size_t nl = text.find('\n');
  nlohmann::json j;
  try {
    j = parse_json_bytes(text.substr(0, nl));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a torn or foreign record names no use
  }
  if (!j.is_object()) return std::nullopt;
  auto pid = j.find("pid"), ticks = j.find("start_ticks");
  if (pid == j.end() || !pid->is_number_unsigned() || ticks == j.end() || !ticks->is_number_unsigned())
    return std::nullopt;
  PythonUse u;
  u.pid = static_cast<pid_t>(pid->get<std::uint64_t>());
  u.start_ticks = ticks->get<std::uint64_t>();
  u.overlay = record_identity(j);
  auto keys = [&](const char* name, std::vector<std::string>& out) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_array()) return;
    for (const auto& k : *it)
      if (k.is_string()) out.push_back(k.get<std::string>());
  };
  keys("applied", u.applied);
  keys("failed", u.failed);
  keys("pending", u.pending);
  keys("displaced", u.displaced);
  for (std::size_t at = nl; at != std::string::npos && at + 1 < text.size();) {
    std::size_t end = text.find('\n', at + 1);
    if (end == std::string::npos) break;
    try {
      j = parse_json_bytes(text.substr(at + 1, end - at - 1));
    } catch (const nlohmann::json::exception&) {
      j = nullptr;
    }
    if (j.is_object()) {
      keys("applied", u.applied);
      keys("failed", u.failed);
      keys("displaced", u.displaced);
    }
    at = end;
  }
  std::set<std::string> done(u.applied.begin(), u.applied.end());
  done.insert(u.failed.begin(), u.failed.end());
  std::erase_if(u.pending, [&](const std::string& k) { return done.count(k) > 0; });
  return u;
}

std::vector<PythonUse> live_python_uses(DiskReader& disk, const fs::path& overlay, std::vector<std::string>* dead) {
  std::vector<PythonUse> out;
  fs::path dir = overlay / kLiveStatsDirName;
  if (disk.info(dir, Follow::no).type != FileType::directory) return out;
  std::optional<OverlayIdentity> mine = overlay_identity(disk, overlay);
  for (const auto& e : disk.list_dir(dir)) {
    if (e.name.empty() || e.name[0] == '.' || fs::path(e.name).extension() != ".json") continue;
    std::optional<PythonUse> u;
    try {
      u = parse_live_record(read_small_file(disk, dir / e.name, 1 << 20));
    } catch (const std::exception&) {
      continue;  // removed meanwhile (its process exited)
    }
    if (!u || !u->overlay || u->overlay != mine) continue;  // another overlay's, copied along
    std::optional<ProcessInfo> p = read_process(disk, u->pid);
    if (!p || p->start_ticks != u->start_ticks) {
      if (dead) dead->push_back(e.name);
      continue;
    }
    u->cmdline = p->cmdline;
    out.push_back(std::move(*u));
  }
  std::sort(out.begin(), out.end(), [](const PythonUse& a, const PythonUse& b) { return a.pid < b.pid; });
  return out;
}

std::vector<std::string> python_entry_keys(const Manifest& m) {
  std::vector<std::string> keys;
  for (const auto& e : python_entries(m.doc)) keys.push_back(e.key);
  return keys;
}

namespace {

// A GPU code object is read into memory by hipModuleLoad/cuModuleLoad, never mapped from its file.
bool is_gpu_code_object(const std::string& path) {
  static const std::vector<std::string> exts = {".hsaco", ".co", ".cubin", ".fatbin", ".ptx", ".hipfb"};
  std::string ext = fs::path(path).extension().string();
  return std::find(exts.begin(), exts.end(), ext) != exts.end();
}

}  // namespace

EngagementScope engagement_scope(const Manifest& m) {
  EngagementScope s;
  s.natives =
      std::any_of(m.natives.begin(), m.natives.end(), [](const NativeEntry& e) { return !e.artifacts.empty(); });
  for (const auto& e : m.natives)
    for (const auto& a : e.artifacts)
      if (is_gpu_code_object(a.path)) s.code_objects.push_back(a.path);
  s.python_keys = python_entry_keys(m);
  return s;
}

namespace {

std::string who(pid_t pid, pid_t root) {
  return "process " + std::to_string(pid) + (pid == root ? "" : " (a descendant)");
}

// The native part: every mapping in the tree patched, and at least one when `required`.
Verdict native_verdict(const EngagementReport& r, const std::vector<const ProcessInfo*>& tree, pid_t root,
                       bool required, const std::vector<std::string>& code_objects) {
  std::size_t patched = 0;
  std::string first;
  for (const ProcessInfo* p : tree)
    for (const auto& u : r.uses) {
      if (u.pid != p->pid) continue;
      std::string w = who(u.pid, root);
      if (u.reverted) return {false, w + " maps " + u.artifact + " that revert replaced"};
      if (u.state == MapState::stale)
        return {false, w + " maps the stale build of " + u.artifact + " (started before it was rebuilt: restart it)"};
      if (u.state == MapState::original)
        return {false, w + " maps " + u.artifact + ", which the build did not rebuild"};
      if (first.empty()) first = w + " maps the patched " + u.artifact;
      ++patched;
    }
  if (patched == 0)
    return {!required, "process " + std::to_string(root) + " and its " + std::to_string(tree.size() - 1) +
                           " descendant(s) map none of the tracked artifacts" +
                           (code_objects.empty()
                                ? std::string()
                                : " (" + code_objects.front() +
                                      " is a GPU code object: hipModuleLoad/cuModuleLoad read it, never map it, so "
                                      "/proc cannot show its use; track the .so that loads or embeds it)")};
  return {true, first + (patched > 1 ? " (and " + std::to_string(patched - 1) + " more)" : "")};
}

// The Python part: the overlay's sitecustomize.py ran in the tree, nothing failed there, and every
// entry applied in at least one of its processes.
Verdict python_verdict(const EngagementReport& r, const std::vector<const ProcessInfo*>& tree, pid_t root,
                       const std::vector<std::string>& keys) {
  std::set<pid_t> in;
  for (const ProcessInfo* p : tree) in.insert(p->pid);
  std::vector<const PythonUse*> ran;
  for (const auto& u : r.python)
    if (in.count(u.pid)) ran.push_back(&u);
  if (ran.empty())
    return {false, "process " + std::to_string(root) + " and its " + std::to_string(tree.size() - 1) +
                       " descendant(s) did not run the overlay's Python entries (started without the overlay first on "
                       "PYTHONPATH?)"};
  for (const PythonUse* u : ran)
    if (!u->failed.empty())
      return {false, who(u->pid, root) + ": " + u->failed.front() + " FAILED (its [overlay] lines on stderr say why)"};
  for (const PythonUse* u : ran)
    if (!u->displaced.empty())
      return {false, who(u->pid, root) + ": " + u->displaced.front() +
                         " was replaced by another overlay's entry on the same target, so the process does not run "
                         "this overlay's code there (its [overlay] lines on stderr name the other overlay)"};
  auto has = [](const std::vector<std::string>& v, const std::string& k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  for (const auto& k : keys) {
    if (std::any_of(ran.begin(), ran.end(), [&](const PythonUse* u) { return has(u->applied, k); })) continue;
    bool waiting = std::any_of(ran.begin(), ran.end(), [&](const PythonUse* u) { return has(u->pending, k); });
    return {false, "Python entry " + k + " has not applied in " + who(ran.front()->pid, root) +
                       (waiting ? " (its module is not imported yet)" : " (added after it started: restart it)")};
  }
  const PythonUse* first =
      *std::find_if(ran.begin(), ran.end(), [](const PythonUse* u) { return !u->applied.empty(); });
  return {true, who(first->pid, root) + " applied " + std::to_string(first->applied.size()) + " Python entr" +
                    (first->applied.size() == 1 ? "y" : "ies") +
                    (first->applied.size() < keys.size() ? " (the rest in other processes of its tree)" : "")};
}

}  // namespace

Verdict engagement_verdict(const EngagementReport& r, const ProcessScan& scan, const std::vector<pid_t>& pids,
                           const EngagementScope& scope) {
  std::vector<pid_t> alive;
  for (pid_t pid : pids)
    if (scan.find(pid)) alive.push_back(pid);
  if (alive.empty()) return {false, "process " + std::to_string(pids.empty() ? 0 : pids.front()) + " is gone"};
  std::vector<const ProcessInfo*> tree = scan.with_descendants(alive);
  // A stale or reverted mapping is never engaged, even in an overlay judged by its Python part
  // or left with no entry at all.
  Verdict native = native_verdict(r, tree, alive.front(), scope.natives, scope.code_objects);
  if (!native.engaged) return native;
  if (!scope.natives && scope.python_keys.empty())
    return {false, "the overlay has no entry that a process could run (none added, or all reverted)"};
  if (scope.python_keys.empty()) return native;
  Verdict python = python_verdict(r, tree, alive.front(), scope.python_keys);
  if (!python.engaged) python.why += scope.python_hint;
  if (!python.engaged || !scope.natives) return python;
  return {true, native.why + "; " + python.why};
}

}  // namespace overlay
