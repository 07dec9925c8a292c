#include "overlay/build_watch.hpp"

#include <algorithm>

#include "overlay/file_ops.hpp"

namespace overlay {
namespace {

bool below(const fs::path& p, const fs::path& dir) {
  auto rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// The dirs with the nested ones dropped (each file is pictured once), existing ones only.
std::vector<fs::path> outermost(Disk& disk, std::vector<fs::path> dirs) {
  for (auto& d : dirs) d = absolute_normal(d);
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  std::vector<fs::path> out;
  for (const auto& d : dirs) {
    if (disk.info(d, Follow::no).type != FileType::directory) continue;
    if (std::none_of(out.begin(), out.end(), [&](const fs::path& o) { return below(d, o); })) out.push_back(d);
  }
  return out;
}

}  // namespace

bool is_build_bookkeeping(const fs::path& p) {
  std::string n = p.filename().string();
  auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  // build.ninja: generators (torch's BuildExtension, CMake, Meson) rewrite it; it holds no code.
  return n == ".ninja_log" || n == ".ninja_deps" || n == "build.ninja" || ends(".d") || ends(".pyc") || ends(".tlog");
}

BuildWatch BuildWatch::start(Disk& disk, std::vector<fs::path> dirs, std::vector<fs::path> tracked, std::vector<fs::path> skipped,
                             std::size_t max_files) {
  BuildWatch w;
  w.dirs_ = outermost(disk, std::move(dirs));
  for (auto& t : tracked) w.tracked_.push_back(absolute_normal(t));
  std::sort(w.tracked_.begin(), w.tracked_.end());
  for (auto& s : skipped) w.skipped_.push_back(absolute_normal(s));
  w.max_files_ = max_files;
  w.seen_ = w.picture(disk, w.off_);
  return w;
}

std::map<fs::path, FileStamp> BuildWatch::picture(Disk& disk, std::string& why_off) const {
  std::map<fs::path, FileStamp> files;
  for (const auto& dir : dirs_) {
    if (!why_off.empty()) break;
    walk_tree(disk, dir, [&](const fs::path& rel, FileType type) {
      fs::path p = dir / rel;
      if (type == FileType::directory) {
        bool skip = std::any_of(skipped_.begin(), skipped_.end(), [&](const fs::path& s) { return p == s || below(p, s); });
        return skip || rel.filename() == "__pycache__" ? WalkStep::skip : WalkStep::descend;
      }
      if (files.size() >= max_files_) {
        why_off = "more than " + std::to_string(max_files_) + " files under " + dir.string();
        return WalkStep::skip;
      }
      if (type != FileType::regular && type != FileType::none) return WalkStep::descend;
      if (is_build_bookkeeping(p) || std::binary_search(tracked_.begin(), tracked_.end(), p)) return WalkStep::descend;
      FileInfo fi = disk.info(p, Follow::no);
      if (fi.type == FileType::regular) files.emplace(p, stamp_of(fi));
      return WalkStep::descend;
    }, [](const fs::path&, const std::string&) {});
  }
  if (!why_off.empty()) files.clear();
  return files;
}

std::vector<UntrackedOutput> BuildWatch::finish(Disk& disk) const {
  std::vector<UntrackedOutput> out;
  if (!off_.empty()) return out;
  std::string off_now;
  for (const auto& [p, stamp] : picture(disk, off_now)) {
    auto was = seen_.find(p);
    if (was != seen_.end() && was->second == stamp) continue;
    out.push_back({p.string(), was == seen_.end() ? "created" : "changed", stamp, "", {}});
  }
  return out;
}

std::vector<UntrackedOutput> still_as_built(Disk& disk, const std::vector<UntrackedOutput>& outputs) {
  std::vector<UntrackedOutput> out;
  for (const auto& u : outputs) {
    FileInfo fi = disk.info(u.path, Follow::no);
    if (fi.type == FileType::regular && stamp_of(fi) == u.stamp) out.push_back(u);
  }
  return out;
}

void keep_untracked_of_reverted(Disk& disk, Manifest& m, const NativeEntry& reverted) {
  for (auto u : reverted.untracked) {
    u.entry = reverted.id;
    u.build_cmds = reverted.build_cmds;
    auto same = std::find_if(m.untracked.begin(), m.untracked.end(), [&](const UntrackedOutput& x) { return x.path == u.path; });
    if (same != m.untracked.end()) *same = u;
    else m.untracked.push_back(u);
  }
  m.untracked = still_as_built(disk, m.untracked);
}

}  // namespace overlay
