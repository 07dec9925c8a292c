#pragma once
// The build store: what each successful build of an entry produced, kept under the state dir and
// keyed by everything that decides it, so that a candidate applied again (an ABAB confirmation, an
// exec re-run, a replay, a fleet node of the same install) gets those outputs put back instead of
// a build (docs/design.md, "The build store").
//
// A record is found by two keys. The recipe: the patched bytes of every target, the tracked
// artifacts and caches, the build commands and their cwd, the environment (less the variables
// that reach no compiler: a terminal's, a login's, a scheduler's) and the toolchain on PATH (each
// tool's real path, size and mtime). The inputs: every other file of the build's watched dirs
// (path, size, mtime) and every file the build's dependency records name (Ninja's deps log,
// Make-style depfiles), as they were before the build. A record serves only where both are as
// they were when it was built; any difference is a miss, and the build runs.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "overlay/build_watch.hpp"
#include "overlay/native_plan.hpp"

namespace overlay {

inline constexpr const char* kBuildStoreDirName = "builds";
// The store's size cap unless OVERLAY_BUILD_STORE_BYTES says otherwise (0 turns the store off).
inline constexpr std::uint64_t kDefaultBuildStoreBytes = 4ull << 30;

// A file as the build left it, and its copy in the record.
struct StoredFile {
  std::string path;  // where it goes (absolute)
  std::string blob;  // the copy, a name inside the record's dir
  std::string sha256;
  mode_t mode = 0644;
  std::int64_t mtime_ns = 0;
};

// A cache dir as the build left it (a tar in the record).
struct StoredDir {
  std::string path;
  std::string tar;
  std::string sha256;
};

// A file's size, mtime and ctime (size -1: it did not exist; a directory: size 0). The ctime
// catches a write whose mtime was set back (touch -r, cp -p, tar): nothing can set it.
struct StoredStamp {
  std::string path;
  std::int64_t size = -1;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const StoredStamp&) const = default;
};

struct StoredBuild {
  std::string recipe;
  std::string inputs_sha256;         // the watched dirs' picture, less the outputs
  std::vector<StoredStamp> deps;     // what the dependency records name outside that picture
  std::vector<StoredStamp> sources;  // the swapped-in targets' mtimes as the build saw them
  std::vector<StoredFile> files;     // tracked artifacts and untracked outputs
  std::vector<StoredStamp> before;   // the untracked outputs as they were before the build
  std::vector<StoredDir> dirs;       // caches
  std::string entry;                 // the entry whose build it was
  double built_at = 0;
  std::uint64_t bytes = 0;
  fs::path where;  // the record's dir (not recorded)
  // "<recipe>/<inputs>" (abbreviated): what status and --json name it by.
  std::string name() const;
};

// The recipe key of a plan (above).
std::string build_recipe(Disk& disk, const NativePlan& plan);

class BuildStore {
 public:
  // The store under `state_dir`; its cap from OVERLAY_BUILD_STORE_BYTES (default above).
  BuildStore(Disk& disk, const fs::path& state_dir);
  // Off (OVERLAY_BUILD_STORE_BYTES=0): finds nothing, keeps nothing.
  bool enabled() const { return cap_ > 0; }

  // The record built from this plan's recipe whose inputs are what `watch` pictured before the
  // build (and the dependency files now); nullopt on a miss.
  std::optional<StoredBuild> find(const NativePlan& plan, const BuildWatch& watch);

  // Puts a record's outputs in place with the mtimes the build gave them (and the swapped
  // sources the mtimes the build saw), so the install's build finds nothing to redo: every copy is
  // made beside its place and proven against its recorded digest before the first goes in. Each
  // is written in the directory add-native pinned for its path (`pins`, by path), or else in its
  // parent opened with no symlink followed. Returns "" when served; otherwise why not (nothing
  // went in; what a failure midway put in is dated as built, older than the sources: the build
  // that runs instead redoes it).
  std::string serve(const StoredBuild& b, const std::map<std::string, PinnedDir>& pins);

  // Keeps what the build just made (the watch finished, `outputs` the files it created or
  // changed), under a temporary name renamed into place when whole: a torn record is never
  // found. Then the least recently used records go until the store is under its cap. Returns ""
  // when kept, otherwise why not (nothing kept).
  // Each output is read where serve would write it (`pins`, as serve's). `log` is the build's
  // log (the commands a Make build echoed: their include dirs go into the key).
  std::string keep(const NativePlan& plan, const BuildWatch& watch, const std::vector<UntrackedOutput>& outputs,
                   const std::string& entry, const std::map<std::string, PinnedDir>& pins, const fs::path& log);

 private:
  Disk& disk_;
  fs::path root_;
  std::uint64_t cap_ = kDefaultBuildStoreBytes;
  void evict();
};

}  // namespace overlay
