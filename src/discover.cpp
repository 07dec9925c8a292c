#include "overlay/discover.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/process.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

constexpr std::size_t kMaxTextBytes = 16u << 20;  // build.ninja, compile_commands.json, config.yaml

// The file as given (absolute) and as it really is: build graphs may name either.
struct Target {
  fs::path given, real;
  bool is(Disk& disk, const fs::path& p) const {
    if (p == given || p == real) return true;
    if (p.filename() != given.filename() && p.filename() != real.filename()) return false;  // cheap: most never match
    FileInfo fi = disk.info(p, Follow::yes);
    return fi.type == FileType::regular && disk.real_path(p) == real;
  }
  // Every spelling a build run from `dir` may use for it.
  std::vector<std::string> spellings(const fs::path& dir) const {
    std::vector<std::string> out;
    for (const auto& p : {given, real}) {
      for (const auto& s : {p.string(), p.lexically_relative(dir).string()})
        if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
  }
};

RunResult query(const std::vector<std::string>& argv, const fs::path& cwd = {}) {
  RunOptions o;
  o.output = Output::capture;
  o.cwd = cwd;
  o.timeout_s = 120;
  return run_process(argv, o);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The words of a build.ninja line: split at unescaped spaces, `$ ` `$:` `$$` unescaped.
std::vector<std::string> ninja_words(const std::string& line) {
  std::vector<std::string> out;
  std::string w;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (ch == '$' && i + 1 < line.size() && (line[i + 1] == ' ' || line[i + 1] == ':' || line[i + 1] == '$')) {
      w += line[++i];
    } else if (ch == ' ' || ch == '\t') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += ch;
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

// split_words, or nothing for a line it cannot split (an unbalanced quote).
std::vector<std::string> words_or_none(const std::string& line) {
  try {
    return split_words(line);
  } catch (const Error&) {
    return {};
  }
}

// A shared library's dependents are relinked against it, not rebuilt from the changed code: their
// bytes stay the same, so they are neither backed up nor verified (only objects, static archives
// and what links those statically are).
bool is_shared_library(const fs::path& p) {
  std::string n = p.filename().string();
  return n.find(".so.") != std::string::npos || (n.size() > 3 && n.compare(n.size() - 3, 3, ".so") == 0) ||
         (n.size() > 6 && n.compare(n.size() - 6, 6, ".dylib") == 0);
}

bool is_file_or_absent(Disk& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::no);
  return !fi.exists() || fi.type == FileType::regular;
}

// ---- ninja (and CMake's Ninja generator) ----

struct NinjaNode {
  bool known = false;
  std::string rule;  // of the edge that builds it; empty for a source
  std::vector<std::string> outputs;
};

// `ninja -t query PATH`: the rule that builds PATH and the outputs PATH is an input of.
NinjaNode ninja_query(const fs::path& dir, const std::string& path) {
  RunResult r = query({"ninja", "-C", dir.string(), "-t", "query", path});
  NinjaNode n;
  if (!r.ok()) return n;
  n.known = true;
  bool in_outputs = false;
  for (const auto& l : lines_of(r.out)) {
    if (l.rfind("  input: ", 0) == 0) n.rule = l.substr(9);
    if (l.rfind("  ", 0) == 0 && l.rfind("    ", 0) != 0) in_outputs = l == "  outputs:";
    else if (in_outputs && l.rfind("    ", 0) == 0) n.outputs.push_back(l.substr(4));
  }
  return n;
}

// `ninja -t deps`: the outputs whose recorded header dependencies include the target.
std::vector<std::string> ninja_dependents_by_deps(Disk& disk, const fs::path& dir, const Target& t, std::string& via) {
  RunResult r = query({"ninja", "-C", dir.string(), "-t", "deps"});
  std::vector<std::string> outs;
  if (!r.ok()) return outs;
  std::string current;
  for (const auto& l : lines_of(r.out)) {
    if (l.empty()) continue;
    if (l[0] != ' ') {
      current = l.substr(0, l.find(": #deps"));
      continue;
    }
    std::string dep = l.substr(l.find_first_not_of(' '));
    fs::path p = fs::path(dep).is_absolute() ? fs::path(dep) : (dir / dep).lexically_normal();
    if (!current.empty() && t.is(disk, p) && std::find(outs.begin(), outs.end(), current) == outs.end()) {
      outs.push_back(current);
      via = dep;
    }
  }
  return outs;
}

std::optional<BuildCandidate> ninja_candidate(Disk& disk, const fs::path& dir, const Target& t) {
  std::vector<std::string> first;
  BuildCandidate c;
  for (const auto& s : t.spellings(dir)) {
    NinjaNode n = ninja_query(dir, s);
    if (n.known && !n.outputs.empty()) {
      first = n.outputs;
      c.evidence.push_back((dir / "build.ninja").string() + ": " + s + " is an input of " + join_words(first) + " (ninja -t query)");
      break;
    }
  }
  if (first.empty()) {
    std::string via;
    first = ninja_dependents_by_deps(disk, dir, t, via);
    if (first.empty()) return std::nullopt;
    c.evidence.push_back((dir / ".ninja_deps").string() + ": " + join_words(first) + " depend on " + via + " (ninja -t deps)");
  }
  // Everything built from those outputs, transitively: the object, its libraries, executables.
  std::set<std::string> seen;
  std::deque<std::string> todo(first.begin(), first.end());
  while (!todo.empty()) {
    std::string out = todo.front();
    todo.pop_front();
    if (!seen.insert(out).second) continue;
    NinjaNode n = ninja_query(dir, out);
    if (!n.known || n.rule == "phony") continue;  // aliases like `all` are not files
    fs::path p = fs::path(out).is_absolute() ? fs::path(out) : (dir / out).lexically_normal();
    if (is_file_or_absent(disk, p)) c.artifacts.push_back(p);  // a symlink to a library is not backed up
    if (is_shared_library(p)) continue;
    for (const auto& o : n.outputs) todo.push_back(o);
  }
  bool cmake = disk.info(dir / "CMakeCache.txt", Follow::no).type == FileType::regular;
  c.kind = cmake ? "cmake" : "ninja";
  c.build_cmd = cmake ? std::vector<std::string>{"cmake", "--build", dir.string()}
                      : std::vector<std::string>{"ninja", "-C", dir.string()};
  c.build_cwd = dir;
  if (cmake) c.evidence.push_back((dir / "CMakeCache.txt").string() + ": a CMake build dir");
  return c;
}

// Build dirs the CMake compile database beside `dir` names for the target (CMAKE_BINARY_DIR).
std::vector<fs::path> compile_db_build_dirs(Disk& disk, const fs::path& dir, const Target& t) {
  std::vector<fs::path> out;
  fs::path db = dir / "compile_commands.json";
  if (disk.info(db, Follow::yes).type != FileType::regular) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_file(disk, db, kMaxTextBytes));
  } catch (const std::exception&) {
    return out;
  }
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("file") || !e.contains("directory") || !e["file"].is_string() || !e["directory"].is_string())
      continue;
    fs::path d = e["directory"].get<std::string>();
    fs::path f = e["file"].get<std::string>();
    if (!t.is(disk, f.is_absolute() ? f : d / f)) continue;
    for (fs::path up = d; !up.empty(); up = up.parent_path()) {  // the top dir holding build.ninja
      if (disk.info(up / "build.ninja", Follow::no).type == FileType::regular &&
          disk.info(up / "CMakeCache.txt", Follow::no).type == FileType::regular) {
        out.push_back(up);
        break;
      }
      if (up == up.root_path()) break;
    }
  }
  return out;
}

// build.ninja in `dir` itself, and in the build dirs beside it.
std::vector<fs::path> ninja_dirs_at(Disk& disk, const fs::path& dir, const Target& t) {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& d) {
    if (disk.info(d / "build.ninja", Follow::no).type == FileType::regular && std::find(dirs.begin(), dirs.end(), d) == dirs.end())
      dirs.push_back(d);
  };
  add(dir);
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(dir);
  } catch (const DiskError&) {
    return dirs;
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  for (const auto& e : entries)
    if (e.name.rfind("build", 0) == 0 || e.name == "out" || e.name == "_build") add(dir / e.name);
  for (const auto& d : compile_db_build_dirs(disk, dir, t)) add(d);
  return dirs;
}

// ---- make ----

std::optional<BuildCandidate> make_candidate(Disk& disk, const fs::path& dir, const Target& t) {
  for (const auto& s : t.spellings(dir)) {
    RunResult r = query({"make", "-C", dir.string(), "--no-print-directory", "-n", "--debug=b", "-W", s});
    if (!r.ok()) continue;
    BuildCandidate c;
    std::vector<std::string> would_run;
    for (const auto& l : lines_of(r.out)) {
      const std::string must = "Must remake target '";
      if (auto at = l.find(must); at != std::string::npos) {
        std::string name = l.substr(at + must.size());
        name = name.substr(0, name.find('\''));
        fs::path p = fs::path(name).is_absolute() ? fs::path(name) : (dir / name).lexically_normal();
        if (disk.info(p, Follow::no).type == FileType::regular) c.artifacts.push_back(p);
      } else if (!l.empty() && l[0] != ' ' && l.find(' ') != std::string::npos && l.find("GNU Make") != 0 &&
                 l.find("Reading makefiles") == std::string::npos && l.find("Updating") != 0) {
        would_run.push_back(l);
      }
    }
    auto compiles = std::find_if(would_run.begin(), would_run.end(), [&](const std::string& cmd) {
      auto words = words_or_none(cmd);
      return std::find(words.begin(), words.end(), s) != words.end();
    });
    if (compiles == would_run.end()) continue;
    c.kind = "make";
    c.build_cmd = std::vector<std::string>{"make", "-C", dir.string()};
    c.build_cwd = dir;
    c.evidence.push_back((dir / "Makefile").string() + ": make -n -W " + s + " would run: " + *compiles);
    return c;
  }
  return std::nullopt;
}

bool has_makefile(Disk& disk, const fs::path& dir) {
  for (const char* n : {"GNUmakefile", "makefile", "Makefile"})
    if (disk.info(dir / n, Follow::yes).type == FileType::regular) return true;
  return false;
}

// ---- setuptools (build_ext --inplace) ----

std::optional<BuildCandidate> setuptools_candidate(Disk& disk, const fs::path& dir, const Target& t) {
  bool setup_py = disk.info(dir / "setup.py", Follow::yes).type == FileType::regular;
  if (!setup_py && disk.info(dir / "pyproject.toml", Follow::yes).type != FileType::regular) return std::nullopt;
  fs::path rel = t.given.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") rel = t.real.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  fs::path obj = rel;
  obj.replace_extension(".o");
  BuildCandidate c;
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(dir / "build");
  } catch (const DiskError&) {
    return std::nullopt;
  }
  for (const auto& e : entries)
    if (e.name.rfind("temp.", 0) == 0 && disk.info(dir / "build" / e.name / obj, Follow::no).type == FileType::regular)
      c.evidence.push_back((dir / "build" / e.name / obj).string() + ": setuptools' object for " + rel.string());
  if (c.evidence.empty()) return std::nullopt;
  // The in-place extension modules: build_ext --inplace writes them beside the sources.
  walk_tree(disk, dir, [&](const fs::path& r, FileType type) {
    std::string top = r.begin()->string();
    if (type == FileType::directory) return (top == "build" || top[0] == '.' || std::distance(r.begin(), r.end()) > 4) ? WalkStep::skip : WalkStep::descend;
    std::string name = r.filename().string();
    if (type == FileType::regular && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) c.artifacts.push_back(dir / r);
    return WalkStep::descend;
  });
  std::sort(c.artifacts.begin(), c.artifacts.end());
  c.kind = "setuptools";
  c.build_cmd = setup_py ? std::vector<std::string>{"python3", "setup.py", "build_ext", "--inplace"}
                         : std::vector<std::string>{"python3", "-c", "from setuptools import setup; setup()", "build_ext", "--inplace"};
  c.build_cwd = dir;
  c.evidence.push_back((dir / (setup_py ? "setup.py" : "pyproject.toml")).string() + ": the project's in-place build");
  return c;
}

// ---- the pipeline's task config ----

// The value of a top-level `compile_command:` key: a plain or quoted scalar, or a | / > block.
std::optional<std::pair<std::string, int>> yaml_compile_command(const std::string& text) {
  auto lines = lines_of(text);
  const std::string key = "compile_command:";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind(key, 0) != 0) continue;
    std::string v = lines[i].substr(key.size());
    v.erase(0, v.find_first_not_of(" \t"));
    if (auto hash = v.find(" #"); hash != std::string::npos && v[0] != '"' && v[0] != '\'') v.erase(hash);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.pop_back();
    if (v == "|" || v == ">" || v == "|-" || v == ">-") {
      std::string block;
      for (std::size_t k = i + 1; k < lines.size() && (lines[k].empty() || lines[k][0] == ' '); ++k) {
        std::string l = lines[k];
        l.erase(0, l.find_first_not_of(' '));
        if (!l.empty()) block += (block.empty() ? "" : " ") + l;
      }
      return std::make_pair(block, static_cast<int>(i + 1));
    }
    if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'') && v.back() == v[0]) {
      std::string inner = v.substr(1, v.size() - 2), out;
      for (std::size_t k = 0; k < inner.size(); ++k) {
        if (v[0] == '\'' && inner[k] == '\'' && k + 1 < inner.size() && inner[k + 1] == '\'') ++k;
        else if (v[0] == '"' && inner[k] == '\\' && k + 1 < inner.size()) ++k;
        out += inner[k];
      }
      v = out;
    }
    return std::make_pair(v, static_cast<int>(i + 1));
  }
  return std::nullopt;
}

std::optional<BuildCandidate> config_candidate(Disk& disk, const fs::path& dir) {
  fs::path cfg = dir / "config.yaml";
  if (disk.info(cfg, Follow::yes).type != FileType::regular) return std::nullopt;
  auto cmd = yaml_compile_command(read_small_file(disk, cfg, kMaxTextBytes));
  if (!cmd) return std::nullopt;
  auto argv = words_or_none(cmd->first);
  if (argv.empty()) return std::nullopt;
  BuildCandidate c;
  c.kind = "config";
  c.build_cmd = argv;
  c.build_cwd = dir;
  c.evidence.push_back(cfg.string() + ":" + std::to_string(cmd->second) + ": compile_command: " + cmd->first);
  return c;
}

// ---- torch cpp_extension JIT caches ----

std::vector<fs::path> jit_roots(const DiscoverRequest& req) {
  std::vector<fs::path> roots;
  if (req.default_cache_roots) {
    if (const char* te = std::getenv("TORCH_EXTENSIONS_DIR"); te && *te)
      roots.emplace_back(te);
    else if (const char* home = std::getenv("HOME"); home && *home)
      roots.push_back(fs::path(home) / ".cache/torch_extensions");
  }
  for (const auto& r : req.cache_roots) roots.push_back(absolute_normal(r));
  return roots;
}

// Extension build dirs (<root>/<name>/ or <root>/py311_cpu/<name>/) whose build.ninja names the file.
void torch_candidates(Disk& disk, const fs::path& root, const Target& t, std::vector<BuildCandidate>& out) {
  if (disk.info(root, Follow::yes).type != FileType::directory) return;
  walk_tree(disk, root, [&](const fs::path& rel, FileType type) {
    if (type == FileType::directory) return std::distance(rel.begin(), rel.end()) > 2 ? WalkStep::skip : WalkStep::descend;
    if (rel.filename() != "build.ninja" || type != FileType::regular) return WalkStep::descend;
    fs::path dir = (root / rel).parent_path();
    auto lines = lines_of(read_small_file(disk, root / rel, kMaxTextBytes));
    for (std::size_t i = 0; i < lines.size(); ++i) {
      auto words = ninja_words(lines[i]);
      auto named = std::find_if(words.begin(), words.end(), [&](const std::string& w) {
        fs::path p = w;
        return p.is_absolute() && t.is(disk, p);
      });
      if (named == words.end()) continue;
      BuildCandidate c;
      std::string name = dir.filename().string();
      c.kind = "torch-jit";
      c.build_cwd = dir;
      c.caches = {dir};
      fs::path so = dir / (name + ".so");
      if (disk.info(so, Follow::no).type == FileType::regular) c.artifacts.push_back(so);
      c.evidence.push_back("torch extension '" + name + "': " + (root / rel).string() + ":" + std::to_string(i + 1) + " compiles " + *named +
                           " (built again on its next load)");
      out.push_back(std::move(c));
      break;
    }
    return WalkStep::descend;
  });
}

}  // namespace

std::vector<std::string> BuildCandidate::add_native_args(const fs::path& target) const {
  std::vector<std::string> a = {"--target", target.string()};
  for (const auto& x : artifacts) a.insert(a.end(), {"--artifact", x.string()});
  for (const auto& x : caches) a.insert(a.end(), {"--invalidate-cache", x.string()});
  if (build_cmd) a.insert(a.end(), {"--build-cmd", join_words(*build_cmd), "--build-cwd", build_cwd.string()});
  return a;
}

DiscoverReport discover(Disk& disk, const DiscoverRequest& req) {
  DiscoverReport rep;
  rep.target = absolute_normal(req.target);
  FileInfo fi = disk.info(rep.target, Follow::yes);
  if (!fi.exists()) throw Error("target does not exist: " + rep.target.string());
  if (fi.type != FileType::regular) throw Error("target is not a regular file: " + rep.target.string());
  Target t{rep.target, disk.real_path(rep.target)};
  fs::path root = absolute_normal(req.root);

  // Ancestors of the file as given and as it really is, nearest first, up to --root; each
  // looked at once, by its real path (which is what is reported).
  std::vector<fs::path> dirs;
  for (const auto& start : {t.given.parent_path(), t.real.parent_path()}) {
    for (fs::path d = start;; d = d.parent_path()) {
      fs::path real = disk.real_path(d);
      if (std::find(dirs.begin(), dirs.end(), real) == dirs.end()) dirs.push_back(real);
      if (d == root || d == d.root_path()) break;
    }
  }
  std::set<fs::path> ninja_seen;
  for (const auto& d : dirs) {
    rep.searched.push_back(d.string());
    for (const auto& found : ninja_dirs_at(disk, d, t)) {
      fs::path nd = disk.real_path(found);
      if (!ninja_seen.insert(nd).second) continue;
      if (nd != d) rep.searched.push_back(nd.string());
      if (auto c = ninja_candidate(disk, nd, t)) rep.candidates.push_back(std::move(*c));
    }
    if (has_makefile(disk, d))
      if (auto c = make_candidate(disk, d, t)) rep.candidates.push_back(std::move(*c));
    if (auto c = setuptools_candidate(disk, d, t)) rep.candidates.push_back(std::move(*c));
    if (auto c = config_candidate(disk, d)) rep.candidates.push_back(std::move(*c));
  }
  for (const auto& r : jit_roots(req)) {
    rep.searched.push_back(r.string() + " (JIT cache root)");
    torch_candidates(disk, r, t, rep.candidates);
  }
  // Best first: a build graph that rebuilds the fewest files; a config's command (no graph) last.
  std::stable_sort(rep.candidates.begin(), rep.candidates.end(), [](const BuildCandidate& a, const BuildCandidate& b) {
    return std::make_pair(a.kind == "config", a.artifacts.size()) < std::make_pair(b.kind == "config", b.artifacts.size());
  });
  for (std::size_t i = 0; i < rep.candidates.size(); ++i) {
    auto& c = rep.candidates[i];
    c.evidence.push_back("rank " + std::to_string(i + 1) + " of " + std::to_string(rep.candidates.size()) + ": " +
                         (c.kind == "config" ? std::string("a task config's command (no build graph to measure)")
                                             : "rebuilds " + std::to_string(c.artifacts.size()) + " artifact(s)"));
  }
  return rep;
}

}  // namespace overlay
