#include "overlay/python/verbs.hpp"

#include <algorithm>
#include <functional>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/patch.hpp"
#include "overlay/process.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/store.hpp"
#include "overlay/trust.hpp"

namespace overlay {

namespace {

bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              static_cast<unsigned char>(c) >= 0x80;
    if (!ok) return false;
  }
  return true;
}

// A name the overlay keeps for itself, which no implementation file may take.
bool is_reserved_name(const std::string& name) {
  return is_runtime_file(name) || name == kManifestName || name == kPatchedDir || name == kBackupDirName ||
         name == kStatsDirName || name == "_trash" || name == "_logs";
}

fs::path existing_file(Disk& disk, const fs::path& p, const std::string& what) {
  fs::path abs = absolute_normal(p);
  FileInfo fi = disk.info(abs, Follow::yes);
  if (!fi.exists()) throw Error(what + " does not exist: " + abs.string());
  if (fi.type == FileType::directory) throw Error(what + " is a directory: " + abs.string());
  if (fi.type != FileType::regular) throw Error(what + " is not a regular file: " + abs.string());
  disk.open_read(abs);  // readable, or a DiskError naming it
  return abs;
}

// The hook module a caller named (checked now, before anything is recorded), or none: the
// binary's own copy (write_hook).
std::optional<fs::path> hook_file_of(Disk& disk, const fs::path& given, const std::string& what) {
  if (given.empty()) return std::nullopt;
  return existing_file(disk, given, what);
}

// Writes the hook module into the overlay: the caller's file, else the embedded default.
void write_hook(Disk& disk, const std::optional<fs::path>& given, const std::string& embedded, const fs::path& dest) {
  if (given)
    replace_file_atomically(disk, *given, dest, 0644);
  else
    write_file_atomically(disk, dest, embedded, 0644);
}

// `entry`, with the installed distribution its target module belongs to where it has one, so
// status and the runtime can say when that package changes under the overlay (issue 62).
json made_against(json entry, const std::string& module, const std::string& python) {
  if (auto d = distribution_of(module, python)) entry["distribution"] = *d;
  return entry;
}

void check_overlay_target(Disk& disk, const PyCommon& c) {
  fs::path ov = absolute_normal(c.overlay);
  require_pythonpath_safe(ov);
  FileInfo fi = disk.info(ov, Follow::yes);
  if (fi.exists() && fi.type != FileType::directory) throw Error("overlay is not a directory: " + ov.string());
  if (fi.exists()) load_manifest(disk, ov);  // malformed: refused before anything changes
  if (!c.from) return;
  fs::path base = absolute_normal(*c.from);
  if (base == ov) throw Error("--from names the overlay itself: " + base.string());
  FileInfo bi = disk.info(base, Follow::yes);
  if (!bi.exists()) return;  // the first iteration of a loop: the overlay starts empty (seed_base)
  if (bi.type != FileType::directory) throw Error("--from is not a directory: " + base.string());
  if (!load_manifest(disk, base)) throw Error("--from overlay has no manifest: " + base.string());
  if (fi.exists() && load_manifest(disk, ov))
    throw Error("--from seeds a new overlay, but " + ov.string() + " already has a manifest");
}

// Copies BASE's Python files (not its native backups, logs, records or manifest; its
// sitecustomize.py only when someone wrote it by hand) into ov and returns BASE's manifest
// without native entries.
Manifest seed_from(Disk& disk, const fs::path& base, const fs::path& ov) {
  Manifest m = *load_manifest(disk, base);
  m.natives.clear();
  walk_tree(disk, base, [&](const fs::path& rel, FileType type) {
    std::string top = rel.begin()->string();
    bool own_runtime =
        (top == "sitecustomize.py" && classify_sitecustomize(disk, base) != SitecustomizeKind::foreign) ||
        (is_runtime_file(top) && top != "sitecustomize.py");
    if (top == kBackupDirName || top == "_trash" || top == "_logs" || top == kStatsDirName || top == kManifestName ||
        own_runtime || top == "__pycache__" || rel.filename().string().rfind('.', 0) == 0)
      return WalkStep::skip;
    if (type == FileType::directory) make_dirs(disk, ov / rel);
    if (type == FileType::regular)
      replace_file_atomically(disk, base / rel, ov / rel, disk.info(base / rel, Follow::no).mode);
    return WalkStep::descend;
  });
  if (has_worker_modules(disk, base)) write_worker_modules(disk, ov);  // asked for in BASE: asked for here
  return m;
}

// An entry's identity within its array: the fields an entry for the same thing shares.
using Identity = std::vector<const char*>;

bool same_identity(const json& a, const json& b, const Identity& keys) {
  for (const char* k : keys)
    if (!a.contains(k) || !b.contains(k) || a[k] != b[k]) return false;
  return true;
}

// Drops every entry of `array` with the same identity as `entry`, then appends it: upstream's
// filter-and-append (v3 … v8), so a re-added entry moves last and the manifest's bytes are
// upstream's for the same calls.
void upsert(json& doc, const char* array, const Identity& identity, const json& entry) {
  if (!doc.contains(array) || !doc[array].is_array()) doc[array] = json::array();
  json kept = json::array();
  for (auto& e : doc[array])
    if (!(e.is_object() && same_identity(e, entry, identity))) kept.push_back(std::move(e));
  kept.push_back(entry);
  doc[array] = std::move(kept);
}

// The overlay --from seeds a new one from: none when it was not given or does not exist yet
// (v2, v3 and v7 start from nothing then, so a loop's first iteration needs no special case).
std::optional<fs::path> seed_base(Disk& disk, const PyCommon& c) {
  if (!c.from) return std::nullopt;
  fs::path base = absolute_normal(*c.from);
  if (!disk.info(base, Follow::yes).exists()) return std::nullopt;
  return base;
}

// Loads the overlay's manifest, or seeds it from --from, or starts an empty one.
Manifest load_or_seed(Disk& disk, const PyCommon& c, const fs::path& ov, bool& existed) {
  std::optional<Manifest> m = load_manifest(disk, ov);
  existed = m.has_value();
  if (m) return *m;
  std::optional<fs::path> base = seed_base(disk, c);
  Manifest fresh = base ? seed_from(disk, *base, ov) : Manifest{};
  // The sections upstream's _ensure_overlay starts a manifest with, so either tool reads it.
  for (const char* k : {"modules", "rebinds", "markers", "captures"})
    if (!fresh.doc.contains(k)) fresh.doc[k] = json::array();
  return fresh;
}

// The shared tail of every add-*: lock, load (or seed), check, put files, record, write
// sitecustomize. `edit` changes the manifest's document (and may refuse, before any file moves).
template <typename Edit, typename PutFiles>
PyAddResult record_with(Disk& disk, const PyCommon& c, Edit&& edit, PutFiles&& put) {
  PyAddResult r;
  r.overlay = absolute_normal(c.overlay);
  refuse_unrevertable(disk, r.overlay, false);
  make_dirs(disk, r.overlay);
  OverlayLock lock(r.overlay, c.lock_timeout, {}, LockOn::overlay_directory);  // no lock file in a Python overlay
  bool existed = false;
  Manifest m = load_or_seed(disk, c, r.overlay, existed);
  json before = m.doc;
  edit(m.doc);
  put(r.overlay);
  // A manifest nothing changed keeps its bytes (as upstream's _ensure_overlay leaves it): tools
  // downstream hash them.
  if (!existed || m.doc != before) save_manifest(disk, r.overlay, m);
  r.sitecustomize = ensure_sitecustomize(disk, r.overlay, c.replace);
  precompile_runtime(disk, r.overlay);
  return r;
}

template <typename PutFiles>
PyAddResult record(Disk& disk, const PyCommon& c, const char* array, const Identity& identity, const json& entry,
                   PutFiles&& put) {
  return record_with(
      disk, c, [&](json& doc) { upsert(doc, array, identity, entry); }, put);
}

// The impl file an add-* copies into the overlay under its own name.
std::optional<fs::path> impl_file_of(Disk& disk, const std::optional<fs::path>& given) {
  if (!given) return std::nullopt;
  fs::path impl = existing_file(disk, *given, "impl file");
  if (is_reserved_name(impl.filename().string()))
    throw Error("impl file would overwrite the overlay's own " + impl.filename().string());
  return impl;
}

// What --impl-dir copies: (relative path, source) for each file, checked before anything is
// written. Symlinks are followed, as shutil.copy2/copytree do; __pycache__ is skipped at every
// depth, dot-names at the top (v4).
std::vector<std::pair<fs::path, fs::path>> impl_dir_files(Disk& disk, const fs::path& given) {
  fs::path dir = absolute_normal(given);
  if (disk.info(dir, Follow::yes).type != FileType::directory)
    throw Error("--impl-dir is not a directory: " + dir.string());
  std::vector<std::pair<fs::path, fs::path>> files;
  std::function<void(const fs::path&, int)> visit = [&](const fs::path& rel, int depth) {
    if (depth > 64) throw Error("--impl-dir nests too deep (a symlink loop?): " + (dir / rel).string());
    std::vector<DirEntry> entries = disk.list_dir(dir / rel);
    std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    for (const auto& e : entries) {
      if (e.name == "__pycache__" || (rel.empty() && e.name[0] == '.')) continue;
      if (rel.empty() && is_reserved_name(e.name))
        throw Error("--impl-dir holds " + e.name + ", a name the overlay keeps for itself: " + (dir / e.name).string());
      fs::path r = rel / e.name;
      FileInfo fi = disk.info(dir / r, Follow::yes);
      if (fi.type == FileType::directory)
        visit(r, depth + 1);
      else if (fi.type == FileType::regular)
        files.emplace_back(r, dir / r);
      else
        throw Error("--impl-dir holds something that is not a file or directory: " + (dir / r).string());
    }
  };
  visit({}, 0);
  if (files.empty()) throw Error("--impl-dir has no files to copy: " + dir.string());
  return files;
}

}  // namespace

std::string check_target(const std::string& target, bool allow_bare_module) {
  auto colon = target.find(':');
  if (colon == std::string::npos && allow_bare_module && valid_dotted_name(target)) return target;
  if (colon == std::string::npos || !valid_dotted_name(target.substr(0, colon)) ||
      !valid_dotted_name(target.substr(colon + 1)))
    throw Error("target must be module:attr (e.g. pkg.ops:fused_add), got: " + target);
  return target.substr(0, colon);
}

bool valid_dotted_name(std::string_view name) {
  if (name.empty()) return false;
  std::size_t start = 0;
  for (;;) {
    auto dot = name.find('.', start);
    if (!is_identifier(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string legacy_module_name(const std::string& package, const std::string& subpath) {
  fs::path sub(subpath);
  if (sub.extension() == ".py") sub.replace_extension();
  std::string name = package;
  for (const auto& part : sub) {
    std::string p = part.string();
    if (p.empty() || p == "." || p == "__init__") continue;
    name += "." + p;
  }
  return name;
}

fs::path locate_installed_module(const std::string& module, const std::string& python) {
  std::string origin = find_module_origin(module, python, true);
  fs::path p(origin);
  if (!p.is_absolute() || p.extension() != ".py")
    throw Error("module " + module + " is not a Python source file (" + origin + ")");
  return p;
}

namespace {

// A package's initializer is never swapped whole: loaded from _patched/ as a plain module it would
// lose the package's __path__, so every submodule import under it would fail.
void refuse_package_initializer(const std::string& module, const fs::path& file) {
  if (file.filename() == "__init__.py")
    throw Error(module + ": " + file.string() +
                " is a package __init__.py, which an overlay does not replace (its submodules would no longer import); "
                "add the module that defines what changes, or rebind it (add-rebind)");
}

}  // namespace

PyAddResult add_module(Disk& disk, const AddModuleRequest& req) {
  if (!valid_dotted_name(req.module)) throw Error("invalid module name: '" + req.module + "'");
  check_overlay_target(disk, req.common);
  // As v3: a patched file is taken verbatim (any --patch ignored); else the source (--src-file,
  // or the installed module) is copied, with --patch applied to the copy when given.
  std::shared_ptr<PatchedCopy> patched;
  fs::path content;
  if (req.patched_file) {
    content = existing_file(disk, *req.patched_file, "patched file");
    refuse_package_initializer(req.module, content);
  } else {
    fs::path src = req.src_file ? existing_file(disk, *req.src_file, "source file")
                                : locate_installed_module(req.module, req.python);
    refuse_package_initializer(req.module, src);
    content = src;
    if (req.patch) {
      fs::path diff = existing_file(disk, *req.patch, "patch file");
      try {
        patched = std::make_shared<PatchedCopy>(disk, src, diff);  // never applied to the install
      } catch (const Error& e) {                                   // v3's words first: callers match them
        throw Error(std::string("failed to apply patch: ") + e.what());
      }
      content = patched->file();
    }
  }
  std::string rel = std::string(kPatchedDir) + "/" + req.module + ".py";
  json entry = made_against({{"module", req.module}, {"file", rel}}, req.module, req.python);
  PyAddResult r = record(disk, req.common, "modules", {"module"}, entry, [&](const fs::path& o) {
    make_dirs(disk, o / kPatchedDir);
    replace_file_atomically(disk, content, o / rel, 0644);
  });
  r.summary = "add-module " + req.module + " -> " + (r.overlay / rel).string();
  return r;
}

PyAddResult add_rebind(Disk& disk, const AddRebindRequest& req) {
  check_target(req.target);
  if (!valid_dotted_name(req.impl_module)) throw Error("invalid --impl-module: '" + req.impl_module + "'");
  if (!is_identifier(req.impl_attr)) throw Error("invalid --impl-attr: '" + req.impl_attr + "'");
  check_overlay_target(disk, req.common);
  std::optional<fs::path> impl = impl_file_of(disk, req.impl_file);
  std::vector<std::pair<fs::path, fs::path>> dir_files;
  if (req.impl_dir) dir_files = impl_dir_files(disk, *req.impl_dir);
  json entry = made_against({{"target", req.target}, {"impl_module", req.impl_module}, {"impl_attr", req.impl_attr}},
                            req.target, default_python());
  if (req.count_calls) entry["count_calls"] = true;
  PyAddResult r = record(disk, req.common, "rebinds", {"target"}, entry, [&](const fs::path& o) {
    if (impl) replace_file_atomically(disk, *impl, o / impl->filename(), 0644);
    for (const auto& [rel, src] : dir_files) {
      make_dirs(disk, (o / rel).parent_path());
      replace_file_atomically(disk, src, o / rel, disk.info(src, Follow::yes).mode & 0777);
    }
  });
  r.summary = "add-rebind " + req.target + " -> " + req.impl_module + "." + req.impl_attr;
  return r;
}

PyAddResult add_capture(Disk& disk, const AddCaptureRequest& req) {
  check_target(req.target);
  if (req.max <= 0) throw Error("--max must be a positive number, got " + std::to_string(req.max));
  if (req.out.empty()) throw Error("--out is empty");
  fs::path out = absolute_normal(req.out);
  FileInfo oi = disk.info(out, Follow::yes);
  if (oi.exists() && oi.type != FileType::directory) throw Error("--out is not a directory: " + out.string());
  std::optional<fs::path> hook = hook_file_of(disk, req.capture_file, "capture file");
  check_overlay_target(disk, req.common);
  json entry =
      made_against({{"target", req.target}, {"out", out.string()}, {"max", req.max}}, req.target, default_python());
  PyAddResult r = record(disk, req.common, "captures", {"target"}, entry, [&](const fs::path& o) {
    write_hook(disk, hook, capture_hook_text(), o / "capture_shapes.py");
  });
  r.summary = "add-capture " + req.target + " -> " + out.string();
  return r;
}

PyAddResult add_marker(Disk& disk, const AddMarkerRequest& req) {
  check_target(req.target);
  std::optional<fs::path> hook = hook_file_of(disk, req.marker_file, "marker file");
  check_overlay_target(disk, req.common);
  json entry = made_against({{"target", req.target}}, req.target, default_python());
  PyAddResult r = record(disk, req.common, "markers", {"target"}, entry,
                         [&](const fs::path& o) { write_hook(disk, hook, marker_hook_text(), o / "seam_trace.py"); });
  r.summary = "add-marker " + req.target;
  return r;
}

PyAddResult add_hook(Disk& disk, const AddHookRequest& req) {
  if (!valid_dotted_name(req.module)) throw Error("invalid --module: '" + req.module + "'");
  if (!valid_dotted_name(req.impl_module)) throw Error("invalid --impl-module: '" + req.impl_module + "'");
  if (!is_identifier(req.impl_attr)) throw Error("invalid --impl-attr: '" + req.impl_attr + "'");
  check_overlay_target(disk, req.common);
  std::optional<fs::path> impl = impl_file_of(disk, req.impl_file);
  json entry = made_against({{"module", req.module}, {"impl_module", req.impl_module}, {"impl_attr", req.impl_attr}},
                            req.module, default_python());
  // One hook per (module, impl module), as the fork that introduced hooks[] keys them.
  PyAddResult r = record(disk, req.common, "hooks", {"module", "impl_module"}, entry, [&](const fs::path& o) {
    if (impl) replace_file_atomically(disk, *impl, o / impl->filename(), 0644);
  });
  r.summary = "add-hook after import " + req.module + " -> " + req.impl_module + "." + req.impl_attr + "()";
  return r;
}

PyAddResult add_triton_launch_probe(Disk& disk, const AddTritonProbeRequest& req) {
  if (!valid_dotted_name(req.module)) throw Error("invalid --module: '" + req.module + "'");
  fs::path probe = absolute_normal(req.probe_file);
  // The fork's words, before anything is written; a directory or a dangling link is not the file.
  if (disk.info(probe, Follow::yes).type != FileType::regular)
    throw Error("triton_launch_probe.py not found at " + probe.string());
  check_overlay_target(disk, req.common);
  json entry = {{"module", req.module}, {"impl_module", "triton_launch_probe"}, {"impl_attr", "install"}};
  PyAddResult r = record(disk, req.common, "hooks", {"module", "impl_module"}, entry, [&](const fs::path& o) {
    replace_file_atomically(disk, probe, o / "triton_launch_probe.py", 0644);
  });
  r.summary = "add-hook after import " + req.module + " -> triton_launch_probe.install()";
  return r;
}

PyAddResult add_installer(Disk& disk, const AddInstallerRequest& req) {
  if (req.id.empty() || req.id.find_first_of("\n\r") != std::string::npos)
    throw Error("invalid --id: '" + req.id + "'");
  if (!valid_dotted_name(req.module)) throw Error("invalid --module: '" + req.module + "'");
  if (!is_identifier(req.callable)) throw Error("invalid --callable: '" + req.callable + "'");
  for (const auto& t : req.targets) check_target(t, true);
  for (const auto& k : req.kernels)
    if (k.empty()) throw Error("--kernel is empty");
  check_overlay_target(disk, req.common);
  json entry = {{"id", req.id},     {"module", req.module},   {"callable", req.callable},
                {"required", true}, {"targets", req.targets}, {"kernels", req.kernels}};
  PyAddResult r = record_with(
      disk, req.common,
      [&](json& doc) {
        if (!doc.contains("installers") || !doc["installers"].is_array()) doc["installers"] = json::array();
        for (const auto& e : doc["installers"]) {
          if (!e.is_object() || !e.contains("id") || e["id"] != req.id) continue;
          if (e != entry) throw Error("installer id already has a different definition: " + req.id);
          return;  // the same definition again: nothing to add
        }
        doc["installers"].push_back(entry);
      },
      [](const fs::path&) {});
  r.launch_line = false;  // upstream prints OVERLAY_DIR= alone for add-installer
  return r;
}

PyAddResult add_worker_modules(Disk& disk, const PyCommon& c) {
  check_overlay_target(disk, c);
  PyAddResult r = record_with(
      disk, c, [](json&) {}, [&](const fs::path& o) { write_worker_modules(disk, o); });
  r.summary =
      "add-worker-modules -> " + (r.overlay / kWorkerExtName).string() + ", " + (r.overlay / kApplyModuleName).string();
  return r;
}

PyAddResult ensure_overlay(Disk& disk, const PyCommon& c) {
  fs::path ov = absolute_normal(c.overlay);
  require_pythonpath_safe(ov);
  FileInfo fi = disk.info(ov, Follow::yes);
  if (fi.exists() && fi.type != FileType::directory) throw Error("overlay is not a directory: " + ov.string());
  PyCommon seeded = c;
  // _ensure_overlay seeds only an overlay without a manifest, from a base that exists.
  if (c.from && (disk.info(absolute_normal(*c.from), Follow::yes).type != FileType::directory ||
                 (fi.exists() && load_manifest(disk, ov))))
    seeded.from.reset();
  check_overlay_target(disk, seeded);
  PyAddResult r = record_with(
      disk, seeded, [](json&) {}, [](const fs::path&) {});
  r.launch_line = false;
  return r;
}

}  // namespace overlay
