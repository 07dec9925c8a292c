#include "overlay/pinned.hpp"

#include <iterator>

#include "overlay/error.hpp"

namespace overlay {

namespace {

// The directory holding `p` as it is now: its real path (symlinks resolved, once) and identity.
// Nothing when that directory does not exist.
std::optional<PinnedDir> pin_parent(Disk& disk, const fs::path& p) {
  fs::path parent = p.parent_path();
  FileInfo fi = disk.info(parent, Follow::yes);
  if (fi.type != FileType::directory) return std::nullopt;
  return PinnedDir{disk.real_path(parent).string(), static_cast<std::uint64_t>(fi.dev),
                   static_cast<std::uint64_t>(fi.ino)};
}

}  // namespace

std::optional<PinnedDir> pin_below(Disk& disk, const fs::path& dir, const fs::path& p) {
  auto pin = pin_parent(disk, dir);
  if (pin) pin->below = (dir.filename() / p.lexically_relative(dir)).string();
  return pin;
}

namespace {

// Where symlink `p` leads; it may be swapped back already (a directory flipped in a loop).
std::string link_target(DiskReader& disk, const fs::path& p) {
  try {
    return disk.read_link(p);
  } catch (const DiskError&) {
    return "(no longer readable)";
  }
}

fs::path place_of(const std::string& path, const PinnedDir& pin) {
  return fs::path(pin.path) / (pin.below.empty() ? fs::path(path).filename() : fs::path(pin.below));
}

}  // namespace

std::string why_redirected(DiskReader& disk, const PinnedDir& pin) {
  const std::string changed = "its directory changed since add-native (";
  fs::path at;
  FileInfo fi;
  // Component by component, following nothing: a symlink anywhere on the way is a redirection.
  for (const auto& part : fs::path(pin.path)) {
    at /= part;
    fi = disk.info(at, Follow::no);
    if (fi.type == FileType::symlink)
      return changed + "now " + (at == fs::path(pin.path) ? "" : at.string() + " is ") + "a symlink to " +
             link_target(disk, at) + ")";
    if (!fi.exists()) return changed + at.string() + " is gone)";
    if (fi.type != FileType::directory) return changed + at.string() + " is no longer a directory)";
  }
  if (fi.dev != pin.dev || fi.ino != pin.ino)
    return changed + "another directory now stands at " + pin.path + ": inode " + std::to_string(fi.ino) +
           ", recorded " + std::to_string(pin.ino) + ")";
  // Below it, directories the build may replace: any inode, never a symlink.
  fs::path below = pin.below, here = pin.path;
  for (auto it = below.begin(); !pin.below.empty() && std::next(it) != below.end(); ++it) {
    here /= *it;
    FileInfo bi = disk.info(here, Follow::no);
    if (bi.type == FileType::symlink)
      return changed + "now " + here.string() + " is a symlink to " + link_target(disk, here) + ")";
    if (bi.type != FileType::directory) break;  // not there (yet): nothing below it to redirect
  }
  return "";
}

fs::path pinned_path(DiskReader& disk, const std::string& path, const std::optional<PinnedDir>& parent) {
  if (!parent) return path;
  std::string why = why_redirected(disk, *parent);
  if (!why.empty()) throw Error(why);
  return place_of(path, *parent);
}

PinnedPlace open_pinned(Disk& disk, const std::string& path, const std::optional<PinnedDir>& parent) {
  PinnedPlace place;
  if (!parent) {
    place.path = path;
    return place;
  }
  // One check that is also the hold: the open itself refuses a symlink on the way (a check by
  // path first would only add a moment a flipping directory could be caught in).
  place.path = place_of(path, *parent);
  auto refused = [&](const std::string& how) {
    std::string why = why_redirected(disk, *parent);
    return Error(!why.empty() ? why : "its directory changed since add-native (" + how + ")");
  };
  try {
    place.dir = disk.open_dir(fs::path(parent->path));
  } catch (const DiskError& e) {
    throw refused(std::string("it cannot be opened without following a symlink: ") + e.what());
  }
  if (place.dir->dev() != parent->dev || place.dir->ino() != parent->ino)
    throw refused("another directory now stands there");
  fs::path below = parent->below;
  for (auto it = below.begin(); !parent->below.empty() && std::next(it) != below.end(); ++it) {
    At next(*place.dir, it->string());
    disk.make_dir(next, 0755);
    try {
      place.dir = disk.open_dir(next);
    } catch (const DiskError& e) {
      throw refused(std::string("below it: ") + e.what());
    }
  }
  return place;
}

}  // namespace overlay
