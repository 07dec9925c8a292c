#include "overlay/trust.hpp"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
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

std::string why_untrusted(DiskReader& disk, const fs::path& overlay) {
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

std::string swappable_ancestor(DiskReader& disk, const fs::path& overlay) {
  uid_t me = ::geteuid();
  fs::path dir;
  for (const auto& part : overlay.parent_path()) {
    dir /= part;
    FileInfo fi = disk.info(dir, Follow::no);
    if (fi.type == FileType::symlink) return "directory " + dir.string() + " above it is a symlink";
    if (fi.type != FileType::directory) return "directory " + dir.string() + " above it is not a directory";
    if (fi.uid != me && fi.uid != 0)
      return "directory " + dir.string() + " above it is owned by another user (uid " + std::to_string(fi.uid) + ")";
    if ((fi.mode & 022) && !(fi.mode & S_ISVTX))
      return "directory " + dir.string() + " above it is group- or world-writable (another user could swap it)";
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

void refuse_unrevertable(Disk& disk, const fs::path& overlay, bool trust_owner) {
  if (trust_owner || under_trusted_root(overlay)) return;
  if (std::string why = why_untrusted(disk, overlay); !why.empty())
    throw Error(
        "refusing to record a change in overlay " + overlay.string() + ": " + why +
        ", so revert and gc-stale would refuse to undo it (chmod go-w it, or pass --trust-owner here and to revert)");
  if (std::string why = swappable_ancestor(disk, overlay); !why.empty())
    spdlog::warn("gc-stale will leave {} alone ({}): only `overlay revert` undoes it", overlay.string(), why);
}

}  // namespace overlay
