#pragma once
// Slurm, the fleet's one engine, in one file: its runner (one srun step per phase), its word on a
// job (squeue), and what a process inside an allocation knows of it. A Kubernetes or Ray engine
// would be a file like this one: a FleetRunner, and a way to tell whether a lease (here a job)
// still runs.
#include <string>
#include <vector>

#include "overlay/fleet_runner.hpp"

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

// Slurm's word on a job: running (pending, running, suspended, completing …), ended (completed,
// cancelled, failed, gone from the controller), or unknown (no squeue here, no answer).
enum class JobState { running, ended, unknown };
JobState slurm_job_state(const std::string& job);

// The job this process runs in ($SLURM_JOB_ID), "" outside an allocation.
std::string slurm_job_here();

// The node this process runs on as Slurm names it ($SLURMD_NODENAME), "" outside a job step.
std::string slurm_node_name();

}  // namespace overlay
