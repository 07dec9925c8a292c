#pragma once
// The fan-out a fleet step runs through (overlay/fleet.hpp): one argv on each of some nodes, each
// node's answer back. An engine is one class behind this (overlay/slurm.hpp is Slurm's); the test
// runner of tests/unit/fleet_test.cpp is another.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace overlay {

// What one node answered to one command.
struct NodeAnswer {
  std::string node;
  bool arrived = false;  // its document came back whole
  int exit = -1;         // the node's exit status, from its document
  nlohmann::json doc;    // the document (null when it did not arrive)
  std::string why;       // when it did not arrive: what the engine said
  bool ok() const { return arrived && exit == 0; }
};

// The fan-out: run one argv once on each of some nodes, return each node's answer. The engine
// the cluster already has does the work (Slurm here; docs/design.md says where Ray or
// Kubernetes would plug in). No retries, no daemon: one call is one step of the engine.
class FleetRunner {
 public:
  virtual ~FleetRunner() = default;
  // Every node of the fleet, in the engine's order.
  virtual const std::vector<std::string>& nodes() const = 0;
  // Runs argv on each node of `on` (all of nodes() when empty); one answer per node asked.
  virtual std::vector<NodeAnswer> run(const std::vector<std::string>& argv, const std::vector<std::string>& on) = 0;
  // "Slurm job 42 (3 nodes: node[1-3])", for the lines that name the fleet.
  virtual std::string describe() const = 0;
};

}  // namespace overlay
