// verify-native, revert and gc-stale: the verbs that judge and undo what an overlay applied. Each
// parses its flags, asks the library and prints its report (the JSON the reports write themselves).
#include <algorithm>
#include <cstdlib>
#include <memory>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/gc.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/native.hpp"
#include "overlay/words.hpp"

#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {

std::string print_verify_items(const VerifyReport& r) {
  std::vector<std::string> lines = verify_lines(r);
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) out_line(lines[i]);
  return lines.back();
}

namespace {

int run_verify(Disk& disk, const std::string& overlay) {
  VerifyReport r = verify_native(disk, overlay);
  out_line(print_verify_items(r));
  auto& j = result();
  j["overlay"] = absolute_normal(overlay).string();
  j.update(r.to_json());
  return r.ok() ? kOk : kUsage;
}

// "90", "90s", "15m", "2h", "1d" -> seconds.
double parse_duration(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
  if (end == text.c_str() || scale < 0 || v < 0) throw Error("bad duration: " + text + " (use e.g. 90, 15m, 2h, 1d)");
  return v * scale;
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

struct RevertFlags {
  std::string overlay, patch_id, entry;
  bool dry_run = false, missing_ok = false, with_layers = false, adopt = false, trust = false;
};

// --entry ID names an entry this overlay records (replay and fold keep an entry's id: a caller
// carries it from the keep to its revert).
void require_entry(Disk& disk, const std::string& overlay, const std::string& id) {
  auto m = load_manifest(disk, overlay);
  if (!m || std::none_of(m->natives.begin(), m->natives.end(), [&](const NativeEntry& e) { return e.id == id; }))
    throw Error("no entry " + id + " in " + absolute_normal(overlay).string() + " (`overlay status` lists them)");
}

RevertOptions revert_options(Disk& disk, const RevertFlags& f, const Globals& g) {
  RevertOptions o;
  o.dry_run = f.dry_run;
  o.lock_timeout = g.lock_timeout;
  if (!f.patch_id.empty()) o.only_patch = f.patch_id;
  if (!f.entry.empty()) {
    require_entry(disk, f.overlay, f.entry);
    o.only_entry = f.entry;
  }
  o.missing_patch_ok = f.missing_ok;
  o.with_layers = f.with_layers;
  o.adopt = f.adopt;
  return o;
}

// The warnings of a revert that went ahead: processes still running replaced code, build outputs
// no entry tracks that may still hold patched code.
void warn_after_revert(const RevertReport& r) {
  for (const auto& x : r.still_running) err_line("revert", "warning: " + process_line(still_running_use(x)));
  for (const auto& u : r.untracked_left)
    err_line("revert", "warning: " + u.path + " was " + u.change + " by the build of entry " + u.entry +
                           ", is tracked by none and may hold patched code until the next build (" +
                           (u.build_cmds.empty() ? std::string("none recorded") : join_words(u.build_cmds.front())) +
                           ") regenerates it");
}

// What the revert gave each entry's files: their original mtimes, or dates of now, and why.
std::string times_line(const RevertReport::Times& t) {
  if (!t.original)
    return "sources dated now, build outputs a second back (" + t.why_fresh + "): the next build redoes them";
  if (!t.changed_since.empty())
    return "original mtimes back (" + t.changed_since +
           ", which its build read, changed since: the install's build may redo what depends on it)";
  if (t.rewritten.empty())
    return "original mtimes back (the install's build has nothing more to redo than before the apply)";
  return "original mtimes back (nothing to recompile; the build may relink what depends on " +
         std::to_string(t.rewritten.size()) + " untracked output(s) it rewrote without patched code, e.g. " +
         t.rewritten.front() + ")";
}

// The closing stdout line of a revert that succeeded.
std::string outcome_line(const RevertFlags& f, const RevertReport& r) {
  std::string where = fs::absolute(f.overlay).lexically_normal().string();
  if (!f.patch_id.empty() && f.missing_ok && r.entries_reverted == 0 && r.modules_removed == 0 && r.actions.empty())
    return "revert: no entry of patch " + f.patch_id + " in " + where + "; nothing to do";
  if (!f.patch_id.empty() && !f.dry_run)
    return "revert: removed patch " + f.patch_id + " (" + std::to_string(r.entries_reverted) + " native, " +
           std::to_string(r.modules_removed) + " python) from " + where;
  if (!f.entry.empty() && !f.dry_run) return "revert: removed entry " + f.entry + " from " + where;
  return std::string(f.dry_run ? "revert: dry run; nothing changed in " : "revert: restored native changes in ") +
         where;
}

// A failed revert: its problems on stderr, the error in the JSON, exit 1.
int revert_failed(const std::vector<RevertProblem>& problems, const char* as, const std::string& error) {
  for (const auto& p : problems) err_line("revert", as + p.path + ": " + p.reason);
  result()["error"] = error;
  err_line("revert", error);
  return kFailed;
}

int run_revert(Disk& disk, const RevertFlags& f, const Globals& g) {
  RevertOptions o = revert_options(disk, f, g);
  std::unique_ptr<InFlight> in_flight = f.dry_run ? nullptr : mark_reverting(disk, f.overlay);
  RevertReport r = revert_natives(disk, f.overlay, o);
  auto& j = result();
  j.update(r.to_json());
  j["overlay"] = absolute_normal(f.overlay).string();
  j["dry_run"] = f.dry_run;
  if (!f.patch_id.empty()) j["patch_id"] = f.patch_id;
  if (!f.entry.empty()) j["entry"] = f.entry;
  for (const auto& l : r.layers_reverted) err_line("revert", "reverted layer " + l + " first (--with-layers)");
  for (const auto& n : r.notes) err_line("revert", "note: " + n);
  if (!r.blocked_by.empty())
    return revert_failed(r.problems, "refused: ",
                         "refused: " + std::to_string(r.blocked_by.size()) +
                             " layer(s) stacked on this overlay's changes; nothing changed");
  warn_after_revert(r);
  if (!r.had_manifest) {
    out_line("revert: no manifest; nothing to do");
    return kOk;
  }
  if (f.dry_run)
    for (const auto& a : r.actions)
      out_line("revert: would " + (a.action == "unchanged" ? std::string("leave (already original)") : a.action) + " " +
               a.path);
  if (!r.ok())
    return revert_failed(
        r.problems, "cannot restore ",
        std::to_string(r.problems.size()) + " item(s) not restored; their entries stay in the manifest");
  if (!f.dry_run)
    for (const auto& t : r.times) err_line("revert", "entry " + t.entry + ": " + times_line(t));
  out_line(outcome_line(f, r));
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
      case GcOutcome::would_revert:
        out_line("gc-stale: would revert " + i.overlay.string());
        break;
      case GcOutcome::skipped:
        err_line("gc-stale", "skipped " + i.overlay.string() + ": " + i.reason);
        break;
      case GcOutcome::failed:
        err_line("gc-stale", "failed " + i.overlay.string() + ": " + i.reason);
        break;
    }
  }
  std::size_t n = dry_run ? r.count(GcOutcome::would_revert) : r.count(GcOutcome::reverted);
  j["reverted"] = dry_run ? 0 : n;
  j["would_revert"] = dry_run ? n : 0;
  out_line(std::string("gc-stale: ") + (dry_run ? "would revert " : "reverted ") + std::to_string(n) +
           " stale native overlay(s) under " + fs::absolute(root).lexically_normal().string());
  if (r.count(GcOutcome::failed))
    j["error"] = std::to_string(r.count(GcOutcome::failed)) + " overlay(s) could not be reverted";
  return r.count(GcOutcome::failed) ? kFailed : kOk;
}

}  // namespace

Handler verify_native_command(CLI::App& sub, const Globals&) {
  auto overlay = std::make_shared<std::string>();
  auto trust = std::make_shared<bool>(false);
  sub.add_option("--overlay", *overlay, "Overlay directory")->required();
  add_trust_flag(sub, *trust);
  return [overlay, trust] {
    check_trusted(cli_disk(), *overlay, *trust);
    return run_verify(cli_disk(), *overlay);
  };
}

Handler revert_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<RevertFlags>();
  sub.add_option("--overlay", f->overlay, "Overlay directory")->required();
  sub.add_flag("--dry-run", f->dry_run, "Say what would be restored; change nothing");
  sub.add_flag("--with-layers", f->with_layers,
               "Revert the layers stacked on this overlay's changes (add-native --over) first, top-down; without it "
               "a layer above refuses the revert");
  auto* patch_opt = sub.add_option(
      "--patch-id", f->patch_id,
      "Undo only the entries of this patch (from `apply`, or a fleet step's id), its Python entries included");
  sub.add_option("--entry", f->entry,
                 "Undo only this native entry (its id, as status, fold and replay keep it; its patch's Python "
                 "entries with it); refused while a later entry of this overlay changes its files again")
      ->excludes(patch_opt);
  sub.add_flag("--missing-ok", f->missing_ok,
               "With --patch-id: no entry of that patch here is nothing to do, not an error")
      ->needs(patch_opt);
  sub.add_flag(
      "--adopt", f->adopt,
      "Take this overlay as the one that made its changes though it is a copy (cp -a, an archive restored) of an "
      "overlay that is gone for good");
  add_trust_flag(sub, f->trust);
  return [f, &g] {
    check_trusted(cli_disk(), f->overlay, f->trust);
    return run_revert(cli_disk(), *f, g);
  };
}

Handler gc_stale_command(CLI::App& sub, const Globals& g) {
  auto root = std::make_shared<std::string>();
  auto dry = std::make_shared<bool>(false);
  auto min_age = std::make_shared<std::string>();
  sub.add_option("--root", *root, "Directory to search")->required();
  sub.add_flag("--dry-run", *dry, "List what would be reverted; change nothing");
  sub.add_option("--min-age", *min_age, "Skip overlays changed more recently than DURATION (90, 15m, 2h, 1d)");
  return [root, dry, min_age, &g] { return run_gc(cli_disk(), *root, *dry, *min_age, g); };
}

}  // namespace overlay::cli
