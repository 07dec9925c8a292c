#include "overlay/fleet_step.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "overlay/lease.hpp"

namespace overlay {
namespace {

bool stopped() { return StepSignals::received() != 0; }

std::vector<std::string> node_argv(const std::vector<std::string>& node_cmd, const std::string& sub,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> argv = node_cmd;
  argv.push_back(sub);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void print_lines(const StepOutput& out, const std::vector<std::string>& lines) {
  for (const auto& l : lines) out.line(l);
}

// Where every node stands, the signal that stopped the step, the verdict; the document.
void report(const FleetReport& rep, const FleetRunner& runner, const std::string& id, const StepOutput& out) {
  out.doc["fleet_id"] = id;
  out.doc["engine"] = runner.describe();
  out.doc["node_list"] = runner.nodes();
  out.doc.update(rep.to_json());
  print_lines(out, node_state_lines(rep, runner.nodes()));
  if (rep.interrupted != 0)
    out.note("step " + id + " stopped by signal " + std::to_string(rep.interrupted) +
             (rep.revert_complete ? "; every node rolled back" : ""));
  out.line(outcome_line(rep, id + " on " + runner.describe()));
}

// The caller's own command, here on the coordinator: its summary in the document.
nlohmann::json run_cmd(const FleetExecRequest& req, const char* which, bool candidate, const StepOutput& out,
                       int& status) {
  RunOptions o;
  o.output = Output::files;
  o.out_fd = ::dup(out.echo_out);
  o.err_fd = ::dup(out.echo_err);
  if (req.timeout_s > 0) o.timeout_s = req.timeout_s;
  if (candidate && !req.pythonpath.empty()) {  // srun passes our environment to its tasks: the patched .py files engage
    const char* old = std::getenv("PYTHONPATH");
    o.env_set.push_back("PYTHONPATH=" + req.pythonpath + (old && *old ? ":" + std::string(old) : std::string()));
  }
  std::fflush(stdout);
  RunResult r = run_process(req.cmd, o);
  status = r.timed_out ? to_int(StepExit::timed_out) : shell_status(r);
  out.line(std::string("fleet: ") + which + " " + describe(r) + " in " + std::to_string(r.wall_s).substr(0, 6) + " s");
  return {{"argv", req.cmd}, {"status", status}, {"timed_out", r.timed_out}, {"wall_s", r.wall_s}};
}

}  // namespace

Owner coordinator_owner() {
  Owner me = local_owner(::getpid()).value_or(Owner{::getpid(), 0, {}, {}, this_pid_ns()});
  me.host = this_host();
  me.lease = lease_here().value_or(Lease{});
  return me;
}

FleetCommands fleet_step_commands(const FleetStepRequest& r, const std::string& id, const Owner& owner) {
  std::vector<std::string> args = r.change_args;
  args.insert(args.end(), {"--fleet-id", id, "--fleet-owner", owner_text(owner)});
  std::vector<std::string> ov = {"--overlay", r.overlay};
  FleetCommands c;
  c.apply = node_argv(r.node_cmd, r.as_apply ? "apply" : "add-native", args);
  c.verify = node_argv(r.node_cmd, "verify-native", ov);
  std::vector<std::string> rv = ov;
  rv.insert(rv.end(), {"--patch-id", id, "--missing-ok"});
  c.revert = node_argv(r.node_cmd, "revert", rv);
  std::vector<std::string> cl = ov;
  cl.insert(cl.end(), {"--check-clean", "--missing-ok"});  // a node that refused before making it
  c.clean = node_argv(r.node_cmd, "status", cl);
  return c;
}

FleetStepEnd run_fleet_apply(FleetRunner& runner, const FleetCommands& cmds, const std::string& id,
                             const StepOutput& out) {
  out.line("fleet " + id + ": apply on " + runner.describe());
  FleetReport rep = fleet_apply(runner, cmds, stopped);
  if (rep.outcome == "ok" && stopped()) fleet_revert(runner, cmds, rep);  // stopped during verify: undo it
  conclude_step(rep, StepSignals::received(), false, true);
  for (const char* phase : {"apply", "verify", "revert"}) print_lines(out, phase_lines(rep, phase));
  report(rep, runner, id, out);
  if (rep.outcome == "ok") return {0, true};
  return {rep.revert_complete ? to_int(StepExit::apply_failed) : to_int(StepExit::revert_incomplete),
          rep.revert_complete};
}

FleetStepEnd run_fleet_exec(FleetRunner& runner, const FleetCommands& cmds, const std::string& id,
                            const FleetExecRequest& req, const StepOutput& out) {
  out.line("fleet " + id + ": exec on " + runner.describe());
  out.doc["ref"] = nullptr, out.doc["cand"] = nullptr;
  int ref_status = 0, cand_status = 0;
  if (req.ref) out.doc["ref"] = run_cmd(req, "ref", false, out, ref_status);
  FleetReport rep;
  bool applied = false;
  if (!stopped()) {
    rep = fleet_apply(runner, cmds, stopped);
    applied = rep.outcome == "ok";
  } else {
    rep.outcome = "failed";  // interrupted during the reference: nothing was applied
  }
  if (applied && !stopped()) out.doc["cand"] = run_cmd(req, "cand", true, out, cand_status);
  if (applied) fleet_revert(runner, cmds, rep);  // a failed apply was rolled back already
  bool clean = rep.revert_complete && fleet_clean(runner, cmds, rep);
  conclude_step(rep, StepSignals::received(), true, clean);
  for (const char* phase : {"apply", "verify", "revert", "clean"}) print_lines(out, phase_lines(rep, phase));
  report(rep, runner, id, out);
  if (!rep.revert_complete) return {to_int(StepExit::revert_incomplete), false};
  if (!clean) return {to_int(StepExit::not_clean), true};
  if (stopped()) return {128 + StepSignals::received(), true};
  return {applied ? cand_status : to_int(StepExit::apply_failed), true};
}

int run_fleet_pass_on(FleetRunner& runner, const std::vector<std::string>& node_cmd, const std::string& counterpart,
                      const std::vector<std::string>& args, const StepOutput& out) {
  std::vector<NodeAnswer> answers = runner.run(node_argv(node_cmd, counterpart, args), {});
  PassOnReport rep = tally_pass_on(answers);
  print_lines(out, pass_on_lines(answers, counterpart));
  out.doc["engine"] = runner.describe();
  out.doc["node_list"] = runner.nodes();
  out.doc.update(rep.to_json());
  out.line(outcome_token(rep.outcome) + " " + counterpart + " on " + runner.describe() + "; failed " +
           node_names(rep.failed) + "; unreachable " + node_names(rep.unreachable));
  return rep.exit;
}

}  // namespace overlay
