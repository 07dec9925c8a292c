#include "overlay/slurm.hpp"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string comma_joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// "  12: text" -> (12, "text"); false for a line without srun's label.
bool split_label(const std::string& line, std::size_t& task, std::string& text) {
  std::size_t i = line.find_first_not_of(' ');
  std::size_t colon = line.find(": ", i);
  if (i == std::string::npos || colon == std::string::npos || colon == i) return false;
  for (std::size_t k = i; k < colon; ++k)
    if (line[k] < '0' || line[k] > '9') return false;
  task = std::stoul(line.substr(i, colon - i));
  text = line.substr(colon + 2);
  return true;
}

// A task's document: srun cuts a long line into pieces, each labelled, so the pieces from one
// that starts with '{' are joined until they parse. Null when none does.
nlohmann::json document_of(const std::vector<std::string>& pieces) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].empty() || pieces[i].front() != '{') continue;
    std::string text;
    for (std::size_t k = i; k < pieces.size(); ++k) {
      text += pieces[k];
      std::optional<nlohmann::json> doc;
      best_effort("a piece that is not whole JSON yet, or human text: joined with the next and tried again",
                  [&] { doc = parse_json_bytes(text); });
      if (!doc) continue;
      if (doc->is_object() && doc->contains("exit") && (*doc)["exit"].is_number_integer()) return *doc;
      break;
    }
  }
  return nullptr;
}

}  // namespace

std::vector<NodeAnswer> answers_from_labelled(const std::string& out, const std::vector<std::string>& on,
                                              const std::string& why_missing) {
  std::vector<NodeAnswer> answers;
  for (const auto& n : on) answers.push_back({n, false, -1, nullptr, why_missing});
  std::vector<std::vector<std::string>> pieces(on.size());
  std::istringstream lines(out);
  std::string line, text;
  while (std::getline(lines, line)) {
    std::size_t task = 0;
    if (split_label(line, task, text) && task < on.size()) pieces[task].push_back(text);
  }
  for (std::size_t task = 0; task < on.size(); ++task) {
    nlohmann::json doc = document_of(pieces[task]);
    if (doc.is_null()) continue;
    NodeAnswer* a = &answers[task];
    if (doc.contains("node") && doc["node"].is_string())  // trust the node's own word on who it is
      for (auto& b : answers)
        if (b.node == doc["node"].get<std::string>()) a = &b;
    a->arrived = true;
    a->exit = doc["exit"].get<int>();
    a->doc = doc;
    a->why.clear();
  }
  return answers;
}

SlurmRunner::SlurmRunner() : job_(env_or_empty("SLURM_JOB_ID")), nodelist_(env_or_empty("SLURM_JOB_NODELIST")) {
  if (job_.empty() || nodelist_.empty())
    throw Error("not inside a Slurm allocation (no SLURM_JOB_ID/SLURM_JOB_NODELIST)");
  RunOptions o;
  o.output = Output::capture;
  RunResult r = run_process({"scontrol", "show", "hostnames", nodelist_}, o);
  if (!r.ok())
    throw Error("scontrol show hostnames " + nodelist_ + ": " + overlay::describe(r) +
                (r.err.empty() ? "" : ": " + r.err));
  std::istringstream in(r.out);
  for (std::string n; in >> n;) nodes_.push_back(n);
  if (nodes_.empty()) throw Error("Slurm job " + job_ + " has no nodes (" + nodelist_ + ")");
}

std::string SlurmRunner::describe() const {
  return "Slurm job " + job_ + " (" + std::to_string(nodes_.size()) + " node" + (nodes_.size() == 1 ? "" : "s") + ": " +
         nodelist_ + ")";
}

std::vector<NodeAnswer> SlurmRunner::run(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& on_nodes) {
  const std::vector<std::string>& on = on_nodes.empty() ? nodes_ : on_nodes;
  std::string n = std::to_string(on.size());
  // One task per node, each node named (task K on on[K]: Slurm places tasks in its node order,
  // which `scontrol show hostnames` gives; each document names its node anyway). --overlap: a
  // step that ran on a node that died stays "completing" and keeps its CPUs on the live nodes
  // (tried: the rollback's step then waited for them forever). --no-kill: the job outlives it.
  std::vector<std::string> srun = {"srun",          "--jobid=" + job_,      "--nodes=" + n,
                                   "--ntasks=" + n, "--ntasks-per-node=1",  "--nodelist=" + comma_joined(on),
                                   "--label",       "--kill-on-bad-exit=0", "--no-kill",
                                   "--overlap"};
  srun.insert(srun.end(), argv.begin(), argv.end());
  RunOptions o;
  o.output = Output::capture;
  RunResult r = run_process(srun, o);
  if (!r.err.empty()) std::fputs(r.err.c_str(), stderr);
  std::string why = "no result from the node (srun: " + overlay::describe(r) + ")";
  if (!r.exec_error.empty()) why = "srun could not start: " + r.exec_error;
  return answers_from_labelled(r.out, on, why);
}

namespace {

// Slurm's leases are its jobs.
class SlurmLeases : public LeaseEngine {
 public:
  std::string name() const override { return "slurm"; }
  std::string lease_here() const override { return env_or_empty("SLURM_JOB_ID"); }
  LeaseState state(const std::string& job) const override;
  std::string describe(const std::string& job) const override { return "Slurm job " + job; }
  std::string node_name() const override { return env_or_empty("SLURMD_NODENAME"); }
  std::string env_prefix() const override { return "SLURM_"; }
};

}  // namespace

const LeaseEngine& slurm_leases() {
  static const SlurmLeases engine;
  return engine;
}

LeaseState SlurmLeases::state(const std::string& job) const {
  RunOptions o;
  o.output = Output::capture;
  o.timeout_s = 30;
  RunResult r = run_process({"squeue", "--noheader", "--jobs=" + job, "--states=all", "--format=%T"}, o);
  if (!r.exec_error.empty() || r.timed_out || r.term_signal != 0) return LeaseState::unknown;
  // An id the controller no longer knows (purged after MinJobAge) is an ended job.
  if (r.exit_code != 0)
    return r.err.find("Invalid job id") != std::string::npos ? LeaseState::ended : LeaseState::unknown;
  std::string state = r.out.substr(0, r.out.find_first_of(" \n"));
  if (state.empty()) return LeaseState::ended;
  static constexpr std::array<const char*, 9> kLive = {"PENDING",  "RUNNING",  "SUSPENDED", "COMPLETING", "CONFIGURING",
                                                       "RESIZING", "REQUEUED", "SIGNALING", "STAGE_OUT"};
  for (const char* s : kLive)
    if (state == s) return LeaseState::held;
  return LeaseState::ended;
}

void CoordinatorRecord::open(const std::string& path) {
  path_ = path;
  doc_ = {{"pid", ::getpid()}};
  write();
}

void CoordinatorRecord::put(const char* key, const nlohmann::json& v) {
  doc_[key] = v;
  write();
}

void CoordinatorRecord::finish(int exit) {
  if (!path_.empty()) put("exit", exit);
}

void CoordinatorRecord::write() {
  if (!path_.empty()) write_file_atomically(disk_, path_, doc_.dump(), 0600);
}

nlohmann::json CoordinatorRecord::read(Disk& disk, const std::string& path) {
  try {
    return nlohmann::json::parse(read_small_file(disk, path, 1 << 16));
  } catch (const std::exception&) {
    return nullptr;  // not written (yet): the coordinator has not started
  }
}

SallocRun run_under_salloc(Disk& disk, const std::string& salloc_args,
                           const std::function<std::vector<std::string>(const std::string& record)>& command) {
  const char* tmp = std::getenv("TMPDIR");
  std::string record = std::string(tmp && *tmp ? tmp : "/tmp") + "/overlay-fleet-" + std::to_string(::getpid()) + "-" +
                       random_hex(4) + ".json";
  std::vector<std::string> argv = {"salloc", "--no-kill"};
  for (auto& w : split_words(salloc_args)) argv.push_back(w);
  for (auto& w : command(record)) argv.push_back(w);
  RunOptions o;
  o.output = Output::files;
  o.out_fd = ::dup(1);
  o.err_fd = ::dup(2);
  o.on_signal = [&](pid_t salloc, int sig) {
    nlohmann::json rec = CoordinatorRecord::read(disk, record);
    pid_t coordinator = rec.is_object() ? rec.value("pid", 0) : 0;
    ::kill(coordinator > 0 ? coordinator : salloc, sig);
  };
  std::fflush(stdout);
  SallocRun run;
  run.salloc = run_process(argv, o);
  if (!run.salloc.exec_error.empty()) throw Error("salloc could not start: " + run.salloc.exec_error);
  run.record = CoordinatorRecord::read(disk, record);
  best_effort("nothing: a record never written has nothing to remove", [&] { disk.remove(record); });
  return run;
}

}  // namespace overlay
