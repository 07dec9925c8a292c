// `discover()`: walks up from the file and through the JIT cache roots, asks each build system's
// finder (src/discover/*.cpp) what builds it there, and ranks what they found.
#include "overlay/discover.hpp"

#include <algorithm>
#include <set>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/process_scan.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay {
namespace {

using namespace discover_parts;

// Ancestors of the file as given and as it really is, nearest first, up to `root`; each once,
// by its real path (which is what is reported).
std::vector<fs::path> ancestors(DiskReader& disk, const Target& t, const fs::path& root) {
  std::vector<fs::path> dirs;
  for (const auto& start : {t.given.parent_path(), t.real.parent_path()}) {
    for (fs::path d = start;; d = d.parent_path()) {
      add_unique(dirs, disk.real_path(d));
      if (d == root || d == d.root_path()) break;
    }
  }
  return dirs;
}

void candidates_at(DiskReader& disk, const fs::path& d, const Target& t, std::set<fs::path>& ninja_seen,
                   DiscoverReport& rep) {
  rep.searched.push_back(d.string());
  for (const auto& found : ninja_dirs_at(disk, d, t)) {
    fs::path nd = disk.real_path(found);
    if (!ninja_seen.insert(nd).second) continue;
    if (nd != d) rep.searched.push_back(nd.string());
    if (auto c = ninja_candidate(disk, nd, t)) rep.candidates.push_back(std::move(*c));
  }
  for (const auto& found : cmake_makefile_dirs_at(disk, d)) {
    fs::path md = disk.real_path(found);
    if (!ninja_seen.insert(md).second) continue;
    if (md != d) rep.searched.push_back(md.string());
    if (auto c = cmake_makefiles_candidate(disk, md, t)) rep.candidates.push_back(std::move(*c));
  }
  if (has_makefile(disk, d))
    if (auto c = make_candidate(disk, d, t)) rep.candidates.push_back(std::move(*c));
  if (auto c = setuptools_candidate(disk, d, t)) rep.candidates.push_back(std::move(*c));
  if (auto c = config_candidate(disk, d)) rep.candidates.push_back(std::move(*c));
}

// Editable installs whose loader lies in the sys.path dir `d`: their build dir's candidate (made
// here, or already found on the walk up) becomes theirs.
void editable_candidates(DiskReader& disk, const fs::path& d, const Target& t, std::set<fs::path>& ninja_seen,
                         DiscoverReport& rep) {
  for (const auto& b : editable_builds(disk, d)) {
    rep.searched.push_back(b.loader.string() + " (editable install)");
    fs::path nd = disk.real_path(b.build_dir);
    auto known = std::find_if(rep.candidates.begin(), rep.candidates.end(),
                              [&](const BuildCandidate& c) { return c.build_cwd == nd; });
    if (known != rep.candidates.end()) {
      adopt_editable(disk, b, *known);
    } else if (ninja_seen.insert(nd).second) {
      if (auto c = ninja_candidate(disk, nd, t)) {
        adopt_editable(disk, b, *c);
        rep.candidates.push_back(std::move(*c));
      }
    }
  }
}

// (device, inode) of every one of `files` some process we can read has mapped.
std::set<std::pair<dev_t, ino_t>> mapped_files(DiskReader& disk, const std::vector<std::string>& files) {
  std::set<std::pair<dev_t, ino_t>> out;
  ProcessScan scan;
  try {
    scan = scan_processes(disk, files);
  } catch (const std::exception&) {
    return out;  // no /proc: nothing ranks as live
  }
  for (const auto& p : scan.processes)
    for (const auto& f : p.files) out.emplace(f.dev, f.ino);
  return out;
}

// Live first (a running process maps one of its artifacts), then the most recently built, then
// the fewest artifacts; a config's command (no graph) last.
void rank(DiskReader& disk, std::vector<BuildCandidate>& cands) {
  std::set<std::pair<dev_t, ino_t>> mapped;
  bool any_library = std::any_of(cands.begin(), cands.end(), [](const BuildCandidate& c) {
    return std::any_of(c.artifacts.begin(), c.artifacts.end(),
                       [](const fs::path& a) { return is_shared_library_name(a); });
  });
  if (cands.size() > 1 && any_library) {
    std::vector<std::string> files;
    for (const auto& c : cands)
      for (const auto& a : c.artifacts) files.push_back(disk.real_path(a).string());
    mapped = mapped_files(disk, files);
  }
  for (auto& c : cands) {
    c.built_at_ns = newest_mtime_ns(disk, c.artifacts);
    for (const auto& a : c.artifacts) {
      FileInfo fi = disk.info(a, Follow::yes);
      if (fi.exists() && mapped.count({fi.dev, fi.ino})) {
        c.live = true;
        c.evidence.push_back(a.string() + ": mapped by a running process (the live build)");
        break;
      }
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const BuildCandidate& a, const BuildCandidate& b) {
    auto key = [](const BuildCandidate& c) {
      return std::make_tuple(c.kind == "config", !c.live, -c.built_at_ns, c.artifacts.size());
    };
    return key(a) < key(b);
  });
  for (std::size_t i = 0; i < cands.size(); ++i) {
    auto& c = cands[i];
    std::string why = c.kind == "config" ? std::string("a task config's command (no build graph to measure)")
                                         : std::string(c.live ? "live; " : "") + "rebuilds " +
                                               std::to_string(c.artifacts.size()) + " artifact(s)";
    if (i > 0 && c.kind != "config" && !c.live && c.built_at_ns < cands[0].built_at_ns)
      why += "; built before rank 1's";
    c.evidence.push_back("rank " + std::to_string(i + 1) + " of " + std::to_string(cands.size()) + ": " + why);
  }
}

}  // namespace

std::vector<std::string> BuildCandidate::add_native_args(const fs::path& target) const {
  std::vector<std::string> a = {"--target", target.string()};
  for (const auto& x : artifacts) a.insert(a.end(), {"--artifact", x.string()});
  for (const auto& x : caches) a.insert(a.end(), {"--invalidate-cache", x.string()});
  for (const auto& cmd : build_cmds) a.insert(a.end(), {"--build-cmd", join_words(cmd)});
  if (!build_cmds.empty()) a.insert(a.end(), {"--build-cwd", build_cwd.string()});
  return a;
}

DiscoverReport discover(DiskReader& disk, const DiscoverRequest& req) {
  DiscoverReport rep;
  rep.target = absolute_normal(req.target);
  FileInfo fi = disk.info(rep.target, Follow::yes);
  if (!fi.exists()) throw Error("target does not exist: " + rep.target.string());
  if (fi.type != FileType::regular) throw Error("target is not a regular file: " + rep.target.string());
  Target t{rep.target, disk.real_path(rep.target)};
  std::set<fs::path> ninja_seen;
  for (const auto& d : ancestors(disk, t, absolute_normal(req.root))) candidates_at(disk, d, t, ninja_seen, rep);
  if (req.default_cache_roots)
    for (const auto& d : python_path_dirs(disk)) editable_candidates(disk, d, t, ninja_seen, rep);
  for (const auto& r : jit_roots(disk, req, t)) {
    rep.searched.push_back(r.string() + " (JIT cache root)");
    jit_candidates(disk, r, t, rep.candidates);
  }
  rank(disk, rep.candidates);
  return rep;
}

}  // namespace overlay
