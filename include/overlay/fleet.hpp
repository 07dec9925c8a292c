#pragma once
// One A/B step on every node of a multi-node deployment, all or nothing (`overlay fleet`). The
// coordinator never touches a node's disk: it runs this same binary on every node (one `overlay
// --json --fleet-node …` per node, each on its own install) through a FleetRunner, reads each node's
// one-line JSON document, and decides. A node whose document never arrives may have done
// anything its command does: the coordinator treats it as possibly applied.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/fleet_runner.hpp"

namespace overlay {

// A fleet step's id: "f<epoch seconds>-<8 hex>", also the patch id of its entries on every node.
std::string new_fleet_id();

// The commands a fleet step runs on each node (argv, the node binary first).
struct FleetCommands {
  std::vector<std::string> apply;   // add-native or apply, with --fleet-id and --fleet-owner
  std::vector<std::string> verify;  // verify-native
  std::vector<std::string> revert;  // revert --patch-id ID --missing-ok
  std::vector<std::string> clean;   // status --check-clean
};

// Where each node stands after a step.
enum class NodeState { applied, rolled_back, failed, unreachable, reverted, clean, not_clean };
const char* to_string(NodeState s);

struct FleetReport {
  std::string outcome = "ok";  // ok | partial | failed
  // Per node: its documents per phase ("apply", "verify", "revert", "clean") and its state.
  std::map<std::string, nlohmann::json> phases;
  std::map<std::string, NodeState> state;
  std::vector<std::string> rolled_back, unreachable, failed;
  bool revert_complete = true;            // every node that may hold the step's entries answered its revert
  std::map<std::string, double> phase_s;  // wall seconds of each phase's engine steps, all nodes together
  int interrupted = 0;                    // the signal (SIGINT, SIGTERM, SIGHUP) that stopped the step, 0 when none
  nlohmann::json to_json() const;
};

// The word a fleet's result is printed with, from its outcome: FLEET_OK, FLEET_PARTIAL or
// FLEET_FAILED (one place for every verb).
std::string outcome_token(const std::string& outcome);

// ok when no node went wrong, failed when every node did, partial otherwise.
std::string tally_outcome(std::size_t nodes, std::size_t went_wrong);

// A step's outcome once it has ended: ok only while every node applied, no signal stopped it
// and, when the step reverts (exec), every node was reverted and found clean; failed once a
// signal stopped it, however far it got.
void conclude_step(FleetReport& report, int signal, bool reverts, bool clean);

// verify, revert, status on every node: each node's answer, and the tally.
struct PassOnReport {
  nlohmann::json nodes = nlohmann::json::object();  // per node: {arrived, exit, document} or {arrived, why}
  std::vector<std::string> failed, unreachable;
  std::string outcome;  // ok | partial | failed
  int exit = 0;         // 0, or the first failed node's exit status (1 when a node did not answer)
  nlohmann::json to_json() const;
};
PassOnReport tally_pass_on(const std::vector<NodeAnswer>& answers);

// apply on every node, then verify-native on every node. Any node that fails either, or whose
// answer never arrives, makes the step fail: every node that may have applied is reverted (the
// nodes that answered first, then the others in a step of their own, so a dead node cannot hold
// the live ones' rollback hostage). outcome: ok; partial (some nodes had applied and were rolled
// back); failed (no node applied).
// `stop` (when set) is asked after the apply phase: true (a signal came) rolls back every node.
FleetReport fleet_apply(FleetRunner& runner, const FleetCommands& cmds, const std::function<bool()>& stop = {});

// The lines a step prints, from its report: one per node that answered `phase` ("fleet: NODE
// PHASE ok|exit N: error|NO RESULT (why)"); one per node with where it stands ("NODE  STATE");
// the verdict ("FLEET_OK WHAT; failed A,B; rolled back -; unreachable -").
std::vector<std::string> phase_lines(const FleetReport& report, const char* phase);
std::vector<std::string> node_state_lines(const FleetReport& report, const std::vector<std::string>& nodes);
std::string outcome_line(const FleetReport& report, const std::string& what);

// Node names joined by commas, "-" for none.
std::string node_names(const std::vector<std::string>& nodes);

// One line per node of a verify, revert or status passed on (`counterpart` names it): what its
// document says (FRESH_BUILD_OK, "reverted 1 of 1 entries", "clean; 1 native entry [...]"), and
// its exit and error when it failed, or NO RESULT.
std::vector<std::string> pass_on_lines(const std::vector<NodeAnswer>& answers, const std::string& counterpart);

// revert on every node (answered nodes first, as above); `report` gains each node's answer.
void fleet_revert(FleetRunner& runner, const FleetCommands& cmds, FleetReport& report);

// status --check-clean on every node; true when every node answered clean.
bool fleet_clean(FleetRunner& runner, const FleetCommands& cmds, FleetReport& report);

}  // namespace overlay
