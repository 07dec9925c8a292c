#pragma once
// The command-line front end: each subcommand parses its flags (CLI11), calls the library and
// prints. Nothing here touches disk directly.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
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
  // The command line as given (fleet --slurm-args runs it again under salloc).
  std::vector<std::string> argv;
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

// What runs a chosen subcommand: its flags live in what it captures, so they outlive the parse.
using Handler = std::function<int()>;
// Adds one subcommand's flags to `sub` and returns its handler.
using Setup = Handler (*)(CLI::App& sub, const Globals& g);

// One subcommand: a row of the table in command_table.cpp, its setup in a file of its own (or of
// its family). A new subcommand is that file and one row (with its setup's declaration).
struct Command {
  const char* name;
  const char* alias;  // nullptr: none
  const char* help;
  Setup setup;
  bool hidden = false;  // the shim's plumbing, not a user's: left out of --help
};
// Every subcommand, in the order --help lists them.
std::span<const Command> command_table();
// Registers the table's rows `want` asks for; the chosen one's handler lands in `run`, wrapped so
// an error is one line naming the subcommand (guarded()).
void register_commands(CLI::App& app, const Globals& g, Handler& run, const Wanted& want);

// Flags several subcommands share, written once.
// --trust-owner: act on an overlay another user owns or can write (revert, status, verify-native).
void add_trust_flag(CLI::App& sub, bool& flag);
// Refuses, naming why, an overlay another user owns or can write unless `trust_owner` (or a root
// of $OVERLAY_TRUSTED_ROOTS above it) says otherwise.
void check_trusted(Disk& disk, const std::string& overlay, bool trust_owner);

// Prints verify-native's line for each artifact not rebuilt (FRESH_BUILD_FAIL STATE P (WHY)) and
// returns the closing token, FRESH_BUILD_OK|FAIL (checked N), for the caller to print or record.
std::string print_verify_items(const VerifyReport& r);
// `status --all` (registry_commands.cpp): one line per overlay the holds registry knows; exit 1
// with check_clean when one is not clean.
int run_status_all(Disk& disk, bool check_clean);
// What status, revert and engaged print of one process's mapping (its JSON: processes_json).
std::string process_line(const ArtifactUse& u);
// What status and engaged print of a live process running the overlay's Python entries.
std::vector<std::string> python_process_lines(const PythonUse& u);
// status's line and JSON for the Python entries: applied in how many processes, calls counted.
std::string python_entry_line(const PythonStatus& p);

}  // namespace overlay::cli
