// `exec`: the agent's whole A/B step in one command. Optionally runs CMD on the clean install
// (the reference), applies (as add-native or apply would: build, verify-native), runs CMD again
// (the candidate) with the Python overlay on PYTHONPATH, and always reverts what it applied —
// after CMD, when the build or verify fails, and on SIGINT/SIGTERM/SIGHUP — then checks the
// install clean. Its entries are owned by this process, so a SIGKILLed exec is reverted by
// gc-stale or by the next exec on the overlay. Runs on one install serialise.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "overlay/apply.hpp"
#include "overlay/engagement.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/liveness.hpp"
#include "overlay/lock.hpp"
#include "overlay/native.hpp"
#include "overlay/owner.hpp"
#include "overlay/process.hpp"
#include "overlay/process_scan.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/status.hpp"
#include "overlay/words.hpp"

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

// Exit codes of exec's own failures (documented in docs/cli.md); CMD's status passes through.
constexpr int kApplyFailed = 1;     // the patch did not apply, the build failed, FRESH_BUILD_FAIL
constexpr int kRevertFailed = 121;  // what exec applied could not all be restored: look now
constexpr int kNotClean = 122;      // reverted, but status --check-clean fails
constexpr int kCmdTimedOut = 124;   // --timeout expired (as timeout(1))

volatile std::sig_atomic_t g_signal = 0;  // SIGINT/SIGTERM/SIGHUP received between runs
void note_signal(int sig) { g_signal = sig; }

// While exec runs, those signals are noted (a run in progress forwards them itself), never fatal:
// whatever arrives, the revert still happens.
class ExecSignals {
 public:
  ExecSignals() {
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~ExecSignals() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  ExecSignals(const ExecSignals&) = delete;
  ExecSignals& operator=(const ExecSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

struct ExecFlags : ApplyFlags {
  bool ref = false, engaged = false, keep_on_success = false;
  double timeout = 0;
  std::vector<std::string> cmd;
};

// The status a shell would report for a run: its exit code, or 128 + the signal that ended it.
int shell_status(const RunResult& r) {
  if (!r.exec_error.empty()) return r.exec_error.find("No such file") != std::string::npos ? 127 : 126;
  return r.term_signal != 0 ? 128 + r.term_signal : r.exit_code;
}

class Exec {
 public:
  Exec(Disk& disk, ExecFlags& f, const Globals& g) : disk_(disk), f_(f), g_(g), overlay_(absolute_normal(f.overlay)) {}
  int run();

 private:
  void recover_dead_runs();
  void refuse_held_targets();
  nlohmann::json run_cmd(const std::string& which, bool judge);
  bool apply();
  bool revert();
  bool check_clean();
  void keep_applied();
  std::vector<std::string> lock_paths() const;
  bool interrupted() const { return g_signal != 0 || signal_ != 0; }

  Disk& disk_;
  ExecFlags& f_;
  const Globals& g_;
  fs::path overlay_;
  Owner me_ = local_owner(::getpid()).value_or(Owner{::getpid(), 0, {}, {}, this_pid_ns()});
  std::string patch_id_, entry_id_;
  int signal_ = 0;  // forwarded to a run of ours
  int cand_status_ = 0;
  bool cand_timed_out_ = false;
  std::optional<Verdict> verdict_;
  std::shared_ptr<InFlight> in_flight_;
};

std::vector<std::string> Exec::lock_paths() const {
  std::vector<std::string> p = {overlay_.string()};
  if (!f_.patch_root.empty()) p.push_back(absolute_normal(f_.patch_root).string());
  for (const auto& t : f_.targets) p.push_back(absolute_normal(t).string());
  if (!f_.build_cwd.empty()) p.push_back(absolute_normal(f_.build_cwd).string());
  return p;
}

// Entries a dead exec (or any dead owner) left on this overlay go first: the install is never
// left patched by a run that is gone.
void Exec::recover_dead_runs() {
  if (disk_.info(overlay_, Follow::yes).type != FileType::directory) return;
  auto m = load_manifest(disk_, overlay_);
  if (!m) return;
  for (const auto& e : m->natives) {
    if (!e.owner || owner_alive(*e.owner)) continue;
    RevertOptions o;
    o.lock_timeout = g_.lock_timeout;
    o.only_entry = e.id;
    RevertReport r = revert_natives(disk_, overlay_, o);
    if (!r.ok())
      throw Error("entry " + e.id + " of a dead run (pid " + std::to_string(e.owner->pid) +
                  ") could not be reverted: " + r.problems.front().path + ": " + r.problems.front().reason);
    err_line("exec",
             "reverted entry " + e.id + " left applied by a dead run (pid " + std::to_string(e.owner->pid) + ")");
  }
}

void Exec::refuse_held_targets() {
  HoldRegistry holds(disk_, HoldRegistry::default_state_dir());
  std::vector<std::string> files(f_.targets.begin(), f_.targets.end());
  files.insert(files.end(), f_.artifacts.begin(), f_.artifacts.end());
  for (const auto& t : files) {
    fs::path p = absolute_normal(t);
    if (disk_.info(p, Follow::yes).exists()) p = disk_.real_path(p);
    std::optional<fs::path> over;
    if (!f_.over.empty()) over = absolute_normal(f_.over);
    if (auto why = holds.why_taken(p, overlay_, over))
      throw Error(*why + "; the reference would not run on the original install");
  }
}

// Runs CMD once, its output kept in O/_logs/exec-PID-WHICH.{out,err} and passed through (to
// stderr only under --json, whose stdout is the one document).
nlohmann::json Exec::run_cmd(const std::string& which, bool judge) {
  fs::path logs = overlay_ / "_logs";
  std::error_code ec;
  fs::create_directories(logs, ec);
  std::string stem = (logs / ("exec-" + std::to_string(me_.pid) + "-" + which)).string();
  int out = ::open((stem + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open((stem + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RunOptions o;
  o.output = Output::files;
  o.out_fd = out, o.err_fd = err;
  o.out_echo_fd = json_mode() ? 2 : 1, o.err_echo_fd = 2;
  if (f_.timeout > 0) o.timeout_s = f_.timeout;
  if (disk_.info(overlay_ / "sitecustomize.py", Follow::no).type == FileType::regular) {
    const char* old = std::getenv("PYTHONPATH");
    o.env_set.push_back("PYTHONPATH=" + overlay_.string() + (old && *old ? ":" + std::string(old) : std::string()));
  }
  if (judge) {
    o.on_tick = [this](pid_t pid) {
      if (verdict_ && verdict_->engaged) return;
      try {
        Manifest m = load_manifest(disk_, overlay_).value_or(Manifest{});
        ProcessScan scan = scan_processes(disk_);
        EngagementReport r = judge_engagement(disk_, m, scan);
        r.python = live_python_uses(disk_, overlay_);
        Verdict v = engagement_verdict(r, scan, {pid}, engagement_scope(m));
        if (scan.find(pid) != nullptr) verdict_ = v;  // exiting meanwhile: keep what it was judged before
      } catch (const std::exception&) {
      }  // a process that exits mid-scan is judged on the next tick
    };
  }
  std::fflush(stdout);
  RunResult r = run_process(f_.cmd, o);
  if (out >= 0) ::close(out);
  if (err >= 0) ::close(err);
  if (r.forwarded_signal) signal_ = r.forwarded_signal;
  nlohmann::json j = {{"argv", f_.cmd},
                      {"status", shell_status(r)},
                      {"exit_code", r.term_signal ? nlohmann::json(nullptr) : nlohmann::json(r.exit_code)},
                      {"signal", r.term_signal ? nlohmann::json(r.term_signal) : nlohmann::json(nullptr)},
                      {"timed_out", r.timed_out},
                      {"wall_s", r.wall_s},
                      {"stdout_log", stem + ".out"},
                      {"stderr_log", stem + ".err"},
                      {"pid", r.pid}};
  if (!r.exec_error.empty()) j["exec_error"] = r.exec_error;
  out_line("exec: " + which + " " + describe(r) + " in " + std::to_string(r.wall_s).substr(0, 6) + " s  (stdout " +
           stem + ".out, stderr " + stem + ".err)");
  if (which == "cand") cand_status_ = shell_status(r), cand_timed_out_ = r.timed_out;
  return j;
}

// As add-native (with --target) or apply (with --patch-root) would; the build and verify-native.
bool Exec::apply() {
  auto& j = result()["apply"];
  f_.owner_pid = me_.pid;
  fill_request(f_, g_);
  try {
    NativePlan plan;
    AppliedEntry entry;
    if (!f_.patch_root.empty() && f_.targets.empty()) {
      ApplyRequest req{f_.req, std::nullopt};
      if (!f_.python_root.empty()) req.python_root = f_.python_root;
      ApplyPlan ap = plan_apply(disk_, req);
      ap.native.op = "exec";
      AppliedPatch applied = apply_patch(disk_, ap);
      patch_id_ = applied.patch_id;
      j["mode"] = "apply";
      j["patch_id"] = patch_id_;
      out_line("apply " + patch_id_ + "  (native=" + std::to_string(ap.native.swaps.size()) +
               " python=" + std::to_string(ap.modules.size()) + ")");
      if (!applied.native) return !interrupted();
      plan = ap.native;
      entry = *applied.native;
    } else {
      plan = plan_add_native(disk_, f_.req);
      plan.op = "exec";
      entry = apply_native(disk_, plan);
      j["mode"] = "add-native";
      out_line("add-native " + plan.swaps.front().target.string() + "  (entry " + entry.id + ")");
    }
    entry_id_ = entry.id;
    in_flight_ = entry.in_flight;  // the overlay stays marked live until this run has reverted
    j["entry"] = entry_id_;
    if (interrupted()) return false;
    if (!plan.build_cmds.empty()) {
      BuildOutcome b = run_native_build(disk_, plan, entry);
      j["build"] = {
          {"ok", b.ok},
          {"log", entry.log_path.string()},
          {"rc", b.result.rc()},
          {"served_from_store", b.served_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.served_from)}};
      if (!b.served_from.empty())
        err_line("exec", "candidate served from the build store (record " + b.served_from +
                             "): the same build of the same inputs ran before; no command ran (--rebuild builds)");
      if (!b.store_note.empty()) err_line("exec", b.store_note);
      if (b.result.forwarded_signal) signal_ = b.result.forwarded_signal;
      if (!b.log_error.empty())
        err_line("exec", "warning: build log " + entry.log_path.string() + " is incomplete (" + b.log_error + ")");
      if (!b.ok) {
        j["error"] = "build failed (" + join_words(b.failed_cmd) + ") rc=" + std::to_string(b.result.rc()) +
                     "; log: " + entry.log_path.string();
        err_line("exec", j["error"]);
        return false;
      }
    }
    VerifyReport v = verify_native(disk_, overlay_);
    std::string token = print_verify_items(v);
    out_line(token);
    j["verify"] = token;
    if (!v.ok()) j["error"] = "FRESH_BUILD_FAIL: an artifact was not rebuilt; the candidate did not run";
    return v.ok() && !interrupted();
  } catch (const LockTimeout&) {
    throw;
  } catch (const std::exception& e) {
    j["error"] = e.what();
    err_line("exec", e.what());
    return false;
  }
}

// Everything this run applied goes: its entries (owned by this process), its patch's Python ones.
bool Exec::revert() {
  auto& j = result()["revert"];
  j = {{"ran", true}, {"problems", nlohmann::json::array()}};
  RevertOptions o;
  o.lock_timeout = g_.lock_timeout;
  bool ok = true;
  auto once = [&](RevertOptions opts) {
    RevertReport r = revert_natives(disk_, overlay_, opts);
    for (const auto& p : r.problems) {
      j["problems"].push_back({{"path", p.path}, {"reason", p.reason}});
      err_line("exec", "cannot restore " + p.path + ": " + p.reason);
    }
    ok = ok && r.ok();
  };
  try {
    if (!patch_id_.empty()) {
      o.only_patch = patch_id_;
      once(o);
    }
    // And any entry recorded as ours (an apply that threw after recording one).
    for (const auto& e : load_manifest(disk_, overlay_).value_or(Manifest{}).natives)
      if (e.owner && e.owner->pid == me_.pid && e.owner->start_ticks == me_.start_ticks) {
        RevertOptions one = o;
        one.only_patch.reset();
        one.only_entry = e.id;
        once(one);
      }
  } catch (const LockTimeout&) {
    throw;
  } catch (const std::exception& e) {
    j["problems"].push_back({{"path", overlay_.string()}, {"reason", e.what()}});
    err_line("exec", std::string("revert failed: ") + e.what());
    ok = false;
  }
  j["ok"] = ok;
  out_line(ok ? "exec: reverted what it applied"
              : "exec: REVERT INCOMPLETE: run `overlay revert --overlay " + overlay_.string() + "` and look");
  return ok;
}

bool Exec::check_clean() {
  StatusReport s = overlay_status(disk_, overlay_);
  nlohmann::json j = {{"checked", true},
                      {"clean", s.clean()},
                      {"not_original", s.not_original()},
                      {"untracked_as_built", s.untracked_as_built()},
                      {"running_reverted", s.running_reverted()}};
  std::string why = s.not_original() > 0
                        ? std::to_string(s.not_original()) + " tracked path(s) not at their original bytes"
                    : s.untracked_as_built() > 0
                        ? std::to_string(s.untracked_as_built()) + " untracked build output(s) may hold patched code"
                    : s.running_reverted() > 0
                        ? std::to_string(s.running_reverted()) + " process(es) still run patched code (restart them)"
                        : std::string();
  if (!why.empty()) j["error"] = why;
  // Over a lower layer (--over), clean means this run's changes are gone: the lower layer's
  // stay, as before the run, and the line says so rather than calling the install pristine.
  std::string lower = f_.over.empty() ? "" : absolute_normal(f_.over).string();
  if (!lower.empty()) j["lower_layer"] = lower;
  result()["clean"] = j;
  out_line(!s.clean()      ? "exec: install NOT clean: " + why
           : lower.empty() ? std::string("exec: install clean")
                           : "exec: install clean of this run's changes (overlay " + lower +
                                 " under them stays applied, as before the run)");
  return s.clean();
}

// --keep-on-success: the patch stays, no longer owned by this process (gc-stale leaves it).
void Exec::keep_applied() {
  OverlayLock lock(overlay_, g_.lock_timeout);
  Manifest m = load_manifest(disk_, overlay_).value_or(Manifest{});
  for (auto& e : m.natives)
    if (e.owner && e.owner->pid == me_.pid) e.owner.reset(), e.kept = true;
  save_manifest(disk_, overlay_, m);
  result()["revert"] = {{"ran", false}, {"kept", true}};
  out_line("exec: kept the patch applied (--keep-on-success); undo it with `overlay revert --overlay " +
           overlay_.string() + "`");
}

int Exec::run() {
  if (f_.cmd.empty()) throw Error("no command: pass it after --, e.g. overlay exec … -- python3 bench.py");
  if (f_.targets.empty() && f_.patch_root.empty())
    throw Error("pass --target (as add-native) or --patch with --patch-root (as apply)");
  require_pythonpath_safe(overlay_);  // CMD runs with the overlay on PYTHONPATH
  ExecSignals signals;
  g_signal = 0;
  auto locks = lock_install_paths(HoldRegistry::default_state_dir(), lock_paths(), g_.lock_timeout);
  recover_dead_runs();
  auto& j = result();
  j["overlay"] = overlay_.string();
  j["ref"] = nullptr, j["cand"] = nullptr, j["engaged"] = nullptr, j["clean"] = nullptr;
  // The reference runs on the clean install (with --over, on the install as LOWER leaves it), or
  // not at all: a target another overlay holds would make it run that overlay's candidate (and
  // our apply would be refused anyway).
  refuse_held_targets();
  out_line("OVERLAY_DIR=" + overlay_.string());
  if (f_.ref) j["ref"] = run_cmd("ref", false);
  bool applied = !interrupted() && apply();
  if (applied && !interrupted()) {
    j["cand"] = run_cmd("cand", f_.engaged);
    if (f_.engaged) {
      Verdict v = verdict_.value_or(
          Verdict{false, "the candidate exited before it could be judged (it is sampled every 0.25 s while it runs)"});
      j["engaged"] = {{"engaged", v.engaged}, {"why", v.why}};
      out_line((v.engaged ? "ENGAGED " : "NOT_ENGAGED ") + v.why);
    }
  }
  bool keep = f_.keep_on_success && applied && !interrupted() && cand_status_ == 0;
  if (keep) {
    keep_applied();
    return kOk;
  }
  if (!revert()) return kRevertFailed;
  if (!check_clean()) return kNotClean;
  int sig = signal_ ? signal_ : g_signal;
  if (sig) {
    j["error"] = std::string("interrupted by signal ") + std::to_string(sig) + "; reverted";
    return 128 + sig;
  }
  if (!applied) return kApplyFailed;
  if (cand_timed_out_) return kCmdTimedOut;
  return cand_status_;
}

}  // namespace

// add-native's flags (a diff with --patch-root is routed per file, as apply routes it), apply's
// --python-root, the build's flags, and exec's own.
Handler exec_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<ExecFlags>();
  add_change_flags(sub, *f, Diffs::targets_or_patch);
  sub.add_option("--python-root", f->python_root, "Directory .py paths are module names under (default: --patch-root)");
  add_build_flags(sub, *f);
  // exec owns its entries and always reverts: these two of add-native's flags mean nothing here.
  sub.get_option("--owner-pid")->group("");
  sub.get_option("--revert-on-failure")->group("");
  sub.add_flag("--ref", f->ref, "Run CMD on the clean install first (the reference), then apply and run it again");
  sub.add_flag("--engaged", f->engaged,
               "While the candidate runs, check that it (or a child) runs the patched code: ENGAGED / NOT_ENGAGED");
  sub.add_flag("--keep-on-success", f->keep_on_success,
               "Leave the patch applied when the candidate exits 0 (owner cleared; gc-stale leaves it)");
  sub.add_option("--timeout", f->timeout, "Stop each run of CMD after SECONDS (SIGTERM, SIGKILL 5 s later); exit 124")
      ->check(CLI::PositiveNumber);
  sub.add_option("cmd", f->cmd, "The command, after --: run directly, never through a shell");
  sub.positionals_at_end(true);
  return [f, &g] { return Exec(cli_disk(), *f, g).run(); };
}

}  // namespace overlay::cli
