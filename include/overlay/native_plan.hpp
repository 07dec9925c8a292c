#pragma once
// add-native, step 1: planning. Every input is checked and every patched content computed in
// private copies before anything is touched; a refusal here changes nothing on disk (SPEC
// guarantee 5). This step carries no crash-safety duty because it writes nothing.
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"
#include "overlay/owner.hpp"

namespace overlay {

class PatchedCopy;
class PatchedTree;
struct Manifest;

// How a cache dir is kept: moved into the overlay (one rename on the same filesystem, every
// inode attribute kept), renamed aside beside itself (one rename on its own filesystem, for a
// cache the overlay's filesystem cannot take), or a tar (what overlay_setup.py can read; also
// where the cache's parent cannot be written). auto: move where the cache and the overlay share
// a filesystem, aside where they do not and the cache's parent is writable, tar elsewhere.
// `move` is kept for the callers that ask for it by name: it renames the cache beside itself, as
// `aside` does (an overlay root holds sources only: issue 62), so its errors say `move`.
enum class CacheSnapshot { automatic, move, aside, tar };
// What the plan decided for one cache dir. Records of earlier versions may still name a cache
// moved into the overlay (CacheItem::backup_dir): revert, fold and status take those back.
enum class CacheWay { aside, tar };

// What an entry does to one installed file: replace its bytes, create it, or delete it.
enum class SwapKind { modify, create, remove };
const char* to_string(SwapKind k);

// A change given whole (replay of a bundle): the file, what happens to it, and its new bytes
// (none for a delete).
struct GivenChange {
  fs::path target;
  SwapKind kind = SwapKind::modify;
  fs::path content;
};

struct AddNativeRequest {
  fs::path overlay;
  std::vector<GivenChange> changes;  // instead of targets or a patch (replay)
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
  // A fleet step's node: its coordinator (on another host, or here) owns the entry, and the
  // step's id is the entry's patch id on every node (`overlay fleet`).
  std::optional<Owner> owner;
  std::optional<std::string> patch_id;
  // replay: the id the entry had where the bundle was made, kept where this overlay has no entry
  // of that id (a caller carries it from the keep to its revert); otherwise a fresh one.
  std::optional<std::string> entry_id;
  double lock_timeout = 120;
  std::optional<double> build_timeout;
  bool force = false;        // take over installed files another overlay still holds
  bool rebuild = false;      // run the build even where the build store holds its outputs
  bool trust_owner = false;  // record in an overlay others could write (revert must be told too)
  // --over LOWER: stacked on LOWER's changes (stack.hpp); a file LOWER holds is taken as a layer.
  std::optional<fs::path> over;
  fs::path state_dir;  // the hold registry; empty: HoldRegistry::default_state_dir()
  CacheSnapshot cache_snapshot = CacheSnapshot::automatic;
};

// A validated request: every input checked, every patched content ready. Nothing touched yet.

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
  std::vector<CacheWay> cache_ways;  // per cache
  std::vector<std::vector<std::string>> build_cmds;
  fs::path build_cwd;
  bool build_cwd_defaulted = false;  // no --build-cwd: the caller's directory
  // The build's output dirs the watch pictures besides the targets' and artifacts': build_cwd
  // when --build-cwd named it (a defaulted one is wherever the caller stood, e.g. $HOME).
  std::vector<fs::path> watched_dirs;
  std::optional<Owner> owner;
  std::string op = "add-native";  // what the overlay's in-flight mark says is running
  double lock_timeout = 120;
  std::optional<double> build_timeout;
  bool force = false;
  bool rebuild = false;
  std::optional<fs::path> over;  // the lower overlay (absolute), where --over named one
  // The records this add-native reads (the lower's, read here to refuse a malformed one up
  // front), each parsed once; the claim and the lower's lock read the bytes again (stack.hpp).
  std::shared_ptr<ManifestCache> records;
  fs::path state_dir;
  std::vector<std::shared_ptr<PatchedCopy>> patched;  // keeps --patch results alive
  std::shared_ptr<PatchedTree> patched_tree;          // keeps a --patch-root result alive
  // `apply`: the patch the entry belongs to, and what else goes into the manifest in the same
  // atomic write that records the entry (called under the overlay lock, before that write).
  std::optional<std::string> patch_id;
  std::optional<std::string> entry_id;  // the id asked for (replay), where it is free
  std::function<void(Manifest&)> record_with;
};

// Checks every input; throws Error naming the first problem. Changes nothing on disk.
NativePlan plan_add_native(Disk& disk, const AddNativeRequest& req);

}  // namespace overlay
