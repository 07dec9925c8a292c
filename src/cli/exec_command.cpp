// `exec`: the agent's whole A/B step in one command (the step itself is the library's:
// overlay/ab_step.hpp). This file parses its flags and prints what the step says.
#include <memory>

#include "overlay/ab_step.hpp"

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

struct ExecFlags : ApplyFlags {
  bool ref = false, engaged = false, keep_on_success = false, receipts = false, no_receipts = false;
  double timeout = 0;
  std::vector<std::string> cmd;
};

int run_exec(ExecFlags& f, const Globals& g) {
  fill_request(f, g);
  AbStepRequest req;
  req.change = f.req;
  req.as_apply = !f.patch_root.empty() && f.targets.empty();
  if (!f.python_root.empty()) req.python_root = f.python_root;
  req.cmd = f.cmd;
  req.ref = f.ref;
  req.engaged = f.engaged;
  req.keep_on_success = f.keep_on_success;
  req.timeout_s = f.timeout;
  req.receipts = f.receipts || (json_mode() && !f.no_receipts);
  // Under --json, stdout is the one document: the command's stdout goes to stderr.
  StepOutput out{out_line, [](const std::string& s) { err_line("exec", s); }, result(), json_mode() ? 2 : 1, 2};
  return run_ab_step(cli_disk(), std::move(req), out);
}

}  // namespace

// add-native's flags (a diff with --patch-root is routed per file, as apply routes it), apply's
// --python-root, the build's flags, and exec's own.
Handler exec_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<ExecFlags>();
  add_change_flags(sub, *f, Diffs::targets_or_patch);
  sub.add_option("--python-root", f->python_root, "Directory .py paths are module names under (default: --patch-root)");
  add_build_flags(sub, *f);
  // exec owns its entries and always reverts: these two of add-native's flags mean nothing here.
  sub.get_option("--owner-pid")->group("");
  sub.get_option("--revert-on-failure")->group("");
  sub.add_flag("--ref", f->ref, "Run CMD on the clean install first (the reference), then apply and run it again");
  sub.add_flag("--engaged", f->engaged,
               "While the candidate runs, check that it (or a child) runs the patched code: ENGAGED / NOT_ENGAGED");
  sub.add_flag("--keep-on-success", f->keep_on_success,
               "Leave the patch applied when the candidate exits 0 (owner cleared; gc-stale leaves it)");
  auto* receipts = sub.add_flag("--receipts", f->receipts,
                                "Record what each process of each run executed (on with --json): overlay files and "
                                "artifacts, with their SHA-256");
  sub.add_flag("--no-receipts", f->no_receipts, "With --json: record no receipts")->excludes(receipts);
  sub.add_option("--timeout", f->timeout, "Stop each run of CMD after SECONDS (SIGTERM, SIGKILL 5 s later); exit 124")
      ->check(CLI::PositiveNumber);
  sub.add_option("cmd", f->cmd, "The command, after --: run directly, never through a shell");
  sub.positionals_at_end(true);
  return [f, &g] { return run_exec(*f, g); };
}

}  // namespace overlay::cli
