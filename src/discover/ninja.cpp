// Ninja build dirs (plain, CMake's Ninja generator, Meson): what `ninja -t query|deps` says is
// rebuilt from the target. Only explicit and implicit inputs rebuild an output; an order-only
// input (`||`) never does, so an output reached only through one is not an artifact.
#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "overlay/build_graph.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/object_files.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// Whether `node`'s edge is rebuilt when `input` changes: true unless `input` is only an
// order-only input of it. (An input it does not list at all is followed: better one artifact
// too many that verify-native will name than a patched file left behind.)
bool rebuilt_from(const NinjaNode& node, const std::string& input) {
  bool listed = false;
  for (const auto& [name, kind] : node.inputs) {
    if (name != input) continue;
    if (kind != InputKind::order_only) return true;
    listed = true;
  }
  return !listed;
}

// `ninja -t deps`: the outputs whose recorded header dependencies include the target.
std::vector<std::string> ninja_dependents_by_deps(DiskReader& disk, const fs::path& dir, const Target& t,
                                                  std::string& via) {
  std::vector<std::string> outs;
  for (const auto& [out, deps] : ninja_deps(dir))
    for (const auto& dep : deps)
      if (t.is(disk, resolve_in(dir, dep)) && std::find(outs.begin(), outs.end(), out) == outs.end()) {
        outs.push_back(out);
        via = dep;
      }
  return outs;
}

// The first outputs built from the target: by the graph, or by the headers the compiler recorded.
std::vector<std::string> first_outputs(DiskReader& disk, const fs::path& dir, const Target& t, BuildCandidate& c) {
  for (const auto& s : t.spellings(dir)) {
    NinjaNode n = ninja_query(dir, s);
    if (!n.known || n.outputs.empty()) continue;
    std::vector<std::string> first;
    for (const auto& o : n.outputs)
      if (rebuilt_from(ninja_query(dir, o), s)) first.push_back(o);
    if (first.empty()) continue;
    c.evidence.push_back((dir / "build.ninja").string() + ": " + s + " is an input of " + join_words(first) +
                         " (ninja -t query)");
    return first;
  }
  std::string via;
  std::vector<std::string> first = ninja_dependents_by_deps(disk, dir, t, via);
  if (!first.empty())
    c.evidence.push_back((dir / ".ninja_deps").string() + ": " + join_words(first) + " depend on " + via +
                         " (ninja -t deps)");
  return first;
}

// Everything rebuilt from `first`, transitively through explicit and implicit inputs: objects,
// static archives, what links those; a shared library ends the walk (its dependents are relinked
// to the same bytes); phony aliases pass through without being artifacts.
void follow_outputs(DiskReader& disk, const fs::path& dir, const std::vector<std::string>& first, BuildCandidate& c) {
  std::set<std::string> seen;
  std::deque<std::string> todo(first.begin(), first.end());
  std::vector<std::string> order_only;
  while (!todo.empty()) {
    std::string out = todo.front();
    todo.pop_front();
    if (!seen.insert(out).second) continue;
    NinjaNode n = ninja_query(dir, out);
    if (!n.known) continue;
    fs::path p = resolve_in(dir, out);
    bool phony = n.rule == "phony";
    // Only files the build left: not a symlink to a library, not a custom command's symbolic
    // output (CMake's install.util), never created.
    if (!phony && disk.info(p, Follow::no).type == FileType::regular &&
        !(p.extension() == ".a" && is_thin_archive(disk, p)))
      add_unique(c.artifacts, p);
    if (!phony && is_shared_library_name(p)) continue;
    for (const auto& o : n.outputs) {
      if (seen.count(o)) continue;
      if (rebuilt_from(ninja_query(dir, o), out))
        todo.push_back(o);
      else if (std::find(order_only.begin(), order_only.end(), o) == order_only.end())
        order_only.push_back(o);
    }
  }
  if (!order_only.empty())
    c.evidence.push_back((dir / "build.ninja").string() +
                         ": not rebuilt (reached only through order-only inputs): " + join_words(order_only));
}

// Installed copies of the artifacts that `cmake --install` made (install_manifest.txt): same file
// name, a regular file (an installed symlink follows its target).
void add_installed_copies(DiskReader& disk, const fs::path& dir, BuildCandidate& c) {
  fs::path manifest = dir / "install_manifest.txt";
  if (!is_regular(disk, manifest)) return;
  std::vector<fs::path> copies;
  for (const auto& line : lines_of(read_small_file(disk, manifest, kMaxTextBytes))) {
    if (line.empty() || line[0] != '/') continue;
    fs::path installed = fs::path(line).lexically_normal();
    if (disk.info(installed, Follow::no).type != FileType::regular) continue;
    for (const auto& a : c.artifacts)
      if (a.filename() == installed.filename() && a.extension() != ".o") add_unique(copies, installed);
  }
  if (copies.empty()) return;
  for (const auto& p : copies) add_unique(c.artifacts, p);
  c.build_cmds.push_back({"cmake", "--install", dir.string()});
  c.evidence.push_back(manifest.string() + ": installed copies " + join_words([&] {
                         std::vector<std::string> s;
                         for (const auto& p : copies) s.push_back(p.string());
                         return s;
                       }()) +
                       " (so the build installs too: cmake --install)");
}

// Build dirs the CMake compile database beside `dir` names for the target (CMAKE_BINARY_DIR).
std::vector<fs::path> compile_db_build_dirs(DiskReader& disk, const fs::path& dir, const Target& t) {
  std::vector<fs::path> out;
  for (const auto& e : compile_database(disk, dir / "compile_commands.json")) {
    fs::path d = e.directory;
    if (!t.is(disk, resolve_in(d, e.file))) continue;
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

// setuptools' temp dirs hold a torch BuildExtension's compile-only build.ninja: running ninja
// there rebuilds objects and links nothing, so they belong to the setuptools finder.
bool is_setuptools_temp(const fs::path& d) { return d.filename().string().rfind("temp.", 0) == 0; }

}  // namespace

std::vector<fs::path> ninja_dirs_at(DiskReader& disk, const fs::path& dir, const Target& t) {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& d) {
    if (!is_setuptools_temp(d) && disk.info(d / "build.ninja", Follow::no).type == FileType::regular)
      add_unique(dirs, d);
  };
  add(dir);
  for (const auto& e : sorted_entries(disk, dir)) {
    if (e.name.rfind("build", 0) != 0 && e.name != "out" && e.name != "_build") continue;
    add(dir / e.name);
    // One level more: meson-python's build/cp3XX, CMake presets' build/<preset>.
    if (e.name == "build")
      for (const auto& sub : sorted_entries(disk, dir / e.name)) add(dir / e.name / sub.name);
  }
  for (const auto& d : compile_db_build_dirs(disk, dir, t)) add(d);
  return dirs;
}

std::optional<BuildCandidate> ninja_candidate(DiskReader& disk, const fs::path& dir, const Target& t) {
  BuildCandidate c;
  std::vector<std::string> first = first_outputs(disk, dir, t, c);
  if (first.empty()) return std::nullopt;
  follow_outputs(disk, dir, first, c);
  bool cmake = disk.info(dir / "CMakeCache.txt", Follow::no).type == FileType::regular;
  bool meson = is_directory(disk, dir / "meson-private");
  c.kind = cmake ? "cmake" : meson ? "meson" : "ninja";
  c.build_cmds.push_back(cmake ? Argv{"cmake", "--build", dir.string()} : Argv{"ninja", "-C", dir.string()});
  c.build_cwd = dir;
  if (cmake) c.evidence.push_back((dir / "CMakeCache.txt").string() + ": a CMake build dir");
  if (meson)
    c.evidence.push_back((dir / "meson-private").string() + ": a Meson build dir (ninja regenerates it as needed)");
  if (cmake) add_installed_copies(disk, dir, c);
  return c;
}

}  // namespace overlay::discover_parts
