#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <spdlog/spdlog.h>

#include "overlay/apply.hpp"
#include "overlay/build_watch.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/native.hpp"
#include "overlay/python/verbs.hpp"
#include "overlay/status.hpp"
#include "overlay/words.hpp"

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

// A build log that is incomplete; the files a build created or changed that no entry tracks (a
// warning naming them, for they keep what the build made of the patched source after revert).
void warn_about_build(const std::string& cmd, const BuildOutcome& b, const AppliedEntry& entry) {
  if (!b.log_error.empty())
    err_line(cmd, "warning: build log " + entry.log_path.string() + " is incomplete (" + b.log_error +
                      "); the build's whole output went to stderr");
  if (!b.watch_off.empty()) err_line(cmd, "build outputs not watched: " + b.watch_off);
  err_line(cmd, store_line(b));
  for (const auto& u : b.unobserved) err_line(cmd, "warning: the build's trace is incomplete: " + u);
  if (!b.store_note.empty()) err_line(cmd, b.store_note);
  std::vector<std::string> holding, clear, deleted;
  for (const auto& u : b.untracked)
    (u.change == "deleted" ? deleted : u.clear_reason.empty() ? holding : clear).push_back(u.path);
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > 8 ? s + ", … (" + std::to_string(v.size() - 8) + " more)" : s;
  };
  if (!clear.empty())
    err_line(cmd,
             (b.served_from.empty() ? "the build rewrote " : "the build store put back ") +
                 std::to_string(clear.size()) +
                 " untracked file(s) that hold none of the patched code (relinked, or compiled from other sources; "
                 "status says why): " +
                 names(clear));
  if (!holding.empty())
    err_line(cmd,
             "warning: the build created or changed " + std::to_string(holding.size()) +
                 " file(s) no entry tracks; revert leaves them as built (pass them with --artifact to track them): " +
                 names(holding));
  if (!deleted.empty())
    err_line(cmd, "warning: the build deleted " + std::to_string(deleted.size()) +
                      " file(s), which a watched build cannot put back; the install is not clean until its build "
                      "makes them again: " +
                      names(deleted));
}

// --revert-on-failure: the entry that was just added goes back at once.
bool revert_entry_now(Disk& disk, const NativePlan& plan, const AppliedEntry& entry, const Globals& g) {
  RevertOptions o;
  o.lock_timeout = g.lock_timeout;
  o.only_entry = entry.id;
  RevertReport r = revert_natives(disk, plan.overlay, o);
  for (const auto& p : r.problems) err_line("add-native", "cannot restore " + p.path + ": " + p.reason);
  result()["reverted_on_failure"] = r.ok() && r.entries_reverted == 1;
  if (r.ok())
    err_line("add-native",
             "--revert-on-failure: entry " + entry.id + " reverted; the install is back at its original bytes");
  return r.ok();
}

}  // namespace

namespace {

// --over: which files were taken as layers on the lower overlay.
void report_layers(const std::string& cmd, const NativePlan& plan, const AppliedEntry& entry) {
  if (!plan.over) return;
  if (entry.layered.empty())
    err_line(cmd, "--over " + plan.over->string() + ": it holds none of these files; a plain add");
  else
    err_line(cmd, "stacked on " + plan.over->string() + ": " + std::to_string(entry.layered.size()) +
                      " file(s) taken as layers on its changes (revert puts its bytes back)");
}

// Runs the entry's build; on failure says why and, with --revert-on-failure, calls `undo`.
// `build` in the JSON document (j) gets the outcome. Returns the exit status.
int build_and_report(Disk& disk, const std::string& cmd, const NativePlan& plan, const AppliedEntry& entry,
                     bool revert_on_failure, const std::function<bool()>& undo, nlohmann::json& j) {
  j["build"] = {{"ran", false}};
  if (plan.build_cmds.empty()) return kOk;
  BuildOutcome b = run_native_build(disk, plan, entry);
  j["build"] = b.to_json(entry.log_path);
  j["untracked_outputs"] = j["build"]["untracked_outputs"];
  warn_about_build(cmd, b, entry);
  if (b.ok) {
    if (!json_mode()) err_line(cmd, "build log: " + entry.log_path.string());
    return kOk;
  }
  std::string why = "build failed (" + join_words(b.failed_cmd) + ") rc=" + std::to_string(b.result.rc()) +
                    (b.result.exec_error.empty() ? "" : " (" + b.result.exec_error + ")") +
                    (b.result.timed_out ? " (timed out)" : "") + "; log: " + entry.log_path.string();
  if (revert_on_failure) {
    err_line(cmd, why);
    if (!undo()) err_line(cmd, "revert incomplete: run `overlay revert --overlay " + plan.overlay.string() + "`");
  } else {
    err_line(cmd, why + "; the entry stays recorded: run `overlay revert --overlay " + plan.overlay.string() + "`");
  }
  result()["error"] = why;
  return b.result.forwarded_signal ? kInterrupted : kFailed;
}

int run_add_native(Disk& disk, AddNativeFlags& f, const Globals& g) {
  fill_request(f, g);
  NativePlan plan = plan_add_native(disk, f.req);
  AppliedEntry entry = apply_native(disk, plan);
  auto& j = result();
  j["overlay"] = plan.overlay.string();
  j.update(entry.to_json(plan));
  report_layers("add-native", plan, entry);
  int rc = build_and_report(
      disk, "add-native", plan, entry, f.revert_on_failure, [&] { return revert_entry_now(disk, plan, entry, g); }, j);
  if (rc != kOk) return rc;  // stdout carries the summary only on success, as overlay_setup.py's does
  out_line("OVERLAY_DIR=" + plan.overlay.string());
  std::string summary = "add-native " + plan.swaps.front().target.string();
  for (std::size_t i = 1; i < plan.swaps.size(); ++i) summary += " " + plan.swaps[i].target.string();
  // A store hit ran no command: its outputs were put back from the build store's record.
  bool served = j.contains("build") && j["build"].value("served_from_store", nlohmann::json()).is_string();
  out_line(summary + "  (sources=" + std::to_string(entry.sources) + " artifacts=" + std::to_string(entry.artifacts) +
           " caches=" + std::to_string(entry.caches) + " build=" +
           (plan.build_cmds.empty() ? "no"
            : served                ? "store"
                                    : "yes") +
           ")");
  return kOk;
}

// --revert-on-failure for apply: every entry of the patch goes, the Python ones included.
bool revert_patch_now(Disk& disk, const fs::path& overlay, const std::string& patch_id, const Globals& g) {
  RevertOptions o;
  o.lock_timeout = g.lock_timeout;
  o.only_patch = patch_id;
  RevertReport r = revert_natives(disk, overlay, o);
  for (const auto& p : r.problems) err_line("apply", "cannot restore " + p.path + ": " + p.reason);
  result()["reverted_on_failure"] = r.ok();
  if (r.ok()) err_line("apply", "--revert-on-failure: patch " + patch_id + " reverted; no entry of it is left");
  return r.ok();
}

int run_apply(Disk& disk, ApplyFlags& f, const Globals& g) {
  fill_request(f, g);
  ApplyRequest req{f.req, std::nullopt};
  if (!f.python_root.empty()) req.python_root = f.python_root;
  ApplyPlan plan = plan_apply(disk, req);
  AppliedPatch applied = apply_patch(disk, plan);
  const fs::path& ov = plan.native.overlay;
  // stdout carries the summary only on success (after the build, when there is one).
  auto summary = [&] {
    out_line("OVERLAY_DIR=" + ov.string());
    out_line("apply " + applied.patch_id + "  (native=" + std::to_string(plan.native.swaps.size()) + " python=" +
             std::to_string(plan.modules.size()) + " build=" + (plan.native.build_cmds.empty() ? "no" : "yes") + ")");
    for (const auto& s : plan.native.swaps)
      out_line("  native  " + std::string(to_string(s.kind)) + " " + s.target.string());
    for (const auto& m : plan.modules) out_line("  python  " + m.module + " <- " + m.installed.string());
    if (!plan.modules.empty()) out_line("launch with: PYTHONPATH=" + ov.string() + ":$PYTHONPATH");
  };
  auto& j = result();
  j.update(applied.to_json(plan));
  if (!applied.native) {
    summary();
    return kOk;
  }
  const AppliedEntry& entry = *applied.native;
  nlohmann::json n = entry.to_json(plan.native);
  report_layers("apply", plan.native, entry);
  int rc = build_and_report(
      disk, "apply", plan.native, entry, f.revert_on_failure,
      [&] { return revert_patch_now(disk, ov, applied.patch_id, g); }, n);
  j["native"] = n;
  if (rc == kOk) summary();
  return rc;
}

}  // namespace

Handler add_native_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<AddNativeFlags>();
  add_change_flags(sub, *f, Diffs::targets_or_patch);
  add_build_flags(sub, *f);
  add_fleet_node_flags(sub, *f);
  return [f, &g] { return run_add_native(cli_disk(), *f, g); };
}

Handler apply_command(CLI::App& sub, const Globals& g) {
  auto a = std::make_shared<ApplyFlags>();
  add_change_flags(sub, *a, Diffs::patch_only);
  sub.add_option("--python-root", a->python_root, "Directory .py paths are module names under (default: --patch-root)");
  add_build_flags(sub, *a);
  add_fleet_node_flags(sub, *a);
  return [a, &g] { return run_apply(cli_disk(), *a, g); };
}

}  // namespace overlay::cli
