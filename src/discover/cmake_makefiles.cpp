// CMake build dirs of the Makefiles generators (CMake's default on Linux: Unix Makefiles): the
// rules CMake wrote are read, not `make -n -W`, which never reaches its recursive sub-makes. Each
// target's CMakeFiles/<target>.dir/build.make names every object with its source and every linked
// output with its objects and libraries; its compiler_depend.make (CMake ≥ 3.20) or depend.make the
// headers each object was compiled with, and so do the compiler's depfiles beside the objects.
// Paths in them are relative to the top build dir.
#include <deque>
#include <map>
#include <set>

#include "overlay/file_ops.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

constexpr int kMaxCMakeDepth = 16;  // below the top build dir: a generated tree's subdirectories

// Every CMakeFiles/<target>.dir below `dir` (the top build dir's and each subdirectory's).
void target_dirs(DiskReader& disk, const fs::path& dir, int depth, std::vector<fs::path>& out) {
  if (depth > kMaxCMakeDepth) return;
  for (const auto& e : sorted_entries(disk, dir)) {
    fs::path p = dir / e.name;
    if (!is_directory(disk, p)) continue;
    if (e.name == "CMakeFiles") {
      for (const auto& t : sorted_entries(disk, p))
        if (ends_with(t.name, ".dir") && is_directory(disk, p / t.name)) out.push_back(p / t.name);
    } else if (e.name[0] != '.') {
      target_dirs(disk, p, depth + 1, out);
    }
  }
}

// The rules of a make file: "output: input…" lines (continued by a trailing backslash), each input
// mapped to the outputs made from it. Recipe lines, variables and comments are left out.
void read_rules(DiskReader& disk, const fs::path& file, std::map<std::string, std::vector<std::string>>& made_from) {
  if (!is_regular(disk, file)) return;
  std::string logical;
  auto take = [&](const std::string& line) {
    if (line.empty() || line[0] == '#' || line[0] == '\t') return;
    auto colon = line.find(": ");
    if (colon == std::string::npos || line.find('=') < colon) return;
    std::string out = line.substr(0, colon);
    if (out.find(' ') != std::string::npos || out.rfind(".PHONY", 0) == 0) return;
    for (const auto& in : words_or_none(line.substr(colon + 2))) made_from[in].push_back(out);
  };
  for (const auto& l : lines_of(read_small_file(disk, file, kMaxTextBytes))) {
    if (!l.empty() && l.back() == '\\') {
      logical += l.substr(0, l.size() - 1) + ' ';
      continue;
    }
    take(logical + l);
    logical.clear();
  }
  take(logical);
}

// The compiler's depfiles below a target dir (`<object>.d`, written with `-MD -MT <object>`, the
// object named as build.make names it): the headers of the last build, which CMake consolidates
// into compiler_depend.make only at the next one.
void read_depfiles(DiskReader& disk, const fs::path& dir, int depth,
                   std::map<std::string, std::vector<std::string>>& made_from) {
  if (depth > kMaxCMakeDepth) return;
  for (const auto& e : sorted_entries(disk, dir)) {
    fs::path p = dir / e.name;
    if (ends_with(e.name, ".o.d") || ends_with(e.name, ".obj.d"))
      read_rules(disk, p, made_from);
    else if (is_directory(disk, p))
      read_depfiles(disk, p, depth + 1, made_from);
  }
}

}  // namespace

std::vector<fs::path> cmake_makefile_dirs_at(DiskReader& disk, const fs::path& dir) {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& d) {
    if (is_regular(disk, d / "CMakeCache.txt") && is_regular(disk, d / "Makefile") &&
        !is_regular(disk, d / "build.ninja"))
      add_unique(dirs, d);
  };
  add(dir);
  for (const auto& e : sorted_entries(disk, dir)) {
    if (e.name.rfind("build", 0) != 0 && e.name != "out" && e.name != "_build") continue;
    add(dir / e.name);
    if (e.name == "build")  // CMake presets' build/<preset>
      for (const auto& sub : sorted_entries(disk, dir / e.name)) add(dir / e.name / sub.name);
  }
  return dirs;
}

std::optional<BuildCandidate> cmake_makefiles_candidate(DiskReader& disk, const fs::path& dir, const Target& t) {
  std::vector<fs::path> targets;
  target_dirs(disk, dir, 0, targets);
  std::map<std::string, std::vector<std::string>> made_from;
  for (const auto& td : targets) {
    for (const char* f : {"build.make", "compiler_depend.make", "depend.make"}) read_rules(disk, td / f, made_from);
    read_depfiles(disk, td, 0, made_from);
  }
  BuildCandidate c;
  std::deque<std::string> todo;
  for (const auto& [in, outs] : made_from)
    if (t.is(disk, resolve_in(dir, in))) {
      todo.insert(todo.end(), outs.begin(), outs.end());
      c.evidence.push_back(dir.string() + ": CMake's rules make " + join_words(outs) + " from " + in +
                           " (CMakeFiles/*.dir/build.make, compiler_depend.make)");
    }
  if (todo.empty()) return std::nullopt;
  // Everything made from those, transitively: objects, archives, what links them; a shared
  // library ends the walk (its dependents are relinked to the same bytes).
  std::set<std::string> seen;
  while (!todo.empty()) {
    std::string out = todo.front();
    todo.pop_front();
    if (!seen.insert(out).second) continue;
    fs::path p = resolve_in(dir, out);
    bool file = disk.info(p, Follow::no).type == FileType::regular;
    if (file) add_unique(c.artifacts, p);
    if (file && is_shared_library_name(p)) continue;
    if (auto it = made_from.find(out); it != made_from.end())
      todo.insert(todo.end(), it->second.begin(), it->second.end());
  }
  if (c.artifacts.empty()) return std::nullopt;
  c.kind = "cmake";
  c.build_cmds.push_back({"cmake", "--build", dir.string()});
  c.build_cwd = dir;
  c.evidence.push_back((dir / "CMakeCache.txt").string() + ": a CMake build dir (Makefiles generator)");
  return c;
}

}  // namespace overlay::discover_parts
