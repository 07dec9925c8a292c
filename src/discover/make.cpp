// Make: what `make -n --debug=b -W FILE` would remake (make itself leaves order-only
// prerequisites out), plus the objects its compile commands leave that make never names as a
// target: a recipe that compiles without `-o` (lz4's `$(COMPILE.c) $^`) writes `<stem>.o` into
// the recipe's working directory.
#include <algorithm>

#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// A command line of `make -n`'s output, with the directory it runs in (`cd X &&` followed).
struct Recipe {
  fs::path cwd;
  std::vector<std::string> words;
  std::string line;
};

bool is_noise(const std::string& l) {
  return l.empty() || l[0] == ' ' || l.find(' ') == std::string::npos || l.rfind("GNU Make", 0) == 0 ||
         l.find("Reading makefiles") != std::string::npos || l.rfind("Updating", 0) == 0 ||
         l.find("Must remake target") != std::string::npos;
}

// The commands of one line, split at `&&` and `;`, each with the cwd a leading `cd` gives it.
std::vector<Recipe> recipes_of(const fs::path& dir, const std::string& line) {
  std::vector<Recipe> out;
  fs::path cwd = dir;
  std::vector<std::string> cur;
  auto flush = [&] {
    if (cur.size() == 2 && cur[0] == "cd")
      cwd = resolve_in(cwd, cur[1]);
    else if (!cur.empty())
      out.push_back({cwd, cur, line});
    cur.clear();
  };
  for (auto w : words_or_none(line)) {
    bool ends = !w.empty() && w.back() == ';';
    if (ends) w.pop_back();
    if (w == "&&" || w == ";") {
      flush();
      continue;
    }
    if (!w.empty()) cur.push_back(w);
    if (ends) flush();
  }
  flush();
  return out;
}

// The word of a command that names the target (end when none does).
std::vector<std::string>::const_iterator target_word(DiskReader& disk, const Recipe& r, const Target& t) {
  return std::find_if(r.words.begin(), r.words.end(), [&](const std::string& w) {
    return !w.empty() && w[0] != '-' && t.is(disk, resolve_in(r.cwd, w));
  });
}

// The object a compile-only command (`-c`) writes for the target; nothing for other commands.
std::optional<fs::path> object_of(const Recipe& r, std::vector<std::string>::const_iterator src) {
  if (std::find(r.words.begin(), r.words.end(), "-c") == r.words.end()) return std::nullopt;
  auto o = std::find(r.words.begin(), r.words.end(), "-o");
  if (o != r.words.end() && o + 1 != r.words.end()) return resolve_in(r.cwd, *(o + 1));
  fs::path obj = fs::path(*src).filename();
  obj.replace_extension(".o");
  return (r.cwd / obj).lexically_normal();
}

}  // namespace

bool has_makefile(DiskReader& disk, const fs::path& dir) {
  for (const char* n : {"GNUmakefile", "makefile", "Makefile"})
    if (is_regular(disk, dir / n)) return true;
  return false;
}

std::optional<BuildCandidate> make_candidate(DiskReader& disk, const fs::path& dir, const Target& t) {
  for (const auto& s : t.spellings(dir)) {
    RunResult r = query({"make", "-C", dir.string(), "--no-print-directory", "-n", "--debug=b", "-W", s});
    if (!r.ok()) continue;
    BuildCandidate c;
    std::string compiles;
    for (const auto& l : lines_of(r.out)) {
      const std::string must = "Must remake target '";
      if (auto at = l.find(must); at != std::string::npos) {
        std::string name = l.substr(at + must.size());
        fs::path p = resolve_in(dir, name.substr(0, name.find('\'')));
        if (disk.info(p, Follow::no).type == FileType::regular) add_unique(c.artifacts, p);
        continue;
      }
      if (is_noise(l)) continue;
      for (const auto& rec : recipes_of(dir, l)) {
        auto src = target_word(disk, rec, t);
        if (src == rec.words.end()) continue;
        if (compiles.empty()) compiles = rec.line;
        auto obj = object_of(rec, src);
        if (!obj || disk.info(*obj, Follow::no).type != FileType::regular) continue;
        if (std::find(c.artifacts.begin(), c.artifacts.end(), *obj) == c.artifacts.end())
          c.evidence.push_back(rec.line + ": leaves " + obj->string() + " (an object make does not name as a target)");
        add_unique(c.artifacts, *obj);
      }
    }
    if (compiles.empty()) continue;
    c.kind = "make";
    c.build_cmds.push_back({"make", "-C", dir.string()});
    c.build_cwd = dir;
    c.evidence.insert(c.evidence.begin(),
                      (dir / "Makefile").string() + ": make -n -W " + s + " would run: " + compiles);
    return c;
  }
  return std::nullopt;
}

}  // namespace overlay::discover_parts
