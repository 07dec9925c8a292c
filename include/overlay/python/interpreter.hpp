#pragma once
// Asking a Python interpreter what the binary cannot see for itself: where a module resolves, and
// which installed distribution a module belongs to. Each question is one `python -B -c` run with
// the overlays' runtime off in it (OVERLAY_DISABLE=1), so what it answers is the install's.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"

namespace overlay {

// Runs python -B -c SCRIPT ARG and returns its last line of stdout as JSON (overlays disabled in
// that interpreter when disable_overlays); throws Error naming what failed.
nlohmann::json ask_python(const std::string& python, const std::string& script, const std::string& arg,
                          bool disable_overlays);
// The interpreter to ask: $OVERLAY_PYTHON, else python3 (a --python flag wins over both).
std::string default_python();
// Where python finds `module` (its spec's origin), overlays disabled in it when asked.
std::string find_module_origin(const std::string& module, const std::string& python, bool disable_overlays);

// The installed distribution a Python entry's target belongs to, recorded with the entry
// (manifest key "distribution"), so a package upgraded under an overlay is said, not patched
// silently with code made against another version (issue 62).
struct Distribution {
  std::string name;       // its METADATA's Name
  std::string version;    // its METADATA's Version
  std::string dist_info;  // absolute: the .dist-info directory it was found as
};
void to_json(nlohmann::json& j, const Distribution& d);
void from_json(const nlohmann::json& j, Distribution& d);

// The distribution whose .dist-info, beside the top-level package of dotted name `module` (as
// `python` finds it), names that package (top_level.txt, else its RECORD). None where there is none
// (the standard library, a folder on PYTHONPATH, an editable install, a namespace package that
// several distributions share) or the interpreter cannot say: best effort, never a reason to
// refuse an add.
std::optional<Distribution> distribution_of(const std::string& module, const std::string& python);

// What is installed now in `d`'s place: nullopt while its .dist-info is still there (that version);
// else the version of the .dist-info of the same name beside where it was, or "" where none is.
std::optional<std::string> installed_instead(DiskReader& disk, const Distribution& d);

}  // namespace overlay
