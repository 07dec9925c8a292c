// `fleet`: one step on every node of a multi-node deployment. Each subcommand takes its one-node
// counterpart's flags (registered by the same functions) plus the engine's (fleet_engine.hpp),
// and passes those given on to `overlay --fleet-node <counterpart> …` on every node. The
// coordinator's steps are the library's (overlay/fleet_step.hpp): this file parses and prints.
#include <memory>

#include "overlay/error.hpp"
#include "overlay/fleet_step.hpp"

#include "commands.hpp"
#include "fleet_engine.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {

Handler verify_native_command(CLI::App& sub, const Globals& g);
Handler revert_command(CLI::App& sub, const Globals& g);
Handler status_command(CLI::App& sub, const Globals& g);

namespace {

StepOutput fleet_output() {
  // Under --json, stdout is the one document: the command's stdout goes to stderr.
  return {out_line, [](const std::string& s) { err_line("fleet", s); }, result(), json_mode() ? 2 : 1, 2};
}

struct ApplyStep {
  ApplyFlags f;
  EngineFlags e;
  CLI::App* sub = nullptr;
  std::string id;  // the step's, once started
  FleetCommands cmds;
};

// The coordinator's runner; the step's id (recorded) and its node commands.
std::unique_ptr<FleetRunner> start(ApplyStep& s, const Globals& g) {
  auto runner = start_coordinator(s.e);
  FleetStepRequest r{node_command(s.e, g), s.f.overlay, !s.f.patch_root.empty() && s.f.targets.empty(), {}};
  if (!r.as_apply && !s.f.python_root.empty()) throw Error("--python-root applies only with --patch-root (apply)");
  r.change_args = given_flags(*s.sub, {"--ref", "--timeout"});
  if (!r.as_apply) std::erase(r.change_args, std::string("--python-root"));
  s.id = new_fleet_id();
  s.cmds = fleet_step_commands(r, s.id, coordinator_owner());
  record_fleet_id(s.id);
  return runner;
}

int ended(const FleetStepEnd& end, const ApplyStep& s) {
  if (!end.revert_complete) err_line("fleet", finish_rollback_note(s.id));
  return end.exit;
}

void add_step_flags(CLI::App& sub, ApplyStep& s) {
  s.sub = &sub;
  add_change_flags(sub, s.f, Diffs::targets_or_patch);
  sub.add_option("--python-root", s.f.python_root,
                 "Directory .py paths are module names under (default: --patch-root; apply only)");
  add_build_flags(sub, s.f);
  sub.get_option("--owner-pid")->group("");          // the coordinator owns every node's entry
  sub.get_option("--revert-on-failure")->group("");  // the fleet reverts every node itself
  add_engine_flags(sub, s.e);
}

int fleet_apply_command(ApplyStep& s, const Globals& g) {
  if (auto rc = run_in_own_allocation(s.e, g, s.f.overlay)) return *rc;
  StepSignals signals;  // from before the record opens: the waiter under salloc passes signals on from then
  auto runner = start(s, g);
  return ended(run_fleet_apply(*runner, s.cmds, s.id, fleet_output()), s);
}

struct ExecStep : ApplyStep {
  FleetExecRequest x;
};

int fleet_exec_command(ExecStep& s, const Globals& g) {
  if (s.x.cmd.empty()) throw Error("no command: pass it after --, e.g. overlay fleet exec … -- srun python3 bench.py");
  if (s.f.targets.empty() && s.f.patch_root.empty())
    throw Error("pass --target (as add-native) or --patch with --patch-root (as apply)");
  if (auto rc = run_in_own_allocation(s.e, g, s.f.overlay)) return *rc;
  StepSignals signals;  // from before the record opens: the waiter under salloc passes signals on from then
  auto runner = start(s, g);
  // The candidate's tasks get our environment: with the overlay first on PYTHONPATH, its .py files engage.
  if (!s.f.patch_root.empty() && s.f.targets.empty()) s.x.pythonpath = absolute_normal(s.f.overlay).string();
  return ended(run_fleet_exec(*runner, s.cmds, s.id, s.x, fleet_output()), s);
}

// verify, revert, status: the counterpart's flags passed on; one line per node, then the tally.
struct PassOn {
  EngineFlags e;
  CLI::App* sub = nullptr;
  std::string fleet_id;
  std::string counterpart;
  Handler counterpart_flags;  // never run: it owns the storage its flags (passed on to the nodes) are parsed into
};

int pass_on_command(PassOn& p, const Globals& g) {
  if (auto rc = run_in_own_allocation(p.e, g)) return *rc;
  auto runner = start_coordinator(p.e);
  std::vector<std::string> args = given_flags(*p.sub, {"--fleet-id"});
  if (!p.fleet_id.empty()) args.insert(args.end(), {"--patch-id", p.fleet_id, "--missing-ok"});
  return run_fleet_pass_on(*runner, node_command(p.e, g), p.counterpart, args, fleet_output());
}

void add_pass_on(CLI::App& fleet, const Globals& g, const std::shared_ptr<Handler>& chosen, const char* name,
                 const char* counterpart, const char* help, Setup setup) {
  auto p = std::make_shared<PassOn>();
  CLI::App* sub = fleet.add_subcommand(name, help);
  p->sub = sub;
  p->counterpart = counterpart;
  p->counterpart_flags = setup(*sub, g);  // the counterpart's flags, as it has them; it runs on the nodes
  if (std::string(name) == "revert")
    sub->add_option(
           "--fleet-id", p->fleet_id,
           "Revert only this fleet step's entries (its id: patch id on every node); nodes without any are fine")
        ->excludes("--patch-id")
        ->check(fleet_id_problem);
  add_engine_flags(*sub, p->e);
  sub->callback([chosen, p, &g] { *chosen = [p, &g] { return pass_on_command(*p, g); }; });
}

}  // namespace

Handler fleet_command(CLI::App& fleet, const Globals& g) {
  auto chosen = std::make_shared<Handler>();
  fleet.require_subcommand(1);
  auto a = std::make_shared<ApplyStep>();
  CLI::App* apply = fleet.add_subcommand(
      "apply",
      "On every node: add-native (or apply with --patch-root) and verify-native; any failure reverts every node");
  add_step_flags(*apply, *a);
  apply->callback([chosen, a, &g] { *chosen = [a, &g] { return fleet_apply_command(*a, g); }; });
  auto x = std::make_shared<ExecStep>();
  CLI::App* exec = fleet.add_subcommand(
      "exec", "[reference run,] apply on every node, candidate run, revert on every node, clean check");
  add_step_flags(*exec, *x);
  exec->add_flag("--ref", x->x.ref, "Run CMD on the clean fleet first (the reference)");
  exec->add_option("--timeout", x->x.timeout_s, "Stop each run of CMD after SECONDS; exit 124")
      ->check(CLI::PositiveNumber);
  exec->add_option("cmd", x->x.cmd, "The command, after --: run here, directly (typically an srun of its own)");
  exec->positionals_at_end(true);
  exec->callback([chosen, x, &g] { *chosen = [x, &g] { return fleet_exec_command(*x, g); }; });
  add_pass_on(fleet, g, chosen, "verify", "verify-native", "verify-native on every node", verify_native_command);
  add_pass_on(fleet, g, chosen, "revert", "revert", "revert on every node (a step whose coordinator died: --fleet-id)",
              revert_command);
  add_pass_on(fleet, g, chosen, "status", "status", "status on every node: each entry with its fleet id and owner",
              status_command);
  return recording_exit(chosen);
}

}  // namespace overlay::cli
