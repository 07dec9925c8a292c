#include "overlay/ab_step.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include <spdlog/spdlog.h>

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
#include "overlay/process_scan.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/receipts.hpp"
#include "overlay/stack.hpp"
#include "overlay/status.hpp"
#include "overlay/words.hpp"

namespace overlay {

int shell_status(const RunResult& r) {
  if (!r.exec_error.empty()) return r.exec_error.find("No such file") != std::string::npos ? 127 : 126;
  return r.term_signal != 0 ? 128 + r.term_signal : r.exit_code;
}

namespace {

volatile std::sig_atomic_t g_step_signal = 0;
void note_step_signal(int sig) { g_step_signal = sig; }
constexpr int kStepSignals[3] = {SIGINT, SIGTERM, SIGHUP};

}  // namespace

struct StepSignals::Saved {
  struct sigaction old[3]{};
};

StepSignals::StepSignals() : saved_(new Saved) {
  g_step_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = note_step_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) ::sigaction(kStepSignals[i], &sa, &saved_->old[i]);
}

StepSignals::~StepSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kStepSignals[i], &saved_->old[i], nullptr);
  delete saved_;
}

int StepSignals::received() { return g_step_signal; }

namespace {

class AbStep {
 public:
  AbStep(Disk& disk, AbStepRequest& req, const StepOutput& out)
      : disk_(disk), req_(req), out_(out), overlay_(absolute_normal(req.change.overlay)) {}
  int run();

 private:
  void recover_dead_runs();
  void refuse_held_targets();
  nlohmann::json run_cmd(const std::string& which, bool judge);
  void judge_tick(pid_t pid);
  std::optional<ReceiptCollector> receipt_collector(const std::string& which);
  void report_receipts();
  bool apply();
  bool build(const NativePlan& plan, const AppliedEntry& entry);
  bool revert();
  bool check_clean();
  void keep_applied();
  std::vector<std::string> lock_paths() const;
  fs::path state_dir() const {
    return req_.change.state_dir.empty() ? HoldRegistry::default_state_dir() : req_.change.state_dir;
  }
  RevertOptions revert_options() const {
    RevertOptions o;
    o.lock_timeout = req_.change.lock_timeout;
    o.state_dir = req_.change.state_dir;
    return o;
  }
  void note(const std::string& s) const { out_.note(s); }
  bool interrupted() const { return StepSignals::received() != 0 || signal_ != 0; }

  Disk& disk_;
  AbStepRequest& req_;
  const StepOutput& out_;
  fs::path overlay_;
  Owner me_ = local_owner(::getpid()).value_or(Owner{::getpid(), 0, {}, {}, this_pid_ns()});
  std::string patch_id_, entry_id_;
  int signal_ = 0;  // forwarded to a run of ours
  int cand_status_ = 0;
  bool cand_timed_out_ = false;
  std::optional<Verdict> verdict_;
  std::map<std::string, RunReceipts> receipts_;  // by run: "ref", "cand"
  std::shared_ptr<InFlight> in_flight_;
};

std::vector<std::string> AbStep::lock_paths() const {
  const AddNativeRequest& c = req_.change;
  std::vector<std::string> p = {overlay_.string()};
  if (c.patch_root) p.push_back(absolute_normal(*c.patch_root).string());
  for (const auto& t : c.targets) p.push_back(absolute_normal(t).string());
  if (c.build_cwd) p.push_back(absolute_normal(*c.build_cwd).string());
  return p;
}

// Entries a dead step (or any dead owner) left on this overlay go first: the install is never
// left patched by a run that is gone.
void AbStep::recover_dead_runs() {
  if (disk_.info(overlay_, Follow::yes).type != FileType::directory) return;
  auto m = load_manifest(disk_, overlay_);
  if (!m) return;
  for (const auto& e : m->natives) {
    if (!e.owner || owner_alive(*e.owner)) continue;
    RevertOptions o = revert_options();
    o.only_entry = e.id;
    RevertReport r = revert_natives(disk_, overlay_, o);
    if (!r.ok())
      throw Error("entry " + e.id + " of a dead run (pid " + std::to_string(e.owner->pid) +
                  ") could not be reverted: " + r.problems.front().path + ": " + r.problems.front().reason);
    note("reverted entry " + e.id + " left applied by a dead run (pid " + std::to_string(e.owner->pid) + ")");
  }
}

void AbStep::refuse_held_targets() {
  HoldRegistry holds(disk_, state_dir());
  std::vector<fs::path> files(req_.change.targets.begin(), req_.change.targets.end());
  files.insert(files.end(), req_.change.artifacts.begin(), req_.change.artifacts.end());
  std::optional<fs::path> over;
  if (req_.change.over) over = absolute_normal(*req_.change.over);
  std::vector<fs::path> real;
  for (const auto& t : files) {
    fs::path p = absolute_normal(t);
    real.push_back(disk_.info(p, Follow::yes).exists() ? disk_.real_path(p) : p);
  }
  ManifestCache records(disk_);
  if (auto why = held_by_two(holds, records, real, overlay_))
    throw Error(*why + "; the reference would not run on the original install");
  for (const auto& p : real) {
    if (auto why = why_taken(holds, records, p, overlay_, over))
      throw Error(*why + "; the reference would not run on the original install");
  }
}

// Runs the command once, its output kept in O/_logs/exec-PID-WHICH.{out,err} (written through
// Disk, as every file of ours) and passed on to the echo descriptors as it comes.
nlohmann::json AbStep::run_cmd(const std::string& which, bool judge) {
  fs::path logs = overlay_ / "_logs";
  std::string stem = (logs / ("exec-" + std::to_string(me_.pid) + "-" + which)).string();
  // A log that cannot be made costs the log, never the run or the revert after it.
  auto open_log = [&](const std::string& path) -> std::unique_ptr<WriteHandle> {
    try {
      make_dirs(disk_, logs);
      return disk_.create(path, 0644, CreateMode::truncate);
    } catch (const std::exception& e) {
      note("warning: no log " + path + " (" + e.what() + ")");
      return nullptr;
    }
  };
  std::unique_ptr<WriteHandle> out = open_log(stem + ".out"), err = open_log(stem + ".err");
  RunOptions o;
  o.output = Output::files;
  o.out_log = out.get();
  o.err_log = err.get();
  o.out_echo_fd = out_.echo_out;
  o.err_echo_fd = out_.echo_err;
  if (req_.timeout_s > 0) o.timeout_s = req_.timeout_s;
  if (disk_.info(overlay_ / "sitecustomize.py", Follow::no).type == FileType::regular) {
    const char* old = std::getenv("PYTHONPATH");
    o.env_set.push_back("PYTHONPATH=" + overlay_.string() + (old && *old ? ":" + std::string(old) : std::string()));
  }
  std::optional<ReceiptCollector> receipts = receipt_collector(which);
  if (receipts) o.env_set.push_back(receipts->env());
  if (judge || receipts) {
    o.on_tick = [this, judge, &receipts](pid_t pid) {
      if (receipts) receipts->sample(pid);
      if (judge) judge_tick(pid);
    };
  }
  std::fflush(stdout);
  RunResult r = run_process(req_.cmd, o);
  if (receipts) receipts_[which] = receipts->finish();
  for (auto* h : {out.get(), err.get()}) {
    try {
      if (h != nullptr) h->close();
    } catch (const std::exception& e) {
      if (r.log_error.empty()) r.log_error = e.what();
    }
  }
  if (!r.log_error.empty()) note("warning: the log of the " + which + " run is incomplete (" + r.log_error + ")");
  if (r.forwarded_signal) signal_ = r.forwarded_signal;
  nlohmann::json j = {{"argv", req_.cmd},
                      {"status", shell_status(r)},
                      {"exit_code", r.term_signal ? nlohmann::json(nullptr) : nlohmann::json(r.exit_code)},
                      {"signal", r.term_signal ? nlohmann::json(r.term_signal) : nlohmann::json(nullptr)},
                      {"timed_out", r.timed_out},
                      {"wall_s", r.wall_s},
                      {"stdout_log", stem + ".out"},
                      {"stderr_log", stem + ".err"},
                      {"pid", r.pid}};
  if (!r.exec_error.empty()) j["exec_error"] = r.exec_error;
  out_.line("exec: " + which + " " + describe(r) + " in " + std::to_string(r.wall_s).substr(0, 6) + " s  (stdout " +
            stem + ".out, stderr " + stem + ".err)");
  if (which == "cand") {
    cand_status_ = shell_status(r);
    cand_timed_out_ = r.timed_out;
  }
  return j;
}

// As add-native (with a target) or apply (a diff with its root) would; the build and verify-native.
bool AbStep::apply() {
  auto& j = out_.doc["apply"];
  req_.change.owner_pid = me_.pid;
  try {
    NativePlan plan;
    AppliedEntry entry;
    if (req_.as_apply) {
      ApplyRequest ar{req_.change, req_.python_root};
      ApplyPlan ap = plan_apply(disk_, ar);
      ap.native.op = "exec";
      AppliedPatch applied = apply_patch(disk_, ap);
      patch_id_ = applied.patch_id;
      j["mode"] = "apply";
      j["patch_id"] = patch_id_;
      out_.line("apply " + patch_id_ + "  (native=" + std::to_string(ap.native.swaps.size()) +
                " python=" + std::to_string(ap.modules.size()) + ")");
      if (!applied.native) return !interrupted();
      plan = ap.native;
      entry = *applied.native;
    } else {
      plan = plan_add_native(disk_, req_.change);
      plan.op = "exec";
      entry = apply_native(disk_, plan);
      j["mode"] = "add-native";
      out_.line("add-native " + plan.swaps.front().target.string() + "  (entry " + entry.id + ")");
    }
    entry_id_ = entry.id;
    in_flight_ = entry.in_flight;  // the overlay stays marked live until this run has reverted
    j["entry"] = entry_id_;
    if (interrupted() || !build(plan, entry)) return false;
    VerifyReport v = verify_native(disk_, overlay_);
    std::vector<std::string> lines = verify_lines(v);
    for (const auto& l : lines) out_.line(l);
    j["verify"] = lines.back();
    if (!v.ok()) j["error"] = "FRESH_BUILD_FAIL: an artifact was not rebuilt; the candidate did not run";
    return v.ok() && !interrupted();
  } catch (const LockTimeout&) {
    throw;
  } catch (const std::exception& e) {
    j["error"] = e.what();
    note(e.what());
    return false;
  }
}

bool AbStep::build(const NativePlan& plan, const AppliedEntry& entry) {
  if (plan.build_cmds.empty()) return true;
  auto& j = out_.doc["apply"];
  BuildOutcome b = run_native_build(disk_, plan, entry);
  j["build"] = b.to_json(entry.log_path);
  note("candidate " + store_line(b));
  for (const auto& u : b.unobserved) note("warning: the build's trace is incomplete: " + u);
  if (!b.store_note.empty()) note(b.store_note);
  if (b.result.forwarded_signal) signal_ = b.result.forwarded_signal;
  if (!b.log_error.empty())
    note("warning: build log " + entry.log_path.string() + " is incomplete (" + b.log_error + ")");
  if (b.ok) return true;
  j["error"] = "build failed (" + join_words(b.failed_cmd) + ") rc=" + std::to_string(b.result.rc()) +
               "; log: " + entry.log_path.string();
  note(j["error"]);
  return false;
}

// Everything this run applied goes: its entries (owned by this process), its patch's Python ones.
bool AbStep::revert() {
  auto& j = out_.doc["revert"];
  j = {{"ran", true}, {"problems", nlohmann::json::array()}};
  RevertOptions o = revert_options();
  bool ok = true;
  auto once = [&](RevertOptions opts) {
    RevertReport r = revert_natives(disk_, overlay_, opts);
    for (const auto& p : r.problems) {
      j["problems"].push_back({{"path", p.path}, {"reason", p.reason}});
      note("cannot restore " + p.path + ": " + p.reason);
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
    note(std::string("revert failed: ") + e.what());
    ok = false;
  }
  j["ok"] = ok;
  out_.line(ok ? "exec: reverted what it applied"
               : "exec: REVERT INCOMPLETE: run `overlay revert --overlay " + overlay_.string() + "` and look");
  return ok;
}

bool AbStep::check_clean() {
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
  // Over a lower layer, clean means this run's changes are gone: the lower layer's stay, as
  // before the run, and the line says so rather than calling the install pristine.
  // A lower that holds no change (no ACC yet: the loop's first candidate) leaves nothing applied.
  std::string lower = req_.change.over ? absolute_normal(*req_.change.over).string() : "";
  if (!lower.empty() && disk_.info(fs::path(lower) / kManifestName, Follow::no).exists()) {
    auto lm = load_manifest(disk_, lower);
    if (!lm || lm->natives.empty()) lower.clear();
  } else {
    lower.clear();
  }
  if (!lower.empty()) j["lower_layer"] = lower;
  out_.doc["clean"] = j;
  out_.line(!s.clean()      ? "exec: install NOT clean: " + why
            : lower.empty() ? std::string("exec: install clean")
                            : "exec: install clean of this run's changes (overlay " + lower +
                                  " under them stays applied, as before the run)");
  return s.clean();
}

// Kept on success: the change stays, no longer owned by this process (gc-stale leaves it).
void AbStep::keep_applied() {
  OverlayLock lock(overlay_, req_.change.lock_timeout);
  Manifest m = load_manifest(disk_, overlay_).value_or(Manifest{});
  for (auto& e : m.natives)
    if (e.owner && e.owner->pid == me_.pid) e.owner.reset(), e.kept = true;
  save_manifest(disk_, overlay_, m);
  out_.doc["revert"] = {{"ran", false}, {"kept", true}};
  out_.line("exec: kept the patch applied (--keep-on-success); undo it with `overlay revert --overlay " +
            overlay_.string() + "`");
}

void AbStep::judge_tick(pid_t pid) {
  if (verdict_ && verdict_->engaged) return;
  try {
    Manifest m = load_manifest(disk_, overlay_).value_or(Manifest{});
    ProcessScan scan = scan_processes(disk_);
    EngagementReport r = judge_engagement(disk_, m, scan);
    r.python = live_python_uses(disk_, overlay_);
    Verdict v = engagement_verdict(r, scan, {pid}, engagement_scope(m));
    if (scan.find(pid) != nullptr) verdict_ = v;  // exiting meanwhile: keep what it was judged before
  } catch (const std::exception& e) {
    spdlog::debug("exec: the candidate could not be judged this tick: {}", e.what());  // the next tick tries again
  }
}

// A run's receipts go to a directory of the state dir named by this step and the run (never
// under the overlay: a source-proving launch hashes it), swept by a later step once this one is gone.
std::optional<ReceiptCollector> AbStep::receipt_collector(const std::string& which) {
  if (!req_.receipts) return std::nullopt;
  std::vector<std::string> watched;
  for (const auto& a : req_.change.artifacts) watched.push_back(absolute_normal(a).string());
  if (auto m = load_manifest(disk_, overlay_))
    for (const auto& p : tracked_artifact_paths(disk_, *m)) watched.push_back(p);
  fs::path parent = state_dir() / "receipts";
  sweep_receipt_dirs(disk_, parent);
  return std::make_optional<ReceiptCollector>(
      disk_, parent / (std::to_string(me_.pid) + "-" + std::to_string(me_.start_ticks) + "-" + which), watched);
}

// Each run's receipts, told apart against the candidate's code (its overlay, its entries' builds
// still in place: before the revert), into the document and a line each.
void AbStep::report_receipts() {
  if (receipts_.empty()) return;
  CandidateCode code;
  try {
    code = candidate_code(disk_, overlay_, load_manifest(disk_, overlay_).value_or(Manifest{}));
  } catch (const std::exception& e) {
    note("warning: the runs' receipts cannot be told apart: " + std::string(e.what()) +
         " (their digests stand; which code each is stays unknown)");
    code.overlay = overlay_;
  }
  for (const char* which : {"ref", "cand"}) {
    auto it = receipts_.find(which);
    if (it == receipts_.end()) continue;
    RunReceipts& r = it->second;
    label(r, code);
    std::size_t ran = 0;
    for (const auto& p : r.processes) ran += p.ran_candidate() ? 1 : 0;
    if (out_.doc[which].is_object()) out_.doc[which]["receipts"] = r;
    std::string seen = std::to_string(r.processes.size()) + " process(es) seen";
    out_.line(std::string("exec: ") + which + " receipts: " + seen + "; " +
              (ran == 0 ? "none of them ran the candidate's code" : std::to_string(ran) + " ran the candidate's code"));
  }
}

int AbStep::run() {
  if (req_.cmd.empty()) throw Error("no command: pass it after --, e.g. overlay exec … -- python3 bench.py");
  if (req_.change.targets.empty() && !req_.as_apply)
    throw Error("pass --target (as add-native) or --patch with --patch-root (as apply)");
  require_pythonpath_safe(overlay_);  // the command runs with the overlay on PYTHONPATH
  StepSignals signals;
  // Steps on one install serialise: a lock per path it touches (the overlay, the install's).
  auto locks = lock_names(disk_, state_dir() / "exec-locks", lock_paths(), req_.change.lock_timeout,
                          "a run of overlay exec on it");
  recover_dead_runs();
  auto& j = out_.doc;
  j["overlay"] = overlay_.string();
  j["ref"] = nullptr, j["cand"] = nullptr, j["engaged"] = nullptr, j["clean"] = nullptr;
  // The reference runs on the clean install (over a lower layer, on the install as that layer
  // leaves it), or not at all: a target another overlay holds would make it run that overlay's
  // candidate (and our apply would be refused anyway).
  refuse_held_targets();
  out_.line("OVERLAY_DIR=" + overlay_.string());
  if (req_.ref) j["ref"] = run_cmd("ref", false);
  bool applied = !interrupted() && apply();
  if (applied && !interrupted()) {
    j["cand"] = run_cmd("cand", req_.engaged);
    if (req_.engaged) {
      Verdict v = verdict_.value_or(
          Verdict{false, "the candidate exited before it could be judged (it is sampled every 0.25 s while it runs)"});
      j["engaged"] = {{"engaged", v.engaged}, {"why", v.why}};
      out_.line((v.engaged ? "ENGAGED " : "NOT_ENGAGED ") + v.why);
    }
  }
  report_receipts();
  if (req_.keep_on_success && applied && !interrupted() && cand_status_ == 0) {
    keep_applied();
    return 0;
  }
  if (!revert()) return to_int(StepExit::revert_incomplete);
  if (!check_clean()) return to_int(StepExit::not_clean);
  if (int sig = signal_ ? signal_ : StepSignals::received()) {
    j["error"] = std::string("interrupted by signal ") + std::to_string(sig) + "; reverted";
    return 128 + sig;
  }
  if (!applied) return to_int(StepExit::apply_failed);
  if (cand_timed_out_) return to_int(StepExit::timed_out);
  return cand_status_;
}

}  // namespace

int run_ab_step(Disk& disk, AbStepRequest req, const StepOutput& out) { return AbStep(disk, req, out).run(); }

}  // namespace overlay
