#pragma once
// `apply`: one unified diff routed per file. Compiled sources and headers go into ONE native entry
// (applied in place, rebuilt); `.py` files become Python module entries (the patched text is
// computed from the installed file, which stays untouched). All or nothing: the whole diff is
// checked before anything is written, and every entry of the patch is recorded in the same
// atomic manifest write, before the install is touched, under one `patch_id`.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/native.hpp"

namespace overlay {

// True for the suffixes routed to the native entry: .cu .cuh .hip .cpp .cc .cxx .c .h .hpp .hh .inl
bool is_compiled_source(const fs::path& p);

struct ApplyRequest {
  AddNativeRequest native;              // overlay, patch, patch_root, strip and the build flags
  std::optional<fs::path> python_root;  // dotted names are relative to it; default: patch_root
};

struct PatchModule {
  std::string module;  // dotted name
  fs::path installed;  // the file the diff patches (left untouched)
  fs::path content;    // the patched text (a private copy)
  bool created = false;
};

struct ApplyPlan {
  std::string patch_id;
  NativePlan native;  // its swaps: the compiled files only (may be none)
  std::vector<PatchModule> modules;
  bool has_native() const { return !native.swaps.empty(); }
};

// Checks the whole diff and every flag; throws Error naming the first problem (a file of
// another kind, a .py file outside --python-root or deleted, a module already overlaid, a diff
// that does not apply, build flags with no compiled file to build). Changes nothing on disk.
ApplyPlan plan_apply(Disk& disk, const ApplyRequest& req);

struct AppliedPatch {
  std::string patch_id;
  std::optional<AppliedEntry> native;  // set when the diff touches compiled files
  std::vector<std::string> modules;
  // What `apply --json` says of the patch `plan` made: {overlay, patch_id, python: [{module, file,
  // installed, created}], pythonpath, native: null}; the caller puts the native entry's report
  // (AppliedEntry::to_json and its build's) in `native`.
  nlohmann::json to_json(const ApplyPlan& plan) const;
};

// Records every entry of the patch in one manifest write (native backups made first, module
// files written into the overlay first), then swaps the compiled sources in place and
// invalidates caches. The caller runs the build (run_native_build) when there is a native entry.
AppliedPatch apply_patch(Disk& disk, const ApplyPlan& plan);

}  // namespace overlay
