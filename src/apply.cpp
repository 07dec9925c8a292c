#include "overlay/apply.hpp"

#include <algorithm>
#include <array>
#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/python/verbs.hpp"

namespace overlay {
namespace {

// The dotted module a .py file under `root` is: pkg/ops.py -> pkg.ops, pkg/__init__.py -> pkg.
std::string module_name(const fs::path& file, const fs::path& root) {
  fs::path rel = file.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..")
    throw Error(".py file outside --python-root " + root.string() + ": " + file.string());
  rel.replace_extension();
  std::string name;
  for (const auto& part : rel) {
    if (part == "__init__") continue;
    name += (name.empty() ? "" : ".") + part.string();
  }
  if (!valid_dotted_name(name))
    throw Error(".py file does not name a module under " + root.string() + ": " + file.string());
  return name;
}

bool has_module_entry(const json& doc, const std::string& module) {
  auto it = doc.find("modules");
  if (it == doc.end() || !it->is_array()) return false;
  return std::any_of(it->begin(), it->end(),
                     [&](const json& e) { return e.is_object() && e.value("module", json()) == module; });
}

std::string new_patch_id() {
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return "p" + std::to_string(secs) + "-" + random_hex(4);
}

// Writes each patched module into the overlay and adds its entry to the manifest in memory;
// the caller's one manifest write records them together with the native entry.
void record_modules(Disk& disk, const fs::path& overlay, const ApplyPlan& plan, Manifest& m) {
  if (!m.doc.contains("modules") || !m.doc["modules"].is_array()) m.doc["modules"] = json::array();
  for (const auto& mod : plan.modules) {
    if (has_module_entry(m.doc, mod.module))  // another process got there since the plan
      throw Error("module " + mod.module + " already has an entry in " + overlay.string());
    std::string rel = std::string(kPatchedDir) + "/" + mod.module + ".py";
    make_dirs(disk, overlay / kPatchedDir);
    replace_file_atomically(disk, mod.content, overlay / rel, 0644);
    m.doc["modules"].push_back({{"module", mod.module}, {"file", rel}, {"patch_id", plan.patch_id}});
  }
}

}  // namespace

bool is_compiled_source(const fs::path& p) {
  static const std::array<const char*, 11> kSuffixes = {".cu", ".cuh", ".hip", ".cpp", ".cc", ".cxx",
                                                        ".c",  ".h",   ".hpp", ".hh",  ".inl"};
  std::string ext = p.extension().string();
  return std::find(kSuffixes.begin(), kSuffixes.end(), ext) != kSuffixes.end();
}

ApplyPlan plan_apply(Disk& disk, const ApplyRequest& req) {
  if (!req.native.patch) throw Error("apply needs --patch");
  if (!req.native.patch_root) throw Error("apply needs --patch-root");
  ApplyPlan plan;
  plan.native = plan_add_native(disk, req.native);  // the whole diff applies; every flag checked
  fs::path py_root = absolute_normal(req.python_root.value_or(*req.native.patch_root));
  FileInfo ri = disk.info(py_root, Follow::yes);
  if (ri.type != FileType::directory) throw Error("python root is not a directory: " + py_root.string());
  py_root = disk.real_path(py_root);
  std::vector<NativePlan::Swap> compiled;
  for (const auto& s : plan.native.swaps) {
    if (is_compiled_source(s.target)) {
      compiled.push_back(s);
    } else if (s.target.extension() == ".py") {
      if (s.kind == SwapKind::remove)
        throw Error("the diff deletes a Python file, which an overlay cannot do: " + s.target.string());
      PatchModule mod{module_name(s.target, py_root), s.target, s.content, s.kind == SwapKind::create};
      for (const auto& other : plan.modules)
        if (other.module == mod.module) throw Error("two files of the diff are module " + mod.module);
      plan.modules.push_back(std::move(mod));
    } else {
      throw Error("the diff changes a file that is neither a compiled source nor Python: " + s.target.string());
    }
  }
  plan.native.swaps = std::move(compiled);
  if (!plan.modules.empty()) require_pythonpath_safe(plan.native.overlay);
  plan.native.op = "apply";
  if (!plan.has_native() &&
      (!plan.native.artifacts.empty() || !plan.native.caches.empty() || !plan.native.build_cmds.empty()))
    throw Error(
        "the diff changes no compiled file: --artifact, --invalidate-cache and --build-cmd have nothing to act on");
  if (auto m = load_manifest(disk, plan.native.overlay))
    for (const auto& mod : plan.modules)
      if (has_module_entry(m->doc, mod.module))
        throw Error("module " + mod.module + " already has an entry in " + plan.native.overlay.string());
  plan.patch_id = req.native.patch_id.value_or(new_patch_id());
  return plan;
}

AppliedPatch apply_patch(Disk& disk, const ApplyPlan& plan) {
  AppliedPatch out{plan.patch_id, std::nullopt, {}};
  const fs::path& overlay = plan.native.overlay;
  for (const auto& m : plan.modules) out.modules.push_back(m.module);
  if (plan.has_native()) {
    NativePlan np = plan.native;
    np.patch_id = plan.patch_id;
    np.record_with = [&](Manifest& m) { record_modules(disk, overlay, plan, m); };
    out.native = apply_native(disk, np);  // one manifest write records both parts
  } else {
    make_dirs(disk, overlay);
    OverlayLock lock(overlay, plan.native.lock_timeout);
    Manifest m = load_manifest(disk, overlay).value_or(Manifest{});
    record_modules(disk, overlay, plan, m);
    save_manifest(disk, overlay, m);
  }
  if (!plan.modules.empty()) {
    // Under the overlay's lock, as every writer of its runtime files: two applies writing
    // sitecustomize.py at once shared sitecustomize.py.lock, and one's rename failed (exit 1 for a
    // patch it had recorded; Concurrency.ParallelAppliesRecordWholePatches, 1 apply in 320).
    OverlayLock lock(overlay, plan.native.lock_timeout);
    ensure_sitecustomize(disk, overlay);
    precompile_runtime(disk, overlay);
  }
  spdlog::info("applied patch {}", plan.patch_id);
  return out;
}

nlohmann::json AppliedPatch::to_json(const ApplyPlan& plan) const {
  const fs::path& ov = plan.native.overlay;
  nlohmann::json python = nlohmann::json::array();
  for (const auto& m : plan.modules)
    python.push_back({{"module", m.module},
                      {"file", (ov / kPatchedDir / (m.module + ".py")).string()},
                      {"installed", m.installed.string()},
                      {"created", m.created}});
  return {{"overlay", ov.string()},
          {"patch_id", patch_id},
          {"python", python},
          {"pythonpath", ov.string()},
          {"native", nullptr}};
}

}  // namespace overlay
