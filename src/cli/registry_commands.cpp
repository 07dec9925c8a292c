// status --all and which: what the holds registry knows of this machine's overlays — every one
// it names, and which of them changed an installed file; read-only, as text and as JSON.
#include <algorithm>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/status.hpp"

#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

// The files of `r` whose stack names a layer that vanished (deleted or moved) or whose layer
// below no longer records its bytes: one line each for `status --all`.
std::vector<std::string> broken_layers(const StatusReport& r) {
  std::vector<std::string> lines;
  for (const auto& e : r.natives)
    for (const auto& f : e.files) {
      bool broken = f.state == FileState::stranded ||
                    std::any_of(f.layers.begin(), f.layers.end(),
                                [](const StackLayer& l) { return l.state == RefState::vanished; });
      if (broken)
        lines.push_back("  " + f.path + ": " + to_string(f.state) + "; layers, bottom first: " +
                        describe_stack(f.layers) + (f.note.empty() ? "" : " (" + f.note + ")"));
    }
  return lines;
}

nlohmann::json orphan_json(const OrphanHold& o) {
  return {{"path", o.path.string()},
          {"overlay", o.hold.overlay.string()},
          {"vanished", o.vanished},
          {"file", o.file_state},
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

}  // namespace

// `status --all`: one line per overlay the holds registry knows, and one per hold whose holder
// vanished or no longer lists its file; read-only.
int run_status_all(Disk& disk, bool check_clean) {
  auto& j = result();
  j["overlays"] = nlohmann::json::array();
  HoldRegistry holds(disk, HoldRegistry::default_state_dir());
  std::vector<OrphanHold> orphans = holds.orphans();
  std::vector<OrphanCache> caches = holds.orphan_caches();
  std::vector<fs::path> known = holds.overlays();
  for (const auto& c : caches)  // a vanished overlay whose holds went, its caches still noted
    if (std::find(known.begin(), known.end(), c.overlay) == known.end()) known.push_back(c.overlay);
  std::size_t dirty = 0, gone = 0;
  for (const auto& ov : known) {
    if (vanished(disk, ov)) {
      // Known only by its holds and its noted caches: not clean while a file it held is not at
      // the original it recorded, or a cache it invalidated may hold its build.
      nlohmann::json held = nlohmann::json::array();
      nlohmann::json kept = nlohmann::json::array();
      bool clean = true;
      for (const auto& o : orphans)
        if (o.hold.overlay == ov) {
          held.push_back(orphan_json(o));
          clean = clean && o.file_state == "original";
        }
      for (const auto& c : caches)
        if (c.overlay == ov && c.dirty()) {
          kept.push_back({{"dir", c.dir.string()},
                          {"entry", c.entry},
                          {"aside", c.aside ? nlohmann::json(c.aside->string()) : nlohmann::json()},
                          {"why", c.describe()}});
          clean = false;
        }
      ++gone;
      dirty += clean ? 0 : 1;
      out_line(ov.string() + "  VANISHED (no manifest: deleted or moved)  holds " + std::to_string(held.size()) +
               " file(s)" + (kept.empty() ? "" : ", " + std::to_string(kept.size()) + " cache dir(s)") +
               (clean ? "  clean" : "  NOT clean"));
      for (const auto& c : caches)
        if (c.overlay == ov && c.dirty()) out_line("  " + c.describe());
      j["overlays"].push_back(
          {{"overlay", ov.string()}, {"vanished", true}, {"clean", clean}, {"held", held}, {"caches", kept}});
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
    std::size_t alive = static_cast<std::size_t>(
        std::count_if(r.natives.begin(), r.natives.end(), [](const NativeStatus& e) { return e.owner_alive; }));
    // A file it held and no longer lists that is not at the original its hold recorded is its too.
    bool orphan_dirty = std::any_of(orphans.begin(), orphans.end(), [&](const OrphanHold& o) {
      return o.hold.overlay == ov && o.file_state != "original" && o.file_state != "unknown";
    });
    bool clean = r.clean() && !orphan_dirty;
    dirty += clean ? 0 : 1;
    out_line(
        r.overlay.string() + "  native " + std::to_string(r.natives.size()) + "  python " +
        std::to_string(r.pythons.size()) + "  owners alive " + std::to_string(alive) + "  not original " +
        std::to_string(r.not_original()) + "  untracked " + std::to_string(r.untracked_as_built()) +
        (r.litter_left.empty() ? "" : "  litter " + std::to_string(r.litter_left.size())) +
        "  processes on patched code " +
        std::to_string(std::count_if(r.engagement.uses.begin(), r.engagement.uses.end(),
                                     [](const ArtifactUse& u) { return u.reverted || u.state == MapState::patched; })) +
        (clean ? "  clean" : "  NOT clean"));
    for (const auto& line : broken_layers(r)) out_line(line);
    j["overlays"].push_back(r.to_json());
    j["overlays"].back()["owners_alive"] = alive;
    if (orphan_dirty) j["overlays"].back()["clean"] = false;
  }
  j["orphan_holds"] = nlohmann::json::array();
  for (const auto& o : orphans) {
    j["orphan_holds"].push_back(orphan_json(o));
    if (o.file_state != "original") out_line("  " + o.path.string() + ": held by " + o.describe());
  }
  out_line("status: " + std::to_string(j["overlays"].size()) + " overlay(s) known to the holds registry" +
           (gone ? " (" + std::to_string(gone) + " vanished)" : std::string()) + ", " + std::to_string(dirty) +
           " not clean");
  if (!check_clean || dirty == 0) return kOk;
  j["error"] = std::to_string(dirty) + " overlay(s) not clean";
  err_line("status", j["error"]);
  return kFailed;
}

namespace {

// `which PATH`: the overlay, entry and patch that changed an installed file; exit 1 when none.
// A holder that vanished (deleted or moved) is named too, with what the file holds now.
int run_which(Disk& disk, const std::string& path) {
  HoldRegistry holds(disk, HoldRegistry::default_state_dir());
  auto hits = which_changed(disk, holds.overlays(), path);
  auto& j = result();
  j["path"] = absolute_normal(path).string();
  j["changed_by"] = nlohmann::json::array();
  const FileStack* stack = nullptr;
  for (const auto& h : hits) {
    out_line(j["path"].get<std::string>() + ": overlay " + h.overlay.string() + "  entry " + h.entry +
             (h.patch_id ? "  patch " + *h.patch_id : "") + "  (" + h.kind + ", " + h.state + ")");
    if (!h.layers.empty() && (stack == nullptr || h.layers.size() > stack->size())) stack = &h.layers;
    j["changed_by"].push_back({{"overlay", h.overlay.string()},
                               {"entry", h.entry},
                               {"patch_id", h.patch_id ? nlohmann::json(*h.patch_id) : nlohmann::json(nullptr)},
                               {"kind", h.kind},
                               {"state", h.state}});
  }
  j["layers"] = stack != nullptr ? layers_json(*stack) : nlohmann::json::array();
  if (stack != nullptr) out_line(j["path"].get<std::string>() + ": layers, bottom first: " + describe_stack(*stack));
  std::optional<OrphanHold> orphan = holds.orphan_of(j["path"].get<std::string>());
  if (!orphan) {
    best_effort("a holder that vanished is not named for a path that cannot be resolved",
                [&] { orphan = holds.orphan_of(disk.real_path(j["path"].get<std::string>())); });
  }
  j["orphan_hold"] = orphan ? orphan_json(*orphan) : nlohmann::json(nullptr);
  if (orphan) out_line(j["path"].get<std::string>() + ": held by " + orphan->describe());
  if (!hits.empty() || (orphan && orphan->file_state != "original")) return kOk;
  j["error"] = "no overlay known to the holds registry changed " + j["path"].get<std::string>();
  err_line("which", j["error"]);
  return kFailed;
}

}  // namespace

Handler which_command(CLI::App& sub, const Globals&) {
  auto path = std::make_shared<std::string>();
  sub.add_option("PATH", *path, "Installed file")->required();
  return [path] { return run_which(cli_disk(), *path); };
}

}  // namespace overlay::cli
