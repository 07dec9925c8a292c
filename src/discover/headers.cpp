// A header compiled under rules without depfiles (ROCm torch JIT `cuda_compile`, every aiter
// rule): nothing records that an object depends on it, so its objects are found by reading the
// sources' `#include` lines, followed through the headers they include (relative to the
// including file, then the `-I` dirs the build file names), 4 levels deep.
#include <algorithm>
#include <set>

#include "overlay/file_ops.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

constexpr int kMaxDepth = 4;
constexpr std::size_t kMaxSourceBytes = 8u << 20;

// The names in `#include "x"` / `#include <x>` lines.
std::vector<std::string> includes_of(const std::string& text) {
  std::vector<std::string> out;
  for (auto l : lines_of(text)) {
    l.erase(0, l.find_first_not_of(" \t"));
    if (l.rfind("#", 0) != 0) continue;
    l.erase(0, l.find_first_not_of(" \t", 1));
    if (l.rfind("include", 0) != 0) continue;
    auto open = l.find_first_of("\"<");
    if (open == std::string::npos) continue;
    auto close = l.find(l[open] == '"' ? '"' : '>', open + 1);
    if (close != std::string::npos) out.push_back(l.substr(open + 1, close - open - 1));
  }
  return out;
}

struct IncludeSearch {
  DiskReader& disk;
  const Target& t;
  std::vector<fs::path> dirs;  // -I dirs of the build file
  std::set<fs::path> seen;

  // Whether `file` includes the target, directly or through its headers; `chain` says how.
  bool reaches(const fs::path& file, int depth, std::string& chain) {
    if (depth > kMaxDepth || !seen.insert(file).second) return false;
    std::string text;
    try {
      text = read_small_file(disk, file, kMaxSourceBytes);
    } catch (const std::exception&) {
      return false;
    }
    for (const auto& inc : includes_of(text)) {
      std::vector<fs::path> where = {file.parent_path() / inc};
      for (const auto& d : dirs) where.push_back(d / inc);
      for (const auto& w : where) {
        fs::path p = w.lexically_normal();
        if (!is_regular(disk, p)) continue;
        if (t.is(disk, p)) {
          chain = file.filename().string() + " includes " + inc;
          return true;
        }
        if (reaches(p, depth + 1, chain)) {
          chain = file.filename().string() + " includes " + inc + ", which " + chain.substr(chain.find(' ') + 1);
          return true;
        }
        break;  // the first file found is the one the compiler takes
      }
    }
    return false;
  }
};

// Every `-I<dir>` / `-I <dir>` / `-isystem <dir>` word of the build file.
std::vector<fs::path> include_dirs(const std::vector<std::string>& lines, const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& l : lines) {
    auto w = ninja_words(l);
    for (std::size_t i = 0; i < w.size(); ++i) {
      std::string d;
      if ((w[i] == "-I" || w[i] == "-isystem") && i + 1 < w.size())
        d = w[i + 1];
      else if (w[i].rfind("-I", 0) == 0 && w[i].size() > 2)
        d = w[i].substr(2);
      if (!d.empty()) add_unique(out, resolve_in(dir, d));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> objects_including(DiskReader& disk, const fs::path& build_ninja, const Target& t,
                                           std::string& evidence) {
  std::vector<std::string> objs;
  if (!is_regular(disk, build_ninja)) return objs;
  fs::path dir = build_ninja.parent_path();
  auto lines = lines_of(read_small_file(disk, build_ninja, kMaxTextBytes));
  IncludeSearch search{disk, t, include_dirs(lines, dir), {}};
  std::string first_chain;
  for (const auto& l : lines) {
    auto w = ninja_words(l);
    if (w.size() < 4 || w[0] != "build" || w[1].empty() || w[1].back() != ':' || w[2] == "phony") continue;
    for (std::size_t i = 3; i < w.size() && w[i] != "|" && w[i] != "||"; ++i) {
      fs::path src = resolve_in(dir, w[i]);
      std::string chain;
      search.seen.clear();
      if (!is_regular(disk, src) || !search.reaches(src, 0, chain)) continue;
      objs.push_back(w[1].substr(0, w[1].size() - 1));
      if (first_chain.empty()) first_chain = chain;
      break;
    }
  }
  if (!objs.empty())
    evidence = build_ninja.string() + ": no depfile records " + t.given.filename().string() + "; by #include lines, " +
               std::to_string(objs.size()) + " object(s) use it (" + first_chain + ")";
  return objs;
}

}  // namespace overlay::discover_parts
