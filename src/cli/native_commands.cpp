#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <memory>

#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"
#include "overlay/apply.hpp"
#include "overlay/error.hpp"
#include "overlay/gc.hpp"
#include "overlay/holds.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/native.hpp"
#include "overlay/python/verbs.hpp"
#include "overlay/status.hpp"
#include "overlay/trust.hpp"
#include "overlay/words.hpp"

namespace overlay::cli {
namespace {


// "90", "90s", "15m", "2h", "1d" -> seconds.
double parse_duration(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
  if (end == text.c_str() || scale < 0 || v < 0) throw Error("bad duration: " + text + " (use e.g. 90, 15m, 2h, 1d)");
  return v * scale;
}



nlohmann::json untracked_json(const std::vector<UntrackedOutput>& outputs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& u : outputs) {
    nlohmann::json item = {{"path", u.path}, {"change", u.change}};
    if (!u.entry.empty()) item["entry"] = u.entry, item["regenerated_by"] = u.build_cmds;
    item["clear_reason"] = u.clear_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.clear_reason);
    a.push_back(item);
  }
  return a;
}

// A build log that is incomplete; the files a build created or changed that no entry tracks (a
// warning naming them, for they keep what the build made of the patched source after revert).
void warn_about_build(const std::string& cmd, const BuildOutcome& b, const AppliedEntry& entry) {
  if (!b.log_error.empty()) err_line(cmd, "warning: build log " + entry.log_path.string() + " is incomplete (" + b.log_error + "); the build's whole output went to stderr");
  if (!b.watch_off.empty()) err_line(cmd, "build outputs not watched: " + b.watch_off);
  std::vector<std::string> holding, clear;
  for (const auto& u : b.untracked) (u.clear_reason.empty() ? holding : clear).push_back(u.path);
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > 8 ? s + ", … (" + std::to_string(v.size() - 8) + " more)" : s;
  };
  if (!clear.empty())
    err_line(cmd, "the build rewrote " + std::to_string(clear.size()) +
                      " untracked file(s) that hold none of the patched code (relinked, or compiled from other sources; "
                      "status says why): " + names(clear));
  if (!holding.empty())
    err_line(cmd, "warning: the build created or changed " + std::to_string(holding.size()) +
                      " file(s) no entry tracks; revert leaves them as built (pass them with --artifact to track them): " +
                      names(holding));
}

nlohmann::json build_json(const BuildOutcome& b, const AppliedEntry& entry) {
  nlohmann::json j = {{"ran", true}, {"ok", b.ok}, {"log", entry.log_path.string()}};
  j["untracked_outputs"] = untracked_json(b.untracked);
  if (!b.watch_off.empty()) j["watch_off"] = b.watch_off;
  if (!b.log_error.empty()) j["log_error"] = b.log_error;
  if (!b.ok) {
    j["failed_cmd"] = b.failed_cmd;
    j["rc"] = b.result.rc();
    j["timed_out"] = b.result.timed_out;
    j["interrupted"] = b.result.forwarded_signal != 0;
    if (!b.result.exec_error.empty()) j["exec_error"] = b.result.exec_error;
  }
  return j;
}

// --revert-on-failure: the entry that was just added goes back at once.
bool revert_entry_now(Disk& disk, const NativePlan& plan, const AppliedEntry& entry, const Globals& g) {
  RevertOptions o;
  o.lock_timeout = g.lock_timeout;
  o.only_entry = entry.id;
  RevertReport r = revert_natives(disk, plan.overlay, o);
  for (const auto& p : r.problems) err_line("add-native", "cannot restore " + p.path + ": " + p.reason);
  result()["reverted_on_failure"] = r.ok() && r.entries_reverted == 1;
  if (r.ok()) err_line("add-native", "--revert-on-failure: entry " + entry.id + " reverted; the install is back at its original bytes");
  return r.ok();
}

}  // namespace

// The request the flags describe (everything but the files to change, which each command adds).
void fill_request(AddNativeFlags& f, const Globals& g) {
  AddNativeRequest& r = f.req;
  r.overlay = f.overlay;
  r.targets.assign(f.targets.begin(), f.targets.end());
  r.patched_files.assign(f.patched.begin(), f.patched.end());
  if (!f.patch.empty()) r.patch = f.patch;
  if (!f.patch_root.empty()) r.patch_root = f.patch_root;
  if (f.strip_opt != nullptr && f.strip_opt->count() > 0 && f.patch_root.empty())
    throw Error("-p/--strip applies only with --patch-root");
  r.strip = f.strip;
  r.artifacts.assign(f.artifacts.begin(), f.artifacts.end());
  r.caches.assign(f.caches.begin(), f.caches.end());
  if (!f.build_cwd.empty()) r.build_cwd = f.build_cwd;
  if (f.owner_pid > 0) {
    r.owner_pid = f.owner_pid;
  } else if (const char* env = std::getenv("OVERLAY_OWNER_PID"); env && *env) {
    r.owner_pid = static_cast<pid_t>(std::atol(env));
  }
  if (f.build_timeout > 0) r.build_timeout = f.build_timeout;
  r.cache_snapshot = f.cache_snapshot == "move"    ? CacheSnapshot::move
                     : f.cache_snapshot == "aside" ? CacheSnapshot::aside
                     : f.cache_snapshot == "tar"   ? CacheSnapshot::tar
                                                   : CacheSnapshot::automatic;
  r.lock_timeout = g.lock_timeout;
}

namespace {

nlohmann::json files_json(const NativePlan& plan) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& s : plan.swaps) files.push_back({{"path", s.target.string()}, {"change", to_string(s.kind)}});
  return files;
}

// Runs the entry's build; on failure says why and, with --revert-on-failure, calls `undo`.
// `build` in the JSON document (j) gets the outcome. Returns the exit status.
int build_and_report(Disk& disk, const std::string& cmd, const NativePlan& plan, const AppliedEntry& entry, bool revert_on_failure,
                     const std::function<bool()>& undo, nlohmann::json& j) {
  j["build"] = {{"ran", false}};
  if (plan.build_cmds.empty()) return kOk;
  BuildOutcome b = run_native_build(disk, plan, entry);
  j["build"] = build_json(b, entry);
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
  j["entry"] = entry.id;
  j["files"] = files_json(plan);
  j["counts"] = {{"sources", entry.sources}, {"artifacts", entry.artifacts}, {"caches", entry.caches}};
  int rc = build_and_report(disk, "add-native", plan, entry, f.revert_on_failure,
                            [&] { return revert_entry_now(disk, plan, entry, g); }, j);
  if (rc != kOk) return rc;  // stdout carries the summary only on success, as overlay_setup.py's does
  out_line("OVERLAY_DIR=" + plan.overlay.string());
  std::string summary = "add-native " + plan.swaps.front().target.string();
  for (std::size_t i = 1; i < plan.swaps.size(); ++i) summary += " " + plan.swaps[i].target.string();
  out_line(summary + "  (sources=" + std::to_string(entry.sources) + " artifacts=" + std::to_string(entry.artifacts) +
           " caches=" + std::to_string(entry.caches) + " build=" + (plan.build_cmds.empty() ? "no" : "yes") + ")");
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
    for (const auto& s : plan.native.swaps) out_line("  native  " + std::string(to_string(s.kind)) + " " + s.target.string());
    for (const auto& m : plan.modules) out_line("  python  " + m.module + " <- " + m.installed.string());
    if (!plan.modules.empty()) out_line("launch with: PYTHONPATH=" + ov.string() + ":$PYTHONPATH");
  };
  auto& j = result();
  j["overlay"] = ov.string();
  j["patch_id"] = applied.patch_id;
  j["python"] = nlohmann::json::array();
  for (const auto& m : plan.modules)
    j["python"].push_back({{"module", m.module}, {"file", (ov / kPatchedDir / (m.module + ".py")).string()},
                           {"installed", m.installed.string()}, {"created", m.created}});
  j["pythonpath"] = ov.string();
  j["native"] = nullptr;
  if (!applied.native) {
    summary();
    return kOk;
  }
  const AppliedEntry& entry = *applied.native;
  nlohmann::json n = {{"entry", entry.id}, {"files", files_json(plan.native)},
                      {"counts", {{"sources", entry.sources}, {"artifacts", entry.artifacts}, {"caches", entry.caches}}}};
  int rc = build_and_report(disk, "apply", plan.native, entry, f.revert_on_failure,
                            [&] { return revert_patch_now(disk, ov, applied.patch_id, g); }, n);
  j["native"] = n;
  if (rc == kOk) summary();
  return rc;
}

}  // namespace

std::string print_verify_items(const VerifyReport& r) {
  for (const auto& i : r.items)
    if (i.state != ArtifactState::rebuilt && i.state != ArtifactState::created)
      out_line(std::string("FRESH_BUILD_FAIL ") + to_string(i.state) + " " + i.path + (i.why.empty() ? "" : " (" + i.why + ")"));
  return std::string(r.ok() ? "FRESH_BUILD_OK" : "FRESH_BUILD_FAIL") + " (checked " + std::to_string(r.items.size()) + ")";
}

namespace {

int run_verify(Disk& disk, const std::string& overlay) {
  VerifyReport r = verify_native(disk, overlay);
  out_line(print_verify_items(r));
  auto& j = result();
  j["overlay"] = absolute_normal(overlay).string();
  j["result"] = r.ok() ? "FRESH_BUILD_OK" : "FRESH_BUILD_FAIL";
  j["artifacts"] = nlohmann::json::array();
  for (const auto& i : r.items) {
    j["artifacts"].push_back({{"path", i.path}, {"state", to_string(i.state)}});
    if (!i.why.empty()) j["artifacts"].back()["why"] = i.why;
  }
  if (!r.ok()) j["error"] = "FRESH_BUILD_FAIL: an artifact was not rebuilt";
  return r.ok() ? kOk : kUsage;
}

// revert, status and verify-native act on an overlay's word: refused, naming why, when another
// user owns or can write it, unless the caller says it trusts it (--trust-owner, or a root of
// $OVERLAY_TRUSTED_ROOTS above it).
void check_trusted(Disk& disk, const std::string& overlay, bool trust_owner) {
  if (trust_owner || under_trusted_root(overlay)) return;
  std::string why = why_untrusted(disk, absolute_normal(overlay));
  if (!why.empty()) throw Error("refusing to act on overlay " + overlay + ": " + why + " (pass --trust-owner if you trust it)");
}

void add_trust_flag(CLI::App* sub, bool& flag) {
  sub->add_flag("--trust-owner", flag,
                "Act on the overlay even if another user owns or can write it (also: $OVERLAY_TRUSTED_ROOTS, ':'-separated)");
}

// A revert in flight owns the overlay too (gc-stale leaves it be); an overlay that cannot take
// the mark (read-only, not there) is still reverted, as far as it can be.
std::unique_ptr<InFlight> mark_reverting(Disk& disk, const std::string& overlay) {
  fs::path ov = absolute_normal(overlay);
  if (disk.info(ov / kManifestName, Follow::no).type != FileType::regular) return nullptr;
  try {
    return std::make_unique<InFlight>(disk, ov, "revert");
  } catch (const std::exception& e) {
    spdlog::debug("revert not marked in flight: {}", e.what());
    return nullptr;
  }
}

int run_revert(Disk& disk, const std::string& overlay, bool dry_run, const std::string& patch_id, const Globals& g) {
  RevertOptions o{dry_run, g.lock_timeout, {}, std::nullopt, std::nullopt, {}};
  if (!patch_id.empty()) o.only_patch = patch_id;
  std::unique_ptr<InFlight> in_flight = dry_run ? nullptr : mark_reverting(disk, overlay);
  RevertReport r = revert_natives(disk, overlay, o);
  auto& j = result();
  j["overlay"] = absolute_normal(overlay).string();
  j["dry_run"] = dry_run;
  j["had_manifest"] = r.had_manifest;
  j["entries"] = r.entries;
  j["entries_reverted"] = r.entries_reverted;
  j["modules_removed"] = r.modules_removed;
  if (!patch_id.empty()) j["patch_id"] = patch_id;
  j["actions"] = nlohmann::json::array();
  for (const auto& a : r.actions) j["actions"].push_back({{"action", a.action}, {"path", a.path}});
  j["problems"] = nlohmann::json::array();
  for (const auto& p : r.problems) j["problems"].push_back({{"path", p.path}, {"reason", p.reason}});
  j["untracked_outputs"] = untracked_json(r.untracked_left);
  EngagementReport running;
  for (const auto& x : r.still_running)
    running.uses.push_back({static_cast<pid_t>(x.pid), x.start_ticks, x.cmdline, x.path, x.entry, MapState::patched, true});
  j["still_running"] = processes_json(running);
  j["processes_examined"] = r.processes_examined;
  for (const auto& u : running.uses) err_line("revert", "warning: " + process_line(u));
  for (const auto& u : r.untracked_left)
    err_line("revert", "warning: " + u.path + " was " + u.change + " by the build of entry " + u.entry +
                           ", is tracked by none and may hold patched code until the next build (" +
                           (u.build_cmds.empty() ? std::string("none recorded") : join_words(u.build_cmds.front())) + ") regenerates it");
  if (!r.had_manifest) {
    out_line("revert: no manifest; nothing to do");
    return kOk;
  }
  if (dry_run) {
    for (const auto& a : r.actions) out_line("revert: would " + (a.action == "unchanged" ? std::string("leave (already original)") : a.action) + " " + a.path);
  }
  for (const auto& p : r.problems) err_line("revert", "cannot restore " + p.path + ": " + p.reason);
  if (!r.ok()) {
    j["error"] = std::to_string(r.problems.size()) + " item(s) not restored; their entries stay in the manifest";
    err_line("revert", j["error"]);
    return kFailed;
  }
  std::string where = fs::absolute(overlay).lexically_normal().string();
  if (!patch_id.empty() && !dry_run)
    out_line("revert: removed patch " + patch_id + " (" + std::to_string(r.entries_reverted) + " native, " +
             std::to_string(r.modules_removed) + " python) from " + where);
  else
    out_line(std::string(dry_run ? "revert: dry run; nothing changed in " : "revert: restored native changes in ") + where);
  return kOk;
}

int run_gc(Disk& disk, const std::string& root, bool dry_run, const std::string& min_age, const Globals& g) {
  GcOptions o;
  o.dry_run = dry_run;
  o.lock_timeout = g.lock_timeout;
  if (!min_age.empty()) o.min_age_s = parse_duration(min_age);
  GcReport r = gc_stale(disk, root, o);
  auto& j = result();
  j["root"] = absolute_normal(root).string();
  j["dry_run"] = dry_run;
  j["overlays"] = nlohmann::json::array();
  for (const auto& i : r.items)
    j["overlays"].push_back({{"overlay", i.overlay.string()}, {"outcome", to_string(i.outcome)}, {"reason", i.reason}});
  for (const auto& i : r.items) {
    switch (i.outcome) {
      case GcOutcome::reverted:
        out_line("gc-stale: reverted " + i.overlay.string());
        if (!i.reason.empty()) err_line("gc-stale", "warning: " + i.reason);
        break;
      case GcOutcome::would_revert: out_line("gc-stale: would revert " + i.overlay.string()); break;
      case GcOutcome::skipped: err_line("gc-stale", "skipped " + i.overlay.string() + ": " + i.reason); break;
      case GcOutcome::failed: err_line("gc-stale", "failed " + i.overlay.string() + ": " + i.reason); break;
    }
  }
  std::size_t n = dry_run ? r.count(GcOutcome::would_revert) : r.count(GcOutcome::reverted);
  j["reverted"] = dry_run ? 0 : n;
  j["would_revert"] = dry_run ? n : 0;
  out_line(std::string("gc-stale: ") + (dry_run ? "would revert " : "reverted ") + std::to_string(n) +
           " stale native overlay(s) under " + fs::absolute(root).lexically_normal().string());
  if (r.count(GcOutcome::failed)) j["error"] = std::to_string(r.count(GcOutcome::failed)) + " overlay(s) could not be reverted";
  return r.count(GcOutcome::failed) ? kFailed : kOk;
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string human_age(double seconds) {
  long s = static_cast<long>(seconds);
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h" + std::to_string(s / 60 % 60) + "m";
  return std::to_string(s / 86400) + "d";
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string owner_text(const NativeStatus& e) {
  if (!e.owner) return "owner -";
  return "owner pid " + std::to_string(e.owner->pid) + (e.owner_alive ? " (alive)" : " (gone)");
}

// Per patch id (in order of first appearance): its native entry ids and its Python entry names.
std::vector<std::pair<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>>> patch_groups(const StatusReport& r) {
  std::vector<std::pair<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>>> groups;
  auto group = [&](const std::string& id) -> auto& {
    for (auto& g : groups)
      if (g.first == id) return g.second;
    groups.push_back({id, {}});
    return groups.back().second;
  };
  for (const auto& e : r.natives)
    if (e.patch_id) group(*e.patch_id).first.push_back(e.id);
  for (const auto& p : r.pythons)
    if (p.patch_id) group(*p.patch_id).second.push_back(p.name);
  return groups;
}

// What status says of the overlay's sitecustomize.py and of sections this version does not apply.
std::vector<std::string> python_notes(const StatusReport& r) {
  std::vector<std::string> lines;
  fs::path sc = r.overlay / "sitecustomize.py";
  if (r.sitecustomize == SitecustomizeKind::foreign)
    lines.push_back("sitecustomize " + sc.string() + "  foreign (not generated by overlay or overlay_setup.py: kept as it is; "
                    "it applies only what it was written to apply; add-* --force replaces it)");
  else if (r.sitecustomize == SitecustomizeKind::absent && !r.pythons.empty())
    lines.push_back("sitecustomize " + sc.string() + "  MISSING (no Python entry applies; any add-* writes it)");
  else if (r.sitecustomize == SitecustomizeKind::generated)
    lines.push_back("sitecustomize " + sc.string() + "  generated by " + r.sitecustomize_by + " (the next add-* regenerates it)");
  for (const auto& s : r.unapplied_sections)
    lines.push_back("section " + s + "  NOT APPLIED (this version of overlay does not know it)");
  return lines;
}

const char* sitecustomize_word(SitecustomizeKind k) {
  switch (k) {
    case SitecustomizeKind::absent: return "absent";
    case SitecustomizeKind::current: return "current";
    case SitecustomizeKind::generated: return "generated";
    case SitecustomizeKind::foreign: return "foreign";
  }
  return "?";
}

void print_status_table(const StatusReport& r) {
  out_line("overlay " + r.overlay.string() + (r.has_manifest ? "" : "  (no manifest: nothing recorded)"));
  for (const auto& e : r.natives) {
    std::string age = e.created_at ? "age " + human_age(seconds_now() - *e.created_at) : "age -";
    out_line("native " + (e.id.empty() ? std::string("(overlay_setup.py)") : e.id) + (e.patch_id ? "  patch " + *e.patch_id : "") +
             "  " + owner_text(e) + "  " + age + "  snapshots " + human_bytes(e.snapshot_bytes));
    for (const auto& f : e.files) {
      char line[64];
      std::snprintf(line, sizeof line, "  %-9s %-12s ", to_string(f.kind), to_string(f.state));
      std::string more = !f.aside.empty() ? "  (original kept aside at " + f.aside + (f.note.empty() ? ")" : "; " + f.note + ")")
                         : !f.note.empty()  ? "  (" + f.note + ")"
                                            : "";
      if (!f.metadata.empty()) more += "  (metadata drifted: " + f.metadata + ")";
      out_line(line + f.path + more);
    }
    for (const auto& u : e.untracked)
      out_line(u.clear_reason.empty()
                   ? "  untracked rebuilt      " + u.path + "  (" + u.change + " by this entry's build)"
                   : "  untracked clear        " + u.path + "  (" + u.clear_reason + "; holds none of the patched code)");
  }
  for (const auto& u : r.untracked_left)
    out_line("untracked rebuilt      " + u.path + "  (" + u.change + " by the build of reverted entry " + u.entry +
             "; may hold patched code until " +
             (u.build_cmds.empty() ? std::string("the next build") : join_words(u.build_cmds.front())) + " regenerates it)");
  for (const auto& u : r.engagement.uses) out_line(process_line(u));
  for (const auto& u : r.engagement.python) out_line(python_process_line(u));
  for (const auto& p : r.pythons) out_line(python_entry_line(p));
  for (const auto& line : python_notes(r)) out_line(line);
  for (const auto& [id, parts] : patch_groups(r))
    out_line("patch " + id + ": " + std::to_string(parts.first.size()) + " native, " + std::to_string(parts.second.size()) +
             " python (revert --patch-id " + id + ")");
  std::size_t bad = r.not_original(), untracked = r.untracked_as_built();
  std::size_t running = r.running_reverted();
  std::string verdict = bad == 0 && untracked == 0 && running > 0
                            ? "install clean on disk; " + std::to_string(running) + " process(es) still run patched code (restart them)"
                        : bad == 0 && untracked == 0 ? std::string("install clean (every tracked file original)")
                        : bad == 0 ? "tracked files original, but " + std::to_string(untracked) +
                                         " untracked build output(s) may hold patched code"
                                   : std::to_string(bad) + " tracked path(s) not original";
  out_line("status: " + std::to_string(r.natives.size()) + " native, " + std::to_string(r.pythons.size()) + " python entr" +
           (r.pythons.size() == 1 ? "y" : "ies") + "; " + verdict);
}

}  // namespace

std::string python_entry_line(const PythonStatus& p) {
  std::string use = "  applied in " + std::to_string(p.applied_processes) + " process(es)";
  if (p.running_processes > 0) use += " (" + std::to_string(p.running_processes) + " running now)";
  if (p.calls) use += ", " + std::to_string(*p.calls) + " call(s)" + (p.running_processes > 0 ? " (running ones count theirs at exit)" : "");
  return p.kind + " " + p.name + " -> " + p.detail + (p.present ? "" : "  (MISSING from the overlay)") +
         (p.patch_id ? "  patch " + *p.patch_id : "") + use;
}

nlohmann::json python_entries_json(const std::vector<PythonStatus>& pythons) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : pythons)
    a.push_back({{"kind", p.kind}, {"name", p.name}, {"detail", p.detail}, {"present", p.present},
                 {"applied_processes", p.applied_processes}, {"running_processes", p.running_processes},
                 {"calls", p.calls ? nlohmann::json(*p.calls) : nlohmann::json(nullptr)},
                 {"patch_id", p.patch_id ? nlohmann::json(*p.patch_id) : nlohmann::json(nullptr)}});
  return a;
}

namespace {

nlohmann::json status_json(const StatusReport& r) {
  nlohmann::json j = {{"overlay", r.overlay.string()}, {"has_manifest", r.has_manifest}, {"clean", r.clean()},
                      {"not_original", r.not_original()}, {"untracked_outputs", untracked_json(r.untracked_left)},
                      {"processes", processes_json(r.engagement)}, {"unreadable_processes", r.engagement.unreadable}};
  j["natives"] = nlohmann::json::array();
  for (const auto& e : r.natives) {
    nlohmann::json n = {{"id", e.id}, {"snapshot_bytes", e.snapshot_bytes}};
    n["owner"] = e.owner ? nlohmann::json{{"pid", e.owner->pid}, {"alive", e.owner_alive}} : nlohmann::json(nullptr);
    n["created_at"] = e.created_at ? nlohmann::json(*e.created_at) : nlohmann::json(nullptr);
    n["age_s"] = e.created_at ? nlohmann::json(seconds_now() - *e.created_at) : nlohmann::json(nullptr);
    n["build_log"] = e.build_log ? nlohmann::json(*e.build_log) : nlohmann::json(nullptr);
    n["patch_id"] = e.patch_id ? nlohmann::json(*e.patch_id) : nlohmann::json(nullptr);
    n["files"] = nlohmann::json::array();
    for (const auto& f : e.files) {
      nlohmann::json fj = {{"kind", to_string(f.kind)}, {"path", f.path}, {"state", to_string(f.state)}};
      if (!f.aside.empty()) fj["aside"] = f.aside;
      if (!f.note.empty()) fj["note"] = f.note;
      if (!f.metadata.empty()) fj["metadata_drift"] = f.metadata;
      n["files"].push_back(std::move(fj));
    }
    n["untracked_outputs"] = untracked_json(e.untracked);
    j["natives"].push_back(std::move(n));
  }
  j["python"] = python_entries_json(r.pythons);
  j["sitecustomize"] = r.pythons.empty() ? nlohmann::json(nullptr) : nlohmann::json(sitecustomize_word(r.sitecustomize));
  if (!r.sitecustomize_by.empty()) j["sitecustomize_by"] = r.sitecustomize_by;
  j["unapplied_sections"] = r.unapplied_sections;
  j["python_processes"] = python_processes_json(r.engagement);
  j["patches"] = nlohmann::json::array();
  for (const auto& [id, parts] : patch_groups(r))
    j["patches"].push_back({{"id", id}, {"natives", parts.first}, {"python", parts.second}});
  return j;
}

// "install clean on disk; process 4242 (python3 -m vllm…) still runs the patched /opt/x/_C.so: restart it"
std::string still_running_error(const EngagementReport& r) {
  std::string s = "install clean on disk";
  for (const auto& u : r.uses)
    if (u.reverted)
      s += "; process " + std::to_string(u.pid) + " (" + u.cmdline.substr(0, 60) + ") still runs the patched " + u.artifact;
  return s + ": restart it";
}

nlohmann::json orphan_json(const OrphanHold& o) {
  return {{"path", o.path.string()}, {"overlay", o.hold.overlay.string()}, {"vanished", o.vanished}, {"file", o.file_state},
          {"why", o.describe()}};
}

// Whether `ov` is gone as an overlay: no manifest (deleted, or moved away).
bool vanished(Disk& disk, const fs::path& ov) {
  try {
    return !load_manifest(disk, ov);
  } catch (const std::exception&) {
    return false;  // there, but unreadable: reported as such
  }
}

// `status --all`: one line per overlay the holds registry knows, and one per hold whose holder
// vanished or no longer lists its file; read-only.
int run_status_all(Disk& disk, bool check_clean) {
  auto& j = result();
  j["overlays"] = nlohmann::json::array();
  HoldRegistry holds(disk, HoldRegistry::default_state_dir());
  std::vector<OrphanHold> orphans = holds.orphans();
  std::size_t dirty = 0, gone = 0;
  for (const auto& ov : holds.overlays()) {
    if (vanished(disk, ov)) {
      // Known only by its holds: not clean while a file it held is not at the original it recorded.
      nlohmann::json held = nlohmann::json::array();
      bool clean = true;
      for (const auto& o : orphans)
        if (o.hold.overlay == ov) held.push_back(orphan_json(o)), clean = clean && o.file_state == "original";
      ++gone;
      dirty += clean ? 0 : 1;
      out_line(ov.string() + "  VANISHED (no manifest: deleted or moved)  holds " + std::to_string(held.size()) + " file(s)" +
               (clean ? "  clean" : "  NOT clean"));
      j["overlays"].push_back({{"overlay", ov.string()}, {"vanished", true}, {"clean", clean}, {"held", held}});
      continue;
    }
    StatusReport r;
    try {
      r = overlay_status(disk, ov);
    } catch (const std::exception& e) {
      out_line(ov.string() + "  (unreadable: " + e.what() + ")");
      j["overlays"].push_back({{"overlay", ov.string()}, {"unreadable", e.what()}, {"clean", false}});
      ++dirty;
      continue;
    }
    std::size_t alive = static_cast<std::size_t>(std::count_if(r.natives.begin(), r.natives.end(), [](const NativeStatus& e) { return e.owner_alive; }));
    // A file it held and no longer lists that is not at the original its hold recorded is its too.
    bool orphan_dirty = std::any_of(orphans.begin(), orphans.end(), [&](const OrphanHold& o) {
      return o.hold.overlay == ov && o.file_state != "original" && o.file_state != "unknown";
    });
    bool clean = r.clean() && !orphan_dirty;
    dirty += clean ? 0 : 1;
    out_line(r.overlay.string() + "  native " + std::to_string(r.natives.size()) + "  python " + std::to_string(r.pythons.size()) +
             "  owners alive " + std::to_string(alive) + "  not original " + std::to_string(r.not_original()) + "  untracked " +
             std::to_string(r.untracked_as_built()) + "  processes on patched code " +
             std::to_string(std::count_if(r.engagement.uses.begin(), r.engagement.uses.end(),
                                          [](const ArtifactUse& u) { return u.reverted || u.state == MapState::patched; })) +
             (clean ? "  clean" : "  NOT clean"));
    j["overlays"].push_back(status_json(r));
    j["overlays"].back()["owners_alive"] = alive;
    if (orphan_dirty) j["overlays"].back()["clean"] = false;
  }
  j["orphan_holds"] = nlohmann::json::array();
  for (const auto& o : orphans) {
    j["orphan_holds"].push_back(orphan_json(o));
    if (o.file_state != "original") out_line("  " + o.path.string() + ": held by " + o.describe());
  }
  out_line("status: " + std::to_string(j["overlays"].size()) + " overlay(s) known to the holds registry" +
           (gone ? " (" + std::to_string(gone) + " vanished)" : std::string()) + ", " + std::to_string(dirty) + " not clean");
  if (!check_clean || dirty == 0) return kOk;
  j["error"] = std::to_string(dirty) + " overlay(s) not clean";
  err_line("status", j["error"]);
  return kFailed;
}

// `which PATH`: the overlay, entry and patch that changed an installed file; exit 1 when none.
// A holder that vanished (deleted or moved) is named too, with what the file holds now.
int run_which(Disk& disk, const std::string& path) {
  HoldRegistry holds(disk, HoldRegistry::default_state_dir());
  auto hits = which_changed(disk, holds.overlays(), path);
  auto& j = result();
  j["path"] = absolute_normal(path).string();
  j["changed_by"] = nlohmann::json::array();
  for (const auto& h : hits) {
    out_line(j["path"].get<std::string>() + ": overlay " + h.overlay.string() + "  entry " + h.entry +
             (h.patch_id ? "  patch " + *h.patch_id : "") + "  (" + h.kind + ", " + h.state + ")");
    j["changed_by"].push_back({{"overlay", h.overlay.string()}, {"entry", h.entry},
                               {"patch_id", h.patch_id ? nlohmann::json(*h.patch_id) : nlohmann::json(nullptr)},
                               {"kind", h.kind}, {"state", h.state}});
  }
  std::optional<OrphanHold> orphan = holds.orphan_of(j["path"].get<std::string>());
  if (!orphan) {
    try {
      orphan = holds.orphan_of(disk.real_path(j["path"].get<std::string>()));
    } catch (const std::exception&) {
    }
  }
  j["orphan_hold"] = orphan ? orphan_json(*orphan) : nlohmann::json(nullptr);
  if (orphan) out_line(j["path"].get<std::string>() + ": held by " + orphan->describe());
  if (!hits.empty() || (orphan && orphan->file_state != "original")) return kOk;
  j["error"] = "no overlay known to the holds registry changed " + j["path"].get<std::string>();
  err_line("which", j["error"]);
  return kFailed;
}

int run_status(Disk& disk, const std::string& overlay, bool check_clean) {
  StatusReport r = overlay_status(disk, overlay);
  print_status_table(r);
  auto& j = result();
  j = status_json(r);
  if (!check_clean || r.clean()) return kOk;
  j["error"] = r.not_original() > 0 ? std::to_string(r.not_original()) + " tracked path(s) not at their original bytes"
              : r.untracked_as_built() > 0 ? std::to_string(r.untracked_as_built()) +
                                                 " untracked build output(s) may hold patched code (see `untracked rebuilt`)"
                                           : still_running_error(r.engagement);
  err_line("status", j["error"]);
  return kFailed;
}


}  // namespace

// The flags add-native and apply share: artifacts, caches, the build and its handling.
void add_build_flags(CLI::App* sub, AddNativeFlags& f) {
  sub->add_option("--artifact", f.artifacts, "Build output to back up and verify (repeatable)");
  sub->add_option("--invalidate-cache", f.caches, "Cache directory to snapshot and clear (repeatable)");
  sub->add_option("--build-cmd", f.req.build_cmds, "Build command, split like sh, never run by one (repeatable)");
  sub->add_option("--build-cwd", f.build_cwd, "Working directory of the build (default: current)");
  sub->add_option("--cache-snapshot", f.cache_snapshot,
                  "How caches are kept: auto (move when on the overlay's filesystem, else aside when the cache's "
                  "parent is writable, else tar), move (into the overlay), aside (renamed beside itself), tar")
      ->check(CLI::IsMember({"auto", "move", "aside", "tar"}));
  sub->add_flag("--force", f.req.force, "Patch files another overlay still holds (stacking its in-place changes)");
  sub->add_option("--owner-pid", f.owner_pid, "Process owning this run; gc-stale spares it while alive (env OVERLAY_OWNER_PID)");
  sub->add_option("--build-timeout", f.build_timeout, "Kill the build's process group after SECONDS (SIGTERM, SIGKILL 5 s later)");
  sub->add_flag("--revert-on-failure", f.revert_on_failure, "Undo the entry at once when the build fails, times out or is interrupted");
}

namespace {

}  // namespace

void add_native_commands(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want) {
  Disk& disk = cli_disk();

  if (want("add-native")) {
    auto f = std::make_shared<AddNativeFlags>();
    auto* add = app.add_subcommand("add-native", "Back up, swap a compiled source in place, invalidate caches, rebuild");
    add->add_option("--overlay", f->overlay, "Overlay directory (created if missing)")->required();
    add->add_option("--target", f->targets, "Installed source file to replace (repeatable; not with --patch-root)");
    add->add_option("--patched-file", f->patched, "Replacement for the matching --target (repeatable)");
    add->add_option("--patch", f->patch, "Unified diff: for the single --target, or with --patch-root for every file it names");
    add->add_option("--patch-root", f->patch_root, "Apply --patch as a multi-file diff relative to DIR (files it creates or deletes are tracked)");
    f->strip_opt = add->add_option("-p,--strip", f->strip, "With --patch-root: strip N leading path components (default 1, as git writes diffs)")
        ->check(CLI::Range(0, 64));
    add_build_flags(add, *f);
    add->callback([&run, &disk, f, &g] { run = [&disk, f, &g] { return guarded("add-native", [&] { return run_add_native(disk, *f, g); }); }; });
  }

  if (want("apply")) {
    auto a = std::make_shared<ApplyFlags>();
    auto* ap = app.add_subcommand("apply", "Apply one diff routed per file: compiled files in place (one native entry), .py files as Python overlays");
    ap->add_option("--overlay", a->overlay, "Overlay directory (created if missing)")->required();
    ap->add_option("--patch", a->patch, "Unified diff (may touch compiled and .py files)")->required();
    ap->add_option("--patch-root", a->patch_root, "Directory the diff's paths are relative to")->required();
    a->strip_opt = ap->add_option("-p,--strip", a->strip, "Strip N leading path components (default 1, as git writes diffs)")
        ->check(CLI::Range(0, 64));
    ap->add_option("--python-root", a->python_root, "Directory .py paths are module names under (default: --patch-root)");
    add_build_flags(ap, *a);
    ap->callback([&run, &disk, a, &g] { run = [&disk, a, &g] { return guarded("apply", [&] { return run_apply(disk, *a, g); }); }; });
  }

  if (want("verify-native")) {
    auto overlay_v = std::make_shared<std::string>();
    auto* ver = app.add_subcommand("verify-native", "Check that every tracked artifact was rebuilt");
    auto trust_v = std::make_shared<bool>(false);
    ver->add_option("--overlay", *overlay_v, "Overlay directory")->required();
    add_trust_flag(ver, *trust_v);
    ver->callback([&run, &disk, overlay_v, trust_v] {
      run = [&disk, overlay_v, trust_v] {
        return guarded("verify-native", [&] {
          check_trusted(disk, *overlay_v, *trust_v);
          return run_verify(disk, *overlay_v);
        });
      };
    });
  }

  if (want("revert")) {
    auto overlay_r = std::make_shared<std::string>();
    auto dry_r = std::make_shared<bool>(false);
    auto patch_r = std::make_shared<std::string>();
    auto* rev = app.add_subcommand("revert", "Restore every native change of an overlay, byte-exact");
    rev->add_option("--overlay", *overlay_r, "Overlay directory")->required();
    rev->add_flag("--dry-run", *dry_r, "Say what would be restored; change nothing");
    rev->add_option("--patch-id", *patch_r, "Undo only the entries of this patch (from `apply`), its Python entries included");
    auto trust_r = std::make_shared<bool>(false);
    add_trust_flag(rev, *trust_r);
    rev->callback([&run, &disk, overlay_r, dry_r, patch_r, trust_r, &g] {
      run = [&disk, overlay_r, dry_r, patch_r, trust_r, &g] {
        return guarded("revert", [&] {
          check_trusted(disk, *overlay_r, *trust_r);
          return run_revert(disk, *overlay_r, *dry_r, *patch_r, g);
        });
      };
    });
  }

  if (want("status", "list")) {
    auto overlay_s = std::make_shared<std::string>();
    auto clean_s = std::make_shared<bool>(false);
    auto all_s = std::make_shared<bool>(false);
    auto* st = app.add_subcommand("status", "Show every entry and whether each tracked file is original, patched, rebuilt, drifted or missing");
    st->alias("list");
    auto* ov_opt = st->add_option("--overlay", *overlay_s, "Overlay directory");
    auto* all_opt = st->add_flag("--all", *all_s, "One line for every overlay the holds registry knows on this machine");
    ov_opt->excludes(all_opt);
    st->add_flag("--check-clean", *clean_s, "Exit 1 unless every tracked file is at its original bytes");
    auto trust_s = std::make_shared<bool>(false);
    add_trust_flag(st, *trust_s);
    st->callback([&run, &disk, overlay_s, clean_s, all_s, trust_s] {
      run = [&disk, overlay_s, clean_s, all_s, trust_s] {
        return guarded("status", [&] {
          if (*all_s) return run_status_all(disk, *clean_s);
          if (overlay_s->empty()) throw Error("pass --overlay O, or --all");
          check_trusted(disk, *overlay_s, *trust_s);
          return run_status(disk, *overlay_s, *clean_s);
        });
      };
    });
  }

  if (want("which")) {
    auto path = std::make_shared<std::string>();
    auto* wh = app.add_subcommand("which", "Which overlay (entry, patch) changed an installed file, like dpkg -S; read-only");
    wh->add_option("PATH", *path, "Installed file")->required();
    wh->callback([&run, &disk, path] { run = [&disk, path] { return guarded("which", [&] { return run_which(disk, *path); }); }; });
  }

  if (want("gc-stale")) {
    auto root = std::make_shared<std::string>();
    auto dry_g = std::make_shared<bool>(false);
    auto min_age = std::make_shared<std::string>();
    auto* gc = app.add_subcommand("gc-stale", "Revert every overlay under ROOT whose native changes are still applied");
    gc->add_option("--root", *root, "Directory to search")->required();
    gc->add_flag("--dry-run", *dry_g, "List what would be reverted; change nothing");
    gc->add_option("--min-age", *min_age, "Skip overlays changed more recently than DURATION (90, 15m, 2h, 1d)");
    gc->callback([&run, &disk, root, dry_g, min_age, &g] {
      run = [&disk, root, dry_g, min_age, &g] { return guarded("gc-stale", [&] { return run_gc(disk, *root, *dry_g, *min_age, g); }); };
    });
  }
}

}  // namespace overlay::cli
