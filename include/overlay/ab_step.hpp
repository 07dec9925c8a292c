#pragma once
// The agent's A/B step (`exec`): optionally the command on the clean install (the reference),
// the change applied as add-native or apply would (build, verify-native), the command again (the
// candidate) with the Python overlay on PYTHONPATH, and always the revert of what it applied —
// after the candidate, when the build or verify fails, and on SIGINT/SIGTERM/SIGHUP — then the
// clean check. Its entries are owned by this process, so a step killed with SIGKILL is reverted
// by gc-stale or by the next step on the overlay. Steps on one install serialise. The pieces
// `fleet exec` shares with it (exit statuses, the signal guard, a run's shell status) are here too.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/native_plan.hpp"
#include "overlay/process.hpp"

namespace overlay {

// A step's own failures (docs/cli.md, `exec` and `fleet exec`); otherwise the candidate's status
// passes through.
enum class StepExit : int {
  apply_failed = 1,         // the patch did not apply, the build failed, FRESH_BUILD_FAIL
  revert_incomplete = 121,  // what the step applied could not all be restored: look now
  not_clean = 122,          // reverted, but the clean check fails
  timed_out = 124,          // the command ran past its timeout (as timeout(1))
};
constexpr int to_int(StepExit e) { return static_cast<int>(e); }

// The status a shell reports for a run: 127 when the program was not found, 126 when it could
// not be run, 128 + the signal that ended it, else its exit code.
int shell_status(const RunResult& r);

// While a step runs, SIGINT, SIGTERM and SIGHUP are noted, never fatal: whatever arrives, the
// revert still happens (a run in progress forwards them to its child itself). One at a time.
class StepSignals {
 public:
  StepSignals();
  ~StepSignals();
  StepSignals(const StepSignals&) = delete;
  StepSignals& operator=(const StepSignals&) = delete;
  static int received();  // the last one noted since the guard was made, 0 when none

 private:
  struct Saved;
  Saved* saved_;
};

struct AbStepRequest {
  AddNativeRequest change;  // what to apply (owner: set to this process by the step)
  // A diff with its root and no target: routed as `apply` routes it (its Python files as modules).
  bool as_apply = false;
  std::optional<fs::path> python_root;  // apply's: dotted names are relative to it
  std::vector<std::string> cmd;         // run directly, never through a shell
  bool ref = false;                     // run the command on the clean install first
  bool engaged = false;                 // judge the candidate while it runs: ENGAGED / NOT_ENGAGED
  bool keep_on_success = false;         // leave the change applied when the candidate exits 0
  double timeout_s = 0;                 // each run of the command; 0: none
  // Record what each process of each run executed (overlay/receipts.hpp): the doc's
  // ref.receipts and cand.receipts, and a line per run.
  bool receipts = false;
};

// Where the step says what it does, as it goes (a long candidate run must not hide a build's
// verdict): stdout lines (the tokens: OVERLAY_DIR=, FRESH_BUILD_OK, ENGAGED …), stderr notes, and
// the JSON document it fills (overlay, ref, apply, cand, engaged, revert, clean, error; ref and cand
// with their receipts), kept by
// the caller so that what was filled survives an exception. The command's own output is copied
// to echo_out and echo_err as it comes (-1: not at all).
struct StepOutput {
  std::function<void(const std::string&)> line;
  std::function<void(const std::string&)> note;
  nlohmann::json& doc;
  int echo_out = 1, echo_err = 2;
};

// Runs the whole step; returns its exit status (StepExit, 128 + a signal, or the candidate's).
// Throws only for what refuses the step before anything was applied (bad input, a lock timeout,
// a target another overlay holds, a dead run's entry that cannot be reverted).
int run_ab_step(Disk& disk, AbStepRequest req, const StepOutput& out);

}  // namespace overlay
