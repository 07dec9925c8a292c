#pragma once
// Python overlays: add-module / add-rebind / add-capture write files into the overlay and an
// entry into its manifest, plus the generated sitecustomize.py that applies them when the
// overlay is first on PYTHONPATH. Nothing here touches the install.
#include <optional>
#include <string>
#include <string_view>

#include "overlay/disk.hpp"

namespace overlay {

// Where the generated sitecustomize.py leaves one record per process at exit: the entries that
// applied in it and the calls counted (read by `status`; never copied by --from).
inline constexpr const char* kStatsDirName = "_stats";
// Where patched modules live in an overlay: _patched/<dotted>.py.
inline constexpr const char* kPatchedDir = "_patched";

struct PyCommon {
  fs::path overlay;
  std::optional<fs::path> from;  // seed a new overlay with BASE's Python entries and files
  double lock_timeout = 120;
};

struct AddModuleRequest {
  PyCommon common;
  std::string module;  // dotted name
  std::optional<fs::path> patched_file;
  std::optional<fs::path> patch;     // unified diff applied to the installed (or --src-file) source
  std::optional<fs::path> src_file;  // the source --patch applies to; default: ask the interpreter
  std::string python = "python3";
};

struct AddRebindRequest {
  PyCommon common;
  std::string target;  // module:attr (attr may be dotted: Class.method)
  std::string impl_module, impl_attr;
  std::optional<fs::path> impl_file;
  // Wrap the bound callable and count its calls per process (manifest key "count_calls").
  bool count_calls = false;
};

struct AddCaptureRequest {
  PyCommon common;
  std::string target;  // module:attr
  fs::path out;
  long max = 5;
  fs::path capture_file;  // the hook module copied to <overlay>/capture_shapes.py
};

struct PyAddResult {
  fs::path overlay;     // absolute
  std::string summary;  // the one-line summary printed after OVERLAY_DIR=
};

PyAddResult add_module(Disk& disk, const AddModuleRequest& req);
PyAddResult add_rebind(Disk& disk, const AddRebindRequest& req);
PyAddResult add_capture(Disk& disk, const AddCaptureRequest& req);

enum class ModuleSource { overlay_active, injected, install };

struct CheckResult {
  std::string module;
  std::string file;
  ModuleSource source = ModuleSource::install;
};

// Where `module` resolves from under the current PYTHONPATH (overlays active), asking python.
CheckResult check_module(Disk& disk, const std::string& module, const std::string& python);

// The installed source file of `module`, asking python with overlays disabled.
fs::path locate_installed_module(const std::string& module, const std::string& python);

// True for a.b.c made of Python identifiers.
bool valid_dotted_name(std::string_view name);
// The module a legacy --package P --subpath x/y.py names ("P.x.y"; __init__.py names the package).
std::string legacy_module_name(const std::string& package, const std::string& subpath);
// The interpreter to ask: --python when given, else $OVERLAY_PYTHON, else python3.
std::string default_python();

}  // namespace overlay
