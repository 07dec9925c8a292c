#include "overlay/native_verify.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/manifest.hpp"
#include "overlay/pinned.hpp"

namespace overlay {

bool VerifyReport::ok() const {
  return std::all_of(items.begin(), items.end(), [](const VerifyItem& i) {
    return i.state == ArtifactState::rebuilt || i.state == ArtifactState::created;
  });
}

const char* to_string(ArtifactState s) {
  switch (s) {
    case ArtifactState::rebuilt:
      return "rebuilt";
    case ArtifactState::created:
      return "created";
    case ArtifactState::unchanged:
      return "unchanged";
    case ArtifactState::missing_after_build:
      return "missing-after-build";
    case ArtifactState::not_created:
      return "not-created";
    case ArtifactState::redirected:
      return "redirected";
    case ArtifactState::superseded:
      return "superseded";
  }
  return "?";
}

VerifyReport verify_native(DiskReader& disk, const fs::path& overlay_in) {
  fs::path overlay = absolute_normal(overlay_in);
  auto m = load_manifest(disk, overlay);
  if (!m) throw Error("no manifest in " + overlay.string());
  VerifyReport r;
  HoldIndex holds(disk, HoldIndex::default_state_dir());
  for (const auto& e : m->natives) {
    for (const auto& a : e.artifacts) {
      // Found by the claims checker (seed 2072967200): this overlay moved, the package reinstalled,
      // another candidate took the file and rebuilt it; "rebuilt" against our backup said
      // FRESH_BUILD_OK over the other candidate's build.
      if (auto other = holds.held_instead(a.path, overlay)) {
        r.items.push_back(
            {a.path, ArtifactState::superseded, "held by overlay " + other->string() + ", whose build it is"});
        continue;
      }
      // An artifact whose directory was swapped since add-native is judged nowhere else.
      std::string why = a.parent ? why_redirected(disk, *a.parent) : "";
      if (!why.empty()) {
        r.items.push_back({a.path, ArtifactState::redirected, why});
        continue;
      }
      fs::path at = pinned_path(disk, a.path, a.parent);
      FileInfo fi = disk.info(at, Follow::no);
      ArtifactState st;
      // A different size is a different file: no need to read it.
      bool same_size = !a.stamp || fi.size == a.stamp->size;
      if (a.existed)
        st = !fi.exists() ? ArtifactState::missing_after_build
             : (fi.type == FileType::regular && same_size && hash_file(disk, at) == a.sha256) ? ArtifactState::unchanged
                                                                                              : ArtifactState::rebuilt;
      else
        st = fi.exists() ? ArtifactState::created : ArtifactState::not_created;
      r.items.push_back({a.path, st, ""});
    }
  }
  return r;
}
nlohmann::json VerifyReport::to_json() const {
  nlohmann::json j = {{"result", ok() ? "FRESH_BUILD_OK" : "FRESH_BUILD_FAIL"}, {"artifacts", nlohmann::json::array()}};
  for (const auto& i : items) {
    j["artifacts"].push_back({{"path", i.path}, {"state", to_string(i.state)}});
    if (!i.why.empty()) j["artifacts"].back()["why"] = i.why;
  }
  if (!ok()) j["error"] = "FRESH_BUILD_FAIL: an artifact was not rebuilt";
  return j;
}

std::vector<std::string> verify_lines(const VerifyReport& r) {
  std::vector<std::string> lines;
  for (const auto& i : r.items)
    if (i.state != ArtifactState::rebuilt && i.state != ArtifactState::created)
      lines.push_back(std::string("FRESH_BUILD_FAIL ") + to_string(i.state) + " " + i.path +
                      (i.why.empty() ? "" : " (" + i.why + ")"));
  lines.push_back(std::string(r.ok() ? "FRESH_BUILD_OK" : "FRESH_BUILD_FAIL") + " (checked " +
                  std::to_string(r.items.size()) + ")");
  return lines;
}

}  // namespace overlay
