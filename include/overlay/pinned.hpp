#pragma once
// Restores that cannot be redirected (issue 24). add-native pins the directory of every path it
// tracks (PinnedDir: its real path and identity, manifest.hpp); revert, gc-stale, verify-native
// and status act on a tracked path only under that very directory, and refuse the item —
// naming what changed — when a component of it has become a symlink or another directory
// stands there. Whoever can swap one directory on the path cannot choose where a restore writes.
#include <optional>
#include <string>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

// (add-native pins the directory of a plain tracked path through the descriptor it holds open,
// native_apply.cpp's HeldDirs.) For `p` inside directory `dir`, which the entry expects to be replaced (a cache dir):
// the pin of `dir`'s parent, with p's path below it.
std::optional<PinnedDir> pin_below(Disk& disk, const fs::path& dir, const fs::path& p);

// Why the pinned directory no longer stands where it was pinned — "its directory changed since
// add-native (now a symlink to /x)", "(… is gone)", "(another directory stands at …)" — or ""
// when every component of its path is still a real directory and the last one the same inode,
// and no directory of `below` on the way to the item has become a symlink.
std::string why_redirected(DiskReader& disk, const PinnedDir& pin);

// Where the item at `path` lives now: under its pinned directory (a path that went through a
// symlink at add-native is followed as it was resolved then, never again), or `path` itself when
// nothing was pinned (manifests of overlay_setup.py and of earlier versions). Throws Error with
// why_redirected's reason when the pinned directory no longer stands.
fs::path pinned_path(DiskReader& disk, const std::string& path, const std::optional<PinnedDir>& parent);

// A tracked item's place for a write that nothing can redirect: its pinned directory opened
// without following any symlink (Disk::open_dir) and proven to be the inode add-native saw, so
// what is done through at() lands in that directory even if its path is swapped a moment later.
// Directories of `below` are opened one name at a time (never through a symlink), created when
// missing. Without a pin (older manifests): the path as it is. Throws Error with
// why_redirected's reason when the directory no longer stands.
struct PinnedPlace {
  std::unique_ptr<DirHandle> dir;
  fs::path path;  // where it is, for messages
  At at() const { return dir != nullptr ? At(*dir, path.filename().string()) : At(path); }
};
PinnedPlace open_pinned(Disk& disk, const std::string& path, const std::optional<PinnedDir>& parent);

}  // namespace overlay
