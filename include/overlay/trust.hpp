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
std::string why_untrusted(Disk& disk, const fs::path& overlay);

// Whether `overlay` is, or lies under, one of the roots in $OVERLAY_TRUSTED_ROOTS (absolute paths,
// separated by ':'), which the caller trusts whoever owns what is below them.
bool under_trusted_root(const fs::path& overlay);

}  // namespace overlay
