#pragma once
// Spawns a program directly (fork/exec, never through a shell) in its own process group.
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

namespace fs = std::filesystem;

enum class Output {
  stream,   // child's stdout+stderr go to our stderr and, if set, to `log`
  capture,  // child's stdout and stderr are collected into RunResult::out / err
  files,    // child's stdout to out_fd, stderr to err_fd (each also copied to its echo fd, if set)
};

struct RunOptions {
  fs::path cwd;  // empty: inherit ours
  Output output = Output::stream;
  WriteHandle* log = nullptr;       // stream mode: everything is also written here (opened through Disk)
  std::optional<double> timeout_s;  // SIGTERM to the group when exceeded, SIGKILL after grace
  double kill_grace_s = 5.0;
  std::vector<std::string> env_set;  // "NAME=value" entries added to our environment
  // Output::files: where the child's stdout and stderr go (ours to close), and where each is
  // also copied as it comes (-1: nowhere; 1 and 2 pass it through to our stdout and stderr).
  int out_fd = -1, err_fd = -1, out_echo_fd = -1, err_echo_fd = -1;
  // Output::files: files (opened through Disk) that get the child's stdout and stderr too; a
  // write that fails ends that log (RunResult::log_error), not the run.
  WriteHandle* out_log = nullptr;
  WriteHandle* err_log = nullptr;
  // Called with the child's pid about every tick_s seconds while it runs (never after it exited).
  std::function<void(pid_t)> on_tick;
  double tick_s = 0.25;
  // SIGINT/SIGTERM/SIGHUP received during the run, given to this instead of forwarded to the
  // child's group (and no SIGKILL follows): for a child that passes them on itself, e.g. salloc
  // running a coordinator that must be left to roll back.
  std::function<void(pid_t child, int sig)> on_signal;
};

struct RunResult {
  int exit_code = -1;   // when the child exited normally
  int term_signal = 0;  // the signal that ended it, 0 when it exited
  bool timed_out = false;
  int forwarded_signal = 0;  // SIGINT/SIGTERM/SIGHUP we received during the run and forwarded
  pid_t pid = 0;             // the child's (it led its own process group)
  double wall_s = 0;         // from start to exit
  std::string exec_error;    // non-empty when the program could not be started
  std::string out, err;      // capture mode only
  // Stream mode with a log, or files mode with out_log/err_log: why writing one stopped (a full disk: it ends the log,
  // not the run; the output still reached stderr); "" when every byte went in.
  std::string log_error;
  // The status the Python original reports: the exit code, or minus the signal number.
  int rc() const { return term_signal != 0 ? -term_signal : exit_code; }
  bool ok() const { return exec_error.empty() && term_signal == 0 && exit_code == 0; }
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv. stdin is /dev/null.
// SIGINT/SIGTERM/SIGHUP received meanwhile are forwarded to the child's whole process group;
// a group still there kill_grace_s later gets SIGKILL (so does one that outlives a timeout).
// Each is then also given to the handler installed before the call, when that is a function.
RunResult run_process(const std::vector<std::string>& argv, const RunOptions& opts);

// A one-line description of how the run ended ("exit 2", "killed by signal 9", "timed out …").
std::string describe(const RunResult& r);

}  // namespace overlay
