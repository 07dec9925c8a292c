#pragma once
// The generated sitecustomize.py: the project's own Python text (share/overlay/sitecustomize.py,
// embedded at build time), written into each overlay — but only over a file some version of this
// tool or of overlay_setup.py generated: a sitecustomize.py someone wrote belongs to them.
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

// The exact text the binary writes (one file, as upstream's: its runtime is a literal in it, run
// from bytecode cached outside the overlay, since an overlay holds sources only).
const std::string& sitecustomize_text();
// That text without its installers lines (v7's LEGACY_SITECUSTOMIZE: the runtime before
// installers); recognised as generated, so add-installer and merge upgrade it.
const std::string& legacy_sitecustomize_text();
// The default hook modules add-capture and add-marker copy into overlays: share/overlay's
// capture_shapes.py and seam_trace.py, byte for byte (embedded: the binary needs no share dir).
const std::string& capture_hook_text();
const std::string& marker_hook_text();
// The worker modules an overlay holds beside its sitecustomize.py once asked for (add-worker-modules;
// upstream's overlays hold none, and tools list an overlay's files): importing _overlay_worker_ext
// (vLLM's --worker-extension-cls) applies the overlay through _overlay_apply.apply() in a process
// whose environment lacked it.
const std::string& worker_ext_text();
const std::string& apply_module_text();
inline constexpr const char* kWorkerExtName = "_overlay_worker_ext.py";
inline constexpr const char* kApplyModuleName = "_overlay_apply.py";
// sitecustomize.py and the two worker modules: the overlay's runtime, which the tool writes
// (never copied by --from or merge, never taken by an implementation file).
bool is_runtime_file(const std::string& name);
// Whether the overlay holds the worker modules (either of them: asked for once, kept current).
bool has_worker_modules(Disk& disk, const fs::path& overlay);
// Writes both worker modules with this binary's text (one already holding it is left alone).
void write_worker_modules(Disk& disk, const fs::path& overlay);

// What stands at <overlay>/sitecustomize.py.
enum class SitecustomizeKind {
  absent,
  current,    // exactly our text
  generated,  // a text an earlier version of overlay or a known overlay_setup.py version wrote
  foreign,    // anything else: hand-written or edited; never replaced without --force
};
SitecustomizeKind classify_sitecustomize(DiskReader& disk, const fs::path& overlay);
// Which generator wrote `text` ("overlay", "overlay_setup.py v3", ...), or "" when none did.
std::string sitecustomize_generator(const std::string& text);

enum class Replace { generated_only, always };

struct SitecustomizeOutcome {
  SitecustomizeKind before = SitecustomizeKind::absent;
  bool written = false;  // false: it already held our text, or it is foreign and was kept
  bool kept_foreign() const { return before == SitecustomizeKind::foreign && !written; }
};

// Writes <overlay>/sitecustomize.py atomically unless it already holds exactly our text, or it is
// foreign and `replace` is generated_only; where it is ours then, removes the bytecode and start-up
// plan older versions kept in the overlay's __pycache__; where the overlay holds the worker
// modules, brings them to this binary's text.
// Never touches the manifest.
SitecustomizeOutcome ensure_sitecustomize(Disk& disk, const fs::path& overlay,
                                          Replace replace = Replace::generated_only);

// For each interpreter that may run the overlay (OVERLAY_PYTHON, python3 on PATH,
// /usr/bin/python3; each once by real path), compiles the overlay's runtime into the runtime's
// cache (outside the overlay: $OVERLAY_CACHE_DIR, else $XDG_CACHE_HOME/overlay, else
// ~/.cache/overlay) and writes the start-up plan of the manifest as it is now there: so that no
// process compiles the runtime or parses the manifest, even where bytecode writing is off
// (PYTHONDONTWRITEBYTECODE=1, common in serving images). Only over our own
// sitecustomize.py, and only where precompile_wanted(). Best effort, never an error: where an
// interpreter is missing or fails, its processes compile and parse as before. Returns the
// interpreters it wrote for.
std::vector<std::string> precompile_runtime(Disk& disk, const fs::path& overlay);
// Whether the tool writes the runtime's bytecode and plan itself: where the overlay's processes
// will not (PYTHONDONTWRITEBYTECODE set in this environment: a serving image sets it for every
// process, this one included), or when asked (OVERLAY_PRECOMPILE=1; OVERLAY_PRECOMPILE=0: never).
// Elsewhere the first process writes both. Never anything under the overlay.
bool precompile_wanted();

// Refuses (Error naming the problem) an overlay path that cannot sit on PYTHONPATH: the
// interpreter splits PYTHONPATH at every ':' (os.pathsep), so `runs/2026-12-03T21:55:00/ov`
// would put two paths that do not exist there and every entry of the overlay would be inert.
void require_pythonpath_safe(const fs::path& overlay);

// The one line an add-* prints on stderr when it kept a foreign sitecustomize.py.
std::string kept_foreign_note(const fs::path& overlay);

}  // namespace overlay
