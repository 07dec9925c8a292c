#pragma once
// Engagement: whether running processes execute the code an entry built. A process keeps the
// library it loaded, so after add-native a server started before still runs the old build, and
// after revert one started during the candidate still runs the patched one. Judged by the
// device and inode each process maps (/proc/PID/maps) against the file at the artifact's path.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"
#include "overlay/process_scan.hpp"

namespace overlay {

enum class MapState {
  patched,   // maps the file at the path now, which the entry's build rebuilt
  stale,     // maps an inode no longer at that path (the pre-patch build, or a replaced one)
  original,  // maps the file at the path now, which is the original (not rebuilt, or restored)
};
const char* to_string(MapState s);

struct ArtifactUse {
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;
  std::string cmdline, artifact, entry;
  MapState state = MapState::stale;
  bool reverted = false;  // the entry is gone: a process still running code revert replaced
};

// A live process in which the overlay's sitecustomize.py ran: its record in _stats/live/, kept
// only while that process (pid and start time) still runs. Keys name entries as sitecustomize
// does: "module:M", "rebind:T->IM.IA", "capture:T".
// The overlay a record was made under, as sitecustomize.py names it: its directory's device and
// inode. A copy (cp -r, copytree) has other ones, a move the same.
struct OverlayIdentity {
  std::uint64_t dev = 0, ino = 0;
  bool operator==(const OverlayIdentity&) const = default;
};
// The identity of `overlay` now (its directory, links followed); nullopt where it is not there.
std::optional<OverlayIdentity> overlay_identity(DiskReader& disk, const fs::path& overlay);
// The identity a record (a JSON object of _stats/ or a live record's first line) names; nullopt
// where it names none (written by a runtime before identities, or malformed).
std::optional<OverlayIdentity> record_identity(const nlohmann::json& record);

struct PythonUse {
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;
  std::string cmdline;
  std::vector<std::string> applied, failed, pending;
  std::vector<std::string> displaced;      // rebinds another overlay's rebind of the same target replaced
  std::optional<OverlayIdentity> overlay;  // the overlay the record names
};

struct EngagementReport {
  std::vector<ArtifactUse> uses;
  std::vector<PythonUse> python;  // live processes running the overlay's Python entries
  std::size_t unreadable = 0;     // processes whose maps could not be read (another user's)
};

// The processes of `r` that map an artifact, as status, revert and engaged write them in JSON:
// one object each (pid, start_ticks, cmdline, artifact, entry, state, reverted).
nlohmann::json processes_json(const EngagementReport& r);

// The live processes of `r` running the overlay's Python entries, in JSON: one object each (pid,
// start_ticks, cmdline, applied, failed, pending).
nlohmann::json python_processes_json(const EngagementReport& r);

// A process revert found still mapping an artifact it replaced, as status and engaged show one.
ArtifactUse still_running_use(const RunningPatched& x);

inline constexpr const char* kLiveStatsDirName = "_stats/live";

// One record of _stats/live/ as sitecustomize.py writes it (the record on its first line, then one
// line per module applied since: {applied, failed}); nothing when its first line is malformed.
std::optional<PythonUse> parse_live_record(const std::string& text);

// The live records of `overlay` whose process still runs (pid and start time), by pid; those of
// processes that are gone are left out (`dead`, when given, gets their file names), and so are
// those made under another overlay (copied along with it) or naming none.
std::vector<PythonUse> live_python_uses(DiskReader& disk, const fs::path& overlay,
                                        std::vector<std::string>* dead = nullptr);

// The keys sitecustomize.py gives the manifest's Python entries, in manifest order.
std::vector<std::string> python_entry_keys(const Manifest& m);

// Every tracked artifact path of the manifest's native entries (and of running_patched).
std::vector<std::string> tracked_artifact_paths(DiskReader& disk, const Manifest& m);

// The processes that map a tracked artifact of `m` (none scanned when it tracks none; an
// unreadable /proc gives an empty scan: engagement is reported, never a reason to fail a revert).
ProcessScan scan_for_artifacts(DiskReader& disk, const Manifest& m);

// For revert: as scan_for_artifacts, but no scan at all (an empty one) when the kernel says no other
// process has any tracked artifact open or mapped and none is recorded as still running replaced
// code — revert then replaces nothing anyone runs. O(1) instead of O(processes).
ProcessScan scan_for_revert(DiskReader& disk, const Manifest& m);

// Every process of `scan` mapping a tracked artifact of an applied entry, judged; and the
// recorded running_patched still alive and mapping what revert replaced.
EngagementReport judge_engagement(DiskReader& disk, const Manifest& m, const ProcessScan& scan);

// The processes that map the rebuilt file now at one of `e`'s artifact paths: to record when
// revert replaces them.
std::vector<RunningPatched> running_patched_of(DiskReader& disk, const NativeEntry& e, const ProcessScan& scan);

// The recorded ones whose process (pid and start time) still lives and still maps that inode.
std::vector<RunningPatched> still_running(const std::vector<RunningPatched>& recorded, const ProcessScan& scan);

struct Verdict {
  bool engaged = false;
  std::string why;  // the NOT_ENGAGED reason, or what ENGAGED rests on
};

// What a verdict must find engaged: the native part when some entry tracks an artifact, the
// Python part when the manifest has Python entries.
struct EngagementScope {
  bool natives = false;
  std::vector<std::string> python_keys;
  std::vector<std::string> code_objects;  // tracked GPU code objects (.hsaco, .cubin, …): read, never mapped
  // Said after a Python verdict that is not engaged (what would make the overlay reach a process
  // started without its environment), or empty.
  std::string python_hint;
};
EngagementScope engagement_scope(const Manifest& m);

// For `pids` and their descendants: ENGAGED when every part of the scope is engaged there — they
// map at least one tracked artifact and every one they map is the patched build; every Python
// entry applied in one of them and none failed — otherwise why not.
Verdict engagement_verdict(const EngagementReport& r, const ProcessScan& scan, const std::vector<pid_t>& pids,
                           const EngagementScope& scope);

}  // namespace overlay
