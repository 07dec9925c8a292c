// `fleet`: one step on every node of a multi-node deployment, through Slurm. Each subcommand
// takes the flags of its one-node counterpart (registered by the same functions) plus the
// engine's; the flags given are passed on, as given, to `overlay --fleet-node <counterpart> …`
// on every node (src/fleet.cpp runs those and decides; this file parses and prints).
#include <unistd.h>

#include <array>
#include <cstdio>
#include <memory>

#include "overlay/ab_step.hpp"
#include "overlay/error.hpp"
#include "overlay/fleet.hpp"
#include "overlay/owner.hpp"
#include "overlay/process.hpp"
#include "overlay/slurm.hpp"

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {

Handler verify_native_command(CLI::App& sub, const Globals& g);
Handler revert_command(CLI::App& sub, const Globals& g);
Handler status_command(CLI::App& sub, const Globals& g);

namespace {

// As exec's (overlay/ab_step.hpp): a node may still hold the step's entries; reverted but not clean.
constexpr int kRevertIncomplete = to_int(StepExit::revert_incomplete);
constexpr int kNotClean = to_int(StepExit::not_clean);

struct Engine {
  bool slurm = false;
  std::string slurm_args, node_bin;
  std::string record;  // --coordinator-record: where the coordinator under salloc says where it stands
};

const char* const kEngineFlags[] = {"--slurm", "--slurm-args", "--node-bin", "--coordinator-record", "--help"};

void add_engine_flags(CLI::App& sub, Engine& e) {
  auto* s =
      sub.add_flag("--slurm", e.slurm,
                   "Run each phase as one srun step (one task per node) in this Slurm allocation ($SLURM_JOB_ID)");
  sub.add_option("--slurm-args", e.slurm_args,
                 "Get an allocation of its own first: salloc ARGS (e.g. \"-N3 -p gpu\"), the whole step inside it")
      ->excludes(s);
  sub.add_option("--node-bin", e.node_bin, "The overlay binary on the nodes (default: this one's path)");
  sub.add_option("--coordinator-record", e.record, "(set by --slurm-args for the coordinator it starts under salloc)")
      ->group("");
}

// The coordinator's record for the process that started it under salloc (--slurm-args).
CoordinatorRecord& g_record() {
  static CoordinatorRecord record(cli_disk());
  return record;
}

// The flags given on our command line, as words to pass on: every option of `sub` that was
// used, but the engine's and those in `skip`, each value as it was given.
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

std::string self_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("overlay") : p.string();
}

// One phase's command on a node: this binary's path (or --node-bin), one-line JSON.
std::vector<std::string> node_argv(const Engine& e, const Globals& g, const std::string& sub,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> argv = {e.node_bin.empty() ? self_path() : e.node_bin, "--fleet-node", "--lock-timeout",
                                   std::to_string(g.lock_timeout), sub};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// The coordinator under salloc left no exit in its record: say so, name the step, and never 0.
int coordinator_died(const nlohmann::json& rec, const RunResult& r, const Engine& e, const std::string& overlay) {
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
    what += ": the nodes may still hold fleet step " + id + ": run `overlay fleet revert --slurm-args \"" +
            e.slurm_args + "\" --overlay " + overlay + " --fleet-id " + id +
            "` (or gc-stale on each node once its job has ended)";
  j["error"] = what;
  err_line("fleet", what);
  return id.empty() ? kFailed : kRevertIncomplete;
}

// --slurm-args: the same command line again, with --slurm for --slurm-args and the record's path
// right after `fleet VERB` (flags of `fleet` itself may stand between the two words).
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

// This process only waits under salloc, and reports a coordinator that died.
int rerun_under_salloc(const Engine& e, const Globals& g, const std::string& overlay = "") {
  SallocRun run = run_under_salloc(cli_disk(), e.slurm_args,
                                   [&](const std::string& record) { return coordinator_argv(g, record); });
  if (!run.finished()) return coordinator_died(run.record, run.salloc, e, overlay);
  set_json_mode(false);  // the coordinator printed the one document (with --json); this process prints none
  const RunResult& r = run.salloc;
  return r.term_signal != 0 ? 128 + r.term_signal : r.exit_code;  // salloc passes on its command's status
}

std::unique_ptr<FleetRunner> make_runner(const Engine& e) {
  if (!e.slurm)
    throw Error("no engine: pass --slurm (inside a Slurm allocation) or --slurm-args \"ARGS\" (salloc ARGS first)");
  try {
    return std::make_unique<SlurmRunner>();
  } catch (const Error& x) {
    throw Error(std::string("--slurm: ") + x.what() + ": run it under salloc, or pass --slurm-args");
  }
}

void print_phase(const FleetReport& rep, const char* phase) {
  for (const auto& l : phase_lines(rep, phase)) out_line(l);
}

void print_outcome(const FleetReport& rep, const FleetRunner& runner, const std::string& id) {
  for (const auto& l : node_state_lines(rep, runner.nodes())) out_line(l);
  if (rep.interrupted != 0)
    err_line("fleet", "step " + id + " stopped by signal " + std::to_string(rep.interrupted) +
                          (rep.revert_complete ? "; every node rolled back" : ""));
  out_line(outcome_line(rep, id + " on " + runner.describe()));
  if (!rep.revert_complete)
    err_line("fleet", "a node may still hold fleet step " + id +
                          ": when it is back, run `overlay fleet revert --slurm … --fleet-id " + id +
                          "` (or gc-stale there: the step's coordinator is gone)");
}

void put_report(const FleetReport& rep, const FleetRunner& runner, const std::string& id) {
  auto& j = result();
  j["fleet_id"] = id;
  j["engine"] = runner.describe();
  j["node_list"] = runner.nodes();
  j.update(rep.to_json());
}

struct ApplyStep {
  ApplyFlags f;
  Engine e;
  CLI::App* sub = nullptr;
};

// The node commands of one fleet step with id `id` owned by this process.
FleetCommands step_commands(const ApplyStep& s, const Globals& g, const std::string& id) {
  bool as_apply = !s.f.patch_root.empty() && s.f.targets.empty();
  if (!as_apply && !s.f.python_root.empty()) throw Error("--python-root applies only with --patch-root (apply)");
  std::vector<std::string> args = given_flags(*s.sub, {"--ref", "--timeout"});
  if (!as_apply) std::erase(args, std::string("--python-root"));
  Owner me = local_owner(::getpid()).value_or(Owner{::getpid(), 0, {}, {}, this_pid_ns()});
  me.host = this_host();
  me.slurm_job = slurm_job_here();
  args.insert(args.end(), {"--fleet-id", id, "--fleet-owner", owner_text(me)});
  std::vector<std::string> ov = {"--overlay", s.f.overlay};
  FleetCommands c;
  c.apply = node_argv(s.e, g, as_apply ? "apply" : "add-native", args);
  c.verify = node_argv(s.e, g, "verify-native", ov);
  std::vector<std::string> rv = ov;
  rv.insert(rv.end(), {"--patch-id", id, "--missing-ok"});
  c.revert = node_argv(s.e, g, "revert", rv);
  std::vector<std::string> cl = ov;
  cl.insert(cl.end(), {"--check-clean", "--missing-ok"});  // a node that refused before making it
  c.clean = node_argv(s.e, g, "status", cl);
  return c;
}

void add_step_flags(CLI::App& sub, ApplyStep& s) {
  s.sub = &sub;
  add_change_flags(sub, s.f, Diffs::targets_or_patch);
  sub.add_option("--python-root", s.f.python_root,
                 "Directory .py paths are module names under (default: --patch-root; apply only)");
  add_build_flags(sub, s.f);
  sub.get_option("--owner-pid")->group("");          // the coordinator owns every node's entry
  sub.get_option("--revert-on-failure")->group("");  // the fleet reverts every node itself
  add_engine_flags(sub, s.e);
}

// A step's engine, id and node commands, announced.
struct Step {
  std::unique_ptr<FleetRunner> runner;
  std::string id;
  FleetCommands cmds;
};
Step start_step(const ApplyStep& s, const Globals& g, const char* verb) {
  Step st{make_runner(s.e), new_fleet_id(), {}};
  st.cmds = step_commands(s, g, st.id);
  g_record().put("fleet_id", st.id);
  out_line("fleet " + st.id + ": " + verb + " on " + st.runner->describe());
  return st;
}

bool stopped() { return StepSignals::received() != 0; }

// The coordinator: its signals noted from here on (a run in progress passes them on to its
// child, then to the note), and its record opened for the process that started it under salloc.
void begin_coordinator(const Engine& e) {
  if (!e.record.empty()) g_record().open(e.record);
}

int run_fleet_apply(ApplyStep& s, const Globals& g) {
  if (!s.e.slurm_args.empty()) return rerun_under_salloc(s.e, g, s.f.overlay);
  StepSignals signals;
  begin_coordinator(s.e);
  auto [runner, id, cmds] = start_step(s, g, "apply");
  FleetReport rep = fleet_apply(*runner, cmds, stopped);
  if (rep.outcome == "ok" && stopped()) fleet_revert(*runner, cmds, rep);  // stopped during verify: undo it
  conclude_step(rep, StepSignals::received(), false, true);
  print_phase(rep, "apply");
  print_phase(rep, "verify");
  print_phase(rep, "revert");
  put_report(rep, *runner, id);
  print_outcome(rep, *runner, id);
  if (rep.outcome == "ok") return kOk;
  return rep.revert_complete ? kFailed : kRevertIncomplete;
}

struct ExecStep : ApplyStep {
  bool ref = false;
  double timeout = 0;
  std::vector<std::string> cmd;
};

// The caller's own command (typically an srun itself), here on the coordinator.
nlohmann::json run_cmd(const ExecStep& s, const std::string& which, bool with_pythonpath, int& status) {
  RunOptions o;
  o.output = Output::files;
  o.out_fd = ::dup(json_mode() ? 2 : 1), o.err_fd = ::dup(2);
  if (s.timeout > 0) o.timeout_s = s.timeout;
  if (with_pythonpath) {  // srun passes our environment to its tasks: the patched .py files engage
    const char* old = std::getenv("PYTHONPATH");
    o.env_set.push_back("PYTHONPATH=" + absolute_normal(s.f.overlay).string() +
                        (old && *old ? ":" + std::string(old) : std::string()));
  }
  std::fflush(stdout);
  RunResult r = run_process(s.cmd, o);
  status = r.timed_out ? to_int(StepExit::timed_out) : shell_status(r);
  out_line("fleet: " + which + " " + describe(r) + " in " + std::to_string(r.wall_s).substr(0, 6) + " s");
  return {{"argv", s.cmd}, {"status", status}, {"timed_out", r.timed_out}, {"wall_s", r.wall_s}};
}

int run_fleet_exec(ExecStep& s, const Globals& g) {
  if (s.cmd.empty()) throw Error("no command: pass it after --, e.g. overlay fleet exec … -- srun python3 bench.py");
  if (s.f.targets.empty() && s.f.patch_root.empty())
    throw Error("pass --target (as add-native) or --patch with --patch-root (as apply)");
  if (!s.e.slurm_args.empty()) return rerun_under_salloc(s.e, g, s.f.overlay);
  StepSignals signals;
  begin_coordinator(s.e);
  auto [runner, id, cmds] = start_step(s, g, "exec");
  auto& j = result();
  j["ref"] = nullptr, j["cand"] = nullptr;
  int ref_status = 0, cand_status = 0;
  if (s.ref) j["ref"] = run_cmd(s, "ref", false, ref_status);
  FleetReport rep;
  bool applied = false;
  if (!stopped()) {
    rep = fleet_apply(*runner, cmds, stopped);
    applied = rep.outcome == "ok";
  } else {
    rep.outcome = "failed";  // interrupted during the reference: nothing was applied
  }
  if (applied && !stopped())
    j["cand"] = run_cmd(s, "cand", !s.f.patch_root.empty() && s.f.targets.empty(), cand_status);
  if (applied) fleet_revert(*runner, cmds, rep);  // a failed apply was rolled back already
  bool clean = rep.revert_complete && fleet_clean(*runner, cmds, rep);
  conclude_step(rep, StepSignals::received(), true, clean);
  for (const char* phase : {"apply", "verify", "revert", "clean"}) print_phase(rep, phase);
  put_report(rep, *runner, id);
  print_outcome(rep, *runner, id);
  if (!rep.revert_complete) return kRevertIncomplete;
  if (!clean) return kNotClean;
  if (stopped()) return 128 + StepSignals::received();
  if (!applied) return kFailed;
  return cand_status;
}

// verify, revert, status: the counterpart's flags passed on; one line per node, then the tally.
struct PassOn {
  Engine e;
  CLI::App* sub = nullptr;
  std::string fleet_id;
  std::string counterpart;
  // Never called: the counterpart's handler is kept only because it owns the storage its flags
  // (registered on this subcommand, passed on to the nodes) are parsed into.
  Handler keeps_counterpart_flags;
};

int run_pass_on(PassOn& p, const Globals& g) {
  if (!p.e.slurm_args.empty()) return rerun_under_salloc(p.e, g);
  begin_coordinator(p.e);
  auto runner = make_runner(p.e);
  std::vector<std::string> args = given_flags(*p.sub, {"--fleet-id"});
  if (!p.fleet_id.empty()) args.insert(args.end(), {"--patch-id", p.fleet_id, "--missing-ok"});
  std::vector<NodeAnswer> answers = runner->run(node_argv(p.e, g, p.counterpart, args), {});
  PassOnReport rep = tally_pass_on(answers);
  for (const auto& l : pass_on_lines(answers, p.counterpart)) out_line(l);
  auto& j = result();
  j["engine"] = runner->describe();
  j["node_list"] = runner->nodes();
  j.update(rep.to_json());
  out_line(outcome_token(rep.outcome) + " " + p.counterpart + " on " + runner->describe() + "; failed " +
           node_names(rep.failed) + "; unreachable " + node_names(rep.unreachable));
  return rep.exit;
}

void add_pass_on(CLI::App& fleet, const Globals& g, const std::shared_ptr<Handler>& chosen, const char* name,
                 const char* counterpart, const char* help, Setup setup) {
  auto p = std::make_shared<PassOn>();
  CLI::App* sub = fleet.add_subcommand(name, help);
  p->sub = sub;
  p->counterpart = counterpart;
  p->keeps_counterpart_flags = setup(*sub, g);  // the counterpart's flags, as it has them; it runs on the nodes
  if (std::string(name) == "revert")
    sub->add_option(
           "--fleet-id", p->fleet_id,
           "Revert only this fleet step's entries (its id: patch id on every node); nodes without any are fine")
        ->excludes("--patch-id")
        ->check(fleet_id_problem);
  add_engine_flags(*sub, p->e);
  sub->callback([chosen, p, &g] { *chosen = [p, &g] { return run_pass_on(*p, g); }; });
}

}  // namespace

Handler fleet_command(CLI::App& fleet, const Globals& g) {
  auto chosen = std::make_shared<Handler>();
  fleet.require_subcommand(1);
  auto a = std::make_shared<ApplyStep>();
  CLI::App* apply = fleet.add_subcommand(
      "apply",
      "On every node: add-native (or apply with --patch-root) and verify-native; any failure reverts every node");
  add_step_flags(*apply, *a);
  apply->callback([chosen, a, &g] { *chosen = [a, &g] { return run_fleet_apply(*a, g); }; });
  auto x = std::make_shared<ExecStep>();
  CLI::App* exec = fleet.add_subcommand(
      "exec", "[reference run,] apply on every node, candidate run, revert on every node, clean check");
  add_step_flags(*exec, *x);
  exec->add_flag("--ref", x->ref, "Run CMD on the clean fleet first (the reference)");
  exec->add_option("--timeout", x->timeout, "Stop each run of CMD after SECONDS; exit 124")->check(CLI::PositiveNumber);
  exec->add_option("cmd", x->cmd, "The command, after --: run here, directly (typically an srun of its own)");
  exec->positionals_at_end(true);
  exec->callback([chosen, x, &g] { *chosen = [x, &g] { return run_fleet_exec(*x, g); }; });
  add_pass_on(fleet, g, chosen, "verify", "verify-native", "verify-native on every node", verify_native_command);
  add_pass_on(fleet, g, chosen, "revert", "revert", "revert on every node (a step whose coordinator died: --fleet-id)",
              revert_command);
  add_pass_on(fleet, g, chosen, "status", "status", "status on every node: each entry with its fleet id and owner",
              status_command);
  return [chosen] {
    int rc = kFailed;  // what the record says when the handler throws (its error is the document)
    try {
      rc = (*chosen)();
    } catch (...) {
      g_record().finish(rc);
      throw;
    }
    g_record().finish(rc);
    return rc;
  };
}

}  // namespace overlay::cli
