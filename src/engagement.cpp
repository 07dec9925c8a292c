#include "overlay/engagement.hpp"

#include <algorithm>

#include "overlay/file_ops.hpp"

namespace overlay {
namespace {

// The spellings maps may use for an artifact: its path as recorded and as it really is.
std::vector<std::string> spellings(Disk& disk, const std::string& path) {
  std::vector<std::string> s = {path};
  try {
    std::string real = disk.real_path(path).string();
    if (real != path) s.push_back(real);
  } catch (const std::exception&) {
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

const char* to_string(MapState s) {
  switch (s) {
    case MapState::patched: return "patched";
    case MapState::stale: return "stale";
    case MapState::original: return "original";
  }
  return "?";
}

std::vector<std::string> tracked_artifact_paths(Disk& disk, const Manifest& m) {
  std::vector<std::string> out;
  for (const auto& e : m.natives)
    for (const auto& a : e.artifacts)
      for (const auto& s : spellings(disk, a.path)) out.push_back(s);
  for (const auto& r : m.running) out.push_back(r.path);
  return out;
}

ProcessScan scan_for_artifacts(Disk& disk, const Manifest& m) {
  std::vector<std::string> paths = tracked_artifact_paths(disk, m);
  if (paths.empty()) return {};
  try {
    return scan_processes(disk, paths);
  } catch (const std::exception&) {
    return {};
  }
}

EngagementReport judge_engagement(Disk& disk, const Manifest& m, const ProcessScan& scan) {
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

std::vector<RunningPatched> running_patched_of(Disk& disk, const NativeEntry& e, const ProcessScan& scan) {
  std::vector<RunningPatched> out;
  for (const auto& a : e.artifacts) {
    FileInfo now = disk.info(a.path, Follow::yes);
    if (!rebuilt(a, now)) continue;
    auto names_a = spellings(disk, a.path);
    for (const auto& p : scan.processes)
      for (const auto& f : p.files)
        if (names(names_a, f.path) && !f.deleted && f.dev == now.dev && f.ino == now.ino)
          out.push_back({a.path, static_cast<std::uint64_t>(f.dev), static_cast<std::uint64_t>(f.ino), p.pid, p.start_ticks,
                         p.cmdline, e.id});
  }
  return out;
}

std::vector<RunningPatched> still_running(const std::vector<RunningPatched>& recorded, const ProcessScan& scan) {
  std::vector<RunningPatched> out;
  for (const auto& x : recorded) {
    const ProcessInfo* p = scan.find(static_cast<pid_t>(x.pid));
    if (p == nullptr || p->start_ticks != x.start_ticks) continue;
    bool maps = std::any_of(p->files.begin(), p->files.end(), [&](const MappedFile& f) {
      return static_cast<std::uint64_t>(f.dev) == x.dev && static_cast<std::uint64_t>(f.ino) == x.ino && f.path == x.path;
    });
    if (maps) out.push_back(x);
  }
  return out;
}

Verdict engagement_verdict(const EngagementReport& r, const ProcessScan& scan, const std::vector<pid_t>& pids) {
  std::vector<pid_t> alive;
  for (pid_t pid : pids)
    if (scan.find(pid)) alive.push_back(pid);
  if (alive.empty()) return {false, "process " + std::to_string(pids.empty() ? 0 : pids.front()) + " is gone"};
  std::vector<const ProcessInfo*> tree = scan.with_descendants(alive);
  std::size_t patched = 0;
  std::string first;
  for (const ProcessInfo* p : tree)
    for (const auto& u : r.uses) {
      if (u.pid != p->pid) continue;
      std::string who = "process " + std::to_string(u.pid) + (p->pid == alive.front() ? "" : " (a descendant)");
      if (u.reverted) return {false, who + " maps " + u.artifact + " that revert replaced"};
      if (u.state == MapState::stale) return {false, who + " maps the stale build of " + u.artifact + " (started before it was rebuilt: restart it)"};
      if (u.state == MapState::original) return {false, who + " maps " + u.artifact + ", which the build did not rebuild"};
      if (first.empty()) first = who + " maps the patched " + u.artifact;
      ++patched;
    }
  if (patched == 0)
    return {false, "process " + std::to_string(alive.front()) + " and its " + std::to_string(tree.size() - 1) +
                       " descendant(s) map none of the tracked artifacts"};
  return {true, first + (patched > 1 ? " (and " + std::to_string(patched - 1) + " more)" : "")};
}

}  // namespace overlay
