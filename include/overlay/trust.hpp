#pragma once
// Whose overlay is it: a manifest says which files to overwrite with which bytes, so acting on
// one that another user could write lets that user choose what we write where (root restoring
// onto /etc/shadow). Compare git's safe.directory.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

// Why `overlay` must not be acted on without being told to trust it, or "" when it may be: its
// directory, its manifest, its backup directory and every entry directory in it must each be
// owned by this process's user or root and writable by no one else. A missing overlay is "".
std::string why_untrusted(DiskReader& disk, const fs::path& overlay);

// Why gc-stale leaves `overlay` alone whoever owns it, or "" when it may act on it: another user
// could swap a directory on the way to it, so that the manifest and backups judged are not the
// ones then read and restored from. Nobody can when every directory from "/" to the overlay's
// parent is a real directory (no symlink), owned by root or us, and writable by no one else — or
// sticky, where others cannot rename what is not theirs (the next directory down must then be ours
// or root's, which its own check asks). Then each path below stays the one checked for as long as
// we act on it (ssh's StrictModes rule).
std::string swappable_ancestor(DiskReader& disk, const fs::path& overlay);

// Whether `overlay` is, or lies under, one of the roots in $OVERLAY_TRUSTED_ROOTS (absolute paths,
// separated by ':'), which the caller trusts whoever owns what is below them.
bool under_trusted_root(const fs::path& overlay);

// Before a change is recorded in `overlay`: refused (Error naming why, in revert's words) where
// revert would refuse to undo it, unless the caller trusts it (trust_owner, or a root of
// $OVERLAY_TRUSTED_ROOTS); a warning where gc-stale would leave it alone (only revert undoes it).
// Never accepting what cannot be undone: a world-writable overlay directory (a tmpfs root is 1777)
// was taken, and then neither revert nor gc-stale would act on it.
void refuse_unrevertable(Disk& disk, const fs::path& overlay, bool trust_owner);

}  // namespace overlay
