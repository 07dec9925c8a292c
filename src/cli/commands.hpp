#pragma once
// The command-line front end: each subcommand parses its flags (CLI11), calls the library and
// prints. Nothing here touches disk directly.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/engagement.hpp"
#include "overlay/native_verify.hpp"
#include "overlay/status.hpp"

namespace overlay::cli {

// Exit statuses (docs/cli.md).
enum Exit : int {
  kOk = 0,
  kFailed = 1,       // bad input, failed build, incomplete revert
  kUsage = 2,        // unknown flag or bad flag value; also verify-native FRESH_BUILD_FAIL
  kLockTimeout = 3,  // another overlay process held the overlay too long
  kInterrupted = 130,
};

// The disk every command uses: the real one, or — when $OVERLAY_DISK_TRACE names a file — the real
// one behind a RecordingDisk that appends each operation to that file as a line (tests use it to
// prove that nothing of ours changes the filesystem without going through Disk; with
// $OVERLAY_DISK_TRACE_BYTES=1 each write's bytes too, which the crash-state explorer replays).
overlay::Disk& cli_disk();

struct Globals {
  double lock_timeout = 120;
};

// Which subcommands to register: every one (for --help, usage errors and unknown names), none
// (--version), or only the one the command line names. Building every subcommand's parser was
// most of a start-up's instructions (callgrind: 1.6 M for `--version`).
struct Wanted {
  enum class Which { all, none, one } which = Which::all;
  std::string name;
  bool operator()(std::string_view sub, std::string_view alias = {}) const {
    return which == Which::all || (which == Which::one && (name == sub || (!alias.empty() && name == alias)));
  }
};
// From argv: the first word after the global options, when it is one of our subcommands.
Wanted wanted_from(int argc, char** argv);

// Registers add-native, apply, verify-native, revert, status (list) and gc-stale; each sets `run`
// when chosen.
void add_native_commands(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want);
// Registers discover (read-only: which build compiles a file).
void add_discover_command(CLI::App& app, std::function<int()>& run, const Wanted& want);
// Registers engaged (read-only: which processes run which build of the tracked artifacts).
void add_engaged_command(CLI::App& app, std::function<int()>& run, const Wanted& want);
// Registers exec (one A/B step: apply, run CMD, always revert, check clean).
void add_exec_command(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want);
// Prints verify-native's line for each artifact not rebuilt (FRESH_BUILD_FAIL STATE P (WHY)) and
// returns the closing token, FRESH_BUILD_OK|FAIL (checked N), for the caller to print or record.
std::string print_verify_items(const VerifyReport& r);
// What status, revert and engaged print of one process's mapping, and the JSON of them all.
std::string process_line(const ArtifactUse& u);
nlohmann::json processes_json(const EngagementReport& r);
// What status and engaged print of a live process running the overlay's Python entries.
std::string python_process_line(const PythonUse& u);
nlohmann::json python_processes_json(const EngagementReport& r);
// status's line and JSON for the Python entries: applied in how many processes, calls counted.
std::string python_entry_line(const PythonStatus& p);
nlohmann::json python_entries_json(const std::vector<PythonStatus>& pythons);
// Registers add-module (copy-subtree), add-rebind (monkeypatch), add-capture and check.
void add_python_commands(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want);

}  // namespace overlay::cli
