#pragma once
// Python overlays: add-module / add-rebind / add-capture / add-marker / add-hook / add-installer
// write files into the overlay and an entry into its manifest, plus the generated
// sitecustomize.py that applies them when the overlay is first on PYTHONPATH (unless the overlay
// holds a sitecustomize.py someone wrote: that one is kept). Nothing here touches the install.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/python/interpreter.hpp"
#include "overlay/python/sitecustomize.hpp"

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
  Replace replace = Replace::generated_only;  // --force: replace a foreign sitecustomize.py too
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
  // v4's --impl-dir: the folder's contents copied flat into the overlay (an implementation whose
  // entry module loads siblings relative to __file__); __pycache__ and top-level dot-names skipped.
  std::optional<fs::path> impl_dir;
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

struct AddMarkerRequest {
  PyCommon common;
  std::string target;    // module:attr (attr may be dotted)
  fs::path marker_file;  // the marker hook module copied to <overlay>/seam_trace.py
};

// A callable run right after a module finishes importing (manifest hooks[]).
struct AddHookRequest {
  PyCommon common;
  std::string module;  // the module whose import triggers it
  std::string impl_module, impl_attr = "install";
  std::optional<fs::path> impl_file;
};

// The fork's add-triton-launch-probe: a hook on --module (Triton's JIT launcher) that calls
// triton_launch_probe.install(); the probe file, the fork's own, is copied in from beside the tool.
struct AddTritonProbeRequest {
  PyCommon common;
  std::string module = "triton.runtime.jit";
  fs::path probe_file;  // where the tool looks for triton_launch_probe.py (absent: refused)
};

// A package's deferred installer, run at start-up before the rebinds (manifest installers[]).
struct AddInstallerRequest {
  PyCommon common;
  std::string id, module, callable = "install";
  std::vector<std::string> targets;  // serving sites it owns (module or module:attr)
  std::vector<std::string> kernels;
};

struct PyAddResult {
  fs::path overlay;         // absolute
  std::string summary;      // the one-line summary printed after OVERLAY_DIR= ("" for none)
  bool launch_line = true;  // whether upstream prints "launch with: ..." for this verb
  SitecustomizeOutcome sitecustomize;
};

PyAddResult add_module(Disk& disk, const AddModuleRequest& req);
PyAddResult add_rebind(Disk& disk, const AddRebindRequest& req);
PyAddResult add_capture(Disk& disk, const AddCaptureRequest& req);
PyAddResult add_marker(Disk& disk, const AddMarkerRequest& req);
PyAddResult add_hook(Disk& disk, const AddHookRequest& req);
PyAddResult add_installer(Disk& disk, const AddInstallerRequest& req);
PyAddResult add_triton_launch_probe(Disk& disk, const AddTritonProbeRequest& req);
// overlay_setup.py's _ensure_overlay(dir, base): the overlay exists with a manifest (seeded from
// BASE when it had none) and a sitecustomize.py; no entry is added.
PyAddResult ensure_overlay(Disk& disk, const PyCommon& c);
// add-worker-modules: the overlay (made, or seeded from BASE, as by any add-*) holds the worker
// modules from now on; no entry is added.
PyAddResult add_worker_modules(Disk& disk, const PyCommon& c);

// The installed source file of `module`, asking python with overlays disabled.
fs::path locate_installed_module(const std::string& module, const std::string& python);

// True for a.b.c made of Python identifiers.
bool valid_dotted_name(std::string_view name);
// "module:attr" with both parts dotted names (attr optional when allow_bare_module); returns
// the module part, or throws Error naming the problem.
std::string check_target(const std::string& target, bool allow_bare_module = false);
// The module a legacy --package P --subpath x/y.py names ("P.x.y"; __init__.py names the package).
std::string legacy_module_name(const std::string& package, const std::string& subpath);

}  // namespace overlay
