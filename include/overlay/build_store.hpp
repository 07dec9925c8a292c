#pragma once
// The build store: what each successful traced build of an entry changed, kept under the state dir
// and keyed by everything it read, so that a candidate applied again (an ABAB confirmation, an
// exec re-run, a replay, a fleet node of the same install) gets those changes put back instead of
// a build (docs/design.md, "The build store").
//
// A record is found by two keys. The recipe: the patched bytes of every target, the tracked
// artifacts and caches, the build commands and their cwd, the environment (less the variables
// that reach no compiler: a terminal's, a login's, a scheduler's), and the machine (its
// architecture, CPU model and features, GPU models: what a build may ask the kernel, not a file). The inputs: every
// path the traced build looked at and had not made (build_inputs.hpp) — the bytes of each file it read, each program it
// ran (its real path and bytes, whatever PATH says) and its ELF interpreter, the stat of each file it stat'ed, each
// directory's names it listed, the absence of each file it looked for and did not find. A record serves only where both
// are as they were when it was built; any difference is a miss, named, and the build runs. A build whose reads could
// not be observed is never kept.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "overlay/build_inputs.hpp"
#include "overlay/native_plan.hpp"
#include "overlay/traced_build.hpp"

namespace overlay {

struct PinnedDir;

inline constexpr const char* kBuildStoreDirName = "builds";
// The store's size cap unless OVERLAY_BUILD_STORE_BYTES says otherwise (0 turns the store off).
inline constexpr std::uint64_t kDefaultBuildStoreBytes = 4ull << 30;

// A path as the build left it, and its copy in the record.
struct StoredChange {
  std::string path;                // absolute
  FileType type = FileType::none;  // none: the build removed it
  std::string blob;                // a file's copy, a name inside the record's dir
  std::string sha256;
  mode_t mode = 0644;
  std::int64_t mtime_ns = 0;
  std::string target;  // a symlink's
  // A log the build only appended to: the blob holds the bytes it appended, which a serve appends
  // to the file as it is then (lines others appended since stay), never the file whole.
  bool appended = false;
};

// A cache dir as the build left it (a tar in the record).
struct StoredDir {
  std::string path;
  std::string tar;
  std::string sha256;
};

// A swapped target's mtime as the build saw it.
struct StoredStamp {
  std::string path;
  std::int64_t mtime_ns = 0;
};

struct StoredBuild {
  std::string recipe;
  std::string inputs_sha256;
  std::vector<BuildInput> inputs;
  std::vector<StoredChange> changes;  // the tracked artifacts and every other path the build changed
  std::vector<StoredStamp> sources;
  std::vector<StoredDir> dirs;  // caches
  std::string entry;            // the entry whose build it was
  double built_at = 0;
  std::uint64_t bytes = 0;
  fs::path where;  // the record's dir (not recorded)
  // "<recipe>/<inputs>" (abbreviated): what status and --json name it by.
  std::string name() const;
};

// What a build may ask of the machine rather than of a file (the reads below /proc and /sys a trace
// leaves out): what uname(2) returns (its architecture, and the kernel's name, release and version:
// a `uname -r`-selected tree, DKMS-style), its CPU's model and features (-march=native, a JIT's
// ISA), its GPUs' models (a JIT's arch list). Records are per state dir, most often per host; a
// state dir shared by unlike hosts, or one host booted into another kernel, never serves one's
// build to another.
std::string machine_key(Disk& disk);

// The recipe key of a plan (above), with the machine's key.
std::string build_recipe(Disk& disk, const NativePlan& plan);

// What the store said about a build about to run: a record to serve, or why none (a miss).
struct StoreLookup {
  std::optional<StoredBuild> hit;
  std::string miss;  // the first input that differed from the newest record of the recipe, or why none is kept
};

class BuildStore {
 public:
  // The store under `state_dir`; its cap from OVERLAY_BUILD_STORE_BYTES (default above).
  BuildStore(Disk& disk, const fs::path& state_dir);
  // Off (OVERLAY_BUILD_STORE_BYTES=0): finds nothing, keeps nothing.
  bool enabled() const { return cap_ > 0; }
  // The digests of files' bytes the store has seen (saved when the store is done with).
  DigestCache& digests() { return digests_; }

  // The record of this plan's recipe whose every input is as it is now; else why not. `skipped`
  // are the roots a trace leaves out, for the directory listings it compares.
  StoreLookup find(const NativePlan& plan, const std::vector<fs::path>& skipped);

  // Puts a record's changes in place with the mtimes the build gave them (and the swapped
  // sources the mtimes the build saw), so the install's build finds nothing to redo: every file's
  // copy is made beside its place and proven against its recorded digest before the first goes
  // in. A tracked path is written in the directory add-native pinned for it (`pins`); any other
  // in its parent opened with no symlink followed. `recorder` is told of each path before it is
  // changed (it keeps what was there, for revert). Returns "" when served; otherwise why not
  // (nothing went in, or — a failure midway — what went in is what the recorder noted). A record
  // with a copy that does not hash to it is torn: it goes from the store.
  std::string serve(const StoredBuild& b, const std::map<std::string, PinnedDir>& pins, TraceRecorder& recorder);

  // Keeps what the traced build changed (`trace`, whose `inputs` are keyed), under a temporary
  // name renamed into place when whole: a torn record is never found. Then the least recently
  // used records go until the store is under its cap. Each output is read where serve would write
  // it (`pins`). Returns "" when kept, otherwise why not (nothing kept).
  std::string keep(const NativePlan& plan, const BuildTrace& trace, std::vector<BuildInput> inputs,
                   const std::string& entry, const std::map<std::string, PinnedDir>& pins);

 private:
  Disk& disk_;
  fs::path root_;
  std::uint64_t cap_ = kDefaultBuildStoreBytes;
  DigestCache digests_;
  void evict();
  void forget(const StoredBuild& b);
};

}  // namespace overlay
