// The flag groups add-native, apply and exec share, the request they describe, and the trust
// flag of the verbs that act on an overlay's word (native_flags.hpp, commands.hpp).
#include "native_flags.hpp"

#include <cstdlib>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/trust.hpp"
#include "overlay/words.hpp"

#include "output.hpp"

namespace overlay::cli {

// The request the flags describe (everything but the files to change, which each command adds).
void fill_request(AddNativeFlags& f, const Globals& g) {
  AddNativeRequest& r = f.req;
  r.overlay = f.overlay;
  r.targets.assign(f.targets.begin(), f.targets.end());
  r.patched_files.assign(f.patched.begin(), f.patched.end());
  if (!f.patch.empty()) r.patch = f.patch;
  if (!f.patch_root.empty()) r.patch_root = f.patch_root;
  if (f.strip_opt != nullptr && f.strip_opt->count() > 0 && f.patch_root.empty())
    throw Error("-p/--strip applies only with --patch-root");
  r.strip = f.strip;
  r.artifacts.assign(f.artifacts.begin(), f.artifacts.end());
  r.caches.assign(f.caches.begin(), f.caches.end());
  if (!f.build_cwd.empty()) r.build_cwd = f.build_cwd;
  if (f.owner_pid > 0) {
    r.owner_pid = f.owner_pid;
  } else if (const char* env = std::getenv("OVERLAY_OWNER_PID"); env && *env) {
    r.owner_pid = static_cast<pid_t>(std::atol(env));
  }
  if (f.build_timeout > 0) r.build_timeout = f.build_timeout;
  r.cache_snapshot = f.cache_snapshot == "move"    ? CacheSnapshot::move
                     : f.cache_snapshot == "aside" ? CacheSnapshot::aside
                     : f.cache_snapshot == "tar"   ? CacheSnapshot::tar
                                                   : CacheSnapshot::automatic;
  r.lock_timeout = g.lock_timeout;
  if (!f.over.empty()) r.over = f.over;
  if (!f.fleet_id.empty()) r.patch_id = f.fleet_id;
  if (!f.fleet_owner.empty()) r.owner = parse_owner_text(f.fleet_owner);
}

std::string fleet_id_problem(const std::string& s) {
  bool ok =
      !s.empty() && s.size() <= 64 &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos &&
      s.front() != '.' && s.front() != '-';
  return ok ? std::string() : "a fleet id is 1-64 letters, digits, '.', '_' or '-' (not first)";
}

void add_fleet_node_flags(CLI::App& sub, AddNativeFlags& f) {
  auto valid_id = fleet_id_problem;
  auto valid_owner = [](const std::string& s) {
    return parse_owner_text(s) ? std::string() : "expected PID:TICKS@HOST[/LEASE]";
  };
  sub.add_option("--fleet-id", f.fleet_id, "A fleet step's id: the entry's patch id (set by overlay fleet)")
      ->check(valid_id)
      ->group("");
  sub.add_option("--fleet-owner", f.fleet_owner,
                 "The fleet step's coordinator, PID:TICKS@HOST[/JOB] (set by overlay fleet)")
      ->check(valid_owner)
      ->group("");
}

// revert, status and verify-native act on an overlay's word: refused, naming why, when another
// user owns or can write it, unless the caller says it trusts it (--trust-owner, or a root of
// $OVERLAY_TRUSTED_ROOTS above it).
void check_trusted(Disk& disk, const std::string& overlay, bool trust_owner) {
  if (trust_owner || under_trusted_root(overlay)) return;
  std::string why = why_untrusted(disk, absolute_normal(overlay));
  if (!why.empty())
    throw Error("refusing to act on overlay " + overlay + ": " + why + " (pass --trust-owner if you trust it)");
}

void add_trust_flag(CLI::App& sub, bool& flag) {
  sub.add_flag(
      "--trust-owner", flag,
      "Act on the overlay even if another user owns or can write it (also: $OVERLAY_TRUSTED_ROOTS, ':'-separated)");
}

void add_change_flags(CLI::App& sub, AddNativeFlags& f, Diffs diffs) {
  sub.add_option("--overlay", f.overlay, "Overlay directory (created if missing)")->required();
  if (diffs == Diffs::targets_or_patch) {
    sub.add_option("--target", f.targets, "Installed source file to replace (repeatable; not with --patch-root)");
    sub.add_option("--patched-file", f.patched, "Replacement for the matching --target (repeatable)");
  }
  auto* patch =
      sub.add_option("--patch", f.patch,
                     diffs == Diffs::patch_only
                         ? "Unified diff (may touch compiled and .py files)"
                         : "Unified diff: for the single --target, or with --patch-root for every file it names");
  auto* root = sub.add_option(
      "--patch-root", f.patch_root,
      "Directory the diff's paths are relative to (a multi-file diff; files it creates or deletes are tracked)");
  f.strip_opt = sub.add_option("-p,--strip", f.strip,
                               "With --patch-root: strip N leading path components (default 1, as git writes diffs)")
                    ->check(CLI::Range(0, 64));
  if (diffs == Diffs::patch_only) {
    patch->required();
    root->required();
  }
}

// The flags add-native and apply share: artifacts, caches, the build and its handling.
void add_build_flags(CLI::App& sub, AddNativeFlags& f) {
  sub.add_option("--artifact", f.artifacts, "Build output to back up and verify (repeatable)");
  sub.add_option("--invalidate-cache", f.caches, "Cache directory to snapshot and clear (repeatable)");
  sub.add_option("--build-cmd", f.req.build_cmds, "Build command, split like sh, never run by one (repeatable)");
  sub.add_option("--build-cwd", f.build_cwd, "Working directory of the build (default: current)");
  sub.add_flag("--rebuild", f.req.rebuild,
               "Run the build even where the build store holds what this same build made before "
               "(default: those outputs are put back, no command runs)");
  sub.add_option("--cache-snapshot", f.cache_snapshot,
                 "How caches are kept: auto (move when on the overlay's filesystem, else aside when the cache's "
                 "parent is writable, else tar), move (into the overlay), aside (renamed beside itself), tar")
      ->check(CLI::IsMember({"auto", "move", "aside", "tar"}));
  sub.add_option("--over", f.over,
                 "Stack on overlay LOWER's in-place changes: a file it holds is taken as a layer on it (revert puts "
                 "LOWER's bytes back; LOWER cannot be reverted under it); one it does not hold, a plain add");
  sub.add_flag(
      "--force", f.req.force,
      "Patch files another overlay still holds, taking its bytes as the original (the loss path: prefer --over)");
  sub.add_flag("--trust-owner", f.req.trust_owner,
               "Record in an overlay directory another user owns or can write (revert must then be told too)");
  sub.add_option("--owner-pid", f.owner_pid,
                 "Process owning this run; gc-stale spares it while alive (env OVERLAY_OWNER_PID)");
  sub.add_option("--build-timeout", f.build_timeout,
                 "Kill the build's process group after SECONDS (SIGTERM, SIGKILL 5 s later)");
  sub.add_flag("--revert-on-failure", f.revert_on_failure,
               "Undo the entry at once when the build fails, times out or is interrupted");
}

}  // namespace overlay::cli
