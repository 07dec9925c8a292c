#pragma once
// The fleet's engine on the command line: its flags on every fleet subcommand, the runner they
// choose, the coordinator run again in an allocation of its own, and the record it keeps there
// for the process that started it. The one file of the front end that names an engine (the
// engine itself: src/slurm.cpp).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "overlay/fleet_runner.hpp"

#include "commands.hpp"

namespace overlay::cli {

struct EngineFlags {
  bool here = false;     // run each phase in the allocation this process is in
  std::string allocate;  // get an allocation of its own first, with these arguments
  std::string node_bin;  // the overlay binary on the nodes ("": this one's path)
  std::string record;    // where the coordinator run again inside the allocation reports
};

// Adds the engine's flags to a fleet subcommand.
void add_engine_flags(CLI::App& sub, EngineFlags& e);

// The flags given on `sub`'s command line, as words to pass on to the nodes: every option used
// but the engine's and those in `skip`, each value as it was given.
std::vector<std::string> given_flags(const CLI::App& sub, const std::vector<std::string>& skip);

// The node binary and its global flags, before a node's subcommand.
std::vector<std::string> node_command(const EngineFlags& e, const Globals& g);

// When the flags ask for an allocation of its own: this same command line run again inside it as
// the coordinator, this process only waiting; its exit status (a coordinator that died is
// reported, naming the step `overlay` may still hold). Nothing when the step runs here.
std::optional<int> run_in_own_allocation(const EngineFlags& e, const Globals& g, const std::string& overlay = "");

// The coordinator's runner, its record opened when it was started by run_in_own_allocation.
// Throws naming what to pass when the flags choose no engine or it cannot run here.
std::unique_ptr<FleetRunner> start_coordinator(const EngineFlags& e);

// The coordinator's record: the step's id as soon as there is one (nothing unless
// start_coordinator opened the record).
void record_fleet_id(const std::string& id);

// The fleet's handler: the chosen subcommand's, its exit recorded however it ends (1 when it
// throws: its error is the document).
Handler recording_exit(const std::shared_ptr<Handler>& chosen);

// The note for a step a node may still hold: how to finish its rollback.
std::string finish_rollback_note(const std::string& id);

// Adds the lease engines this binary links (overlay/lease.hpp): once, at start-up.
void add_lease_engines();

}  // namespace overlay::cli
