#include "overlay/liveness.hpp"

#include <array>

#include "overlay/process.hpp"

namespace overlay {

JobState slurm_job_state(const std::string& job) {
  RunOptions o;
  o.output = Output::capture;
  o.timeout_s = 30;
  RunResult r = run_process({"squeue", "--noheader", "--jobs=" + job, "--states=all", "--format=%T"}, o);
  if (!r.exec_error.empty() || r.timed_out || r.term_signal != 0) return JobState::unknown;
  // An id the controller no longer knows (purged after MinJobAge) is an ended job.
  if (r.exit_code != 0) return r.err.find("Invalid job id") != std::string::npos ? JobState::ended : JobState::unknown;
  std::string state = r.out.substr(0, r.out.find_first_of(" \n"));
  if (state.empty()) return JobState::ended;
  static constexpr std::array<const char*, 9> kLive = {"PENDING",  "RUNNING",  "SUSPENDED", "COMPLETING", "CONFIGURING",
                                                       "RESIZING", "REQUEUED", "SIGNALING", "STAGE_OUT"};
  for (const char* s : kLive)
    if (state == s) return JobState::running;
  return JobState::ended;
}

Liveness owner_liveness(const Owner& o) {
  // A fleet step's entries live as long as its job, on every node alike: the coordinator's own
  // host (a batch script runs on the job's first node) must not revert while the others keep it.
  if (!o.slurm_job.empty()) {
    JobState s = slurm_job_state(o.slurm_job);
    if (s != JobState::unknown) return s == JobState::running ? Liveness::alive : Liveness::gone;
  }
  if (o.host.empty() || o.host == this_host()) return local_owner_liveness(o);
  return Liveness::unseen;  // another host, and nothing to ask: never revert on a guess
}

bool owner_alive(const Owner& o) { return owner_liveness(o) != Liveness::gone; }

std::string describe_owner(const Owner& o) {
  std::string pid = "pid " + std::to_string(o.pid);
  if (o.pid_ns != 0 && o.pid_ns != this_pid_ns()) pid += " of PID namespace pid:[" + std::to_string(o.pid_ns) + "]";
  if (o.host.empty()) return pid;
  return "coordinator " + pid + " on " + o.host + (o.slurm_job.empty() ? "" : " (Slurm job " + o.slurm_job + ")");
}

}  // namespace overlay
