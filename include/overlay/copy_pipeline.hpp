#pragma once
// The copy/hash pipeline: every byte read once, hashed and (optionally) written, reading,
// hashing and writing on their own threads for large files; small files in one buffer.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

enum class Durable { no, yes };

// How a copy's bytes got there: through this process, by the kernel, or as a clone sharing the
// source's blocks (so the source, not the copy, holds the pages just read to hash it).
enum class CopyWay { streamed, kernel, cloned };

struct Copied {
  std::string sha256;  // hex, of the bytes the copy holds
  CopyWay way = CopyWay::streamed;
};

// Copies src to a new file dest (which must not exist) with `mode` and returns the SHA-256 of the
// bytes dest holds, and how they got there. A large file is cloned where the filesystem shares blocks (FICLONE:
// XFS with reflink, btrfs), else copied by the kernel (copy_file_range) while this process hashes
// the source, else streamed through here (read once, hashed and written); the source's hash is
// used only if it provably did not change meanwhile. With Durable::yes, dest is fsynced.
Copied copy_file_hashing(Disk& disk, const At& src, const At& dest, mode_t mode, Durable durable);

// SHA-256 (hex) of a file's contents, streamed.
std::string hash_file(DiskReader& disk, const At& p);

}  // namespace overlay
