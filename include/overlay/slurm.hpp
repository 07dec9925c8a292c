#pragma once
// Slurm, the fleet's one engine, in one file: its runner (one srun step per phase), its word on a
// job (its leases: squeue), and what a process inside an allocation knows of it. A Kubernetes or
// Ray engine would be a file like this one: a FleetRunner, and a LeaseEngine.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/fleet_runner.hpp"
#include "overlay/lease.hpp"
#include "overlay/process.hpp"

namespace overlay {

// Slurm: each call is one `srun --ntasks-per-node=1 --label` step inside the job the process
// runs in ($SLURM_JOB_ID, $SLURM_JOB_NODELIST expanded by `scontrol show hostnames`). A node's
// answer is its labelled stdout line that parses as a document with "exit".
class SlurmRunner : public FleetRunner {
 public:
  // Throws Error naming what is missing when not inside a Slurm allocation.
  SlurmRunner();
  const std::vector<std::string>& nodes() const override { return nodes_; }
  std::vector<NodeAnswer> run(const std::vector<std::string>& argv, const std::vector<std::string>& on) override;
  std::string describe() const override;

 private:
  std::string job_, nodelist_;
  std::vector<std::string> nodes_;
};

// The answers of one `srun --label` step: task K's last stdout line that parses as a JSON object
// with "exit" is the answer of on[K] (or of the node its "node" key names). Exposed for tests.
std::vector<NodeAnswer> answers_from_labelled(const std::string& out, const std::vector<std::string>& on,
                                              const std::string& why_missing);

// Slurm's leases: a lease is a job ("slurm_job" in a manifest's owner). Here: $SLURM_JOB_ID, ""
// outside an allocation; the node: $SLURMD_NODENAME. Its word on a job (squeue): held (pending,
// running, suspended, completing …), ended (completed, cancelled, failed, gone from the
// controller), or unknown (no squeue here, no answer). Its tasks' variables: SLURM_*.
const LeaseEngine& slurm_leases();

// What a coordinator started under salloc writes for the process that started it: its pid as
// soon as it runs (signals go to it, not to salloc, which would release the allocation under the
// rollback), the step's id once it has one, and its exit status when it ends. A record that never
// gets its exit is a coordinator that died (kill -9, the OOM killer): salloc still exits 0 then,
// so the record is the only word on it. Writes nothing until opened.
class CoordinatorRecord {
 public:
  explicit CoordinatorRecord(Disk& disk) : disk_(disk) {}
  void open(const std::string& path);
  void put(const char* key, const nlohmann::json& v);
  void finish(int exit);
  // The record at path: null when it was not written (the coordinator never started).
  static nlohmann::json read(Disk& disk, const std::string& path);

 private:
  void write();
  Disk& disk_;
  std::string path_;
  nlohmann::json doc_;
};

// A coordinator run in an allocation of its own: `salloc --no-kill ARGS COMMAND`, where COMMAND
// is what `command(record)` returns for the path of a fresh record. This process only waits,
// passing SIGINT, SIGTERM and SIGHUP to the coordinator the record names (to salloc before it
// runs: salloc then gives up the request). Throws when salloc cannot be started.
struct SallocRun {
  RunResult salloc;
  nlohmann::json record;  // the coordinator's record, null when it never ran
  // The coordinator recorded its exit: salloc's status is its own (salloc passes it on).
  bool finished() const { return record.is_object() && record.contains("exit") && record["exit"].is_number_integer(); }
};
SallocRun run_under_salloc(Disk& disk, const std::string& salloc_args,
                           const std::function<std::vector<std::string>(const std::string& record)>& command);

}  // namespace overlay
