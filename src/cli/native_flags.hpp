#pragma once
// The flags add-native, apply and exec share, and the request they describe.
#include <sys/types.h>

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "overlay/native.hpp"

#include "commands.hpp"

namespace overlay::cli {

struct AddNativeFlags {
  AddNativeRequest req;
  std::string overlay;
  std::vector<std::string> targets, patched, artifacts, caches;
  std::string patch, build_cwd;
  pid_t owner_pid = 0;
  double build_timeout = 0;
  std::string cache_snapshot = "auto";
  std::string patch_root;
  int strip = 1;
  CLI::Option* strip_opt = nullptr;
  bool revert_on_failure = false;
  std::string fleet_id, fleet_owner;  // a fleet step's node (hidden flags, set by `overlay fleet`)
  std::string over;                   // --over LOWER
};

struct ApplyFlags : AddNativeFlags {
  std::string python_root;
};

// Fills f.req from the flags (everything but the files to change, which each command adds).
void fill_request(AddNativeFlags& f, const Globals& g);

// Which way a command takes the files to change: --target/--patched-file pairs or a diff
// (add-native, exec), or a diff with its root only (apply).
enum class Diffs { targets_or_patch, patch_only };
// Registers --overlay and the files to change: --target, --patched-file, --patch, --patch-root, -p.
void add_change_flags(CLI::App& sub, AddNativeFlags& f, Diffs diffs);
// Registers the hidden flags `overlay fleet` passes a node's add-native or apply: --fleet-id (the
// entry's patch id) and --fleet-owner PID:TICKS@HOST[/JOB] (the coordinator).
void add_fleet_node_flags(CLI::App& sub, AddNativeFlags& f);
// Why `id` cannot be a fleet step's id (it names entries and goes on command lines); "" when it can.
std::string fleet_id_problem(const std::string& id);
// Registers --artifact, --invalidate-cache, --build-cmd, --build-cwd and the build's handling.
void add_build_flags(CLI::App& sub, AddNativeFlags& f);

}  // namespace overlay::cli
