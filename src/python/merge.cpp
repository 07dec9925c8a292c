#include "overlay/python/merge.hpp"

#include <algorithm>
#include <map>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/python/entries.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/python/verbs.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

// Everything of an input but its Python entries' files: the tool's own records and runtime.
bool is_own_name(const fs::path& rel) {
  std::string top = rel.begin()->string(), leaf = rel.filename().string();
  return is_runtime_file(top) || top == kManifestName || top == kBackupDirName || top == "_trash" || top == "_logs" ||
         top == kStatsDirName || leaf == "__pycache__" || leaf == ".git" || leaf == ".torch_ext" ||
         (leaf.size() > 4 && leaf.compare(leaf.size() - 4, 4, ".pyc") == 0) || leaf.rfind(".overlay", 0) == 0;
}

std::string identity_of(const json& e, const PySection& s) {
  std::string id = e.contains(s.identity) && e[s.identity].is_string() ? e[s.identity].get<std::string>() : e.dump();
  if (std::string(s.array) == "hooks" && e.contains("impl_module") && e["impl_module"].is_string())
    id += " -> " + e["impl_module"].get<std::string>();
  return id;
}

// Whether two serving sites (module or module:attr; attr may be dotted) can touch the same code.
bool sites_overlap(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    auto c = s.find(':');
    return c == std::string::npos ? std::pair{s, std::string()} : std::pair{s.substr(0, c), s.substr(c + 1)};
  };
  auto [am, aa] = split(a);
  auto [bm, ba] = split(b);
  auto below = [](const std::string& x, const std::string& y, char sep) {
    return x.size() > y.size() && x.compare(0, y.size(), y) == 0 && x[y.size()] == sep;
  };
  if (am == bm) return aa.empty() || ba.empty() || aa == ba || below(aa, ba, '.') || below(ba, aa, '.');
  return (aa.empty() && below(bm, am, '.')) || (ba.empty() && below(am, bm, '.'));
}

// The serving sites an entry replaces or owns: a module entry its module, a rebind its target,
// an installer the targets it declares.
std::vector<std::string> sites_of(const json& e, const std::string& array) {
  std::vector<std::string> out;
  auto str = [&](const char* k) { return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : std::string(); };
  if (array == "modules") out.push_back(str("module"));
  if (array == "rebinds") out.push_back(str("target"));
  if (array == "installers" && e.contains("targets") && e["targets"].is_array())
    for (const auto& t : e["targets"])
      if (t.is_string()) out.push_back(t.get<std::string>());
  return out;
}

struct Union {
  json doc = json::object();
  std::map<std::string, std::pair<fs::path, fs::path>> files;                   // rel -> (path, its overlay)
  std::vector<std::pair<std::string, std::pair<std::string, fs::path>>> sites;  // site -> (owner, overlay)
  std::map<std::string, fs::path> entry_from;  // "array:identity" -> the overlay it came from
  std::vector<std::string> notes;
};

// An entry as it acts: the distribution it was made against (issue 62) is not part of what it
// does, so the same entry made against two versions is one entry (the first overlay's is kept).
json without_distribution(json e) {
  if (e.is_object()) e.erase("distribution");
  return e;
}

void add_entries(Union& u, const fs::path& src, const Manifest& m) {
  for (const PySection& s : python_sections()) {
    auto it = m.doc.find(s.array);
    if (it == m.doc.end() || !it->is_array()) continue;
    json& into = u.doc[s.array];
    if (!into.is_array()) into = json::array();
    for (const auto& e : *it) {
      std::string id = identity_of(e, s);
      bool dup = false;
      for (const auto& have : into) {
        if (identity_of(have, s) != id) continue;
        if (without_distribution(have) != without_distribution(e))
          throw Error(std::string("conflicting ") + s.array + " entry for " + id + ": " + have.dump() + " (from " +
                      u.entry_from[s.array + std::string(":") + id].string() + ") vs " + e.dump() + " (from " +
                      src.string() + ")");
        dup = true;
      }
      if (dup) continue;
      u.entry_from[s.array + std::string(":") + id] = src;
      std::string owner = std::string(s.array) + ":" + id;
      for (const auto& site : sites_of(e, s.array))
        for (const auto& [prev, who] : u.sites)
          if (who.first != owner && sites_overlap(site, prev))
            throw Error("conflicting overlay target: " + site + " (" + owner + " from " + src.string() + ") overlaps " +
                        prev + " (" + who.first + " from " + who.second.string() + ")");
      for (const auto& site : sites_of(e, s.array)) u.sites.push_back({site, {owner, src}});
      into.push_back(e);
    }
  }
}

void add_other_keys(Union& u, const fs::path& src, const Manifest& m) {
  for (const auto& [key, value] : m.doc.items()) {
    bool section = false;
    for (const PySection& s : python_sections()) section = section || key == s.array;
    if (section || key == "natives" || key == "running_patched" || key == "untracked_outputs" || key == "litter")
      continue;
    if (u.doc.contains(key) && u.doc[key] != value)
      throw Error("conflicting manifest metadata " + key + ": " + src.string() + " differs from the other overlay");
    u.doc[key] = value;
  }
  if (!m.natives.empty())
    u.notes.push_back("native entries of " + src.string() + " are not merged (" + std::to_string(m.natives.size()) +
                      "): in-place changes stay with the overlay that made them");
}

void add_files(Disk& disk, Union& u, const fs::path& src) {
  walk_tree(disk, src, [&](const fs::path& rel, FileType type) {
    if (is_own_name(rel)) return WalkStep::skip;
    if (type == FileType::symlink)
      throw Error("overlay symlinks must be materialised before merge: " + (src / rel).string());
    if (type != FileType::regular) return WalkStep::descend;
    auto it = u.files.find(rel.string());
    if (it != u.files.end()) {
      if (read_small_file(disk, it->second.first, 1u << 28) != read_small_file(disk, src / rel, 1u << 28))
        throw Error("conflicting overlay file " + rel.string() + ": " + it->second.first.string() + " vs " +
                    (src / rel).string());
      return WalkStep::descend;
    }
    u.files[rel.string()] = {src / rel, src};
    return WalkStep::descend;
  });
}

// The file a dotted module is imported from inside an overlay, relative to it.
std::vector<std::string> module_files(const std::string& module) {
  std::string rel = module;
  std::replace(rel.begin(), rel.end(), '.', '/');
  return {rel + ".py", rel + "/__init__.py"};
}

// What the merged overlay would import but lacks: a modules[] file, an installer's package.
// A modules[] entry that replaces an installer's own package would take the installer away.
void check_complete(const Union& u) {
  std::vector<std::string> installer_modules;
  if (u.doc.contains("installers") && u.doc["installers"].is_array())
    for (const auto& e : u.doc["installers"]) {
      if (!e.is_object() || !e.contains("module") || !e["module"].is_string()) continue;
      std::string m = e["module"].get<std::string>();
      auto files = module_files(m);
      if (!u.files.count(files[0]) && !u.files.count(files[1]))
        throw Error("installer " + e.value("id", m) + " imports " + m + ", which the overlay does not hold (" +
                    files[0] + " or " + files[1] + ")");
      installer_modules.push_back(m);
    }
  if (!u.doc.contains("modules") || !u.doc["modules"].is_array()) return;
  for (const auto& e : u.doc["modules"]) {
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string()) continue;
    std::string file = e["file"].get<std::string>(), module = e.value("module", std::string());
    if (!fs::path(file).is_absolute() && !u.files.count(fs::path(file).lexically_normal().string()))
      throw Error("modules entry " + module + " names a file the overlay does not hold: " + file);
    for (const auto& m : installer_modules)
      if (sites_overlap(module, m))
        throw Error("conflicting overlay target: modules entry " + module + " replaces installer package " + m);
  }
}

fs::path checked_input(Disk& disk, const fs::path& p, const fs::path& out, const char* flag) {
  fs::path abs = absolute_normal(p);
  if (disk.info(abs, Follow::yes).type != FileType::directory)
    throw Error(std::string(flag) + " overlay does not exist: " + abs.string());
  auto inside = [](const fs::path& a, const fs::path& b) {
    auto rel = a.lexically_relative(b);
    return !rel.empty() && *rel.begin() != "..";
  };
  if (inside(abs, out) || inside(out, abs))
    throw Error("merge inputs and output must not contain one another: " + abs.string());
  if (classify_sitecustomize(disk, abs) == SitecustomizeKind::foreign)
    // v7's words (its callers match them): the file's own hooks would be lost.
    throw Error(std::string("custom sitecustomize cannot be merged automatically: ") + abs.string() + " (" + flag +
                " overlay; merge it by hand)");
  return abs;
}

}  // namespace

MergeResult merge_overlays(Disk& disk, const MergeRequest& req) {
  MergeResult r;
  r.output = absolute_normal(req.output);
  require_pythonpath_safe(r.output);
  FileInfo oi = disk.info(r.output, Follow::no);
  if (oi.exists() && (oi.type != FileType::directory || !disk.list_dir(r.output).empty()))
    throw Error("merge output must be absent or an empty directory: " + r.output.string());
  std::vector<fs::path> inputs;
  if (req.base) inputs.push_back(checked_input(disk, *req.base, r.output, "--from"));
  if (req.incoming.empty()) throw Error("merge needs at least one --with overlay");
  for (const auto& in : req.incoming) inputs.push_back(checked_input(disk, in, r.output, "--with"));
  Union u;
  for (const auto& src : inputs) {
    std::optional<Manifest> m = load_manifest(disk, src);
    if (!m) throw Error("overlay has no manifest: " + src.string());
    add_entries(u, src, *m);
    add_other_keys(u, src, *m);
    add_files(disk, u, src);
  }
  check_complete(u);
  // Built beside the output and renamed into place: a reader sees no overlay or the whole one.
  make_dirs(disk, r.output.parent_path());
  fs::path staging = r.output.parent_path() / ("." + r.output.filename().string() + ".overlay-merge-" + random_hex(4));
  try {
    make_dirs(disk, staging);
    for (const auto& [rel, from] : u.files) {
      make_dirs(disk, (staging / rel).parent_path());
      replace_file_atomically(disk, from.first, staging / rel, disk.info(from.first, Follow::no).mode & 07777);
    }
    Manifest merged;
    merged.doc = u.doc;
    save_manifest(disk, staging, merged);
    // Asked for by an input, the worker modules stay asked for.
    if (std::any_of(inputs.begin(), inputs.end(), [&](const fs::path& in) { return has_worker_modules(disk, in); }))
      write_worker_modules(disk, staging);
    ensure_sitecustomize(disk, staging);
    precompile_runtime(disk, staging);
    if (oi.exists()) disk.remove(r.output);  // the empty directory it replaces
    disk.rename(staging, r.output);
    disk.sync_dir(r.output.parent_path());
  } catch (...) {
    remove_tree(disk, staging);
    throw;
  }
  r.notes = std::move(u.notes);
  return r;
}

}  // namespace overlay
