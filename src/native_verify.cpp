#include "overlay/native_verify.hpp"

#include <algorithm>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

bool VerifyReport::ok() const {
  return std::all_of(items.begin(), items.end(), [](const VerifyItem& i) {
    return i.state == ArtifactState::rebuilt || i.state == ArtifactState::created;
  });
}

const char* to_string(ArtifactState s) {
  switch (s) {
    case ArtifactState::rebuilt: return "rebuilt";
    case ArtifactState::created: return "created";
    case ArtifactState::unchanged: return "unchanged";
    case ArtifactState::missing_after_build: return "missing-after-build";
    case ArtifactState::not_created: return "not-created";
  }
  return "?";
}

VerifyReport verify_native(Disk& disk, const fs::path& overlay_in) {
  fs::path overlay = absolute_normal(overlay_in);
  auto m = load_manifest(disk, overlay);
  if (!m) throw Error("no manifest in " + overlay.string());
  VerifyReport r;
  for (const auto& e : m->natives) {
    for (const auto& a : e.artifacts) {
      FileInfo fi = disk.info(a.path, Follow::no);
      ArtifactState st;
      // A different size is a different file: no need to read it.
      bool same_size = !a.stamp || fi.size == a.stamp->size;
      if (a.existed)
        st = !fi.exists() ? ArtifactState::missing_after_build
             : (fi.type == FileType::regular && same_size && hash_file(disk, a.path) == *a.sha256) ? ArtifactState::unchanged
                                                                                                     : ArtifactState::rebuilt;
      else
        st = fi.exists() ? ArtifactState::created : ArtifactState::not_created;
      r.items.push_back({a.path, st});
    }
  }
  return r;
}
}  // namespace overlay
