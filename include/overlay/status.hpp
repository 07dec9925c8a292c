#pragma once
// What an overlay has done to its install right now: every entry, and for every tracked file
// whether it is original, patched, rebuilt, drifted or missing. Reads only; never locks or writes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/engagement.hpp"
#include "overlay/manifest.hpp"
#include "overlay/owner.hpp"
#include "overlay/python/interpreter.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/stack.hpp"

namespace overlay {

enum class TrackedKind { source, created, deleted, artifact, cache };
// original: the bytes (or absence) from before the entry; patched: what the tool wrote (or
// removed); rebuilt: a build output that changed, as intended; invalidated: a cache the tool
// cleared, not yet rebuilt; drifted: neither original nor what the tool wrote; missing: gone;
// redirected: a directory on its path was swapped since add-native (pinned.hpp), so it is not
// judged, and revert will not act on it. Layers (stack.hpp): covered: a layer stacked above
// this entry changed the file again (its bytes are on top; this entry's are under them);
// stranded: a layer's item holds the bytes of the layer below, which no longer records them
// (vanished): the pristine original went with it.
enum class FileState { original, patched, rebuilt, invalidated, drifted, missing, redirected, covered, stranded };

const char* to_string(TrackedKind k);
const char* to_string(FileState s);

struct TrackedFile {
  TrackedKind kind;
  std::string path;
  FileState state;
  std::string aside = {};  // a cache renamed aside: where its original is kept now ("" otherwise)
  std::string note = {};   // why the state is not what revert can undo (a replaced aside copy), or ""
  // A source's mode, owner or extended attributes that differ from the original's as recorded
  // (the patched file is given the original's): what differs, or "".
  std::string metadata = {};
  // The file's stack of layers, bottom first, where more than this overlay changes it.
  FileStack layers = {};
};

struct NativeStatus {
  std::string id;
  std::optional<std::string> patch_id;  // the `apply` patch it belongs to
  std::optional<Owner> owner;
  bool owner_alive = false;  // alive or unseen: may still be at work
  Liveness owner_liveness = Liveness::gone;
  std::optional<double> created_at;      // seconds since the epoch
  std::uint64_t snapshot_bytes = 0;      // backups, tars and moved caches kept for this entry
  std::optional<std::string> build_log;  // absolute
  std::vector<TrackedFile> files;
  std::vector<UntrackedOutput> untracked;   // its build's untracked outputs, still as built
  std::optional<std::string> served_from;   // its build's outputs came from the build store (that record)
  std::optional<std::string> build_failed;  // its build failed: the command and how
  // Its build ran traced: how many paths it changed beyond the items (revert puts each back), and
  // what the trace could not account for. Not traced: why not, where it said.
  bool build_traced = false;
  std::size_t build_changes = 0;
  std::vector<std::string> build_not_back;  // of those, each not as before the build now: "path: how"
  std::vector<std::string> build_unobserved;
  std::optional<std::string> build_untraced;
  // The mtimes its revert would give now: "" original ones (the build then has nothing to redo),
  // otherwise why the restored sources are dated now (why_fresh_times).
  std::string why_fresh_times;
};

// A Python entry: it changes nothing in the install; `file` is its file in the overlay, if any.
struct PythonStatus {
  std::string kind;     // module | installer | rebind | capture | marker | hook
  std::string name;     // module name or module:attr target
  std::string detail;   // the overlay file, the replacement, or the capture output
  bool present = true;  // the overlay file it needs exists
  // From the per-process records sitecustomize.py leaves in <overlay>/_stats/ at exit:
  // (and from _stats/live/: processes still running, or killed before they could write one)
  std::size_t applied_processes = 0;    // processes in which the entry applied
  std::size_t running_processes = 0;    // of those, still running now
  std::optional<std::uint64_t> calls;   // calls over all those processes (rebinds with --count-calls)
  std::optional<std::string> patch_id;  // the `apply` patch it belongs to
  // The installed distribution its target belonged to when it was added, and, where that is no
  // longer what is installed there, what is: another version, or "" for none.
  std::optional<Distribution> made_against;
  std::optional<std::string> installed_now;
};

struct StatusReport {
  fs::path overlay;    // absolute
  bool exists = true;  // false: no such overlay (asked with Absent::nothing_recorded)
  bool has_manifest = false;
  std::vector<NativeStatus> natives;
  std::vector<PythonStatus> pythons;
  // With Python entries: the overlay's sitecustomize.py (foreign: someone else's, kept as it is,
  // so it may not apply them) and, when generated by another version, which one.
  SitecustomizeKind sitecustomize = SitecustomizeKind::absent;
  std::string sitecustomize_by;
  // Manifest sections of entries this version does not apply.
  std::vector<std::string> unapplied_sections;
  // Files reverted entries' builds created or changed that none tracked, still as built.
  std::vector<UntrackedOutput> untracked_left;
  // Processes mapping tracked artifacts, judged; those with `reverted` run code revert replaced.
  EngagementReport engagement;
  // A fold of this overlay's entries into another that a crash interrupted (fold.hpp): its next
  // revert, gc-stale or fold settles it.
  std::optional<FoldMark> fold_out;
  // Trees a revert renamed aside in the install (a rebuilt cache's trash sibling) still there: a
  // revert killed before it got them out. The next revert or gc-stale deletes them.
  std::vector<std::string> litter_left;
  // Processes that still run an artifact revert replaced (restart them).
  std::size_t running_reverted() const;
  // Tracked installed files that are not at their original bytes.
  std::size_t not_original() const;
  // Paths entries' builds changed beyond their items that are not as they were before.
  std::size_t build_not_back() const;
  // Untracked build outputs (of live and reverted entries) that may hold patched code.
  std::size_t untracked_as_built() const;
  bool clean() const {
    return not_original() == 0 && build_not_back() == 0 && untracked_as_built() == 0 && running_reverted() == 0 &&
           litter_left.empty();
  }  // What `status --json` prints of it: the overlay, its entries file by file with their layers,
  // owners and builds, its Python entries, processes and patches (docs/cli.md).
  nlohmann::json to_json() const;
};

// What an overlay that does not exist is: an error, or an overlay with nothing recorded (a
// fleet's clean check on a node that refused the step before making it).
enum class Absent { error, nothing_recorded };

// Inspects every entry of the overlay's manifest. Throws Error on a malformed manifest, and on a
// missing overlay unless `absent` says it has nothing recorded.
StatusReport overlay_status(DiskReader& disk, const fs::path& overlay, Absent absent = Absent::error);

// The manifest's Python entries (modules, rebinds, captures), each with the processes it applied
// in (from _stats/ and _stats/live/) and the calls counted.
std::vector<PythonStatus> python_entries_status(DiskReader& disk, const fs::path& overlay, const Manifest& m);

// Which overlay's entry changed an installed file (like `dpkg -S`): every tracked file or
// untracked build output of `overlays` that is `path` (as given or as it really is).
struct WhichHit {
  fs::path overlay;
  std::string entry;
  std::optional<std::string> patch_id;
  std::string kind;       // source | created | deleted | artifact | cache | untracked output
  std::string state;      // as status says it
  FileStack layers = {};  // the file's stack, bottom first, where more than one overlay changes it
};
std::vector<WhichHit> which_changed(DiskReader& disk, const std::vector<fs::path>& overlays, const fs::path& path);

// Seconds since the epoch now, as status ages an entry.
double seconds_now();
// Per patch id, in order of first appearance: its native entry ids and its Python entry names.
using PatchGroups = std::vector<std::pair<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>>>;
PatchGroups patch_groups(const StatusReport& r);
// What status calls the overlay's sitecustomize.py: absent, current, generated, foreign.
const char* sitecustomize_word(SitecustomizeKind k);
// The JSON of Python entries (status, engaged) and of a file's stack, bottom first (status, which).
nlohmann::json python_entries_json(const std::vector<PythonStatus>& pythons);
nlohmann::json layers_json(const FileStack& stack);

}  // namespace overlay
