#include "overlay/trust.hpp"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/store.hpp"

namespace overlay {
namespace {

// Why `fi` (named `what`) is not ours to trust, or "".
std::string foreign(const FileInfo& fi, const std::string& what) {
  uid_t me = ::geteuid();
  if (fi.uid != me && fi.uid != 0) return what + " is owned by another user (uid " + std::to_string(fi.uid) + ")";
  if ((fi.mode & 022) != 0) return what + " is group- or world-writable";
  return "";
}

}  // namespace

std::string why_untrusted(Disk& disk, const fs::path& overlay) {
  FileInfo dir = disk.info(overlay, Follow::yes);
  if (dir.type != FileType::directory) return "";
  if (auto why = foreign(dir, "overlay directory " + overlay.string()); !why.empty()) return why;
  FileInfo m = disk.info(overlay / kManifestName, Follow::no);
  if (m.exists())
    if (auto why = foreign(m, "its manifest"); !why.empty()) return why;
  fs::path backups = overlay / kBackupDirName;
  FileInfo b = disk.info(backups, Follow::no);
  if (b.type != FileType::directory) return "";
  if (auto why = foreign(b, "its backup directory " + backups.string()); !why.empty()) return why;
  for (const auto& e : disk.list_dir(backups)) {
    FileInfo ei = disk.info(backups / e.name, Follow::no);
    if (auto why = foreign(ei, "its backup entry " + (backups / e.name).string()); !why.empty()) return why;
  }
  return "";
}

bool under_trusted_root(const fs::path& overlay) {
  const char* env = std::getenv("OVERLAY_TRUSTED_ROOTS");
  if (env == nullptr || *env == '\0') return false;
  fs::path ov = absolute_normal(overlay);
  std::stringstream roots(env);
  for (std::string root; std::getline(roots, root, ':');) {
    if (root.empty() || root[0] != '/') continue;
    auto rel = ov.lexically_relative(absolute_normal(root));
    if (!rel.empty() && *rel.begin() != "..") return true;
  }
  return false;
}

}  // namespace overlay
