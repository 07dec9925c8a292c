// `engaged`: which running processes map the overlay's tracked artifacts, and whether a given
// process (with its descendants) runs the patched build. Read-only.
#include <sys/types.h>

#include <memory>
#include <set>

#include "overlay/engagement.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/process_scan.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/status.hpp"

#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {

std::string process_line(const ArtifactUse& u) {
  std::string who = "process " + std::to_string(u.pid) + " (" + u.cmdline.substr(0, 60) + ")";
  if (u.reverted)
    return who + " still runs the patched " + u.artifact + " that revert replaced (entry " + u.entry + "): restart it";
  return who + "  " + to_string(u.state) + "  " + u.artifact + "  (entry " + u.entry + ")";
}

std::vector<std::string> python_process_lines(const PythonUse& u) {
  std::string who = "process " + std::to_string(u.pid) + " (" + u.cmdline.substr(0, 60) + ")";
  std::string s = who + "  python  applied " + std::to_string(u.applied.size());
  if (!u.failed.empty()) s += ", FAILED " + std::to_string(u.failed.size());
  if (!u.pending.empty()) s += ", not yet applied " + std::to_string(u.pending.size());
  std::vector<std::string> lines{s};
  for (const auto& k : u.applied) lines.push_back("    applied  " + k);
  for (const auto& k : u.failed) lines.push_back("    FAILED   " + k);
  for (const auto& k : u.pending) lines.push_back("    pending  " + k + " (module not imported yet)");
  return lines;
}

namespace {

// A --pid that lives but whose maps we may not read is not "gone": say so, never guess.
std::optional<Verdict> unreadable_verdict(Disk& disk, const ProcessScan& scan, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids)
    if (scan.find(pid)) return std::nullopt;
  for (pid_t pid : pids)
    if (read_process(disk, pid))
      return Verdict{false,
                     "process " + std::to_string(pid) +
                         "'s maps could not be read (permission denied: another user's need root, or CAP_SYS_PTRACE)"};
  return std::nullopt;
}

int run_engaged(Disk& disk, const std::string& overlay_in, const std::vector<pid_t>& pids) {
  fs::path overlay = absolute_normal(overlay_in);
  if (disk.info(overlay, Follow::yes).type != FileType::directory)
    throw overlay::Error("overlay does not exist: " + overlay.string());
  Manifest m = load_manifest(disk, overlay).value_or(Manifest{});
  // With --pid the whole process table (the tree below a pid may map nothing); else only mappers.
  ProcessScan scan = pids.empty() ? scan_for_artifacts(disk, m) : scan_processes(disk);
  EngagementReport r = judge_engagement(disk, m, scan);
  r.python = live_python_uses(disk, overlay);
  std::set<pid_t> tree;  // with --pid, what the judged processes map and applied
  for (const ProcessInfo* p : scan.with_descendants(pids)) tree.insert(p->pid);
  for (const auto& u : r.uses)
    if (pids.empty() || tree.count(u.pid)) out_line(process_line(u));
  for (const auto& u : r.python)
    if (pids.empty() || tree.count(u.pid))
      for (const auto& l : python_process_lines(u)) out_line(l);
  if (r.unreadable > 0)
    err_line("engaged",
             std::to_string(r.unreadable) +
                 " process(es) could not be read (permission denied: another user's need root, or CAP_SYS_PTRACE)");
  auto& j = result();
  j["overlay"] = overlay.string();
  j["processes"] = processes_json(r);
  j["python_processes"] = python_processes_json(r);
  j["unreadable_processes"] = r.unreadable;
  if (pids.empty()) {
    std::vector<PythonStatus> entries = python_entries_status(disk, overlay, m);
    for (const auto& p : entries) out_line(python_entry_line(p));
    j["python"] = python_entries_json(entries);
    out_line("engaged: " + std::to_string(r.uses.size()) + " mapping(s) of tracked artifacts, " +
             std::to_string(r.python.size()) + " live process(es) running Python entries");
    return kOk;
  }
  EngagementScope scope = engagement_scope(m);
  if (!has_worker_modules(disk, overlay))
    scope.python_hint =
        "; a TP worker started without the overlay's environment applies it through the worker modules: overlay "
        "add-worker-modules --overlay " +
        overlay.string() + ", then vLLM's --worker-extension-cls _overlay_worker_ext.OverlayWorkerExtension";
  Verdict v = unreadable_verdict(disk, scan, pids).value_or(engagement_verdict(r, scan, pids, scope));
  j["engaged"] = v.engaged;
  j["why"] = v.why;
  out_line(v.engaged ? "ENGAGED " + v.why : "NOT_ENGAGED " + v.why);
  return v.engaged ? kOk : kFailed;
}

}  // namespace

Handler engaged_command(CLI::App& sub, const Globals&) {
  auto overlay = std::make_shared<std::string>();
  auto pids = std::make_shared<std::vector<pid_t>>();
  sub.add_option("--overlay", *overlay, "Overlay directory")->required();
  sub.add_option("--pid", *pids,
                 "Judge this process and its descendants: ENGAGED (exit 0) or NOT_ENGAGED <why> (exit 1); repeatable")
      ->check(CLI::PositiveNumber);
  return [overlay, pids] { return run_engaged(cli_disk(), *overlay, *pids); };
}

}  // namespace overlay::cli
