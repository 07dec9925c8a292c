#pragma once
// Native apply-back: add (back up, record, swap, invalidate, build), verify, revert.
// The crash-safety protocol lives here; docs/design.md walks through it step by step.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/owner.hpp"
#include "overlay/process.hpp"

namespace overlay {

class PatchedCopy;
class PatchedTree;

// How a cache dir is kept: moved into the overlay (one rename on the same filesystem, every
// inode attribute kept), or a tar (any filesystem; what overlay_setup.py can read). auto: move
// where the cache and the overlay share a filesystem, tar elsewhere.
enum class CacheSnapshot { automatic, move, tar };

struct AddNativeRequest {
  fs::path overlay;
  std::vector<fs::path> targets;
  std::vector<fs::path> patched_files;  // one per target, or empty with `patch`
  std::optional<fs::path> patch;        // a unified diff: for the single target, or for patch_root
  std::optional<fs::path> patch_root;   // apply `patch` as a multi-file diff relative to this dir
  int strip = 1;                        // -p N for a multi-file diff
  std::vector<fs::path> artifacts;
  std::vector<fs::path> caches;
  std::vector<std::string> build_cmds;  // each split like a POSIX shell would, never run by one
  std::optional<fs::path> build_cwd;
  std::optional<pid_t> owner_pid;
  double lock_timeout = 120;
  std::optional<double> build_timeout;
  bool force = false;    // take over installed files another overlay still holds
  fs::path state_dir;    // the hold registry; empty: HoldRegistry::default_state_dir()
  CacheSnapshot cache_snapshot = CacheSnapshot::automatic;
};

// A validated request: every input checked, every patched content ready. Nothing touched yet.
// What an entry does to one installed file: replace its bytes, create it, or delete it.
enum class SwapKind { modify, create, remove };
const char* to_string(SwapKind k);

struct NativePlan {
  struct Swap {
    fs::path target;   // absolute, symlinks resolved (a created file: its parent resolved)
    fs::path content;  // the bytes to put there (empty for remove)
    std::string content_sha256;
    SwapKind kind = SwapKind::modify;
    mode_t content_mode = 0644;  // for a created file
  };
  fs::path overlay;  // absolute
  std::vector<Swap> swaps;
  std::vector<fs::path> artifacts;
  std::vector<fs::path> caches;
  std::vector<bool> move_cache;  // per cache: move it (true) or tar it
  std::vector<std::vector<std::string>> build_cmds;
  fs::path build_cwd;
  std::optional<Owner> owner;
  double lock_timeout = 120;
  std::optional<double> build_timeout;
  bool force = false;
  fs::path state_dir;
  std::vector<std::shared_ptr<PatchedCopy>> patched;  // keeps --patch results alive
  std::shared_ptr<PatchedTree> patched_tree;          // keeps a --patch-root result alive
};

// Checks every input; throws Error naming the first problem. Changes nothing on disk.
NativePlan plan_add_native(Disk& disk, const AddNativeRequest& req);

struct AppliedEntry {
  std::string id;
  fs::path log_path;
  std::size_t sources = 0, artifacts = 0, caches = 0;
};

// Backs up every source, artifact and cache durably, records the entry in the manifest
// (atomically), and only then swaps the sources in and invalidates the caches.
AppliedEntry apply_native(Disk& disk, const NativePlan& plan);

struct BuildOutcome {
  bool ok = true;
  std::vector<std::string> failed_cmd;
  RunResult result;
};

// Runs the plan's build commands in order (stopping at the first failure), streaming output
// to stderr and appending it to the entry's log.
BuildOutcome run_native_build(const NativePlan& plan, const AppliedEntry& entry);

enum class ArtifactState { rebuilt, created, unchanged, missing_after_build, not_created };
struct VerifyItem {
  std::string path;
  ArtifactState state;
};
struct VerifyReport {
  std::vector<VerifyItem> items;
  bool ok() const;
};
// Compares each tracked artifact with its state before the entry was applied.
// Throws Error when the overlay has no manifest.
VerifyReport verify_native(Disk& disk, const fs::path& overlay);
const char* to_string(ArtifactState s);

struct RevertOptions {
  bool dry_run = false;
  double lock_timeout = 120;
  fs::path state_dir;  // the hold registry; empty: HoldRegistry::default_state_dir()
  std::optional<std::string> only_entry;  // revert just this entry id (--revert-on-failure)
};
struct RevertProblem {
  std::string path;
  std::string reason;
};
struct RevertAction {
  std::string action;  // restore | remove | unchanged
  std::string path;
};
struct RevertReport {
  bool had_manifest = false;
  std::size_t entries = 0;           // native entries found
  std::size_t entries_reverted = 0;  // fully restored and removed from the manifest
  std::vector<RevertAction> actions;
  std::vector<RevertProblem> problems;
  bool ok() const { return problems.empty(); }
};

// Restores every native entry, newest first (caches, then artifacts, then sources), checking
// each backup against its recorded SHA-256 before use. An item that cannot be restored is
// reported and keeps its entry; the rest are still restored. Python entries are left alone.
RevertReport revert_natives(Disk& disk, const fs::path& overlay, const RevertOptions& opts);

}  // namespace overlay
