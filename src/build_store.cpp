#include "overlay/build_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/lease.hpp"
#include "overlay/pinned.hpp"
#include "overlay/process.hpp"
#include "overlay/snapshot.hpp"

extern char** environ;

namespace overlay {

using nlohmann::json;

void to_json(json& j, const StoredFile& f) {
  j = {{"path", f.path}, {"blob", f.blob}, {"sha256", f.sha256}, {"mode", f.mode}, {"mtime_ns", f.mtime_ns}};
}
void from_json(const json& j, StoredFile& f) {
  j.at("path").get_to(f.path), j.at("blob").get_to(f.blob), j.at("sha256").get_to(f.sha256);
  j.at("mode").get_to(f.mode), j.at("mtime_ns").get_to(f.mtime_ns);
}
void to_json(json& j, const StoredDir& d) { j = {{"path", d.path}, {"tar", d.tar}, {"sha256", d.sha256}}; }
void from_json(const json& j, StoredDir& d) {
  j.at("path").get_to(d.path), j.at("tar").get_to(d.tar), j.at("sha256").get_to(d.sha256);
}
void to_json(json& j, const StoredStamp& s) { j = json::array({s.path, s.size, s.mtime_ns, s.ctime_ns}); }
void from_json(const json& j, StoredStamp& s) {
  j.at(0).get_to(s.path), j.at(1).get_to(s.size), j.at(2).get_to(s.mtime_ns), j.at(3).get_to(s.ctime_ns);
}
void to_json(json& j, const StoredBuild& b) {
  j = {{"recipe", b.recipe},     {"inputs_sha256", b.inputs_sha256},
       {"deps", b.deps},         {"sources", b.sources},
       {"files", b.files},       {"before", b.before},
       {"dirs", b.dirs},         {"entry", b.entry},
       {"built_at", b.built_at}, {"bytes", b.bytes}};
}
void from_json(const json& j, StoredBuild& b) {
  j.at("recipe").get_to(b.recipe), j.at("inputs_sha256").get_to(b.inputs_sha256), j.at("deps").get_to(b.deps);
  j.at("sources").get_to(b.sources), j.at("files").get_to(b.files), j.at("dirs").get_to(b.dirs);
  j.at("before").get_to(b.before);
  j.at("entry").get_to(b.entry), j.at("built_at").get_to(b.built_at), j.at("bytes").get_to(b.bytes);
}

std::string StoredBuild::name() const { return recipe.substr(0, 16) + "/" + inputs_sha256.substr(0, 16); }

namespace {

constexpr const char* kRecordName = "record.json";
constexpr std::size_t kMaxRecordBytes = 64u << 20;
constexpr std::size_t kMaxDeps = 200000;

bool strictly_inside(const fs::path& p, const fs::path& dir) { return is_within(p, dir) && p != dir; }

// Variables that reach no compiler's output: a terminal's, a login's, a scheduler's, a GPU
// pinning's set per agent is kept (a JIT build may pick its arch from the devices it sees).
bool is_volatile_env(const std::string& name) {
  static const std::set<std::string> names = {"_",
                                              "PWD",
                                              "OLDPWD",
                                              "SHLVL",
                                              "HOSTNAME",
                                              "TERM",
                                              "COLORTERM",
                                              "TERM_PROGRAM",
                                              "TERM_PROGRAM_VERSION",
                                              "DISPLAY",
                                              "TMUX",
                                              "TMUX_PANE",
                                              "STY",
                                              "WINDOW",
                                              "LS_COLORS",
                                              "PS1",
                                              "PS2",
                                              "MAIL",
                                              "COLUMNS",
                                              "LINES",
                                              "INVOCATION_ID",
                                              "JOURNAL_STREAM",
                                              "DBUS_SESSION_BUS_ADDRESS",
                                              "XDG_SESSION_ID",
                                              "XDG_RUNTIME_DIR",
                                              "MAX_JOBS",
                                              "MAKELEVEL"};
  static const std::vector<std::string> prefixes = {"SSH_", "PMI_", "PMIX_", "OMPI_", "OVERLAY_", "GTEST_", "CTEST_"};
  if (names.count(name) > 0 || is_engine_variable(name)) return true;
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

// The stamp of a file now (size -1 where it is not a regular file or not there).
std::int64_t ns_of(const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec; }

StoredStamp stamp_now(Disk& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::yes);
  if (fi.type == FileType::directory) return {p.string(), 0, ns_of(fi.mtime), ns_of(fi.ctime)};
  if (fi.type != FileType::regular) return {p.string(), -1, 0, 0};
  return {p.string(), static_cast<std::int64_t>(fi.size), ns_of(fi.mtime), ns_of(fi.ctime)};
}

// MAKEFLAGS and MFLAGS may carry variable overrides (CFLAGS=...): kept in the recipe, less the
// words that only say how many jobs run.
std::string make_flags_key(const std::string& value) {
  std::istringstream words(value);
  std::string out;
  for (std::string w; words >> w;)
    if (w.rfind("-j", 0) != 0 && w.rfind("--jobserver", 0) != 0 && w.rfind("--jobs", 0) != 0) out += w + ' ';
  return out;
}

// Where a tool named `name` runs from: the first executable on PATH (or the name itself with a '/').
std::optional<fs::path> find_tool(Disk& disk, const std::string& name) {
  if (name.find('/') != std::string::npos) return fs::path(name);
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    fs::path p = fs::path(d.empty() ? "." : d) / name;
    FileInfo fi = disk.info(p, Follow::yes);
    if (fi.type == FileType::regular && (fi.mode & 0111) != 0) return p;
  }
  return std::nullopt;
}

// The toolchain's part of the recipe: each tool a build may call, by real path, size and mtime.
std::string toolchain_text(Disk& disk, const NativePlan& plan) {
  std::set<std::string> names = {"cc",   "c++",   "gcc",   "g++",  "clang", "clang++", "ld",      "as",    "ar",
                                 "nvcc", "hipcc", "ninja", "make", "cmake", "meson",   "python3", "python"};
  for (const auto& argv : plan.build_cmds)
    if (!argv.empty()) names.insert(argv.front());
  std::string t;
  for (const auto& n : names) {
    auto p = find_tool(disk, n);
    if (!p) continue;
    fs::path real = p->is_absolute() ? *p : plan.build_cwd / *p;
    try {
      real = disk.real_path(real);
    } catch (const Error&) {
    }
    StoredStamp s = stamp_now(disk, real);
    t += "tool " + n + '\0' + real.string() + '\0' + std::to_string(s.size) + ' ' + std::to_string(s.mtime_ns) + '\n';
  }
  return t;
}

// The files the build's dependency records name: Ninja's deps log of each build dir given, and
// every Make-style depfile (*.d) below the dirs given.
std::set<fs::path> dependency_files(Disk& disk, const std::set<fs::path>& ninja_dirs,
                                    const std::vector<fs::path>& depfile_dirs, const fs::path& build_cwd) {
  std::set<fs::path> deps;
  for (const auto& d : ninja_dirs) {
    RunOptions o;
    o.output = Output::capture;
    o.timeout_s = 120;
    RunResult r = run_process({"ninja", "-C", d.string(), "-t", "deps"}, o);
    if (!r.ok()) continue;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line) && deps.size() < kMaxDeps;)
      if (line.rfind("    ", 0) == 0)
        deps.insert(
            absolute_normal(fs::path(line.substr(4)).is_absolute() ? fs::path(line.substr(4)) : d / line.substr(4)));
  }
  for (const auto& root : depfile_dirs) {
    walk_tree(
        disk, root,
        [&](const fs::path& rel, FileType type) {
          if (type == FileType::directory) return WalkStep::descend;
          std::string n = rel.filename().string();
          if (n.size() < 3 || n.compare(n.size() - 2, 2, ".d") != 0 || deps.size() >= kMaxDeps)
            return WalkStep::descend;
          std::string text;
          try {
            text = read_small_file(disk, root / rel, 8u << 20);
          } catch (const Error&) {
            return WalkStep::descend;
          }
          // "target: dep dep \<newline> dep", spaces escaped with a backslash.
          auto colon = text.find(": ");
          if (colon == std::string::npos) return WalkStep::descend;
          std::string word;
          // A relative name is relative to where the compiler ran, which the depfile does not say:
          // its own dir or the build's cwd, whichever holds the file (neither: kept as named from the
          // depfile's dir, where it stamps as missing and keep refuses the build).
          auto flush = [&] {
            if (!word.empty() && word != "\\") {
              fs::path w(word);
              fs::path beside = absolute_normal((root / rel).parent_path() / w),
                       from_cwd = absolute_normal(build_cwd / w);
              deps.insert(w.is_absolute() ? absolute_normal(w)
                          : disk.info(beside, Follow::yes).exists() || !disk.info(from_cwd, Follow::yes).exists()
                              ? beside
                              : from_cwd);
            }
            word.clear();
          };
          for (std::size_t i = colon + 2; i < text.size(); ++i) {
            char c = text[i];
            if (c == '\\' && i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '#'))
              word += text[i + 1], ++i;
            else if (c == '$' && i + 1 < text.size() && text[i + 1] == '$')
              word += '$', ++i;
            else if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n')
              flush(), ++i;
            else if (c == ' ' || c == '\n' || c == '\t')
              flush();
            else if (c == ':' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == ' '))
              word.clear();  // a phony "dep:" line
            else
              word += c;
          }
          flush();
          return WalkStep::descend;
        },
        [](const fs::path&, const std::string&) {});
  }
  return deps;
}

// The files a Ninja build dir's graph is made from: build.ninja and what regenerates it (CMake's
// CMakeLists.txt and modules, Meson's meson.build files: the inputs of its build.ninja edge).
std::set<fs::path> graph_files(const fs::path& dir) {
  std::set<fs::path> out = {absolute_normal(dir / "build.ninja")};
  RunOptions o;
  o.output = Output::capture;
  o.timeout_s = 60;
  RunResult r = run_process({"ninja", "-C", dir.string(), "-t", "query", "build.ninja"}, o);
  if (!r.ok()) return out;
  std::istringstream in(r.out);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("    ", 0) == 0 && section == "input") {
      std::string item = line.substr(4);
      if (item.rfind("| ", 0) == 0 || item.rfind("|| ", 0) == 0) item = item.substr(item.find(' ') + 1);
      out.insert(absolute_normal(fs::path(item).is_absolute() ? fs::path(item) : dir / item));
    } else if (line.rfind("  ", 0) == 0 && line.rfind("    ", 0) != 0) {
      section = line.substr(2, line.find(':') - 2);
    }
  }
  return out;
}

// The include dirs a compile may search (-I, -isystem, -iquote, -idirafter; joined or apart) in
// `text` (compile commands: ninja -t commands, the build log of a Make build), each relative one
// from `cwd`. A header added to one that comes earlier than the one a header was found in changes
// what the compile reads, and only that dir's mtime shows it.
void include_dirs(const std::string& text, const fs::path& cwd, std::set<fs::path>& out) {
  static const char* const flags[] = {"-isystem", "-iquote", "-idirafter", "-I"};
  std::istringstream in(text);
  std::string w, pending;
  while (in >> w) {
    if (!w.empty() && (w.front() == '\'' || w.front() == '"')) w.erase(0, 1);
    if (!w.empty() && (w.back() == '\'' || w.back() == '"')) w.pop_back();
    std::string dir;
    if (!pending.empty()) {
      dir = w, pending.clear();
    } else {
      for (const char* f : flags)
        if (w.rfind(f, 0) == 0) {
          (w.size() == std::strlen(f) ? pending : dir) =
              w.size() == std::strlen(f) ? std::string(f) : w.substr(std::strlen(f));
          break;
        }
    }
    if (!dir.empty() && out.size() < 4096)
      out.insert(absolute_normal(fs::path(dir).is_absolute() ? fs::path(dir) : cwd / dir));
  }
}

// Whether a file is one a person may edit (a source, a header, a script, a build description)
// rather than a product only a build writes (an object, a library, an executable).
bool is_source_like(const fs::path& p) {
  static const std::set<std::string> exts = {".c",    ".cc",  ".cpp",  ".cxx", ".c++", ".h",     ".hh", ".hpp", ".hxx",
                                             ".cu",   ".cuh", ".hip",  ".py",  ".txt", ".cmake", ".in", ".mk",  ".json",
                                             ".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh",    ".ld", ".lds", ".map"};
  std::string n = p.filename().string();
  return exts.count(p.extension().string()) > 0 || n == "Makefile" || n == "makefile" || n == "GNUmakefile" ||
         n == "meson.build";
}

// The nearest ancestor of p holding build.ninja (empty where none does).
fs::path ninja_dir_above(Disk& disk, const fs::path& p) {
  for (fs::path d = p.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path())
    if (disk.info(d / "build.ninja", Follow::no).type == FileType::regular) return d;
  return {};
}

// The digest of the watch's picture before the build, less the files `is_output` names: what
// the build read of the watched dirs (by path, size and mtime; inodes change with every restore).
template <class IsOutput>
std::string inputs_digest(const BuildWatch& watch, IsOutput is_output) {
  std::string text;
  for (const auto& [p, st] : watch.before())
    if (!is_output(p)) text += p.string() + '\0' + std::to_string(st.size) + ' ' + std::to_string(st.mtime_ns) + '\n';
  return sha256_hex(text);
}

timespec to_timespec(std::int64_t ns) {
  return {static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
}

double store_clock_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string build_recipe(Disk& disk, const NativePlan& plan) {
  std::string t = "overlay build recipe 1\ncwd " + plan.build_cwd.string() + '\n';
  for (const auto& argv : plan.build_cmds) {
    t += "cmd";
    for (const auto& a : argv) t += '\0' + a;
    t += '\n';
  }
  for (const auto& s : plan.swaps)
    t += "swap " + s.target.string() + '\0' + to_string(s.kind) + '\0' + s.content_sha256 + '\n';
  for (const auto& a : plan.artifacts) t += "artifact " + a.string() + '\n';
  for (const auto& c : plan.caches) t += "cache " + c.string() + '\n';
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e), name = kv.substr(0, kv.find('='));
    if (name == "MAKEFLAGS" || name == "MFLAGS") {
      std::string key = make_flags_key(kv.substr(name.size() + 1));
      if (key.empty()) continue;  // jobs only: as if unset
      kv = name + '=' + key;
    }
    if (!is_volatile_env(name)) env.push_back(kv);
  }
  std::sort(env.begin(), env.end());
  for (const auto& kv : env) t += "env " + kv + '\n';
  t += toolchain_text(disk, plan);
  return sha256_hex(t);
}

BuildStore::BuildStore(Disk& disk, const fs::path& state_dir) : disk_(disk), root_(state_dir / kBuildStoreDirName) {
  if (const char* v = std::getenv("OVERLAY_BUILD_STORE_BYTES"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (end != nullptr && *end == '\0') cap_ = n;
  }
}

std::optional<StoredBuild> BuildStore::find(const NativePlan& plan, const BuildWatch& watch) {
  if (!enabled() || !watch.off_reason().empty()) return std::nullopt;
  fs::path dir = root_ / build_recipe(disk_, plan);
  if (disk_.info(dir, Follow::no).type != FileType::directory) return std::nullopt;
  for (const auto& e : disk_.list_dir(dir)) {
    fs::path rec = dir / e.name / kRecordName;
    FileInfo ri = disk_.info(rec, Follow::no);
    if (ri.type != FileType::regular || ri.uid != ::geteuid()) continue;  // another user's is never used
    StoredBuild b;
    try {
      b = json::parse(read_small_file(disk_, rec, kMaxRecordBytes)).get<StoredBuild>();
    } catch (const std::exception&) {
      continue;  // unreadable: a miss
    }
    b.where = dir / e.name;
    std::set<fs::path> outs;
    for (const auto& f : b.files) outs.insert(f.path);
    auto is_output = [&](const fs::path& p) {
      return outs.count(p) > 0 ||
             std::any_of(b.dirs.begin(), b.dirs.end(), [&](const StoredDir& d) { return is_within(p, d.path); });
    };
    if (inputs_digest(watch, is_output) != b.inputs_sha256) continue;
    if (!std::all_of(b.deps.begin(), b.deps.end(), [&](const StoredStamp& s) { return stamp_now(disk_, s.path) == s; }))
      continue;
    // An untracked output a person may edit (a source, a header, a script: one written while the
    // first build ran, or generated by it) is put back only over what that build would rewrite:
    // the file as it was before that build, or as that build left it. Changed otherwise, it is no
    // longer known to be an output only: a miss, never written over. Objects, libraries and
    // executables any later build rewrites are put back whatever another build left there.
    auto untouched = [&](const StoredStamp& was) {
      if (!is_source_like(was.path)) return true;
      FileInfo fi = disk_.info(fs::path(was.path), Follow::no);
      if (!fi.exists()) return true;  // gone: the build would make it again
      if (was.size >= 0 && static_cast<std::int64_t>(fi.size) == was.size && ns_of(fi.mtime) == was.mtime_ns)
        return true;
      auto f = std::find_if(b.files.begin(), b.files.end(), [&](const StoredFile& x) { return x.path == was.path; });
      return f != b.files.end() && ns_of(fi.mtime) == f->mtime_ns;
    };
    if (!std::all_of(b.before.begin(), b.before.end(), untouched)) continue;
    return b;
  }
  return std::nullopt;
}

namespace {

// Where serve writes `path`: in the directory add-native pinned for it, proven the same inode
// (pinned.hpp), else in its parent opened with no symlink followed anywhere on its path. Throws
// where neither stands: whoever can swap a directory on the path cannot choose where we write.
PinnedPlace place_for(Disk& disk, const std::string& path, const std::map<std::string, PinnedDir>& pins) {
  if (auto p = pins.find(path); p != pins.end()) return open_pinned(disk, path, p->second);
  PinnedPlace pl;
  pl.dir = disk.open_dir(At(fs::path(path).parent_path()));
  pl.path = path;
  return pl;
}

}  // namespace

std::string BuildStore::serve(const StoredBuild& b, const std::map<std::string, PinnedDir>& pins) {
  struct Staged {
    PinnedPlace place;
    std::string tmp;  // the copy's name beside it
    bool dir;
  };
  std::vector<Staged> staged;
  auto drop_staged = [&] {
    for (const auto& s : staged) try {
        remove_tree(disk_, At(*s.place.dir, s.tmp));
      } catch (const Error&) {
      }
  };
  try {
    for (const auto& f : b.files) {
      staged.push_back(
          {place_for(disk_, f.path, pins), sibling_temp_path(f.path, "overlay-new").filename().string(), false});
      const Staged& s = staged.back();
      Copied c = copy_file_hashing(disk_, At(b.where / f.blob), At(*s.place.dir, s.tmp), f.mode, Durable::yes);
      if (c.sha256 != f.sha256)
        throw Error("the stored copy of " + f.path + " is not what was recorded (sha256 " + c.sha256.substr(0, 16) +
                    ")");
    }
    for (const auto& d : b.dirs) {
      staged.push_back(
          {place_for(disk_, d.path, pins), sibling_temp_path(d.path, "overlay-new").filename().string(), true});
      const Staged& s = staged.back();
      disk_.make_dir(At(*s.place.dir, s.tmp), 0700);
      extract_tar(disk_, b.where / d.tar, At(*s.place.dir, s.tmp), fs::path(d.path).filename().string(), d.sha256);
      disk_.sync_filesystem(At(*s.place.dir, s.tmp));
    }
  } catch (const std::exception& e) {
    drop_staged();
    return e.what();
  }
  // Every copy proven: from here each goes in by one rename, in the directory it was made in.
  for (const auto& s : staged) {
    At here = s.place.at();
    if (s.dir && disk_.info(here, Follow::no).exists()) {
      At trash = here.sibling(sibling_temp_path(s.place.path, "overlay-trash").filename().string());
      disk_.rename(here, trash);
      remove_tree(disk_, trash);
    }
    disk_.rename(At(*s.place.dir, s.tmp), here);
    disk_.sync_dir(At(*s.place.dir, ""));
  }
  for (std::size_t i = 0; i < b.files.size(); ++i)
    disk_.set_mtime(staged[i].place.at(), to_timespec(b.files[i].mtime_ns));
  for (const auto& src : b.sources) {
    if (src.size < 0) continue;
    PinnedPlace pl = place_for(disk_, src.path, pins);
    if (disk_.info(pl.at(), Follow::no).type == FileType::regular) disk_.set_mtime(pl.at(), to_timespec(src.mtime_ns));
  }
  try {  // least recently used: its record's mtime
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    disk_.set_mtime(At(b.where / kRecordName), now);
  } catch (const Error&) {
  }
  return "";
}

namespace {

// A file or cache dir keep takes, found where serve would put it back (place_for).
struct Found {
  std::string path;
  PinnedPlace place;
  FileInfo info;
};

std::int64_t mtime_ns_of(const FileInfo& fi) {
  return static_cast<std::int64_t>(fi.mtime.tv_sec) * 1000000000LL + fi.mtime.tv_nsec;
}

}  // namespace

std::string BuildStore::keep(const NativePlan& plan, const BuildWatch& watch,
                             const std::vector<UntrackedOutput>& outputs, const std::string& entry,
                             const std::map<std::string, PinnedDir>& pins, const fs::path& log) {
  if (!enabled()) return "the build store is off (OVERLAY_BUILD_STORE_BYTES=0)";
  if (!watch.off_reason().empty()) return "the build's dirs were not watched (" + watch.off_reason() + ")";
  auto in_a_cache = [&](const fs::path& p) {
    return std::any_of(plan.caches.begin(), plan.caches.end(), [&](const fs::path& c) { return is_within(p, c); });
  };
  // What the build left, each read in the directory serve would write it in: a path swapped
  // meanwhile never makes another directory's files pass for the build's.
  std::vector<Found> files, dirs;
  std::uint64_t size = 0;
  try {
    auto find = [&](const std::string& path) {
      Found f{path, place_for(disk_, path, pins), {}};
      f.info = disk_.info(f.place.at(), Follow::no);
      return f;
    };
    for (const auto& a : plan.artifacts) {
      if (in_a_cache(a)) continue;  // in its cache's tar, with the rest the build left there
      files.push_back(find(a.string()));
      if (files.back().info.type != FileType::regular)
        return "artifact " + a.string() + " is not a regular file after the build";
    }
    for (const auto& u : outputs)
      if (!in_a_cache(u.path))
        if (Found f = find(u.path); f.info.type == FileType::regular) files.push_back(std::move(f));
    for (const auto& c : plan.caches)
      if (Found f = find(c.string()); f.info.type == FileType::directory) dirs.push_back(std::move(f));
  } catch (const Error& e) {
    return std::string("an output's directory is not where add-native found it (") + e.what() + ")";
  }
  for (const auto& f : files) size += f.info.size;
  if (size > cap_)
    return "its outputs (" + std::to_string(size) + " bytes) are more than the store holds (OVERLAY_BUILD_STORE_BYTES)";
  StoredBuild b;
  b.recipe = build_recipe(disk_, plan);
  b.entry = entry;
  b.built_at = store_clock_seconds();
  std::set<fs::path> outs;
  for (const auto& f : files) outs.insert(f.path);
  auto is_output = [&](const fs::path& p) { return outs.count(p) > 0 || in_a_cache(p); };
  b.inputs_sha256 = inputs_digest(watch, is_output);
  std::set<fs::path> ninja_dirs;
  if (disk_.info(plan.build_cwd / "build.ninja", Follow::no).type == FileType::regular)
    ninja_dirs.insert(plan.build_cwd);
  for (const auto& c : plan.caches)
    if (disk_.info(c / "build.ninja", Follow::no).type == FileType::regular) ninja_dirs.insert(c);
  for (const auto& o : outs)
    if (fs::path d = ninja_dir_above(disk_, o); !d.empty()) ninja_dirs.insert(d);
  std::set<fs::path> swapped;
  for (const auto& s : plan.swaps) swapped.insert(s.target);
  std::set<fs::path> deps = dependency_files(disk_, ninja_dirs, watch.dirs(), plan.build_cwd);
  // What a compile of a swapped file read is known only from a dependency record that names it:
  // without one (a Makefile without -MD, setuptools) a header outside the watched dirs could
  // change unseen, and a record would serve what the build would no longer make.
  for (const auto& s : plan.swaps)
    if (s.kind != SwapKind::remove && deps.count(absolute_normal(s.target)) == 0)
      return "no dependency record (Ninja's deps log, a depfile) names " + s.target.string() +
             ", so the headers its build read are unknown";
  for (const auto& dir : ninja_dirs)
    if (!in_a_cache(dir))
      deps.merge(graph_files(dir));  // a JIT cache's build.ninja is rewritten on each load: an output
  std::set<fs::path> dirs_of_deps;
  auto watched = [&](const fs::path& p) {
    return std::any_of(watch.dirs().begin(), watch.dirs().end(), [&](const fs::path& d) { return is_within(p, d); });
  };
  for (const auto& d : deps) {
    if (is_output(d) || swapped.count(d) > 0 || strictly_inside(d, plan.overlay) || watch.before().count(d) > 0)
      continue;
    StoredStamp st = stamp_now(disk_, d);
    if (st.size < 0)
      return "a dependency record names " + d.string() + ", which is not there: what the build read is unknown";
    b.deps.push_back(std::move(st));
    // A header added beside one read (an earlier -I dir holding one too) changes its dir's mtime.
    if (!watched(d)) dirs_of_deps.insert(d.parent_path());
  }
  for (const auto& dir : ninja_dirs) {
    RunOptions o;
    o.output = Output::capture;
    o.timeout_s = 60;
    if (RunResult r = run_process({"ninja", "-C", dir.string(), "-t", "commands"}, o); r.ok())
      include_dirs(r.out, dir, dirs_of_deps);
  }
  try {  // the commands a Make build echoed
    include_dirs(read_small_file(disk_, log, 64u << 20), plan.build_cwd, dirs_of_deps);
  } catch (const Error&) {
  }
  for (const auto& d : dirs_of_deps)
    if (!watched(d)) b.deps.push_back(stamp_now(disk_, d));
  for (const auto& s : plan.swaps)
    if (s.kind != SwapKind::remove) b.sources.push_back(stamp_now(disk_, s.target));
  std::set<fs::path> artifacts(plan.artifacts.begin(), plan.artifacts.end());
  for (const auto& f : files) {
    if (artifacts.count(f.path) > 0) continue;
    auto was = watch.before().find(f.path);
    b.before.push_back(was == watch.before().end()
                           ? StoredStamp{f.path, -1, 0, 0}
                           : StoredStamp{f.path, static_cast<std::int64_t>(was->second.size), was->second.mtime_ns, 0});
  }
  // Written under a temporary name, renamed into place whole.
  make_dirs(disk_, root_, 0700);
  fs::path tmp = root_ / (".tmp-" + random_hex(8));
  fs::path final_dir = root_ / b.recipe / b.inputs_sha256;
  try {
    disk_.make_dir(tmp, 0700);
    for (std::size_t k = 0; k < files.size(); ++k) {
      const Found& f = files[k];
      StoredFile sf{f.path, "f" + std::to_string(k), "", f.info.mode, mtime_ns_of(f.info)};
      sf.sha256 = copy_file_hashing(disk_, f.place.at(), At(tmp / sf.blob), 0600, Durable::no).sha256;
      if (stamp_of(disk_.info(f.place.at(), Follow::no)) != stamp_of(f.info))
        throw Error(f.path + " changed while it was kept");
      b.bytes += f.info.size;
      b.files.push_back(std::move(sf));
    }
    for (std::size_t k = 0; k < dirs.size(); ++k) {
      StoredDir d{dirs[k].path, "d" + std::to_string(k) + ".tar", ""};
      d.sha256 = snapshot_dir_to_tar(disk_, dirs[k].place.at(), tmp / d.tar);
      b.bytes += disk_.info(tmp / d.tar, Follow::no).size;
      b.dirs.push_back(std::move(d));
    }
    // Nothing here is fsynced: a record is proven when it is used (it parses, and every copy
    // hashes to what it says), so what a power cut tears is a miss, never a wrong output.
    auto out = disk_.create(tmp / kRecordName, 0600, CreateMode::exclusive);
    std::string text = json(b).dump();
    out->write(text.data(), text.size());
    out->close();
    disk_.make_dir(At(final_dir.parent_path()), 0700);  // not durable either: a lost name is a miss
    if (disk_.info(final_dir, Follow::no).exists()) {   // the same build kept before (or --rebuild): the newer wins
      fs::path old = root_ / (".old-" + random_hex(8));
      disk_.rename(At(final_dir), At(old));
      remove_tree(disk_, At(old));
    }
    disk_.rename(At(tmp), At(final_dir));
  } catch (const std::exception& e) {
    try {
      remove_tree(disk_, At(tmp));
    } catch (const Error&) {
    }
    return e.what();
  }
  evict();
  return "";
}

void BuildStore::evict() {
  struct Rec {
    fs::path dir;
    std::int64_t used = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Rec> recs;
  std::uint64_t total = 0;
  for (const auto& r : disk_.list_dir(root_)) {
    fs::path rdir = root_ / r.name;
    if (r.name.rfind(".tmp-", 0) == 0 || r.name.rfind(".old-", 0) == 0) {
      // a keep killed midway: swept once an hour old (a live keep renames its own within seconds)
      FileInfo fi = disk_.info(rdir, Follow::no);
      if (fi.exists() && fi.mtime.tv_sec + 3600 < ::time(nullptr)) remove_tree(disk_, At(rdir));
      continue;
    }
    if (r.type != FileType::directory && r.type != FileType::none) continue;
    for (const auto& e : disk_.list_dir(rdir)) {
      fs::path rec = rdir / e.name / kRecordName;
      FileInfo ri = disk_.info(rec, Follow::no);
      if (ri.type != FileType::regular) continue;
      std::uint64_t bytes = ri.size;
      try {
        bytes += json::parse(read_small_file(disk_, rec, kMaxRecordBytes)).at("bytes").get<std::uint64_t>();
      } catch (const std::exception&) {
      }
      recs.push_back(
          {rdir / e.name, static_cast<std::int64_t>(ri.mtime.tv_sec) * 1000000000LL + ri.mtime.tv_nsec, bytes});
      total += bytes;
    }
  }
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) { return a.used < b.used; });
  for (std::size_t i = 0; i < recs.size() && total > cap_; ++i) {
    fs::path gone = root_ / (".old-" + random_hex(8));
    try {
      disk_.rename(At(recs[i].dir), At(gone));  // one rename: a finder never sees half a record
      remove_tree(disk_, At(gone));
      total -= recs[i].bytes;
    } catch (const Error&) {
    }
  }
}

}  // namespace overlay
