#pragma once
// The coordinator's side of `overlay fleet`: the node commands of one step, and the three things
// a coordinator does with them through a FleetRunner (overlay/fleet.hpp decides; this runs and
// reports): apply a change on every node, the whole A/B step on every node, and a one-node
// command (verify-native, revert, status) passed on to every node. Each says what it does as it
// goes through a StepOutput (overlay/ab_step.hpp): the lines, the notes, the JSON document.
// apply and exec run while the caller holds a StepSignals, made before its coordinator began (a
// signal that came while it started its runner or recorded the step's id is the step's too).
#include <string>
#include <vector>

#include "overlay/ab_step.hpp"
#include "overlay/fleet.hpp"
#include "overlay/owner.hpp"

namespace overlay {

// One change on every node, as its nodes are told to make it.
struct FleetStepRequest {
  // The node binary and its global flags, before the subcommand: {BIN, "--fleet-node", …}.
  std::vector<std::string> node_cmd;
  std::string overlay;
  // A diff with its root and no target: `apply` on every node (its .py files as modules), else
  // `add-native`.
  bool as_apply = false;
  std::vector<std::string> change_args;  // the change's flags, as given, passed on
};

// The owner every node records for a fleet step's entries: this process, with its host and the
// lease it runs under, so a node tells the step's end by the lease, not by a PID it cannot see.
Owner coordinator_owner();

// The commands of step `id` (its patch id on every node), its entries owned by `owner`.
FleetCommands fleet_step_commands(const FleetStepRequest& r, const std::string& id, const Owner& owner);

// How a step ended: its exit status, and whether every node that may hold it was reverted
// (false: the caller says how to finish the rollback).
struct FleetStepEnd {
  int exit = 0;
  bool revert_complete = true;
};

// `fleet apply`: apply and verify-native on every node, all or nothing; a signal (SIGINT,
// SIGTERM, SIGHUP) from here on rolls every node back. Prints each phase's lines, each node's
// state and the verdict naming `id` and the runner; fills the document with the report. Exit: 0
// when every node applied, StepExit::revert_incomplete when a node may still hold the step, else 1.
FleetStepEnd run_fleet_apply(FleetRunner& runner, const FleetCommands& cmds, const std::string& id,
                             const StepOutput& out);

// `fleet exec`: the caller's command (run here, directly: typically an srun of its own) on the
// clean fleet when `ref`, the change applied on every node, the command again (the candidate),
// every node reverted, every node's clean check. Its exit: StepExit's when the step failed
// itself, 128 + a signal that stopped it, else the candidate's status.
struct FleetExecRequest {
  std::vector<std::string> cmd;
  bool ref = false;
  double timeout_s = 0;    // each run of the command; 0: none
  std::string pythonpath;  // put first on the candidate's PYTHONPATH ("": none)
};
FleetStepEnd run_fleet_exec(FleetRunner& runner, const FleetCommands& cmds, const std::string& id,
                            const FleetExecRequest& req, const StepOutput& out);

// verify-native, revert or status (`counterpart`) with `args` on every node (`node_cmd` as in
// FleetStepRequest): one line per node, the tally in the document, the verdict. Returns the
// tally's exit status.
int run_fleet_pass_on(FleetRunner& runner, const std::vector<std::string>& node_cmd, const std::string& counterpart,
                      const std::vector<std::string>& args, const StepOutput& out);

}  // namespace overlay
