#pragma once
// Spawns a program directly (fork/exec, never through a shell) in its own process group.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

namespace fs = std::filesystem;

enum class Output {
  stream,   // child's stdout+stderr go to our stderr and, if set, to `log`
  capture,  // child's stdout and stderr are collected into RunResult::out / err
};

struct RunOptions {
  fs::path cwd;                      // empty: inherit ours
  Output output = Output::stream;
  WriteHandle* log = nullptr;        // stream mode: everything is also written here (opened through Disk)
  std::optional<double> timeout_s;   // SIGTERM to the group when exceeded, SIGKILL after grace
  double kill_grace_s = 5.0;
  std::vector<std::string> env_set;  // "NAME=value" entries added to our environment
};

struct RunResult {
  int exit_code = -1;      // when the child exited normally
  int term_signal = 0;     // the signal that ended it, 0 when it exited
  bool timed_out = false;
  int forwarded_signal = 0;  // SIGINT/SIGTERM we received during the run and forwarded
  std::string exec_error;  // non-empty when the program could not be started
  std::string out, err;    // capture mode only
  // The status the Python original reports: the exit code, or minus the signal number.
  int rc() const { return term_signal != 0 ? -term_signal : exit_code; }
  bool ok() const { return exec_error.empty() && term_signal == 0 && exit_code == 0; }
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv. stdin is /dev/null.
// SIGINT/SIGTERM received meanwhile are forwarded to the child's whole process group.
RunResult run_process(const std::vector<std::string>& argv, const RunOptions& opts);

// A one-line description of how the run ended ("exit 2", "killed by signal 9", "timed out …").
std::string describe(const RunResult& r);

}  // namespace overlay
