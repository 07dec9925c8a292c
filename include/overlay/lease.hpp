#pragma once
// A lease: the grant of a scheduler that a fleet step's coordinator runs under (a Slurm job; a
// Kubernetes pod or a Ray job would be others). Opaque to the library: the engine that issued it
// is asked whether it still holds, by name. An engine is one file (overlay/slurm.hpp is Slurm's)
// and one add_lease_engine() call at start-up; the library itself names none.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace overlay {

struct Lease {
  // The engine's name, and its own word for the grant: "slurm" and "42".
  std::string engine;
  std::string id;
  bool empty() const { return id.empty(); }
  bool operator==(const Lease&) const = default;
};

// What the engine says of a lease: still held (pending, running, completing …), ended, or
// unknown (the engine cannot be asked from here, or this binary knows no engine of that name).
enum class LeaseState { held, ended, unknown };

class LeaseEngine {
 public:
  virtual ~LeaseEngine() = default;
  // Its name: a lease's `engine`, and the stem of the manifest key its leases are written under
  // ("slurm" → "slurm_job"). Lower case letters, digits and '-'.
  virtual std::string name() const = 0;
  // The lease this process runs under, "" outside one.
  virtual std::string lease_here() const = 0;
  virtual LeaseState state(const std::string& id) const = 0;
  // "Slurm job 42", for the lines that name an owner.
  virtual std::string describe(const std::string& id) const = 0;
  // The node this process runs on as the engine names it, "" where it does not.
  virtual std::string node_name() const { return {}; }
  // The prefix of the environment variables it sets in its tasks ("SLURM_"): they say where a
  // process runs, never what a build makes.
  virtual std::string env_prefix() const { return {}; }
};

// Adds an engine this binary can ask (the CLI adds each it links, at start-up, before any thread;
// a test adds its own). The first one added is the one a bare lease id in an owner text names:
// the form coordinators have always passed. Adding one of a name already there does nothing.
void add_lease_engine(const LeaseEngine& engine);
const std::vector<const LeaseEngine*>& lease_engines();
const LeaseEngine* find_lease_engine(std::string_view name);

// The first lease an engine says this process runs under; nothing outside every one.
std::optional<Lease> lease_here();
// The engine's word on `lease`: unknown when no engine of its name was added.
LeaseState lease_state(const Lease& lease);
// "Slurm job 42" (its engine's words), or "ENGINE lease ID" for an engine this binary lacks.
std::string describe_lease(const Lease& lease);
// This node as the first engine that names it does, "" when none does.
std::string node_name_here();
// Whether `var` (an environment variable's name) is one an engine sets in its tasks.
bool is_engine_variable(std::string_view var);

// The manifest key a lease is written under: "ENGINE_job". The engine of a key of that form
// (nothing for any other key).
std::string lease_key(const Lease& lease);
std::optional<std::string> engine_of_lease_key(std::string_view key);

// The lease in an owner text ("ID" for the first engine's lease, "ENGINE:ID" for another's) and
// back; nothing when malformed.
std::string lease_text(const Lease& lease);
std::optional<Lease> parse_lease_text(std::string_view text);

}  // namespace overlay
