#include "overlay/python/sitecustomize.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/process.hpp"

namespace overlay {
namespace {

// SHA-256 of every sitecustomize.py text a generator is known to have written (each produced by
// running that version: an add-rebind into an empty overlay, then `sha256sum`). A file with one
// of these digests is the generator's, not its user's, and may be regenerated.
constexpr std::pair<const char*, const char*> kKnownTexts[] = {
    {"86c44d0ed2810d37a4620ca7235afe7a1861f5cb604f42a51312f0203638e24c",
     "overlay (format 4, records that name no overlay, counted by its copies too)"},
    {"d6deb3bd50bcbbecc82e3884d6f743f1c615ea168143d6b1a8eea0463623c4e6",
     "overlay (format 4, start-up plans named by the overlay's path alone)"},
    {"95eeea1e4a3c925ca1466a0f74d7640b7b7f20bec6e5d1915603987eefc62ae2",
     "overlay (format 4, a start from the plan that judged targets again when the rest loaded)"},
    {"12b4223911cf4f62d758e9672e4cd36aab4340c2d013f541b2945edeeef69444",
     "overlay (format 4, the whole runtime loaded by every process)"},
    {"04538085a1be91488682f0780110ba7301e0256d3b11782b78efd923f4a74b2b",
     "overlay (format 4, start-up objects left to the collector's next pass)"},
    {"0a67b631c9d95d6eb7466bc88796fdeaa8a895dee03da437d061fec456c61484",
     "overlay (format 4, start times read in a time namespace as it shows them)"},
    {"d25dbe33ca0d8d17713415cf14ca6ad90d6baa0480a23376d85d8e6b76cd8a05",
     "overlay (format 4, processes that keep no receipt of what they ran)"},
    {"763b4db1d9ff6deca452afd27f27d5923eb591af8832f50abd8cc673f48e6c7b",
     "overlay (format 4, entries blind to the packages they were made against)"},
    {"71eb73c8d2ed7169492a1e7fd68c0b98b49d7d7259cbb8c084f704105993459b",
     "overlay (format 4, stacked finders composed in one pass)"},
    {"6ac3e2f52955cc2c2982e99d9135453c41c703b72bfd0f8ee2905d914177659d",
     "overlay (format 4, stacked finders asking each other once)"},
    {"6f4ee504fb6e391a6e2c5471f44b2619f8abc7a883a70414f1a4d0ad54ec4f1c",
     "overlay (format 4, overlays' finders asking each other without end)"},
    {"d05fed26d16b155c64045fc741f2037687f26fe10addcd19ad5be628ad4b544c",
     "overlay (format 3, the whole runtime in sitecustomize.py)"},
    {"a515abf3f2838abff43f28709893e00447e921b7ecd02f08b017a35aa77d0558",
     "overlay (format 3, the whole runtime before installers)"},
    {"d1a3deb270eaa1052b238c5c3914b16f8c8026cb3bcb8c2ac621cb3c4a951693",
     "overlay (format 3, chained files told apart by resolved path)"},
    {"5b19e0839e173042ba845516036fbc5a3873d7b30e0636f1c05890613492e827",
     "overlay (format 3, before the Python formatter)"},
    {"771522af033c30308ac6e98ae3fe49210ce5a870e14e1155614a9b2a4a2389dc",
     "overlay (format 3, finder class _Finder, installed only with a manifest)"},
    {"f7bae4aa9c34a672c9bce0c5ef8f7ff41363405d878ae7b812e1ec507504dacd",
     "overlay (format 2, live record rewritten per module)"},
    {"1d75eb66138e0e62af023a55fc25d38a0db5011641cef43f9702b2c028aecd32",
     "overlay (format 2, before precompiled start-up)"},
    {"e83ffc8276e6f1f5b2e920856e1cdbf2a35af5eee5c8ccf0e11e4f06c687445f", "overlay (format 2, before layers)"},
    // Three texts of 2026-12-04 that missed this list (tests/upstream/known_texts_test.py found them).
    {"441fe19393bbba757e581b5104e09d823746ef740175b87c2f7cf6ab5e000e9d", "overlay (format 2, first layers)"},
    {"7b14187261089d130545368fe101925c1a20a02d855cf88f83e402683f8453db", "overlay (format 2, first start-up plan)"},
    {"09287425a1fa0de09bff5dbcfe2746e95e5c261cd364589f1eff61e350658b9d",
     "overlay (format 2, before the start-up plan)"},
    {"b9537508d67439ca994879cce2fca733d319b7a2a790661d93d683ffff5d007a",
     "overlay (format 2, before layers and installers)"},
    {"5ba306870c2abeca55267982d3abe2580e44b2d83b9e05da4d12af9aceae2aa2", "overlay (format 2)"},
    {"525486fde3322edfbdb0a32f6a7ea4e736cdcf10f43ff100b5c585a557dae86e", "overlay (format 1, live records)"},
    {"239e427dcc8500a706c80d889f504e3e77055903dd519c50a5b1cb8440644704", "overlay (format 1, call counts)"},
    {"8051b90796ea83b5a2526b1ed77b73573196000641d3f3847773abc68e769676", "overlay (format 1)"},
    // overlay_setup.py: ../shared/reference (native apply-back) and upstream v2 write the same text.
    {"0a32bb030f2ba1c6875ea399c3bc57b9a6c119f8cfc7ac682f4798fa159d01f1", "overlay_setup.py v2"},
    {"9626f13eab79d55865162164117d55c8e7f3d6a06a708d3cd2728de6a71735ed", "overlay_setup.py v3"},
    {"efb5d81c8a2b111f90d295f08ad801082ade58e67a5d3a43e695b562c65bb3a4", "overlay_setup.py v7"},
    {"1fcb7a9835b7369cff8f60f57aa337bcbe7214122279454ec93a17cdc32f9db9", "overlay_setup.py v7 (pre-installer runtime)"},
    {"67daa025c8e4d9339cf932d8d899a5b9b4c4f090c3644caf8ce447ff3328b120", "overlay_setup.py v8 (fork)"},
    // Issue 62: the other versions in ../shared/reference/upstream (v4 writes v3's text), so a
    // knowledge-base tarball grafted into a candidate (cp -r KBO/. CAND/) runs our runtime afterwards.
    {"42a381eab7377e2dc205384f2fe6e59f38e5ae1395e63a9374931ab64198df2f", "overlay_setup.py v5 (ROCm guard)"},
    {"d8b5c55e926eea158154d30ee1a796144058e50a102c4c762cbd7c0f7203fd5b", "overlay_setup.py v6 (lazy)"},
    {"4ac7b99b0721cf9e97960744eb5efc497dd363142656b2e29ed65f64fdefc88f", "overlay_setup.py v9 (fork)"},
    {"70c5fed2921268478600726256f5fbe1af49382590b6f22f942bbff5e9bb94e5", "overlay_setup.py (agent finder)"},
};

}  // namespace

const std::string& legacy_sitecustomize_text() {
  static const std::string text = [] {
    const std::string& t = sitecustomize_text();
    auto begin = t.find("    # installers: begin");
    auto end = t.find("# installers: end\n", begin);
    if (begin == std::string::npos || end == std::string::npos)
      throw Error("sitecustomize.py lost its installers markers");
    return t.substr(0, begin) + t.substr(end + std::string("# installers: end\n").size());
  }();
  return text;
}

std::string sitecustomize_generator(const std::string& text) {
  if (text == sitecustomize_text()) return "overlay";
  if (text == legacy_sitecustomize_text()) return "overlay (before installers)";
  std::string digest = sha256_hex(text);
  for (const auto& [hex, who] : kKnownTexts)
    if (digest == hex) return who;
  return "";
}

SitecustomizeKind classify_sitecustomize(DiskReader& disk, const fs::path& overlay) {
  fs::path p = overlay / "sitecustomize.py";
  FileInfo fi = disk.info(p, Follow::no);
  if (!fi.exists()) return SitecustomizeKind::absent;
  // A symlink, a directory or a huge file is no text we wrote.
  if (fi.type != FileType::regular || fi.size > (1u << 20)) return SitecustomizeKind::foreign;
  std::string text = read_small_file(disk, p, fi.size + 1);
  if (text == sitecustomize_text()) return SitecustomizeKind::current;
  return sitecustomize_generator(text).empty() ? SitecustomizeKind::foreign : SitecustomizeKind::generated;
}

bool is_runtime_file(const std::string& name) {
  return name == "sitecustomize.py" || name == kWorkerExtName || name == kApplyModuleName;
}

bool has_worker_modules(Disk& disk, const fs::path& overlay) {
  return disk.info(overlay / kWorkerExtName, Follow::no).exists() ||
         disk.info(overlay / kApplyModuleName, Follow::no).exists();
}

namespace {

// <overlay>/<name> holds `text` afterwards; one that already does is not written again.
void write_runtime_file(Disk& disk, const fs::path& overlay, const char* name, const std::string& text) {
  fs::path p = overlay / name;
  FileInfo fi = disk.info(p, Follow::no);
  if (fi.type == FileType::regular && fi.size == text.size() && read_small_file(disk, p, fi.size + 1) == text) return;
  if (fi.exists() && fi.type != FileType::regular)
    throw Error("overlay runtime file is not a regular file: " + p.string());
  write_file_atomically(disk, p, text, 0644);
}

// What older versions kept in the overlay's __pycache__ (the runtime's bytecode, the start-up
// plan) goes: an overlay holds sources only. Anything else there is left, and so the directory.
void remove_old_bytecode(Disk& disk, const fs::path& overlay) {
  fs::path cache = overlay / "__pycache__";
  if (disk.info(cache, Follow::no).type != FileType::directory) return;
  auto ours = [](const std::string& n) {
    for (const char* stem :
         {"sitecustomize.", "_overlay_runtime.", "_overlay_apply.", "_overlay_worker_ext.", "_overlay_plan."})
      if (n.rfind(stem, 0) == 0) return true;
    return false;
  };
  std::size_t left = 0;
  for (const auto& e : disk.list_dir(cache)) {
    if (e.type == FileType::regular && ours(e.name))
      disk.remove(cache / e.name);
    else
      ++left;
  }
  if (left == 0) disk.remove(cache);
}

}  // namespace

void write_worker_modules(Disk& disk, const fs::path& overlay) {
  write_runtime_file(disk, overlay, kWorkerExtName, worker_ext_text());
  write_runtime_file(disk, overlay, kApplyModuleName, apply_module_text());
}

SitecustomizeOutcome ensure_sitecustomize(Disk& disk, const fs::path& overlay, Replace replace) {
  if (has_worker_modules(disk, overlay)) write_worker_modules(disk, overlay);
  SitecustomizeOutcome o;
  o.before = classify_sitecustomize(disk, overlay);
  if (o.before == SitecustomizeKind::foreign && replace != Replace::always) return o;
  remove_old_bytecode(disk, overlay);
  if (o.before == SitecustomizeKind::current) return o;
  fs::path p = overlay / "sitecustomize.py";
  if (o.before == SitecustomizeKind::foreign && disk.info(p, Follow::no).type == FileType::directory)
    remove_tree(disk, p);
  write_file_atomically(disk, p, sitecustomize_text(), 0644);
  o.written = true;
  return o;
}

namespace {

// Run by each interpreter as `-I -S -c SCRIPT OVERLAY`: the overlay's sitecustomize.py run with
// _OVERLAY_PRECOMPILE set, which compiles its runtime into the runtime's cache and applies
// nothing; then the worker modules compiled there too, and the runtime's own manifest reader writes
// the start-up plan there. Nothing is written under the overlay.
constexpr const char* kPrecompileScript = R"PY(
import os, sys
d = os.path.abspath(sys.argv[1])
path = os.path.join(d, "sitecustomize.py")
ns = {"__name__": "_overlay_precompile", "__file__": path, "_OVERLAY_PRECOMPILE": True}
with open(path, "rb") as f:
    exec(compile(f.read(), path, "exec"), ns)
for name in ("_overlay_apply.py", "_overlay_worker_ext.py"):
    src = os.path.join(d, name)
    if os.path.isfile(src):
        with open(src, "rb") as f:
            ns["_overlay_code"](src, f.read())
ns["_keep_compiled"]()
if os.path.isfile(os.path.join(d, "_overlay_manifest.json")):
    ns["_read_manifest"](d)
)PY";

// The interpreters that may run an overlay, each once (by real path).
std::vector<std::string> known_interpreters(Disk& disk) {
  std::vector<std::string> names;
  if (const char* p = std::getenv("OVERLAY_PYTHON"); p != nullptr && *p != '\0') names.emplace_back(p);
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string dirs(path);
    for (std::size_t start = 0; start <= dirs.size();) {
      std::size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      fs::path cand = fs::path(dirs.substr(start, end - start)) / "python3";
      if (!dirs.substr(start, end - start).empty() && disk.info(cand, Follow::yes).type == FileType::regular) {
        names.push_back(cand.string());
        break;
      }
      start = end + 1;
    }
  }
  names.emplace_back("/usr/bin/python3");
  std::vector<std::string> out, seen;
  for (const auto& n : names) {
    fs::path p(n);
    if (!p.is_absolute() || disk.info(p, Follow::yes).type != FileType::regular) continue;
    std::string real;
    try {
      real = disk.real_path(p).string();
    } catch (const Error&) {
      continue;
    }
    if (std::find(seen.begin(), seen.end(), real) != seen.end()) continue;
    seen.push_back(real);
    out.push_back(n);
  }
  return out;
}

}  // namespace

bool precompile_wanted() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (set("OVERLAY_PRECOMPILE")) return std::string(std::getenv("OVERLAY_PRECOMPILE")) != "0";
  return set("PYTHONDONTWRITEBYTECODE");
}

std::vector<std::string> precompile_runtime(Disk& disk, const fs::path& overlay) {
  std::vector<std::string> done;
  if (!precompile_wanted() || classify_sitecustomize(disk, overlay) != SitecustomizeKind::current) return done;
  for (const auto& py : known_interpreters(disk)) {
    RunOptions o;
    o.output = Output::capture;
    o.timeout_s = 30;
    RunResult r = run_process({py, "-I", "-S", "-c", kPrecompileScript, overlay.string()}, o);
    if (r.ok()) done.push_back(py);
  }
  return done;
}

std::string kept_foreign_note(const fs::path& overlay) {
  return "kept " + (overlay / "sitecustomize.py").string() +
         ": not generated by overlay or overlay_setup.py, it may not apply this entry (--force replaces it)";
}

void require_pythonpath_safe(const fs::path& overlay) {
  if (overlay.string().find(':') != std::string::npos)
    throw Error("overlay path contains ':', which splits PYTHONPATH, so the overlay could never be put on it: " +
                overlay.string() + " (choose a path without ':')");
}

}  // namespace overlay
