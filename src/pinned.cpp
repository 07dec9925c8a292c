#include "overlay/pinned.hpp"

#include <iterator>

#include "overlay/error.hpp"

namespace overlay {

std::optional<PinnedDir> pin_parent(Disk& disk, const fs::path& p) {
  fs::path parent = p.parent_path();
  FileInfo fi = disk.info(parent, Follow::yes);
  if (fi.type != FileType::directory) return std::nullopt;
  return PinnedDir{disk.real_path(parent).string(), static_cast<std::uint64_t>(fi.dev), static_cast<std::uint64_t>(fi.ino)};
}

std::optional<PinnedDir> pin_below(Disk& disk, const fs::path& dir, const fs::path& p) {
  auto pin = pin_parent(disk, dir);
  if (pin) pin->below = (dir.filename() / p.lexically_relative(dir)).string();
  return pin;
}

std::string why_redirected(Disk& disk, const PinnedDir& pin) {
  const std::string changed = "its directory changed since add-native (";
  fs::path at;
  FileInfo fi;
  // Component by component, following nothing: a symlink anywhere on the way is a redirection.
  for (const auto& part : fs::path(pin.path)) {
    at /= part;
    fi = disk.info(at, Follow::no);
    if (fi.type == FileType::symlink)
      return changed + "now " + (at == fs::path(pin.path) ? "" : at.string() + " is ") + "a symlink to " + disk.read_link(at) + ")";
    if (!fi.exists()) return changed + at.string() + " is gone)";
    if (fi.type != FileType::directory) return changed + at.string() + " is no longer a directory)";
  }
  if (fi.dev != pin.dev || fi.ino != pin.ino)
    return changed + "another directory now stands at " + pin.path + ": inode " + std::to_string(fi.ino) + ", recorded " +
           std::to_string(pin.ino) + ")";
  // Below it, directories the build may replace: any inode, never a symlink.
  fs::path below = pin.below, here = pin.path;
  for (auto it = below.begin(); !pin.below.empty() && std::next(it) != below.end(); ++it) {
    here /= *it;
    FileInfo bi = disk.info(here, Follow::no);
    if (bi.type == FileType::symlink) return changed + "now " + here.string() + " is a symlink to " + disk.read_link(here) + ")";
    if (bi.type != FileType::directory) break;  // not there (yet): nothing below it to redirect
  }
  return "";
}

fs::path pinned_path(Disk& disk, const std::string& path, const std::optional<PinnedDir>& parent) {
  if (!parent) return path;
  std::string why = why_redirected(disk, *parent);
  if (!why.empty()) throw Error(why);
  return fs::path(parent->path) / (parent->below.empty() ? fs::path(path).filename() : fs::path(parent->below));
}

}  // namespace overlay
