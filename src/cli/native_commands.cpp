#include <cstdlib>
#include <memory>

#include "commands.hpp"
#include "output.hpp"
#include "overlay/error.hpp"
#include "overlay/gc.hpp"
#include "overlay/native.hpp"
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

struct AddNativeFlags {
  AddNativeRequest req;
  std::string overlay;
  std::vector<std::string> targets, patched, artifacts, caches;
  std::string patch, build_cwd;
  pid_t owner_pid = 0;
  double build_timeout = 0;
  std::string cache_snapshot = "auto";
};

int run_add_native(Disk& disk, AddNativeFlags& f, const Globals& g) {
  AddNativeRequest& r = f.req;
  r.overlay = f.overlay;
  r.targets.assign(f.targets.begin(), f.targets.end());
  r.patched_files.assign(f.patched.begin(), f.patched.end());
  if (!f.patch.empty()) r.patch = f.patch;
  r.artifacts.assign(f.artifacts.begin(), f.artifacts.end());
  r.caches.assign(f.caches.begin(), f.caches.end());
  if (!f.build_cwd.empty()) r.build_cwd = f.build_cwd;
  if (f.owner_pid > 0) {
    r.owner_pid = f.owner_pid;
  } else if (const char* env = std::getenv("OVERLAY_OWNER_PID"); env && *env) {
    r.owner_pid = static_cast<pid_t>(std::atol(env));
  }
  if (f.build_timeout > 0) r.build_timeout = f.build_timeout;
  r.cache_snapshot = f.cache_snapshot == "move"  ? CacheSnapshot::move
                     : f.cache_snapshot == "tar" ? CacheSnapshot::tar
                                                 : CacheSnapshot::automatic;
  r.lock_timeout = g.lock_timeout;

  NativePlan plan = plan_add_native(disk, r);
  AppliedEntry entry = apply_native(disk, plan);
  out_line("OVERLAY_DIR=" + plan.overlay.string());
  std::string summary = "add-native " + plan.swaps.front().target.string();
  for (std::size_t i = 1; i < plan.swaps.size(); ++i) summary += " " + plan.swaps[i].target.string();
  out_line(summary + "  (sources=" + std::to_string(entry.sources) + " artifacts=" + std::to_string(entry.artifacts) +
           " caches=" + std::to_string(entry.caches) + " build=" + (plan.build_cmds.empty() ? "no" : "yes") + ")");
  if (plan.build_cmds.empty()) return kOk;
  BuildOutcome b = run_native_build(plan, entry);
  if (b.ok) return kOk;
  err_line("add-native", "build failed (" + join_words(b.failed_cmd) + ") rc=" + std::to_string(b.result.rc()) +
                             (b.result.exec_error.empty() ? "" : " (" + b.result.exec_error + ")") +
                             (b.result.timed_out ? " (timed out)" : "") + "; log: " + entry.log_path.string() +
                             "; the entry stays recorded: run `overlay revert --overlay " + plan.overlay.string() + "`");
  return b.result.forwarded_signal ? kInterrupted : kFailed;
}

int run_verify(Disk& disk, const std::string& overlay) {
  VerifyReport r = verify_native(disk, overlay);
  for (const auto& i : r.items)
    if (i.state != ArtifactState::rebuilt && i.state != ArtifactState::created)
      out_line(std::string("FRESH_BUILD_FAIL ") + to_string(i.state) + " " + i.path);
  out_line(std::string(r.ok() ? "FRESH_BUILD_OK" : "FRESH_BUILD_FAIL") + " (checked " + std::to_string(r.items.size()) + ")");
  return r.ok() ? kOk : kUsage;
}

int run_revert(Disk& disk, const std::string& overlay, bool dry_run, const Globals& g) {
  RevertReport r = revert_natives(disk, overlay, RevertOptions{dry_run, g.lock_timeout, {}});
  if (!r.had_manifest) {
    out_line("revert: no manifest; nothing to do");
    return kOk;
  }
  if (dry_run) {
    for (const auto& a : r.actions) out_line("revert: would " + (a.action == "unchanged" ? std::string("leave (already original)") : a.action) + " " + a.path);
  }
  for (const auto& p : r.problems) err_line("revert", "cannot restore " + p.path + ": " + p.reason);
  if (!r.ok()) {
    err_line("revert", std::to_string(r.problems.size()) + " item(s) not restored; their entries stay in the manifest");
    return kFailed;
  }
  out_line(std::string(dry_run ? "revert: dry run; nothing changed in " : "revert: restored native changes in ") +
           fs::absolute(overlay).lexically_normal().string());
  return kOk;
}

int run_gc(Disk& disk, const std::string& root, bool dry_run, const std::string& min_age, const Globals& g) {
  GcOptions o;
  o.dry_run = dry_run;
  o.lock_timeout = g.lock_timeout;
  if (!min_age.empty()) o.min_age_s = parse_duration(min_age);
  GcReport r = gc_stale(disk, root, o);
  for (const auto& i : r.items) {
    switch (i.outcome) {
      case GcOutcome::reverted: out_line("gc-stale: reverted " + i.overlay.string()); break;
      case GcOutcome::would_revert: out_line("gc-stale: would revert " + i.overlay.string()); break;
      case GcOutcome::skipped: err_line("gc-stale", "skipped " + i.overlay.string() + ": " + i.reason); break;
      case GcOutcome::failed: err_line("gc-stale", "failed " + i.overlay.string() + ": " + i.reason); break;
    }
  }
  std::size_t n = dry_run ? r.count(GcOutcome::would_revert) : r.count(GcOutcome::reverted);
  out_line(std::string("gc-stale: ") + (dry_run ? "would revert " : "reverted ") + std::to_string(n) +
           " stale native overlay(s) under " + fs::absolute(root).lexically_normal().string());
  return r.count(GcOutcome::failed) ? kFailed : kOk;
}

}  // namespace

void add_native_commands(CLI::App& app, const Globals& g, std::function<int()>& run) {
  Disk& disk = real_disk();

  auto f = std::make_shared<AddNativeFlags>();
  auto* add = app.add_subcommand("add-native", "Back up, swap a compiled source in place, invalidate caches, rebuild");
  add->add_option("--overlay", f->overlay, "Overlay directory (created if missing)")->required();
  add->add_option("--target", f->targets, "Installed source file to replace (repeatable)")->required();
  add->add_option("--patched-file", f->patched, "Replacement for the matching --target (repeatable)");
  add->add_option("--patch", f->patch, "Unified diff to apply to the single --target");
  add->add_option("--artifact", f->artifacts, "Build output to back up and verify (repeatable)");
  add->add_option("--invalidate-cache", f->caches, "Cache directory to snapshot and clear (repeatable)");
  add->add_option("--build-cmd", f->req.build_cmds, "Build command, split like sh, never run by one (repeatable)");
  add->add_option("--build-cwd", f->build_cwd, "Working directory of the build (default: current)");
  add->add_option("--cache-snapshot", f->cache_snapshot,
                  "How caches are kept: auto (move when on the overlay's filesystem, else tar), move, tar")
      ->check(CLI::IsMember({"auto", "move", "tar"}));
  add->add_flag("--force", f->req.force, "Patch files another overlay still holds (stacking its in-place changes)");
  add->add_option("--owner-pid", f->owner_pid, "Process owning this run; gc-stale spares it while alive (env OVERLAY_OWNER_PID)");
  add->add_option("--build-timeout", f->build_timeout, "Kill the build's process group after SECONDS");
  add->callback([&run, &disk, f, &g] { run = [&disk, f, &g] { return guarded("add-native", [&] { return run_add_native(disk, *f, g); }); }; });

  auto overlay_v = std::make_shared<std::string>();
  auto* ver = app.add_subcommand("verify-native", "Check that every tracked artifact was rebuilt");
  ver->add_option("--overlay", *overlay_v, "Overlay directory")->required();
  ver->callback([&run, &disk, overlay_v] { run = [&disk, overlay_v] { return guarded("verify-native", [&] { return run_verify(disk, *overlay_v); }); }; });

  auto overlay_r = std::make_shared<std::string>();
  auto dry_r = std::make_shared<bool>(false);
  auto* rev = app.add_subcommand("revert", "Restore every native change of an overlay, byte-exact");
  rev->add_option("--overlay", *overlay_r, "Overlay directory")->required();
  rev->add_flag("--dry-run", *dry_r, "Say what would be restored; change nothing");
  rev->callback([&run, &disk, overlay_r, dry_r, &g] {
    run = [&disk, overlay_r, dry_r, &g] { return guarded("revert", [&] { return run_revert(disk, *overlay_r, *dry_r, g); }); };
  });

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

}  // namespace overlay::cli
