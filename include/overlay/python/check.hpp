#pragma once
// `check`: where a module resolves from under the current PYTHONPATH, as overlay_setup.py says it.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

enum class ModuleSource {
  overlay_active,  // served from an overlay's _patched/ (OVERLAY_ACTIVE)
  injected,        // a file of an overlay outside _patched/, e.g. a module dropped into it (INJECTED)
  install,         // the install's own file
};

struct CheckResult {
  std::string module;
  std::string file;
  ModuleSource source = ModuleSource::install;
};

// Where `module` resolves from under the current PYTHONPATH (overlays active), asking python.
CheckResult check_module(Disk& disk, const std::string& module, const std::string& python);
// The token check prints for a source: OVERLAY_ACTIVE, INJECTED, INSTALL (...).
const char* check_token(ModuleSource s);

}  // namespace overlay
