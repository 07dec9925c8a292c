// Slurm on the command line: --slurm, --slurm-args (salloc, then the coordinator inside it) and
// --node-bin. The engine is src/slurm.cpp; the fleet's verbs are src/cli/fleet_command.cpp.
#include "fleet_engine.hpp"

#include <array>

#include "overlay/ab_step.hpp"
#include "overlay/error.hpp"
#include "overlay/slurm.hpp"

#include "output.hpp"

namespace overlay::cli {
namespace {

const char* const kEngineFlags[] = {"--slurm", "--slurm-args", "--node-bin", "--coordinator-record", "--help"};

CoordinatorRecord& coordinator_record() {
  static CoordinatorRecord record(cli_disk());
  return record;
}

std::string self_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("overlay") : p.string();
}

// The coordinator under salloc left no exit in its record: say so, name the step, and never 0.
int coordinator_died(const nlohmann::json& rec, const RunResult& r, const EngineFlags& e, const std::string& overlay) {
  set_json_mode(true);
  auto& j = result();
  std::string salloc = "salloc " + describe(r);
  if (rec.is_null()) {  // it never ran: no allocation, or salloc itself failed
    j["error"] = salloc + " before the coordinator started";
    err_line("fleet", j["error"]);
    return r.exit_code > 0 ? r.exit_code : kFailed;
  }
  std::string pid = std::to_string(rec.value("pid", 0));
  std::string id = rec.value("fleet_id", std::string());
  j["coordinator_pid"] = rec.value("pid", 0);
  j["fleet_id"] = id.empty() ? nlohmann::json(nullptr) : nlohmann::json(id);
  j["outcome"] = "failed";
  j["revert_complete"] = id.empty();
  std::string what = "the coordinator under salloc (pid " + pid +
                     ") ended without a result (killed, e.g. kill -9 or the OOM killer; " + salloc + ")";
  if (!id.empty() && !overlay.empty())
    what += ": the nodes may still hold fleet step " + id + ": run `overlay fleet revert --slurm-args \"" + e.allocate +
            "\" --overlay " + overlay + " --fleet-id " + id + "` (or gc-stale on each node once its job has ended)";
  j["error"] = what;
  err_line("fleet", what);
  return id.empty() ? kFailed : to_int(StepExit::revert_incomplete);
}

// The same command line again, with --slurm for --slurm-args and the record's path right after
// `fleet VERB` (flags of `fleet` itself may stand between the two words).
std::vector<std::string> coordinator_argv(const Globals& g, const std::string& record) {
  std::vector<std::string> argv = {self_path()};
  bool after_fleet = false, placed = false;
  for (std::size_t i = 1; i < g.argv.size(); ++i) {
    const std::string& a = g.argv[i];
    if (a == "--") {
      argv.insert(argv.end(), g.argv.begin() + static_cast<long>(i), g.argv.end());
      break;
    }
    if (a == "--slurm-args" || a.starts_with("--slurm-args=")) {
      if (a == "--slurm-args") ++i;  // its value goes with it
      argv.push_back("--slurm");
    } else {
      argv.push_back(a);
    }
    static constexpr std::array<std::string_view, 5> kVerbs = {"apply", "exec", "verify", "revert", "status"};
    if (after_fleet && !placed && std::find(kVerbs.begin(), kVerbs.end(), a) != kVerbs.end()) {
      argv.insert(argv.end(), {"--coordinator-record", record});
      placed = true;
    }
    after_fleet = after_fleet || a == "fleet";
  }
  return argv;
}

}  // namespace

void add_engine_flags(CLI::App& sub, EngineFlags& e) {
  auto* s =
      sub.add_flag("--slurm", e.here,
                   "Run each phase as one srun step (one task per node) in this Slurm allocation ($SLURM_JOB_ID)");
  sub.add_option("--slurm-args", e.allocate,
                 "Get an allocation of its own first: salloc ARGS (e.g. \"-N3 -p gpu\"), the whole step inside it")
      ->excludes(s);
  sub.add_option("--node-bin", e.node_bin, "The overlay binary on the nodes (default: this one's path)");
  sub.add_option("--coordinator-record", e.record, "(set by --slurm-args for the coordinator it starts under salloc)")
      ->group("");
}

std::vector<std::string> given_flags(const CLI::App& sub, const std::vector<std::string>& skip) {
  std::vector<std::string> out;
  for (const CLI::Option* o : sub.get_options()) {
    if (o->count() == 0 || (o->get_lnames().empty() && o->get_snames().empty())) continue;
    std::string name = o->get_lnames().empty() ? "-" + o->get_snames().front() : "--" + o->get_lnames().front();
    if (std::find(std::begin(kEngineFlags), std::end(kEngineFlags), name) != std::end(kEngineFlags)) continue;
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (o->get_expected_max() == 0) {  // a flag: its name, as often as it was given
      for (std::size_t i = 0; i < o->count(); ++i) out.push_back(name);
      continue;
    }
    for (const auto& v : o->results()) out.insert(out.end(), {name, v});
  }
  return out;
}

std::vector<std::string> node_command(const EngineFlags& e, const Globals& g) {
  return {e.node_bin.empty() ? self_path() : e.node_bin, "--fleet-node", "--lock-timeout",
          std::to_string(g.lock_timeout)};
}

std::optional<int> run_in_own_allocation(const EngineFlags& e, const Globals& g, const std::string& overlay) {
  if (e.allocate.empty()) return std::nullopt;
  SallocRun run =
      run_under_salloc(cli_disk(), e.allocate, [&](const std::string& record) { return coordinator_argv(g, record); });
  if (!run.finished()) return coordinator_died(run.record, run.salloc, e, overlay);
  set_json_mode(false);  // the coordinator printed the one document (with --json); this process prints none
  const RunResult& r = run.salloc;
  return r.term_signal != 0 ? 128 + r.term_signal : r.exit_code;  // salloc passes on its command's status
}

std::unique_ptr<FleetRunner> start_coordinator(const EngineFlags& e) {
  if (!e.record.empty()) coordinator_record().open(e.record);
  if (!e.here)
    throw Error("no engine: pass --slurm (inside a Slurm allocation) or --slurm-args \"ARGS\" (salloc ARGS first)");
  try {
    return std::make_unique<SlurmRunner>();
  } catch (const Error& x) {
    throw Error(std::string("--slurm: ") + x.what() + ": run it under salloc, or pass --slurm-args");
  }
}

void record_fleet_id(const std::string& id) { coordinator_record().put("fleet_id", id); }

Handler recording_exit(const std::shared_ptr<Handler>& chosen) {
  return [chosen] {
    int rc = kFailed;
    try {
      rc = (*chosen)();
    } catch (...) {
      coordinator_record().finish(rc);
      throw;
    }
    coordinator_record().finish(rc);
    return rc;
  };
}

std::string finish_rollback_note(const std::string& id) {
  return "a node may still hold fleet step " + id +
         ": when it is back, run `overlay fleet revert --slurm … --fleet-id " + id +
         "` (or gc-stale there: the step's coordinator is gone)";
}

void add_lease_engines() { add_lease_engine(slurm_leases()); }

}  // namespace overlay::cli
