// JIT caches: builds made on the next load, found by the build files they leave.
// * torch cpp_extension `load()` (torch/utils/cpp_extension.py, `_jit_compile` and
//   `_write_ninja_file_to_build_library`): `$TORCH_EXTENSIONS_DIR/<name>/` or
//   `~/.cache/torch_extensions/py3XX_<cu|cpu>/<name>/` holds build.ninja and `<name>.so`; the
//   whole dir is the cache, rebuilt on the next load.
// * aiter JIT modules (aiter/jit/core.py, `build_module`): `<jit>/build/<md>/build/build.ninja`
//   compiles the sources (rules without depfiles), and the module is copied to `<jit>/<md>.so`;
//   while that copy exists a source edit is ignored, so the build is ninja there plus the copy,
//   and the copy is an artifact. `<jit>` is $AITER_JIT_DIR, else ~/.aiter/jit, plus --cache-root.
// * aiter `cpp_itfs` (aiter/jit/utils/cpp_extension-free `compile_template_op`): folders
//   `<MD_NAME>_<md5>` under $AITER_ROOT_DIR/build or ~/.aiter/build, each with a Makefile that
//   compiled copies of the sources and a `lib.so`, built again only when the folder is gone: the
//   folder is a cache.
#include <algorithm>
#include <cstdlib>

#include "overlay/file_ops.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// The line of a build file that names the target (absolute, or relative to `dir`), 1-based.
std::optional<std::pair<int, std::string>> naming_line(DiskReader& disk, const fs::path& file, const fs::path& dir,
                                                       const Target& t, bool make_syntax) {
  auto lines = lines_of(read_small_file(disk, file, kMaxTextBytes));
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto words = make_syntax ? words_or_none(lines[i]) : ninja_words(lines[i]);
    for (auto w : words) {
      if (!w.empty() && w.back() == ':') w.pop_back();
      if (w.empty() || w[0] == '-' || w[0] == '$') continue;
      if (fs::path p = resolve_in(dir, w); t.is(disk, p)) return std::make_pair(static_cast<int>(i + 1), w);
    }
  }
  return std::nullopt;
}

void torch_dir(DiskReader& disk, const fs::path& dir, const Target& t, std::vector<BuildCandidate>& out) {
  auto named = naming_line(disk, dir / "build.ninja", dir, t, false);
  std::string why;
  if (!named && (!t.is_header() || objects_including(disk, dir / "build.ninja", t, why).empty())) return;
  BuildCandidate c;
  std::string name = dir.filename().string();
  c.kind = "torch-jit";
  c.build_cwd = dir;
  c.caches = {dir};
  for (const auto& e : sorted_entries(disk, dir))  // <name>.so, or <name>_vN.so after a rebuild in one process
    if (e.name.rfind(name, 0) == 0 && ends_with(e.name, ".so") && is_regular(disk, dir / e.name))
      c.artifacts.push_back(dir / e.name);
  c.evidence.push_back(
      "torch extension '" + name + "': " +
      (named ? (dir / "build.ninja").string() + ":" + std::to_string(named->first) + " compiles " + named->second
             : why) +
      " (built again on its next load)");
  out.push_back(std::move(c));
}

// <jit>/build/<md>/build/build.ninja → its objects and <md>.so, and the copy <jit>/<md>.so that
// aiter imports (aiter/jit/core.py: `build_module` runs ninja there, then copies the module up).
// The build: ninja in the build dir, then the copy; for a header (aiter's rules record no
// depfiles, so ninja cannot see it) first the removal of the objects whose sources include it.
void aiter_module(DiskReader& disk, const fs::path& jit, const std::string& md, const Target& t,
                  std::vector<BuildCandidate>& out) {
  fs::path bdir = jit / "build" / md / "build";
  if (!is_regular(disk, bdir / "build.ninja")) return;
  std::optional<BuildCandidate> graph = ninja_candidate(disk, bdir, t);
  BuildCandidate c;
  if (graph) {
    c = std::move(*graph);
    c.build_cmds.clear();
  } else {
    std::string why;
    if (!t.is_header()) return;
    auto objs = objects_including(disk, bdir / "build.ninja", t, why);
    if (objs.empty()) return;
    c.evidence.push_back(why);
    Argv rm = {"rm", "-f"};
    for (const auto& o : objs) {
      fs::path p = resolve_in(bdir, o);
      rm.push_back(p.string());
      if (is_regular(disk, p)) c.artifacts.push_back(p);
    }
    c.build_cmds.push_back(rm);
    if (is_regular(disk, bdir / (md + ".so"))) c.artifacts.push_back(bdir / (md + ".so"));
  }
  c.kind = "aiter-jit";
  c.build_cwd = bdir;
  c.build_cmds.push_back({"ninja", "-C", bdir.string()});
  fs::path so = jit / (md + ".so");
  if (is_regular(disk, so)) {
    c.artifacts.push_back(so);
    c.build_cmds.push_back({"cp", (bdir / (md + ".so")).string(), so.string()});
  }
  c.evidence.push_back("aiter module '" + md + "': " + so.string() +
                       " is the copy aiter imports; while it exists a source edit is ignored, so the build copies the "
                       "rebuilt module over it (as aiter/jit/core.py build_module does)");
  out.push_back(std::move(c));
}

// <build>/<MD_NAME>_<md5>/: its Makefile names the target, or the folder holds a copy of it
// (cpp_itfs copies the template's sources and headers in before compiling).
void aiter_cpp_itfs(DiskReader& disk, const fs::path& folder, const Target& t, std::vector<BuildCandidate>& out) {
  fs::path mk = folder / "Makefile";
  std::string how;
  if (auto named = naming_line(disk, mk, folder, t, true)) {
    how = mk.string() + ":" + std::to_string(named->first) + " names " + named->second;
  } else {
    walk_tree(
        disk, folder,
        [&](const fs::path& rel, FileType type) {
          if (type == FileType::directory)
            return std::distance(rel.begin(), rel.end()) > 2 ? WalkStep::skip : WalkStep::descend;
          if (how.empty() && rel.filename() == t.given.filename() && type == FileType::regular)
            how = (folder / rel).string() + ": a copy of " + t.given.filename().string() + " built by " + mk.string();
          return WalkStep::descend;
        },
        [](const fs::path&, const std::string&) {});
    if (how.empty()) return;
  }
  BuildCandidate c;
  c.kind = "aiter-cpp-itfs";
  c.build_cwd = folder;
  c.caches = {folder};
  c.evidence.push_back("aiter cpp_itfs build '" + folder.filename().string() + "': " + how +
                       " (built again on the next call once the folder is gone: invalidate it)");
  out.push_back(std::move(c));
}

void env_root(std::vector<fs::path>& roots, const char* var, const char* sub = nullptr) {
  if (const char* v = std::getenv(var); v && *v) add_unique(roots, sub ? fs::path(v) / sub : fs::path(v));
}

}  // namespace

std::vector<fs::path> jit_roots(DiskReader& disk, const DiscoverRequest& req, const Target& t) {
  std::vector<fs::path> roots;
  if (req.default_cache_roots) {
    const char* home = std::getenv("HOME");
    if (const char* te = std::getenv("TORCH_EXTENSIONS_DIR"); te && *te)
      roots.emplace_back(te);
    else if (home && *home)
      roots.push_back(fs::path(home) / ".cache/torch_extensions");
    env_root(roots, "AITER_JIT_DIR");
    env_root(roots, "AITER_ROOT_DIR", "build");
    if (home && *home) {
      add_unique(roots, fs::path(home) / ".aiter/jit");
      add_unique(roots, fs::path(home) / ".aiter/build");
    }
    // aiter built from source keeps its JIT dir in the package: <repo>/aiter/jit beside <repo>/csrc.
    for (fs::path d = t.given.parent_path(); !d.empty(); d = d.parent_path()) {
      if (is_directory(disk, d / "aiter/jit")) add_unique(roots, d / "aiter/jit");
      if (d == d.root_path()) break;
    }
  }
  for (const auto& r : req.cache_roots) add_unique(roots, absolute_normal(r));
  return roots;
}

void jit_candidates(DiskReader& disk, const fs::path& root, const Target& t, std::vector<BuildCandidate>& out) {
  if (!is_directory(disk, root)) return;
  for (const auto& e : sorted_entries(disk, root)) {
    fs::path d = root / e.name;
    if (!is_directory(disk, d)) continue;
    if (e.name == "build" && !is_regular(disk, d / "build.ninja")) {  // an aiter JIT dir
      for (const auto& md : sorted_entries(disk, d)) aiter_module(disk, root, md.name, t, out);
      continue;
    }
    if (is_regular(disk, d / "build.ninja"))
      torch_dir(disk, d, t, out);
    else if (is_regular(disk, d / "Makefile"))
      aiter_cpp_itfs(disk, d, t, out);
    else  // torch's py3XX_<cu|cpu>/ level
      for (const auto& sub : sorted_entries(disk, d))
        if (is_regular(disk, d / sub.name / "build.ninja")) torch_dir(disk, d / sub.name, t, out);
  }
}

}  // namespace overlay::discover_parts
