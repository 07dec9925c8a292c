#pragma once
// Directory snapshots as tar archives (libarchive), readable by Python's tarfile.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

// Writes a tar of dir to tar_path (a new file), fsynced. Members are "<name of dir>" and
// "<name of dir>/<relative path>", as overlay_setup.py's `tarfile.add(dir, arcname=basename(dir))`
// writes them, so that tool's revert (which extracts into dirname(dir)) puts dir back. Keeps types, permission
// bits, mtimes, empty directories and symlink targets (never followed). Special files are
// refused. Returns the SHA-256 of the tar file.
// The tree is read one directory descriptor at a time (O_NOFOLLOW), so a directory of it swapped
// for a symlink while it is read fails the snapshot instead of archiving what the link points at.
std::string snapshot_dir_to_tar(Disk& disk, const At& dir, const fs::path& tar_path);

// Reads the whole tar once, checking every member name and (when expected_sha256 is not empty)
// the SHA-256 of the file; throws Error naming the first problem. Nothing is written.
void check_tar(Disk& disk, const fs::path& tar_path, const std::string& expected_sha256);

// Extracts the snapshot of a directory named `top_name` into dest, an existing empty directory
// (usually a temporary sibling with another name). Refuses (before writing the member)
// absolute names, "..", any path through a symlink, hard links to anything but an extracted
// regular file, and special files. Accepts both "./x" members (this tool's earlier layout) and
// members under a single top directory called `top_name` (overlay_setup.py's layout, and this
// tool's now; told by the first member), whose own member gives dest its mode and mtime.
// When expected_sha256 is not empty, the tar is hashed as it is read, in the same single pass,
// and a mismatch throws once it has been read: dest may then hold members of a corrupt tar, so
// it must be a directory nothing uses until this returns (the caller swaps it in only then).
// Files are not fsynced one by one: the caller makes the whole tree durable (sync_filesystem).
// Every member is made through a descriptor of the directory it goes in, reached from dest's
// without following anything: no swap on dest's path redirects the extraction.
void extract_tar(Disk& disk, const fs::path& tar_path, const At& dest, const std::string& top_name,
                 const std::string& expected_sha256);

}  // namespace overlay
