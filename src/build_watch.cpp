#include "overlay/build_watch.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include "overlay/build_changes.hpp"
#include "overlay/build_graph.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/object_files.hpp"
#include "overlay/store.hpp"

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

// Canonical when it can be (build graphs name libraries through their symlinks), else normal.
fs::path canonical_or_normal(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// The nearest ancestor of `p` holding build.ninja; empty when none does.
fs::path ninja_dir_of(const fs::path& p) {
  std::error_code ec;
  for (fs::path d = p.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path())
    if (fs::is_regular_file(d / "build.ninja", ec)) return d;
  return {};
}

// The explicit and implicit inputs of the edge that builds `out` (order-only ones never rebuild
// it), canonical; nullopt when Ninja does not know it.
std::optional<std::vector<fs::path>> rebuilding_inputs(const fs::path& dir, const fs::path& out) {
  for (const std::string& spelling : {out.lexically_relative(dir).string(), out.string()}) {
    NinjaNode n = ninja_query(dir, spelling);
    if (!n.known) continue;
    std::vector<fs::path> inputs;
    for (const auto& [item, kind] : n.inputs)
      if (kind != InputKind::order_only)
        inputs.push_back(canonical_or_normal(fs::path(item).is_absolute() ? fs::path(item) : dir / item));
    return inputs;
  }
  return std::nullopt;
}

}  // namespace

bool is_shared_library_name(const fs::path& p) {
  std::string n = p.filename().string();
  auto ends = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return n.find(".so.") != std::string::npos || ends(".so") || ends(".dylib");
}

namespace {

// Whether a compiler compiles `p` as a translation unit (anything else may be #included anywhere).
bool is_compiled_source(const fs::path& p) {
  static const std::set<std::string> exts = {".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".cu", ".hip", ".m", ".mm"};
  return exts.count(p.extension().string()) > 0;
}

// Why `out` holds none of the patched code by its own bytes; "" when they do not show it.
std::string clear_by_bytes(Disk& disk, const fs::path& out, const std::vector<fs::path>& patched) {
  FileInfo fi = disk.info(out, Follow::no);
  if (fi.type == FileType::regular && fi.size == 0) return "empty: it holds no code";
  if (out.extension() == ".a" && is_thin_archive(disk, out))
    return "a thin archive: its members' paths, not their code";
  if (patched.empty() || !std::all_of(patched.begin(), patched.end(), is_compiled_source)) return "";
  auto files = object_source_files(disk, out);
  if (!files || files->empty()) return "";
  for (const auto& f : *files)
    for (const auto& p : patched)
      if (fs::path(f).filename() == p.filename()) return "";
  return "compiled from " + files->front() + " (its symbol table), not from a patched source";
}

// What a changed file may carry into what is built from it.
enum class Carries { shared_library, nothing_patched, maybe_patched };

// Marks the outputs a Ninja edge built only from changed files that carry no patched code into it
// (shared libraries, which a link refers to by name, and outputs already judged clear), to a
// fixed point: a library relinked against a relinked library holds no patched code either.
void mark_relinked(std::vector<UntrackedOutput>& outputs, const std::vector<fs::path>& changed) {
  std::map<fs::path, Carries> carries;
  for (const auto& c : changed)
    carries[canonical_or_normal(c)] = is_shared_library_name(c) ? Carries::shared_library : Carries::maybe_patched;
  std::map<std::size_t, std::vector<fs::path>> inputs;
  std::size_t queries = 0;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    fs::path out(outputs[i].path);
    carries[canonical_or_normal(out)] =
        outputs[i].clear_reason.empty() ? Carries::maybe_patched : Carries::nothing_patched;
    fs::path dir = outputs[i].clear_reason.empty() && queries < kMaxRelinkQueries ? ninja_dir_of(out) : fs::path();
    if (dir.empty()) continue;
    ++queries;
    if (auto in = rebuilding_inputs(dir, out)) inputs[i] = std::move(*in);
  }
  for (bool more = true; more;) {
    more = false;
    for (auto& [i, ins] : inputs) {
      UntrackedOutput& u = outputs[i];
      if (!u.clear_reason.empty()) continue;
      std::string lib;
      bool any = false, patched = false;
      for (const auto& in : ins) {
        auto c = carries.find(in);
        if (c == carries.end()) continue;  // not changed by this build
        any = true;
        patched = patched || c->second == Carries::maybe_patched;
        if (c->second == Carries::shared_library && lib.empty()) lib = in.string();
      }
      if (!any || patched) continue;
      u.clear_reason = lib.empty() ? "built only from outputs that hold none of the patched code"
                                   : "relinked against " + lib + " only";
      carries[canonical_or_normal(u.path)] =
          is_shared_library_name(u.path) ? Carries::shared_library : Carries::nothing_patched;
      more = true;
    }
  }
}

}  // namespace

void judge_untracked(Disk& disk, std::vector<UntrackedOutput>& outputs, const std::vector<fs::path>& changed,
                     const std::vector<fs::path>& patched) {
  // Bounded: reading thousands of objects would cost more than the build that made them.
  for (std::size_t i = 0; i < outputs.size() && i < kMaxJudgedByBytes; ++i)
    outputs[i].clear_reason = clear_by_bytes(disk, outputs[i].path, patched);
  mark_relinked(outputs, changed);
}

bool is_build_bookkeeping(const fs::path& p) {
  std::string n = p.filename().string();
  auto ends = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  // build.ninja: generators (torch's BuildExtension, CMake, Meson) rewrite it; it holds no code.
  return n == ".ninja_log" || n == ".ninja_deps" || n == "build.ninja" || n == "install_manifest.txt" || ends(".d") ||
         ends(".pyc") || ends(".tlog");
}

BuildWatch BuildWatch::start(Disk& disk, std::vector<fs::path> dirs, std::vector<fs::path> tracked,
                             std::vector<fs::path> skipped, std::size_t max_files) {
  BuildWatch w;
  w.dirs_ = outermost(disk, std::move(dirs));
  for (auto& t : tracked) w.tracked_.push_back(absolute_normal(t));
  std::sort(w.tracked_.begin(), w.tracked_.end());
  for (auto& s : skipped) w.skipped_.push_back(absolute_normal(s));
  w.max_files_ = max_files;
  w.seen_ = w.picture(disk, w.off_, &w.records_);
  return w;
}

namespace {

// The build's own records of what it did, which a watch cannot put back: Ninja's logs, depfiles.
bool is_build_record(const fs::path& p) {
  std::string n = p.filename().string();
  return n == ".ninja_log" || n == ".ninja_deps" || (n.size() > 2 && n.compare(n.size() - 2, 2, ".d") == 0);
}

}  // namespace

std::map<fs::path, FileStamp> BuildWatch::picture(DiskReader& disk, std::string& why_off,
                                                  std::map<fs::path, FileStamp>* records) const {
  std::map<fs::path, FileStamp> files;
  for (const auto& dir : dirs_) {
    if (!why_off.empty()) break;
    walk_tree(
        disk, dir,
        [&](const fs::path& rel, FileType type) {
          fs::path p = dir / rel;
          // What this tool put there itself (a cache renamed aside, a temp, trash) is no build's output;
          // walking an aside copy of a big cache cost the watch more than the whole add-native.
          if (is_own_sibling_name(rel.filename().string())) return WalkStep::skip;
          if (type == FileType::directory) {
            bool skip =
                std::any_of(skipped_.begin(), skipped_.end(), [&](const fs::path& s) { return p == s || below(p, s); });
            return skip || rel.filename() == "__pycache__" ? WalkStep::skip : WalkStep::descend;
          }
          if (files.size() >= max_files_) {
            why_off = "more than " + std::to_string(max_files_) + " files under " + dir.string();
            return WalkStep::skip;
          }
          if (type != FileType::regular && type != FileType::none) return WalkStep::descend;
          if (records != nullptr && is_build_record(p))
            if (FileInfo fi = disk.info(p, Follow::no); fi.type == FileType::regular) records->emplace(p, stamp_of(fi));
          if (is_build_bookkeeping(p) || std::binary_search(tracked_.begin(), tracked_.end(), p))
            return WalkStep::descend;
          FileInfo fi = disk.info(p, Follow::no);
          if (fi.type == FileType::regular) files.emplace(p, stamp_of(fi));
          return WalkStep::descend;
        },
        [](const fs::path&, const std::string&) {});
  }
  if (!why_off.empty()) files.clear();
  return files;
}

std::string BuildWatch::digest(const std::map<fs::path, FileStamp>& files) {
  std::string text;
  for (const auto& [p, st] : files)
    text += p.string() + '\0' + std::to_string(st.size) + ' ' + std::to_string(st.ino) + ' ' +
            std::to_string(st.mtime_ns) + '\n';
  return sha256_hex(text);
}

BuildPicture BuildWatch::recorded() const {
  BuildPicture b;
  for (const auto& d : dirs_) b.dirs.push_back(d.string());
  for (const auto& t : tracked_) b.tracked.push_back(t.string());
  for (const auto& s : skipped_) b.skipped.push_back(s.string());
  b.sha256 = after_;
  return b;
}

std::string BuildWatch::digest_now(DiskReader& disk, const BuildPicture& r) {
  BuildWatch w;
  for (const auto& d : r.dirs) w.dirs_.emplace_back(d);
  for (const auto& t : r.tracked) w.tracked_.emplace_back(t);
  std::sort(w.tracked_.begin(), w.tracked_.end());
  for (const auto& s : r.skipped) w.skipped_.emplace_back(s);
  std::string off;
  auto files = w.picture(disk, off);
  return off.empty() ? digest(files) : std::string();
}

std::vector<UntrackedOutput> BuildWatch::finish(Disk& disk) {
  std::vector<UntrackedOutput> out;
  if (!off_.empty()) return out;
  std::string off_now;
  std::map<fs::path, FileStamp> records;
  auto now = picture(disk, off_now, &records);
  after_ = off_now.empty() ? digest(now) : std::string();
  for (const auto& [p, stamp] : now) {
    auto was = seen_.find(p);
    if (was != seen_.end() && was->second == stamp) continue;
    out.push_back({p.string(), was == seen_.end() ? "created" : "changed", stamp, "", {}, ""});
  }
  if (!off_now.empty()) return out;
  for (const auto& [p, stamp] : seen_)
    if (now.count(p) == 0) {
      out.push_back({p.string(), "deleted", stamp, "", {}, ""});
      unrestorable_.push_back("the build deleted " + p.string() + ", which a watched build cannot put back");
    }
  for (const auto& [p, stamp] : records)
    if (auto was = records_.find(p); was == records_.end() || was->second != stamp)
      unrestorable_.push_back("the build rewrote " + p.string() +
                              ", its own record, which a watched build cannot "
                              "put back");
  for (const auto& [p, stamp] : records_)
    if (records.count(p) == 0)
      unrestorable_.push_back("the build deleted " + p.string() +
                              ", its own record, which a watched build cannot "
                              "put back");
  return out;
}

std::vector<UntrackedOutput> still_as_built(DiskReader& disk, const std::vector<UntrackedOutput>& outputs) {
  std::vector<UntrackedOutput> out;
  for (const auto& u : outputs) {
    FileInfo fi = disk.info(u.path, Follow::no);
    if (u.change == "deleted" ? !fi.exists() : fi.type == FileType::regular && stamp_of(fi) == u.stamp)
      out.push_back(u);
  }
  return out;
}

std::string why_fresh_times(DiskReader& disk, const NativeEntry& e, const fs::path& overlay) {
  if (e.build_traced) {
    if (!e.build_unobserved.empty()) return "its build was not fully observed (" + e.build_unobserved.front() + ")";
    for (const auto& u : e.untracked)
      if (u.clear_reason.empty())
        return "its build changed " + u.path + " outside the install, which may hold patched code";
    return why_not_restorable(disk, BackupPaths(disk, overlay), e.build_changes);
  }
  if (!e.build_unobserved.empty()) return e.build_unobserved.front();
  if (!e.build_picture) return e.build_cmds.empty() ? "no build ran under the tool" : "the build was not watched";
  for (const auto& u : e.untracked)
    if (u.clear_reason.empty()) return "untracked output " + u.path + " may hold patched code";
  if (BuildWatch::digest_now(disk, *e.build_picture) != e.build_picture->sha256)
    return "files in the build's directories changed since its build, by another build or by hand";
  return "";
}

void keep_untracked_of_reverted(Disk& disk, Manifest& m, const NativeEntry& reverted) {
  for (auto u : reverted.untracked) {
    if (!u.clear_reason.empty()) continue;  // holds none of the patched code
    u.entry = reverted.id;
    u.build_cmds = reverted.build_cmds;
    auto same = std::find_if(m.untracked.begin(), m.untracked.end(),
                             [&](const UntrackedOutput& x) { return x.path == u.path; });
    if (same != m.untracked.end())
      *same = u;
    else
      m.untracked.push_back(u);
  }
  m.untracked = still_as_built(disk, m.untracked);
}

nlohmann::json untracked_json(const std::vector<UntrackedOutput>& outputs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& u : outputs) {
    nlohmann::json item = {{"path", u.path}, {"change", u.change}};
    if (!u.entry.empty()) {
      item["entry"] = u.entry;
      item["regenerated_by"] = u.build_cmds;
    }
    item["clear_reason"] = u.clear_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.clear_reason);
    a.push_back(item);
  }
  return a;
}

}  // namespace overlay
