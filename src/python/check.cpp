#include "overlay/python/check.hpp"

#include <optional>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/python/verbs.hpp"

namespace overlay {
namespace {

// The overlay whose manifest lies at or above `file`, if any.
std::optional<fs::path> enclosing_overlay(Disk& disk, const fs::path& file) {
  for (fs::path d = file.parent_path(); !d.empty(); d = d.parent_path()) {
    if (disk.info(d / kManifestName, Follow::no).type == FileType::regular) return d;
    if (d == d.root_path()) break;
  }
  return std::nullopt;
}

}  // namespace

CheckResult check_module(Disk& disk, const std::string& module, const std::string& python) {
  if (!valid_dotted_name(module)) throw Error("invalid module name: '" + module + "'");
  CheckResult r;
  r.module = module;
  r.file = find_module_origin(module, python, false);
  fs::path f(r.file);
  if (!f.is_absolute()) return r;  // built-in or frozen: the install's
  // As every overlay_setup.py decides it: a path through a _patched/ directory is the overlay's.
  if (r.file.find("/_patched/") != std::string::npos) {
    r.source = ModuleSource::overlay_active;
  } else if (enclosing_overlay(disk, f)) {
    r.source = ModuleSource::injected;
  }
  return r;
}

const char* check_token(ModuleSource s) {
  switch (s) {
    case ModuleSource::overlay_active:
      return "OVERLAY_ACTIVE";
    case ModuleSource::injected:
      return "INJECTED";
    case ModuleSource::install:
      return "INSTALL (overlay not shadowing this module)";
  }
  return "?";
}

}  // namespace overlay
