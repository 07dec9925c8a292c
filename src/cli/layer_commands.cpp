// The optimisation loop's verbs beyond the A/B step: fold (accept a candidate into the overlay of
// accepted changes, no build), export (the accepted changes as a bundle), replay (a bundle applied
// to an install, built and verified).
#include <cstdlib>
#include <memory>

#include "overlay/bundle.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/fold.hpp"
#include "overlay/lock.hpp"
#include "overlay/words.hpp"

#include "commands.hpp"
#include "native_flags.hpp"
#include "output.hpp"

namespace overlay::cli {

Handler fold_command(CLI::App& sub, const Globals& g) {
  auto from = std::make_shared<std::string>();
  auto into = std::make_shared<std::string>();
  auto dry = std::make_shared<bool>(false);
  sub.add_option("--from", *from, "The candidate's overlay: its native entries move (left with none)")->required();
  sub.add_option("--into", *into,
                 "The overlay of accepted changes (created if missing): it keeps every pristine original")
      ->required();
  sub.add_flag("--dry-run", *dry, "Say what would move and merge; change nothing");
  return [from, into, dry, &g] {
    FoldRequest req{*from, *into, g.lock_timeout, {}, *dry};
    FoldReport r = fold_overlay(cli_disk(), req);
    auto& j = result();
    j["from"] = absolute_normal(*from).string();
    j["into"] = absolute_normal(*into).string();
    j["dry_run"] = *dry;
    j["fold"] = r.fold_id;
    j["entries"] = r.entries;
    j["merged"] = r.merged;
    j["moved"] = r.moved;
    j["moved_entries"] = r.moved_entries;
    j["backups_dropped"] = r.backups_dropped;
    j["outputs_merged"] = r.outputs_merged;
    j["outputs_moved"] = r.outputs_moved;
    j["finished_interrupted"] = r.finished_interrupted;
    if (r.finished_interrupted) {
      out_line("fold: " + j["from"].get<std::string>() + " is folded into " + j["into"].get<std::string>() + " (" +
               (r.fold_id.empty() ? std::string("its entries moved there") : "fold " + r.fold_id) + ", " +
               std::to_string(r.entries.size()) + " entr" + (r.entries.size() == 1 ? "y" : "ies") +
               "); nothing more to fold");
      return int{kOk};
    }
    for (const auto& p : r.merged)
      out_line("fold: merged " + p + "  (" + j["into"].get<std::string>() + " keeps its original)");
    for (const auto& p : r.moved) out_line("fold: moved  " + p);
    out_line(std::string(*dry ? "fold: dry run; would fold " : "fold: folded ") + std::to_string(r.entries.size()) +
             " entr" + (r.entries.size() == 1 ? "y" : "ies") + " of " + j["from"].get<std::string>() + " into " +
             j["into"].get<std::string>() + " (" + std::to_string(r.merged.size()) + " file(s) merged, " +
             std::to_string(r.moved.size()) + " moved, " + std::to_string(r.outputs_merged.size()) +
             " build output(s) merged, " + std::to_string(r.outputs_moved.size()) + " moved, no build)");
    return int{kOk};
  };
}

Handler export_command(CLI::App& sub, const Globals&) {
  auto overlay = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto root = std::make_shared<std::string>();
  sub.add_option("--overlay", *overlay, "The overlay whose native changes to export (applied, as they are now)")
      ->required();
  sub.add_option("--out", *out, "The bundle directory to write (must not exist)")->required();
  sub.add_option("--root", *root,
                 "Paths are written relative to this install root (default: the deepest directory holding them)");
  return [overlay, out, root] {
    std::optional<fs::path> r;
    if (!root->empty()) r = *root;
    ExportReport rep = export_bundle(cli_disk(), *overlay, *out, r);
    auto& j = result();
    j["overlay"] = absolute_normal(*overlay).string();
    j["bundle"] = rep.out.string();
    j["root"] = rep.root.string();
    j["entries"] = rep.entries;
    j["files"] = rep.files;
    j["notes"] = rep.notes;
    for (const auto& n : rep.notes) err_line("export", n);
    out_line("export: " + std::to_string(rep.entries) + " entr" + (rep.entries == 1 ? "y" : "ies") + ", " +
             std::to_string(rep.files) + " file(s) -> " + rep.out.string() + "  (root " + rep.root.string() + ")");
    return int{kOk};
  };
}

namespace {

struct ReplayFlags {
  std::string bundle, overlay, root, cache_snapshot = "auto";
  pid_t owner_pid = 0;
  double build_timeout = 0;
  bool revert_on_failure = false, dry_run = false;
};

int run_replay(const ReplayFlags& f, const Globals& g) {
  ReplayRequest req;
  req.bundle = f.bundle;
  if (!f.root.empty()) req.root = f.root;
  req.base.overlay = f.overlay;
  req.base.lock_timeout = g.lock_timeout;
  if (f.build_timeout > 0) req.base.build_timeout = f.build_timeout;
  if (f.owner_pid > 0)
    req.base.owner_pid = f.owner_pid;
  else if (const char* env = std::getenv("OVERLAY_OWNER_PID"); env && *env)
    req.base.owner_pid = static_cast<pid_t>(std::atol(env));
  req.base.cache_snapshot = f.cache_snapshot == "move"    ? CacheSnapshot::move
                            : f.cache_snapshot == "aside" ? CacheSnapshot::aside
                            : f.cache_snapshot == "tar"   ? CacheSnapshot::tar
                                                          : CacheSnapshot::automatic;
  req.revert_on_failure = f.revert_on_failure;
  req.dry_run = f.dry_run;
  ReplayReport r = replay_bundle(cli_disk(), req);
  auto& j = result();
  j["bundle"] = absolute_normal(f.bundle).string();
  j["overlay"] = absolute_normal(f.overlay).string();
  j["root"] = r.root.string();
  j["checked_files"] = r.checked_files;
  j["dry_run"] = f.dry_run;
  j["entries"] = nlohmann::json::array();
  for (const auto& e : r.entries)
    j["entries"].push_back(
        {{"entry", e.applied.id}, {"files", e.files}, {"build_ok", e.build.ok}, {"log", e.applied.log_path.string()}});
  if (f.dry_run) {
    out_line("replay: dry run; every one of " + std::to_string(r.checked_files) +
             " file(s) holds the bytes the bundle was made from under " + r.root.string());
    return kOk;
  }
  for (const auto& e : r.entries) {
    if (e.build.ok) continue;
    std::string why = "build failed (" + join_words(e.build.failed_cmd) +
                      ") rc=" + std::to_string(e.build.result.rc()) + "; log: " + e.applied.log_path.string();
    j["error"] = why;
    err_line("replay", why + (r.reverted ? "; --revert-on-failure: what it applied is reverted"
                                         : "; the entries stay recorded: run `overlay revert --overlay " +
                                               j["overlay"].get<std::string>() + "`"));
    return kFailed;
  }
  std::string token = print_verify_items(*r.verify);
  out_line(token);
  j["verify"] = token;
  if (!r.verify->ok()) {
    j["error"] = "FRESH_BUILD_FAIL: an artifact was not rebuilt";
    return kUsage;
  }
  out_line("OVERLAY_DIR=" + j["overlay"].get<std::string>());
  out_line("replay: " + std::to_string(r.entries.size()) + " entr" + (r.entries.size() == 1 ? "y" : "ies") +
           " applied from " + j["bundle"].get<std::string>() + " onto " + r.root.string() +
           " (revert with `overlay revert --overlay " + j["overlay"].get<std::string>() + "`)");
  return kOk;
}

}  // namespace

Handler replay_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<ReplayFlags>();
  sub.add_option("--bundle", f->bundle, "A bundle written by `overlay export`")->required();
  sub.add_option("--overlay", f->overlay, "The overlay to record the entries in (created if missing)")->required();
  sub.add_option("--root", f->root, "The install to apply it to (default: the root the bundle was made on)");
  sub.add_flag("--dry-run", f->dry_run, "Only check that every file holds the bytes the bundle was made from");
  sub.add_option("--owner-pid", f->owner_pid,
                 "Process owning this run; gc-stale spares it while alive (env OVERLAY_OWNER_PID)");
  sub.add_option("--build-timeout", f->build_timeout, "Kill a build's process group after SECONDS");
  sub.add_flag("--revert-on-failure", f->revert_on_failure, "Undo every entry it applied when a build fails");
  sub.add_option("--cache-snapshot", f->cache_snapshot, "How caches are kept: auto, move, aside, tar (as add-native)")
      ->check(CLI::IsMember({"auto", "move", "aside", "tar"}));
  return [f, &g] { return run_replay(*f, g); };
}

}  // namespace overlay::cli
